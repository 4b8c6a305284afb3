"""Shape and layout: symbolic sizes, views and reshapes, permutations, broadcasting, squeezing,
concatenation and splitting, flips, rolls, repeats, triangles, strided views.

Slicing (slice/select/narrow/diagonal and their scatters) lives in ``slicing.py``, padding in
``padding.py``, tensor creation in ``creation.py`` and advanced indexing in ``indexing.py``.
"""

from __future__ import annotations

import math

import onnx_ir as ir
import torch

from torch_onnx_conformance.exporter.ops import _kernels
from torch_onnx_conformance.exporter.ops import _shape as S
from torch_onnx_conformance.exporter.ops._registry import translates

aten = torch.ops.aten


def _is_empty_1d(ctx, value) -> bool:
    """A 1-D tensor known to have size 0 (torch's cat skips those); never guards on a SymInt."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    shape = ctx.shape(value)
    return shape is not None and len(shape) == 1 and statically_known_true(shape[0] == 0)


# ----------------------------------------------------------------------------- sym sizes
@translates(aten.sym_size.int)
def sym_size(ctx, self, dim):
    size = S.dim_size(ctx, self, dim)
    return S.as_0d(ctx, size)


@translates(aten.sym_numel.default)
def sym_numel(ctx, self):
    return ctx.op.Size(self)


@translates(aten.sym_stride.int)
def sym_stride(ctx, self, dim):
    # Every tensor in the ONNX graph is contiguous: the stride is the product of later sizes.
    d = S.axis(dim, S.rank_of(ctx, self))
    stride = 1
    for i in range(d + 1, S.rank_of(ctx, self)):
        stride = S.mul(ctx, stride, S.dim_size(ctx, self, i))
    return S.as_0d(ctx, stride)


@translates(aten.sym_storage_offset.default)
def sym_storage_offset(ctx, self):
    return ctx.const(0, torch.int64)


@translates(aten.sym_is_contiguous.default)
def sym_is_contiguous(ctx, self, memory_format=None):
    # ONNX tensors have no strides: every one is dense and contiguous.
    return ctx.const(True, torch.bool)


# --------------------------------------------------------------------------- reshapes
def _same_shape(ctx, x: ir.Value, shape) -> bool:
    in_shape = ctx.shape(x)
    return (
        in_shape is not None
        and len(in_shape) == len(shape)
        and all(S.size_expr(a) == S.size_expr(b) for a, b in zip(in_shape, shape))
    )


def reshape_to_out(ctx, x: ir.Value, fallback=None, sources=()) -> ir.Value:
    """Reshape ``x`` to the FX node's output shape, reading symbolic dims from the inputs."""
    shape = S.out_shape(ctx)
    if _same_shape(ctx, x, shape):
        return ctx.op.Identity(x)
    target = S.target_shape(ctx, shape, [x, *sources], fallback)
    zero = any(S.is_static(d) and d == 0 for d in shape)
    return S.reshape(ctx, x, target, allowzero=zero)


@translates(
    aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.view_copy.default
)
def view(ctx, self, size):
    if isinstance(size, (int, ir.Value)):
        size = [size]
    return reshape_to_out(ctx, self, fallback=list(size))


@translates(aten.view_as.default, aten.reshape_as.default)
def view_as(ctx, self, other):
    if _same_shape(ctx, self, S.out_shape(ctx)):
        return ctx.op.Identity(self)
    shape = S.out_shape(ctx)
    if all(S.is_static(d) for d in shape):
        return reshape_to_out(ctx, self)
    return S.reshape(ctx, self, ctx.op.Shape(other), allowzero=True)


@translates(aten.flatten.using_ints, aten.ravel.default, aten.unflatten.int)
def flatten(ctx, self, *args):
    return reshape_to_out(ctx, self)


@translates(
    aten.alias.default,
    aten.alias_copy.default,
    aten.view_as_real.default,
    aten.view_as_complex.default,
    aten.view_as_real_copy.default,
    aten.view_as_complex_copy.default,
)
def alias(ctx, self):
    # Complex tensors already travel as real tensors with a trailing dim of 2, so the
    # complex<->real views are the identity on the ONNX side.
    return ctx.op.Identity(self)


