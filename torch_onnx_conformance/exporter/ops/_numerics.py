"""Helpers shared by the sort/search, histogram and reduction families: torch's order for
TopK (NaN largest, stable ties), NaN constants, linspace and histogram bins.

Axes, sizes and reshapes live in ``_shape``, Reduce* calls and their dtypes in ``_reduce``.
Loop and Scan bodies are built with ``_subgraph``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import onnx_ir as ir
import torch

from torch_onnx_conformance.exporter import _dtypes
from torch_onnx_conformance.exporter.ops._reduce import reduce_dtype

if TYPE_CHECKING:
    from torch_onnx_conformance.exporter.ops._context import TranslationContext

i64 = torch.int64


def nan_of(ctx: TranslationContext, dtype: torch.dtype) -> ir.Value:
    return ctx.const(float("nan"), dtype)


# ---------------------------------------------------------------------------------- sorting
def topk(
    ctx: TranslationContext, x: ir.Value, k: Any, ax: int, largest: bool
) -> tuple[ir.Value, ir.Value]:
    """TopK along ``ax`` that orders NaN as the largest value, like torch's sort and topk.

    onnxruntime's TopK leaves NaNs wherever its comparisons put them, so float inputs are
    ordered by a key with NaN replaced by +inf and the values are gathered from the input.
    Ties keep their input order (TopK picks the lower index first), which is torch's stable
    order. ``k`` is an int, a 0-d or a 1-D int64 value.
    """
    dtype = ctx.dtype(x)
    work = reduce_dtype("TopK", dtype)
    xw = ctx.cast(x, work)
    if isinstance(k, ir.Value):
        k = ctx.op.Reshape(ctx.cast(k, i64), [1])
    else:
        k = ctx.const([int(k)], i64)
    if not work.is_floating_point:
        values, indices = ctx.op.TopK(xw, k, axis=ax, largest=int(largest), sorted=1, _outputs=2)
        values.dtype = xw.dtype
        indices.dtype = ir.DataType.INT64
        return ctx.cast(values, dtype), indices
    key = ctx.op.Where(ctx.op.IsNaN(xw), ctx.const(float("inf"), work), xw)
    _, indices = ctx.op.TopK(key, k, axis=ax, largest=int(largest), sorted=1, _outputs=2)
    indices.dtype = ir.DataType.INT64
    values = ctx.op.GatherElements(xw, indices, axis=ax)
    return ctx.cast(values, dtype), indices


# ------------------------------------------------------------------------------------ bins
def linspace(ctx: TranslationContext, low, high, steps, work):
    """torch.linspace's values: from both ends towards the middle, so the end is exact."""
    i = ctx.op.Cast(
        ctx.op.Range(ctx.const(0, i64), ctx.const(steps, i64), ctx.const(1, i64)),
        to=_dtypes.to_ir(work),
    )
    step = ctx.op.Div(ctx.op.Sub(high, low), ctx.const(max(steps - 1, 1), work))
    from_start = ctx.op.Add(low, ctx.op.Mul(i, step))
    from_end = ctx.op.Sub(high, ctx.op.Mul(ctx.op.Sub(ctx.const(steps - 1, work), i), step))
    return ctx.op.Where(ctx.op.Less(i, ctx.const(steps // 2, work)), from_start, from_end)


def bin_index(ctx: TranslationContext, x, low, high, bins, edges=None):
    """torch's histogram bin of each value: linear interpolation, corrected by comparing with
    the neighbouring ``edges`` when given; values outside [low, high] (and NaN) get ``bins``."""
    work = ctx.dtype(x)
    scaled = ctx.op.Div(
        ctx.op.Mul(ctx.op.Sub(x, low), ctx.const(bins, work)), ctx.op.Sub(high, low)
    )
    inside = ctx.op.And(ctx.op.GreaterOrEqual(x, low), ctx.op.LessOrEqual(x, high))
    position = ctx.op.Cast(
        ctx.op.Floor(ctx.op.Where(inside, scaled, ctx.const(0, work))), to=ir.DataType.INT64
    )
    if edges is not None:
        # upper_bound over edges[pos-1 : pos+2], as torch's local search does.
        start = ctx.op.Max(ctx.op.Sub(position, ctx.const(1, i64)), ctx.const(0, i64))
        stop = ctx.op.Min(ctx.op.Add(position, ctx.const(2, i64)), ctx.const(bins + 1, i64))
        found = start
        for offset in range(3):
            j = ctx.op.Add(start, ctx.const(offset, i64))
            edge = ctx.op.Gather(edges, ctx.op.Min(j, ctx.const(bins, i64)), axis=0)
            counted = ctx.op.And(ctx.op.Less(j, stop), ctx.op.LessOrEqual(edge, x))
            found = ctx.op.Add(found, ctx.cast(counted, i64))
        position = ctx.op.Sub(found, ctx.const(1, i64))
    # The last bin includes its right edge.
    position = ctx.op.Min(position, ctx.const(bins - 1, i64))
    return ctx.op.Where(inside, position, ctx.const(bins, i64))
