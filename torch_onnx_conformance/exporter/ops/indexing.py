"""Indexing: advanced indexing (index / index_put), gather and scatter families, masks,
nonzero, take.

Advanced indexing follows numpy's rules: index tensors broadcast together; when they sit on
adjacent dims the broadcast dims replace them in place, otherwise they move to the front. The
translation moves the indexed dims first (Transpose), uses one GatherND / ScatterND, and moves
the result back where torch puts it.
"""

from __future__ import annotations

import dataclasses

import onnx_ir as ir
import torch

from torch_onnx_conformance.exporter.ops import _kernels
from torch_onnx_conformance.exporter.ops import _shape as S
from torch_onnx_conformance.exporter.ops._registry import translates

aten = torch.ops.aten


def _bool_like(ctx, value: ir.Value) -> bool:
    return ctx.dtype(value) in (torch.bool, torch.uint8)


def _flat(ctx, x: ir.Value) -> ir.Value:
    return ctx.op.Reshape(x, [-1])


def scatter_elements(
    ctx, x: ir.Value, index: ir.Value, updates: ir.Value, axis_: int, reduction: str | None = None
) -> ir.Value:
    """ScatterElements with ``updates`` cast to ``x``'s dtype, computed where ORT has kernels."""
    dtype = ctx.dtype(x)
    updates = ctx.cast(updates, dtype)
    run = _kernels.kernel_dtype(f"ScatterElements-{reduction}", dtype) if reduction else dtype
    if dtype is torch.bool and reduction in ("add", "mul"):
        run = torch.int32  # sums and products of 0/1 that the cast back turns into or / and
    x, updates = ctx.cast(x, run), ctx.cast(updates, run)
    out = ctx.op.ScatterElements(x, index, updates, axis=axis_, reduction=reduction)
    return ctx.cast(out, dtype)


# ------------------------------------------------------------------ advanced indexing
@dataclasses.dataclass
class _Plan:
    """Advanced indices normalised: int64 index values on dims ``axes`` of the input."""

    rank: int
    axes: list[int]
    indices: list[ir.Value]
    index_ranks: list[int]
    index_shapes: list[tuple | None]

    @property
    def adjacent(self) -> bool:
        return self.axes == list(range(self.axes[0], self.axes[-1] + 1))

    @property
    def batch_rank(self) -> int:
        return max(self.index_ranks)

    @property
    def front_perm(self) -> list[int]:
        """Permutation that moves the indexed dims first (ONNX GatherND/ScatterND order)."""
        return self.axes + [d for d in range(self.rank) if d not in self.axes]

    @property
    def result_perm(self) -> list[int] | None:
        """Permutation from GatherND's (batch, rest) order to torch's, or None if equal."""
        if not self.adjacent or self.axes[0] == 0:
            return None
        nb, before = self.batch_rank, self.axes[0]
        after = self.rank - before - len(self.axes)
        return (
            [nb + i for i in range(before)]
            + list(range(nb))
            + [nb + before + i for i in range(after)]
        )


def plan_indices(ctx, x: ir.Value, indices) -> _Plan:
    rank = S.rank_of(ctx, x)
    axes, values, ranks, shapes = [], [], [], []
    dim = 0
    for idx in indices:
        if idx is None:
            dim += 1
            continue
        if _bool_like(ctx, idx):
            k = S.rank_of(ctx, idx)
            if k == 0:
                raise ValueError(
                    "indexing with a 0-d boolean tensor is not supported; use "
                    "torch.where or an explicit unsqueeze instead"
                )
            coords = ctx.op.NonZero(
                idx if ctx.dtype(idx) is torch.bool else ctx.cast(idx, torch.bool)
            )
            for j in range(k):
                axes.append(dim + j)
                values.append(ctx.op.Gather(coords, ctx.const(j, torch.int64), axis=0))
                ranks.append(1)
                shapes.append(None)
            dim += k
            continue
        axes.append(dim)
        values.append(ctx.cast(idx, torch.int64))
        ranks.append(S.rank_of(ctx, idx))
        shapes.append(ctx.shape(idx))
        dim += 1
    if dim > rank:
        raise IndexError(f"too many indices for a tensor of rank {rank}: {dim} dims indexed")
    if not axes:
        raise ValueError("index needs at least one index tensor")
    return _Plan(rank, axes, values, ranks, shapes)


