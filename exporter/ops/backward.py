"""Core ATen backward ops: convolution, pooling, embedding and normalisation gradients.

They appear when a graph with autograd in it is exported (training steps, gradient-based
inference such as saliency maps). Each gradient is written out from the forward's definition:

- convolution: grad_input is the transposed convolution of grad_output (cropped to the input,
  so padding, ceil-like leftovers and dynamic sizes need no output_padding arithmetic);
  grad_weight is a convolution of the input (batch and channel axes swapped) by grad_output,
  stride and dilation trading places; grad_bias a sum. Transposed convolutions swap the roles.
- max pooling: the incoming gradient is scatter-added at the argmax indices.
- average pooling: grad_output divided by each window's divisor, spread back by a transposed
  convolution with a ones kernel; adaptive average pooling by two bin-membership matmuls.
- embedding: grad_output rows scatter-added at their indices (ScatterND, reduction add).
- layer/group norm: the closed-form gradient of x_hat = (x - mean) * rstd.

Outputs whose ``output_mask`` entry is false are still computed when the graph reads them
(eager CPU kernels fill them in anyway); otherwise they are left out.

Registration: exporter/ops/conv_pool.py and exporter/ops/nn.py register translations of the
same seven overloads, and the registry refuses two built-in translations of one overload, so
this module registers nothing at import. ``BACKWARD_TRANSLATIONS`` lists its translations and
``register_backward_translations()`` installs them (as overrides) into a registry. Unlike
conv_pool's, these handle dynamic spatial sizes for convolution and avg-pool backward.
"""

from __future__ import annotations

import torch

from exporter.ops._nn_helpers import (
    as_int_list,
    compute_dtype,
    concat_ints,
    dim_size,
    reduce,
    shape_slice,
    static_ints,
    used_outputs,
)
from exporter.ops._registry import DEFAULT_REGISTRY, Registry, Translation

aten = torch.ops.aten

#: onnxruntime's CPU Conv/ConvTranspose compute in float32 (float16 via its own casts).
_CONV_DTYPES = frozenset({torch.float32})
_FLOATS = frozenset({torch.float32, torch.float64})


def _work(ctx, x, supported=_CONV_DTYPES):
    return ctx.cast(x, compute_dtype(ctx.dtype(x), supported))


def _wanted(ctx, output_mask):
    used = used_outputs(ctx)
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
    return _crop_spatial(ctx, full, shape_slice(ctx, like, 2), padding)


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
    grouped = ctx.op.Reshape(x, concat_ints(ctx, [0, groups, per_group], shape_slice(ctx, x, 2)))
    grouped = ctx.op.Transpose(grouped, perm=[2, 1, 0] + spatial)
    as_batch = ctx.op.Reshape(grouped, concat_ints(ctx, [per_group, -1], shape_slice(ctx, x, 2)))
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
            grad_input = _crop_spatial(ctx, full, shape_slice(ctx, input, 2), [0] * n)
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
def max_pool2d_with_indices_backward(
    ctx, grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices
):
    rank = ctx.rank(self)  # (N, C, H, W) or unbatched (C, H, W)
    lead = shape_slice(ctx, self, 0, rank - 2)
    updates = _work(ctx, grad_output, _FLOATS)
    flat_updates = ctx.op.Reshape(updates, concat_ints(ctx, lead, [-1]))
    flat_indices = ctx.op.Reshape(indices, concat_ints(ctx, lead, [-1]))
    plane = ctx.op.Mul(dim_size(ctx, self, rank - 2), dim_size(ctx, self, rank - 1))
    zeros = ctx.op.Expand(ctx.const(0.0, ctx.dtype(updates)), concat_ints(ctx, lead, plane))
    grad = ctx.op.ScatterElements(zeros, flat_indices, flat_updates, axis=rank - 2, reduction="add")
    grad = ctx.op.Reshape(grad, ctx.op.Shape(self))
    return ctx.cast(grad, ctx.dtype(grad_output))


def _window_divisors(ctx, self, out_sizes, kernel, stride, padding, count_include_pad, work):
    """Per output position, the divisor torch's avg_pool2d used: (oH, oW), separable.

    For a window [i*s - p, i*s - p + k) clipped to the padded input, count_include_pad counts
    padding, otherwise only the cells inside the input are counted.
    """
    factors = []
    rank = ctx.rank(self)
    for axis, (k, s, p) in enumerate(zip(kernel, stride, padding)):
        size = ctx.op.Squeeze(dim_size(ctx, self, rank - 2 + axis), [0])
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
    return ctx.op.Mul(ctx.op.Unsqueeze(factors[0], [1]), ctx.op.Unsqueeze(factors[1], [0]))


