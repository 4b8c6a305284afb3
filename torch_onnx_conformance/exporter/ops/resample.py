"""Resampling: interpolate/upsample (Resize), antialiased resize, grid_sample (GridSample) and
affine_grid (AffineGrid from opset 20, a base-grid MatMul below).

torch's coordinate rules map onto Resize's transformation modes: nearest is "asymmetric" with
floor, nearest-exact "half_pixel" with round_prefer_ceil, (bi/tri)linear and bicubic
"half_pixel" or "align_corners" (bicubic with Keys' a = -0.75). Antialiased resize does not map
onto Resize(antialias=1), which treats the borders differently: its weights are computed the
way torch does and applied as two MatMuls.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import torch

from torch_onnx_conformance.exporter.ops._nn_helpers import FLOAT32_ONLY, as_int_list, to_work
from torch_onnx_conformance.exporter.ops._reduce import reduce
from torch_onnx_conformance.exporter.ops._registry import translates
from torch_onnx_conformance.exporter.ops._shape import dim_value, shape_value

aten = torch.ops.aten

_RESIZE_DTYPES = frozenset({torch.float32, torch.float16, torch.int32, torch.int8, torch.uint8})


def _scales_from(scale_factors, n):
    if scale_factors is None:
        return None
    scales = [float(s) for s in as_int_list(list(scale_factors), n)]
    return scales if all(s is not None for s in scales) else None


def _resize(ctx, input, n, mode, output_size, scales, *, align_corners=False, nearest_exact=False):
    """Resize the last ``n`` axes; torch gives either output sizes or per-axis scale factors."""
    x, dtype = to_work(ctx, input, _RESIZE_DTYPES if mode == "nearest" else FLOAT32_ONLY)
    rank = ctx.rank(input)
    # onnxruntime interpolates (bi)linearly only over the last 2 axes of 4-D or last 3 of 5-D,
    # so a 1-D linear resize runs as a 2-D one over a unit axis.
    lift = mode == "linear" and n == 1
    if lift:
        x = ctx.op.Unsqueeze(x, [rank - 1])
        rank, n = rank + 1, 2
        scales = None if scales is None else [1.0, *scales]
        output_size = None if output_size is None else [1, *output_size]
    if mode == "nearest":
        transform = "half_pixel" if nearest_exact else "asymmetric"
        extra = dict(nearest_mode="round_prefer_ceil" if nearest_exact else "floor")
    else:
        transform = "align_corners" if align_corners else "half_pixel"
        # torch's bicubic is Keys' kernel with a = -0.75.
        extra = dict(cubic_coeff_a=-0.75) if mode == "cubic" else {}
    if scales is not None:
        scales_value = ctx.const([1.0] * (rank - n) + list(scales), torch.float32)
        y = ctx.op.Resize(
            x, None, scales_value, mode=mode, coordinate_transformation_mode=transform, **extra
        )
    else:
        sizes = (
            ctx.op.Concat(
                shape_value(ctx, input, 0, ctx.rank(input) - (n - lift)),
                ctx.ints(list(output_size)),
                axis=0,
            )
            if not lift
            else ctx.op.Concat(
                shape_value(ctx, input, 0, ctx.rank(input) - 1), ctx.ints(list(output_size)), axis=0
            )
        )
        y = ctx.op.Resize(
            x, None, None, sizes, mode=mode, coordinate_transformation_mode=transform, **extra
        )
    if lift:
        y = ctx.op.Squeeze(y, [rank - 2])
    return ctx.cast(y, dtype)


def _resize_default_scales(ctx, self, output_size, scales):
    """The ``.default`` overloads pass output sizes and optional per-axis scales.

    torch maps coordinates with the scales when given; Resize can take scales only when they
    also produce the requested sizes (floor(in * scale)), otherwise sizes rule."""
    if not scales or any(s is None for s in scales):
        return None
    n = len(scales)
    in_sizes = ctx.shape(self)[-n:]
    for size, out, scale in zip(in_sizes, output_size, scales):
        if not (isinstance(size, int) and isinstance(out, int)) or int(size * scale) != out:
            return None
    return [float(s) for s in scales]


def _aa_filter(x: float, cubic: bool) -> float:
    x = abs(x)
    if not cubic:
        return 1.0 - x if x < 1.0 else 0.0
    a = -0.5  # torch's antialiased bicubic uses a = -0.5, as PIL does
    if x < 1.0:
        return ((a + 2) * x - (a + 3)) * x * x + 1
    if x < 2.0:
        return (((x - 5) * x + 8) * x - 4) * a
    return 0.0


def _aa_matrix(
    in_size: int, out_size: int, align_corners: bool, scale: float | None, cubic: bool
) -> np.ndarray:
    """torch's antialiased interpolation weights for one axis as an (out, in) matrix.

    The filter widens with the downscaling factor and is truncated at the borders, where the
    remaining weights are renormalised (onnxruntime's Resize(antialias=1) differs there)."""
    if align_corners:
        step = (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
    else:
        step = 1.0 / scale if scale else in_size / out_size
    half_width = 2.0 if cubic else 1.0
    support = half_width * step if step >= 1.0 else half_width
    invscale = 1.0 / step if step >= 1.0 else 1.0
    matrix = np.zeros((out_size, in_size), dtype=np.float64)
    for i in range(out_size):
        center = step * (i + 0.5)
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), in_size)
        weights = [_aa_filter((j - center + 0.5) * invscale, cubic) for j in range(lo, hi)]
        total = sum(weights)
        for j, w in zip(range(lo, hi), weights):
            matrix[i, j] = w / total if total != 0 else w
    return matrix


