"""Core ATen backward ops against torch.ops.aten.<op> eager, called inside a module's forward."""

from __future__ import annotations

import pytest
import torch

from tests.op_check import check_op

aten = torch.ops.aten
DYN = torch.export.Dim.DYNAMIC


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------------------- convolution
CONV_CASES = {
    # name: (input shape, weight shape, stride, padding, dilation, groups)
    "2d": ((2, 3, 7, 6), (4, 3, 3, 3), [1, 1], [1, 1], [1, 1], 1),
    "2d-strided": ((2, 4, 9, 8), (6, 2, 3, 2), [2, 3], [1, 0], [1, 2], 2),
    "2d-leftover": ((1, 2, 8, 8), (3, 2, 3, 3), [3, 3], [0, 0], [1, 1], 1),
    "1d": ((2, 3, 11), (5, 3, 4), [2], [1], [1], 1),
    "3d": ((1, 2, 5, 6, 4), (3, 2, 2, 3, 2), [1, 2, 1], [1, 0, 1], [1, 1, 2], 1),
    "depthwise": ((2, 4, 6, 6), (4, 1, 3, 3), [1, 1], [1, 1], [1, 1], 4),
}


def _conv_out(x, w, stride, padding, dilation, groups):
    n = x.dim() - 2
    conv = (torch.nn.functional.conv1d, torch.nn.functional.conv2d, torch.nn.functional.conv3d)[
        n - 1
    ]
    return conv(x, w, None, stride, padding, dilation, groups)


@pytest.mark.parametrize("name", sorted(CONV_CASES))
def test_convolution_backward(name):
    in_shape, w_shape, stride, padding, dilation, groups = CONV_CASES[name]
    x, w = randn(*in_shape), randn(*w_shape, seed=1)
    go = randn(*_conv_out(x, w, stride, padding, dilation, groups).shape, seed=2)
    zeros = [0] * len(stride)

    def fn(go, x, w):
        return aten.convolution_backward(
            go,
            x,
            w,
            [w.shape[0]],
            stride,
            padding,
            dilation,
            False,
            zeros,
            groups,
            [True, True, True],
        )

    check_op(fn, (go, x, w), rtol=1e-4, atol=1e-4)


def test_convolution_backward_dynamic_batch_and_size():
    w = randn(4, 3, 3, 3, seed=1)
    stride, padding, dilation = [2, 2], [1, 1], [1, 1]

    def fn(go, x, w):
        return aten.convolution_backward(
            go, x, w, [4], stride, padding, dilation, False, [0, 0], 1, [True, True, True]
        )

    def args(n, h, wd, seed):
        x = randn(n, 3, h, wd, seed=seed)
        return (randn(*_conv_out(x, w, stride, padding, dilation, 1).shape, seed=seed + 1), x, w)

    check_op(
        fn,
        args(2, 9, 8, 0),
        dynamic_shapes=(({0: DYN, 2: DYN, 3: DYN}, {0: DYN, 2: DYN, 3: DYN}, None),),
        second_args=args(3, 12, 11, 5),
        rtol=1e-4,
        atol=1e-4,
    )