# ------------------------------------------------------------------------ permutations
def _transpose(ctx, x: ir.Value, perm: list[int]) -> ir.Value:
    if perm == sorted(perm):
        return ctx.op.Identity(x)
    return ctx.op.Transpose(x, perm=perm)


@translates(aten.permute.default, aten.permute_copy.default)
def permute(ctx, self, dims):
    rank = S.rank_of(ctx, self)
    return _transpose(ctx, self, [S.axis(d, rank) for d in dims])


def swap_perm(rank: int, dim0: int, dim1: int) -> list[int]:
    perm = list(range(rank))
    if rank == 0:
        return perm
    a, b = S.axis(dim0, rank), S.axis(dim1, rank)
    perm[a], perm[b] = perm[b], perm[a]
    return perm


@translates(
    aten.transpose.int, aten.transpose_copy.int, aten.swapaxes.default, aten.swapdims.default
)
def transpose(ctx, self, dim0, dim1):
    return _transpose(ctx, self, swap_perm(S.rank_of(ctx, self), dim0, dim1))


@translates(aten.t.default, aten.t_copy.default)
def t(ctx, self):
    rank = S.rank_of(ctx, self)
    return _transpose(ctx, self, list(range(rank))[::-1])


@translates(aten.numpy_T.default)
def numpy_t(ctx, self):
    return _transpose(ctx, self, list(range(S.rank_of(ctx, self)))[::-1])


@translates(aten.mT.default, aten.adjoint.default, aten.mH.default, aten.matrix_H.default)
def matrix_transpose(ctx, self):
    # Real tensors only: the conjugate of a real tensor is itself.
    return _transpose(ctx, self, swap_perm(S.rank_of(ctx, self), -2, -1))


def move_perm(rank: int, source, destination) -> list[int]:
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    if len(src) != len(dst):
        raise ValueError(f"movedim: {len(src)} source dims but {len(dst)} destination dims")
    src = [S.axis(s, rank) for s in src]
    dst = [S.axis(d, rank) for d in dst]
    perm = [-1] * rank
    for s, d in zip(src, dst):
        perm[d] = s
    rest = iter(i for i in range(rank) if i not in src)
    return [p if p != -1 else next(rest) for p in perm]


@translates(aten.movedim.int, aten.movedim.intlist, aten.moveaxis.int, aten.moveaxis.intlist)
def movedim(ctx, self, source, destination):
    return _transpose(ctx, self, move_perm(S.rank_of(ctx, self), source, destination))


# --------------------------------------------------------------------------- broadcasting
def _sym_equal(ctx, value, dim) -> bool:
    """Whether a SymInt argument (an ir.Value) is known to equal the tensor dim ``dim``."""
    meta = ctx.meta(value) if isinstance(value, ir.Value) else value
    return (
        meta is not None
        and not isinstance(meta, torch.Tensor)
        and S.size_expr(meta) == S.size_expr(dim)
    )


def expand_to(ctx, x: ir.Value, size) -> ir.Value:
    rank = S.rank_of(ctx, x)
    in_shape = ctx.shape(x) or (None,) * rank
    lead = len(size) - rank
    if lead < 0:
        raise ValueError(f"expand: {len(size)} sizes for a tensor of rank {rank}")
    entries: list[S.Size] = []
    for i, s in enumerate(size):
        j = i - lead
        keep = j >= 0 and (
            (S.is_static(s) and s == -1)
            or (S.is_static(s) and S.is_static(in_shape[j]) and s == in_shape[j])
            or (isinstance(s, ir.Value) and _sym_equal(ctx, s, in_shape[j]))
        )
        # Expand broadcasts both ways, so 1 keeps the input's dim without reading its size.
        entries.append(1 if keep else S.as_size(ctx, s))
    if lead == 0 and all(S.is_static(e) and e == 1 for e in entries):
        return ctx.op.Identity(x)
    return _kernels.data_op(ctx, "Expand", "Expand", x, S.concat_sizes(ctx, entries))


@translates(aten.expand.default, aten.expand_copy.default, aten.broadcast_to.default)
def expand(ctx, self, size, *, implicit=False):
    if isinstance(size, (int, ir.Value)):
        size = [size]
    return expand_to(ctx, self, list(size))