def _aa_weights(ctx, in_len, out_len, align_corners, scale, cubic, dtype):
    """_aa_matrix built in the graph, for symbolic sizes (0-d int64 ``in_len``/``out_len``)."""
    f = ctx.cast
    one = ctx.scalar(1.0, dtype)
    half = ctx.scalar(0.5, dtype)
    zero = ctx.scalar(0.0, dtype)
    n_in, n_out = f(in_len, dtype), f(out_len, dtype)
    if align_corners:
        step = ctx.op.Where(
            ctx.op.Greater(n_out, one),
            ctx.op.Div(ctx.op.Sub(n_in, one), ctx.op.Max(ctx.op.Sub(n_out, one), one)),
            zero,
        )
    elif scale:
        step = ctx.scalar(1.0 / scale, dtype)
    else:
        step = ctx.op.Div(n_in, n_out)
    widening = ctx.op.GreaterOrEqual(step, one)
    half_width = ctx.scalar(2.0 if cubic else 1.0, dtype)
    support = ctx.op.Where(widening, ctx.op.Mul(half_width, step), half_width)
    invscale = ctx.op.Where(widening, ctx.op.Div(one, step), one)
    i64 = torch.int64
    cells = f(ctx.op.Range(ctx.scalar(0, i64), ctx.scalar(out_len, i64), ctx.scalar(1, i64)), dtype)
    center = ctx.op.Unsqueeze(ctx.op.Mul(step, ctx.op.Add(cells, half)), [1])  # (out, 1)
    j = f(ctx.op.Range(ctx.scalar(0, i64), in_len, ctx.scalar(1, i64)), dtype)  # (in,)
    lo = ctx.op.Max(ctx.op.Floor(ctx.op.Add(ctx.op.Sub(center, support), half)), zero)
    hi = ctx.op.Min(ctx.op.Floor(ctx.op.Add(ctx.op.Add(center, support), half)), n_in)
    inside = ctx.op.And(ctx.op.GreaterOrEqual(j, lo), ctx.op.Less(j, hi))
    x = ctx.op.Abs(ctx.op.Mul(ctx.op.Add(ctx.op.Sub(j, center), half), invscale))
    if cubic:
        a = -0.5
        c = ctx.scalar
        near = ctx.op.Add(
            ctx.op.Mul(
                ctx.op.Mul(ctx.op.Sub(ctx.op.Mul(c(a + 2, dtype), x), c(a + 3, dtype)), x), x
            ),
            one,
        )
        far = ctx.op.Mul(
            ctx.op.Sub(
                ctx.op.Mul(
                    ctx.op.Add(ctx.op.Mul(ctx.op.Sub(x, c(5.0, dtype)), x), c(8.0, dtype)), x
                ),
                c(4.0, dtype),
            ),
            c(a, dtype),
        )
        w = ctx.op.Where(
            ctx.op.Less(x, one), near, ctx.op.Where(ctx.op.Less(x, c(2.0, dtype)), far, zero)
        )
    else:
        w = ctx.op.Max(ctx.op.Sub(one, x), zero)
    w = ctx.op.Where(inside, w, zero)
    total = reduce(ctx, "ReduceSum", w, [1], 1)
    return ctx.op.Div(w, ctx.op.Where(ctx.op.Equal(total, zero), one, total))