def _broadcast_shape(ctx, plan: _Plan) -> ir.Value:
    if all(s is not None and all(S.is_static(d) for d in s) for s in plan.index_shapes):
        return ctx.const(list(torch.broadcast_shapes(*plan.index_shapes)), torch.int64)
    # Expand broadcasts both ways, so expanding one index by the others' shapes yields the
    # common shape even when some of them are only known at run time.
    shape = ctx.op.Shape(plan.indices[0])
    for idx in plan.indices[1:]:
        shape = ctx.op.Shape(ctx.op.Expand(idx, shape))
    return shape


def _stacked(ctx, plan: _Plan) -> ir.Value:
    """(batch..., k) int64 coordinates for GatherND / ScatterND."""
    shape = _broadcast_shape(ctx, plan)
    parts = [ctx.op.Unsqueeze(ctx.op.Expand(i, shape), [-1]) for i in plan.indices]
    return parts[0] if len(parts) == 1 else ctx.op.Concat(*parts, axis=-1)


def _moved_front(ctx, x: ir.Value, plan: _Plan) -> ir.Value:
    perm = plan.front_perm
    return x if perm == list(range(plan.rank)) else ctx.op.Transpose(x, perm=perm)


def _clamp_in_range(ctx, x: ir.Value, plan: _Plan) -> None:
    """Clamp indices into [-size, size-1]: masked indexing may carry junk where masked off."""
    for i, axis_ in enumerate(plan.axes):
        size = S.as_0d(ctx, S.dim_size(ctx, x, axis_))
        low = ctx.op.Neg(size)
        high = ctx.op.Sub(size, ctx.const(1, torch.int64))
        plan.indices[i] = ctx.op.Min(ctx.op.Max(plan.indices[i], low), high)


def index_tensor(ctx, x: ir.Value, indices, *, clamp: bool = False) -> ir.Value:
    plan = plan_indices(ctx, x, indices)
    if clamp:
        _clamp_in_range(ctx, x, plan)
    if len(plan.axes) == 1 and not clamp:
        # One index tensor: Gather puts its dims exactly where torch does.
        only = indices[[i for i, v in enumerate(indices) if v is not None][0]]
        if _bool_like(ctx, only):
            return _kernels.data_op(
                ctx, "Compress", "Compress", x, ctx.cast(only, torch.bool), axis=plan.axes[0]
            )
        return ctx.op.Gather(x, plan.indices[0], axis=plan.axes[0])
    gathered = ctx.op.GatherND(_moved_front(ctx, x, plan), _stacked(ctx, plan))
    perm = plan.result_perm
    return gathered if perm is None else ctx.op.Transpose(gathered, perm=perm)


@translates(
    aten.index.Tensor,
    aten.index.Tensor_hacked_twin,
    aten._unsafe_index.Tensor,
    aten._unsafe_index.Tensor_hacked_twin,
)
def index(ctx, self, indices):
    return index_tensor(ctx, self, indices)


def _mask_fill_plan(ctx, x, indices, values, accumulate) -> tuple[ir.Value, int] | None:
    """x[mask] = scalar is a masked fill: no data-dependent shapes, one Where."""
    if accumulate:
        return None
    given = [(i, v) for i, v in enumerate(indices) if v is not None]
    if len(given) != 1 or not _bool_like(ctx, given[0][1]):
        return None
    shape = ctx.shape(values)
    if shape is None or not all(S.is_static(d) and d == 1 for d in shape):
        return None
    return given[0][1], given[0][0]


