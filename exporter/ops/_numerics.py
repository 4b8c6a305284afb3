"""Helpers shared by the reduction, sort/search, histogram, linalg, FFT and random families.

They answer the questions those translations keep asking: which axes a ``dim`` argument names,
how to call a Reduce* op at the target opset, how big a dimension is at run time, which dtype
onnxruntime can reduce in, which float dtype float-valued results compute in, and where a value
falls among histogram bins. Loop and Scan bodies are built with ``_subgraph``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import onnx_ir as ir
import torch

from exporter import _dtypes
from exporter.ops import _kernels

i64 = torch.int64

#: ReduceSum takes axes as an input since opset 13; the rest only since 18.
_AXES_INPUT_SINCE_13 = frozenset({"ReduceSum"})


# ------------------------------------------------------------------------------------ axes
def reduce_axes(dim: Any, rank: int) -> list[int] | None:
    """Sorted non-negative axes named by an ATen ``dim`` argument; None means every axis.

    ``None`` and ``[]`` reduce everything (ATen's convention), and so does any dim of a 0-d
    tensor (its only valid dims are 0 and -1).
    """
    if dim is None:
        return None
    dims = [dim] if isinstance(dim, int) else list(dim)
    if not dims or rank == 0:
        return None
    return sorted({d % rank for d in dims})


def axis(dim: int, rank: int) -> int:
    """One non-negative axis; 0-d tensors accept 0 and -1 and get 0."""
    return 0 if rank == 0 else dim % rank


# ---------------------------------------------------------------------------------- reduce
def reduce(
    ctx: Any, op_type: str, x: ir.Value, axes: Sequence[int] | None, keepdim: bool | int
) -> ir.Value:
    """``op_type`` (ReduceSum, ReduceMax, ...) over ``axes`` (None: all), axes as the opset wants.

    Axes should be non-negative: onnxruntime ignores negative axes when the input is empty.
    """
    build = getattr(ctx.op, op_type)
    keepdims = int(bool(keepdim))
    if axes is None:
        return build(x, keepdims=keepdims)
    axes = [int(a) for a in axes]
    if op_type in _AXES_INPUT_SINCE_13 or ctx.has("ReduceMax-axes-input"):
        return build(x, ctx.const(axes, i64), keepdims=keepdims)
    return build(x, axes=axes, keepdims=keepdims)


def reduce_dtype(op_type: str, dtype: torch.dtype) -> torch.dtype:
    """The dtype onnxruntime can run ``op_type`` in for ``dtype`` values, accumulating like torch.

    Half floats accumulate in float32 (torch's CPU kernels do the same); small integers and bool
    widen to a type with a kernel.
    """
    if dtype in (torch.float16, torch.bfloat16):
        return torch.float32
    minmax = op_type in ("ReduceMax", "ReduceMin", "ArgMax", "ArgMin", "TopK")
    supported = _kernels.SUPPORTED[op_type]
    if dtype in supported:
        return dtype
    if dtype is torch.bool:
        return torch.uint8 if minmax else i64
    if dtype.is_floating_point:
        return torch.float32
    if dtype in (torch.int16,) and minmax:
        return torch.int32
    return i64


def reduce_as(
    ctx: Any,
    op_type: str,
    x: ir.Value,
    axes: list[int] | None,
    keepdim: bool,
    out_dtype: torch.dtype,
) -> ir.Value:
    """Reduce in a dtype onnxruntime supports, return ``out_dtype``."""
    work = reduce_dtype(op_type, ctx.dtype(x))
    return ctx.cast(reduce(ctx, op_type, ctx.cast(x, work), axes, keepdim), out_dtype)


# ---------------------------------------------------------------------------------- sizes


def static_dim(ctx: Any, x: ir.Value, ax: int) -> int | None:
    shape = ctx.shape(x)
    if shape is None or not isinstance(shape[ax], int):
        return None
    return shape[ax]


def static_count(ctx: Any, x: ir.Value, axes: list[int] | None) -> int | None:
    """Number of elements a reduction over ``axes`` combines, when it is static."""
    axes = list(range(ctx.rank(x))) if axes is None else axes
    shape = ctx.shape(x)
    if shape is None:
        return None
    sizes = [shape[a] for a in axes]
    if any(isinstance(s, int) and s == 0 for s in sizes):
        return 0
    if not all(isinstance(s, int) for s in sizes):
        return None
    return math.prod(sizes)


def count(ctx: Any, x: ir.Value, axes: list[int] | None) -> ir.Value | int:
    """Number of elements a reduction over ``axes`` combines: an int when static, else 0-d."""
    n = static_count(ctx, x, axes)
    if n is not None:
        return n
    axes = list(range(ctx.rank(x))) if axes is None else axes
    sizes = ctx.op.Gather(ctx.op.Shape(x), ctx.const(axes, i64), axis=0)
    return ctx.op.ReduceProd(sizes, keepdims=0)


def shape_without(ctx: Any, x: ir.Value, ax: int) -> ir.Value:
    """1-D int64 shape of ``x`` with axis ``ax`` removed."""
    rank = ctx.rank(x)
    shape = ctx.static_shape(x)
    if shape is not None:
        return ctx.const([d for i, d in enumerate(shape) if i != ax], i64)
    full = ctx.op.Shape(x)
    parts = []
    if ax > 0:
        parts.append(ctx.op.Slice(full, [0], [ax]))
    if ax < rank - 1:
        parts.append(ctx.op.Slice(full, [ax + 1], [rank]))
    if not parts:
        return ctx.const([], i64)
    return parts[0] if len(parts) == 1 else ctx.op.Concat(*parts, axis=0)


def reshaped(ctx: Any, x: ir.Value, shape: Sequence[int]) -> ir.Value:
    """Reshape to a static shape and record it, so rank and size queries work on the result."""
    out = ctx.op.Reshape(x, ctx.const(list(shape), i64))
    out.shape = ir.Shape([None if d == -1 else d for d in shape])
    return out


def flatten(ctx: Any, x: ir.Value) -> ir.Value:
    """``x`` as 1-D, with its length recorded when it is static."""
    shape = ctx.static_shape(x)
    out = ctx.op.Reshape(x, ctx.const([-1], i64))
    out.shape = ir.Shape([None if shape is None else math.prod(shape)])
    return out


def annotate(ctx: Any, value: ir.Value, meta: Any) -> ir.Value:
    """Give a value FX-style metadata (a FakeTensor), so rank and shape queries work on it."""
    if meta is not None:
        ctx.scope.translator.set_type(value, meta)
    return value


def nan_of(ctx: Any, dtype: torch.dtype) -> ir.Value:
    return ctx.const(float("nan"), dtype)


# ---------------------------------------------------------------------------------- sorting
def topk(ctx: Any, x: ir.Value, k: Any, ax: int, largest: bool) -> tuple[ir.Value, ir.Value]:
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


# ----------------------------------------------------------------------------- float work, bins
def float_work(dtype: torch.dtype) -> torch.dtype:
    """The float dtype a float-valued reduction (mean, var, norm) computes in."""
    if dtype in (torch.float16, torch.bfloat16) or not dtype.is_floating_point:
        return torch.float32
    return dtype


def linspace(ctx, low, high, steps, work):
    """torch.linspace's values: from both ends towards the middle, so the end is exact."""
    i = ctx.op.Cast(
        ctx.op.Range(ctx.const(0, i64), ctx.const(steps, i64), ctx.const(1, i64)),
        to=_dtypes.to_ir(work),
    )
    step = ctx.op.Div(ctx.op.Sub(high, low), ctx.const(max(steps - 1, 1), work))
    from_start = ctx.op.Add(low, ctx.op.Mul(i, step))
    from_end = ctx.op.Sub(high, ctx.op.Mul(ctx.op.Sub(ctx.const(steps - 1, work), i), step))
    return ctx.op.Where(ctx.op.Less(i, ctx.const(steps // 2, work)), from_start, from_end)


def bin_index(ctx, x, low, high, bins, edges=None):
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
