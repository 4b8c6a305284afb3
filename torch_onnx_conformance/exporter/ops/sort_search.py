"""Sorting and searching: topk, sort, argsort, msort, unique (flat, by dim, consecutive),
searchsorted and bucketize.

Sorting is ONNX TopK with k = the axis length: it orders ties by index (torch's stable order)
and, through ``_numerics.topk``, puts NaN where torch does (as the largest value). ONNX Unique
sorts ascending, which is what torch's CPU unique returns whatever ``sorted`` says.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import torch

from torch_onnx_conformance.exporter.ops import _numerics as nx
from torch_onnx_conformance.exporter.ops import _reduce as R
from torch_onnx_conformance.exporter.ops import _shape as S
from torch_onnx_conformance.exporter.ops._registry import translates

aten = torch.ops.aten
i64 = torch.int64

#: onnxruntime's Unique kernels (measured); other dtypes compute in one of these and cast back.
_UNIQUE_DTYPES = frozenset({torch.float32, torch.float64, torch.int64, torch.int8})


# ------------------------------------------------------------------------------ topk / sort
@translates(aten.topk.default)
def topk(ctx, self, k, dim=-1, largest=True, sorted=True):
    rank = ctx.rank(self)
    if rank == 0:
        x = S.with_shape(S.reshape(ctx, self, [1], allowzero=False), [1])
        values, indices = nx.topk(ctx, x, k, 0, bool(largest))
        scalar = ctx.const([], i64)
        return ctx.op.Reshape(values, scalar), ctx.op.Reshape(indices, scalar)
    # sorted=False allows any order; sorted output is one of them.
    return nx.topk(ctx, self, k, S.axis(dim, rank), bool(largest))


def _sort(ctx, self, dim, descending):
    rank = ctx.rank(self)
    if rank == 0:
        return ctx.op.Identity(self), ctx.const(0, i64)
    ax = S.axis(dim, rank)
    if S.static_dim(ctx, self, ax) in (0, 1):
        return ctx.op.Identity(self), S.constant_of_shape(ctx, ctx.op.Shape(self), 0, i64)
    return nx.topk(ctx, self, S.dim_size(ctx, self, ax), ax, bool(descending))


@translates(aten.sort.default)
def sort(ctx, self, dim=-1, descending=False):
    return _sort(ctx, self, dim, descending)


@translates(aten.sort.stable)
def sort_stable(ctx, self, *, stable=None, dim=-1, descending=False):
    return _sort(ctx, self, dim, descending)


@translates(aten.argsort.default)
def argsort(ctx, self, dim=-1, descending=False):
    return _sort(ctx, self, dim, descending)[1]


@translates(aten.argsort.stable)
def argsort_stable(ctx, self, *, stable, dim=-1, descending=False):
    return _sort(ctx, self, dim, descending)[1]


@translates(aten.msort.default)
def msort(ctx, self):
    return _sort(ctx, self, 0, False)[0]


# ----------------------------------------------------------------------------------- unique
def _empty_index(ctx):
    return ctx.const(np.zeros((0,), dtype=np.int64))


def _wanted(ctx, position: int) -> bool:
    """Whether torch computes output ``position`` (unrequested ones are empty tensors)."""
    out = ctx.out
    meta = out[position] if isinstance(out, (list, tuple)) and len(out) > position else None
    if not isinstance(meta, torch.Tensor):
        return True
    return not (meta.dim() == 1 and isinstance(meta.shape[0], int) and meta.shape[0] == 0)


def _unique_input(ctx, x):
    dtype = ctx.dtype(x)
    if dtype in _UNIQUE_DTYPES:
        return x, dtype
    work = torch.float32 if dtype.is_floating_point else i64
    return ctx.cast(x, work), dtype


def _unique_node(ctx, x, axis=None):
    outputs = ctx.op.Unique(x, axis=axis, sorted=1, _outputs=4)
    outputs[0].dtype = x.dtype
    for index_output in outputs[1:]:
        index_output.dtype = ir.DataType.INT64
    return outputs


def _unique_flat(ctx, self, return_inverse, return_counts):
    x, dtype = _unique_input(ctx, self)
    flat = ctx.op.Reshape(x, ctx.const([-1], i64))
    values, _, inverse, counts = _unique_node(ctx, flat)
    values = ctx.cast(values, dtype)
    if _wanted(ctx, 1):
        inverse = ctx.op.Reshape(inverse, ctx.op.Shape(self))
    else:
        inverse = _empty_index(ctx)
    if not _wanted(ctx, 2):
        counts = _empty_index(ctx)
    return values, inverse, counts


@translates(aten._unique2.default)
def unique2(ctx, self, sorted=True, return_inverse=False, return_counts=False):
    return _unique_flat(ctx, self, return_inverse, return_counts)


@translates(aten._unique.default)
def unique(ctx, self, sorted=True, return_inverse=False):
    values, inverse, _ = _unique_flat(ctx, self, return_inverse, False)
    return values, inverse


@translates(aten.unique_dim.default)
def unique_dim(ctx, self, dim, sorted=True, return_inverse=False, return_counts=False):
    rank = ctx.rank(self)
    x, dtype = _unique_input(ctx, self)
    # ONNX Unique along an axis orders the slices lexicographically, as torch does.
    values, _, inverse, counts = _unique_node(ctx, x, axis=S.axis(dim, rank))
    return ctx.cast(values, dtype), inverse, counts


@translates(aten.unique_consecutive.default)
def unique_consecutive(ctx, self, return_inverse=False, return_counts=False, dim=None):
    rank = ctx.rank(self)
    if dim is None or rank == 0:
        x, ax, x_rank = S.flatten(ctx, self), 0, 1
    else:
        x, ax, x_rank = self, S.axis(dim, rank), rank
    n = ctx.op.Shape(x, start=ax, end=ax + 1)
    # A run starts where a slice differs from its predecessor (the first slice always does).
    head = ctx.op.Slice(x, ctx.const([0], i64), ctx.const([-1], i64), ctx.const([ax], i64))
    tail = ctx.op.Slice(x, ctx.const([1], i64), n, ctx.const([ax], i64))
    differs = ctx.op.Not(
        ctx.op.Equal(
            ctx.cast(head, _equal_dtype(ctx.dtype(x))), ctx.cast(tail, _equal_dtype(ctx.dtype(x)))
        )
    )
    other_axes = [a for a in range(x_rank) if a != ax]
    if other_axes:
        differs = ctx.cast(
            R.reduce(ctx, "ReduceMax", ctx.cast(differs, torch.uint8), other_axes, False),
            torch.bool,
        )
    starts = ctx.op.Concat(ctx.const([True], torch.bool), differs, axis=0)
    # An empty input has no first slice either.
    starts = ctx.op.Slice(starts, ctx.const([0], i64), n)
    # Compress has no bfloat16 in the ONNX type constraints.
    kept = ctx.cast(x, torch.float32) if ctx.dtype(x) is torch.bfloat16 else x
    values = ctx.cast(ctx.op.Compress(kept, starts, axis=ax), ctx.dtype(x))
    run_ids = ctx.op.Sub(ctx.op.CumSum(ctx.cast(starts, i64), ctx.const(0, i64)), ctx.const(1, i64))
    if _wanted(ctx, 1):
        inverse = run_ids if dim is not None else ctx.op.Reshape(run_ids, ctx.op.Shape(self))
    else:
        inverse = _empty_index(ctx)
    if _wanted(ctx, 2):
        start_positions = ctx.op.Reshape(ctx.op.NonZero(starts), ctx.const([-1], i64))
        ends = ctx.op.Concat(
            ctx.op.Slice(start_positions, ctx.const([1], i64), ctx.const([2**62], i64)), n, axis=0
        )
        counts = ctx.op.Sub(ends, start_positions)
    else:
        counts = _empty_index(ctx)
    return values, inverse, counts


def _equal_dtype(dtype: torch.dtype) -> torch.dtype:
    """onnxruntime's comparisons have no bfloat16 kernels; compare those as float32."""
    return torch.float32 if dtype is torch.bfloat16 else dtype