def index_put_impl(
    ctx, x: ir.Value, indices, values: ir.Value, accumulate: bool, *, clamp: bool = False
) -> ir.Value:
    dtype = ctx.dtype(x)
    fill = None if clamp else _mask_fill_plan(ctx, x, indices, values, accumulate)
    values = ctx.cast(values, dtype)
    if fill is not None:
        mask, position = fill
        trailing = S.rank_of(ctx, x) - position - S.rank_of(ctx, mask)
        mask = ctx.cast(mask, torch.bool)
        if trailing:
            mask = ctx.op.Unsqueeze(mask, list(range(-trailing, 0)))
        scalar = ctx.op.Reshape(values, [])
        return _kernels.where(ctx, mask, scalar, x)
    plan = plan_indices(ctx, x, indices)
    if clamp:
        _clamp_in_range(ctx, x, plan)
    stacked = _stacked(ctx, plan)
    batch = ctx.op.Shape(stacked, start=0, end=-1)
    rest = [d for d in range(plan.rank) if d not in plan.axes]
    perm = plan.result_perm
    if perm is None:
        pieces = [batch, *[S.dim_size(ctx, x, d) for d in rest]]
    else:
        before = [S.dim_size(ctx, x, d) for d in range(plan.axes[0])]
        after = [S.dim_size(ctx, x, d) for d in range(plan.axes[-1] + 1, plan.rank)]
        pieces = [*before, batch, *after]
    # Values broadcast to the shape x[indices] has in torch's order ...
    updates = ctx.op.Expand(values, S.concat_sizes(ctx, pieces))
    if perm is not None:
        # ... then move to ScatterND's (batch, rest) order.
        updates = ctx.op.Transpose(updates, perm=[perm.index(i) for i in range(len(perm))])
    front = _moved_front(ctx, x, plan)
    reduction = "add" if accumulate else None
    run = _kernels.kernel_dtype("ScatterND-add", dtype) if accumulate else dtype
    front, updates = ctx.cast(front, run), ctx.cast(updates, run)
    if accumulate and dtype is torch.bool:
        # torch ORs booleans together; adding as int32 then testing for nonzero does that.
        front, updates = ctx.cast(front, torch.int32), ctx.cast(updates, torch.int32)
    out = ctx.op.ScatterND(front, stacked, updates, reduction=reduction)
    out = ctx.cast(out, dtype)
    front_perm = plan.front_perm
    if front_perm == list(range(plan.rank)):
        return out
    return ctx.op.Transpose(out, perm=[front_perm.index(i) for i in range(plan.rank)])


@translates(
    aten.index_put.default,
    aten.index_put.hacked_twin,
    aten._unsafe_index_put.default,
    aten._unsafe_index_put.hacked_twin,
)
def index_put(ctx, self, indices, values, accumulate=False):
    return index_put_impl(ctx, self, indices, values, accumulate)


@translates(aten._index_put_impl.default)
def index_put_impl_(ctx, self, indices, values, accumulate=False, unsafe=False):
    return index_put_impl(ctx, self, indices, values, accumulate)


@translates(aten._unsafe_masked_index.default)
def unsafe_masked_index(ctx, self, mask, indices, fill):
    gathered = index_tensor(ctx, self, indices, clamp=True)
    dtype = ctx.dtype(self)
    fill = ctx.cast(fill, dtype) if isinstance(fill, ir.Value) else ctx.const(fill, dtype)
    return _kernels.where(ctx, mask, gathered, fill)


@translates(aten._unsafe_masked_index_put_accumulate.default)
def unsafe_masked_index_put_accumulate(ctx, self, mask, indices, values):
    dtype = ctx.dtype(self)
    values = _kernels.where(ctx, mask, ctx.cast(values, dtype), ctx.const(0, dtype))
    return index_put_impl(ctx, self, indices, values, True, clamp=True)


