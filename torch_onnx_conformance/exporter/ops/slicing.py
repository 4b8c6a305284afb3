"""Basic slicing: slice, select, narrow, diagonals, and the scatters that write them back.

Bounds may be Python ints or symbolic (SymInt values); ONNX Slice clamps out-of-range and
negative bounds the same way Python slicing does, so huge ends and negative starts need no
special handling.
"""

from __future__ import annotations

import onnx_ir as ir
import torch

from torch_onnx_conformance.exporter.ops import _kernels
from torch_onnx_conformance.exporter.ops import _shape as S
from torch_onnx_conformance.exporter.ops._registry import translates

aten = torch.ops.aten


def _bound(ctx, value, default: int) -> S.Size:
    return default if value is None else S.as_size(ctx, value)


@translates(aten.slice.Tensor, aten.slice_copy.Tensor)
def slice_(ctx, self, dim=0, start=None, end=None, step=1):
    rank = S.rank_of(ctx, self)
    axis_ = S.axis(dim, rank)
    start = _bound(ctx, start, 0)
    end = _bound(ctx, end, S.INT64_MAX)
    size = (ctx.shape(self) or [None] * rank)[axis_]
    whole = (
        S.is_static(start)
        and start == 0
        and step == 1
        and S.is_static(end)
        and (end == S.INT64_MAX or (S.is_static(size) and end >= size))
    )
    if whole:
        return ctx.op.Identity(self)
    return ctx.op.Slice(
        self, S.as_1d(ctx, start), S.as_1d(ctx, end), [axis_], S.as_1d(ctx, S.as_size(ctx, step))
    )


def _nonnegative(ctx, index: S.Size, size: S.Size) -> S.Size:
    """A torch index (negative counts from the end) as a non-negative one."""
    if S.is_static(index):
        return index if index >= 0 else S.add(ctx, size, index)
    return ctx.op.Where(ctx.op.Less(index, [0]), ctx.op.Add(index, S.as_1d(ctx, size)), index)


@translates(aten.narrow.default, aten.narrow.Tensor, aten.narrow_copy.default)
def narrow(ctx, self, dim, start, length):
    axis_ = S.axis(dim, S.rank_of(ctx, self))
    start = _nonnegative(ctx, S.as_size(ctx, start), S.dim_size(ctx, self, axis_))
    end = S.add(ctx, start, S.as_size(ctx, length))
    return ctx.op.Slice(self, S.as_1d(ctx, start), S.as_1d(ctx, end), [axis_])


@translates(aten.select.int, aten.select_copy.int)
def select(ctx, self, dim, index):
    axis_ = S.axis(dim, S.rank_of(ctx, self))
    return ctx.op.Gather(self, ctx.scalar(index), axis=axis_)


# ---------------------------------------------------------------------------- scatters
def _static_span(start, end, step, size) -> tuple[int, int | None] | None:
    """Bounds (start, end) of a unit-step slice that x[:start] ++ src ++ x[end:] can rebuild
    without knowing the dim size, else None; end None means "to the end". With a symbolic size
    that holds when both bounds have the same sign and start <= end: Slice then clamps them
    exactly as torch does."""
    if not (S.is_static(start) and S.is_static(end) and S.is_static(step)) or step != 1:
        return None
    if S.is_static(size):
        lo, hi, _ = slice(start, end).indices(size)
        hi = max(lo, hi)
        return lo, None if hi >= size else hi
    if end == S.INT64_MAX:
        return start, None
    if (start >= 0) == (end >= 0) and start <= end:
        return start, end
    return None


def _splice(ctx, x: ir.Value, src: ir.Value, lo: int, hi: int | None, axis_: int) -> ir.Value:
    """x[:lo] ++ src ++ x[hi:] along ``axis_``: a write without any scatter."""
    parts = []
    if lo != 0:
        parts.append(ctx.op.Slice(x, [0], [lo], [axis_]))
    parts.append(src)
    if hi is not None:
        parts.append(ctx.op.Slice(x, [hi], [S.INT64_MAX], [axis_]))
    return ctx.op.Identity(src) if len(parts) == 1 else ctx.op.Concat(*parts, axis=axis_)


def _positions(ctx, size: S.Size, start, end, step) -> ir.Value:
    """The indices a slice covers: arange(size)[start:end:step], clamped like Python."""
    zero, one = ctx.const(0, torch.int64), ctx.const(1, torch.int64)
    every = ctx.op.Range(zero, S.as_0d(ctx, size), one)
    return ctx.op.Slice(every, S.as_1d(ctx, start), S.as_1d(ctx, end), [0], S.as_1d(ctx, step))