def avg_pool2d_backward(
    ctx,
    grad_output,
    self,
    kernel_size,
    stride,
    padding,
    ceil_mode,
    count_include_pad,
    divisor_override,
):
    kernel = static_ints(as_int_list(kernel_size, 2), "kernel_size")
    stride = static_ints(as_int_list(stride, 2) if stride else kernel, "stride")
    padding = static_ints(as_int_list(padding, 2), "padding")
    rank = ctx.rank(self)
    go = _work(ctx, grad_output)
    work = ctx.dtype(go)
    out_sizes = [dim_size(ctx, grad_output, rank - 2), dim_size(ctx, grad_output, rank - 1)]
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
        scaled, concat_ints(ctx, [-1, 1], shape_slice(ctx, grad_output, rank - 2))
    )
    ones = ctx.const(torch.ones(1, 1, *kernel), work)
    full = ctx.op.ConvTranspose(planes, ones, strides=stride, pads=[0, 0, 0, 0])
    grad = _crop_spatial(ctx, full, shape_slice(ctx, self, rank - 2), padding)
    grad = ctx.op.Reshape(grad, ctx.op.Shape(self))
    return ctx.cast(grad, ctx.dtype(grad_output))


def _adaptive_bins(ctx, size, count, work):
    """(count, size) matrix: row i holds 1/len(bin i) over bin i = [floor(i*S/n), ceil((i+1)*S/n))."""
    size = ctx.op.Squeeze(size, [0])
    count = ctx.op.Squeeze(count, [0])
    one = ctx.const(1, torch.int64)
    i = ctx.op.Range(ctx.const(0, torch.int64), count, one)
    start = ctx.op.Div(ctx.op.Mul(i, size), count)
    end = ctx.op.Div(
        ctx.op.Sub(ctx.op.Add(ctx.op.Mul(ctx.op.Add(i, one), size), count), one), count
    )
    positions = ctx.op.Range(ctx.const(0, torch.int64), size, one)
    start, end = ctx.op.Unsqueeze(start, [1]), ctx.op.Unsqueeze(end, [1])
    inside = ctx.op.And(ctx.op.GreaterOrEqual(positions, start), ctx.op.Less(positions, end))
    length = ctx.cast(ctx.op.Sub(end, start), work)
    return ctx.op.Div(ctx.cast(inside, work), length)


def adaptive_avg_pool2d_backward(ctx, grad_output, self):
    rank = ctx.rank(self)
    go = _work(ctx, grad_output, _FLOATS)
    work = ctx.dtype(go)
    rows = _adaptive_bins(
        ctx, dim_size(ctx, self, rank - 2), dim_size(ctx, grad_output, rank - 2), work
    )  # (oH, H)
    cols = _adaptive_bins(
        ctx, dim_size(ctx, self, rank - 1), dim_size(ctx, grad_output, rank - 1), work
    )  # (oW, W)
    spread = ctx.op.MatMul(go, cols)  # (..., oH, W)
    grad = ctx.op.MatMul(ctx.op.Transpose(rows, perm=[1, 0]), spread)  # (..., H, W)
    return ctx.cast(grad, ctx.dtype(grad_output))


# ----------------------------------------------------------------------------- embedding
def embedding_dense_backward(
    ctx, grad_output, indices, num_weights, padding_idx, scale_grad_by_freq
):
    go = _work(ctx, grad_output, _FLOATS)
    work = ctx.dtype(go)
    width = dim_size(ctx, grad_output, ctx.rank(grad_output) - 1)
    rows = ctx.op.Reshape(go, ctx.op.Concat(ctx.const([-1], torch.int64), width, axis=0))
    flat = ctx.op.Reshape(ctx.cast(indices, torch.int64), ctx.const([-1], torch.int64))
    count = ctx.ints([num_weights])
    if scale_grad_by_freq:
        ones = ctx.op.Expand(ctx.const(1.0, work), ctx.op.Shape(flat))
        zeros = ctx.op.Expand(ctx.const(0.0, work), count)
        freq = ctx.op.ScatterElements(zeros, flat, ones, axis=0, reduction="add")
        rows = ctx.op.Div(rows, ctx.op.Unsqueeze(ctx.op.Gather(freq, flat, axis=0), [1]))
    if not (isinstance(padding_idx, int) and padding_idx < 0):
        # Rows at padding_idx get no gradient (torch skips them).
        skip = ctx.op.Equal(flat, ctx.scalar(padding_idx, torch.int64))
        rows = ctx.op.Where(ctx.op.Unsqueeze(skip, [1]), ctx.const(0.0, work), rows)
    zeros = ctx.op.Expand(ctx.const(0.0, work), ctx.op.Concat(count, width, axis=0))
    grad = ctx.op.ScatterND(zeros, ctx.op.Unsqueeze(flat, [1]), rows, reduction="add")
    return ctx.cast(grad, ctx.dtype(grad_output))


# ---------------------------------------------------------------------------- norms
def _norm_input_grad(ctx, g, x_hat, rstd, axes):
    """rstd * (g - mean(g) - x_hat * mean(g * x_hat)), means over ``axes``."""
    mean_g = reduce(ctx, "ReduceMean", g, axes, 1)
    mean_gx = reduce(ctx, "ReduceMean", ctx.op.Mul(g, x_hat), axes, 1)
    return ctx.op.Mul(rstd, ctx.op.Sub(ctx.op.Sub(g, mean_g), ctx.op.Mul(x_hat, mean_gx)))


