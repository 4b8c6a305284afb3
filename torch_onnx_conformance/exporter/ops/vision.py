"""torchvision's detection ops: nms, roi_align, roi_pool, ps_roi_align, deform_conv2d.

They are registered by qualified name (``"torchvision::nms.default"``), not by OpOverload, so
this module never imports torchvision and the translations apply whatever the import order
(torch.onnx only sees them when torchvision was imported before its registry was built).

ONNX mapping and the semantics that had to be matched:
- nms → NonMaxSuppression on a (1, N, 4) / (1, 1, N) batch; both suppress IoU strictly above
  the threshold and emit the kept boxes in decreasing score order; column 2 is the box index.
- roi_align → RoiAlign; aligned=True is 'half_pixel' (shift by -0.5), aligned=False is
  'output_half_pixel' (no shift, RoI size clamped to >= 1), exactly torchvision's two modes.
- roi_pool → MaxRoiPool, whose onnxruntime kernel rounds RoI corners and splits bins with the
  same floor/ceil rule as torchvision. The argmax output (only backward reads it) is rebuilt
  from separable masked maxima when something uses it; at opsets where onnxruntime has no
  MaxRoiPool kernel (22+) the pooled values come from those maxima too.
- ps_roi_align → RoiAlign over every input channel, then for each output bin the channel that
  bin owns (torchvision's position-sensitive mapping), picked with one Gather.
- deform_conv2d → DeformConv (opset 19+); its offset layout (group, kH, kW, (dy, dx)) is
  torchvision's.
"""

from __future__ import annotations

import onnx_ir as ir
import torch

from torch_onnx_conformance.exporter.ops._kernels import has_kernel
from torch_onnx_conformance.exporter.ops._nn_helpers import compute_dtype
from torch_onnx_conformance.exporter.ops._reduce import reduce
from torch_onnx_conformance.exporter.ops._registry import translates
from torch_onnx_conformance.exporter.ops._shape import dim_value

#: onnxruntime CPU kernels of these ops only exist for float32 (RoiAlign also float64).
_FLOAT32 = frozenset({torch.float32})
_ROI_ALIGN_DTYPES = frozenset({torch.float32, torch.float64})


def _work(ctx, x, supported):
    """x cast to a dtype the onnxruntime kernel has, and the dtype to cast results back to."""
    dtype = ctx.dtype(x)
    return ctx.cast(x, compute_dtype(dtype, supported)), dtype


def _static_int(value, what):
    if not isinstance(value, int):
        raise NotImplementedError(
            f"torchvision op argument {what}={value!r} is symbolic; ONNX needs it as a constant "
            f"attribute. Pass a Python int (output sizes and conv hyper-parameters are never "
            f"data-dependent in torchvision models)."
        )
    return int(value)


def _split_rois(ctx, rois, work):
    """torchvision (K, 5) [batch, x1, y1, x2, y2] rois → ONNX (K, 4) boxes + int64 batch ids."""
    rois = ctx.cast(rois, work)
    batch = ctx.op.Slice(rois, [0], [1], [1])
    boxes = ctx.op.Slice(rois, [1], [5], [1])
    batch_ids = ctx.op.Cast(ctx.op.Squeeze(batch, [1]), to=7)  # INT64
    return boxes, batch_ids


# ------------------------------------------------------------------------------------- nms
@translates("torchvision::nms.default")
def nms(ctx, dets, scores, iou_threshold):
    boxes, _ = _work(ctx, dets, _FLOAT32)
    scores, _ = _work(ctx, scores, _FLOAT32)
    batched_boxes = ctx.op.Unsqueeze(boxes, [0])
    batched_scores = ctx.op.Unsqueeze(scores, [0, 1])
    # max_output_boxes_per_class defaults to 0 (= select nothing); N keeps every survivor.
    # Both scalars go in as 1-element tensors, the form onnx's reference evaluator reads too.
    count = dim_value(ctx, dets, 0)
    threshold = ctx.const([float(iou_threshold)], torch.float32)
    selected = ctx.op.NonMaxSuppression(
        batched_boxes, batched_scores, count, threshold, center_point_box=0
    )
    # The builder's dtype propagation copies the first input's dtype; NMS yields int64.
    selected.dtype = ir.DataType.INT64
    return ctx.op.Gather(selected, ctx.const(2, torch.int64), axis=1)