# ----------------------------------------------------------------------- gather family
def _at_least_1d(ctx, x: ir.Value) -> ir.Value:
    return ctx.op.Reshape(x, [1]) if S.rank_of(ctx, x) == 0 else x


def _back_to_0d(ctx, result: ir.Value, was_0d: bool) -> ir.Value:
    return ctx.op.Reshape(result, []) if was_0d else result


@translates(aten.gather.default)
def gather(ctx, self, dim, index, *, sparse_grad=False):
    rank = S.rank_of(ctx, self)
    axis_ = S.axis(dim, rank)
    if S.rank_of(ctx, index) != max(rank, 1) and rank != S.rank_of(ctx, index):
        # torch lets an empty index of any rank through; the result is empty like it.
        return S.constant_of_shape(ctx, ctx.op.Shape(index), 0, ctx.dtype(self))
    scalar = rank == 0 and S.rank_of(ctx, index) == 0
    index = ctx.cast(index, torch.int64)
    out = ctx.op.GatherElements(
        _at_least_1d(ctx, self), ctx.op.Reshape(index, [1]) if scalar else index, axis=axis_
    )
    return _back_to_0d(ctx, out, scalar)


@translates(aten.index_select.default)
def index_select(ctx, self, dim, index):
    rank = S.rank_of(ctx, self)
    axis_ = S.axis(dim, rank)
    index = ctx.cast(index, torch.int64)
    if S.rank_of(ctx, index) != 1:
        index = _flat(ctx, index)
    out = ctx.op.Gather(_at_least_1d(ctx, self), index, axis=axis_)
    return _back_to_0d(ctx, out, rank == 0)


@translates(aten.take.default)
def take(ctx, self, index):
    return ctx.op.Gather(_flat(ctx, self), ctx.cast(index, torch.int64), axis=0)


@translates(aten.take_along_dim.default)
def take_along_dim(ctx, self, indices, dim=None):
    indices = ctx.cast(indices, torch.int64)
    if dim is None:
        return ctx.op.GatherElements(_flat(ctx, self), _flat(ctx, indices), axis=0)
    rank = S.rank_of(ctx, self)
    axis_ = S.axis(dim, rank)
    # Broadcast every dim but ``dim`` (1 there keeps each tensor's own size).
    data_target = S.concat_sizes(
        ctx, [1 if i == axis_ else S.dim_size(ctx, indices, i) for i in range(rank)]
    )
    index_target = S.concat_sizes(
        ctx, [1 if i == axis_ else S.dim_size(ctx, self, i) for i in range(rank)]
    )
    data = _kernels.data_op(ctx, "Expand", "Expand", self, data_target)
    return ctx.op.GatherElements(data, ctx.op.Expand(indices, index_target), axis=axis_)


# ---------------------------------------------------------------------- scatter family
def _updates_for(ctx, src, index: ir.Value, dtype: torch.dtype) -> ir.Value:
    """torch reads src only where index has entries: crop src (or broadcast a scalar)."""
    if not isinstance(src, ir.Value):
        return ctx.op.Expand(ctx.const(src, dtype), ctx.op.Shape(index))
    src = ctx.cast(src, dtype)
    if S.rank_of(ctx, src) == 0:
        return ctx.op.Expand(src, ctx.op.Shape(index))
    src_shape, index_shape = ctx.shape(src), ctx.shape(index)
    if (
        src_shape is not None
        and index_shape is not None
        and all(S.size_expr(a) == S.size_expr(b) for a, b in zip(src_shape, index_shape))
    ):
        return src
    rank = S.rank_of(ctx, src)
    return ctx.op.Slice(src, [0] * rank, ctx.op.Shape(index), list(range(rank)))


_REDUCTIONS = {
    "sum": "add",
    "add": "add",
    "prod": "mul",
    "multiply": "mul",
    "amax": "max",
    "amin": "min",
}


