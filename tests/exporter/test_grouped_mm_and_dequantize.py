"""aten._grouped_mm and quantized_decomposed's dequantize ops: exported and checked against
eager at several shapes, groupings and dtypes, static and with dynamic sizes and offsets."""

from __future__ import annotations

import pytest
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers torch.ops.quantized_decomposed)

from tests.op_check import DYN, check_op, dims, static_and_dynamic, tensor_maker

r = tensor_maker(seed_stride=5)
qd = torch.ops.quantized_decomposed


def _offsets(*ends: int) -> torch.Tensor:
    return torch.tensor(ends, dtype=torch.int32)


def _grouped(dtype: torch.dtype):
    """torch._grouped_mm computing in ``dtype``, float32 at the boundary (numpy, which feeds
    onnxruntime here, has no bfloat16)."""

    def fn(a, b, offs=None):
        return torch._grouped_mm(a.to(dtype), b.to(dtype), offs).float()

    return fn


# (name, a, b, offsets, second set at other sizes and offsets, dynamic dims of a and b)
GROUPED = [
    # rows of a in groups, one (K, N) matrix per group; an empty group in the middle
    (
        "2d_3d",
        r(6, 8),
        r(3, 8, 16, seed=1),
        _offsets(2, 2, 6),
        (r(9, 8), r(3, 8, 16, seed=2), _offsets(4, 7, 9)),
        ({0: DYN}, None, None),
    ),
    # columns of b in groups, one (M, K) matrix per group
    (
        "3d_2d",
        r(2, 5, 8),
        r(8, 32, seed=1),
        _offsets(16, 32),
        (r(2, 7, 8), r(8, 32, seed=2), _offsets(8, 32)),
        ({1: DYN}, None, None),
    ),
    # the contraction axis in groups, giving one (M, N) product per group; the last 8 columns
    # of a (rows of b) belong to no group
    (
        "2d_2d",
        r(4, 24),
        r(24, 16, seed=1),
        _offsets(8, 16),
        (r(6, 24), r(24, 16, seed=2), _offsets(4, 12)),
        ({0: DYN}, None, None),
    ),
    # one matrix per group on both sides: a batched matmul, no offsets
    (
        "3d_3d",
        r(3, 4, 8),
        r(3, 8, 16, seed=1),
        None,
        (r(3, 6, 8), r(3, 8, 16, seed=2), None),
        ({1: DYN}, None, None),
    ),
]


def _grouped_params():
    params = []
    for name, a, b, offs, second, shapes in GROUPED:
        args = (a, b) if offs is None else (a, b, offs)
        second = second[:2] if offs is None else second
        shapes = shapes[:2] if offs is None else shapes
        # torch's meta kernel (which export traces) takes bfloat16 only on CPU
        for dtype, tol in ((torch.bfloat16, 2e-2),):
            tag = str(dtype).removeprefix("torch.")
            params.append(pytest.param(args, dtype, tol, None, None, id=f"{name}-{tag}-static"))
            params.append(
                pytest.param(args, dtype, tol, second, shapes, id=f"{name}-{tag}-dynamic")
            )
    return params


@pytest.mark.parametrize(("args", "dtype", "tol", "second", "shapes"), _grouped_params())
def test_grouped_mm_matches_eager(args, dtype, tol, second, shapes):
    b = args[1]
    # torch's kernels want 16-byte aligned strides: transposed storage for a 2-D b
    args = (args[0], b.t().contiguous().t() if b.dim() == 2 else b, *args[2:])
    if second is not None:
        sb = second[1]
        second = (second[0], sb.t().contiguous().t() if sb.dim() == 2 else sb, *second[2:])
    check_op(
        _grouped(dtype),
        args,
        dynamic_shapes=shapes and dims(*shapes),
        second_args=second,
        rtol=tol,
        atol=tol,
    )


def test_grouped_mm_with_a_bias_is_refused_as_torch_refuses_it():
    with pytest.raises(RuntimeError, match="[Bb]ias"):
        torch._grouped_mm(
            r(4, 8).bfloat16(), r(2, 8, 16).bfloat16(), _offsets(2, 4), bias=r(2, 16).bfloat16()
        )


def _per_channel(axis, out_dtype=None, with_zero_points=True):
    def fn(q, scales, zero_points):
        return qd.dequantize_per_channel(
            q,
            scales,
            zero_points if with_zero_points else None,
            axis,
            -128,
            127,
            torch.int8,
            out_dtype=out_dtype,
        )

    return fn


def _int8(*shape, seed=0):
    return r(*shape, dtype=torch.int8, low=-128, high=127, seed=seed)


# (name, fn, args, a second set at other sizes, exported dynamic; None: static only)
DEQUANTIZE = [
    # q - zero point wraps around in int8 (127 - (-2)), as torch's kernel computes it
    (
        "per_channel_axis0",
        _per_channel(0),
        (
            torch.tensor([[127, -128], [5, 6], [-3, 0]], dtype=torch.int8),
            torch.tensor([0.5, 0.25, 0.125]),
            torch.tensor([-2, 1, 3], dtype=torch.int8),
        ),
        None,
    ),
    (
        "per_channel_axis1_3d",
        _per_channel(1),
        (_int8(2, 4, 3), torch.tensor([0.5, 0.1, 2.0, 1.0]), torch.tensor([0, 1, -2, 7])),
        (_int8(3, 4, 6, seed=1), torch.tensor([1.5, 0.2, 2.0, 0.3]), torch.tensor([1, 0, 2, -7])),
    ),
    (
        "per_channel_last_axis_f16",
        _per_channel(-1, torch.float16),
        (_int8(3, 5), r(5, seed=3).abs() + 0.1, torch.zeros(5, dtype=torch.int64)),
        (_int8(6, 5, seed=2), r(5, seed=4).abs() + 0.1, torch.arange(5)),
    ),
    (
        "per_channel_no_zero_points",
        _per_channel(0, with_zero_points=False),
        (_int8(3, 4), torch.tensor([0.5, 0.25, 0.125]), torch.zeros(3, dtype=torch.int8)),
        None,
    ),
    (
        "per_tensor",
        lambda q: qd.dequantize_per_tensor(q, 0.25, 3, -128, 127, torch.int8),
        (_int8(3, 4),),
        (_int8(5, 2, seed=1),),
    ),
    (
        "per_tensor_tensor_uint8",
        lambda q, s, z: qd.dequantize_per_tensor.tensor(q, s, z, 0, 255, torch.uint8),
        (r(2, 5, dtype=torch.uint8, low=0, high=255), torch.tensor(0.05), torch.tensor(128)),
        (r(4, 3, dtype=torch.uint8, low=0, high=255, seed=1), torch.tensor(0.5), torch.tensor(9)),
    ),
    (
        "per_token_f64_scales",
        lambda q, s, z: qd.dequantize_per_token(q, s, z, -128, 127, torch.int8, torch.float32),
        (
            _int8(2, 3, 4),
            r(2, 3, 1, seed=4, dtype=torch.float64).abs() + 0.01,
            torch.tensor([[[1], [0], [-5]], [[2], [3], [4]]]),
        ),
        None,
    ),
]


@pytest.mark.parametrize(("fn", "args", "second"), static_and_dynamic(DEQUANTIZE))
def test_dequantize_matches_eager(fn, args, second):
    shapes = None
    if second is not None:
        shapes = dims(
            *(
                {axis: DYN for axis in range(a.dim()) if a.shape[axis] != b.shape[axis]} or None
                for a, b in zip(args, second)
            )
        )
    check_op(fn, args, dynamic_shapes=shapes, second_args=second)
