"""Histograms: ``histogram`` (bin count or bin edges) and the ``_histogramdd_*`` ops that
``torch.histogramdd`` is made of, plus Meta kernels so these CPU-only ops trace with dynamic
shapes.

Every histogram is one multi-dimensional binning: each point (a row of the input reshaped to
``(-1, N)``) gets a bin per dimension, the bins combine into one flat index, and a single
ScatterElements sums the counts or weights. Bin counts take torch's linear interpolation with a
local search among the neighbouring edges; explicit edges take a full search, as torch does.
"""

from __future__ import annotations

import math

import onnx_ir as ir
import torch

from torch_onnx_conformance.exporter.ops import _numerics as nx
from torch_onnx_conformance.exporter.ops import _reduce as R
from torch_onnx_conformance.exporter.ops import _shape as S
from torch_onnx_conformance.exporter.ops._fake_kernels import fake_kernels, meta_library
from torch_onnx_conformance.exporter.ops._registry import translates

aten = torch.ops.aten
i64 = torch.int64


# ------------------------------------------------------------------------------ Meta kernels
def _check_bin_counts(self: torch.Tensor, bins: list[int], range: list[float] | None) -> None:
    torch._check(
        self.dim() >= 1 and self.shape[-1] == len(bins),
        lambda: (
            f"histogramdd: expected the input's last dimension to be {len(bins)}, "
            f"the number of bin counts; got shape {tuple(self.shape)}"
        ),
    )
    torch._check(
        range is None or len(range) == 2 * len(bins),
        lambda: f"histogramdd: expected {2 * len(bins)} range values, got {range}",
    )


def _histogram_bin_ct_meta(self, bins=100, *, range=None, weight=None, density=False):
    return self.new_empty([bins]), self.new_empty([bins + 1])


def _histogram_bins_tensor_meta(self, bins, *, weight=None, density=False):
    return self.new_empty([bins.shape[0] - 1]), self.new_empty(bins.shape)


def _histogramdd_bin_edges_meta(self, bins, *, range=None, weight=None, density=False):
    _check_bin_counts(self, bins, range)
    return [self.new_empty([b + 1]) for b in bins]


def _histogramdd_from_bin_cts_meta(self, bins, *, range=None, weight=None, density=False):
    _check_bin_counts(self, bins, range)
    return self.new_empty(list(bins))


def _histogramdd_from_bin_tensors_meta(self, bins, *, weight=None, density=False):
    torch._check(
        self.dim() >= 1 and self.shape[-1] == len(bins),
        lambda: (
            f"histogramdd: expected the input's last dimension to be {len(bins)}, "
            f"the number of bin edge tensors; got shape {tuple(self.shape)}"
        ),
    )
    return self.new_empty([b.shape[0] - 1 for b in bins])


_META_KERNELS = {
    "histogram.bin_ct": _histogram_bin_ct_meta,
    "histogram.bins_tensor": _histogram_bins_tensor_meta,
    "_histogramdd_bin_edges": _histogramdd_bin_edges_meta,
    "_histogramdd_from_bin_cts": _histogramdd_from_bin_cts_meta,
    "_histogramdd_from_bin_tensors": _histogramdd_from_bin_tensors_meta,
}


@fake_kernels
def _register_meta_kernels() -> torch.library.Library | None:
    """Give the histogram ops Meta kernels: they have CPU kernels only, and fake tensors can
    fall back to a real kernel for static shapes alone. Ops that already have one (a newer
    torch, or an outer export) are left as they are."""
    return meta_library(_META_KERNELS)


# ------------------------------------------------------------------------------ translation
def _columns(ctx, x: ir.Value, dims: int) -> list[ir.Value]:
    """The ``dims`` coordinates of every point: the input as ``(-1, dims)``, split by column."""
    points = ctx.op.Reshape(x, ctx.const([-1, dims], i64))
    return [ctx.op.Gather(points, ctx.const(d, i64), axis=1) for d in range(dims)]


def _point_count(ctx, x: ir.Value, dims: int) -> int | None:
    shape = ctx.static_shape(x)
    return None if shape is None else math.prod(shape) // max(dims, 1)


