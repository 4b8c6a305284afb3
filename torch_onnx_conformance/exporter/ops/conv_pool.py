"""Convolution and pooling: Conv/ConvTranspose, Max/AveragePool, adaptive pooling, im2col/col2im,
max_unpool, and the backward ops of these layers that are core ATen.

onnxruntime's Conv, ConvTranspose, AveragePool and global pools only have float32 kernels
(float16 runs through its own casts), so float64 computes in float32 and casts back. Resizing
lives in resample.py.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import torch

from torch_onnx_conformance.exporter.ops import _kernels
from torch_onnx_conformance.exporter.ops._nn_helpers import as_int_list, static_ints, to_work
from torch_onnx_conformance.exporter.ops._reduce import reduce
from torch_onnx_conformance.exporter.ops._registry import translates
from torch_onnx_conformance.exporter.ops._shape import (
    concat_ints,
    dim_value,
    prod_of_dims,
    reshape,
    same_size,
    shape_value,
)

aten = torch.ops.aten

_MAXPOOL_DTYPES = frozenset({torch.float32, torch.float64, torch.float16, torch.int8, torch.uint8})


def _batched(ctx, x, n_spatial, original):
    """(C, *spatial) inputs get a batch axis for the ONNX op; returns x and whether it did.

    ``original`` is the FX input ``x`` was cast from (casts carry no FX metadata)."""
    if ctx.rank(original) == n_spatial + 1:
        return ctx.op.Unsqueeze(x, [0]), True
    return x, False


def _unbatch(ctx, y, added):
    return ctx.op.Squeeze(y, [0]) if added else y


# ------------------------------------------------------------------------------ convolution
def _same_pads(kernel, dilation):
    begin, end = [], []
    for k, d in zip(kernel, dilation):
        total = d * (k - 1)
        begin.append(total // 2)
        end.append(total - total // 2)
    return begin + end


def _convolution(
    ctx, input, weight, bias, stride, padding, dilation, transposed, output_padding, groups
):
    n = ctx.rank(weight) - 2
    stride = static_ints(as_int_list(stride, n), "stride")
    dilation = static_ints(as_int_list(dilation, n), "dilation")
    groups = static_ints([groups], "groups")[0]
    x, dtype = to_work(ctx, input)
    work = ctx.dtype(x)
    w = ctx.cast(weight, work)
    b = None if bias is None else ctx.cast(bias, work)
    x, added = _batched(ctx, x, n, input)
    if isinstance(padding, str):
        kernel = ctx.static_shape(weight)
        if padding == "valid":
            pads = [0] * (2 * n)
        elif kernel is not None:
            pads = _same_pads(kernel[2:], dilation)
        else:
            # A kernel of dynamic size: pad d*(k-1) in total, the odd one at the end (as torch
            # does), with sizes computed in the graph. (onnxruntime's SAME_UPPER rejects
            # dilation.)
            total = ctx.op.Mul(
                ctx.op.Sub(ctx.op.Shape(weight, start=2), ctx.const(1, torch.int64)),
                ctx.const(dilation, torch.int64),
            )
            begin = ctx.op.Div(total, ctx.const(2, torch.int64))
            zeros = ctx.const([0, 0], torch.int64)
            x = ctx.op.Pad(x, ctx.op.Concat(zeros, begin, zeros, ctx.op.Sub(total, begin), axis=0))
            pads = [0] * (2 * n)
    else:
        pads = static_ints(as_int_list(padding, n), "padding") * 2
    if transposed:
        out_pad = static_ints(as_int_list(output_padding, n), "output_padding")
        if all(o < s for o, s in zip(out_pad, stride)):
            y = ctx.op.ConvTranspose(
                x,
                w,
                b,
                strides=stride,
                pads=pads,
                dilations=dilation,
                group=groups,
                output_padding=out_pad if any(out_pad) else None,
            )
        else:
            # torch allows output_padding up to max(stride, dilation) - 1, onnxruntime only
            # below stride. Extra output rows come from cropping less at the end; rows beyond
            # the full transposed result are zeros (plus bias), so they are padded on.
            begin = pads[:n]
            end = [max(p - o, 0) for p, o in zip(begin, out_pad)]
            grow = [max(o - p, 0) for p, o in zip(begin, out_pad)]
            y = ctx.op.ConvTranspose(
                x, w, None, strides=stride, pads=begin + end, dilations=dilation, group=groups
            )
            if any(grow):
                y = ctx.op.Pad(y, ctx.const([0] * (n + 2) + [0, 0] + grow, torch.int64))
            if b is not None:
                y = ctx.op.Add(y, ctx.op.Reshape(b, [-1] + [1] * n))
    else:
        # kernel_shape repeats the weight's spatial dims: onnxruntime's Conv reads it instead
        # of the weight's shape when it plans the kernel (measured faster at ORT_ENABLE_ALL).
        kernel = ctx.static_shape(weight)
        y = ctx.op.Conv(
            x,
            w,
            b,
            strides=stride,
            pads=pads,
            dilations=dilation,
            group=groups,
            kernel_shape=list(kernel[2:]) if kernel is not None else None,
        )
    return ctx.cast(_unbatch(ctx, y, added), dtype)


@translates(aten.convolution.default)
def convolution(
    ctx, input, weight, bias, stride, padding, dilation, transposed, output_padding, groups
):
    return _convolution(
        ctx, input, weight, bias, stride, padding, dilation, transposed, output_padding, groups
    )


@translates(aten._convolution.default, aten._convolution.deprecated)
def convolution_private(
    ctx, input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, *flags
):
    return _convolution(
        ctx, input, weight, bias, stride, padding, dilation, transposed, output_padding, groups
    )


@translates(
    aten.conv1d.default,
    aten.conv2d.default,
    aten.conv3d.default,
    aten.conv1d.padding,
    aten.conv2d.padding,
    aten.conv3d.padding,
)
def conv(ctx, input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return _convolution(ctx, input, weight, bias, stride, padding, dilation, False, 0, groups)


@translates(aten.conv_transpose1d.default, aten.conv_transpose2d.input, aten.conv_transpose3d.input)
def conv_transpose(
    ctx, input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1
):
    return _convolution(
        ctx, input, weight, bias, stride, padding, dilation, True, output_padding, groups
    )


# ---------------------------------------------------------------------------------- pooling
def _pool_args(n, kernel_size, stride, padding, dilation=1):
    kernel = static_ints(as_int_list(kernel_size, n), "kernel_size")
    stride = (
        static_ints(as_int_list(stride, n), "stride") if stride not in (None, [], ()) else kernel
    )
    pads = static_ints(as_int_list(padding, n), "padding") * 2
    dilation = static_ints(as_int_list(dilation, n), "dilation")
    return kernel, stride, pads, dilation


def _ceil_output_sizes(ctx, self, n, kernel, strides, pads, dilations):
    """torch's ceil_mode output sizes: ceil division, except that a last window starting
    past the input and its left padding is dropped (onnxruntime keeps it)."""
    rank = ctx.rank(self)
    shape = ctx.shape(self)
    sizes = []
    static = True
    for i in range(n):
        size = shape[rank - n + i]
        k, s, p, d = kernel[i], strides[i], pads[i], dilations[i]
        if isinstance(size, int):
            out = (size + 2 * p - d * (k - 1) - 1 + s - 1) // s + 1
            if (out - 1) * s >= size + p:
                out -= 1
            sizes.append(ctx.const([out], torch.int64))
        else:
            static = False
            length = dim_value(ctx, self, rank - n + i)
            c = ctx.const
            out = ctx.op.Add(
                ctx.op.Div(
                    ctx.op.Add(length, c([2 * p - d * (k - 1) - 1 + s - 1], torch.int64)),
                    c([s], torch.int64),
                ),
                c([1], torch.int64),
            )
            past = ctx.op.GreaterOrEqual(
                ctx.op.Mul(ctx.op.Sub(out, c([1], torch.int64)), c([s], torch.int64)),
                ctx.op.Add(length, c([p], torch.int64)),
            )
            sizes.append(ctx.op.Sub(out, ctx.cast(past, torch.int64)))
    del static
    return ctx.op.Concat(*sizes, axis=0) if len(sizes) > 1 else sizes[0]


def _crop_spatial(ctx, y, n, sizes):
    """Keep the first ``sizes`` positions of the last n axes of an (N, C, *spatial) tensor."""
    return ctx.op.Slice(
        y, ctx.const([0] * n, torch.int64), sizes, ctx.const(list(range(2, 2 + n)), torch.int64)
    )


def _max_pool(ctx, n, self, kernel_size, stride, padding, dilation, ceil_mode, with_indices):
    kernel, strides, pads, dilations = _pool_args(n, kernel_size, stride, padding, dilation)
    x, dtype = to_work(ctx, self, _MAXPOOL_DTYPES)
    x, added = _batched(ctx, x, n, self)
    attrs = dict(
        kernel_shape=kernel,
        strides=strides,
        pads=pads,
        dilations=dilations,
        ceil_mode=int(bool(ceil_mode)),
    )
    if with_indices:
        y, flat = ctx.op.MaxPool(x, _outputs=2, **attrs)
        flat.dtype = ir.DataType.INT64  # the builder gives every output the input's dtype
    else:
        y, flat = ctx.op.MaxPool(x, **attrs), None
    if ceil_mode:
        sizes = _ceil_output_sizes(ctx, self, n, kernel, strides, pads, dilations)
        y = _crop_spatial(ctx, y, n, sizes)
        flat = None if flat is None else _crop_spatial(ctx, flat, n, sizes)
    y = ctx.cast(_unbatch(ctx, y, added), dtype)
    if flat is None:
        return y
    # ONNX indexes into the whole (N, C, *spatial) tensor, torch into each channel's plane.
    plane = prod_of_dims(ctx, self, ctx.rank(self) - n)
    return y, _unbatch(ctx, ctx.op.Mod(flat, plane), added)


def _max_pool_translation(n, with_indices):
    def translation(ctx, self, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
        return _max_pool(
            ctx, n, self, kernel_size, stride, padding, dilation, ceil_mode, with_indices
        )

    return translation


for _n in (1, 2, 3):
    translates(getattr(aten, f"max_pool{_n}d").default)(_max_pool_translation(_n, False))
    translates(getattr(aten, f"max_pool{_n}d_with_indices").default)(
        _max_pool_translation(_n, True)
    )


def _avg_pool(
    ctx, n, self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
):
    kernel, strides, pads, dilations = _pool_args(n, kernel_size, stride, padding)
    x, dtype = to_work(ctx, self)
    x, added = _batched(ctx, x, n, self)
    if divisor_override:
        # The window sum divided by a fixed number: a depthwise convolution with ones.
        y = _window_sum(ctx, x, n, kernel, strides, pads, ceil_mode)
        y = ctx.op.Div(y, ctx.scalar(float(divisor_override), ctx.dtype(x)))
    else:
        y = ctx.op.AveragePool(
            x,
            kernel_shape=kernel,
            strides=strides,
            pads=pads,
            ceil_mode=int(bool(ceil_mode)),
            count_include_pad=int(bool(count_include_pad)),
        )
    if ceil_mode:
        y = _crop_spatial(
            ctx, y, n, _ceil_output_sizes(ctx, self, n, kernel, strides, pads, dilations)
        )
    return ctx.cast(_unbatch(ctx, y, added), dtype)


def _window_sum(ctx, x, n, kernel, strides, pads, ceil_mode):
    """Sum over pooling windows of an (N, C, *spatial) tensor, via a ones-kernel Conv per plane.

    Zero padding leaves sums unchanged, so ceil_mode is extra padding at the end (the caller
    crops to torch's output size)."""
    work = ctx.dtype(x)
    planes = ctx.op.Reshape(
        x, ctx.op.Concat(ctx.const([-1, 1], torch.int64), ctx.op.Shape(x, start=2), axis=0)
    )
    ones = ctx.const(np.ones([1, 1, *kernel], dtype=np.float32), work)
    if ceil_mode:
        pads = pads[:n] + [p + s - 1 for p, s in zip(pads[n:], strides)]
    summed = ctx.op.Conv(planes, ones, strides=strides, pads=pads)
    return reshape(
        ctx,
        summed,
        ctx.op.Concat(ctx.op.Shape(x, start=0, end=2), ctx.op.Shape(summed, start=2), axis=0),
        allowzero=True,
    )


def _avg_pool_translation(n):
    def translation(
        ctx,
        self,
        kernel_size,
        stride=(),
        padding=0,
        ceil_mode=False,
        count_include_pad=True,
        divisor_override=None,
    ):
        return _avg_pool(
            ctx,
            n,
            self,
            kernel_size,
            stride,
            padding,
            ceil_mode,
            count_include_pad,
            divisor_override,
        )

    return translation


for _n in (1, 2, 3):
    translates(getattr(aten, f"avg_pool{_n}d").default)(_avg_pool_translation(_n))


# ------------------------------------------------------------------------- adaptive pooling
def _windows(out_size: int, in_size: int) -> list[tuple[int, int]]:
    """torch's adaptive pooling windows: [floor(i*in/out), ceil((i+1)*in/out))."""
    return [
        ((i * in_size) // out_size, -(-((i + 1) * in_size) // out_size)) for i in range(out_size)
    ]


def _window_mask(ctx, x, axis, out_size):
    """(out, in) bool mask of which input positions each output cell pools over.

    ``out_size`` is an int or a 0-d int64 value (a symbolic size)."""
    in_size = ctx.shape(x)[axis]
    if isinstance(in_size, int) and isinstance(out_size, int):
        mask = np.zeros((out_size, in_size), dtype=bool)
        for i, (s, e) in enumerate(_windows(out_size, in_size)):
            mask[i, s:e] = True
        return ctx.const(mask, torch.bool)
    one = ctx.scalar(1, torch.int64)
    length = ctx.op.Squeeze(dim_value(ctx, x, axis), [0])
    out_ = ctx.scalar(out_size, torch.int64)
    cells = ctx.op.Unsqueeze(ctx.op.Range(ctx.scalar(0, torch.int64), out_, one), [1])
    start = ctx.op.Div(ctx.op.Mul(cells, length), out_)
    end = ctx.op.Div(
        ctx.op.Sub(ctx.op.Add(ctx.op.Mul(ctx.op.Add(cells, one), length), out_), one), out_
    )
    positions = ctx.op.Range(ctx.scalar(0, torch.int64), length, one)
    return ctx.op.And(ctx.op.GreaterOrEqual(positions, start), ctx.op.Less(positions, end))


def _move_last(ctx, x, axis, rank):
    perm = [i for i in range(rank) if i != axis] + [axis]
    back = [0] * rank
    for i, p in enumerate(perm):
        back[p] = i
    return perm, back


def _adaptive_out_sizes(ctx, self, output_size):
    """Output sizes as ints where known, else 0-d values; None marks an axis whose output size
    is the input's own (symbolic) size, which adaptive pooling leaves untouched."""
    n = len(output_size)
    shape = ctx.shape(self)[-n:]
    sizes = []
    for out, dim in zip(output_size, shape):
        if isinstance(out, ir.Value):
            meta = ctx.meta(out)
            if isinstance(dim, int):
                out = dim if meta is not None and same_size(meta, dim) else out
            elif meta is not None and same_size(meta, dim):
                out = None
        sizes.append(out)
    return sizes


def _global_poolable(shape, n_spatial: int) -> bool:
    """Whether GlobalAveragePool computes the mean over the last ``n_spatial`` axes of a tensor
    of ``shape``: batched (N, C, *spatial), and C and the spatial sizes known and nonzero
    (onnxruntime's kernel rejects an empty channel or plane, where torch pools anyway)."""
    return (
        shape is not None
        and len(shape) == n_spatial + 2
        and all(isinstance(s, int) and s > 0 for s in shape[1:])
    )


def _adaptive_avg(ctx, self, output_size):
    n = len(output_size)
    out_sizes = _adaptive_out_sizes(ctx, self, output_size)
    x, dtype = to_work(ctx, self, {torch.float32, torch.float64, torch.float16})
    rank = ctx.rank(self)
    axes = list(range(rank - n, rank))
    shape = ctx.shape(self)
    if all(o == 1 for o in out_sizes):
        if ctx.dtype(x) in (torch.float32, torch.float16) and _global_poolable(shape, n):
            # one op where a quantized model's DQ -> pool -> Q fuses (onnxruntime's
            # QLinearGlobalAveragePool; a ReduceMean stays float between them)
            return ctx.cast(ctx.op.GlobalAveragePool(x), dtype)
        return ctx.cast(reduce(ctx, "ReduceMean", x, axes, 1), dtype)
    in_sizes = shape[rank - n :]
    if (
        all(
            isinstance(s, int) and isinstance(o, int) and o > 0 and s % o == 0
            for s, o in zip(in_sizes, out_sizes)
        )
        and dtype != torch.float64
    ):
        kernel = [s // o for s, o in zip(in_sizes, out_sizes)]
        xb, added = _batched(ctx, ctx.cast(x, torch.float32), n, self)
        y = ctx.op.AveragePool(xb, kernel_shape=kernel, strides=kernel)
        return ctx.cast(_unbatch(ctx, y, added), dtype)
    if 0 in in_sizes or 0 in shape[: rank - n]:
        # Nothing to pool (and onnxruntime's broadcasting MatMul rejects empty batches).
        sizes = [
            dim_value(ctx, self, axis) if o is None else ctx.ints([o])
            for axis, o in zip(axes, out_sizes)
        ]
        out_shape = ctx.op.Concat(shape_value(ctx, self, 0, rank - n), *sizes, axis=0)
        return ctx.op.Expand(ctx.scalar(0, dtype), out_shape)
    # Separable: each axis is a matrix product with its (out, in) averaging matrix, applied
    # from the right for the last axis and from the left for the one before it.
    work = ctx.dtype(x)
    y = x
    for axis, out_size in zip(axes, out_sizes):
        if out_size is None:
            continue
        weights = _averaging_matrix(ctx, self, axis, out_size, work)
        if axis == rank - 1:
            y = ctx.op.MatMul(y, ctx.op.Transpose(weights, perm=[1, 0]))
        elif axis == rank - 2:
            y = ctx.op.MatMul(weights, y)
        else:
            perm, back = _move_last(ctx, y, axis, rank)
            moved = ctx.op.Transpose(y, perm=perm)
            y = ctx.op.Transpose(
                ctx.op.MatMul(moved, ctx.op.Transpose(weights, perm=[1, 0])), perm=back
            )
    return ctx.cast(y, dtype)


def _averaging_matrix(ctx, x, axis, out_size, dtype):
    in_size = ctx.shape(x)[axis]
    if isinstance(in_size, int) and isinstance(out_size, int):
        matrix = np.zeros((out_size, in_size), dtype=np.float64)
        for i, (s, e) in enumerate(_windows(out_size, in_size)):
            matrix[i, s:e] = 1.0 / (e - s)
        return ctx.const(matrix, dtype)
    mask = ctx.cast(_window_mask(ctx, x, axis, out_size), dtype)
    return ctx.op.Div(mask, reduce(ctx, "ReduceSum", mask, [1], 1))


@translates(
    aten.adaptive_avg_pool1d.default,
    aten.adaptive_avg_pool2d.default,
    aten.adaptive_avg_pool3d.default,
    aten._adaptive_avg_pool2d.default,
    aten._adaptive_avg_pool3d.default,
)
def adaptive_avg_pool(ctx, self, output_size):
    return _adaptive_avg(ctx, self, as_int_list(output_size, 1))


def _adaptive_max(ctx, self, output_size, want_indices):
    n = len(output_size)
    out_sizes = _adaptive_out_sizes(ctx, self, output_size)
    x, dtype = to_work(ctx, self, _MAXPOOL_DTYPES - {torch.int8, torch.uint8})
    work = ctx.dtype(x)
    rank = ctx.rank(self)
    axes = list(range(rank - n, rank))
    shape = ctx.shape(self)
    if all(o == 1 for o in out_sizes) and not want_indices:
        return ctx.cast(reduce(ctx, "ReduceMax", x, axes, 1), dtype), None
    in_sizes = shape[rank - n :]
    if all(
        isinstance(s, int) and isinstance(o, int) and o > 0 and s % o == 0
        for s, o in zip(in_sizes, out_sizes)
    ):
        kernel = [s // o for s, o in zip(in_sizes, out_sizes)]
        if want_indices:
            return _max_pool(ctx, n, self, kernel, kernel, 0, 1, False, True)
        return _max_pool(ctx, n, self, kernel, kernel, 0, 1, False, False), None
    # Separable, last axis first: a masked max over each window. For indices, every axis
    # keeps the argmax position of the axes already reduced (gathered along the next one).
    low = ctx.scalar(float("-inf"), work)
    y = x
    positions = []  # per reduced axis (last first): index tensors in the current layout
    for axis, out_size in reversed(list(zip(axes, out_sizes))):
        if out_size is None:  # identity axis: its windows are single positions
            out_size = ctx.op.Squeeze(dim_value(ctx, self, axis), [0])
        mask = _window_mask(ctx, self, axis, out_size)  # (out, in)
        perm, back = _move_last(ctx, y, axis, rank)
        moved = ctx.op.Transpose(y, perm=perm) if axis != rank - 1 else y
        spread = ctx.op.Where(mask, ctx.op.Unsqueeze(moved, [-2]), low)  # (..., out, in)
        pooled = reduce(ctx, "ReduceMax", spread, [-1], 0)
        if want_indices:
            arg = ctx.op.ArgMax(spread, axis=-1, keepdims=0)  # (..., out)
            moved_positions = []
            for p in positions:
                pm = ctx.op.Transpose(p, perm=perm) if axis != rank - 1 else p
                # Each earlier index tensor has `in` entries along this axis; keep the winner's.
                moved_positions.append(ctx.op.GatherElements(pm, arg, axis=-1))
            positions = [
                ctx.op.Transpose(p, perm=back) if axis != rank - 1 else p for p in moved_positions
            ]
            positions.append(ctx.op.Transpose(arg, perm=back) if axis != rank - 1 else arg)
        y = ctx.op.Transpose(pooled, perm=back) if axis != rank - 1 else pooled
    values = ctx.cast(y, dtype)
    if not want_indices:
        return values, None
    # positions[k] is the index along axes[-1-k]; flatten them row-major over the input plane.
    flat = None
    for k, axis in enumerate(reversed(axes)):
        term = positions[k]
        stride = prod_of_dims(ctx, self, axis + 1) if axis + 1 < rank else None
        if stride is not None:
            term = ctx.op.Mul(term, stride)
        flat = term if flat is None else ctx.op.Add(flat, term)
    return values, flat


def _adaptive_max_translation(ctx, self, output_size):
    want = 1 in ctx.used_outputs()
    values, indices = _adaptive_max(ctx, self, as_int_list(output_size, 1), want)
    return values, indices


translates(
    aten.adaptive_max_pool1d.default,
    aten.adaptive_max_pool2d.default,
    aten.adaptive_max_pool3d.default,
)(_adaptive_max_translation)


# ------------------------------------------------------------------------ im2col / col2im
def _one_hot_kernels(kernel):
    k = int(np.prod(kernel))
    weights = np.zeros([k, 1, *kernel], dtype=np.float32)
    for i, idx in enumerate(np.ndindex(*kernel)):
        weights[(i, 0, *idx)] = 1.0
    return weights


@translates(aten.im2col.default)
def im2col(ctx, self, kernel_size, dilation, padding, stride):
    # Each (sample, channel) plane convolved with one-hot kernels yields one output channel per
    # kernel offset: exactly unfold's column layout once the planes are regrouped.
    kernel, strides, pads, dilations = _pool_args(2, kernel_size, stride, padding, dilation)
    x, dtype = to_work(ctx, self)
    work = ctx.dtype(x)
    unbatched = ctx.rank(self) == 3
    n = ctx.const([1], torch.int64) if unbatched else dim_value(ctx, self, 0)
    channels = dim_value(ctx, self, -3)
    planes = reshape(
        ctx, x, ctx.op.Mul(n, channels), [1], shape_value(ctx, self, -2), allowzero=True
    )
    cols = ctx.op.Conv(
        planes,
        ctx.const(_one_hot_kernels(kernel), work),
        strides=strides,
        pads=pads,
        dilations=dilations,
    )
    k = int(np.prod(kernel))
    blocks = ctx.op.ReduceProd(ctx.op.Shape(cols, start=2), keepdims=1)
    rows = ctx.op.Mul(channels, ctx.const([k], torch.int64))
    out_meta = ctx.out.shape if isinstance(ctx.out, torch.Tensor) else ()
    if any(isinstance(d, int) and d == 0 for d in out_meta[:-1]):
        # An empty batch: onnxscript's optimizer rewrites this Reshape's symbolic last size to -1,
        # which a 0 beside it makes invalid, so build the empty result without a Reshape.
        shape = concat_ints(ctx, [] if unbatched else n, rows, blocks)
        return ctx.op.Expand(ctx.scalar(0, dtype), shape)
    out = reshape(ctx, cols, [] if unbatched else n, rows, blocks, allowzero=True)
    return ctx.cast(out, dtype)


@translates(aten.col2im.default)
def col2im(ctx, self, output_size, kernel_size, dilation, padding, stride):
    kernel, strides, pads, dilations = _pool_args(2, kernel_size, stride, padding, dilation)
    x, dtype = to_work(ctx, self)
    added = ctx.rank(self) == 2
    if added:
        x = ctx.op.Unsqueeze(x, [0])
    if ctx.has("Col2Im"):
        y = ctx.op.Col2Im(
            x,
            ctx.ints(list(output_size)),
            ctx.const(kernel, torch.int64),
            dilations=dilations,
            pads=pads,
            strides=strides,
        )
        return ctx.cast(_unbatch(ctx, y, added), dtype)
    # Opset 17: the adjoint of im2col, a transposed convolution with one-hot kernels per plane.
    out_hw = static_ints(list(output_size), "output_size")
    blocks = [
        (o + 2 * p - d * (k - 1) - 1) // s + 1
        for o, p, d, k, s in zip(out_hw, pads[:2], dilations, kernel, strides)
    ]
    k = int(np.prod(kernel))
    work = ctx.dtype(x)
    n = dim_value(ctx, self, 0) if not added else ctx.const([1], torch.int64)
    channels = ctx.op.Div(dim_value(ctx, self, -2), ctx.const([k], torch.int64))
    planes = reshape(ctx, x, ctx.op.Mul(n, channels), [k], blocks, allowzero=True)
    full = [
        s * (b - 1) + d * (kk - 1) + 1 - 2 * p
        for s, b, d, kk, p in zip(strides, blocks, dilations, kernel, pads[:2])
    ]
    extra = [o - f for o, f in zip(out_hw, full)]
    y = ctx.op.ConvTranspose(
        planes,
        ctx.const(_one_hot_kernels(kernel), work),
        strides=strides,
        pads=pads,
        dilations=dilations,
        output_padding=extra if any(extra) else None,
    )
    y = reshape(ctx, y, n, channels, out_hw, allowzero=True)
    return ctx.cast(_unbatch(ctx, y, added), dtype)


# ------------------------------------------------------------------------------- max_unpool
def _max_unpool(ctx, self, indices, output_size):
    n = len(output_size)
    rank = ctx.rank(self)
    lead = shape_value(ctx, self, 0, rank - n)
    sizes = ctx.ints(list(output_size))
    flat_values = reshape(ctx, self, lead, prod_of_dims(ctx, self, rank - n), allowzero=True)
    flat_indices = reshape(
        ctx,
        ctx.cast(indices, torch.int64),
        lead,
        prod_of_dims(ctx, indices, rank - n),
        allowzero=True,
    )
    zeros = ctx.op.Expand(
        ctx.scalar(0, ctx.dtype(self)),
        ctx.op.Concat(lead, ctx.op.ReduceProd(sizes, keepdims=1), axis=0),
    )
    scattered = ctx.op.ScatterElements(zeros, flat_indices, flat_values, axis=-1)
    return reshape(ctx, scattered, ctx.op.Concat(lead, sizes, axis=0), allowzero=True)


@translates(aten.max_unpool2d.default)
def max_unpool2d(ctx, self, indices, output_size):
    return _max_unpool(ctx, self, indices, output_size)


@translates(aten.max_unpool3d.default)
def max_unpool3d(ctx, self, indices, output_size, stride, padding):
    return _max_unpool(ctx, self, indices, output_size)


# ------------------------------------------------------------------------ backward (core ATen)
# Training graphs carry these; inference exports never do. Each is the adjoint of the forward
# translation: a transposed convolution, a scatter, or the transposed pooling matrices.
@translates(
    aten.max_pool2d_with_indices_backward.default, aten.max_pool3d_with_indices_backward.default
)
def max_pool_backward(
    ctx, grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices
):
    n = ctx.rank(self) - 2 if ctx.rank(self) in (4, 5) else ctx.rank(self) - 1
    rank = ctx.rank(self)
    lead = shape_value(ctx, self, 0, rank - n)
    dtype = ctx.dtype(grad_output)
    # onnxruntime's CPU ScatterElements has no float16 'add' kernel: sum in float32 (two Casts).
    run = _kernels.kernel_dtype("ScatterElements-add", dtype)
    flat_grad = reshape(
        ctx,
        ctx.cast(grad_output, run),
        lead,
        prod_of_dims(ctx, grad_output, rank - n),
        allowzero=True,
    )
    flat_idx = reshape(
        ctx,
        ctx.cast(indices, torch.int64),
        lead,
        prod_of_dims(ctx, indices, rank - n),
        allowzero=True,
    )
    zeros = ctx.op.Expand(
        ctx.scalar(0, run),
        ctx.op.Concat(lead, prod_of_dims(ctx, self, rank - n), axis=0),
    )
    scattered = ctx.op.ScatterElements(zeros, flat_idx, flat_grad, axis=-1, reduction="add")
    return ctx.cast(reshape(ctx, scattered, ctx.op.Shape(self), allowzero=True), dtype)


@translates(aten._adaptive_avg_pool2d_backward.default, aten._adaptive_avg_pool3d_backward.default)
def adaptive_avg_pool_backward(ctx, grad_output, self):
    # Forward is y = P_h x P_w^T per plane; the gradient is P_h^T g P_w.
    rank = ctx.rank(self)
    n = 2 if "2d" in str(ctx.node.target) else 3
    g, dtype = to_work(ctx, grad_output, {torch.float32, torch.float64})
    work = ctx.dtype(g)
    out_sizes = ctx.shape(grad_output)[-n:]
    for axis, out_size in zip(range(rank - n, rank), out_sizes):
        out_size = (
            out_size
            if isinstance(out_size, int)
            else ctx.op.Squeeze(dim_value(ctx, grad_output, axis), [0])
        )
        weights = _averaging_matrix(ctx, self, axis, out_size, work)  # (out, in)
        if axis == rank - 1:
            g = ctx.op.MatMul(g, weights)
        elif axis == rank - 2:
            g = ctx.op.MatMul(ctx.op.Transpose(weights, perm=[1, 0]), g)
        else:
            perm, back = _move_last(ctx, g, axis, rank)
            g = ctx.op.Transpose(ctx.op.MatMul(ctx.op.Transpose(g, perm=perm), weights), perm=back)
    return ctx.cast(g, dtype)
