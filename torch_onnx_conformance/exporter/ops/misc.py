"""Translations that belong to no op family: fractional max pooling, segment reductions, resize.

Fractional max pooling is deterministic once ``random_samples`` is an input: the window starts
follow torch's interval rule, ``start[i] = trunc((i + u) * a) - trunc(u * a)`` with
``a = (in - k) / (out - 1)``, and the last window always ends at the input's end.
"""

from __future__ import annotations

import math

import torch

from torch_onnx_conformance.exporter import _dtypes
from torch_onnx_conformance.exporter.ops import _reduce as R
from torch_onnx_conformance.exporter.ops import _shape as S
from torch_onnx_conformance.exporter.ops._nn_helpers import FLOATS, compute_dtype, static_ints
from torch_onnx_conformance.exporter.ops._registry import translates
from torch_onnx_conformance.exporter.ops._shape import dim_value

aten = torch.ops.aten

_MAX_DTYPES = frozenset({torch.float32, torch.float64, torch.float16})


def _window_starts(ctx, sample, size, kernel, out):
    """(N, C, out) int64 window starts along one spatial dim for per-plane samples (N, C).

    ``size`` is a 1-D int64 value (constant when static, a Shape slice when dynamic).
    """
    last = ctx.op.Sub(size, ctx.const([kernel], torch.int64))
    if out <= 1:
        return ctx.op.Expand(last, ctx.op.Concat(ctx.op.Shape(sample), [out], axis=0))
    # torch computes the stride and products in float (float32 for the half types).
    alpha = ctx.op.Div(ctx.op.Cast(last, to=1), ctx.const([float(out - 1)], torch.float32))
    u = ctx.op.Unsqueeze(sample, [-1])
    steps = ctx.const(list(range(out)), torch.float32)
    scaled = ctx.op.Cast(ctx.op.Mul(ctx.op.Add(steps, u), alpha), to=7)
    shift = ctx.op.Cast(ctx.op.Mul(u, alpha), to=7)
    starts = ctx.op.Sub(scaled, shift)
    is_last = ctx.const([False] * (out - 1) + [True], torch.bool)
    return ctx.op.Where(is_last, last, starts)


def _fractional_max_pool(ctx, x, kernel_size, output_size, random_samples, nd, sample_order):
    batched = ctx.rank(x) == nd + 2
    dtype = ctx.dtype(x)
    first_spatial = 2 if batched else 1
    sizes = [dim_value(ctx, x, first_spatial + d) for d in range(nd)]
    if not batched:
        x = ctx.op.Unsqueeze(x, [0])
    kernel = static_ints(list(kernel_size), "kernel_size")
    outs = static_ints(list(output_size), "output_size")
    samples = ctx.cast(random_samples, torch.float32)
    # Row-major strides of the flattened spatial plane.
    strides = [ctx.const([1], torch.int64)] * nd
    for d in range(nd - 2, -1, -1):
        strides[d] = ctx.op.Mul(strides[d + 1], sizes[d + 1])
    flat_index = None
    for d in range(nd):
        sample = ctx.op.Gather(samples, ctx.const(sample_order[d], torch.int64), axis=2)
        starts = _window_starts(ctx, sample, sizes[d], kernel[d], outs[d])  # (N, C, out_d)
        offsets = ctx.const(list(range(kernel[d])), torch.int64)
        # (N, C, 1.., out_d, 1.., 1.., k_d, 1..): dim d of the outputs and dim d of the window.
        starts = ctx.op.Reshape(
            starts, [0, 0] + [outs[d] if e == d else 1 for e in range(nd)] + [1] * nd
        )
        offsets = ctx.op.Reshape(offsets, [kernel[d] if e == d else 1 for e in range(nd)])
        part = ctx.op.Mul(ctx.op.Add(starts, offsets), strides[d])
        flat_index = part if flat_index is None else ctx.op.Add(flat_index, part)
    # Every Reshape names its last size instead of -1: with an empty batch or channel dim, a
    # copied 0 beside -1 leaves -1 undetermined, which ONNX rejects.
    window_count = math.prod(outs) * math.prod(kernel)
    windows = ctx.op.Reshape(flat_index, [0, 0, window_count])
    work = compute_dtype(dtype, _MAX_DTYPES)
    plane = ctx.op.ReduceProd(ctx.op.Concat(*sizes, axis=0), keepdims=1)
    flat_x = ctx.op.Reshape(
        ctx.cast(x, work), ctx.op.Concat(ctx.const([0, 0], torch.int64), plane, axis=0)
    )
    values = ctx.op.GatherElements(flat_x, windows, axis=2)
    values = ctx.op.Reshape(values, [0, 0, *outs, math.prod(kernel)])
    windows = ctx.op.Reshape(windows, [0, 0, *outs, math.prod(kernel)])
    # ArgMax keeps the first maximum, as torch's strict ``>`` scan does.
    pick = ctx.op.ArgMax(values, axis=-1, keepdims=1)
    # Reshape, not Squeeze: onnxruntime's ArgMax keeps the reduced axis whole on an empty input.
    picked = [0, 0, *outs]
    out = ctx.op.Reshape(ctx.op.GatherElements(values, pick, axis=-1), picked)
    indices = ctx.op.Reshape(ctx.op.GatherElements(windows, pick, axis=-1), picked)
    out = ctx.cast(out, dtype)
    if not batched:
        out, indices = ctx.op.Squeeze(out, [0]), ctx.op.Squeeze(indices, [0])
    return out, indices