def _outer_edges(ctx, column, points: int | None, low: float | None, high: float | None, work):
    """The first and last edge of one dimension: the given range, else the data's min and max
    ([0, 1] when there is no data; ``points`` is the point count when static); an empty range
    widens by 0.5 on each side, as in numpy."""
    if low is not None:
        if low == high:
            low, high = low - 0.5, high + 0.5
        return ctx.const(low, work), ctx.const(high, work)
    low = R.reduce(ctx, "ReduceMin", column, [0], False)
    high = R.reduce(ctx, "ReduceMax", column, [0], False)
    if points is None or points == 0:
        empty = ctx.op.Equal(ctx.op.Size(column), ctx.const(0, i64))
        low = ctx.op.Where(empty, ctx.const(0.0, work), low)
        high = ctx.op.Where(empty, ctx.const(1.0, work), high)
    same = ctx.op.Equal(low, high)
    half = ctx.const(0.5, work)
    return (
        ctx.op.Where(same, ctx.op.Sub(low, half), low),
        ctx.op.Where(same, ctx.op.Add(high, half), high),
    )


def _counted_bins(ctx, column: ir.Value, bins: int, low, high, work):
    """Edges and (bin index, inside) per point for a bin count, as torch's linear kernel."""
    edges = nx.linspace(ctx, low, high, bins + 1, work)
    index = nx.bin_index(ctx, column, low, high, bins, edges)
    inside = ctx.op.Less(index, ctx.const(bins, i64))
    return edges, ctx.op.Where(inside, index, ctx.const(0, i64)), inside


def _searched_bins(ctx, column: ir.Value, edges: ir.Value, bin_count: ir.Value):
    """(bin index, inside) per point for explicit edges: the number of edges <= the value, less
    one; the last bin includes its right edge; values outside the edges (and NaN) are out."""
    below = ctx.op.LessOrEqual(
        ctx.op.Unsqueeze(edges, ctx.const([0], i64)), ctx.op.Unsqueeze(column, ctx.const([1], i64))
    )
    found = R.reduce(ctx, "ReduceSum", ctx.cast(below, i64), [1], False)
    last = ctx.op.Sub(bin_count, ctx.const(1, i64))
    index = ctx.op.Min(ctx.op.Sub(found, ctx.const(1, i64)), last)
    low = ctx.op.Gather(edges, ctx.const(0, i64), axis=0)
    high = ctx.op.Gather(edges, ctx.const(-1, i64), axis=0)
    inside = ctx.op.And(ctx.op.GreaterOrEqual(column, low), ctx.op.LessOrEqual(column, high))
    return ctx.op.Max(index, ctx.const(0, i64)), inside


def _bin_count_of(ctx, edges: ir.Value) -> ir.Value | int:
    """Number of bins between 1-D ``edges``: a Python int when static, else a 0-d value."""
    size = S.static_dim(ctx, edges, 0)
    if size is not None:
        return size - 1
    return ctx.op.Sub(ctx.op.Squeeze(ctx.op.Shape(edges), ctx.const([0], i64)), ctx.const(1, i64))


def _as_value(ctx, n: ir.Value | int) -> ir.Value:
    return ctx.const(n, i64) if isinstance(n, int) else n


def _accumulate(ctx, indices, insides, bin_counts, weight, work):
    """The histogram of shape ``bin_counts``: per point, the flat index of its bins; points
    outside any dimension's range go to an extra slot that is dropped."""
    flat = None
    for index, count in zip(indices, bin_counts):
        flat = index if flat is None else ctx.op.Add(ctx.op.Mul(flat, _as_value(ctx, count)), index)
    inside = insides[0]
    for more in insides[1:]:
        inside = ctx.op.And(inside, more)
    if all(isinstance(c, int) for c in bin_counts):
        total = ctx.const(math.prod(bin_counts), i64)
        shape = ctx.const(list(bin_counts), i64)
    else:
        total = ctx.const(1, i64)
        for count in bin_counts:
            total = ctx.op.Mul(total, _as_value(ctx, count))
        shape = ctx.ints(list(bin_counts))
    flat = ctx.op.Where(inside, flat, total)
    slots = ctx.op.Add(total, ctx.const(1, i64))
    zeros = S.constant_of_shape(ctx, ctx.op.Reshape(slots, ctx.const([1], i64)), 0, work)
    if weight is None:
        weight = ctx.op.Expand(ctx.const(1, work), ctx.op.Shape(flat))
    else:
        weight = ctx.op.Reshape(ctx.cast(weight, work), ctx.const([-1], i64))
    sums = ctx.op.ScatterElements(zeros, flat, weight, axis=0, reduction="add")
    kept = ctx.op.Slice(sums, ctx.const([0], i64), ctx.op.Reshape(total, ctx.const([1], i64)))
    return ctx.op.Reshape(kept, shape)


