"""Shape, layout, slicing, padding and creation ops against eager torch: static, dynamic at a
second shape, symbolic sizes, dtypes, opset-dependent paths."""

from __future__ import annotations

import math

import pytest
import torch

from tests.op_check import check_op, dynamic, static_and_dynamic, tensor_maker
from torch_onnx_conformance.exporter.ops import _shape

r = tensor_maker()

torch.manual_seed(0)  # the cases below draw their inputs at import time
F = torch.nn.functional


# (id, fn, first inputs, inputs at another shape); each runs static and dynamic.
CASES = [
    # reshapes with sizes read from symbolic dims
    ("reshape_sym", lambda x: x.reshape(x.shape[0], -1), (r(3, 4, 5),), (r(5, 2, 3),)),
    (
        "view_sym_product",
        lambda x: x.view(x.shape[0] * x.shape[1], x.shape[2]),
        (r(3, 4, 5),),
        (r(2, 6, 3),),
    ),
    ("view_floordiv", lambda x: x.reshape(x.shape[0] // 2, 2, x.shape[1]), (r(4, 3),), (r(6, 5),)),
    ("view_as", lambda x, y: x.view_as(y), (r(3, 4), r(4, 3)), None),
    ("flatten", lambda x: x.flatten(1), (r(2, 3, 4),), (r(3, 2, 5),)),
    ("flatten_0d", lambda x: x.flatten(), (torch.tensor(3.0),), None),
    ("unflatten", lambda x: x.unflatten(1, (2, -1)), (r(3, 8),), (r(5, 6),)),
    ("reshape_zero", lambda x: x.reshape(0, 4), (r(0, 2, 2),), None),
    (
        "reshape_int64",
        lambda x: x.reshape(-1),
        (r(3, 4, dtype=torch.int64),),
        (r(2, 2, dtype=torch.int64),),
    ),
    # permutations
    ("permute", lambda x: x.permute(2, 0, 1), (r(2, 3, 4),), (r(3, 4, 5),)),
    ("transpose_neg", lambda x: x.transpose(-1, 0), (r(2, 3, 4),), (r(3, 2, 2),)),
    ("t_1d", lambda x: x.t(), (r(5),), None),
    ("mT", lambda x: x.mT, (r(2, 3, 4),), (r(3, 4, 2),)),
    ("movedim_list", lambda x: torch.movedim(x, (0, 1), (2, 0)), (r(2, 3, 4),), (r(3, 4, 5),)),
    ("swapaxes", lambda x: x.swapaxes(0, 2), (r(2, 3, 4),), (r(4, 3, 2),)),
    # broadcasting
    ("expand_minus1", lambda x: x.expand(4, -1, -1), (r(1, 3, 5),), (r(1, 2, 6),)),
    (
        "expand_sym",
        lambda x, y: x.expand(y.shape[0], x.shape[1]),
        (r(1, 3), r(4, 2)),
        (r(1, 5), r(6, 2)),
    ),
    ("expand_as", lambda x, y: x.expand_as(y), (r(3, 1), r(3, 4)), (r(5, 1), r(5, 2))),
    (
        "broadcast_tensors",
        lambda x, y: torch.broadcast_tensors(x, y),
        (r(3, 1), r(1, 4)),
        (r(5, 1), r(1, 2)),
    ),
    ("meshgrid_xy", lambda x, y: torch.meshgrid(x, y, indexing="xy"), (r(3), r(4)), (r(5), r(2))),
    # (un)squeeze
    ("squeeze_all", lambda x: x.squeeze(), (r(1, 3, 1, 4),), (r(1, 5, 1, 2),)),
    ("squeeze_dims", lambda x: x.squeeze((0, 2)), (r(1, 3, 1, 4),), (r(1, 5, 1, 2),)),
    ("squeeze_not_one", lambda x: x.squeeze(1), (r(2, 3),), None),
    ("unsqueeze_neg", lambda x: x.unsqueeze(-1), (r(2, 3),), (r(4, 5),)),
    # joining
    (
        "cat_mixed_dtypes",
        lambda x, y: torch.cat([x, y], 1),
        (r(2, 3), r(2, 2, dtype=torch.int32)),
        (r(3, 4), r(3, 2, dtype=torch.int32)),
    ),
    ("cat_legacy_empty", lambda x, y: torch.cat([x, y]), (r(0), r(2, 3)), None),
    ("stack_neg", lambda x, y: torch.stack([x, y], -1), (r(2, 3), r(2, 3)), (r(4, 2), r(4, 2))),
    ("hstack_1d", lambda x, y: torch.hstack([x, y]), (r(3), r(4)), None),
    ("vstack", lambda x, y: torch.vstack([x, y]), (r(3), r(3)), None),
    ("dstack", lambda x, y: torch.dstack([x, y]), (r(2, 3), r(2, 3)), None),
    ("column_stack", lambda x, y: torch.column_stack([x, y]), (r(3), r(3, 2)), None),
    # splitting
    ("split_tensor", lambda x: x.split(2, 1), (r(3, 5),), None),
    ("split_sizes", lambda x: x.split([1, 3], 0), (r(4, 2),), None),
    ("chunk_sym", lambda x: x.chunk(2, 1), (r(3, 6),), (r(2, 8),)),
    ("tensor_split", lambda x: torch.tensor_split(x, 3, 1), (r(2, 7),), None),
    ("tensor_split_idx", lambda x: torch.tensor_split(x, [1, 4], 0), (r(6, 2),), (r(8, 3),)),
    ("unbind", lambda x: x.unbind(1), (r(2, 3),), None),
    # slicing
    ("slice_neg_huge", lambda x: x[:, -3 : 10**12], (r(2, 5),), (r(3, 7),)),
    ("slice_step", lambda x: x[1::2, ::3], (r(5, 7),), (r(6, 8),)),
    ("slice_sym_end", lambda x: x[:, : x.shape[1] - 1], (r(2, 5),), (r(3, 7),)),
    ("slice_sym_start", lambda x: x[x.shape[0] // 2 :], (r(4, 3),), (r(6, 2),)),
    ("narrow_neg", lambda x: x.narrow(1, -3, 2), (r(2, 5),), (r(3, 4),)),
    ("select_sym", lambda x: x[:, x.shape[1] - 1], (r(2, 5),), (r(3, 4),)),
    ("select_neg", lambda x: x.select(0, -1), (r(3, 4),), (r(2, 6),)),
    (
        "slice_scatter_step",
        lambda x, y: torch.slice_scatter(x, y, 1, 0, 6, 2),
        (r(3, 6), r(3, 3)),
        None,
    ),
    (
        "slice_scatter_sym",
        lambda x, y: torch.slice_scatter(x, y, 0, 1, 1 + y.shape[0]),
        (r(5, 3), r(2, 3)),
        (r(7, 4), r(3, 4)),
    ),
    (
        "slice_scatter_neg_bounds",
        lambda x, y: torch.slice_scatter(x, y, 1, -3, -1),
        (r(2, 5), r(2, 2)),
        (r(3, 7), r(3, 2)),
    ),
    (
        "slice_scatter_mixed_signs",
        lambda x, y: torch.slice_scatter(x, y, 1, 1, -1),
        (r(2, 5), r(2, 3)),
        None,
    ),
    (
        "select_scatter",
        lambda x, y: torch.select_scatter(x, y, 1, -1),
        (r(3, 4), r(3)),
        (r(2, 5), r(2)),
    ),
    ("diagonal_offset", lambda x: x.diagonal(1, 0, 2), (r(3, 2, 4),), (r(4, 3, 5),)),
    ("diagonal_neg_offset", lambda x: x.diagonal(-2), (r(5, 3),), (r(6, 4),)),
    ("diagonal_scatter", lambda x, y: torch.diagonal_scatter(x, y, -1), (r(4, 3), r(3)), None),
    ("diag_embed", lambda x: torch.diag_embed(x, 1, 0, 2), (r(2, 3),), (r(3, 4),)),
    ("diag_1d_neg", lambda x: torch.diag(x, -2), (r(3),), (r(5),)),
    ("diag_2d", lambda x: torch.diag(x, 1), (r(3, 4),), (r(5, 5),)),
    # rearrangements
    ("flip", lambda x: x.flip(0, -1), (r(2, 3, 4),), (r(3, 2, 5),)),
    ("roll_dims", lambda x: x.roll((1, -3), (0, 1)), (r(3, 4),), (r(5, 6),)),
    ("roll_flat", lambda x: x.roll(2), (r(3, 4),), (r(2, 5),)),
    ("rot90", lambda x: torch.rot90(x, 1, (0, 1)), (r(2, 3),), (r(4, 5),)),
    ("repeat", lambda x: x.repeat(2, 1, 3), (r(3, 2),), (r(4, 5),)),
    ("tile_short", lambda x: x.tile((2,)), (r(2, 3),), (r(3, 4),)),
    ("repeat_interleave_int", lambda x: x.repeat_interleave(3, 1), (r(2, 3),), (r(3, 2),)),
    ("repeat_interleave_flat", lambda x: x.repeat_interleave(2), (r(2, 3),), None),
    (
        "repeat_interleave_tensor",
        lambda x, n: x.repeat_interleave(n, 0),
        (r(3, 2), torch.tensor([2, 0, 3])),
        None,
    ),
    ("tril", lambda x: x.tril(-1), (r(3, 4),), (r(5, 2),)),
    (
        "triu_batched_int8",
        lambda x: x.triu(1),
        (r(2, 3, 3, dtype=torch.int8),),
        (r(3, 4, 2, dtype=torch.int8),),
    ),
    ("triu_bool", lambda x: x.triu(), (r(3, 3, dtype=torch.bool),), None),
    # In-place overloads reach the functional translation with their own target on the node.
    ("triu_inplace", lambda x: x.clone().triu_(1), (r(4, 4),), (r(5, 3),)),
    ("tril_inplace", lambda x: x.clone().tril_(), (r(4, 4),), (r(5, 3),)),
    ("unfold", lambda x: x.unfold(1, 3, 2), (r(2, 7, 3),), (r(3, 9, 2),)),
    ("unfold_last", lambda x: x.unfold(-1, 2, 1), (r(2, 4),), (r(3, 5),)),
    ("as_strided", lambda x: x.as_strided((2, 2), (1, 2), 1), (r(3, 3),), None),
    ("as_strided_transposed", lambda x: x.t().as_strided((3, 2), (2, 1)), (r(2, 3),), None),
]


modes = static_and_dynamic


def run_case(fn, args, second):
    if second is None:
        check_op(fn, args)
    else:
        check_op(fn, args, dynamic_shapes=dynamic(*args), second_args=second)


@pytest.mark.parametrize(("fn", "args", "second"), modes(CASES))
def test_shape_ops(fn, args, second):
    run_case(fn, args, second)


# ------------------------------------------------------------------------------ padding
PAD_CASES = [
    ("constant", lambda x: F.pad(x, (1, 2, 0, 1), value=1.5), r(2, 3, 4)),
    ("constant_negative", lambda x: F.pad(x, (-1, 2, 1, -2)), r(2, 4, 5)),
    ("reflect", lambda x: F.pad(x, (2, 1, 1, 1), mode="reflect"), r(1, 2, 4, 4)),
    ("reflect_1d", lambda x: F.pad(x, (3, 1), mode="reflect"), r(2, 3, 5)),
    ("replicate_3d", lambda x: F.pad(x, (1, 0, 2, 1, 1, 1), mode="replicate"), r(1, 2, 2, 3, 3)),
    ("replicate_negative", lambda x: F.pad(x, (-4, 5, 0, 0), mode="replicate"), r(2, 3, 4, 4)),
    ("circular", lambda x: F.pad(x, (1, 2, 2, 0), mode="circular"), r(1, 2, 3, 4)),
    ("circular_crop", lambda x: F.pad(x, (-1, 2, 1, -1), mode="circular"), r(1, 2, 3, 4)),
    ("int16", lambda x: F.pad(x, (1, 1), value=7), r(2, 3, dtype=torch.int16)),
    ("bool", lambda x: F.pad(x, (0, 2)), r(2, 3, dtype=torch.bool)),
]


@pytest.mark.parametrize("opset", [17, 20, 23])
@pytest.mark.parametrize(("fn", "x"), [c[1:] for c in PAD_CASES], ids=[c[0] for c in PAD_CASES])
def test_pad(fn, x, opset):
    check_op(fn, (x,), opset=opset)


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
def test_pad_dynamic(mode):
    fn = lambda x: F.pad(x, (1, 2, 2, 1), mode=mode)  # noqa: E731
    check_op(
        fn, (r(2, 3, 4, 5),), dynamic_shapes=dynamic(r(2, 3, 4, 5)), second_args=(r(3, 2, 6, 7),)
    )


# ----------------------------------------------------------------------------- creation
CREATION_CASES = [
    ("zeros_sym", lambda x: torch.zeros(x.shape[0], 3, x.shape[1]), (r(2, 4),), (r(3, 5),)),
    ("new_zeros_sym", lambda x: x.new_zeros(x.shape), (r(2, 4),), (r(3, 5),)),
    (
        "new_ones_int",
        lambda x: x.new_ones((x.shape[1], 2), dtype=torch.int32),
        (r(2, 4),),
        (r(3, 5),),
    ),
    ("full_sym", lambda x: torch.full((x.shape[0], 2), 2.5) + x[:, :1], (r(3, 4),), (r(5, 2),)),
    (
        "new_full_bool",
        lambda x: x.new_full((2, x.shape[0]), True, dtype=torch.bool),
        (r(3, 4),),
        (r(5, 2),),
    ),
    (
        "arange_sym_end",
        lambda x: torch.arange(x.shape[0]) + x.sum(1).long(),
        (r(3, 4),),
        (r(5, 2),),
    ),
    ("arange_float", lambda x: torch.arange(0.5, x.shape[0], 0.25), (r(3, 2),), (r(5, 2),)),
    ("arange_start_step", lambda x: torch.arange(-3, x.shape[0] * 2, 3), (r(3, 2),), (r(7, 2),)),
    ("arange_neg_step_float", lambda x: x + torch.arange(2.0, -1.0, -0.5), (r(6),), None),
    ("linspace", lambda x: x + torch.linspace(-2, 3, 7), (r(7),), None),
    (
        "linspace_int",
        lambda x: x + torch.linspace(0, 10, 7, dtype=torch.int64),
        (r(7, dtype=torch.int64),),
        None,
    ),
    ("linspace_one_step", lambda x: x + torch.linspace(4, 9, 1), (r(1),), None),
    ("logspace", lambda x: x * torch.logspace(-1, 2, 5, base=2.0), (r(5),), None),
    ("eye_sym", lambda x: torch.eye(x.shape[0], x.shape[1]) * x, (r(3, 4),), (r(5, 2),)),
    ("tril_indices", lambda x: x[tuple(torch.tril_indices(3, 4, 1))], (r(3, 4),), None),
    ("triu_indices", lambda x: torch.triu_indices(4, 3, -1) + x.long(), (r(1),), None),
    ("empty_shape", lambda x: torch.empty(x.shape[0], 2).shape[0] * x, (r(3),), (r(5),)),
]


@pytest.mark.parametrize(("fn", "args", "second"), modes(CREATION_CASES))
def test_creation_ops(fn, args, second):
    run_case(fn, args, second)


def test_empty_like_values_are_only_shaped():
    # Uninitialised memory has no defined value: only shape and dtype are the contract.
    check_op(
        lambda x: torch.empty(x.shape[0], 3, dtype=torch.int32),
        (r(4, 2),),
        dynamic_shapes=dynamic(r(4, 2)),
        second_args=(r(6, 2),),
        compare_values=False,
    )


# ---------------------------------------------------------------------- symbolic sizes
def test_symbolic_size_arithmetic():
    def fn(x):
        rows, cols = x.shape
        return x.reshape(rows * cols // 2, 2) + (rows % 3) + (cols - 1) // 2

    check_op(fn, (r(4, 6),), dynamic_shapes=dynamic(r(4, 6)), second_args=(r(6, 5),))


def test_symbolic_min_max_ceil_neg():
    def fn(x):
        rows, cols = x.shape
        ceil_half = math.ceil(rows / 2)  # truediv gives a SymFloat, ceil brings it back
        return (
            x.new_zeros(max(rows, cols), min(rows, cols)),
            torch.arange(ceil_half),
            (x.new_ones(-(-cols // 3))),
        )

    check_op(fn, (r(3, 5),), dynamic_shapes=dynamic(r(3, 5)), second_args=(r(6, 4),))


def test_static_reshape_bakes_no_shape_computation():
    program = check_op(lambda x: x.reshape(2, -1).flatten(), (r(2, 3, 4),))
    op_types = {n.op_type for n in program.model.graph}
    assert not op_types & {"Shape", "Concat", "Gather"}, op_types


def test_dynamic_reshape_reads_input_dims():
    program = check_op(
        lambda x: x.reshape(x.shape[0], -1),
        (r(3, 4, 5),),
        dynamic_shapes=dynamic(r(3, 4, 5)),
        second_args=(r(2, 6, 2),),
    )
    reshape = next(n for n in program.model.graph if n.op_type == "Reshape")
    assert reshape.inputs[1].producer().op_type in ("Shape", "Concat")


def test_as_strided_before_view_start_is_a_clear_error():
    from torch_onnx_conformance import exporter

    base = torch.randn(10)

    class M(torch.nn.Module):
        def forward(self, x):
            return torch.as_strided(x, (2,), (1,), 0)

    with pytest.raises(exporter.OnnxExporterError, match="as_strided reads storage before"):
        exporter.export(M().eval(), (base[4:],))


def test_axis_helper_rejects_out_of_range():
    with pytest.raises(IndexError, match="out of range"):
        _shape.axis(3, 2)
    assert _shape.axis(-1, 0) == 0
