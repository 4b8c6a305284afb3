"""Convolution and average-pool gradients (convolution_backward, avg_pool2d/3d_backward).

They appear when a graph with autograd in it is exported (training steps, gradient-based
inference such as saliency maps). Each gradient is written out from the forward's definition,
with every size read at runtime, so batch and spatial dims may be dynamic:

- convolution: grad_input is the transposed convolution of grad_output (cropped to the input,
  so padding, ceil-like leftovers and dynamic sizes need no output_padding arithmetic);
  grad_weight is a convolution of the input (batch and channel axes swapped) by grad_output,
  stride and dilation trading places; grad_bias a sum. Transposed convolutions swap the roles.
- average pooling: grad_output divided by each window's divisor, spread back by a transposed
  convolution with a ones kernel.

Outputs whose ``output_mask`` entry is false are still computed when the graph reads them
(eager CPU kernels fill them in anyway); otherwise they are left out. The other backward ops
(max/adaptive pooling, embedding, layer/group norm) live with their forwards in conv_pool.py
and nn.py.
"""

from __future__ import annotations

import torch

from torch_onnx_conformance.exporter.ops._nn_helpers import as_int_list, compute_dtype, static_ints
from torch_onnx_conformance.exporter.ops._registry import translates
from torch_onnx_conformance.exporter.ops._shape import concat_ints, dim_value, shape_value

aten = torch.ops.aten

#: onnxruntime's CPU Conv/ConvTranspose compute in float32 (float16 via its own casts).
_CONV_DTYPES = frozenset({torch.float32})
_FLOATS = frozenset({torch.float32, torch.float64})


def _work(ctx, x, supported=_CONV_DTYPES):
    return ctx.cast(x, compute_dtype(ctx.dtype(x), supported))


def _wanted(ctx, output_mask):
    used = ctx.used_outputs()
    return [bool(m) or i in used for i, m in enumerate(output_mask)]


def _axes_except(rank, keep):
    return [a for a in range(rank) if a not in keep]


def _crop_spatial(ctx, full, target, begin):
    """Cells [begin, begin + target) of every spatial axis of ``full`` (N, C, *spatial),
    zero-padded at the end first where ``full`` is shorter. ``target`` is a 1-D int64 value."""
    n = len(begin)
    rank = n + 2
    have = ctx.op.Shape(full, start=2)
    begins = ctx.const(list(begin), torch.int64)
    ends = ctx.op.Add(begins, target)
    shortfall = ctx.op.Max(ctx.op.Sub(ends, have), ctx.const([0] * n, torch.int64))
    # Pad's layout: every axis's begin, then every axis's end; only spatial ends grow.
    pads = ctx.op.Concat(ctx.const([0] * rank + [0, 0], torch.int64), shortfall, axis=0)
    padded = ctx.op.Pad(full, pads)
    return ctx.op.Slice(padded, begins, ends, ctx.const(list(range(2, rank)), torch.int64))


def _spread(ctx, grad, weight, stride, dilation, groups, like, padding):
    """Transposed convolution of ``grad`` by ``weight``, cropped to ``like``'s spatial size."""
    n = ctx.rank(like) - 2
    full = ctx.op.ConvTranspose(
        grad, weight, strides=stride, dilations=dilation, group=groups, pads=[0] * (2 * n)
    )
    return _crop_spatial(ctx, full, shape_value(ctx, like, 2), padding)


def _weight_grad(ctx, x, grad, kernel, stride, padding, dilation, groups):
    """d(conv(x, w))/dw contracted with ``grad``: shape (C_grad, C_x / groups, *kernel).

    A convolution over the batch axis: x becomes (C_x / g, g * N, *spatial) (channels per group
    as the batch, group-major batch as channels) and grad becomes (C_grad, N, *out) filters,
    convolved group-wise with stride and dilation swapped, then cropped to the kernel size.
    """
    rank = ctx.rank(x)
    n = rank - 2
    spatial = list(range(3, rank + 1))
    c_x = ctx.shape(x)[1]
    if not isinstance(c_x, int):
        raise NotImplementedError("convolution_backward needs a static channel count")
    per_group = c_x // groups
    grouped = ctx.op.Reshape(x, concat_ints(ctx, [0, groups, per_group], shape_value(ctx, x, 2)))
    grouped = ctx.op.Transpose(grouped, perm=[2, 1, 0] + spatial)
    as_batch = ctx.op.Reshape(grouped, concat_ints(ctx, [per_group, -1], shape_value(ctx, x, 2)))
    filters = ctx.op.Transpose(grad, perm=[1, 0] + list(range(2, rank)))
    out = ctx.op.Conv(
        as_batch, filters, strides=dilation, dilations=stride, group=groups, pads=list(padding) * 2
    )
    out = ctx.op.Slice(
        out,
        ctx.const([0] * n, torch.int64),
        ctx.const(list(kernel), torch.int64),
        ctx.const(list(range(2, rank)), torch.int64),
    )
    return ctx.op.Transpose(out, perm=[1, 0] + list(range(2, rank)))