# ------------------------------------------------------------------------------- roi_align
def _roi_align(
    ctx, input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned
):
    x, dtype = _work(ctx, input, _ROI_ALIGN_DTYPES)
    ph = _static_int(pooled_height, "pooled_height")
    pw = _static_int(pooled_width, "pooled_width")
    ratio = _static_int(sampling_ratio, "sampling_ratio")
    if not has_kernel("RoiAlign", opset=ctx.opset):
        return _roi_align_by_gathers(
            ctx, x, rois, float(spatial_scale), ph, pw, ratio, aligned
        ), dtype
    boxes, batch_ids = _split_rois(ctx, rois, ctx.dtype(x))
    y = ctx.op.RoiAlign(
        x,
        boxes,
        batch_ids,
        coordinate_transformation_mode="half_pixel" if aligned else "output_half_pixel",
        mode="avg",
        output_height=ph,
        output_width=pw,
        sampling_ratio=max(ratio, 0),
        spatial_scale=float(spatial_scale),
    )
    return y, dtype


def _roi_align_by_gathers(ctx, x, rois, spatial_scale, ph, pw, sampling_ratio, aligned):
    """torchvision's roi_align from Gather and arithmetic, for opsets whose RoiAlign
    onnxruntime cannot run. Same float arithmetic as torchvision's CPU kernel, in its order:

    per RoI, corners scaled (minus 0.5 when aligned), size clamped to >= 1 unless aligned, bins
    of size/pooled, sampling_ratio samples per bin side (adaptive: ceil(size / pooled), so RoIs
    differ: every RoI gets the largest count, and samples past its own are weighted 0); each
    sample is bilinear, 0 outside [-1, size], clamped to the border inside; a bin is the sum
    of its samples over max(count, 1).
    """
    work = ctx.dtype(x)

    def const(value):
        return ctx.const(value, work)

    rois = ctx.cast(rois, work)

    def column(i):  # (K, 1)
        return ctx.op.Slice(rois, [i], [i + 1], [1])

    offset = const(0.5 if aligned else 0.0)
    scale = const(spatial_scale)
    start_w, start_h, end_w, end_h = (
        ctx.op.Sub(ctx.op.Mul(column(i), scale), offset) for i in (1, 2, 3, 4)
    )
    height_i, width_i = dim_value(ctx, x, 2), dim_value(ctx, x, 3)
    height, width = ctx.cast(height_i, work), ctx.cast(width_i, work)

    def axis(start, end, pooled, size):
        """Per RoI and sample along one axis (K, pooled, G): the low and high pixel, their
        bilinear weights (0 for samples outside the map or past the RoI's count), and the
        RoI's sample count (K, 1)."""
        length = ctx.op.Sub(end, start)
        if not aligned:
            length = ctx.op.Max(length, const(1.0))
        bin_size = ctx.op.Div(length, const(float(pooled)))
        if sampling_ratio > 0:
            grid = const([[float(sampling_ratio)]])
            steps = const([float(i) for i in range(sampling_ratio)])
        else:
            grid = ctx.op.Ceil(ctx.op.Div(length, const(float(pooled))))
            # The largest count over RoIs, at least 1 (also for no RoI at all).
            largest = reduce(ctx, "ReduceMax", ctx.op.Concat(grid, const([[1.0]]), axis=0), None, 0)
            steps = ctx.cast(
                ctx.op.Range(
                    ctx.const(0, torch.int64),
                    ctx.op.Cast(largest, to=7),
                    ctx.const(1, torch.int64),
                ),
                work,
            )
        steps = ctx.op.Unsqueeze(steps, [0, 1])  # (1, 1, G)
        bins = const([[[float(i)] for i in range(pooled)]])  # (1, pooled, 1)
        start3, bin3, grid3 = (ctx.op.Unsqueeze(v, [2]) for v in (start, bin_size, grid))
        # A RoI with no samples (aligned, size <= 0) divides by 1 instead of 0: its samples
        # are all masked below, but a NaN position would make an invalid Gather index.
        position = ctx.op.Add(
            ctx.op.Add(start3, ctx.op.Mul(bins, bin3)),
            ctx.op.Div(
                ctx.op.Mul(ctx.op.Add(steps, const(0.5)), bin3), ctx.op.Max(grid3, const(1.0))
            ),
        )
        outside = ctx.op.Or(ctx.op.Less(position, const(-1.0)), ctx.op.Greater(position, size))
        if sampling_ratio <= 0:
            outside = ctx.op.Or(outside, ctx.op.GreaterOrEqual(steps, grid3))
        position = ctx.op.Max(position, const(0.0))
        low = ctx.op.Floor(position)
        last = ctx.op.Sub(size, const(1.0))
        at_edge = ctx.op.GreaterOrEqual(low, last)
        low = ctx.op.Where(at_edge, last, low)
        high = ctx.op.Where(at_edge, last, ctx.op.Add(low, const(1.0)))
        position = ctx.op.Where(at_edge, low, position)
        high_weight = ctx.op.Sub(position, low)
        low_weight = ctx.op.Sub(const(1.0), high_weight)
        zero = const(0.0)
        low_weight = ctx.op.Where(outside, zero, low_weight)
        high_weight = ctx.op.Where(outside, zero, high_weight)
        return (
            ctx.op.Cast(low, to=7),
            ctx.op.Cast(high, to=7),
            low_weight,
            high_weight,
            grid,
        )

    y_low, y_high, hy, ly, grid_h = axis(start_h, end_h, ph, height)
    x_low, x_high, hx, lx, grid_w = axis(start_w, end_w, pw, width)

    # Samples of RoI k are laid out (K, ph, Gh, pw, Gw): y terms on axes 1-2, x terms on 3-4.
    def along_y(v):
        return ctx.op.Unsqueeze(v, [3, 4])

    def along_x(v):
        return ctx.op.Unsqueeze(v, [1, 2])

    # Every pixel of every image as one row of C channels: row b*H*W + y*W + x.
    channels = dim_value(ctx, x, 1)
    table = ctx.op.Reshape(
        ctx.op.Transpose(x, perm=[0, 2, 3, 1]),
        ctx.op.Concat(ctx.const([-1], torch.int64), channels, axis=0),
    )
    batch = ctx.op.Cast(column(0), to=7)  # (K, 1)
    first_row = ctx.op.Unsqueeze(ctx.op.Mul(batch, ctx.op.Mul(height_i, width_i)), [2, 3, 4])
    width_scalar = ctx.op.Squeeze(width_i, [0])

    def corner(y_index, x_index, y_weight, x_weight):
        rows = ctx.op.Add(
            first_row,
            ctx.op.Add(along_y(ctx.op.Mul(y_index, width_scalar)), along_x(x_index)),
        )
        weight = ctx.op.Mul(along_y(y_weight), along_x(x_weight))
        return ctx.op.Mul(ctx.op.Gather(table, rows, axis=0), ctx.op.Unsqueeze(weight, [5]))

    samples = ctx.op.Add(
        ctx.op.Add(corner(y_low, x_low, hy, hx), corner(y_low, x_high, hy, lx)),
        ctx.op.Add(corner(y_high, x_low, ly, hx), corner(y_high, x_high, ly, lx)),
    )  # (K, ph, Gh, pw, Gw, C)
    total = reduce(ctx, "ReduceSum", samples, [2, 4], 0)  # (K, ph, pw, C)
    count = ctx.op.Max(ctx.op.Mul(grid_h, grid_w), const(1.0))  # (K, 1)
    pooled = ctx.op.Div(total, ctx.op.Unsqueeze(count, [2, 3]))
    return ctx.op.Transpose(pooled, perm=[0, 3, 1, 2])


