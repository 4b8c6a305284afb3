"""Matrix factorisations with LAPACK's conventions: LU with partial pivoting (lu_factor, lu,
lu_unpack, lu_solve) and Householder QR (qr, geqrf, householder_product/orgqr, ormqr).

The LU step is getrf's: the pivot is the first largest magnitude in the column, whole rows
swap (so the packed multipliers swap too), pivots are 1-based int32 row numbers. Rectangular
matrices factor over min(m, n) columns. Solves rebuild A = P L U and reuse the Gauss-Jordan
solver of _linalg_common.py. QR follows geqrf/dlarfg: R's diagonal takes the opposite sign of the
column's head, so Q and R match torch's (LAPACK's) exactly, not just up to signs.
"""

from __future__ import annotations

import torch

from torch_onnx_conformance.exporter.ops import _linalg_common as la
from torch_onnx_conformance.exporter.ops import _reduce as R
from torch_onnx_conformance.exporter.ops import _shape as S
from torch_onnx_conformance.exporter.ops._registry import translates

aten = torch.ops.aten
i64, i32 = torch.int64, torch.int32


def _lu(ctx, A, with_info):
    """(LU packed, pivots int32 [..., k], info int32 [...], row order int64 [..., m])."""
    rank = ctx.rank(A)
    ra, ca = rank - 2, rank - 1
    work = R.float_work(ctx.dtype(A))
    a = ctx.cast(A, work)
    m, n, k, k_static = la.matrix_sizes(ctx, A, rank)
    row_ids = ctx.op.Unsqueeze(la.index_range(ctx, m), ctx.const([1], i64))  # [m, 1]
    col_ids = ctx.op.Unsqueeze(la.index_range(ctx, n), ctx.const([0], i64))  # [1, n]
    step_ids = la.index_range(ctx, k)  # [k]
    batch = ctx.op.Shape(a, start=0, end=rank - 2)
    pivots = S.constant_of_shape(
        ctx, ctx.op.Concat(batch, ctx.op.Reshape(k, ctx.const([1], i64)), axis=0), 0, i32
    )
    info = S.constant_of_shape(ctx, batch, 0, i32) if with_info else None
    order = ctx.op.Expand(
        ctx.op.Squeeze(row_ids, ctx.const([1], i64)),
        ctx.op.Concat(batch, ctx.op.Reshape(m, ctx.const([1], i64)), axis=0),
    )

    def step(c, j, states):
        lu, piv, inf, rows = states
        j_row = c.op.Unsqueeze(j, c.const([0], i64)) if la.is_value(j) else c.const([j], i64)
        j_scalar = j if la.is_value(j) else c.const(j, i64)
        column = c.op.Gather(lu, j_row, axis=ca)  # [..., m, 1]
        below = c.op.GreaterOrEqual(row_ids, j_scalar)
        magnitude = c.op.Where(below, c.op.Abs(column), c.const(-1.0, work))
        p = c.op.ArgMax(magnitude, axis=ra, keepdims=1)  # [..., 1, 1]
        is_j, is_p = c.op.Equal(row_ids, j_scalar), c.op.Equal(row_ids, p)
        swap = c.op.Where(is_j, p, c.op.Where(is_p, j_scalar, row_ids))  # [..., m, 1]
        lu = c.op.GatherElements(lu, c.op.Expand(swap, c.op.Shape(lu)), axis=ra)
        rows = c.op.GatherElements(rows, c.op.Squeeze(swap, c.const([ca], i64)), axis=ra)
        p_flat = c.op.Squeeze(p, c.const([ca], i64))  # [..., 1]
        piv = c.op.Where(
            c.op.Equal(step_ids, j_scalar), c.op.Add(c.cast(p_flat, i32), c.const(1, i32)), piv
        )
        row_j = c.op.Gather(lu, j_row, axis=ra)  # [..., 1, n]
        pivot = c.op.Gather(row_j, j_row, axis=ca)  # [..., 1, 1]
        zero = c.op.Equal(pivot, c.const(0.0, work))
        if inf is not None:
            first = c.op.And(
                c.op.Squeeze(zero, c.const([ra, ca], i64)), c.op.Equal(inf, c.const(0, i32))
            )
            inf = c.op.Where(first, c.op.Add(c.cast(j_scalar, i32), c.const(1, i32)), inf)
        safe = c.op.Where(zero, c.const(1.0, work), pivot)
        column = c.op.Gather(lu, j_row, axis=ca)
        strictly_below = c.op.Greater(row_ids, j_scalar)
        multipliers = c.op.Where(strictly_below, c.op.Div(column, safe), c.const(0.0, work))
        right = c.op.Greater(col_ids, j_scalar)
        update = c.op.Mul(multipliers, c.op.Where(right, row_j, c.const(0.0, work)))
        lu = c.op.Sub(lu, update)
        in_column = c.op.And(strictly_below, c.op.Equal(col_ids, j_scalar))
        lu = c.op.Where(in_column, multipliers, lu)
        return lu, piv, inf, rows

    lu, pivots, info, order = la.over_columns(
        ctx, k_static, k, (a, pivots, info, order), (work, i32, i32, i64), step, "lu"
    )
    return lu, pivots, info, order