@translates(aten.expand_as.default)
def expand_as(ctx, self, other):
    shape = ctx.shape(other)
    if shape is not None:
        return expand_to(
            ctx,
            self,
            [
                d if S.is_static(d) else ctx.op.Shape(other, start=i, end=i + 1)
                for i, d in enumerate(shape)
            ],
        )
    return _kernels.data_op(ctx, "Expand", "Expand", self, ctx.op.Shape(other))


@translates(aten.broadcast_tensors.default)
def broadcast_tensors(ctx, tensors):
    outs = []
    for i, t_ in enumerate(tensors):
        shape = S.out_shape(ctx, i)
        if _same_shape(ctx, t_, shape):
            outs.append(ctx.op.Identity(t_))
            continue
        target = S.target_shape(ctx, shape, tensors)
        outs.append(_kernels.data_op(ctx, "Expand", "Expand", t_, target))
    return tuple(outs)


@translates(aten.meshgrid.default, aten.meshgrid.indexing)
def meshgrid(ctx, tensors, indexing="ij"):
    n = len(tensors)
    full = S.out_shape(ctx, 0) if n else ()
    target = S.target_shape(ctx, full, tensors) if n else None
    outs = []
    for i, t_ in enumerate(tensors):
        pos = i
        if indexing == "xy" and n >= 2 and i < 2:
            pos = 1 - i
        shape = [1] * n
        shape[pos] = -1
        col = ctx.op.Reshape(t_, shape)
        outs.append(_kernels.data_op(ctx, "Expand", "Expand", col, target))
    return tuple(outs)


# ------------------------------------------------------------------------- (un)squeeze
@translates(
    aten.squeeze.default,
    aten.squeeze.dim,
    aten.squeeze.dims,
    aten.squeeze_copy.default,
    aten.squeeze_copy.dim,
    aten.squeeze_copy.dims,
)
def squeeze(ctx, self, dim=None):
    rank = S.rank_of(ctx, self)
    shape = ctx.shape(self)
    if dim is None:
        dims = list(range(rank))
    else:
        dims = [dim] if isinstance(dim, int) else list(dim)
        dims = sorted({S.axis(d, rank) for d in dims}) if rank else []
    # torch leaves dims that are not 1 alone; a symbolic dim is never 1 after export.
    axes = [d for d in dims if rank and S.is_static(shape[d]) and shape[d] == 1]
    if not axes:
        return ctx.op.Identity(self)
    return ctx.op.Squeeze(self, axes)


@translates(aten.unsqueeze.default, aten.unsqueeze_copy.default)
def unsqueeze(ctx, self, dim):
    return ctx.op.Unsqueeze(self, [S.axis(dim, S.rank_of(ctx, self) + 1)])


# --------------------------------------------------------------------- concatenation
def _cat(ctx, tensors, dim: int, dtype: torch.dtype) -> ir.Value:
    # torch's legacy rule: 1-D empty tensors are skipped whatever the other tensors' rank.
    kept = [t_ for t_ in tensors if not _is_empty_1d(ctx, t_)] or list(tensors[:1])
    rank = S.rank_of(ctx, kept[0])
    kept = [ctx.cast(t_, dtype) for t_ in kept]
    if len(kept) == 1:
        return ctx.op.Identity(kept[0])
    return ctx.op.Concat(*kept, axis=S.axis(dim, rank))


@translates(aten.cat.default, aten.concat.default, aten.concatenate.default)
def cat(ctx, tensors, dim=0):
    return _cat(ctx, tensors, dim, ctx.out_dtype)


@translates(aten.stack.default)
def stack(ctx, tensors, dim=0):
    dtype = ctx.out_dtype
    d = S.axis(dim, S.rank_of(ctx, tensors[0]) + 1)
    parts = [ctx.op.Unsqueeze(ctx.cast(t_, dtype), [d]) for t_ in tensors]
    return parts[0] if len(parts) == 1 else ctx.op.Concat(*parts, axis=d)


def atleast(ctx, x: ir.Value, n: int) -> ir.Value:
    """torch.atleast_{1,2,3}d: 0-d -> (1,..), 1-D (k) -> (1,k) / (1,k,1), 2-D (m,k) -> (m,k,1)."""
    rank = S.rank_of(ctx, x)
    if rank >= n:
        return x
    if rank == 0:
        return ctx.op.Reshape(x, [1] * n)
    axes = {(1, 2): [0], (1, 3): [0, 2], (2, 3): [2]}[(rank, n)]
    return ctx.op.Unsqueeze(x, axes)