@translates("torchvision::roi_align.default")
def roi_align(
    ctx, input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned
):
    y, dtype = _roi_align(
        ctx, input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned
    )
    return ctx.cast(y, dtype)


# -------------------------------------------------------------------------------- roi_pool
@translates("torchvision::roi_pool.default")
def roi_pool(ctx, input, rois, spatial_scale, pooled_height, pooled_width):
    ph = _static_int(pooled_height, "pooled_height")
    pw = _static_int(pooled_width, "pooled_width")
    x, dtype = _work(ctx, input, _FLOAT32)
    work = ctx.dtype(x)
    if not has_kernel("MaxRoiPool", opset=ctx.opset):
        # No onnxruntime kernel at this opset: the same separable maxima that give the argmax
        # give the pooled values.
        pooled, argmax = _roi_pool_separable(ctx, x, rois, float(spatial_scale), ph, pw)
        return ctx.cast(pooled, dtype), argmax
    pooled = ctx.op.MaxRoiPool(
        x, ctx.cast(rois, work), pooled_shape=[ph, pw], spatial_scale=float(spatial_scale)
    )
    if 1 in ctx.used_outputs():
        argmax = _roi_pool_separable(ctx, x, rois, float(spatial_scale), ph, pw)[1]
    else:
        # Nobody reads the argmax (inference): an empty placeholder keeps the tuple shape.
        argmax = ctx.const(torch.zeros([0], dtype=torch.int32), torch.int32)
    return ctx.cast(pooled, dtype), argmax