def _identity(reduce: str, dtype: torch.dtype):
    if reduce in ("sum", "add", "mean"):
        return 0
    if reduce in ("prod", "multiply"):
        return 1
    if dtype is torch.bool:
        return reduce == "amin"
    info = torch.finfo(dtype) if dtype.is_floating_point else torch.iinfo(dtype)
    if dtype.is_floating_point:
        return float("-inf") if reduce == "amax" else float("inf")
    return info.min if reduce == "amax" else info.max


def scatter_reduce_impl(ctx, x, axis_, index, updates, reduce: str | None, include_self=True):
    """scatter / scatter_reduce on tensors of rank >= 1 with updates shaped like index."""
    dtype = ctx.dtype(x)
    if reduce is None:
        return scatter_elements(ctx, x, index, updates, axis_)
    if reduce in ("amax", "amin") and not ctx.has("ScatterND-reduction-max"):
        return _scatter_minmax_dense(ctx, x, axis_, index, updates, reduce, include_self)
    if reduce == "mean":
        return _scatter_mean(ctx, x, axis_, index, updates, include_self)
    if reduce not in _REDUCTIONS:
        raise ValueError(
            f"unknown scatter reduction {reduce!r}; expected one of "
            f"{sorted(_REDUCTIONS) + ['mean']}"
        )
    base = x
    if not include_self:
        fresh = ctx.op.Expand(ctx.const(_identity(reduce, dtype), dtype), ctx.op.Shape(index))
        base = scatter_elements(ctx, x, index, fresh, axis_)
    return scatter_elements(ctx, base, index, updates, axis_, _REDUCTIONS[reduce])


def _scatter_minmax_dense(ctx, x, axis_, index, updates, reduce, include_self):
    """amax/amin scatter before opset 18 (no ScatterElements max/min): compare every index
    with every target slot, reduce over the scattered axis. Memory grows with
    index.numel() * x.size(axis), so it is a fallback only."""
    dtype = ctx.dtype(x)
    if ctx.meta(x) is not None:
        rank, size = S.rank_of(ctx, x), S.dim_size(ctx, x, axis_)
    else:  # a 0-d input seen as shape (1,)
        rank, size = 1, ctx.op.Shape(x, start=axis_, end=axis_ + 1)
    reducer = ctx.op.ReduceMax if reduce == "amax" else ctx.op.ReduceMin
    slots = ctx.op.Range(ctx.const(0, torch.int64), S.as_0d(ctx, size), ctx.const(1, torch.int64))
    hits = ctx.op.Equal(ctx.op.Unsqueeze(index, [rank]), slots)  # index.shape + [size]
    fill = ctx.const(_identity(reduce, dtype), dtype)
    candidates = _kernels.where(ctx, hits, ctx.op.Unsqueeze(updates, [rank]), fill)
    swap = list(range(rank + 1))
    swap[axis_], swap[rank] = rank, axis_

    def fold(values, op):
        # Reduce over the scattered axis, then put the slot axis in its place.
        reduced = op(values, axes=[axis_], keepdims=1)
        return ctx.op.Squeeze(ctx.op.Transpose(reduced, perm=swap), [rank])

    best = fold(candidates, reducer)
    written = fold(ctx.cast(hits, torch.int32), ctx.op.ReduceMax)
    # index may be smaller than x in the other dims: pad the tail with "not written".
    missing = ctx.op.Sub(ctx.op.Shape(x), ctx.op.Shape(best))
    pads = ctx.op.Concat(ctx.const([0] * rank, torch.int64), missing, axis=0)
    best = ctx.op.Pad(best, pads, fill)
    written = ctx.cast(ctx.op.Pad(written, pads, ctx.const(0, torch.int32)), torch.bool)
    if include_self:
        best = (ctx.op.Max if reduce == "amax" else ctx.op.Min)(best, x)
    return _kernels.where(ctx, written, best, x)