def _cat_built(ctx, parts, axis_: int) -> ir.Value:
    dtype = ctx.out_dtype
    parts = [ctx.cast(p, dtype) for p in parts]
    return ctx.op.Identity(parts[0]) if len(parts) == 1 else ctx.op.Concat(*parts, axis=axis_)


@translates(
    aten.atleast_1d.default,
    aten.atleast_2d.default,
    aten.atleast_3d.default,
    aten.atleast_1d.Sequence,
    aten.atleast_2d.Sequence,
    aten.atleast_3d.Sequence,
)
def atleast_nd(ctx, tensors):
    n = int(ctx.node.target.__name__.split("_")[1][0])
    if isinstance(tensors, ir.Value):
        out = atleast(ctx, tensors, n)
        return ctx.op.Identity(out) if out is tensors else out
    return tuple(ctx.op.Identity(t_) if (o := atleast(ctx, t_, n)) is t_ else o for t_ in tensors)


@translates(aten.hstack.default)
def hstack(ctx, tensors):
    parts = [atleast(ctx, t_, 1) for t_ in tensors]
    axis_ = 0 if S.rank_of(ctx, tensors[0]) <= 1 else 1
    return _cat_skipping_empty(ctx, tensors, parts, axis_)


def _cat_skipping_empty(ctx, tensors, parts, axis_):
    # hstack of 1-D tensors is a cat along dim 0, where torch skips shape-(0,) tensors.
    kept = [p for t_, p in zip(tensors, parts) if not _is_empty_1d(ctx, t_)] or parts[:1]
    return _cat_built(ctx, kept, axis_)


@translates(aten.vstack.default, aten.row_stack.default)
def vstack(ctx, tensors):
    return _cat_built(ctx, [atleast(ctx, t_, 2) for t_ in tensors], 0)


@translates(aten.dstack.default)
def dstack(ctx, tensors):
    return _cat_built(ctx, [atleast(ctx, t_, 3) for t_ in tensors], 2)


@translates(aten.column_stack.default)
def column_stack(ctx, tensors):
    parts = []
    for t_ in tensors:
        rank = S.rank_of(ctx, t_)
        parts.append(
            ctx.op.Reshape(t_, [1, 1])
            if rank == 0
            else ctx.op.Unsqueeze(t_, [1])
            if rank == 1
            else t_
        )
    return _cat_built(ctx, parts, 1)


# ------------------------------------------------------------------------- splitting
def _slice(ctx, x, start: S.Size, end: S.Size, axis_: int, step: S.Size = 1) -> ir.Value:
    return ctx.op.Slice(x, S.as_1d(ctx, start), S.as_1d(ctx, end), [axis_], S.as_1d(ctx, step))


def split_sizes(ctx, x: ir.Value, sizes: list[S.Size], axis_: int) -> tuple[ir.Value, ...]:
    """Split along ``axis_`` into pieces of the given sizes (which sum to the dim size)."""
    if len(sizes) == 1:
        return (ctx.op.Identity(x),)
    pieces = ctx.op.Split(x, S.concat_sizes(ctx, sizes), axis=axis_, _outputs=len(sizes))
    return _kernels.typed_like(pieces, x)


def split_at(ctx, x: ir.Value, bounds: list[S.Size], axis_: int) -> tuple[ir.Value, ...]:
    """Pieces x[b_i : b_{i+1}] along ``axis_``; Slice clamps bounds past the end."""
    if len(bounds) == 2:
        return (ctx.op.Identity(x),)
    pieces = []
    for i in range(len(bounds) - 1):
        end = S.INT64_MAX if i == len(bounds) - 2 else bounds[i + 1]
        pieces.append(_slice(ctx, x, bounds[i], end, axis_))
    return tuple(pieces)


def _out_sizes(ctx, axis_: int) -> list:
    return [S.out_shape(ctx, i)[axis_] for i in range(len(ctx.out))]


@translates(aten.split.Tensor, aten.split_copy.Tensor, aten.unsafe_split.Tensor)
def split(ctx, self, split_size, dim=0):
    if isinstance(split_size, (list, tuple)):
        return split_with_sizes(ctx, self, split_size, dim)
    axis_ = S.axis(dim, S.rank_of(ctx, self))
    sizes = _out_sizes(ctx, axis_)
    if all(S.is_static(s) for s in sizes):
        return split_sizes(ctx, self, sizes, axis_)
    step = S.as_size(ctx, split_size)
    bounds = [S.mul(ctx, i, step) for i in range(len(sizes))] + [S.INT64_MAX]
    return split_at(ctx, self, bounds, axis_)