def _density(ctx, hist: ir.Value, edges: list[ir.Value]) -> ir.Value:
    """torch's normalisation: divide by the total, then by each dimension's bin widths."""
    hist = ctx.op.Div(hist, ctx.op.ReduceSum(hist, keepdims=0))
    dims = len(edges)
    for d, e in enumerate(edges):
        widths = ctx.op.Sub(
            ctx.op.Slice(e, ctx.const([1], i64), ctx.const([2**62], i64)),
            ctx.op.Slice(e, ctx.const([0], i64), ctx.const([-1], i64)),
        )
        shape = [1] * dims
        shape[d] = -1
        hist = ctx.op.Div(hist, ctx.op.Reshape(widths, ctx.const(shape, i64)))
    return hist


def _from_bin_counts(ctx, self, bins, range, weight, density):
    """(hist, edges) in the work dtype for per-dimension bin counts."""
    work = R.float_work(ctx.dtype(self))
    columns = _columns(ctx, ctx.cast(self, work), len(bins))
    points = _point_count(ctx, self, len(bins))
    edges, indices, insides = [], [], []
    for d, (column, count) in enumerate(zip(columns, bins)):
        given = (range[2 * d], range[2 * d + 1]) if range is not None else (None, None)
        low, high = _outer_edges(ctx, column, points, *given, work)
        e, index, inside = _counted_bins(ctx, column, count, low, high, work)
        edges.append(e)
        indices.append(index)
        insides.append(inside)
    hist = _accumulate(ctx, indices, insides, list(bins), weight, work)
    if density:
        hist = _density(ctx, hist, edges)
    return hist, edges


def _from_bin_edges(ctx, self, bins, weight, density):
    """hist in the work dtype for explicit per-dimension edges."""
    work = R.float_work(ctx.dtype(self))
    columns = _columns(ctx, ctx.cast(self, work), len(bins))
    edges = [ctx.cast(b, work) for b in bins]
    counts = [_bin_count_of(ctx, e) for e in edges]
    indices, insides = [], []
    for column, e, count in zip(columns, edges, counts):
        index, inside = _searched_bins(ctx, column, e, _as_value(ctx, count))
        indices.append(index)
        insides.append(inside)
    hist = _accumulate(ctx, indices, insides, counts, weight, work)
    if density:
        hist = _density(ctx, hist, edges)
    return hist


@translates(aten.histogram.bin_ct)
def histogram(ctx, self, bins=100, *, range=None, weight=None, density=False):
    out = ctx.dtype(self)
    hist, edges = _from_bin_counts(ctx, self, [bins], range, weight, density)
    return ctx.cast(hist, out), ctx.cast(edges[0], out)


@translates(aten.histogram.bins_tensor)
def histogram_edges(ctx, self, bins, *, weight=None, density=False):
    out = ctx.dtype(self)
    hist = _from_bin_edges(ctx, self, [bins], weight, density)
    # torch returns a copy of the edges it was given.
    return ctx.cast(hist, out), ctx.op.Identity(ctx.cast(bins, out))


@translates(aten._histogramdd_bin_edges.default)
def histogramdd_bin_edges(ctx, self, bins, *, range=None, weight=None, density=False):
    out = ctx.dtype(self)
    work = R.float_work(out)
    columns = _columns(ctx, ctx.cast(self, work), len(bins))
    points = _point_count(ctx, self, len(bins))
    edges = []
    for d, (column, count) in enumerate(zip(columns, bins)):
        given = (range[2 * d], range[2 * d + 1]) if range is not None else (None, None)
        low, high = _outer_edges(ctx, column, points, *given, work)
        edges.append(ctx.cast(nx.linspace(ctx, low, high, count + 1, work), out))
    return tuple(edges)


@translates(aten._histogramdd_from_bin_cts.default)
def histogramdd_from_bin_cts(ctx, self, bins, *, range=None, weight=None, density=False):
    hist, _ = _from_bin_counts(ctx, self, list(bins), range, weight, density)
    return ctx.cast(hist, ctx.dtype(self))


@translates(aten._histogramdd_from_bin_tensors.default)
def histogramdd_from_bin_tensors(ctx, self, bins, *, weight=None, density=False):
    return ctx.cast(_from_bin_edges(ctx, self, list(bins), weight, density), ctx.dtype(self))