def _resize_antialiased(ctx, input, output_size, scales, align_corners, cubic):
    """Separable antialiased resize of the last two axes: rows, then columns, as MatMuls."""
    x, dtype = to_work(ctx, input, {torch.float32, torch.float64})
    work = ctx.dtype(x)
    in_sizes = list(ctx.shape(input)[-2:])
    scales = scales or [None, None]
    matrices = []
    for axis, (size, scale) in enumerate(zip(in_sizes, scales)):
        out = output_size[axis] if output_size is not None else None
        if isinstance(size, int) and (isinstance(out, int) or out is None):
            out = int(size * scale) if out is None else out
            matrices.append(ctx.const(_aa_matrix(size, out, align_corners, scale, cubic), work))
            continue
        length = ctx.op.Squeeze(dim_value(ctx, input, ctx.rank(input) - 2 + axis), [0])
        if out is None:
            out = ctx.op.Cast(
                ctx.op.Floor(
                    ctx.op.Mul(
                        ctx.cast(length, torch.float64), ctx.scalar(float(scale), torch.float64)
                    )
                ),
                to=ir.DataType.INT64,
            )
        matrices.append(_aa_weights(ctx, length, out, align_corners, scale, cubic, work))
    y = ctx.op.MatMul(matrices[0], x)
    y = ctx.op.MatMul(y, ctx.op.Transpose(matrices[1], perm=[1, 0]))
    return ctx.cast(y, dtype)


def _register_resize(name, n, mode, *, has_align, nearest_exact=False):
    packet = getattr(aten, name)

    if has_align:

        def vec(ctx, input, output_size, align_corners, scale_factors):
            scales = _scales_from(scale_factors, n) if output_size is None else None
            return _resize(ctx, input, n, mode, output_size, scales, align_corners=align_corners)

        def default(ctx, self, output_size, align_corners, *scales):
            return _resize(
                ctx,
                self,
                n,
                mode,
                output_size,
                _resize_default_scales(ctx, self, output_size, scales),
                align_corners=align_corners,
            )
    else:

        def vec(ctx, input, output_size, scale_factors):
            scales = _scales_from(scale_factors, n) if output_size is None else None
            return _resize(ctx, input, n, mode, output_size, scales, nearest_exact=nearest_exact)

        def default(ctx, self, output_size, *scales):
            return _resize(
                ctx,
                self,
                n,
                mode,
                output_size,
                _resize_default_scales(ctx, self, output_size, scales),
                nearest_exact=nearest_exact,
            )

    translates(packet.vec)(vec)
    translates(packet.default)(default)


def _register_antialiased(name, cubic):
    packet = getattr(aten, name)

    def vec(ctx, input, output_size, align_corners, scale_factors):
        scales = _scales_from(scale_factors, 2)
        return _resize_antialiased(ctx, input, output_size, scales, align_corners, cubic)

    def default(ctx, self, output_size, align_corners, scales_h=None, scales_w=None):
        scales = [scales_h, scales_w] if scales_h is not None and scales_w is not None else None
        return _resize_antialiased(ctx, self, output_size, scales, align_corners, cubic)

    translates(packet.vec)(vec)
    translates(packet.default)(default)


for _n, _d in ((1, "1d"), (2, "2d"), (3, "3d")):
    _register_resize(f"upsample_nearest{_d}", _n, "nearest", has_align=False)
    _register_resize(
        f"_upsample_nearest_exact{_d}", _n, "nearest", has_align=False, nearest_exact=True
    )
_register_resize("upsample_linear1d", 1, "linear", has_align=True)
_register_resize("upsample_bilinear2d", 2, "linear", has_align=True)
_register_resize("upsample_trilinear3d", 3, "linear", has_align=True)
_register_resize("upsample_bicubic2d", 2, "cubic", has_align=True)
_register_antialiased("_upsample_bilinear2d_aa", cubic=False)
_register_antialiased("_upsample_bicubic2d_aa", cubic=True)


_GRID_MODES_16 = {0: "bilinear", 1: "nearest", 2: "bicubic"}
_GRID_MODES_20 = {0: "linear", 1: "nearest", 2: "cubic"}
_GRID_PADDING = {0: "zeros", 1: "border", 2: "reflection"}