@translates(aten.convolution_backward.default)
def convolution_backward(
    ctx,
    grad_output,
    input,
    weight,
    bias_sizes,
    stride,
    padding,
    dilation,
    transposed,
    output_padding,
    groups,
    output_mask,
):
    n = ctx.rank(weight) - 2
    stride = static_ints(as_int_list(stride, n), "stride")
    padding = static_ints(as_int_list(padding, n), "padding")
    dilation = static_ints(as_int_list(dilation, n), "dilation")
    groups = static_ints([groups], "groups")[0]
    kernel = ctx.static_shape(weight)
    if kernel is None:
        raise NotImplementedError("convolution_backward needs a weight of static shape")
    kernel = list(kernel[2:])
    dtype = ctx.dtype(grad_output)
    go, x, w = _work(ctx, grad_output), _work(ctx, input), _work(ctx, weight)
    want_input, want_weight, want_bias = _wanted(ctx, output_mask)
    grad_input = grad_weight = grad_bias = None
    if want_input:
        if transposed:
            # The forward of a transposed convolution's input gradient is the plain convolution.
            full = ctx.op.Conv(
                go, w, strides=stride, dilations=dilation, group=groups, pads=padding * 2
            )
            grad_input = _crop_spatial(ctx, full, shape_value(ctx, input, 2), [0] * n)
        else:
            grad_input = _spread(ctx, go, w, stride, dilation, groups, input, padding)
        grad_input = ctx.cast(grad_input, dtype)
    if want_weight:
        if transposed:
            grad_weight = _weight_grad(ctx, go, x, kernel, stride, padding, dilation, groups)
        else:
            grad_weight = _weight_grad(ctx, x, go, kernel, stride, padding, dilation, groups)
        grad_weight = ctx.cast(grad_weight, ctx.dtype(weight))
    if want_bias:
        axes = _axes_except(ctx.rank(grad_output), {1})
        grad_bias = ctx.op.ReduceSum(_work(ctx, grad_output, _FLOATS), axes, keepdims=0)
        grad_bias = ctx.cast(grad_bias, dtype)
    return grad_input, grad_weight, grad_bias


# ------------------------------------------------------------------------------- pooling
def _window_divisors(ctx, self, out_sizes, kernel, stride, padding, count_include_pad, work):
    """Per output position, the divisor torch's avg_pool used: (*out_spatial), separable.

    For a window [i*s - p, i*s - p + k) clipped to the padded input, count_include_pad counts
    padding, otherwise only the cells inside the input are counted.
    """
    factors = []
    n = len(kernel)
    rank = ctx.rank(self)
    for axis, (k, s, p) in enumerate(zip(kernel, stride, padding)):
        size = ctx.op.Squeeze(dim_value(ctx, self, rank - n + axis), [0])
        count = ctx.op.Squeeze(out_sizes[axis], [0])
        i = ctx.op.Range(ctx.const(0, torch.int64), count, ctx.const(1, torch.int64))
        start = ctx.op.Sub(ctx.op.Mul(i, ctx.const(s, torch.int64)), ctx.const(p, torch.int64))
        end = ctx.op.Min(
            ctx.op.Add(start, ctx.const(k, torch.int64)),
            ctx.op.Add(size, ctx.const(p, torch.int64)),
        )
        if count_include_pad:
            length = ctx.op.Sub(end, start)
        else:
            length = ctx.op.Sub(ctx.op.Min(end, size), ctx.op.Max(start, ctx.const(0, torch.int64)))
        factors.append(ctx.cast(length, work))
    # The outer product of the per-axis factors: factor i spans axis i of n.
    divisors = None
    for axis, factor in enumerate(factors):
        spread = ctx.op.Unsqueeze(factor, [a for a in range(n) if a != axis])
        divisors = spread if divisors is None else ctx.op.Mul(divisors, spread)
    return divisors


@translates(aten.avg_pool2d_backward.default)
def avg_pool2d_backward(ctx, grad_output, self, *args):
    return _avg_pool_backward(ctx, 2, grad_output, self, *args)


@translates(aten.avg_pool3d_backward.default)
def avg_pool3d_backward(ctx, grad_output, self, *args):
    return _avg_pool_backward(ctx, 3, grad_output, self, *args)


def _avg_pool_backward(
    ctx,
    n,
    grad_output,
    self,
    kernel_size,
    stride,
    padding,
    ceil_mode,
    count_include_pad,
    divisor_override,
):
    kernel = static_ints(as_int_list(kernel_size, n), "kernel_size")
    stride = static_ints(as_int_list(stride, n) if stride else kernel, "stride")
    padding = static_ints(as_int_list(padding, n), "padding")
    rank = ctx.rank(self)
    go = _work(ctx, grad_output)
    work = ctx.dtype(go)
    out_sizes = [dim_value(ctx, grad_output, rank - n + axis) for axis in range(n)]
    if divisor_override:
        scaled = ctx.op.Div(go, ctx.const(float(divisor_override), work))
    else:
        divisors = _window_divisors(
            ctx, self, out_sizes, kernel, stride, padding, count_include_pad, work
        )
        scaled = ctx.op.Div(go, divisors)
    # Every plane is spread independently: fold the leading axes into the batch so one
    # (1, 1, kH, kW) ones kernel serves any (dynamic) channel count.
    planes = ctx.op.Reshape(
        scaled, concat_ints(ctx, [-1, 1], shape_value(ctx, grad_output, rank - n))
    )
    ones = ctx.const(torch.ones(1, 1, *kernel), work)
    full = ctx.op.ConvTranspose(planes, ones, strides=stride, pads=[0] * (2 * n))
    grad = _crop_spatial(ctx, full, shape_value(ctx, self, rank - n), padding)
    grad = ctx.op.Reshape(grad, ctx.op.Shape(self))
    return ctx.cast(grad, ctx.dtype(grad_output))