def scatter_along(
    ctx,
    x: ir.Value,
    src: ir.Value,
    src_rank: int,
    positions: ir.Value,
    axis_: int,
    src_shape: ir.Value,
) -> ir.Value:
    """Write ``src`` into ``x`` at 1-D ``positions`` along ``axis_`` (ScatterElements)."""
    shape = [1] * src_rank
    shape[axis_] = -1
    index = ctx.op.Expand(ctx.op.Reshape(positions, shape), src_shape)
    return ctx.op.ScatterElements(x, index, src, axis=axis_)


@translates(aten.slice_scatter.default)
def slice_scatter(ctx, self, src, dim=0, start=None, end=None, step=1):
    rank = S.rank_of(ctx, self)
    axis_ = S.axis(dim, rank)
    src = ctx.cast(src, ctx.dtype(self))
    start = _bound(ctx, start, 0)
    end = _bound(ctx, end, S.INT64_MAX)
    size = S.dim_size(ctx, self, axis_)
    span = _static_span(start, end, step, size)
    if span is not None:
        if span[0] == span[1]:
            return ctx.op.Identity(self)  # src is empty
        return _splice(ctx, self, src, span[0], span[1], axis_)
    positions = _positions(ctx, size, start, end, S.as_size(ctx, step))
    return scatter_along(ctx, self, src, rank, positions, axis_, S.shape_value(ctx, src))


@translates(aten.select_scatter.default)
def select_scatter(ctx, self, src, dim, index):
    rank = S.rank_of(ctx, self)
    axis_ = S.axis(dim, rank)
    size = S.dim_size(ctx, self, axis_)
    src = ctx.op.Unsqueeze(ctx.cast(src, ctx.dtype(self)), [axis_])
    if S.is_static(index):
        if S.is_static(size) and index < 0:
            index += size
        last = index == -1 or (S.is_static(size) and index + 1 >= size)
        return _splice(ctx, self, src, index, None if last else index + 1, axis_)
    index = _nonnegative(ctx, S.as_size(ctx, index), size)
    src_shape = S.concat_sizes(
        ctx, [S.dim_size(ctx, self, i) if i != axis_ else 1 for i in range(rank)]
    )
    return scatter_along(ctx, self, src, rank, S.as_1d(ctx, index), axis_, src_shape)


# --------------------------------------------------------------------------- diagonals
class _Diagonal:
    """Where the diagonal of the (dim1, dim2) planes sits once those dims are moved last and
    flattened: element i is at ``first + i * (cols + 1)`` for i < ``length``."""

    def __init__(self, ctx, x: ir.Value, offset: int, dim1: int, dim2: int) -> None:
        rank = S.rank_of(ctx, x)
        self.a1, self.a2 = S.axis(dim1, rank), S.axis(dim2, rank)
        if self.a1 == self.a2:
            raise ValueError(f"diagonal dimensions cannot be identical: {dim1}, {dim2}")
        self.batch_axes = [i for i in range(rank) if i not in (self.a1, self.a2)]
        self.perm = [*self.batch_axes, self.a1, self.a2]
        self.batch = [S.dim_size(ctx, x, i) for i in self.batch_axes]
        rows, cols = S.dim_size(ctx, x, self.a1), S.dim_size(ctx, x, self.a2)
        self.rows, self.cols = rows, cols
        if offset >= 0:
            self.length = S.maximum(ctx, 0, S.minimum(ctx, rows, S.sub(ctx, cols, offset)))
            self.first: S.Size = offset
        else:
            self.length = S.maximum(ctx, 0, S.minimum(ctx, S.add(ctx, rows, offset), cols))
            self.first = S.mul(ctx, -offset, cols)

    def flat(self, ctx, x: ir.Value) -> ir.Value:
        moved = x if self.perm == sorted(self.perm) else ctx.op.Transpose(x, perm=self.perm)
        target = S.concat_sizes(ctx, [*self.batch, S.mul(ctx, self.rows, self.cols)])
        return S.reshape(ctx, moved, target, allowzero=True)

    def unflat(self, ctx, flat: ir.Value) -> ir.Value:
        target = S.concat_sizes(ctx, [*self.batch, self.rows, self.cols])
        moved = S.reshape(ctx, flat, target, allowzero=True)
        if self.perm == sorted(self.perm):
            return moved
        inverse = [self.perm.index(i) for i in range(len(self.perm))]
        return ctx.op.Transpose(moved, perm=inverse)


