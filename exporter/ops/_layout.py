"""Size arithmetic shared by the shape, creation and indexing translations.

A *size* here is either a Python int (known at export time) or a 1-D int64 ``ir.Value`` of one
element (computed in the graph from ``Shape`` or from a SymInt input). The arithmetic helpers fold
ints at export time and emit nodes only for symbolic sizes, so one code path serves static and
dynamic shapes, and static exports carry no shape computation at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import onnx_ir as ir
import torch

from exporter.ops import _kernels

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

Size = int | ir.Value


def same_size(a, b) -> bool:
    """Whether two sizes from FX metadata (ints or torch.SymInts) are known to be equal: the
    same int, or the same symbolic expression."""

    def expr(v):
        return v.node.expr if isinstance(v, torch.SymInt) else v

    try:
        return bool(expr(a) == expr(b))
    except Exception:  # noqa: BLE001 - a comparison sympy cannot decide is "not known equal"
        return False


# ----------------------------------------------------------------------------- axes
def axis(dim: int, rank: int) -> int:
    """A torch dim (maybe negative) as a non-negative axis; rank 0 accepts dims 0 and -1."""
    if rank == 0:
        if dim in (0, -1):
            return 0
        raise IndexError(f"dim {dim} is out of range for a 0-d tensor")
    if not -rank <= dim < rank:
        raise IndexError(f"dim {dim} is out of range for a tensor of rank {rank}")
    return dim % rank


def rank_of(ctx, x: ir.Value) -> int:
    rank = ctx.rank(x)
    if rank is None:
        raise ValueError(f"the rank of {x.name} is unknown; the FX graph carries no shape for it")
    return rank


# ----------------------------------------------------------------------------- sizes
def is_static(size: Any) -> bool:
    return isinstance(size, int) and not isinstance(size, bool)


def dim_size(ctx, x: ir.Value, dim: int) -> Size:
    """Size of dimension ``dim`` of an FX-level value: an int if static, else ``Shape`` slice."""
    rank = rank_of(ctx, x)
    d = axis(dim, rank)
    shape = ctx.shape(x)
    if shape is not None and is_static(shape[d]):
        return shape[d]
    return ctx.op.Shape(x, start=d, end=d + 1)


def shape_value(ctx, x: ir.Value, start: int = 0, end: int | None = None) -> ir.Value:
    """The (sub)shape of an FX-level value as a 1-D int64 value, constant when static."""
    rank = rank_of(ctx, x)
    end = rank if end is None else end
    shape = ctx.shape(x)
    if shape is not None and all(is_static(d) for d in shape[start:end]):
        return ctx.const([int(d) for d in shape[start:end]], torch.int64)
    if start == 0 and end == rank:
        return ctx.op.Shape(x)
    return ctx.op.Shape(x, start=start, end=end)


def as_size(ctx, item: Any) -> Size:
    """A size argument (int, SymInt value, 0-d/1-elem tensor value) as a Size."""
    if isinstance(item, ir.Value):
        item = ctx.cast(item, torch.int64)
        return item if ctx.rank(item) == 1 else ctx.op.Reshape(item, [1])
    return int(item)


def as_1d(ctx, size: Size) -> ir.Value:
    return ctx.const([size], torch.int64) if is_static(size) else size


def as_0d(ctx, size: Size) -> ir.Value:
    return ctx.const(size, torch.int64) if is_static(size) else ctx.op.Squeeze(size, [0])


def add(ctx, a: Size, b: Size) -> Size:
    if is_static(a) and is_static(b):
        return a + b
    if is_static(b) and b == 0:
        return a
    if is_static(a) and a == 0:
        return b
    return ctx.op.Add(as_1d(ctx, a), as_1d(ctx, b))


def sub(ctx, a: Size, b: Size) -> Size:
    if is_static(a) and is_static(b):
        return a - b
    if is_static(b) and b == 0:
        return a
    return ctx.op.Sub(as_1d(ctx, a), as_1d(ctx, b))


def mul(ctx, a: Size, b: Size) -> Size:
    if is_static(a) and is_static(b):
        return a * b
    if is_static(b) and b == 1:
        return a
    if is_static(a) and a == 1:
        return b
    return ctx.op.Mul(as_1d(ctx, a), as_1d(ctx, b))


def floordiv(ctx, a: Size, b: Size) -> Size:
    """Floor division (sizes are non-negative, so ONNX's truncating Div agrees)."""
    if is_static(a) and is_static(b):
        return a // b
    if is_static(b) and b == 1:
        return a
    return ctx.op.Div(as_1d(ctx, a), as_1d(ctx, b))


def minimum(ctx, a: Size, b: Size) -> Size:
    if is_static(a) and is_static(b):
        return min(a, b)
    return ctx.op.Min(as_1d(ctx, a), as_1d(ctx, b))


def maximum(ctx, a: Size, b: Size) -> Size:
    if is_static(a) and is_static(b):
        return max(a, b)
    return ctx.op.Max(as_1d(ctx, a), as_1d(ctx, b))


def concat_sizes(ctx, sizes: Sequence[Size | ir.Value]) -> ir.Value:
    """A 1-D int64 shape from Sizes and 1-D int64 values of any length; constant when static."""
    if all(is_static(s) for s in sizes):
        return ctx.const([int(s) for s in sizes], torch.int64)
    pieces: list[ir.Value] = []
    run: list[int] = []
    for s in sizes:
        if is_static(s):
            run.append(int(s))
            continue
        if run:
            pieces.append(ctx.const(run, torch.int64))
            run = []
        pieces.append(s)
    if run:
        pieces.append(ctx.const(run, torch.int64))
    return pieces[0] if len(pieces) == 1 else ctx.op.Concat(*pieces, axis=0)


def size_list(ctx, items: Sequence[Any]) -> list[Size]:
    return [as_size(ctx, i) for i in items]


def shape_arg(ctx, items: Any) -> ir.Value:
    """A shape argument (list of ints / SymInt values, or a 1-D value) as a 1-D int64 value."""
    if isinstance(items, ir.Value):
        return ctx.ints(ctx.cast(items, torch.int64))
    if isinstance(items, (int, torch.SymInt)):
        items = [items]
    return concat_sizes(ctx, size_list(ctx, items))


# ------------------------------------------------------------- symbolic size matching
def size_expr(d: Any) -> Any:
    """A size as something comparable: an int, or the sympy expression of a SymInt."""
    if isinstance(d, torch.SymInt):
        expr = d.node.expr
        return int(expr) if expr.is_number else expr
    return d


def target_shape(
    ctx,
    out_shape: Sequence[Any],
    sources: Sequence[ir.Value],
    fallback: Sequence[Any] | None = None,
) -> ir.Value:
    """A Reshape/Expand target for a result whose shape the FX metadata gives as ``out_shape``.

    Static dims become constants; a symbolic dim equal to some dim of one of ``sources`` is
    read with ``Shape``; a single remaining symbolic dim becomes -1 (Reshape infers it). When
    more than one dim stays unknown, ``fallback`` (the op's own size arguments, one per output
    dim) supplies them.
    """
    exprs = [size_expr(d) for d in out_shape]
    found: list[Any] = []
    unknown = []
    for i, e in enumerate(exprs):
        if isinstance(e, int):
            found.append(e)
            continue
        hit = None
        for src in sources:
            shape = ctx.shape(src) or ()
            for j, d in enumerate(shape):
                if not is_static(d) and size_expr(d) == e:
                    hit = ctx.op.Shape(src, start=j, end=j + 1)
                    break
            if hit is not None:
                break
        found.append(hit)
        if hit is None:
            unknown.append(i)
    if unknown:
        numel_zero = any(isinstance(e, int) and e == 0 for e in exprs)
        if len(unknown) == 1 and not numel_zero:
            found[unknown[0]] = -1
        elif fallback is not None:
            for i in unknown:
                found[i] = as_size(ctx, fallback[i])
        else:
            raise ValueError(f"cannot express the symbolic shape {list(out_shape)} in the graph")
    return concat_sizes(ctx, found)


def out_shape(ctx, index: int | None = None) -> tuple[Any, ...]:
    out = ctx.out
    if index is not None:
        out = out[index]
    if not isinstance(out, torch.Tensor):
        raise ValueError("the FX node carries no tensor metadata for its output")
    return tuple(out.shape)


def reshape(
    ctx, x: ir.Value, target: ir.Value | Sequence[int], *, allowzero: bool = False
) -> ir.Value:
    return ctx.op.Reshape(x, target, allowzero=1 if allowzero else None)


def constant_of_shape(
    ctx, shape: ir.Value | Sequence[int], value: Any, dtype: torch.dtype
) -> ir.Value:
    """A tensor of ``shape`` filled with ``value``; its dtype is recorded for later ops."""
    fill = ir.tensor(torch.tensor([value], dtype=dtype))
    out = ctx.op.ConstantOfShape(shape, value=fill)
    out.dtype = fill.dtype
    return out


def typed_like(outputs: Any, like: ir.Value) -> Any:
    """Record ``like``'s dtype on op outputs the builder leaves untyped (Split, TopK, ...)."""
    for out in outputs if isinstance(outputs, tuple) else (outputs,):
        out.dtype = like.dtype
    return outputs


# ----------------------------------------------------------------- dtype cast-around
def where(ctx, cond: ir.Value, a: ir.Value, b: ir.Value) -> ir.Value:
    """``Where`` on values of one dtype, cast around the dtypes onnxruntime lacks."""
    dtype = ctx.dtype(a)
    if dtype is None:  # call() would take the condition's dtype for the data's
        return ctx.op.Where(cond, a, b)
    return _kernels.call(ctx, "Where", cond, a, b, _dtype=dtype)


def data_op(ctx, kernel: str, op_type: str, x: ir.Value, *rest: Any, **attrs: Any) -> ir.Value:
    """``op_type(x, *rest)`` where only ``x`` (and the result) carry the data dtype."""
    dtype = ctx.dtype(x)
    run = _kernels.kernel_dtype(kernel, dtype)
    builder = getattr(ctx.op, op_type)
    if run == dtype:
        return builder(x, *rest, **attrs)
    return ctx.cast(builder(ctx.cast(x, run), *rest, **attrs), dtype)