# ------------------------------------------------------------------------- searchsorted
def _search(ctx, sorted_sequence, values, right, sorter, out_int32):
    """Insertion points of ``values`` into the last axis of ``sorted_sequence``.

    A value's left insertion point is how many sequence entries are smaller than it (right:
    smaller or equal): one comparison against every entry and a sum, exact for any sorted
    sequence and free of data-dependent control flow.
    """
    if isinstance(values, ir.Value):
        seq, vals = ctx.promote(sorted_sequence, values)
    else:
        seq = sorted_sequence
        vals = ctx.scalar_like(values, seq)
    if sorter is not None:
        seq = ctx.op.GatherElements(seq, sorter, axis=ctx.rank(sorted_sequence) - 1)
    seq_rank = ctx.rank(sorted_sequence)
    expanded_vals = ctx.op.Unsqueeze(vals, ctx.const([-1], i64))
    if seq_rank > 1:
        seq = ctx.op.Unsqueeze(seq, ctx.const([-2], i64))
    compare = ctx.op.LessOrEqual if right else ctx.op.Less
    work = _equal_dtype(ctx.dtype(seq))
    below = compare(ctx.cast(seq, work), ctx.cast(expanded_vals, work))
    values_rank = ctx.rank(values) if isinstance(values, ir.Value) else 0
    last = max(values_rank + 1, seq_rank + (1 if seq_rank > 1 else 0)) - 1
    # A non-negative axis: onnxruntime ignores negative axes when the input is empty.
    positions = R.reduce(ctx, "ReduceSum", ctx.cast(below, i64), [last], False)
    return ctx.cast(positions, torch.int32 if out_int32 else i64)


def _is_right(right, side):
    return side == "right" if side is not None else bool(right)


@translates(aten.searchsorted.Tensor, aten.searchsorted.Scalar)
def searchsorted(
    ctx, sorted_sequence, self, *, out_int32=False, right=False, side=None, sorter=None
):
    return _search(ctx, sorted_sequence, self, _is_right(right, side), sorter, out_int32)


@translates(aten.bucketize.Tensor, aten.bucketize.Scalar)
def bucketize(ctx, self, boundaries, *, out_int32=False, right=False):
    return _search(ctx, boundaries, self, bool(right), None, out_int32)