def _bin_bounds(ctx, start, end, pooled, size, work):
    """torchvision's integer bins along one axis: (K, pooled) start and end, clipped to size.

    ``start``/``end`` are (K, 1) RoI corners already rounded to pixels.
    """
    length = ctx.op.Max(
        ctx.op.Add(ctx.op.Sub(end, start), ctx.const(1.0, work)), ctx.const(1.0, work)
    )
    bin_size = ctx.op.Div(length, ctx.const(float(pooled), work))
    steps = ctx.const(torch.arange(pooled, dtype=torch.float32).reshape(1, -1), work)
    lo = ctx.op.Add(ctx.op.Floor(ctx.op.Mul(steps, bin_size)), start)
    hi = ctx.op.Add(
        ctx.op.Ceil(ctx.op.Mul(ctx.op.Add(steps, ctx.const(1.0, work)), bin_size)), start
    )
    zero = ctx.const(0.0, work)
    lo = ctx.op.Min(ctx.op.Max(lo, zero), size)
    hi = ctx.op.Min(ctx.op.Max(hi, zero), size)
    return lo, hi


def _axis_mask(ctx, lo, hi, size_value, work):
    """(K, pooled, L) bool: position l of the axis lies in bin [lo, hi)."""
    positions = ctx.op.Cast(
        ctx.op.Range(
            ctx.const(0, torch.int64), ctx.op.Squeeze(size_value, [0]), ctx.const(1, torch.int64)
        ),
        to=1,
    )
    positions = ctx.cast(positions, work)
    lo = ctx.op.Unsqueeze(lo, [2])
    hi = ctx.op.Unsqueeze(hi, [2])
    return ctx.op.And(ctx.op.GreaterOrEqual(positions, lo), ctx.op.Less(positions, hi))