@translates(aten.fractional_max_pool2d.default)
def fractional_max_pool2d(ctx, self, kernel_size, output_size, random_samples):
    # random_samples[..., 0] drives the width, [..., 1] the height.
    return _fractional_max_pool(ctx, self, kernel_size, output_size, random_samples, 2, [1, 0])


@translates(aten.fractional_max_pool3d.default)
def fractional_max_pool3d(ctx, self, kernel_size, output_size, random_samples):
    return _fractional_max_pool(ctx, self, kernel_size, output_size, random_samples, 3, [0, 1, 2])


# ------------------------------------------------------------------------------ segment_reduce
_SEGMENT_FILL = {"sum": 0.0, "mean": 0.0, "prod": 1.0, "max": -math.inf, "min": math.inf}
_SEGMENT_REDUCE = {
    "sum": "ReduceSum",
    "mean": "ReduceSum",
    "prod": "ReduceProd",
    "max": "ReduceMax",
    "min": "ReduceMin",
}
_SEGMENT_COMBINE = {"sum": "Add", "mean": "Add", "prod": "Mul", "max": "Max", "min": "Min"}


@translates(aten.segment_reduce.default)
def segment_reduce(
    ctx,
    data,
    reduce,
    *,
    lengths=None,
    indices=None,
    offsets=None,
    axis=0,
    unsafe=False,
    initial=None,
):
    if reduce not in _SEGMENT_REDUCE:
        raise NotImplementedError(
            f"segment_reduce(reduce={reduce!r}) is not supported; use one of "
            f"{sorted(_SEGMENT_REDUCE)}."
        )
    if lengths is None and offsets is None:
        raise NotImplementedError(
            "segment_reduce needs `lengths` or `offsets` (torch does not support `indices` either)."
        )
    rank = ctx.rank(data)
    axis = S.axis(axis, rank)
    trailing = rank - axis - 1
    dtype = ctx.dtype(data)
    work = compute_dtype(dtype, FLOATS)
    x = ctx.cast(data, work)
    # Segment s covers [starts[..., s], ends[..., s]) along `axis`.
    if lengths is not None:
        lengths = ctx.cast(lengths, torch.int64)
        ends = ctx.op.CumSum(lengths, ctx.const(-1, torch.int64))
        starts = ctx.op.Sub(ends, lengths)
    else:
        offsets = ctx.cast(offsets, torch.int64)
        starts = ctx.op.Slice(offsets, [0], [-1], [-1])
        ends = ctx.op.Slice(offsets, [1], [_BIG], [-1])
    size = ctx.op.Squeeze(dim_value(ctx, data, axis), [0])
    positions = ctx.op.Range(ctx.const(0, torch.int64), size, ctx.const(1, torch.int64))
    inside = ctx.op.And(
        ctx.op.GreaterOrEqual(positions, ctx.op.Unsqueeze(starts, [-1])),
        ctx.op.Less(positions, ctx.op.Unsqueeze(ends, [-1])),
    )  # (lead..., S, D)
    trail_axes = [-1 - i for i in range(trailing)]
    mask = ctx.op.Unsqueeze(inside, sorted(trail_axes)) if trailing else inside
    spread = ctx.op.Where(
        mask, ctx.op.Unsqueeze(x, [axis]), ctx.scalar(_SEGMENT_FILL[reduce], work)
    )  # (lead..., S, D, trail...)
    out = _reduce_axis(ctx, _SEGMENT_REDUCE[reduce], spread, axis + 1)
    init = None if initial is None else ctx.scalar(float(initial), work)
    if init is not None:
        out = getattr(ctx.op, _SEGMENT_COMBINE[reduce])(out, init)
    if reduce == "mean":
        count = ctx.op.ReduceSum(
            ctx.op.Cast(inside, to=_dtypes.to_ir(work)), ctx.const([-1], torch.int64), keepdims=0
        )
        if trailing:
            count = ctx.op.Unsqueeze(count, sorted(trail_axes))
        mean = ctx.op.Div(out, count)  # 0 / 0 = nan for an empty segment without `initial`
        if init is not None:
            mean = ctx.op.Where(ctx.op.Equal(count, ctx.scalar(0, work)), init, mean)
        out = mean
    return ctx.cast(out, dtype)