def _grid_sample(ctx, input, grid, interpolation_mode, padding_mode, align_corners):
    x, dtype = to_work(ctx, input, {torch.float32, torch.float64, torch.float16})
    g = ctx.cast(grid, ctx.dtype(x))
    modes = _GRID_MODES_20 if ctx.has("GridSample-nd") else _GRID_MODES_16
    y = ctx.op.GridSample(
        x,
        g,
        mode=modes[int(interpolation_mode)],
        padding_mode=_GRID_PADDING[int(padding_mode)],
        align_corners=int(bool(align_corners)),
    )
    return ctx.cast(y, dtype)


@translates(aten.grid_sampler_2d.default)
def grid_sampler_2d(ctx, input, grid, interpolation_mode, padding_mode, align_corners):
    return _grid_sample(ctx, input, grid, interpolation_mode, padding_mode, align_corners)


@translates(aten.grid_sampler_3d.default)
def grid_sampler_3d(ctx, input, grid, interpolation_mode, padding_mode, align_corners):
    if not ctx.has("GridSample-nd"):
        raise NotImplementedError(
            "5-D grid_sample needs GridSample over N-D inputs (ONNX opset 20); export with "
            "opset_version >= 20"
        )
    return _grid_sample(ctx, input, grid, interpolation_mode, padding_mode, align_corners)


@translates(aten.grid_sampler.default)
def grid_sampler(ctx, input, grid, interpolation_mode, padding_mode, align_corners):
    if ctx.rank(input) == 5:
        return grid_sampler_3d(ctx, input, grid, interpolation_mode, padding_mode, align_corners)
    return _grid_sample(ctx, input, grid, interpolation_mode, padding_mode, align_corners)


def _base_coords(ctx, size, align_corners, dtype):
    """torch's normalised pixel centres in [-1, 1] for an axis of ``size`` points (1-D)."""
    count = ctx.op.Squeeze(ctx.ints([size]), [0])
    steps = ctx.cast(
        ctx.op.Range(ctx.scalar(0, torch.int64), count, ctx.scalar(1, torch.int64)), dtype
    )
    n = ctx.cast(count, dtype)
    one = ctx.scalar(1.0, dtype)
    two = ctx.scalar(2.0, dtype)
    if align_corners:
        # linspace(-1, 1, size); a single point sits at -1 (torch's linspace with steps=1).
        denom = ctx.op.Max(ctx.op.Sub(n, one), one)
        return ctx.op.Sub(ctx.op.Div(ctx.op.Mul(steps, two), denom), one)
    return ctx.op.Sub(ctx.op.Div(ctx.op.Add(ctx.op.Mul(steps, two), one), n), one)


@translates(aten.affine_grid_generator.default)
def affine_grid_generator(ctx, theta, size, align_corners):
    t, dtype = to_work(ctx, theta, {torch.float32, torch.float64})
    work = ctx.dtype(t)
    if ctx.has("AffineGrid"):
        return ctx.cast(
            ctx.op.AffineGrid(t, ctx.ints(list(size)), align_corners=int(bool(align_corners))),
            dtype,
        )
    spatial = list(size)[2:]
    n = len(spatial)
    # Homogeneous base grid (*spatial, n + 1) with x varying fastest, then grid = base @ theta^T.
    coords = [_base_coords(ctx, s, align_corners, work) for s in reversed(spatial)]  # x, y, z
    full = ctx.ints(spatial)
    axes_ = []
    for k, c in enumerate(coords):
        axis = n - 1 - k  # x runs along the last spatial axis
        shape = [1] * n
        shape[axis] = -1
        axes_.append(ctx.op.Unsqueeze(ctx.op.Expand(ctx.op.Reshape(c, shape), full), [-1]))
    ones = ctx.op.Unsqueeze(ctx.op.Expand(ctx.scalar(1.0, work), full), [-1])
    base = ctx.op.Concat(*axes_, ones, axis=-1)  # (*spatial, n + 1)
    flat = ctx.op.Reshape(base, [1, -1, n + 1])
    grid = ctx.op.MatMul(flat, ctx.op.Transpose(t, perm=[0, 2, 1]))  # (N, prod, n)
    out_shape = ctx.op.Concat(ctx.ints([size[0]]), full, ctx.const([n], torch.int64), axis=0)
    return ctx.cast(ctx.op.Reshape(grid, out_shape), dtype)