def _roi_pool_separable(ctx, x, rois, spatial_scale, ph, pw):
    """torchvision's roi_pool output and argmax (flat h*W+w of the first maximum), both 0 / -1
    for empty bins.

    Built from separable masked maxima: over w within each row, then over h; the first row
    holding the maximum and the first column in it is torchvision's row-major first maximum.
    """
    work = ctx.dtype(x)
    rois = ctx.cast(rois, work)
    scale = ctx.const(spatial_scale, work)

    def corner(i):
        # std::round (half away from zero) of the scaled coordinate.
        v = ctx.op.Mul(ctx.op.Slice(rois, [i], [i + 1], [1]), scale)
        half = ctx.const(0.5, work)
        return ctx.op.Mul(ctx.op.Sign(v), ctx.op.Floor(ctx.op.Add(ctx.op.Abs(v), half)))

    height_i = dim_value(ctx, x, 2)
    width_i = dim_value(ctx, x, 3)
    height = ctx.cast(ctx.op.Cast(height_i, to=1), work)
    width = ctx.cast(ctx.op.Cast(width_i, to=1), work)
    h_lo, h_hi = _bin_bounds(ctx, corner(2), corner(4), ph, height, work)
    w_lo, w_hi = _bin_bounds(ctx, corner(1), corner(3), pw, width, work)
    mask_h = _axis_mask(ctx, h_lo, h_hi, height_i, work)  # (K, ph, H)
    mask_w = _axis_mask(ctx, w_lo, w_hi, width_i, work)  # (K, pw, W)

    batch = ctx.op.Cast(ctx.op.Squeeze(ctx.op.Slice(rois, [0], [1], [1]), [1]), to=7)
    feats = ctx.op.Gather(x, batch, axis=0)  # (K, C, H, W)
    low = ctx.const(float("-inf"), work)
    # (K, C, H, 1, W) against (K, 1, 1, pw, W) → max over W: (K, C, H, pw)
    masked_w = ctx.op.Where(ctx.op.Unsqueeze(mask_w, [1, 2]), ctx.op.Unsqueeze(feats, [3]), low)
    row_max = reduce(ctx, "ReduceMax", masked_w, [4], 0)
    row_arg = ctx.op.ArgMax(masked_w, axis=4, keepdims=0)  # (K, C, H, pw)
    # (K, C, 1, H, pw) against (K, 1, ph, H, 1) → over H: (K, C, ph, pw)
    masked_h = ctx.op.Where(ctx.op.Unsqueeze(mask_h, [1, 4]), ctx.op.Unsqueeze(row_max, [2]), low)
    pooled = reduce(ctx, "ReduceMax", masked_h, [3], 0)  # (K, C, ph, pw)
    best_h = ctx.op.ArgMax(masked_h, axis=3, keepdims=1)  # (K, C, ph, 1, pw)
    # The column of the winning row, per (ph, pw) bin.
    cols = ctx.op.Unsqueeze(row_arg, [2])  # (K, C, 1, H, pw)
    cols = ctx.op.Expand(cols, ctx.op.Shape(masked_h))
    best_w = ctx.op.GatherElements(cols, best_h, axis=3)
    flat = ctx.op.Add(ctx.op.Mul(best_h, ctx.op.Squeeze(width_i, [0])), best_w)
    flat = ctx.op.Squeeze(flat, [3])
    # Empty bins (no row or no column inside the map) are -1 in torchvision.
    empty = ctx.op.Or(
        ctx.op.Unsqueeze(ctx.op.LessOrEqual(h_hi, h_lo), [1, 3]),
        ctx.op.Unsqueeze(ctx.op.LessOrEqual(w_hi, w_lo), [1, 2]),
    )
    flat = ctx.op.Where(empty, ctx.const(-1, torch.int64), flat)
    pooled = ctx.op.Where(empty, ctx.const(0.0, work), pooled)
    return pooled, ctx.op.Cast(flat, to=6)  # INT32, torchvision's argmax dtype


