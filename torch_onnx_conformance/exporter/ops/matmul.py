"""Matrix products: linear, addmm, mm, bmm, matmul, dot, outer, einsum and their scaled sums.

Gemm is used where it fits (2-D operands, float dtypes) because it fuses the bias and the
alpha/beta scaling; MatMul covers every rank combination (it has numpy semantics, like
torch.matmul). onnxruntime's MatMul has no int8/int16/uint8 or bfloat16 kernels and its Gemm
only floats, so those dtypes compute in a wider type and cast back (integer casts wrap the way
torch's integer overflow does).
"""

from __future__ import annotations

import re

import torch

from torch_onnx_conformance.exporter.ops._nn_helpers import FLOATS, compute_dtype
from torch_onnx_conformance.exporter.ops._registry import translates

aten = torch.ops.aten

_MATMUL_DTYPES = frozenset({torch.float32, torch.float64, torch.float16, torch.int32, torch.int64})
_EINSUM_DTYPES = _MATMUL_DTYPES


def _operands(ctx, *values, dtype=None, supported=_MATMUL_DTYPES):
    """Cast tensors to the dtype the product is computed in; return them and that dtype."""
    out_dtype = dtype or ctx.out_dtype or ctx.result_type(*values)
    work = compute_dtype(out_dtype, supported)
    return [ctx.cast(v, work) for v in values], work


def _finish(ctx, value, dtype=None):
    return ctx.cast(value, dtype or ctx.out_dtype)


def _product(ctx, a, b, work):
    """MatMul, except that an empty contraction gives zeros.

    onnxruntime's Gemm (which it also fuses MatMul+Add into) returns garbage or fails when the
    contracted dimension is 0; torch returns zeros there.
    """
    if not _has_empty_contraction(ctx, a, b):
        return ctx.op.MatMul(a, b)
    a_shape, b_shape = ctx.static_shape(a), ctx.static_shape(b)
    if a_shape is not None and b_shape is not None:
        meta = torch.empty(a_shape, device="meta") @ torch.empty(b_shape, device="meta")
        return ctx.op.Expand(ctx.scalar(0, work), list(meta.shape))
    return ctx.op.Expand(ctx.scalar(0, work), ctx.op.Shape(ctx.op.MatMul(a, b)))


def _has_empty_contraction(ctx, a, b) -> bool:
    a_shape, b_shape = ctx.shape(a), ctx.shape(b)
    return (
        bool(a_shape)
        and a_shape[-1] == 0
        or bool(b_shape)
        and (b_shape[-2 if len(b_shape) > 1 else -1] == 0)
    )


def _is_zero(x) -> bool:
    return isinstance(x, (int, float, bool)) and x == 0


def _is_one(x) -> bool:
    return isinstance(x, (int, float, bool)) and x == 1


def _scaled(ctx, value, factor, dtype):
    if _is_one(factor):
        return value
    if isinstance(factor, bool):
        factor = int(factor)
    return ctx.op.Mul(value, ctx.scalar(factor, dtype))


def _scaled_sum(ctx, input, product, beta, alpha, work):
    """beta * input + alpha * product.

    beta == 0 ignores input, as torch does (its NaNs do not propagate). The result has the
    product's shape either way: input only ever broadcasts to it.
    """
    product = _scaled(ctx, product, alpha, work)
    if _is_zero(beta):
        return product
    return ctx.op.Add(_scaled(ctx, ctx.cast(input, work), beta, work), product)


# ------------------------------------------------------------------------------ linear / Gemm
@translates(aten.linear.default)
def linear(ctx, input, weight, bias=None):
    (x, w), work = _operands(ctx, input, weight)
    b = None if bias is None else ctx.cast(bias, work)
    if (
        ctx.rank(x) == 2
        and ctx.rank(w) == 2
        and work in FLOATS
        and not (_has_empty_contraction(ctx, x, w))
    ):
        return _finish(ctx, ctx.op.Gemm(x, w, b, transB=1))
    if ctx.rank(w) == 1:
        out = _product(ctx, x, w, work)
    else:
        out = _product(ctx, x, ctx.op.Transpose(w, perm=[1, 0]), work)
    return _finish(ctx, out if b is None else ctx.op.Add(out, b))


@translates(aten.addmm.default, aten.addmm.dtype)
def addmm(ctx, input, mat1, mat2, *args, beta=1, alpha=1, out_dtype=None):
    if args and isinstance(args[0], torch.dtype):  # the .dtype overload: (out_dtype, beta, alpha)
        out_dtype, *args = args
    if args:
        beta = args[0]
    if len(args) > 1:
        alpha = args[1]
    (a, b), work = _operands(ctx, mat1, mat2, dtype=out_dtype)
    if (
        work in FLOATS
        and isinstance(beta, (int, float))
        and isinstance(alpha, (int, float))
        and not _has_empty_contraction(ctx, a, b)
    ):
        c = None if _is_zero(beta) else ctx.cast(input, work)
        return _finish(ctx, ctx.op.Gemm(a, b, c, alpha=float(alpha), beta=float(beta)))
    return _finish(ctx, _scaled_sum(ctx, input, _product(ctx, a, b, work), beta, alpha, work))