@pytest.mark.parametrize("mask", [[True, False, False], [False, True, True]])
def test_convolution_backward_output_mask(mask):
    x, w = randn(2, 3, 6, 6), randn(4, 3, 3, 3, seed=1)
    go = randn(2, 4, 4, 4, seed=2)

    def fn(go, x, w):
        outs = aten.convolution_backward(
            go, x, w, [4], [1, 1], [0, 0], [1, 1], False, [0, 0], 1, mask
        )
        return tuple(o for o, m in zip(outs, mask) if m)

    check_op(fn, (go, x, w), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("groups", [1, 2])
def test_convolution_backward_transposed(groups):
    x, w = randn(2, 4, 5, 4), randn(4, 6 // groups, 3, 3, seed=1)
    stride, padding, dilation, output_padding = [2, 2], [1, 1], [1, 1], [1, 0]
    out = torch.nn.functional.conv_transpose2d(
        x, w, None, stride, padding, output_padding, groups, dilation
    )
    go = randn(*out.shape, seed=2)

    def fn(go, x, w):
        return aten.convolution_backward(
            go,
            x,
            w,
            [6],
            stride,
            padding,
            dilation,
            True,
            output_padding,
            groups,
            [True, True, True],
        )

    check_op(fn, (go, x, w), rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------------------------- pooling
@pytest.mark.parametrize("ceil_mode", [False, True])
def test_max_pool2d_with_indices_backward(ceil_mode):
    x = randn(2, 3, 9, 8)
    kernel, stride, padding, dilation = [3, 2], [2, 2], [1, 1], [1, 1]
    out, indices = aten.max_pool2d_with_indices(x, kernel, stride, padding, dilation, ceil_mode)
    go = randn(*out.shape, seed=1)

    def fn(go, x, indices):
        return aten.max_pool2d_with_indices_backward(
            go, x, kernel, stride, padding, dilation, ceil_mode, indices
        )

    check_op(fn, (go, x, indices))


def test_max_pool2d_backward_overlapping_windows_dynamic():
    # Overlapping windows can pick the same cell: the gradients must add up there.
    def args(n, h, seed):
        x = randn(n, 2, h, h, seed=seed)
        out, indices = aten.max_pool2d_with_indices(x, [3, 3], [1, 1], [0, 0], [1, 1], False)
        return (randn(*out.shape, seed=seed + 1), x, indices)

    def fn(go, x, indices):
        return aten.max_pool2d_with_indices_backward(
            go, x, [3, 3], [1, 1], [0, 0], [1, 1], False, indices
        )

    spatial = {0: DYN, 2: DYN, 3: DYN}
    check_op(
        fn, args(2, 7, 0), dynamic_shapes=((spatial, spatial, spatial),), second_args=args(3, 9, 4)
    )


AVG_CASES = {
    # name: (kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
    "plain": ([2, 2], [2, 2], [0, 0], False, True, None),
    "overlap-pad": ([3, 3], [1, 2], [1, 1], False, True, None),
    "exclude-pad": ([3, 2], [2, 1], [1, 1], False, False, None),
    "ceil": ([3, 3], [2, 2], [1, 0], True, True, None),
    "ceil-exclude": ([3, 3], [2, 2], [1, 1], True, False, None),
    "divisor": ([2, 3], [2, 2], [1, 1], False, True, 5),
}


@pytest.mark.parametrize("name", sorted(AVG_CASES))
def test_avg_pool2d_backward(name):
    kernel, stride, padding, ceil_mode, include_pad, divisor = AVG_CASES[name]
    x = randn(2, 3, 9, 8)
    out = aten.avg_pool2d(x, kernel, stride, padding, ceil_mode, include_pad, divisor)
    go = randn(*out.shape, seed=1)

    def fn(go, x):
        return aten.avg_pool2d_backward(
            go, x, kernel, stride, padding, ceil_mode, include_pad, divisor
        )

    check_op(fn, (go, x), rtol=1e-5, atol=1e-6)


AVG3D_CASES = {
    # name: (kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
    "plain": ([2, 2, 2], [2, 2, 2], [0, 0, 0], False, True, None),
    "padded-exclude": ([3, 2, 3], [2, 1, 2], [1, 0, 1], False, False, None),
    "ceil": ([3, 3, 2], [2, 2, 2], [1, 1, 0], True, True, None),
    "divisor": ([2, 3, 2], [2, 2, 1], [1, 1, 0], False, True, 5),
}


@pytest.mark.parametrize("name", sorted(AVG3D_CASES))
def test_avg_pool3d_backward(name):
    kernel, stride, padding, ceil_mode, include_pad, divisor = AVG3D_CASES[name]
    x = randn(2, 3, 7, 6, 5)
    out = aten.avg_pool3d(x, kernel, stride, padding, ceil_mode, include_pad, divisor)
    go = randn(*out.shape, seed=1)

    def fn(go, x):
        return aten.avg_pool3d_backward(
            go, x, kernel, stride, padding, ceil_mode, include_pad, divisor
        )

    check_op(fn, (go, x), rtol=1e-5, atol=1e-6)


def test_avg_pool3d_backward_dynamic():
    kernel, stride, padding = [3, 2, 2], [2, 2, 1], [1, 0, 1]

    def args(shape, seed):
        x = randn(*shape, seed=seed)
        out = aten.avg_pool3d(x, kernel, stride, padding, False, True)
        return (randn(*out.shape, seed=seed + 1), x)

    def fn(go, x):
        return aten.avg_pool3d_backward(go, x, kernel, stride, padding, False, True, None)

    spatial = {0: DYN, 2: DYN, 3: DYN, 4: DYN}
    check_op(
        fn,
        args((2, 3, 7, 6, 5), 0),
        dynamic_shapes=((spatial, spatial),),
        second_args=args((3, 3, 9, 8, 6), 3),
    )


def test_avg_pool2d_backward_dynamic_and_unbatched():
    kernel, stride, padding = [3, 3], [2, 2], [1, 1]

    def args(shape, seed):
        x = randn(*shape, seed=seed)
        out = aten.avg_pool2d(x, kernel, stride, padding, True, False)
        return (randn(*out.shape, seed=seed + 1), x)

    def fn(go, x):
        return aten.avg_pool2d_backward(go, x, kernel, stride, padding, True, False, None)

    spatial = {0: DYN, 2: DYN, 3: DYN}
    check_op(
        fn,
        args((2, 3, 9, 8), 0),
        dynamic_shapes=((spatial, spatial),),
        second_args=args((3, 3, 12, 7), 3),
    )
    check_op(fn, args((3, 7, 6), 0))


@pytest.mark.parametrize("out_size", [(1, 1), (3, 2), (4, 5)])
def test_adaptive_avg_pool2d_backward(out_size):
    def args(shape, seed):
        x = randn(*shape, seed=seed)
        return (randn(*aten._adaptive_avg_pool2d(x, list(out_size)).shape, seed=seed + 1), x)

    check_op(
        lambda go, x: aten._adaptive_avg_pool2d_backward(go, x),
        args((2, 3, 9, 7), 0),
        dynamic_shapes=(({0: DYN}, {0: DYN, 2: DYN, 3: DYN}),),
        second_args=args((3, 3, 11, 10), 2),
    )


# --------------------------------------------------------------------------------- embedding
@pytest.mark.parametrize("padding_idx", [-1, 2])
@pytest.mark.parametrize("scale_grad_by_freq", [False, True])
def test_embedding_dense_backward(padding_idx, scale_grad_by_freq):
    indices = torch.tensor([[1, 2, 4, 1], [2, 2, 0, 9]])
    go = randn(2, 4, 5)

    def fn(go, indices):
        return aten.embedding_dense_backward(go, indices, 10, padding_idx, scale_grad_by_freq)

    check_op(
        fn,
        (go, indices),
        dynamic_shapes=(({0: DYN, 1: DYN}, {0: DYN, 1: DYN}),),
        second_args=(randn(3, 5, 5, seed=1), torch.tensor([[3, 3, 3, 2, 1]] * 3)),
    )


# ------------------------------------------------------------------------------------- norms
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("normalized", [(6,), (4, 6)])
def test_native_layer_norm_backward(affine, normalized):
    x = randn(2, 3, 4, 6)
    weight = randn(*normalized, seed=1) if affine else None
    bias = randn(*normalized, seed=2) if affine else None
    _, mean, rstd = aten.native_layer_norm(x, list(normalized), weight, bias, 1e-5)
    go = randn(*x.shape, seed=3)
    mask = [True, affine, affine]

    def fn(go, x, mean, rstd, *params):
        w, b = params if params else (None, None)
        outs = aten.native_layer_norm_backward(go, x, list(normalized), mean, rstd, w, b, mask)
        return tuple(o for o in outs if o is not None)

    params = (weight, bias) if affine else ()
    check_op(fn, (go, x, mean, rstd, *params), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("affine", [True, False])
def test_native_group_norm_backward(affine):
    n, c, h, w, groups = 2, 6, 4, 5, 3
    x = randn(n, c, h, w)
    weight = randn(c, seed=1) if affine else None
    bias = randn(c, seed=2) if affine else None
    _, mean, rstd = aten.native_group_norm(x, weight, bias, n, c, h * w, groups, 1e-5)
    go = randn(n, c, h, w, seed=3)

    def fn(go, x, mean, rstd, *params):
        weight = params[0] if params else None
        return aten.native_group_norm_backward(
            go, x, mean, rstd, weight, n, c, h * w, groups, [True, True, True]
        )

    params = (weight,) if affine else ()
    check_op(fn, (go, x, mean, rstd, *params), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("opset", [17, 23])
def test_norm_backward_across_opsets(opset):
    # Mean reductions take their axes as an attribute before opset 18 and as an input after.
    x, weight, bias = randn(2, 6, 5), randn(5, seed=1), randn(5, seed=2)
    _, mean, rstd = aten.native_layer_norm(x, [5], weight, bias, 1e-5)
    _, g_mean, g_rstd = aten.native_group_norm(x, None, None, 2, 6, 5, 3, 1e-5)
    go = randn(2, 6, 5, seed=3)

    def fn(go, x, mean, rstd, g_mean, g_rstd, weight, bias):
        layer = aten.native_layer_norm_backward(
            go, x, [5], mean, rstd, weight, bias, [True, True, True]
        )
        group = aten.native_group_norm_backward(
            go, x, g_mean, g_rstd, None, 2, 6, 5, 3, [True, False, False]
        )
        return (*layer, group[0])

    check_op(
        fn, (go, x, mean, rstd, g_mean, g_rstd, weight, bias), opset=opset, rtol=1e-4, atol=1e-5
    )