def native_layer_norm_backward(
    ctx, grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask
):
    rank = ctx.rank(input)
    axes = list(range(rank - len(normalized_shape), rank))
    batch_axes = list(range(rank - len(normalized_shape)))
    go = _work(ctx, grad_out, _FLOATS)
    work = ctx.dtype(go)
    x = ctx.cast(input, work)
    x_hat = ctx.op.Mul(ctx.op.Sub(x, ctx.cast(mean, work)), ctx.cast(rstd, work))
    want_input, want_weight, want_bias = _wanted(ctx, output_mask)
    dtype = ctx.dtype(grad_out)
    grad_input = grad_weight = grad_bias = None
    if want_input:
        g = go if weight is None else ctx.op.Mul(go, ctx.cast(weight, work))
        if axes:
            grad_input = _norm_input_grad(ctx, g, x_hat, ctx.cast(rstd, work), axes)
        else:  # normalising over no axis: x_hat is identically 0, so is its gradient
            grad_input = ctx.op.Sub(g, g)
        grad_input = ctx.cast(grad_input, dtype)

    def batch_sum(v):
        return ctx.op.ReduceSum(v, batch_axes, keepdims=0) if batch_axes else ctx.op.Identity(v)

    if want_weight and weight is not None:
        grad_weight = ctx.cast(batch_sum(ctx.op.Mul(go, x_hat)), ctx.dtype(weight))
    if want_bias and bias is not None:
        grad_bias = ctx.cast(batch_sum(go), ctx.dtype(bias))
    return grad_input, grad_weight, grad_bias


def native_group_norm_backward(
    ctx, grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask
):
    go = _work(ctx, grad_out, _FLOATS)
    work = ctx.dtype(go)
    x = ctx.cast(input, work)
    channels = ctx.ints([C])
    batch = ctx.ints([N])
    # (N, C, HxW) view, and the (N, G, C/G * HxW) view the statistics were taken over.
    per_channel_shape = ctx.op.Concat(batch, channels, ctx.const([-1], torch.int64), axis=0)
    grouped_shape = ctx.op.Concat(batch, ctx.const([group, -1], torch.int64), axis=0)
    stats_shape = ctx.op.Concat(batch, ctx.const([group, 1], torch.int64), axis=0)
    mean_g = ctx.op.Reshape(ctx.cast(mean, work), stats_shape)
    rstd_g = ctx.op.Reshape(ctx.cast(rstd, work), stats_shape)
    x_hat = ctx.op.Mul(ctx.op.Sub(ctx.op.Reshape(x, grouped_shape), mean_g), rstd_g)
    x_hat_c = ctx.op.Reshape(x_hat, per_channel_shape)  # (N, C, HxW)
    go_c = ctx.op.Reshape(go, per_channel_shape)
    want_input, want_weight, want_bias = _wanted(ctx, output_mask)
    dtype = ctx.dtype(grad_out)
    grad_input = grad_weight = grad_bias = None
    if want_input:
        g = go_c
        if weight is not None:
            g = ctx.op.Mul(g, ctx.op.Unsqueeze(ctx.cast(weight, work), [1]))
        g = ctx.op.Reshape(g, grouped_shape)
        grad_input = _norm_input_grad(ctx, g, x_hat, rstd_g, [2])
        grad_input = ctx.cast(ctx.op.Reshape(grad_input, ctx.op.Shape(input)), dtype)
    if want_weight:
        summed = ctx.op.ReduceSum(ctx.op.Mul(go_c, x_hat_c), [0, 2], keepdims=0)
        grad_weight = ctx.cast(summed, dtype if weight is None else ctx.dtype(weight))
    if want_bias:
        grad_bias = ctx.cast(
            ctx.op.ReduceSum(go_c, [0, 2], keepdims=0),
            dtype if weight is None else ctx.dtype(weight),
        )
    return grad_input, grad_weight, grad_bias


#: The overloads this module translates, for ``register_backward_translations``.
BACKWARD_TRANSLATIONS = {
    aten.convolution_backward.default: convolution_backward,
    aten.max_pool2d_with_indices_backward.default: max_pool2d_with_indices_backward,
    aten.avg_pool2d_backward.default: avg_pool2d_backward,
    aten._adaptive_avg_pool2d_backward.default: adaptive_avg_pool2d_backward,
    aten.embedding_dense_backward.default: embedding_dense_backward,
    aten.native_layer_norm_backward.default: native_layer_norm_backward,
    aten.native_group_norm_backward.default: native_group_norm_backward,
}


def register_backward_translations(registry: Registry | None = None) -> None:
    """Install this module's backward translations into ``registry`` (default: the global
    one), replacing whatever translates those overloads there."""
    registry = DEFAULT_REGISTRY if registry is None else registry
    for target, fn in BACKWARD_TRANSLATIONS.items():
        registry.add(target, Translation(fn=fn, target=target, custom=True))