_BIG = 2**62


def _reduce_axis(ctx, op_type, x, axis):
    return R.reduce(ctx, op_type, x, [axis], 0)


# ----------------------------------------------------------------------------------- resize
@translates(aten.resize.default)
def resize(ctx, self, size, *, memory_format=None):
    """The first prod(size) elements of the contiguous data, viewed as ``size``.

    Growing storage leaves the new elements uninitialised in torch; they come out as zeros here.
    """
    sizes = list(size)
    flat = ctx.op.Reshape(self, [-1])
    if all(isinstance(s, int) for s in sizes):
        count = ctx.const([math.prod(sizes)], torch.int64)
    else:
        count = ctx.op.ReduceProd(ctx.ints(sizes), keepdims=1)
    missing = ctx.op.Max(ctx.op.Sub(count, ctx.op.Size(self)), ctx.const([0], torch.int64))
    zeros = ctx.op.Expand(ctx.scalar(0, ctx.dtype(self)), missing)
    data = ctx.op.Slice(ctx.op.Concat(flat, zeros, axis=0), [0], count)
    return ctx.op.Reshape(data, ctx.ints(sizes) if sizes else ctx.const([], torch.int64))


# ------------------------------------------------------------------ chunked linear cross entropy
def _custom_op(namespace, name):
    """A torch custom op packet, or None when this torch build does not define it."""
    try:
        import torch.nn.modules.linear_cross_entropy  # noqa: F401  (registers torch_nn ops)
    except ImportError:
        return None
    return getattr(getattr(torch.ops, namespace), name, None)


def _linear_cross_entropy(
    ctx, input, linear_weight, target, linear_bias, weight, reduction, ignore_index, smoothing
):
    """Loss of cross_entropy(linear(input, W, b), target); chunking only bounds torch's memory."""
    dtype = ctx.dtype(input)
    work = compute_dtype(dtype, FLOATS)
    unbatched = ctx.rank(input) == 1
    x = ctx.cast(input, work)
    if unbatched:
        x = ctx.op.Unsqueeze(x, [0])
        target = ctx.op.Unsqueeze(target, [0])
    logits = ctx.op.MatMul(x, ctx.op.Transpose(ctx.cast(linear_weight, work), perm=[1, 0]))
    if linear_bias is not None:
        logits = ctx.op.Add(logits, ctx.cast(linear_bias, work))
    logp = ctx.op.LogSoftmax(logits, axis=-1)  # (N, C)
    classes = ctx.op.Cast(dim_value(ctx, linear_weight, 0), to=_dtypes.to_ir(work))
    class_weight = None if weight is None else ctx.cast(weight, work)
    weighted_logp = logp if class_weight is None else ctx.op.Mul(logp, class_weight)
    axis_c = ctx.const([-1], torch.int64)
    if ctx.dtype(target).is_floating_point:  # class probabilities
        probs = ctx.cast(target, work)
        if smoothing:
            probs = ctx.op.Add(
                ctx.op.Mul(probs, ctx.scalar(1.0 - smoothing, work)),
                ctx.op.Div(ctx.scalar(float(smoothing), work), classes),
            )
        loss = ctx.op.Neg(ctx.op.ReduceSum(ctx.op.Mul(weighted_logp, probs), axis_c, keepdims=0))
        denominator = ctx.op.Cast(ctx.op.Shape(loss), to=_dtypes.to_ir(work))
    else:
        labels = ctx.cast(target, torch.int64)
        valid = ctx.op.Not(ctx.op.Equal(labels, ctx.const(int(ignore_index), torch.int64)))
        safe = ctx.op.Where(valid, labels, ctx.const(0, torch.int64))
        keep = ctx.op.Cast(valid, to=_dtypes.to_ir(work))
        picked = ctx.op.Squeeze(
            ctx.op.GatherElements(logp, ctx.op.Unsqueeze(safe, [-1]), axis=1), [-1]
        )
        sample_weight = keep
        if class_weight is not None:
            sample_weight = ctx.op.Mul(keep, ctx.op.Gather(class_weight, safe, axis=0))
        loss = ctx.op.Neg(ctx.op.Mul(picked, sample_weight))
        if smoothing:
            spread = ctx.op.Neg(
                ctx.op.Mul(ctx.op.ReduceSum(weighted_logp, axis_c, keepdims=0), keep)
            )
            loss = ctx.op.Add(
                ctx.op.Mul(loss, ctx.scalar(1.0 - smoothing, work)),
                ctx.op.Div(ctx.op.Mul(spread, ctx.scalar(float(smoothing), work)), classes),
            )
        denominator = ctx.op.ReduceSum(sample_weight, keepdims=0)
    if reduction == "none":
        out = ctx.op.Squeeze(loss, [0]) if unbatched else loss
    elif reduction == "sum":
        out = ctx.op.ReduceSum(loss, keepdims=0)
    elif reduction == "mean":
        out = ctx.op.Div(ctx.op.ReduceSum(loss, keepdims=0), ctx.op.Reshape(denominator, []))
    else:
        raise NotImplementedError(
            f"linear_cross_entropy(reduction={reduction!r}); use 'none', 'mean' or 'sum'."
        )
    return ctx.cast(out, dtype)