# ---------------------------------------------------------------------------- ps_roi_align
@translates("torchvision::ps_roi_align.default")
def ps_roi_align(ctx, input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio):
    ph = _static_int(pooled_height, "pooled_height")
    pw = _static_int(pooled_width, "pooled_width")
    bins = ph * pw
    # torchvision's kernel shifts by -0.5 and never clamps the RoI size: RoiAlign 'half_pixel'.
    pooled, dtype = _roi_align(ctx, input, rois, spatial_scale, ph, pw, sampling_ratio, True)
    # (K, C_in, ph, pw) = (K, C_out, bins [channel's bin], bins [spatial bin]); output bin b of
    # channel c reads input channel c*bins + b, i.e. the diagonal of the last two axes.
    k = dim_value(ctx, rois, 0)
    grid = ctx.op.Reshape(
        pooled, ctx.op.Concat(k, ctx.const([-1, bins * bins], torch.int64), axis=0)
    )
    diagonal = ctx.const([b * bins + b for b in range(bins)], torch.int64)
    picked = ctx.op.Gather(grid, diagonal, axis=2)
    out = ctx.op.Reshape(picked, ctx.op.Concat(k, ctx.const([-1, ph, pw], torch.int64), axis=0))
    out = ctx.cast(out, dtype)
    if 1 not in ctx.used_outputs():
        return out, ctx.const(torch.zeros([0], dtype=torch.int32), torch.int32)
    # channel_mapping[k, c, i, j] = c*bins + i*pw + j (int32), for backward passes.
    c_out = ctx.op.Div(dim_value(ctx, input, 1), ctx.const([bins], torch.int64))
    channels = ctx.op.Range(
        ctx.const(0, torch.int64), ctx.op.Squeeze(c_out, [0]), ctx.const(1, torch.int64)
    )
    within = ctx.const(torch.arange(bins).reshape(1, ph, pw), torch.int64)
    mapping = ctx.op.Add(
        ctx.op.Mul(ctx.op.Unsqueeze(channels, [1, 2]), ctx.const(bins, torch.int64)), within
    )
    mapping = ctx.op.Expand(ctx.op.Unsqueeze(mapping, [0]), ctx.op.Shape(out))
    return out, ctx.op.Cast(mapping, to=6)


# --------------------------------------------------------------------------- deform_conv2d
@translates("torchvision::deform_conv2d.default")
def deform_conv2d(
    ctx,
    input,
    weight,
    offset,
    mask,
    bias,
    stride_h,
    stride_w,
    pad_h,
    pad_w,
    dilation_h,
    dilation_w,
    groups,
    offset_groups,
    use_mask,
):
    if not ctx.has("DeformConv"):
        raise NotImplementedError(
            f"torchvision::deform_conv2d maps to ONNX DeformConv, which exists from opset 19; "
            f"the export targets opset {ctx.opset}. Export with opset_version=19 or later."
        )
    x, dtype = _work(ctx, input, _FLOAT32)
    work = ctx.dtype(x)
    kernel = ctx.static_shape(weight)
    if kernel is None:
        raise NotImplementedError(
            "deform_conv2d needs a weight of static shape (the kernel size is an ONNX attribute)"
        )
    stride = [_static_int(stride_h, "stride_h"), _static_int(stride_w, "stride_w")]
    pad = [_static_int(pad_h, "pad_h"), _static_int(pad_w, "pad_w")]
    dilation = [_static_int(dilation_h, "dilation_h"), _static_int(dilation_w, "dilation_w")]
    y = ctx.op.DeformConv(
        x,
        ctx.cast(weight, work),
        ctx.cast(offset, work),
        None if bias is None else ctx.cast(bias, work),
        ctx.cast(mask, work) if use_mask else None,
        dilations=dilation,
        group=_static_int(groups, "groups"),
        kernel_shape=list(kernel[2:]),
        offset_group=_static_int(offset_groups, "offset_groups"),
        pads=pad + pad,
        strides=stride,
    )
    return ctx.cast(y, dtype)
