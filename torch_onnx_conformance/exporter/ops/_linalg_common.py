"""Building blocks the linear-algebra families share (linalg, linalg_factor, linalg_spectral,
linalg_lstsq, linalg_more).

ONNX has no factorisation or inverse in its default domain, so these families build them from
elementwise ops: Gauss-Jordan elimination with partial pivoting, Householder reflections, and a
loop over columns that unrolls for small static matrices and becomes an ONNX Loop otherwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import onnx_ir as ir
import torch

from torch_onnx_conformance.exporter.ops import _reduce as R
from torch_onnx_conformance.exporter.ops import _shape as S
from torch_onnx_conformance.exporter.ops import _subgraph

if TYPE_CHECKING:
    from torch_onnx_conformance.exporter.ops._context import TranslationContext

i64, f64 = torch.int64, torch.float64

#: Matrices up to this static size are eliminated with unrolled ops instead of a Loop.
_UNROLL_MAX = 8


# ------------------------------------------------------------------- Gauss-Jordan elimination
class _Elimination:
    """State and one elimination step, written once for unrolled and Loop-body use.

    ``a`` is [..., n, n]; ``rhs`` (optional) is [..., n, m] and ends as A^-1 @ rhs. The
    determinant is tracked as sign and product of pivots (``log_abs`` keeps log|pivot| sums
    instead, for slogdet, which would overflow a plain product).
    """

    def __init__(self, rank: int, work: torch.dtype, track: str) -> None:
        self.rank = rank
        self.row_axis = rank - 2
        self.col_axis = rank - 1
        self.work = work
        self.track = track  # "det", "logdet" or "none"

    def step(self, c, k, row_ids, a, rhs, det, sign, info):
        """One column: pivot, swap, normalise the pivot row, eliminate the column elsewhere."""
        ra, ca, work = self.row_axis, self.col_axis, self.work
        k_row = c.op.Unsqueeze(k, c.const([0], i64)) if is_value(k) else c.const([k], i64)
        k_scalar = k if is_value(k) else c.const(k, i64)
        column = c.op.Gather(a, k_scalar, axis=ca)  # [..., n] over rows
        eligible = c.op.GreaterOrEqual(row_ids, k_scalar)
        magnitude = c.op.Where(eligible, c.op.Abs(column), c.const(-1.0, work))
        pivot_row = c.op.ArgMax(magnitude, axis=ra, keepdims=1)  # [..., 1]
        # Row permutation swapping k and the pivot row, per batch element.
        is_k = c.op.Equal(row_ids, k_scalar)
        is_pivot = c.op.Equal(row_ids, pivot_row)
        order = c.op.Where(is_k, pivot_row, c.op.Where(is_pivot, k_scalar, row_ids))
        order = c.op.Unsqueeze(order, c.const([ca], i64))
        a = c.op.GatherElements(a, c.op.Expand(order, c.op.Shape(a)), axis=ra)
        if rhs is not None:
            rhs = c.op.GatherElements(rhs, c.op.Expand(order, c.op.Shape(rhs)), axis=ra)
        swapped = c.op.Squeeze(c.op.Not(c.op.Equal(pivot_row, k_scalar)), c.const([ra], i64))
        pivot_row_values = c.op.Gather(a, k_row, axis=ra)  # [..., 1, n]
        pivot = c.op.Squeeze(
            c.op.Gather(pivot_row_values, k_row, axis=ca), c.const([ra, ca], i64)
        )  # [...]
        zero = c.const(0.0, work)
        is_zero = c.op.Equal(pivot, zero)
        if self.track == "det":
            det = c.op.Mul(det, pivot)
            det = c.op.Where(swapped, c.op.Neg(det), det)
        elif self.track == "logdet":
            det = c.op.Add(det, c.op.Log(c.op.Abs(pivot)))
            sign = c.op.Mul(sign, c.op.Sign(pivot))
            sign = c.op.Where(swapped, c.op.Neg(sign), sign)
        if info is not None:
            first = c.op.And(is_zero, c.op.Equal(info, c.const(0, torch.int32)))
            k_info = c.op.Add(c.cast(k_scalar, torch.int32), c.const(1, torch.int32))
            info = c.op.Where(first, k_info, info)
        # A zero pivot leaves the matrix singular; dividing by 1 keeps everything finite.
        safe = c.op.Where(is_zero, c.const(1.0, work), pivot)
        safe = c.op.Unsqueeze(safe, c.const([ra, ca], i64))
        factors = c.op.Gather(a, k_row, axis=ca)  # [..., n, 1]
        in_row_k = c.op.Unsqueeze(is_k, c.const([1], i64))  # [n, 1], broadcast over batch
        factors = c.op.Where(in_row_k, zero, factors)
        a = self._eliminate(c, a, pivot_row_values, safe, factors, in_row_k)
        if rhs is not None:
            rhs_row = c.op.Gather(rhs, k_row, axis=ra)
            rhs = self._eliminate(c, rhs, rhs_row, safe, factors, in_row_k)
        return a, rhs, det, sign, info

    @staticmethod
    def _eliminate(c, m, pivot_values, safe, factors, in_row_k):
        normalised = c.op.Div(pivot_values, safe)
        m = c.op.Sub(m, c.op.Mul(factors, normalised))
        return c.op.Where(in_row_k, normalised, m)


def is_value(x: Any) -> bool:
    return isinstance(x, ir.Value)


def gauss_jordan(
    ctx: TranslationContext,
    a,
    rhs,
    track: str,
    with_info: bool,
    rank: int | None = None,
    n_static: int | None = None,
):
    """Runs the elimination over every column; returns (a, rhs, det_or_logabs, sign, info).

    ``rank`` and ``n_static`` describe ``a`` when it is not an FX value (a broadcast copy).
    """
    if rank is None:
        rank = ctx.rank(a)
        n_static = S.static_dim(ctx, a, rank - 1)
    work = R.float_work(ctx.dtype(a))
    a = ctx.cast(a, work)
    rhs = None if rhs is None else ctx.cast(rhs, work)
    elim = _Elimination(rank, work, track)
    n = ctx.const(n_static, i64) if n_static is not None else S.dim_0d(ctx, a, rank - 1)
    row_ids = ctx.op.Range(ctx.const(0, i64), n, ctx.const(1, i64))
    batch_shape = ctx.op.Shape(a, start=0, end=rank - 2)
    det = S.constant_of_shape(ctx, batch_shape, 1.0 if track == "det" else 0.0, work)
    sign = S.constant_of_shape(ctx, batch_shape, 1.0, work) if track == "logdet" else None
    info = S.constant_of_shape(ctx, batch_shape, 0, torch.int32) if with_info else None
    states = (a, rhs, det, sign, info)
    dtypes = (work, work, work, work, torch.int32)
    return over_columns(
        ctx,
        n_static,
        n,
        states,
        dtypes,
        lambda c, k, values: elim.step(c, k, row_ids, *values),
        "gauss_jordan",
    )


def over_columns(ctx: TranslationContext, n_static, n, states, dtypes, step, name):
    """Runs ``step(ctx, k, states) -> states`` for k = 0..n-1: unrolled when n is small and
    static, else as an ONNX Loop. None states stay None and are not carried."""
    states = tuple(states)
    if n_static is not None and n_static <= _UNROLL_MAX:
        for k in range(n_static):
            states = tuple(step(ctx, k, states))
        return states
    present = [v is not None for v in states]

    def unpack(values):
        it = iter(values)
        return tuple(next(it) if here else None for here in present)

    def body(c, k, values):
        return [v for v in step(c, k, unpack(values)) if v is not None]

    carried = [v for v in states if v is not None]
    carried_dtypes = [d for d, here in zip(dtypes, present) if here]
    return unpack(_subgraph.loop(ctx, n, carried, body, carried_dtypes, name))


def solve(ctx: TranslationContext, A, B, left, with_info, *, vectors=True, matrix=None):
    """X with A X = B (left) or X A = B, batch dims broadcast.

    ``vectors``: apply torch.linalg.solve's rule that a B shaped like A minus its last dim is
    a batch of vectors. ``matrix`` replaces A's values (a masked or rebuilt A of A's shape).
    """
    a_shape, b_shape = ctx.shape(A), ctx.shape(B)
    a_rank, b_rank = len(a_shape), len(b_shape)
    # torch treats B as a batch of vectors when it is 1-D or shaped like A without its last dim.
    vector = vectors and (
        b_rank == 1 or (b_rank == a_rank - 1 and tuple(b_shape) == tuple(a_shape[:-1]))
    )
    work = R.float_work(ctx.out_dtype)
    a = ctx.cast(A if matrix is None else matrix, work)
    b = ctx.cast(B, work)
    if vector:
        b = ctx.op.Unsqueeze(b, ctx.const([b_rank], i64))
        b_rank += 1
    if not left:
        # X A = B is A^T X^T = B^T (a vector B already stands as its own transpose).
        a = ctx.op.Transpose(a, perm=[*range(a_rank - 2), a_rank - 1, a_rank - 2])
        if not vector:
            b = ctx.op.Transpose(b, perm=[*range(b_rank - 2), b_rank - 1, b_rank - 2])
    # Broadcast the batch dims of A and B against each other.
    ones = ctx.const([1, 1], i64)
    a_full = ctx.op.Expand(a, ctx.op.Concat(ctx.op.Shape(b, start=0, end=b_rank - 2), ones, axis=0))
    b_full = ctx.op.Expand(b, ctx.op.Concat(ctx.op.Shape(a, start=0, end=a_rank - 2), ones, axis=0))
    rank = max(a_rank, b_rank)
    info = None
    n_static = a_shape[-1] if isinstance(a_shape[-1], int) else None
    if R.static_count(ctx, B, None) == 0 and not with_info:
        x = b_full  # nothing to solve for; onnxruntime's GatherElements rejects empty rows
    else:
        _, x, _, _, info = gauss_jordan(ctx, a_full, b_full, "none", with_info, rank, n_static)
    if not left and not vector:
        x = ctx.op.Transpose(x, perm=[*range(rank - 2), rank - 1, rank - 2])
    if vector:
        x = ctx.op.Squeeze(x, ctx.const([rank - 1], i64))
    return ctx.cast(x, ctx.out_dtype), info


def swap_last(rank):
    return [*range(rank - 2), rank - 1, rank - 2]


# -------------------------------------------------------------------------------------- sizes
def index_range(ctx: TranslationContext, n):
    return ctx.op.Range(ctx.const(0, i64), n, ctx.const(1, i64))


def matrix_sizes(ctx: TranslationContext, a, rank):
    """(m, n, k) of [..., m, n] as 0-d int64 values, plus k = min(m, n) when static."""
    shape = ctx.shape(a)
    m_s, n_s = shape[-2], shape[-1]
    m = (
        ctx.const(m_s, i64)
        if isinstance(m_s, int)
        else ctx.op.Squeeze(ctx.op.Shape(a, start=rank - 2, end=rank - 1), ctx.const([0], i64))
    )
    n = (
        ctx.const(n_s, i64)
        if isinstance(n_s, int)
        else ctx.op.Squeeze(ctx.op.Shape(a, start=rank - 1, end=rank), ctx.const([0], i64))
    )
    k_static = min(m_s, n_s) if isinstance(m_s, int) and isinstance(n_s, int) else None
    k = ctx.const(k_static, i64) if k_static is not None else ctx.op.Min(m, n)
    return m, n, k, k_static


# ----------------------------------------------------------------------------- Householder QR
def householder(ctx: TranslationContext, A):
    """geqrf's Householder QR: (R [..., m, n], reflectors V [..., m, k] with unit heads, tau).

    LAPACK's dlarfg picks beta = -sign(alpha) * |x|, so R's diagonal has the opposite sign of
    the pivot entry, and a column already zero below the diagonal gets tau = 0.
    """
    rank = ctx.rank(A)
    ra, ca = rank - 2, rank - 1
    work = R.float_work(ctx.dtype(A))
    a = ctx.cast(A, work)
    m, n, k, k_static = matrix_sizes(ctx, A, rank)
    rows = ctx.op.Unsqueeze(index_range(ctx, m), ctx.const([1], i64))  # [m, 1]
    cols = ctx.op.Unsqueeze(index_range(ctx, n), ctx.const([0], i64))  # [1, n]
    slots = index_range(ctx, k)
    batch = ctx.op.Shape(a, start=0, end=rank - 2)
    k1 = ctx.op.Reshape(k, ctx.const([1], i64))
    m1 = ctx.op.Reshape(m, ctx.const([1], i64))
    reflectors = S.constant_of_shape(ctx, ctx.op.Concat(batch, m1, k1, axis=0), 0.0, work)
    taus = S.constant_of_shape(ctx, ctx.op.Concat(batch, k1, axis=0), 0.0, work)
    zero, one = ctx.const(0.0, work), ctx.const(1.0, work)

    def step(c, j, states):
        r, vs, ts = states
        j_row = c.op.Unsqueeze(j, c.const([0], i64)) if is_value(j) else c.const([j], i64)
        j_scalar = j if is_value(j) else c.const(j, i64)
        column = c.op.Gather(r, j_row, axis=ca)  # [..., m, 1]
        below = c.op.Greater(rows, j_scalar)
        tail = c.op.Where(below, column, zero)
        alpha = c.op.Gather(column, j_row, axis=ra)  # [..., 1, 1]
        tail_sq = R.reduce(c, "ReduceSumSquare", tail, [ra], True)
        norm = c.op.Sqrt(c.op.Add(c.op.Mul(alpha, alpha), tail_sq))
        negative = c.op.Less(alpha, zero)
        beta = c.op.Where(negative, norm, c.op.Neg(norm))
        reflect = c.op.Greater(tail_sq, zero)
        safe_beta = c.op.Where(reflect, beta, one)
        tau = c.op.Where(reflect, c.op.Div(c.op.Sub(beta, alpha), safe_beta), zero)
        scale = c.op.Where(reflect, c.op.Sub(alpha, beta), one)
        v = c.op.Where(
            below, c.op.Div(tail, scale), c.op.Where(c.op.Equal(rows, j_scalar), one, zero)
        )  # [..., m, 1]
        # R <- (I - tau v v^T) R, then the exact zeros and beta that dlarfg defines.
        projection = c.op.MatMul(c.op.Transpose(v, perm=swap_last(rank)), r)  # [..., 1, n]
        r = c.op.Sub(r, c.op.Mul(c.op.Mul(tau, v), projection))
        in_column = c.op.Equal(cols, j_scalar)
        new_diagonal = c.op.Where(reflect, beta, alpha)
        r = c.op.Where(c.op.And(below, in_column), zero, r)
        r = c.op.Where(c.op.And(c.op.Equal(rows, j_scalar), in_column), new_diagonal, r)
        slot = c.op.Equal(slots, j_scalar)  # [k]
        vs = c.op.Where(slot, v, vs)
        ts = c.op.Where(slot, c.op.Squeeze(tau, c.const([ca], i64)), ts)
        return r, vs, ts

    return over_columns(
        ctx, k_static, k, (a, reflectors, taus), (work, work, work), step, "householder"
    )


def apply_reflectors(ctx: TranslationContext, start, reflectors, taus, rank, k, k_static):
    """start @ H_0 H_1 ... H_{k-1}, with H_j = I - tau_j v_j v_j^T (Q when start is I)."""
    ra, ca = rank - 2, rank - 1

    def step(c, j, states):
        (q,) = states
        j_row = c.op.Unsqueeze(j, c.const([0], i64)) if is_value(j) else c.const([j], i64)
        v = c.op.Gather(reflectors, j_row, axis=ca)  # [..., m, 1]
        tau = c.op.Unsqueeze(c.op.Gather(taus, j_row, axis=ra), c.const([ca], i64))
        qv = c.op.MatMul(q, v)  # [..., r, 1]
        return (c.op.Sub(q, c.op.Mul(c.op.Mul(tau, qv), c.op.Transpose(v, perm=swap_last(rank)))),)

    return over_columns(ctx, k_static, k, (start,), (ctx.dtype(start),), step, "reflectors")[0]


def eye_like_rows(ctx: TranslationContext, x, rank, work):
    """Identity [..., m, m] for the rows of x [..., m, n]."""
    m1 = ctx.op.Shape(x, start=rank - 2, end=rank - 1)
    square = S.constant_of_shape(ctx, ctx.op.Concat(m1, m1, axis=0), 0.0, work)
    eye = ctx.op.EyeLike(square)
    eye.dtype = square.dtype
    return ctx.op.Expand(eye, ctx.op.Concat(ctx.op.Shape(x, start=0, end=rank - 2), m1, m1, axis=0))


# ----------------------------------------------------------------------------- rank tolerance
def tolerance(ctx: TranslationContext, A, atol, rtol, largest):
    """max(atol, rtol * largest) with torch's defaults (rtol = eps * max(m, n) without atol)."""
    shape = ctx.shape(A)
    if rtol is None:
        atol_given = atol is not None and not (isinstance(atol, (int, float)) and atol == 0)
        if atol_given:
            rtol = 0.0
        else:
            eps = torch.finfo(ctx.dtype(A)).eps
            if all(isinstance(d, int) for d in shape[-2:]):
                rtol = eps * max(shape[-2:])
            else:
                rank = len(shape)
                sizes = ctx.cast(ctx.op.Shape(A, start=rank - 2, end=rank), f64)
                rtol = ctx.op.Mul(ctx.const(eps, f64), ctx.op.ReduceMax(sizes, keepdims=0))

    def as_value(t):
        return ctx.cast(t, f64) if isinstance(t, ir.Value) else ctx.const(float(t), f64)

    relative = ctx.op.Mul(as_value(rtol), largest)
    if atol is None:
        return relative
    return ctx.op.Max(as_value(atol), relative)
