"""Shape helpers shared by every op family: axes, sizes, shape values and reshapes.

A *size* here is either a Python int (known at export time) or a 1-D int64 ``ir.Value`` of one
element (computed in the graph from ``Shape`` or from a SymInt input). The arithmetic helpers fold
ints at export time and emit nodes only for symbolic sizes, so one code path serves static and
dynamic shapes, and static exports carry no shape computation at all.

Reductions (axes as input or attribute by opset, keepdims, accumulation dtypes) live in
``_reduce``; onnxruntime's dtype gaps (``where``, ``data_op``) in ``_kernels``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import onnx_ir as ir
import torch

from torch_onnx_conformance.exporter import _dtypes

if TYPE_CHECKING:
    from torch_onnx_conformance.exporter.ops._context import TranslationContext

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
    """A torch dim (maybe negative) as a non-negative axis; rank 0 accepts dims 0 and -1.

    Raises IndexError naming the dim and the rank when ``dim`` is out of range, as torch does.
    """
    if rank == 0:
        if dim in (0, -1):
            return 0
        raise IndexError(f"dim {dim} is out of range for a 0-d tensor")
    if not -rank <= dim < rank:
        raise IndexError(f"dim {dim} is out of range for a tensor of rank {rank}")
    return dim % rank


def rank_of(ctx: TranslationContext, x: ir.Value) -> int:
    rank = ctx.rank(x)
    if rank is None:
        raise ValueError(f"the rank of {x.name} is unknown; the FX graph carries no shape for it")
    return rank


# ----------------------------------------------------------------------------- sizes
def is_static(size: Any) -> bool:
    return isinstance(size, int) and not isinstance(size, bool)


def static_dim(ctx: TranslationContext, x: ir.Value, ax: int) -> int | None:
    """The size of non-negative axis ``ax`` when it is a plain int, else None."""
    shape = ctx.shape(x)
    if shape is None or not isinstance(shape[ax], int):
        return None
    return shape[ax]


def dim_size(ctx: TranslationContext, x: ir.Value, dim: int) -> Size:
    """The size of dimension ``dim`` (negative counts from the end) of ``x``, as a Size.

    Returns a Python ``int`` when the size is static, else a 1-D int64 ``ir.Value`` of one
    element sliced from ``Shape`` (``dim_value`` always gives the value). ``dim`` is
    range-checked (``axis``). A value whose rank is unknown (an intermediate without
    metadata) is sliced with ``dim`` as given.
    """
    rank = ctx.rank(x)
    if rank is None:
        return ctx.op.Shape(x, start=dim, end=dim + 1 if dim != -1 else None)
    d = axis(dim, rank)
    shape = ctx.shape(x)
    if shape is not None and is_static(shape[d]):
        return shape[d]
    return ctx.op.Shape(x, start=d, end=d + 1)


def dim_value(ctx: TranslationContext, x: ir.Value, dim: int) -> ir.Value:
    """``dim_size`` as a 1-D int64 value of one element: a constant when static."""
    return as_1d(ctx, dim_size(ctx, x, dim))


def dim_0d(ctx: TranslationContext, x: ir.Value, dim: int) -> ir.Value:
    """``dim_size`` as a 0-d int64 value (a ``Range`` end, a loop's trip count): a constant
    when static."""
    return as_0d(ctx, dim_size(ctx, x, dim))


def shape_value(
    ctx: TranslationContext, x: ir.Value, start: int = 0, end: int | None = None
) -> ir.Value:
    """1-D int64 sizes of dims [start, end) of ``x`` (negative counts from the end, ``end``
    None: to the last): a constant when static, else sliced from ``Shape``."""
    rank = ctx.rank(x)
    if rank is None:  # an intermediate without metadata: ONNX's Shape slices it
        return ctx.op.Shape(x, start=start, end=end)
    start = start + rank if start < 0 else start
    stop = rank if end is None else end + rank if end < 0 else end
    shape = ctx.shape(x)
    if shape is not None and all(is_static(d) for d in shape[start:stop]):
        return ctx.const([int(d) for d in shape[start:stop]], torch.int64)
    if start == 0 and stop == rank:
        return ctx.op.Shape(x)
    return ctx.op.Shape(x, start=start, end=stop)


def shape_without(ctx: TranslationContext, x: ir.Value, ax: int) -> ir.Value:
    """1-D int64 shape of ``x`` with non-negative axis ``ax`` removed."""
    rank = ctx.rank(x)
    shape = ctx.static_shape(x)
    if shape is not None:
        return ctx.const([d for i, d in enumerate(shape) if i != ax], torch.int64)
    full = ctx.op.Shape(x)
    parts = []
    if ax > 0:
        parts.append(ctx.op.Slice(full, [0], [ax]))
    if ax < rank - 1:
        parts.append(ctx.op.Slice(full, [ax + 1], [rank]))
    if not parts:
        return ctx.const([], torch.int64)
    return parts[0] if len(parts) == 1 else ctx.op.Concat(*parts, axis=0)


def prod_of_dims(
    ctx: TranslationContext, x: ir.Value, start: int, end: int | None = None
) -> ir.Value:
    """1-D int64 [product of dims start..end) of x] (1 for an empty range)."""
    shape = ctx.shape(x)
    rank = ctx.rank(x)
    stop = rank if end is None else (end if end >= 0 else rank + end)
    start = start if start >= 0 else rank + start
    dims = shape[start:stop] if shape is not None else None
    if dims is not None and all(isinstance(d, int) for d in dims):
        return ctx.const([math.prod(dims)], torch.int64)
    return ctx.op.ReduceProd(ctx.op.Shape(x, start=start, end=stop), keepdims=1)


def as_size(ctx: TranslationContext, item: Any) -> Size:
    """A size argument (int, SymInt value, 0-d/1-elem tensor value) as a Size."""
    if isinstance(item, ir.Value):
        item = ctx.cast(item, torch.int64)
        return item if ctx.rank(item) == 1 else ctx.op.Reshape(item, [1])
    return int(item)


def as_1d(ctx: TranslationContext, size: Size) -> ir.Value:
    return ctx.const([size], torch.int64) if is_static(size) else size


def as_0d(ctx: TranslationContext, size: Size) -> ir.Value:
    return ctx.const(size, torch.int64) if is_static(size) else ctx.op.Squeeze(size, [0])


def add(ctx: TranslationContext, a: Size, b: Size) -> Size:
    if is_static(a) and is_static(b):
        return a + b
    if is_static(b) and b == 0:
        return a
    if is_static(a) and a == 0:
        return b
    return ctx.op.Add(as_1d(ctx, a), as_1d(ctx, b))


def sub(ctx: TranslationContext, a: Size, b: Size) -> Size:
    if is_static(a) and is_static(b):
        return a - b
    if is_static(b) and b == 0:
        return a
    return ctx.op.Sub(as_1d(ctx, a), as_1d(ctx, b))


def mul(ctx: TranslationContext, a: Size, b: Size) -> Size:
    if is_static(a) and is_static(b):
        return a * b
    if is_static(b) and b == 1:
        return a
    if is_static(a) and a == 1:
        return b
    return ctx.op.Mul(as_1d(ctx, a), as_1d(ctx, b))


def floordiv(ctx: TranslationContext, a: Size, b: Size) -> Size:
    """Floor division (sizes are non-negative, so ONNX's truncating Div agrees)."""
    if is_static(a) and is_static(b):
        return a // b
    if is_static(b) and b == 1:
        return a
    return ctx.op.Div(as_1d(ctx, a), as_1d(ctx, b))


def minimum(ctx: TranslationContext, a: Size, b: Size) -> Size:
    if is_static(a) and is_static(b):
        return min(a, b)
    return ctx.op.Min(as_1d(ctx, a), as_1d(ctx, b))


def maximum(ctx: TranslationContext, a: Size, b: Size) -> Size:
    if is_static(a) and is_static(b):
        return max(a, b)
    return ctx.op.Max(as_1d(ctx, a), as_1d(ctx, b))


# ----------------------------------------------------------------------------- shape values
def concat_sizes(ctx: TranslationContext, sizes: Sequence[Size | ir.Value]) -> ir.Value:
    """A 1-D int64 shape from Sizes and 1-D int64 values of any length; constant when static.

    Runs of ints become one constant each; values are kept as they are (``concat_ints`` also
    folds constant values).
    """
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


def concat_ints(ctx: TranslationContext, *parts: Any) -> ir.Value:
    """Concatenate 1-D int64 values and Python int lists into one shape value; one constant
    when every part is constant."""
    values = []
    for p in parts:
        if isinstance(p, ir.Value):
            values.append(p)
        else:
            p = list(p)
            if not p:
                continue
            values.append(ctx.ints(p))
    if all(v.const_value is not None or _is_const(v) for v in values):
        flat = []
        for v in values:
            flat.extend(_const_ints(v))
        return ctx.const(flat, torch.int64)
    if len(values) == 1:
        return values[0]
    return ctx.op.Concat(*values, axis=0)


def _is_const(v: ir.Value) -> bool:
    node = v.producer()
    return node is not None and node.op_type == "Constant"


def _const_ints(v: ir.Value) -> list[int]:
    if v.const_value is not None:
        return [int(i) for i in v.const_value.numpy().reshape(-1)]
    node = v.producer()
    return [int(i) for i in node.attributes["value"].as_tensor().numpy().reshape(-1)]


def size_list(ctx: TranslationContext, items: Sequence[Any]) -> list[Size]:
    return [as_size(ctx, i) for i in items]


def shape_arg(ctx: TranslationContext, items: Any) -> ir.Value:
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
    ctx: TranslationContext,
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


def out_shape(ctx: TranslationContext, index: int | None = None) -> tuple[Any, ...]:
    out = ctx.out
    if index is not None:
        out = out[index]
    if not isinstance(out, torch.Tensor):
        raise ValueError("the FX node carries no tensor metadata for its output")
    return tuple(out.shape)


# ----------------------------------------------------------------------------- reshapes
def reshape(ctx: TranslationContext, x: ir.Value, *parts: Any, allowzero: bool) -> ir.Value:
    """``Reshape`` of ``x`` to ``parts``: one 1-D int64 value taken as it is, or 1-D values and
    int lists joined by ``concat_ints``.

    ``allowzero`` has no default, because ONNX's two meanings of a 0 in the target differ:
    True makes a 0 an empty dim (what torch means; needed wherever a size from the data may be
    0), False makes a 0 copy the input's dim (ONNX's default; a target without zeros, or one
    with -1, reads the same either way).
    """
    if len(parts) == 1 and isinstance(parts[0], ir.Value):
        target = parts[0]
    else:
        target = concat_ints(ctx, *parts)
    return ctx.op.Reshape(x, target, allowzero=1 if allowzero else None)


def with_shape(value: ir.Value, dims: Sequence[Any]) -> ir.Value:
    """Record a shape on an intermediate value, so rank and size queries (``ctx.rank``,
    ``static_dim``) work on it; a dim that is not a plain int >= 0 (-1, None, a SymInt) is
    recorded as unknown."""
    value.shape = ir.Shape([d if isinstance(d, int) and d >= 0 else None for d in dims])
    return value


def flatten(ctx: TranslationContext, x: ir.Value) -> ir.Value:
    """``x`` as 1-D, with its length recorded when it is static."""
    shape = ctx.static_shape(x)
    out = reshape(ctx, x, [-1], allowzero=False)
    return with_shape(out, [None if shape is None else math.prod(shape)])


def annotate(ctx: TranslationContext, value: ir.Value, meta: Any) -> ir.Value:
    """Give a value FX-style metadata (a FakeTensor), so rank and shape queries work on it."""
    if meta is not None:
        ctx.scope.translator.set_type(value, meta)
    return value


def constant_of_shape(
    ctx: TranslationContext, shape: ir.Value | Sequence[int], value: Any, dtype: torch.dtype
) -> ir.Value:
    """A tensor of ``shape`` filled with ``value``; its dtype is recorded for later ops."""
    fill = _dtypes.ir_tensor(torch.tensor([value], dtype=dtype))
    out = ctx.op.ConstantOfShape(shape, value=fill)
    out.dtype = fill.dtype
    return out