def _refuse_no_pivot(pivot):
    if not pivot:
        raise NotImplementedError(
            "LU without pivoting is not supported (torch's CPU kernels refuse it too); "
            "use pivot=True"
        )


@translates(aten.linalg_lu_factor_ex.default, aten._lu_with_info.default)
def linalg_lu_factor_ex(ctx, A, pivot=True, check_errors=False):
    _refuse_no_pivot(pivot)
    lu, pivots, info, _ = _lu(ctx, A, True)
    return ctx.cast(lu, ctx.dtype(A)), pivots, info


@translates(aten.linalg_lu_factor.default)
def linalg_lu_factor(ctx, A, *, pivot=True):
    _refuse_no_pivot(pivot)
    lu, pivots, _, _ = _lu(ctx, A, False)
    return ctx.cast(lu, ctx.dtype(A)), pivots


def _unpack(ctx, lu, like, order, dtype):
    """P, L, U from the packed factors (shaped like the FX value ``like``) and the row order."""
    rank = ctx.rank(like)
    m, n, k, _ = la.matrix_sizes(ctx, like, rank)
    rows = ctx.op.Unsqueeze(la.index_range(ctx, m), ctx.const([1], i64))
    cols = ctx.op.Unsqueeze(la.index_range(ctx, n), ctx.const([0], i64))
    k1 = ctx.op.Reshape(k, ctx.const([1], i64))
    strict_lower = ctx.op.Less(cols, rows)
    lower = ctx.op.Where(strict_lower, lu, ctx.const(0.0, ctx.dtype(lu)))
    lower = ctx.op.Add(lower, ctx.cast(ctx.op.Equal(rows, cols), ctx.dtype(lu)))
    lower = ctx.op.Slice(lower, ctx.const([0], i64), k1, ctx.const([rank - 1], i64))
    upper = ctx.op.Where(strict_lower, ctx.const(0.0, ctx.dtype(lu)), lu)
    upper = ctx.op.Slice(upper, ctx.const([0], i64), k1, ctx.const([rank - 2], i64))
    # P[r, c] = 1 where row c of P^T A is row r of A.
    permutation = ctx.op.Equal(ctx.op.Unsqueeze(order, ctx.const([rank - 2], i64)), rows)
    return ctx.cast(permutation, dtype), ctx.cast(lower, dtype), ctx.cast(upper, dtype)


@translates(aten.linalg_lu.default)
def linalg_lu(ctx, A, *, pivot=True):
    _refuse_no_pivot(pivot)
    lu, _, _, order = _lu(ctx, A, False)
    return _unpack(ctx, lu, A, order, ctx.dtype(A))