@translates(
    aten.mm.default,
    aten.bmm.default,
    aten.matmul.default,
    aten.mv.default,
    aten.dot.default,
    aten.vdot.default,
)
def matmul(ctx, self, other):
    (a, b), work = _operands(ctx, self, other)
    return _finish(ctx, _product(ctx, a, b, work))


@translates(aten.mm.dtype, aten.bmm.dtype)
def matmul_out_dtype(ctx, self, other, out_dtype):
    (a, b), work = _operands(ctx, self, other, dtype=out_dtype)
    return _finish(ctx, _product(ctx, a, b, work), out_dtype)


@translates(aten.baddbmm.default, aten.addmv.default, aten.baddbmm.dtype)
def baddbmm(ctx, input, left, right, *args, beta=1, alpha=1):
    if args and isinstance(args[0], torch.dtype):
        args = args[1:]
    if args:
        beta = args[0]
    if len(args) > 1:
        alpha = args[1]
    (a, b), work = _operands(ctx, left, right)
    return _finish(ctx, _scaled_sum(ctx, input, _product(ctx, a, b, work), beta, alpha, work))


@translates(aten.addbmm.default)
def addbmm(ctx, input, batch1, batch2, *, beta=1, alpha=1):
    (a, b), work = _operands(ctx, batch1, batch2)
    product = ctx.op.ReduceSum(_product(ctx, a, b, work), [0], keepdims=0)
    return _finish(ctx, _scaled_sum(ctx, input, product, beta, alpha, work))


@translates(aten.outer.default, aten.ger.default)
def outer(ctx, self, vec2):
    a, b = ctx.promote(self, vec2, dtype=ctx.out_dtype)
    if ctx.out_dtype == torch.bool:
        return ctx.op.And(ctx.op.Unsqueeze(a, [1]), b)
    (a, b), work = _operands(ctx, a, b)
    return _finish(ctx, ctx.op.Mul(ctx.op.Unsqueeze(a, [1]), b))


@translates(aten.addr.default)
def addr(ctx, input, vec1, vec2, *, beta=1, alpha=1):
    if ctx.out_dtype == torch.bool:
        a, b, c = (ctx.cast(v, torch.bool) for v in (input, vec1, vec2))
        product = ctx.op.And(ctx.op.Unsqueeze(b, [1]), c)
        if not alpha:
            product = ctx.op.And(product, ctx.const(False, torch.bool))
        if not beta:
            return ctx.op.Or(product, ctx.op.And(a, ctx.const(False, torch.bool)))
        return ctx.op.Or(a, product)
    (a, b), work = _operands(ctx, vec1, vec2)
    product = ctx.op.Mul(ctx.op.Unsqueeze(a, [1]), b)
    return _finish(ctx, _scaled_sum(ctx, input, product, beta, alpha, work))


# ------------------------------------------------------------------------------------ einsum
def _explicit_equation(equation: str) -> str:
    """torch's einsum equation in explicit form, with its letters mapped to lowercase.

    Implicit outputs are the letters used once, in ASCII order (torch sorts A-Z before a-z);
    that order is fixed here, before the renaming that onnxruntime's lowercase-only parser
    needs, so the renaming cannot change it.
    """
    equation = equation.replace(" ", "")
    if "->" in equation:
        lhs, rhs = equation.split("->")
    else:
        lhs = equation
        letters = [c for c in lhs if c.isalpha()]
        once = sorted(c for c in set(letters) if letters.count(c) == 1)
        rhs = ("..." if "..." in lhs else "") + "".join(once)
    used = sorted({c for c in lhs + rhs if c.isalpha()})
    if len(used) <= 26:
        mapping = {}
        free = [c for c in "abcdefghijklmnopqrstuvwxyz"]
        for c in used:
            mapping[c] = free.pop(0)
        lhs = re.sub(r"[A-Za-z]", lambda m: mapping[m.group(0)], lhs)
        rhs = re.sub(r"[A-Za-z]", lambda m: mapping[m.group(0)], rhs)
    return f"{lhs}->{rhs}"