@translates(
    aten.split.sizes,
    aten.split_with_sizes.default,
    aten.split_with_sizes_copy.default,
    aten.unsafe_split_with_sizes.default,
)
def split_with_sizes(ctx, self, split_sizes_, dim=0):
    axis_ = S.axis(dim, S.rank_of(ctx, self))
    return split_sizes(ctx, self, S.size_list(ctx, split_sizes_), axis_)


@translates(aten.chunk.default, aten.unsafe_chunk.default)
def chunk(ctx, self, chunks, dim=0):
    axis_ = S.axis(dim, S.rank_of(ctx, self))
    sizes = _out_sizes(ctx, axis_)
    if all(S.is_static(s) for s in sizes):
        return split_sizes(ctx, self, sizes, axis_)
    dim_size = S.dim_size(ctx, self, axis_)
    step = S.floordiv(ctx, S.add(ctx, dim_size, chunks - 1), chunks)
    bounds = [S.mul(ctx, i, step) for i in range(len(sizes))] + [S.INT64_MAX]
    return split_at(ctx, self, bounds, axis_)


@translates(aten.tensor_split.sections)
def tensor_split_sections(ctx, self, sections, dim=0):
    axis_ = S.axis(dim, S.rank_of(ctx, self))
    sizes = _out_sizes(ctx, axis_)
    if all(S.is_static(s) for s in sizes):
        return split_sizes(ctx, self, sizes, axis_)
    # The first (size % n) pieces get one extra element.
    n = int(sections)
    dim_size = S.dim_size(ctx, self, axis_)
    base, extra = S.floordiv(ctx, dim_size, n), ctx.op.Mod(S.as_1d(ctx, dim_size), [n])
    bounds = [S.add(ctx, S.mul(ctx, i, base), ctx.op.Min(extra, [i])) for i in range(n)]
    return split_at(ctx, self, bounds + [S.INT64_MAX], axis_)


@translates(aten.tensor_split.indices)
def tensor_split_indices(ctx, self, indices, dim=0):
    axis_ = S.axis(dim, S.rank_of(ctx, self))
    return split_at(ctx, self, [0, *S.size_list(ctx, indices), S.INT64_MAX], axis_)


@translates(aten.tensor_split.tensor_indices_or_sections)
def tensor_split_tensor(ctx, self, tensor_indices_or_sections, dim=0):
    n = len(ctx.out)
    if S.rank_of(ctx, tensor_indices_or_sections) == 0:
        # The number of pieces is fixed by the export; it is the section count.
        return tensor_split_sections(ctx, self, n, dim)
    axis_ = S.axis(dim, S.rank_of(ctx, self))
    indices = ctx.cast(tensor_indices_or_sections, torch.int64)
    bounds = [ctx.op.Gather(indices, [i], axis=0) for i in range(n - 1)]
    return split_at(ctx, self, [0, *bounds, S.INT64_MAX], axis_)


def _hvd_split(ctx, self, sections, dim: int):
    if isinstance(sections, int):
        return tensor_split_sections(ctx, self, sections, dim)
    return tensor_split_indices(ctx, self, sections, dim)


@translates(aten.hsplit.int, aten.hsplit.array)
def hsplit(ctx, self, sections):
    return _hvd_split(ctx, self, sections, 1 if S.rank_of(ctx, self) > 1 else 0)


@translates(aten.vsplit.int, aten.vsplit.array)
def vsplit(ctx, self, sections):
    return _hvd_split(ctx, self, sections, 0)


@translates(aten.dsplit.int, aten.dsplit.array)
def dsplit(ctx, self, sections):
    return _hvd_split(ctx, self, sections, 2)


@translates(aten.unbind.int, aten.unbind_copy.int)
def unbind(ctx, self, dim=0):
    axis_ = S.axis(dim, S.rank_of(ctx, self))
    n = len(ctx.out)
    if n == 0:
        return ()
    pieces = split_sizes(ctx, self, [1] * n, axis_)
    return tuple(ctx.op.Squeeze(p, [axis_]) for p in pieces)