def _scatter_mean(ctx, x, axis_, index, updates, include_self):
    dtype = ctx.dtype(x)
    work = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    x, updates = ctx.cast(x, work), ctx.cast(updates, work)
    ones_x = ctx.op.Expand(ctx.const(1, work), ctx.op.Shape(x))
    ones_u = ctx.op.Expand(ctx.const(1, work), ctx.op.Shape(index))
    base, count = x, ones_x
    if not include_self:
        zeros_u = ctx.op.Expand(ctx.const(0, work), ctx.op.Shape(index))
        base = scatter_elements(ctx, x, index, zeros_u, axis_)
        # Untouched places keep count 1 (and their own value); written ones start from 0.
        count = scatter_elements(ctx, ones_x, index, zeros_u, axis_)
    total = scatter_elements(ctx, base, index, updates, axis_, "add")
    count = scatter_elements(ctx, count, index, ones_u, axis_, "add")
    if work.is_floating_point:
        return ctx.cast(ctx.op.Div(total, count), dtype)
    # torch floors integer means; Mod takes the divisor's (positive) sign, so this is exact.
    return ctx.op.Div(ctx.op.Sub(total, ctx.op.Mod(total, count)), count)


def _scatter_entry(ctx, self, dim, index, src, reduce=None, include_self=True):
    rank = S.rank_of(ctx, self)
    axis_ = S.axis(dim, rank)
    scalar = rank == 0
    index = ctx.cast(index, torch.int64)
    updates = _updates_for(ctx, src, index, ctx.dtype(self))
    x = _at_least_1d(ctx, self)
    if scalar:
        index, updates = ctx.op.Reshape(index, [-1]), ctx.op.Reshape(updates, [-1])
    out = scatter_reduce_impl(ctx, x, axis_, index, updates, reduce, include_self)
    return _back_to_0d(ctx, out, scalar)


_SCATTER_REDUCE_NAMES = {"add": "sum", "multiply": "prod"}


@translates(aten.scatter.src, aten.scatter.value)
def scatter(ctx, self, dim, index, src):
    return _scatter_entry(ctx, self, dim, index, src)


@translates(aten.scatter.reduce, aten.scatter.value_reduce)
def scatter_with_reduce(ctx, self, dim, index, src, *, reduce):
    return _scatter_entry(ctx, self, dim, index, src, _SCATTER_REDUCE_NAMES.get(reduce, reduce))


@translates(aten.scatter_add.default)
def scatter_add(ctx, self, dim, index, src):
    return _scatter_entry(ctx, self, dim, index, src, "sum")


@translates(aten.scatter_reduce.two)
def scatter_reduce(ctx, self, dim, index, src, reduce, *, include_self=True):
    return _scatter_entry(ctx, self, dim, index, src, reduce, include_self)


# ------------------------------------------------------------------ index_* along a dim
def _along(ctx, self, dim, index, source):
    """Inputs of index_add/copy/reduce as ScatterElements operands of rank >= 1."""
    rank = S.rank_of(ctx, self)
    axis_ = S.axis(dim, rank)
    x = _at_least_1d(ctx, self)
    source = _at_least_1d(ctx, ctx.cast(source, ctx.dtype(self)))
    shape = [1] * max(rank, 1)
    shape[axis_] = -1
    positions = ctx.op.Reshape(ctx.cast(index, torch.int64), shape)
    index_full = ctx.op.Expand(positions, ctx.op.Shape(source))
    return x, axis_, index_full, source, rank == 0


@translates(aten.index_add.default)
def index_add(ctx, self, dim, index, source, *, alpha=1):
    x, axis_, idx, src, scalar = _along(ctx, self, dim, index, source)
    if alpha != 1:
        if ctx.dtype(src) is torch.bool:
            src = ctx.op.And(src, ctx.const(bool(alpha), torch.bool))
        else:
            src = ctx.op.Mul(src, ctx.const(alpha, ctx.dtype(src)))
    return _back_to_0d(ctx, scatter_elements(ctx, x, idx, src, axis_, "add"), scalar)