def _align_ellipses(ctx, equation: str, operands: list, tensors: list) -> list:
    """Give every operand's '...' the same number of dims (onnxruntime will not broadcast
    ellipses of different ranks; torch aligns them from the right, like numpy)."""
    lhs = equation.split("->")[0].split(",")
    ranks = []
    for term, x in zip(lhs, tensors):
        ranks.append(ctx.rank(x) - len(term.replace("...", "")) if "..." in term else None)
    widest = max((r for r in ranks if r is not None), default=0)
    aligned = []
    for term, x, r in zip(lhs, operands, ranks):
        if r is not None and r < widest:
            at = term.index("...")
            x = ctx.op.Unsqueeze(x, list(range(at, at + widest - r)))
        aligned.append(x)
    return aligned


@translates(aten.einsum.default)
def einsum(ctx, equation, tensors, path=None):
    operands, work = _operands(ctx, *tensors, supported=_EINSUM_DTYPES)
    equation = _explicit_equation(equation)
    lhs, rhs = equation.split("->")
    if "..." in lhs:
        width = max(
            ctx.rank(x) - len(t.replace("...", ""))
            for t, x in zip(lhs.split(","), tensors)
            if "..." in t
        )
        operands = _align_ellipses(ctx, equation, operands, tensors)
    if "..." in lhs and "..." not in rhs:
        # onnxruntime wants an ellipsis in the output whenever an input has one; summing over
        # the ellipsis dims is spelled with fresh letters instead.
        free = [c for c in "abcdefghijklmnopqrstuvwxyz" if c not in lhs][:width]
        equation = f"{lhs.replace('...', ''.join(free))}->{rhs}"
    return _finish(ctx, ctx.op.Einsum(*operands, equation=equation))


@translates(aten.bilinear.default)
def bilinear(ctx, input1, input2, weight, bias=None):
    (a, b, w), work = _operands(ctx, input1, input2, weight, supported=_EINSUM_DTYPES)
    out = ctx.op.Einsum(a, w, b, equation="...i,oij,...j->...o")
    if bias is not None:
        out = ctx.op.Add(out, ctx.cast(bias, work))
    return _finish(ctx, out)


@translates(aten.tensordot.default)
def tensordot(ctx, self, other, dims_self, dims_other):
    ra, rb = ctx.rank(self), ctx.rank(other)
    dims_self = [d % ra for d in dims_self]
    dims_other = [d % rb for d in dims_other]
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    left = [next(letters) for _ in range(ra)]
    right = [next(letters) for _ in range(rb)]
    for da, db in zip(dims_self, dims_other):
        right[db] = left[da]
    out = [c for i, c in enumerate(left) if i not in dims_self] + [
        c for i, c in enumerate(right) if i not in dims_other
    ]
    operands, work = _operands(ctx, self, other, supported=_EINSUM_DTYPES)
    eq = f"{''.join(left)},{''.join(right)}->{''.join(out)}"
    return _finish(ctx, ctx.op.Einsum(*operands, equation=eq))