# ------------------------------------------------------------------ flips and rotations
def flip_axes(ctx, x: ir.Value, axes: list[int]) -> ir.Value:
    if not axes:
        return ctx.op.Identity(x)
    k = len(axes)
    return ctx.op.Slice(x, [-1] * k, [S.INT64_MIN] * k, axes, [-1] * k)


@translates(aten.flip.default)
def flip(ctx, self, dims):
    rank = S.rank_of(ctx, self)
    axes = sorted({S.axis(d, rank) for d in dims}) if rank else []
    return flip_axes(ctx, self, axes)


@translates(aten.fliplr.default)
def fliplr(ctx, self):
    return flip_axes(ctx, self, [1])


@translates(aten.flipud.default)
def flipud(ctx, self):
    return flip_axes(ctx, self, [0])


@translates(aten.rot90.default)
def rot90(ctx, self, k=1, dims=(0, 1)):
    rank = S.rank_of(ctx, self)
    d0, d1 = (S.axis(d, rank) for d in dims)
    k %= 4
    if k == 0:
        return ctx.op.Identity(self)
    if k == 2:
        return flip_axes(ctx, self, sorted([d0, d1]))
    flipped = flip_axes(ctx, self, [d1 if k == 1 else d0])
    return ctx.op.Transpose(flipped, perm=swap_perm(rank, d0, d1))


@translates(aten.roll.default)
def roll(ctx, self, shifts, dims=()):
    shifts = [shifts] if isinstance(shifts, (int, ir.Value)) else list(shifts)
    dims = [dims] if isinstance(dims, int) else list(dims)
    rank = S.rank_of(ctx, self)
    if not dims:
        static = ctx.static_shape(self)
        numel = math.prod(static) if static is not None else ctx.op.Reshape(ctx.op.Size(self), [1])
        rolled = _roll_axis(ctx, ctx.op.Reshape(self, [-1]), shifts[0], numel, 0)
        return S.reshape(ctx, rolled, S.shape_value(ctx, self), allowzero=True)
    if len(shifts) != len(dims):
        raise ValueError(f"roll: {len(shifts)} shifts for {len(dims)} dims")
    out = self
    for shift, dim in zip(shifts, dims):
        axis_ = S.axis(dim, rank)
        out = _roll_axis(ctx, out, shift, S.dim_size(ctx, self, axis_), axis_)
    return out if out is not self else ctx.op.Identity(self)


def _roll_axis(ctx, x, shift, size, axis_: int):
    if S.is_static(size) and S.is_static(shift):
        if size == 0 or shift % size == 0:
            return x
        cut = size - shift % size
    else:
        # ONNX Mod on integers takes the divisor's sign, like Python's %.
        cut = S.sub(ctx, size, ctx.op.Mod(S.as_1d(ctx, S.as_size(ctx, shift)), S.as_1d(ctx, size)))
    tail = _slice(ctx, x, cut, S.INT64_MAX, axis_)
    head = _slice(ctx, x, 0, cut, axis_)
    return ctx.op.Concat(tail, head, axis=axis_)


# ----------------------------------------------------------------------------- repeats
@translates(aten.repeat.default)
def repeat(ctx, self, repeats):
    rank = S.rank_of(ctx, self)
    repeats = list(repeats)
    x = self
    if len(repeats) > rank:
        x = ctx.op.Unsqueeze(self, list(range(len(repeats) - rank)))
    if len(repeats) == rank and all(S.is_static(r) and r == 1 for r in repeats):
        return ctx.op.Identity(self)
    return _kernels.data_op(ctx, "Tile", "Tile", x, S.shape_arg(ctx, repeats))


@translates(aten.tile.default)
def tile(ctx, self, dims):
    rank = S.rank_of(ctx, self)
    dims = list(dims)
    if len(dims) < rank:
        dims = [1] * (rank - len(dims)) + dims
    return repeat(ctx, self, dims)