@translates(aten.index_copy.default)
def index_copy(ctx, self, dim, index, source):
    x, axis_, idx, src, scalar = _along(ctx, self, dim, index, source)
    return _back_to_0d(ctx, scatter_elements(ctx, x, idx, src, axis_), scalar)


@translates(aten.index_reduce.default)
def index_reduce(ctx, self, dim, index, source, reduce, *, include_self=True):
    x, axis_, idx, src, scalar = _along(ctx, self, dim, index, source)
    out = scatter_reduce_impl(ctx, x, axis_, idx, src, reduce, include_self)
    return _back_to_0d(ctx, out, scalar)


@translates(aten.index_fill.int_Scalar, aten.index_fill.int_Tensor)
def index_fill(ctx, self, dim, index, value):
    rank = S.rank_of(ctx, self)
    axis_ = S.axis(dim, rank)
    size = S.dim_size(ctx, self, axis_) if rank else 1
    # A per-slot flag along ``dim`` (scatter tolerates repeated and negative indices).
    flags = S.constant_of_shape(ctx, S.as_1d(ctx, size), 0, torch.uint8)
    index = _flat(ctx, ctx.cast(index, torch.int64))
    ones = ctx.op.Expand(ctx.const([1], torch.uint8), ctx.op.Shape(index))
    flags = ctx.cast(ctx.op.ScatterElements(flags, index, ones, axis=0), torch.bool)
    if rank > 1:
        shape = [1] * rank
        shape[axis_] = -1
        flags = ctx.op.Reshape(flags, shape)
    elif rank == 0:
        flags = ctx.op.Reshape(flags, [])
    dtype = ctx.dtype(self)
    fill = ctx.cast(value, dtype) if isinstance(value, ir.Value) else ctx.const(value, dtype)
    return _kernels.where(ctx, flags, fill, self)


