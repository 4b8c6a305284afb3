"""Convolution, pooling and resampling against eager torch.

Includes the cases where onnxruntime's kernels and torch disagree and the translation works
around them (ceil_mode's last window, output_padding >= stride, antialiased resize weights),
the opset-dependent choices (Col2Im from 18, GridSample's N-D form and AffineGrid from 20), and
dynamic batch/spatial sizes checked at a second shape.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.op_check import check_op, dims, op_types, tensor_maker
from torch_onnx_conformance import exporter

r = tensor_maker(seed_stride=5, seed_counts_rank=True)

aten = torch.ops.aten
DYN = torch.export.Dim.DYNAMIC


def spatial_dynamic(x):
    return {d: DYN for d in range(x.dim()) if d != 1 and x.shape[d] >= 2}


# ----------------------------------------------------------------------------- convolution
CONV_CASES = {
    "conv1d": (lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1), (2, 4, 9), (6, 4, 3)),
    "conv1d_unbatched": (lambda x, w, b: F.conv1d(x, w, b), (4, 9), (6, 4, 3)),
    "conv2d_groups_dilation": (
        lambda x, w, b: F.conv2d(x, w, b, padding=2, dilation=2, groups=2),
        (2, 4, 7, 8),
        (6, 2, 3, 3),
    ),
    "conv2d_same": (lambda x, w, b: F.conv2d(x, w, b, padding="same"), (1, 3, 7, 6), (4, 3, 4, 3)),
    "conv2d_same_dilated": (
        lambda x, w, b: F.conv2d(x, w, b, padding="same", dilation=3),
        (1, 3, 9, 8),
        (4, 3, 2, 3),
    ),
    "conv2d_valid": (
        lambda x, w, b: F.conv2d(x, w, b, padding="valid", stride=(2, 1)),
        (1, 3, 7, 6),
        (4, 3, 3, 3),
    ),
    "conv3d": (
        lambda x, w, b: F.conv3d(x, w, b, stride=(1, 2, 1), padding=(0, 1, 1)),
        (1, 2, 5, 6, 4),
        (3, 2, 2, 3, 3),
    ),
    "conv_transpose1d": (
        lambda x, w, b: F.conv_transpose1d(x, w, b, stride=2, padding=1, output_padding=1),
        (2, 4, 5),
        (4, 3, 3),
    ),
    "conv_transpose2d_groups": (
        lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, groups=2, dilation=(1, 2)),
        (1, 4, 3, 4),
        (4, 3, 2, 3),
    ),
    # output_padding may reach max(stride, dilation) - 1 in torch but only stride - 1 in
    # onnxruntime's ConvTranspose.
    "conv_transpose2d_big_output_padding": (
        lambda x, w, b: F.conv_transpose2d(
            x, w, b, stride=2, padding=1, output_padding=2, dilation=3
        ),
        (1, 2, 4, 4),
        (2, 2, 3, 3),
    ),
    "conv_transpose3d": (
        lambda x, w, b: F.conv_transpose3d(x, w, b, stride=(2, 1, 1)),
        (1, 2, 3, 4, 3),
        (2, 3, 2, 2, 2),
    ),
}


@pytest.mark.parametrize("name", list(CONV_CASES))
def test_convolution(name):
    fn, xs, ws = CONV_CASES[name]
    transposed = "transpose" in name
    channels = ws[1] * (2 if "groups" in name else 1) if transposed else ws[0]
    check_op(fn, [r(*xs), r(*ws, seed=1), r(channels, seed=2)], rtol=1e-4, atol=1e-4)


def test_conv_dynamic_batch_and_spatial():
    x, w, b = r(2, 3, 8, 9), r(4, 3, 3, 3, seed=1), r(4, seed=2)
    check_op(
        lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1),
        [x, w, b],
        dynamic_shapes=dims(spatial_dynamic(x), None, None),
        second_args=[r(3, 3, 11, 6, seed=3), w, b],
        rtol=1e-4,
        atol=1e-4,
    )


def test_conv_same_with_dynamic_kernel():
    x, w = r(1, 2, 7, 7), r(3, 2, 3, 4, seed=1)
    check_op(
        lambda x, w: F.conv2d(x, w, padding="same", dilation=2),
        [x, w],
        dynamic_shapes=dims({2: DYN, 3: DYN}, {2: DYN, 3: DYN}),
        second_args=[r(1, 2, 9, 8, seed=2), r(3, 2, 2, 5, seed=3)],
        rtol=1e-4,
        atol=1e-4,
    )


def test_conv_float64_and_module():
    conv = torch.nn.Conv2d(3, 4, 3, padding=1).double()
    check_op(conv, [r(1, 3, 5, 5, dtype=torch.float64)], rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------- pooling
POOL_CASES = {
    "max_pool1d": lambda x: F.max_pool1d(x.flatten(2), 3, 2, 1),
    "max_pool2d_ceil": lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True),
    "max_pool2d_indices": lambda x: F.max_pool2d(
        x, (2, 3), (2, 2), (1, 1), dilation=(1, 2), return_indices=True
    ),
    "max_pool2d_ceil_indices": lambda x: F.max_pool2d(
        x, 3, 3, 1, ceil_mode=True, return_indices=True
    ),
    "max_pool3d_indices": lambda x: F.max_pool3d(
        x.unsqueeze(2).expand(-1, -1, 3, -1, -1), 2, 1, return_indices=True
    ),
    "max_pool2d_unbatched": lambda x: F.max_pool2d(x[0], 2),
    "avg_pool1d": lambda x: F.avg_pool1d(x.flatten(2), 4, 3, 2, count_include_pad=False),
    "avg_pool2d": lambda x: F.avg_pool2d(x, 3, 2, 1),
    "avg_pool2d_ceil_exclude_pad": lambda x: F.avg_pool2d(
        x, 3, 2, 1, ceil_mode=True, count_include_pad=False
    ),
    "avg_pool2d_ceil_include_pad": lambda x: F.avg_pool2d(x, 2, 3, 1, ceil_mode=True),
    "avg_pool2d_divisor": lambda x: F.avg_pool2d(x, 3, 2, 1, divisor_override=5),
    "avg_pool2d_divisor_ceil": lambda x: F.avg_pool2d(
        x, 3, 2, 1, ceil_mode=True, divisor_override=2
    ),
    "avg_pool3d": lambda x: F.avg_pool3d(x.unsqueeze(2).expand(-1, -1, 4, -1, -1), 2, 2),
    "lp_pool2d": lambda x: F.lp_pool2d(x.abs(), 2.0, 2),
}


@pytest.mark.parametrize("name", list(POOL_CASES))
def test_pooling(name):
    check_op(POOL_CASES[name], [r(2, 3, 7, 8)], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "name", ["max_pool2d_ceil_indices", "avg_pool2d_ceil_exclude_pad", "avg_pool2d_divisor_ceil"]
)
def test_pooling_dynamic(name):
    x = r(2, 3, 7, 8)
    check_op(
        POOL_CASES[name],
        [x],
        dynamic_shapes=dims(spatial_dynamic(x)),
        second_args=[r(3, 3, 10, 5, seed=1)],
    )


ADAPTIVE_CASES = {
    "avg_global": lambda x: F.adaptive_avg_pool2d(x, 1),
    "avg_divisible": lambda x: F.adaptive_avg_pool2d(x, (3, 4)),
    "avg_uneven": lambda x: F.adaptive_avg_pool2d(x, (4, 5)),
    "avg_upsampling": lambda x: F.adaptive_avg_pool2d(x, (7, 10)),
    "avg_1d": lambda x: F.adaptive_avg_pool1d(x.flatten(2), 5),
    "avg_3d": lambda x: F.adaptive_avg_pool3d(x.unsqueeze(2), (1, 2, 3)),
    "avg_keep_axis": lambda x: F.adaptive_avg_pool2d(x, (None, 3)),
    "core_avg": lambda x: aten._adaptive_avg_pool2d(x, [4, 5]),
    "max_global": lambda x: F.adaptive_max_pool2d(x, 1, return_indices=True),
    "max_divisible": lambda x: F.adaptive_max_pool2d(x, (3, 2), return_indices=True),
    "max_uneven": lambda x: F.adaptive_max_pool2d(x, (4, 5), return_indices=True),
    "max_values_only": lambda x: F.adaptive_max_pool2d(x, (5, 3)),
    "max_1d": lambda x: F.adaptive_max_pool1d(x.flatten(2), 7, return_indices=True),
    "max_3d": lambda x: F.adaptive_max_pool3d(
        x.unsqueeze(2).expand(-1, -1, 3, -1, -1), (2, 4, 5), return_indices=True
    ),
}


@pytest.mark.parametrize("name", list(ADAPTIVE_CASES))
def test_adaptive_pooling(name):
    check_op(ADAPTIVE_CASES[name], [r(2, 3, 6, 8)], rtol=1e-5, atol=1e-5)


def test_global_adaptive_average_is_one_global_average_pool():
    # GlobalAveragePool where its shape allows it (a quantized model's DQ -> pool -> Q fuses
    # into QLinearGlobalAveragePool there, not around a ReduceMean); ReduceMean where
    # onnxruntime's kernel rejects the shape (an empty channel axis) or without a batch axis
    def pool(x):
        return F.adaptive_avg_pool2d(x, 1)

    program = check_op(pool, [r(2, 3, 6, 8)], rtol=1e-5, atol=1e-5)
    assert "GlobalAveragePool" in op_types(program) and "ReduceMean" not in op_types(program)
    for x in (torch.zeros(2, 0, 6, 8), r(3, 6, 8), r(2, 3, 6, 8).double()):
        types = op_types(check_op(pool, [x], rtol=1e-5, atol=1e-5))
        assert "ReduceMean" in types and "GlobalAveragePool" not in types, (x.shape, x.dtype)


@pytest.mark.parametrize("name", ["avg_uneven", "avg_keep_axis", "max_uneven", "avg_global"])
def test_adaptive_pooling_dynamic(name):
    x = r(2, 3, 6, 8)
    check_op(
        ADAPTIVE_CASES[name],
        [x],
        dynamic_shapes=dims(spatial_dynamic(x)),
        second_args=[r(1, 3, 9, 7, seed=1)],
        rtol=1e-5,
        atol=1e-5,
    )


def test_max_unpool():
    x = r(2, 3, 6, 8)

    def roundtrip(x):
        values, indices = F.max_pool2d(x, 2, return_indices=True)
        return F.max_unpool2d(values, indices, 2, output_size=(6, 8))

    check_op(roundtrip, [x])
    check_op(roundtrip, [x], dynamic_shapes=dims({0: DYN}), second_args=[r(3, 3, 6, 8, seed=1)])


# ------------------------------------------------------------------------------ resampling
INTERPOLATE_CASES = {
    "nearest_scale": dict(scale_factor=1.7, mode="nearest"),
    "nearest_down": dict(scale_factor=0.6, mode="nearest"),
    "nearest_size": dict(size=(5, 11), mode="nearest"),
    "nearest_exact": dict(size=(9, 5), mode="nearest-exact"),
    "bilinear": dict(scale_factor=2.0, mode="bilinear"),
    "bilinear_align": dict(size=(7, 11), mode="bilinear", align_corners=True),
    "bilinear_down": dict(size=(3, 5), mode="bilinear"),
    "bicubic": dict(scale_factor=(1.5, 2.0), mode="bicubic"),
    "bicubic_align": dict(size=(9, 7), mode="bicubic", align_corners=True),
    "bilinear_aa": dict(size=(3, 5), mode="bilinear", antialias=True),
    "bilinear_aa_align": dict(size=(4, 3), mode="bilinear", antialias=True, align_corners=True),
    "bicubic_aa": dict(scale_factor=0.45, mode="bicubic", antialias=True),
    "bicubic_aa_up": dict(size=(9, 13), mode="bicubic", antialias=True),
    "area": dict(size=(4, 3), mode="area"),
}


@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize("name", list(INTERPOLATE_CASES))
def test_interpolate(name, opset):
    kwargs = INTERPOLATE_CASES[name]
    check_op(
        lambda x: F.interpolate(x, **kwargs), [r(2, 3, 6, 8)], opset=opset, rtol=1e-4, atol=1e-4
    )


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_interpolate_1d_and_3d(mode):
    check_op(
        lambda x: F.interpolate(x, scale_factor=2.5, mode=mode), [r(2, 3, 7)], rtol=1e-4, atol=1e-5
    )
    three_d = "trilinear" if mode == "linear" else mode
    check_op(
        lambda x: F.interpolate(x, size=(3, 5, 4), mode=three_d),
        [r(1, 2, 4, 3, 6)],
        rtol=1e-4,
        atol=1e-5,
    )


@pytest.mark.parametrize(
    "name", ["nearest_scale", "bilinear", "bicubic", "bilinear_aa", "bicubic_aa"]
)
def test_interpolate_dynamic(name):
    kwargs = INTERPOLATE_CASES[name]
    x = r(2, 3, 6, 8)
    if "size" in kwargs:
        kwargs = dict(kwargs, size=None, scale_factor=0.5)
    check_op(
        lambda x: F.interpolate(x, **kwargs),
        [x],
        dynamic_shapes=dims(spatial_dynamic(x)),
        second_args=[r(1, 3, 10, 12, seed=1)],
        rtol=1e-4,
        atol=1e-4,
    )


@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
def test_grid_sample(opset, mode, padding_mode):
    x = r(2, 3, 5, 6)
    grid = r(2, 4, 7, 2, seed=1).clamp(-1.2, 1.2)
    check_op(
        lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode=padding_mode, align_corners=False),
        [x, grid],
        opset=opset,
        rtol=1e-4,
        atol=1e-4,
    )


@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize("align_corners", [False, True])
def test_affine_grid(opset, align_corners):
    theta = r(2, 2, 3)
    program = check_op(
        lambda t: F.affine_grid(t, [2, 3, 5, 4], align_corners=align_corners),
        [theta],
        opset=opset,
        rtol=1e-5,
        atol=1e-5,
    )
    assert ("AffineGrid" in op_types(program)) == (opset >= 20)
    check_op(
        lambda t: F.affine_grid(t, [2, 1, 3, 4, 2], align_corners=align_corners),
        [r(2, 3, 4, seed=1)],
        opset=opset,
        rtol=1e-5,
        atol=1e-5,
    )


# ------------------------------------------------------------------------ unfold / fold
@pytest.mark.parametrize("opset", [17, 18])
def test_unfold_fold(opset):
    x = r(2, 3, 6, 7)
    options = dict(kernel_size=(2, 3), dilation=(1, 2), padding=1, stride=(2, 1))
    check_op(lambda x: F.unfold(x, **options), [x], opset=opset)
    cols = F.unfold(x, **options)
    program = check_op(
        lambda c: F.fold(c, (6, 7), **options), [cols], opset=opset, rtol=1e-5, atol=1e-5
    )
    assert ("Col2Im" in op_types(program)) == (opset >= 18)


def test_unfold_dynamic():
    x = r(2, 3, 6, 7)
    check_op(
        lambda x: F.unfold(x, 3, padding=1),
        [x],
        dynamic_shapes=dims(spatial_dynamic(x)),
        second_args=[r(1, 3, 5, 9, seed=1)],
    )


# ------------------------------------------------------------------- backward (core ATen)
def _conv_backward_case(transposed):
    x = r(2, 4, 7, 8)
    if transposed:
        w = r(4, 3, 3, 2, seed=1)
        y = F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1)
        return (
            lambda g, x, w: aten.convolution_backward(
                g, x, w, [3], [2, 2], [1, 1], [1, 1], True, [1, 1], 1, [True, True, True]
            ),
            [r(*y.shape, seed=2), x, w],
        )
    w = r(6, 2, 3, 3, seed=1)
    y = F.conv2d(x, w, stride=2, padding=2, dilation=2, groups=2)
    return (
        lambda g, x, w: aten.convolution_backward(
            g, x, w, [6], [2, 2], [2, 2], [2, 2], False, [0, 0], 2, [True, True, True]
        ),
        [r(*y.shape, seed=2), x, w],
    )


@pytest.mark.parametrize("transposed", [False, True])
def test_convolution_backward(transposed):
    fn, args = _conv_backward_case(transposed)
    check_op(fn, args, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("ceil_mode", [False, True])
@pytest.mark.parametrize("count_include_pad", [False, True])
@pytest.mark.parametrize("divisor", [None, 3])
def test_avg_pool2d_backward(ceil_mode, count_include_pad, divisor):
    x = r(2, 3, 7, 8)
    out = F.avg_pool2d(x, 3, 2, 1, ceil_mode, count_include_pad, divisor)
    check_op(
        lambda g, x: aten.avg_pool2d_backward(
            g, x, [3, 3], [2, 2], [1, 1], ceil_mode, count_include_pad, divisor
        ),
        [r(*out.shape, seed=1), x],
        rtol=1e-5,
        atol=1e-5,
    )


def test_max_pool2d_backward_and_adaptive_backward():
    x = r(2, 3, 7, 8)
    values, indices = F.max_pool2d(x, 3, 2, 1, ceil_mode=True, return_indices=True)
    check_op(
        lambda g, x, i: aten.max_pool2d_with_indices_backward(
            g, x, [3, 3], [2, 2], [1, 1], [1, 1], True, i
        ),
        [r(*values.shape, seed=1), x, indices],
    )
    check_op(
        lambda g, x: aten._adaptive_avg_pool2d_backward(g, x),
        [r(2, 3, 4, 5, seed=2), x],
        rtol=1e-5,
        atol=1e-5,
    )


def test_grid_sample_5d_needs_opset_20():
    from torch_onnx_conformance import exporter

    x, grid = r(1, 2, 3, 4, 5), r(1, 2, 3, 4, 3, seed=1).clamp(-1, 1)
    check_op(
        lambda x, g: F.grid_sample(x, g, align_corners=False),
        [x, grid],
        opset=20,
        rtol=1e-4,
        atol=1e-4,
    )
    with pytest.raises(exporter.OnnxExporterError, match="opset_version >= 20"):
        check_op(lambda x, g: F.grid_sample(x, g, align_corners=False), [x, grid], opset=17)


def test_conv_nodes_carry_their_kernel_shape():
    # onnxruntime plans a Conv from kernel_shape when it is given (faster at ORT_ENABLE_ALL).
    conv = torch.nn.Conv2d(3, 4, (3, 5), padding=1).eval()
    program = exporter.export(conv, (torch.randn(1, 3, 8, 8),))
    (node,) = [n for n in program.model_proto.graph.node if n.op_type == "Conv"]
    kernel = next(a for a in node.attribute if a.name == "kernel_shape")
    assert list(kernel.ints) == [3, 5]