@translates(aten.repeat_interleave.self_int)
def repeat_interleave_int(ctx, self, repeats, dim=None, *, output_size=None):
    x = self
    rank = S.rank_of(ctx, self)
    if dim is None or rank == 0:
        x = ctx.op.Reshape(self, [-1])
        before, after, size, axis_ = [], [], None, 0
    else:
        axis_ = S.axis(dim, rank)
        before = [S.dim_size(ctx, self, i) for i in range(axis_)]
        after = [S.dim_size(ctx, self, i) for i in range(axis_ + 1, rank)]
        size = S.dim_size(ctx, self, axis_)
    reps = S.as_size(ctx, repeats)
    grown = [1] * (len(before) + len(after) + 2)
    grown[axis_ + 1] = reps
    expanded = _kernels.data_op(
        ctx, "Expand", "Expand", ctx.op.Unsqueeze(x, [axis_ + 1]), S.concat_sizes(ctx, grown)
    )
    if size is None:
        return ctx.op.Reshape(expanded, [-1])
    target = S.concat_sizes(ctx, [*before, S.mul(ctx, size, reps), *after])
    return S.reshape(ctx, expanded, target, allowzero=True)


def repeat_indices(ctx, repeats: ir.Value, count: S.Size | None) -> ir.Value:
    """torch.repeat_interleave(repeats): i repeated repeats[i] times, as int64 indices.

    Marks where each segment ends (a scatter-add, so zero repeats stack up) and counts the
    marks with a cumulative sum: linear in the output size, no quadratic comparison.
    """
    reps = ctx.op.Reshape(ctx.cast(repeats, torch.int64), [-1])
    if count is not None:
        reps = ctx.op.Expand(reps, S.as_1d(ctx, count))
    ends = ctx.op.CumSum(reps, ctx.const(0, torch.int64))
    total = ctx.op.ReduceSum(reps, keepdims=1)
    marks = S.constant_of_shape(ctx, ctx.op.Add(total, [1]), 0, torch.int64)
    ones = ctx.op.Expand(ctx.const([1], torch.int64), ctx.op.Shape(ends))
    marks = ctx.op.ScatterElements(marks, ends, ones, axis=0, reduction="add")
    marks = ctx.op.Slice(marks, [0], total, [0])
    return ctx.op.CumSum(marks, ctx.const(0, torch.int64))


@translates(aten.repeat_interleave.Tensor)
def repeat_interleave_tensor(ctx, repeats, *, output_size=None):
    return repeat_indices(ctx, repeats, None)


@translates(aten.repeat_interleave.self_Tensor)
def repeat_interleave_self_tensor(ctx, self, repeats, dim=None, *, output_size=None):
    rank = S.rank_of(ctx, self)
    if dim is None or rank == 0:
        x, axis_ = ctx.op.Reshape(self, [-1]), 0
        count = (
            ctx.op.Size(self)
            if ctx.static_shape(self) is None
            else math.prod(ctx.static_shape(self))
        )
        if isinstance(count, ir.Value):
            count = ctx.op.Reshape(count, [1])
    else:
        x, axis_ = self, S.axis(dim, rank)
        count = S.dim_size(ctx, self, axis_)
    return ctx.op.Gather(x, repeat_indices(ctx, repeats, count), axis=axis_)


# --------------------------------------------------------------------------- triangles
def _trilu(ctx, self, diagonal, upper: int) -> ir.Value:
    return _kernels.data_op(ctx, "Trilu", "Trilu", self, ctx.scalar(diagonal), upper=upper)


# Two translations rather than one reading the node's target: the in-place overloads (triu_)
# reach these through their functional twin, with the in-place target on the node.
@translates(aten.tril.default)
def tril(ctx, self, diagonal=0):
    return _trilu(ctx, self, diagonal, upper=0)


@translates(aten.triu.default)
def triu(ctx, self, diagonal=0):
    return _trilu(ctx, self, diagonal, upper=1)


# ---------------------------------------------------------------------- strided views
def _storage_order(ctx, x: ir.Value) -> tuple[ir.Value, int | None]:
    """``x`` flattened in its memory order, and the storage offset of its first element.

    ``as_strided`` indexes the storage under a tensor. The graph only has the tensor's own
    elements, so this is exact when the tensor is dense in memory (contiguous or a permutation
    of contiguous), which covers inputs and the results of the ops decompositions produce.
    """
    meta = ctx.meta(x)
    rank = S.rank_of(ctx, x)
    offset = 0
    if isinstance(meta, torch.Tensor):
        strides = [int(s) if S.is_static(s) else None for s in meta.stride()]
        if rank > 1 and None not in strides:
            perm = sorted(range(rank), key=lambda i: -strides[i])
            if perm != list(range(rank)):
                x = ctx.op.Transpose(x, perm=perm)
        offset = int(meta.storage_offset()) if S.is_static(meta.storage_offset()) else None
    return ctx.op.Reshape(x, [-1]), offset