@translates(aten.diagonal.default, aten.diagonal_copy.default)
def diagonal(ctx, self, offset=0, dim1=0, dim2=1):
    diag = _Diagonal(ctx, self, offset, dim1, dim2)
    flat = diag.flat(ctx, self)
    stride = S.add(ctx, diag.cols, 1)
    # A strided slice picks the diagonal; end = first + length*stride stops after the last one.
    end = S.add(ctx, diag.first, S.mul(ctx, diag.length, stride))
    return ctx.op.Slice(
        flat, S.as_1d(ctx, diag.first), S.as_1d(ctx, end), [-1], S.as_1d(ctx, stride)
    )


@translates(aten.linalg_diagonal.default)
def linalg_diagonal(ctx, A, *, offset=0, dim1=-2, dim2=-1):
    return diagonal(ctx, A, offset, dim1, dim2)


@translates(aten.diagonal_scatter.default)
def diagonal_scatter(ctx, self, src, offset=0, dim1=0, dim2=1):
    diag = _Diagonal(ctx, self, offset, dim1, dim2)
    flat = diag.flat(ctx, self)
    zero, one = ctx.const(0, torch.int64), ctx.const(1, torch.int64)
    steps = ctx.op.Range(zero, S.as_0d(ctx, diag.length), one)
    positions = ctx.op.Add(
        ctx.op.Mul(steps, S.as_1d(ctx, S.add(ctx, diag.cols, 1))), S.as_1d(ctx, diag.first)
    )
    index = ctx.op.Expand(positions, S.shape_value(ctx, src))
    written = ctx.op.ScatterElements(flat, index, ctx.cast(src, ctx.dtype(self)), axis=-1)
    return diag.unflat(ctx, written)


def embed_diagonal(
    ctx,
    x: ir.Value,
    offset: int,
    dim1: int,
    dim2: int,
    *,
    rank: int | None = None,
    length: S.Size | None = None,
) -> ir.Value:
    """torch.diag_embed: the last dim of ``x`` becomes a diagonal of new (dim1, dim2) planes.

    ``rank`` and ``length`` (size of the last dim) are read from the FX metadata unless given.
    """
    if rank is None:
        rank = S.rank_of(ctx, x)
        length = S.dim_size(ctx, x, -1) if rank else 1
    if rank == 0:
        x, rank = ctx.op.Reshape(x, [1]), 1
    k = abs(offset)
    n = S.add(ctx, length, k)
    if k:
        # Trailing zeros make every row (or column) of the n x n plane index into x.
        x = _kernels.data_op(ctx, "Pad", "Pad", x, [0] * (2 * rank - 1) + [k])
    zero, one = ctx.const(0, torch.int64), ctx.const(1, torch.int64)
    steps = ctx.op.Range(zero, S.as_0d(ctx, n), one)
    mask = ctx.op.Equal(
        ctx.op.Add(ctx.op.Unsqueeze(steps, [1]), ctx.const(offset, torch.int64)),
        ctx.op.Unsqueeze(steps, [0]),
    )
    values = ctx.op.Unsqueeze(x, [-1] if offset >= 0 else [-2])
    plane = _kernels.where(ctx, mask, values, ctx.const(0, ctx.dtype(x)))
    out_rank = rank + 1
    a1, a2 = S.axis(dim1, out_rank), S.axis(dim2, out_rank)
    if a1 == a2:
        raise ValueError(f"diag_embed dimensions cannot be identical: {dim1}, {dim2}")
    batch = iter(range(rank - 1))
    perm = [rank - 1 if p == a1 else rank if p == a2 else next(batch) for p in range(out_rank)]
    return plane if perm == sorted(perm) else ctx.op.Transpose(plane, perm=perm)


@translates(aten.diag_embed.default)
def diag_embed(ctx, self, offset=0, dim1=-2, dim2=-1):
    return embed_diagonal(ctx, self, offset, dim1, dim2)


@translates(aten.diag.default)
def diag(ctx, self, diagonal_=0):
    if S.rank_of(ctx, self) == 1:
        return embed_diagonal(ctx, self, diagonal_, 0, 1)
    return diagonal(ctx, self, diagonal_, 0, 1)


@translates(aten.diagflat.default)
def diagflat(ctx, self, offset=0):
    static = ctx.static_shape(self)
    numel = (
        int(torch.Size(static).numel())
        if static is not None
        else ctx.op.Reshape(ctx.op.Size(self), [1])
    )
    return embed_diagonal(ctx, ctx.op.Reshape(self, [-1]), offset, 0, 1, rank=1, length=numel)