def _order_from_pivots(ctx, pivots, lu, rank):
    """Row order of P^T A from getrf's pivots: the swaps applied in sequence."""
    m, _, k, k_static = la.matrix_sizes(ctx, lu, rank)
    ids = la.index_range(ctx, m)
    batch = ctx.op.Shape(pivots, start=0, end=rank - 2)
    order = ctx.op.Expand(ids, ctx.op.Concat(batch, ctx.op.Reshape(m, ctx.const([1], i64)), axis=0))
    swaps = ctx.op.Sub(ctx.cast(pivots, i64), ctx.const(1, i64))  # [..., k]

    def step(c, j, states):
        (rows,) = states
        j_row = c.op.Unsqueeze(j, c.const([0], i64)) if la.is_value(j) else c.const([j], i64)
        j_scalar = j if la.is_value(j) else c.const(j, i64)
        p = c.op.Gather(swaps, j_row, axis=rank - 2)  # [..., 1]
        swap = c.op.Where(
            c.op.Equal(ids, j_scalar), p, c.op.Where(c.op.Equal(ids, p), j_scalar, ids)
        )
        return (c.op.GatherElements(rows, swap, axis=rank - 2),)

    (order,) = la.over_columns(ctx, k_static, k, (order,), (i64,), step, "lu_pivots")
    return order


@translates(aten.lu_unpack.default)
def lu_unpack(ctx, LU_data, LU_pivots, unpack_data=True, unpack_pivots=True):
    rank = ctx.rank(LU_data)
    order = _order_from_pivots(ctx, LU_pivots, LU_data, rank)
    p, lower, upper = _unpack(ctx, LU_data, LU_data, order, ctx.dtype(LU_data))
    empty = ctx.const(torch.zeros(0, dtype=ctx.dtype(LU_data)))
    if not unpack_data:
        lower, upper = empty, empty
    if not unpack_pivots:
        p = empty
    return p, lower, upper


def _rebuilt(ctx, LU, pivots):
    """A = P L U from packed square factors."""
    rank = ctx.rank(LU)
    order = _order_from_pivots(ctx, pivots, LU, rank)
    p, lower, upper = _unpack(ctx, LU, LU, order, R.float_work(ctx.dtype(LU)))
    return ctx.op.MatMul(p, ctx.op.MatMul(lower, upper))


@translates(aten.linalg_lu_solve.default)
def linalg_lu_solve(ctx, LU, pivots, B, *, left=True, adjoint=False):
    matrix = _rebuilt(ctx, LU, pivots)
    if adjoint:
        matrix = ctx.op.Transpose(matrix, perm=la.swap_last(ctx.rank(LU)))
    return la.solve(ctx, LU, B, left, False, vectors=False, matrix=matrix)[0]


@translates(aten.lu_solve.default)
def lu_solve(ctx, self, LU_data, LU_pivots):
    matrix = _rebuilt(ctx, LU_data, LU_pivots)
    return la.solve(ctx, LU_data, self, True, False, vectors=False, matrix=matrix)[0]


# --------------------------------------------------------------------------------------- QR


@translates(aten.linalg_qr.default)
def linalg_qr(ctx, A, mode="reduced"):
    rank = ctx.rank(A)
    dtype = ctx.dtype(A)
    r, reflectors, taus = la.householder(ctx, A)
    _, _, k, k_static = la.matrix_sizes(ctx, A, rank)
    k1 = ctx.op.Reshape(k, ctx.const([1], i64))
    if mode == "r":
        return ctx.const(torch.zeros(0, dtype=dtype)), ctx.cast(
            ctx.op.Slice(r, ctx.const([0], i64), k1, ctx.const([rank - 2], i64)), dtype
        )
    q = la.apply_reflectors(
        ctx, la.eye_like_rows(ctx, r, rank, ctx.dtype(r)), reflectors, taus, rank, k, k_static
    )
    if mode == "reduced":
        q = ctx.op.Slice(q, ctx.const([0], i64), k1, ctx.const([rank - 1], i64))
        r = ctx.op.Slice(r, ctx.const([0], i64), k1, ctx.const([rank - 2], i64))
    elif mode != "complete":
        raise ValueError(f"linalg.qr mode must be 'reduced', 'complete' or 'r', got {mode!r}")
    return ctx.cast(q, dtype), ctx.cast(r, dtype)