# ----------------------------------------------------------------------------- masks
@translates(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def masked_fill(ctx, self, mask, value):
    dtype = ctx.dtype(self)
    fill = ctx.cast(value, dtype) if isinstance(value, ir.Value) else ctx.const(value, dtype)
    return _kernels.where(ctx, ctx.cast(mask, torch.bool), fill, self)


def _broadcast_pair(ctx, a, b):
    shape = S.out_shape(ctx)
    target = S.target_shape(ctx, shape, [a, b])
    return target, [_kernels.data_op(ctx, "Expand", "Expand", v, target) for v in (a, b)]


@translates(aten.masked_scatter.default)
def masked_scatter(ctx, self, mask, source):
    target, (data, flags) = _broadcast_pair(ctx, self, ctx.cast(mask, torch.bool))
    data, flags = _flat(ctx, data), _flat(ctx, flags)
    dtype = ctx.dtype(self)
    # The k-th True takes source's k-th element: its position is the running count - 1.
    taken = ctx.op.CumSum(ctx.cast(flags, torch.int64), ctx.const(0, torch.int64))
    position = ctx.op.Max(ctx.op.Sub(taken, ctx.const(1, torch.int64)), ctx.const(0, torch.int64))
    # One spare element keeps the gather in range when source is empty (no True in mask).
    pool = ctx.op.Concat(_flat(ctx, ctx.cast(source, dtype)), ctx.const([0], dtype), axis=0)
    picked = ctx.op.Gather(pool, position, axis=0)
    return S.reshape(ctx, _kernels.where(ctx, flags, picked, data), target, allowzero=True)


@translates(aten.masked_select.default)
def masked_select(ctx, self, mask):
    _, (data, flags) = _broadcast_pair_for_select(ctx, self, ctx.cast(mask, torch.bool))
    return _kernels.data_op(
        ctx, "Compress", "Compress", _flat(ctx, data), _flat(ctx, flags), axis=0
    )


def _broadcast_pair_for_select(ctx, a, b):
    # masked_select's output is 1-D, so the broadcast shape comes from the inputs' metadata.
    shapes = [ctx.shape(a), ctx.shape(b)]
    if all(s is not None and all(S.is_static(d) for d in s) for s in shapes):
        target = ctx.const(list(torch.broadcast_shapes(*shapes)), torch.int64)
    else:
        target = ctx.op.Shape(_kernels.data_op(ctx, "Expand", "Expand", a, ctx.op.Shape(b)))
    return target, [_kernels.data_op(ctx, "Expand", "Expand", v, target) for v in (a, b)]


# --------------------------------------------------------------------------- nonzero
def _nonzero_input(ctx, x: ir.Value) -> ir.Value:
    dtype = ctx.dtype(x)
    if dtype is torch.float64:
        return ctx.op.Not(ctx.op.Equal(x, ctx.const(0, dtype)))
    return ctx.cast(x, _kernels.kernel_dtype("NonZero", dtype))


def nonzero_coords(ctx, x: ir.Value) -> ir.Value:
    """(rank, count) coordinates of the nonzero elements, row-major (ONNX NonZero)."""
    return ctx.op.NonZero(_nonzero_input(ctx, x))


@translates(aten.nonzero.default, aten.argwhere.default)
def nonzero(ctx, self):
    if S.rank_of(ctx, self) == 0:
        # torch gives shape (1, 0) for a nonzero scalar and (0, 0) otherwise.
        count = ctx.op.Size(nonzero_coords(ctx, ctx.op.Reshape(self, [1])))
        shape = ctx.op.Concat(ctx.op.Reshape(count, [1]), ctx.const([0], torch.int64), axis=0)
        return S.constant_of_shape(ctx, shape, 0, torch.int64)
    return ctx.op.Transpose(nonzero_coords(ctx, self), perm=[1, 0])


@translates(aten.nonzero_numpy.default)
def nonzero_numpy(ctx, self):
    rank = S.rank_of(ctx, self)
    coords = nonzero_coords(ctx, self if rank else ctx.op.Reshape(self, [1]))
    return tuple(
        ctx.op.Gather(coords, ctx.const(i, torch.int64), axis=0) for i in range(max(rank, 1))
    )


@translates(aten.nonzero_static.default)
def nonzero_static(ctx, self, *, size, fill_value=-1):
    rank = S.rank_of(ctx, self)
    if rank == 0:
        found = nonzero(ctx, self)
    else:
        found = ctx.op.Transpose(nonzero_coords(ctx, self), perm=[1, 0])
    kept = ctx.op.Slice(found, [0], [size], [0])
    missing = ctx.op.Sub(ctx.const([size], torch.int64), ctx.op.Shape(kept, start=0, end=1))
    pads = ctx.op.Concat(
        ctx.const([0, 0], torch.int64), missing, ctx.const([0], torch.int64), axis=0
    )
    return ctx.op.Pad(kept, pads, ctx.const(fill_value, torch.int64))


@translates(aten.put.default)
def put(ctx, self, index, source, accumulate=False):
    flat = _flat(ctx, self)
    out = scatter_elements(
        ctx,
        flat,
        _flat(ctx, ctx.cast(index, torch.int64)),
        _flat(ctx, source),
        0,
        "add" if accumulate else None,
    )
    return S.reshape(ctx, out, S.shape_value(ctx, self), allowzero=True)


@translates(aten.where.default)
def where_indices(ctx, condition):
    # torch.where(cond) is nonzero(cond).unbind(1): one int64 index tensor per dimension.
    rank = ctx.rank(condition)
    if rank == 0:
        return (ctx.op.Squeeze(ctx.op.NonZero(ctx.op.Reshape(condition, [1])), [0]),)
    rows = ctx.op.NonZero(condition)  # (rank, count)
    if rank == 1:
        return (ctx.op.Squeeze(rows, [0]),)
    pieces = ctx.op.Split(rows, [1] * rank, axis=0, _outputs=rank)  # valid at every opset
    return tuple(ctx.op.Squeeze(r, [0]) for r in pieces)