def _no_grad(ctx, index):
    meta = ctx.out[index]
    return ctx.const(torch.zeros(list(meta.shape), dtype=torch.float32), meta.dtype)


_CHUNKED = _custom_op("torch_nn", "_linear_cross_entropy_batch_chunked")
_CHUNKED_NONE = _custom_op("torch_nn", "_linear_cross_entropy_batch_chunked_no_reduction")

if _CHUNKED is not None:

    @translates(_CHUNKED.default)
    def linear_cross_entropy_batch_chunked(
        ctx,
        input,
        linear_weight,
        target,
        linear_bias,
        weight,
        reduction,
        ignore_index,
        label_smoothing,
        batch_chunk_size,
        acc_policy,
        acc_dtype,
        allow_retain_graph,
        compute_input_grad,
        compute_linear_weight_grad,
        compute_linear_bias_grad,
    ):
        if compute_input_grad or compute_linear_weight_grad or compute_linear_bias_grad:
            raise NotImplementedError(
                "linear_cross_entropy's chunked op was traced with gradients requested; an "
                "inference export needs them off: export under torch.no_grad() or with inputs "
                "that do not require grad."
            )
        loss = _linear_cross_entropy(
            ctx,
            input,
            linear_weight,
            target,
            linear_bias,
            weight,
            reduction,
            ignore_index,
            float(label_smoothing),
        )
        return loss, _no_grad(ctx, 1), _no_grad(ctx, 2), _no_grad(ctx, 3)


if _CHUNKED_NONE is not None:

    @translates(_CHUNKED_NONE.default)
    def linear_cross_entropy_batch_chunked_no_reduction(
        ctx,
        input,
        linear_weight,
        target,
        linear_bias,
        weight,
        ignore_index,
        batch_chunk_size,
        acc_policy,
        acc_dtype,
    ):
        return _linear_cross_entropy(
            ctx, input, linear_weight, target, linear_bias, weight, "none", ignore_index, 0.0
        )


# ----------------------------------------------------------------------------------- _chunk_cat
@translates(aten._chunk_cat.default)
def chunk_cat(ctx, tensors, dim, num_chunks):
    """Each tensor zero-padded along ``dim`` to a multiple of num_chunks, split into num_chunks
    rows of its trailing elements, and the rows of all tensors joined side by side."""
    dim = S.axis(dim, ctx.rank(tensors[0]))
    n = ctx.const([num_chunks], torch.int64)
    rows = []
    for t in tensors:
        rank = ctx.rank(t)
        size = dim_value(ctx, t, dim)
        padded = ctx.op.Mul(
            ctx.op.Div(ctx.op.Add(size, ctx.const([num_chunks - 1], torch.int64)), n), n
        )
        zeros_before = ctx.const([0] * rank, torch.int64)
        after = ctx.op.Concat(
            ctx.const([0] * dim, torch.int64),
            ctx.op.Sub(padded, size),
            ctx.const([0] * (rank - dim - 1), torch.int64),
            axis=0,
        )
        padded_t = ctx.op.Pad(t, ctx.op.Concat(zeros_before, after, axis=0))
        rows.append(ctx.op.Reshape(padded_t, [0] * dim + [num_chunks, -1]))
    return ctx.op.Concat(*rows, axis=dim + 1)