@translates(aten._trilinear.default)
def trilinear(ctx, i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    """out = sum over sumdim of i1*i2*i3, each first unsqueezed at its expand dims."""
    rank = ctx.rank(i1) + len(expand1)
    letters = "abcdefghijklmnopqrstuvwxyz"[:rank]

    def subscripts(expand):
        return "".join(c for i, c in enumerate(letters) if i not in expand)

    out = "".join(c for i, c in enumerate(letters) if i not in sumdim)
    eq = f"{subscripts(expand1)},{subscripts(expand2)},{subscripts(expand3)}->{out}"
    operands, work = _operands(ctx, i1, i2, i3, supported=_EINSUM_DTYPES)
    result = ctx.op.Einsum(*operands, equation=eq)
    # _trilinear keeps summed dims as size-1 axes.
    if sumdim:
        result = ctx.op.Unsqueeze(result, sorted(sumdim))
    return _finish(ctx, result)


@translates(aten.kron.default)
def kron(ctx, self, other):
    """Kronecker product: both operands padded to one rank n, ``a`` spread on even axes and ``b``
    on odd axes of a rank-2n product, then adjacent axis pairs merged. Sizes come from the
    runtime shapes, so every dim may be dynamic."""
    a, b = ctx.promote(self, other, dtype=ctx.out_dtype)
    boolean = ctx.out_dtype == torch.bool
    if not boolean:
        (a, b), _ = _operands(ctx, a, b)
    rank = max(ctx.rank(a), ctx.rank(b))
    a, b = _pad_rank(ctx, a, rank), _pad_rank(ctx, b, rank)
    if rank:
        shape = ctx.op.Mul(ctx.op.Shape(a), ctx.op.Shape(b))
        a = ctx.op.Unsqueeze(a, [2 * i + 1 for i in range(rank)])
        b = ctx.op.Unsqueeze(b, [2 * i for i in range(rank)])
    product = ctx.op.And(a, b) if boolean else ctx.op.Mul(a, b)
    if rank:
        product = ctx.op.Reshape(product, shape)
    return product if boolean else _finish(ctx, product)


def _pad_rank(ctx, x, rank):
    missing = rank - ctx.rank(x)
    return ctx.op.Unsqueeze(x, list(range(missing))) if missing else x


# --------------------------------------------------------------------------- grouped matmul
def _group_of(ctx, offs, positions):
    """Per position along the grouped axis, the index of its group: how many group ends
    (``offs`` holds cumulative ends) lie at or before it. Positions past the last end get the
    group count, an index no group has."""
    ends = ctx.cast(offs, torch.int64)
    index = ctx.op.Range(ctx.scalar(0), ctx.op.Squeeze(positions, [0]), ctx.scalar(1))
    past = ctx.op.GreaterOrEqual(ctx.op.Unsqueeze(index, [1]), ctx.op.Unsqueeze(ends, [0]))
    return ctx.op.ReduceSum(ctx.cast(past, torch.int64), [1], keepdims=0)


def _pick_group(ctx, products, group, axis, work):
    """From per-group ``products`` (G, M, N), the entry of ``group[i]`` at each position ``i``
    of ``axis`` (1: rows, 2: columns), as (M, N); zeros where ``group`` is past the last
    group (torch leaves those positions unwritten)."""
    groups = ctx.op.Shape(products, start=0, end=1)
    layout = [1, -1, 1] if axis == 1 else [1, 1, -1]
    valid = ctx.op.Reshape(ctx.op.Less(group, groups), layout[1:])
    clamped = ctx.op.Min(group, ctx.op.Sub(groups, ctx.const([1], torch.int64)))
    one_group = ctx.op.Concat(ctx.const([1], torch.int64), ctx.op.Shape(products, start=1), axis=0)
    index = ctx.op.Expand(ctx.op.Reshape(clamped, layout), one_group)
    picked = ctx.op.Squeeze(ctx.op.GatherElements(products, index, axis=0), [0])
    return ctx.op.Where(valid, picked, ctx.scalar(0, work))


@translates(aten._grouped_mm.default)
def grouped_mm(ctx, self, mat2, offs=None, bias=None, out_dtype=None):
    """torch's grouped GEMM; ``offs`` holds the cumulative end of each group along the axis
    the 2-D operand is split on:

    - 3-D x 3-D, no offs: a batched matmul;
    - 2-D (M, K) x 3-D (G, K, N): rows of ``self`` grouped, each times its ``mat2[g]``;
    - 3-D (G, M, K) x 2-D (K, N): columns of ``mat2`` grouped, each times ``self[g]``;
    - 2-D (M, K) x 2-D (K, N): the contraction axis grouped, giving (G, M, N).

    Each form computes every group's product and picks the rows, columns or contraction
    slices that belong to it, so the offsets may be runtime values. bfloat16 computes in
    float32 (onnxruntime's MatMul has no bfloat16 kernel) and rounds once, as torch's
    kernels accumulate in float32.
    """
    if bias is not None:
        raise NotImplementedError("aten._grouped_mm with a bias (torch's kernels refuse it too)")
    (a, b), work = _operands(ctx, self, mat2)
    rank_a, rank_b = ctx.rank(self), ctx.rank(mat2)
    if offs is None:
        return _finish(ctx, ctx.op.MatMul(a, b))
    if rank_a == 2 and rank_b == 3:
        group = _group_of(ctx, offs, ctx.op.Shape(a, start=0, end=1))
        return _finish(ctx, _pick_group(ctx, ctx.op.MatMul(a, b), group, 1, work))
    if rank_a == 3 and rank_b == 2:
        group = _group_of(ctx, offs, ctx.op.Shape(b, start=1, end=2))
        return _finish(ctx, _pick_group(ctx, ctx.op.MatMul(a, b), group, 2, work))
    if rank_a == 2 and rank_b == 2:
        group = _group_of(ctx, offs, ctx.op.Shape(a, start=1, end=2))
        groups = ctx.op.Range(ctx.scalar(0), ctx.op.Squeeze(ctx.op.Shape(offs), [0]), ctx.scalar(1))
        member = ctx.op.Equal(ctx.op.Unsqueeze(groups, [1]), ctx.op.Unsqueeze(group, [0]))
        sliced = ctx.op.Where(ctx.op.Unsqueeze(member, [1]), a, ctx.scalar(0, work))
        return _finish(ctx, ctx.op.MatMul(sliced, b))  # (G, M, K) x (K, N)
    raise ValueError(
        f"aten._grouped_mm of a {rank_a}-D and a {rank_b}-D operand with offsets; torch "
        f"defines 2-D x 3-D, 3-D x 2-D and 2-D x 2-D with offsets, 3-D x 3-D without"
    )
