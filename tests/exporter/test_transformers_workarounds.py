"""transformers' ONNX exporter carries workarounds for torch.onnx; does ours need each one?

transformers 5.23 (``transformers/exporters/exporter_onnx.py``) patches torch functions before
tracing, hooks a private torch.onnx step to rewrite the FX graph, overrides torchlib translations
and edits the ONNX IR afterwards. Each case below is the model pattern one of those workarounds
exists for, exported by ours with no workaround and checked against eager. A pattern ours cannot
export yet is an xfail with the reason, so it shows in the run instead of passing silently.
torch_onnx_conformance/conformance/MODELS.md ("transformers' torch.onnx workarounds") maps every workaround to its case.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import onnx_ir
import pytest
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers torch.ops.quantized_decomposed)

from tests.op_check import DYN, check_op, dims, dynamic, tensor_maker

r = tensor_maker(seed_stride=7)


class Case(NamedTuple):
    name: str
    fn: Any
    args: tuple
    # a second input set exported dynamic and checked there too; None means static only
    second: tuple | None = None
    # dynamic_shapes for the dynamic export; None means every dim >= 2 of every input
    shapes: Any = None
    options: dict | None = None
    # why ours fails the case: in both shape modes, or only in the dynamic one
    xfail: str | None = None
    xfail_dynamic: str | None = None


def _complex(x: torch.Tensor) -> torch.Tensor:
    return torch.view_as_complex(x)


def _where_scalar(c, x):
    return torch.where(c, x, 0.5)


def _where_mixed(c, x, y):
    return torch.where(c, x, y)


def _unsqueeze_complex(x):
    return torch.view_as_real(_complex(x).unsqueeze(1))


def _exp_complex(x):
    return torch.view_as_real(torch.exp(_complex(x)))


def _irfft(x):
    return torch.fft.irfft(_complex(x), dim=-1)


def _sdpa_masked_rows(q, k, v, mask):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _split_symbolic(x):
    first, *rest = x.split(x.shape[1] // 2, dim=1)
    return first * 2, rest[0]


def _chunk_dynamic(x):
    a, b = x.chunk(2, dim=-1)
    return a - b


def _randperm_invariant(x):
    # a permutation changes nothing a sum over it sees, so eager and onnxruntime agree
    return x[torch.randperm(x.shape[0])].sum(0)


def _index_put_every_dim(x, rows, cols):
    y = x.clone()
    y[rows, cols] = 3.0
    return y


def _full_int(x):
    return torch.full((x.shape[0], 3), 7)


def _masked_mean(x, m):
    return torch.masked.mean(x, mask=m, dim=1)


def _masked_var(x, m):
    return torch.masked.var(x, mask=m, dim=1)


def _masked_scatter(x, m, src):
    return x.masked_scatter(m, src)


def _roll_then_write(x):
    y = torch.roll(x, shifts=1, dims=-1)
    y[..., 0] = -1.0
    return y


def _fresh_constant_written(x):
    buf = torch.tensor([0.0, 0.0, 0.0, 0.0])
    buf[1] = 5.0
    return x + buf


def _slice_implicit_start(x):
    return x[..., : x.shape[-1] - 1]


def _index_put_last_dim(x, idx):
    y = x.clone()
    y[..., idx] = torch.finfo(x.dtype).min
    return y


def _index_put_inplace(x, idx, v):
    y = x.clone()
    y[idx] = v
    return y


def _fill_diagonal_inplace(x):
    y = x.clone()
    y.fill_diagonal_(0.0)
    return y


def _triu_inplace(x):
    y = x.clone()
    y.triu_(1)
    return y


def _sort_stable(x):
    return torch.sort(x, dim=-1, stable=True)


def _rsub_int_mask(m):
    return 1.0 - m


def _mul_int_mask(m):
    return m * 2.0


def _mul_symbolic_float(x):
    return x * (x.shape[-1] ** -0.5)


def _remainder_symbolic(x):
    return torch.arange(x.shape[1]) % x.shape[0] + x


def _bool_mask_put_scalar(x, m):
    y = x.clone()
    y[~m] = 0.0
    return y


def _bool_mask_put_rows(emb, m, feats):
    y = emb.clone()
    y[m] = feats
    return y


def _bool_mask_put_accumulate(x, m, v):
    return x.index_put((m,), v, accumulate=True)


def _bincount(x):
    return torch.bincount(x, minlength=6)


def _grouped_mm(a, b, offs):
    # torch's meta kernel takes bfloat16 only; float32 at the boundary for onnxruntime's numpy feeds
    return torch._grouped_mm(a.to(torch.bfloat16), b.to(torch.bfloat16), offs).float()


def _repeat_interleave_flat(x):
    return x.repeat_interleave(2)


def _repeat_interleave_symbolic(x):
    return x.repeat_interleave(x.shape[0], dim=0)


def _ceil_div_shape(x):
    return x.new_zeros(-(-x.shape[0] // 4), 2)


def _masked_fill_bool_true(b, m):
    return b.masked_fill(m, True)


def _masked_fill_bool_false(b, m):
    return b.masked_fill(m, False)


def _dequantize_per_channel(q, scales, zero_points):
    return torch.ops.quantized_decomposed.dequantize_per_channel(
        q, scales, zero_points, 0, -128, 127, torch.int8
    )


def _topk_unsorted(x):
    return torch.topk(x, 3, sorted=False).values.sort(dim=-1).values


def _constant_grid_gather(m):
    batch = torch.arange(m.shape[0])[:, None]
    kv = torch.arange(3)[None, :]
    return m[batch, kv]


_RMS_NORM = torch.nn.RMSNorm(8, elementwise_affine=False)
_BF16_CONV = torch.nn.Conv1d(4, 4, 3, groups=4, padding=2).to(torch.bfloat16)


def _rms_norm_without_affine(x):
    return _RMS_NORM(x)


def _bf16_causal_conv(x):
    # float32 at the boundary only because onnxruntime's Python API takes no numpy bfloat16
    return _BF16_CONV(x.to(torch.bfloat16)).float()


class _ResizedEmbedding(torch.nn.Module):
    """A constant position table resized bicubic, as YOLOS-style vision models do."""

    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(1, 2, 3, 3))

    def forward(self, x):
        return x + torch.nn.functional.interpolate(
            self.table, size=(4, 4), mode="bicubic", align_corners=False
        )


def _sdpa_inputs(length: int) -> tuple:
    mask = torch.ones(1, 1, length, length, dtype=torch.bool).tril()
    mask[..., 0, :] = False  # a query attending to no key
    return (r(1, 2, length, 4), r(1, 2, length, 4, seed=1), r(1, 2, length, 4, seed=2), mask)


def _bool_mask(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed)) > 0.5


_ROW_MASK = torch.tensor([True, False, True, False, False])
_SIDE = torch.export.Dim("side")

CASES = [
    # stage 1: torch functions patched before tracing
    Case(
        "where_scalar_other",
        _where_scalar,
        (_bool_mask(3, 4), r(3, 4)),
        (_bool_mask(5, 6), r(5, 6)),
    ),
    Case(
        "where_mixed_dtypes",
        _where_mixed,
        (_bool_mask(3, 4), r(3, 4), r(3, 4, dtype=torch.float16)),
        (_bool_mask(5, 6), r(5, 6), r(5, 6, dtype=torch.float16)),
    ),
    Case(
        "unsqueeze_complex",
        _unsqueeze_complex,
        (r(3, 4, 2),),
        (r(5, 6, 2),),
        dims({0: DYN, 1: DYN}),
    ),
    Case("sdpa_fully_masked_row", _sdpa_masked_rows, _sdpa_inputs(4), _sdpa_inputs(6)),
    Case(
        "rms_norm_without_affine",
        _rms_norm_without_affine,
        (r(2, 3, 8),),
        (r(4, 5, 8),),
        dims({0: DYN, 1: DYN}),
    ),
    Case("split_symbolic_size", _split_symbolic, (r(2, 8),), (r(3, 12),)),
    Case(
        "randperm",
        _randperm_invariant,
        (r(6, 3),),
        (r(9, 3),),
        dims({0: DYN}),
        options={"atol": 1e-5},
    ),
    Case(
        "index_put_every_dim_indexed",
        _index_put_every_dim,
        (r(4, 5), torch.tensor([0, 2]), torch.tensor([1, 4])),
    ),
    Case(
        "resize_of_constant_optimized",
        _ResizedEmbedding(),
        (r(1, 2, 4, 4),),
        options={"optimize": True},
    ),
    Case(
        "chunk_dynamic_axis",
        _chunk_dynamic,
        (r(3, 8),),
        (r(5, 12),),
        dims({0: DYN, 1: 2 * torch.export.Dim("half")}),
    ),
    Case("exp_complex", _exp_complex, (r(3, 4, 2),), (r(5, 6, 2),), dims({0: DYN, 1: DYN})),
    Case(
        "irfft",
        _irfft,
        (r(2, 5, 2),),
        (r(3, 7, 2),),
        dims({0: DYN, 1: DYN}),
        options={"atol": 1e-4},
    ),
    Case("full_int_fill", _full_int, (r(3, 2),), (r(5, 2),), dims({0: DYN})),
    Case(
        "masked_mean",
        _masked_mean,
        (r(3, 5), _bool_mask(3, 5)),
        (r(4, 7), _bool_mask(4, 7, seed=1)),
    ),
    Case(
        "masked_var", _masked_var, (r(3, 5), _bool_mask(3, 5)), (r(4, 7), _bool_mask(4, 7, seed=1))
    ),
    Case(
        "masked_scatter",
        _masked_scatter,
        (r(3, 4), _bool_mask(3, 4), r(3, 4, seed=1)),
        (r(5, 6), _bool_mask(5, 6), r(5, 6, seed=1)),
    ),
    Case("roll_then_write_last_dim", _roll_then_write, (r(2, 5),), (r(3, 7),)),
    # stage 3: FX graph fixes after run_decompositions
    Case(
        "fresh_constant_written_in_place",
        _fresh_constant_written,
        (r(3, 4),),
        (r(5, 4),),
        dims({0: DYN}),
    ),
    Case("slice_implicit_start", _slice_implicit_start, (r(3, 6),), (r(4, 9),)),
    Case(
        "bf16_conv1d",
        _bf16_causal_conv,
        (r(1, 4, 8),),
        (r(2, 4, 11),),
        dims({0: DYN, 2: DYN}),
        options={"rtol": 2e-2, "atol": 2e-2},
    ),
    Case(
        "index_put_last_dim",
        _index_put_last_dim,
        (r(2, 3, 6), torch.tensor([1, 4])),
        (r(3, 4, 8), torch.tensor([1, 4])),
        dims({0: DYN, 1: DYN, 2: DYN}, None),
    ),
    Case(
        "index_put_inplace",
        _index_put_inplace,
        (r(5, 3), torch.tensor([0, 3]), r(2, 3, seed=1)),
        (r(7, 3), torch.tensor([0, 3]), r(2, 3, seed=1)),
        dims({0: DYN}, None, None),
    ),
    Case(
        "fill_diagonal_inplace",
        _fill_diagonal_inplace,
        (r(4, 4),),
        (r(6, 6),),
        # fill_diagonal_ guards rows <= cols, so a square matrix takes one dim for both
        dims({0: _SIDE, 1: _SIDE}),
        xfail_dynamic="torch.export specialises both dims of fill_diagonal_ (its kernel guards on the "
        "sizes); ours applies torch's suggested fix with a warning, so the model is static",
    ),
    Case("triu_inplace", _triu_inplace, (r(4, 5),), (r(6, 3),)),
    Case(
        "sort_stable_with_ties",
        _sort_stable,
        (r(3, 8, dtype=torch.int64, low=0, high=3),),
        (r(4, 11, dtype=torch.int64, low=0, high=3),),
    ),
    Case(
        "rsub_float_from_int_mask",
        _rsub_int_mask,
        (r(2, 5, dtype=torch.int64, low=0, high=2),),
        (r(3, 7, dtype=torch.int64, low=0, high=2),),
    ),
    Case(
        "mul_int_mask_by_float",
        _mul_int_mask,
        (r(2, 5, dtype=torch.int64, low=0, high=2),),
        (r(3, 7, dtype=torch.int64, low=0, high=2),),
    ),
    Case("mul_by_symbolic_float", _mul_symbolic_float, (r(2, 5),), (r(3, 8),)),
    Case("remainder_by_symbolic_int", _remainder_symbolic, (r(3, 7),), (r(4, 9),)),
    # stage 4: torchlib translations overridden
    Case(
        "bool_mask_put_broadcast_scalar",
        _bool_mask_put_scalar,
        (r(3, 4), _bool_mask(3, 4)),
        (r(5, 6), _bool_mask(5, 6)),
    ),
    Case(
        "bool_mask_put_rows",
        _bool_mask_put_rows,
        (r(5, 3), _ROW_MASK, r(2, 3, seed=1)),
    ),
    Case(
        "bool_mask_put_accumulate",
        _bool_mask_put_accumulate,
        (r(3, 4), _bool_mask(3, 4), torch.tensor(1.5)),
    ),
    Case("bincount", _bincount, (torch.tensor([0, 2, 2, 5, 1, 2]),)),
    Case(
        "grouped_mm",
        _grouped_mm,
        (r(6, 8), r(2, 8, 8, seed=1), torch.tensor([2, 6], dtype=torch.int32)),
        options={"rtol": 2e-2, "atol": 2e-2},
    ),
    Case("repeat_interleave_flat", _repeat_interleave_flat, (r(2, 3),), (r(4, 5),)),
    Case("repeat_interleave_symbolic_repeats", _repeat_interleave_symbolic, (r(3),), (r(5),)),
    Case("floordiv_ceil_idiom", _ceil_div_shape, (r(5, 2),), (r(9, 2),), dims({0: DYN})),
    Case(
        "masked_fill_bool_true",
        _masked_fill_bool_true,
        (_bool_mask(3, 4), _bool_mask(3, 4, seed=1)),
        (_bool_mask(5, 6), _bool_mask(5, 6, seed=1)),
    ),
    Case(
        "masked_fill_bool_false",
        _masked_fill_bool_false,
        (_bool_mask(3, 4), _bool_mask(3, 4, seed=1)),
        (_bool_mask(5, 6), _bool_mask(5, 6, seed=1)),
    ),
    Case(
        "dequantize_per_channel",
        _dequantize_per_channel,
        (
            r(3, 4, dtype=torch.int8, low=-100, high=100),
            torch.tensor([0.5, 0.25, 0.125]),
            torch.tensor([0, 1, -2], dtype=torch.int8),
        ),
    ),
    # stage 5: ONNX IR fixes after export
    Case("topk_unsorted", _topk_unsorted, (r(3, 7),), (r(4, 9),), dims({0: DYN, 1: DYN})),
    Case("constant_grid_gather", _constant_grid_gather, (r(2, 4),)),
]


def _params() -> list:
    params = []
    for case in CASES:
        for shapes in ("static", "dynamic") if case.second is not None else ("static",):
            reason = case.xfail or (case.xfail_dynamic if shapes == "dynamic" else None)
            marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
            params.append(pytest.param(case, shapes, marks=marks, id=f"{case.name}-{shapes}"))
    return params


@pytest.mark.parametrize(("case", "shapes"), _params())
def test_pattern_exports_and_matches_eager(case: Case, shapes: str):
    options = dict(case.options or {})
    if shapes == "dynamic":
        spec = case.shapes if case.shapes is not None else dynamic(*case.args)
        check_op(case.fn, case.args, dynamic_shapes=spec, second_args=case.second, **options)
    else:
        check_op(case.fn, case.args, **options)


def test_topk_is_emitted_sorted():
    """transformers sets TopK's sorted=1 after export because ORT's CUDA provider rejects
    sorted=0; ours emits sorted=1 even for topk(sorted=False), so the graph needs no fix."""
    program = check_op(_topk_unsorted, (r(3, 7),))
    topks = [n for n in program.model.graph if n.op_type == "TopK"]
    assert topks
    assert all(n.attributes.get_int("sorted", 1) == 1 for n in topks)


def test_bf16_convolution_runs_in_float32_below_opset_22():
    """ONNX Conv takes no bfloat16 before opset 22: ours casts around it, as transformers'
    FX fix does by hand."""
    program = check_op(_bf16_causal_conv, (r(1, 4, 8),), opset=20, rtol=2e-2, atol=2e-2)
    conv = next(n for n in program.model.graph if n.op_type == "Conv")
    assert conv.inputs[0].dtype == onnx_ir.DataType.FLOAT