def strided_indices(ctx, size, stride, offset) -> ir.Value:
    """Flat indices offset + sum_i arange(size_i) * stride_i, broadcast to shape ``size``."""
    n = len(size)
    index: ir.Value = ctx.const(int(offset) if S.is_static(offset) else 0, torch.int64)
    if not S.is_static(offset):
        index = S.as_0d(ctx, S.as_size(ctx, offset))
    for i, (s, st) in enumerate(zip(size, stride)):
        steps = ctx.op.Range(
            ctx.const(0, torch.int64), S.as_0d(ctx, S.as_size(ctx, s)), ctx.const(1, torch.int64)
        )
        steps = ctx.op.Mul(steps, S.as_0d(ctx, S.as_size(ctx, st)))
        shape = [1] * n
        shape[i] = -1
        index = ctx.op.Add(index, ctx.op.Reshape(steps, shape))
    return index


@translates(aten.as_strided.default, aten.as_strided_copy.default)
def as_strided(ctx, self, size, stride, storage_offset=None):
    flat, base = _storage_order(ctx, self)
    index = strided_indices(
        ctx, list(size), list(stride), _relative_offset(ctx, storage_offset, base)
    )
    return ctx.op.Gather(flat, index, axis=0)


def _relative_offset(ctx, storage_offset, base: int | None) -> S.Size:
    """as_strided's storage offset counted from the tensor's first element."""
    if storage_offset is None:
        return 0  # the default is the tensor's own offset
    if base is None:
        raise ValueError(
            "as_strided with an explicit storage_offset on an input whose own storage offset is "
            "symbolic cannot be expressed in ONNX; export with a contiguous input tensor"
        )
    if not S.is_static(storage_offset):
        return S.sub(ctx, S.as_size(ctx, storage_offset), base)
    if storage_offset < base:
        raise ValueError(
            f"as_strided reads storage before the tensor's first element (storage offset "
            f"{storage_offset} < {base}); ONNX only sees the tensor itself. Apply as_strided "
            f"to the base tensor instead"
        )
    return storage_offset - base


@translates(aten.as_strided_scatter.default)
def as_strided_scatter(ctx, self, src, size, stride, storage_offset=None):
    meta = ctx.meta(self)
    if isinstance(meta, torch.Tensor) and not meta.is_contiguous():
        raise ValueError(
            "as_strided_scatter needs a contiguous input tensor; call .contiguous() first"
        )
    flat = ctx.op.Reshape(self, [-1])
    index = strided_indices(ctx, list(size), list(stride), storage_offset or 0)
    updates = ctx.op.Reshape(ctx.cast(src, ctx.dtype(self)), [-1])
    out = ctx.op.ScatterElements(flat, ctx.op.Reshape(index, [-1]), updates, axis=0)
    return S.reshape(ctx, out, S.shape_value(ctx, self), allowzero=True)


@translates(aten.unfold.default, aten.unfold_copy.default)
def unfold(ctx, self, dimension, size, step):
    rank = S.rank_of(ctx, self)
    if rank == 0:
        return ctx.op.Reshape(self, [1])
    axis_ = S.axis(dimension, rank)
    dim_size = S.dim_size(ctx, self, axis_)
    windows = S.add(ctx, S.floordiv(ctx, S.sub(ctx, dim_size, size), step), 1)
    zero, one = ctx.const(0, torch.int64), ctx.const(1, torch.int64)
    starts = ctx.op.Mul(
        ctx.op.Range(zero, S.as_0d(ctx, windows), one), ctx.const(step, torch.int64)
    )
    offsets = ctx.op.Range(zero, ctx.const(size, torch.int64), one)
    index = ctx.op.Add(ctx.op.Unsqueeze(starts, [1]), ctx.op.Unsqueeze(offsets, [0]))
    gathered = ctx.op.Gather(self, index, axis=axis_)
    if axis_ == rank - 1:
        return gathered
    perm = [*range(axis_ + 1), *range(axis_ + 2, rank + 1), axis_ + 1]
    return ctx.op.Transpose(gathered, perm=perm)