@translates(aten.geqrf.default)
def geqrf(ctx, self):
    rank = ctx.rank(self)
    r, reflectors, taus = la.householder(ctx, self)
    m, n, k, _ = la.matrix_sizes(ctx, self, rank)
    # Packed like LAPACK: R on and above the diagonal, the reflectors' tails below it.
    cols = ctx.op.Unsqueeze(la.index_range(ctx, n), ctx.const([0], i64))
    rows = ctx.op.Unsqueeze(la.index_range(ctx, m), ctx.const([1], i64))
    # k = min(m, n) <= n, so padding the k reflector columns to n needs no slicing after.
    padded = ctx.op.Pad(
        reflectors,
        ctx.op.Concat(
            ctx.const([0] * rank, i64),
            ctx.const([0] * (rank - 1), i64),
            ctx.op.Reshape(ctx.op.Sub(n, k), ctx.const([1], i64)),
            axis=0,
        ),
    )
    packed = ctx.op.Where(ctx.op.Greater(rows, cols), padded, r)
    return ctx.cast(packed, ctx.dtype(self)), ctx.cast(taus, ctx.dtype(self))


def _reflectors_from_packed(ctx, packed, rank, work):
    """Unit-head reflectors [..., m, n] from geqrf's packed storage."""
    m, n, _, _ = la.matrix_sizes(ctx, packed, rank)
    rows = ctx.op.Unsqueeze(la.index_range(ctx, m), ctx.const([1], i64))
    cols = ctx.op.Unsqueeze(la.index_range(ctx, n), ctx.const([0], i64))
    x = ctx.cast(packed, work)
    below = ctx.op.Where(ctx.op.Greater(rows, cols), x, ctx.const(0.0, work))
    return ctx.op.Add(below, ctx.cast(ctx.op.Equal(rows, cols), work))


def _q_from_packed(ctx, packed, tau, rank, work):
    """The full (m, m) Q of geqrf's packed reflectors and their ``tau`` (one per reflector)."""
    reflectors = _reflectors_from_packed(ctx, packed, rank, work)
    k_static, k = S.static_dim(ctx, tau, rank - 2), S.dim_0d(ctx, tau, rank - 2)
    eye = la.eye_like_rows(ctx, reflectors, rank, work)
    return la.apply_reflectors(ctx, eye, reflectors, ctx.cast(tau, work), rank, k, k_static)


@translates(aten.linalg_householder_product.default, aten.orgqr.default)
def linalg_householder_product(ctx, input, tau):
    rank = ctx.rank(input)
    q = _q_from_packed(ctx, input, tau, rank, R.float_work(ctx.dtype(input)))
    n1 = ctx.op.Shape(input, start=rank - 1, end=rank)
    q = ctx.op.Slice(q, ctx.const([0], i64), n1, ctx.const([rank - 1], i64))
    return ctx.cast(q, ctx.dtype(input))


@translates(aten.ormqr.default)
def ormqr(ctx, self, input2, input3, left=True, transpose=False):
    """op(Q) @ C (left) or C @ op(Q), Q from geqrf's packed reflectors and taus."""
    rank = ctx.rank(self)
    work = R.float_work(ctx.dtype(self))
    q = _q_from_packed(ctx, self, input2, rank, work)
    if transpose:
        q = ctx.op.Transpose(q, perm=la.swap_last(rank))
    other = ctx.cast(input3, work)
    result = ctx.op.MatMul(q, other) if left else ctx.op.MatMul(other, q)
    return ctx.cast(result, ctx.dtype(input3))
