"""Symmetric eigendecomposition and SVD by Jacobi rotations: eigh, eigvalsh, svd, svdvals, and
what they give: pinv, matrix_rank, cond, and the 2/nuclear matrix norms.

ONNX has no eigen or singular value solver. Jacobi's method needs only matrix products: each
round applies n/2 disjoint plane rotations at once (a round-robin schedule, so n-1 rounds make
a sweep) and an ONNX Loop repeats rounds until the off-diagonal mass is at rounding level.
Everything runs in float64. Singular values come from one-sided Jacobi on A itself (not from
A^T A, which would square the condition number). Eigenvalues come out ascending and singular
values descending, as torch orders them; the signs of eigen/singular vectors are whatever the
rotations give, and LAPACK's are not specified either.
"""

from __future__ import annotations

import torch

from torch_onnx_conformance.exporter.ops import _linalg_common as la
from torch_onnx_conformance.exporter.ops import _numerics as nx
from torch_onnx_conformance.exporter.ops import _reduce as R
from torch_onnx_conformance.exporter.ops import _shape as S
from torch_onnx_conformance.exporter.ops import _subgraph
from torch_onnx_conformance.exporter.ops._registry import translates

aten = torch.ops.aten
i64, f64 = torch.int64, torch.float64

#: Upper bound on Jacobi sweeps; convergence is quadratic, so this is never the limit in
#: practice (the Loop stops as soon as the off-diagonal mass is at rounding level).
_MAX_SWEEPS = 30


def _identity(ctx, n):
    """n x n float64 identity (n a 0-d int64 value)."""
    square = S.constant_of_shape(
        ctx, ctx.op.Concat(*[ctx.op.Reshape(n, ctx.const([1], i64))] * 2, axis=0), 0.0, f64
    )
    eye = ctx.op.EyeLike(square)
    eye.dtype = square.dtype
    return eye


def _jacobi(ctx, state, vectors, n, eye, rank, one_sided):
    """Rotates until ``state`` (two-sided) or its Gram matrix (one-sided) is diagonal.

    ``state`` is [..., n, n] (two-sided: J^T S J) or [..., m, n] (one-sided: S J);
    ``vectors`` [..., n, n] accumulates the rotations. Returns (state, vectors).
    """

    def c0(v):
        return ctx.const(v, i64)

    padded = ctx.op.Add(n, ctx.op.Mod(n, c0(2)))  # an odd n gets a dummy index n
    rounds = ctx.op.Max(ctx.op.Sub(padded, c0(1)), c0(1))
    half = ctx.op.Div(padded, c0(2))
    # Nothing rotates below two columns (and an empty matrix has no pair to gather).
    # (onnxruntime's batched MatMul also fails on an empty batch, which needs no rotation.)
    work_to_do = ctx.op.And(ctx.op.Greater(n, c0(1)), ctx.op.Greater(ctx.op.Size(state), c0(0)))
    trips = ctx.op.Where(work_to_do, ctx.op.Mul(rounds, c0(_MAX_SWEEPS)), c0(0))
    ids = ctx.op.Range(c0(0), n, c0(1))
    slots = ctx.op.Range(c0(1), ctx.op.Max(half, c0(1)), c0(1))  # pair slots after the first
    top = ctx.op.Max(ctx.op.Sub(n, c0(1)), c0(0))
    zero, one = ctx.const(0.0, f64), ctx.const(1.0, f64)
    ra, ca = rank - 2, rank - 1
    transpose = la.swap_last(rank)

    def gram(c, s):
        return c.op.MatMul(c.op.Transpose(s, perm=transpose), s) if one_sided else s

    def entries(c, g, rows, cols):
        """g[..., rows[i], cols[i]] for each pair slot i: [..., h]."""
        picked_rows = c.op.Gather(g, rows, axis=ra)  # [..., h, n]
        index = c.op.Unsqueeze(cols, c.const([1], i64))  # [h, 1]
        index = c.op.Expand(
            index,
            c.op.Concat(c.op.Shape(picked_rows, start=0, end=ra + 1), c.const([1], i64), axis=0),
        )
        return c.op.Squeeze(c.op.GatherElements(picked_rows, index, axis=ca), c.const([ca], i64))

    def body(c, iteration, states):
        s, v = states
        r = c.op.Mod(iteration, rounds)
        last = c.op.Sub(padded, c0(1))
        # Round-robin pairs: (N-1, r) and ((r+i) mod (N-1), (r-i) mod (N-1)), i = 1..N/2-1.
        p = c.op.Concat(
            c.op.Reshape(last, c.const([1], i64)), c.op.Mod(c.op.Add(r, slots), rounds), axis=0
        )
        q = c.op.Concat(
            c.op.Reshape(r, c.const([1], i64)),
            c.op.Mod(c.op.Add(c.op.Sub(r, slots), rounds), rounds),
            axis=0,
        )
        valid = c.op.And(c.op.Less(p, n), c.op.Less(q, n))  # the dummy index never rotates
        p_safe, q_safe = c.op.Min(p, top), c.op.Min(q, top)
        g = gram(c, s)
        a_pp = entries(c, g, p_safe, p_safe)
        a_qq = entries(c, g, q_safe, q_safe)
        a_pq = entries(c, g, p_safe, q_safe)
        # tan of the angle that zeroes a_pq; the smaller root keeps the rotation stable.
        rotate = c.op.And(valid, c.op.Greater(c.op.Abs(a_pq), c.const(1e-300, f64)))
        theta = c.op.Div(
            c.op.Sub(a_qq, a_pp), c.op.Mul(c.const(2.0, f64), c.op.Where(rotate, a_pq, one))
        )
        sign = c.op.Where(c.op.Less(theta, zero), c.const(-1.0, f64), one)
        root = c.op.Sqrt(c.op.Add(one, c.op.Mul(theta, theta)))
        t = c.op.Where(rotate, c.op.Div(sign, c.op.Add(c.op.Abs(theta), root)), zero)
        cos = c.op.Div(one, c.op.Sqrt(c.op.Add(one, c.op.Mul(t, t))))
        sin = c.op.Mul(t, cos)
        # J = I + E_p^T (c-1) E_p + E_q^T (c-1) E_q + E_p^T s E_q - E_q^T s E_p, E one-hot rows.
        e_p = c.cast(c.op.Equal(c.op.Unsqueeze(p, c.const([1], i64)), ids), f64)  # [h, n]
        e_q = c.cast(c.op.Equal(c.op.Unsqueeze(q, c.const([1], i64)), ids), f64)
        e_p_t, e_q_t = c.op.Transpose(e_p, perm=[1, 0]), c.op.Transpose(e_q, perm=[1, 0])
        cos_m1 = c.op.Unsqueeze(c.op.Sub(cos, one), c.const([ca], i64))  # [..., h, 1]
        sin_col = c.op.Unsqueeze(sin, c.const([ca], i64))
        j = c.op.Add(
            c.op.MatMul(e_p_t, c.op.Mul(cos_m1, e_p)), c.op.MatMul(e_q_t, c.op.Mul(cos_m1, e_q))
        )
        j = c.op.Add(
            j,
            c.op.Sub(
                c.op.MatMul(e_p_t, c.op.Mul(sin_col, e_q)),
                c.op.MatMul(e_q_t, c.op.Mul(sin_col, e_p)),
            ),
        )
        j = c.op.Add(j, eye)
        if one_sided:
            s = c.op.MatMul(s, j)
        else:
            s = c.op.MatMul(c.op.Transpose(j, perm=transpose), c.op.MatMul(s, j))
        return [s, c.op.MatMul(v, j)]

    def keep_going(c, states):
        g = gram(c, states[0])
        total = c.op.ReduceSumSquare(g, keepdims=0)
        diagonal = c.op.ReduceSumSquare(c.op.Mul(g, eye), keepdims=0)
        return c.op.Greater(c.op.Sub(total, diagonal), c.op.Mul(total, c.const(1e-30, f64)))

    return _subgraph.loop(
        ctx, trips, [state, vectors], body, [f64, f64], "jacobi", condition=keep_going
    )


def _diagonal(ctx, m, eye, rank):
    return ctx.op.ReduceSum(ctx.op.Mul(m, eye), ctx.const([rank - 1], i64), keepdims=0)


def _columns_by(ctx, m, order, rank):
    """Columns ``order`` [..., k] of [..., r, n], in that order: [..., r, k]."""
    index = ctx.op.Unsqueeze(order, ctx.const([rank - 2], i64))  # [..., 1, k]
    shape = ctx.op.Concat(
        ctx.op.Shape(m, start=0, end=rank - 1),
        ctx.op.Shape(order, start=rank - 2, end=rank - 1),
        axis=0,
    )
    return ctx.op.GatherElements(m, ctx.op.Expand(index, shape), axis=rank - 1)


# ------------------------------------------------------------------------------------ eigh
def eigh(ctx, A, uplo="L"):
    """Eigenvalues (ascending) and eigenvectors (columns), float64."""
    rank = ctx.rank(A)
    a = ctx.cast(A, f64)
    n = S.dim_0d(ctx, A, rank - 1)
    eye = _identity(ctx, n)
    # Only the named triangle is read, as LAPACK does.
    triangle = ctx.op.Trilu(a, upper=int(uplo.upper() == "U"))
    symmetric = ctx.op.Sub(
        ctx.op.Add(triangle, ctx.op.Transpose(triangle, perm=la.swap_last(rank))),
        ctx.op.Mul(a, eye),
    )
    start = ctx.op.Expand(eye, ctx.op.Shape(a))
    diagonalised, vectors = _jacobi(ctx, symmetric, start, n, eye, rank, one_sided=False)
    values = _diagonal(ctx, diagonalised, eye, rank)
    values, order = nx.topk(ctx, values, n, rank - 2, largest=False)
    return values, _columns_by(ctx, vectors, order, rank)


@translates(aten._linalg_eigh.default)
def _linalg_eigh(ctx, A, UPLO="L", compute_v=True):
    values, vectors = eigh(ctx, A, UPLO)
    dtype = ctx.dtype(A)
    if not compute_v:
        return ctx.cast(values, dtype), ctx.const(torch.zeros(0, dtype=dtype))
    return ctx.cast(values, dtype), ctx.cast(vectors, dtype)


@translates(aten.linalg_eigh.default)
def linalg_eigh(ctx, self, UPLO="L"):
    values, vectors = eigh(ctx, self, UPLO)
    return ctx.cast(values, ctx.dtype(self)), ctx.cast(vectors, ctx.dtype(self))


@translates(aten.linalg_eigvalsh.default)
def linalg_eigvalsh(ctx, self, UPLO="L"):
    return ctx.cast(eigh(ctx, self, UPLO)[0], ctx.dtype(self))


# ------------------------------------------------------------------------------------- svd
def svd(ctx, A, compute_uv=True):
    """(U [..., m, k], S [..., k] descending, V [..., n, k]) in float64, k = min(m, n)."""
    rank = ctx.rank(A)
    shape = ctx.shape(A)
    m, n = shape[-2], shape[-1]
    # One-sided Jacobi orthogonalises columns; on a wide matrix the surplus columns go to zero
    # and sort last. A statically wide matrix is transposed instead (fewer columns to rotate).
    wide = isinstance(m, int) and isinstance(n, int) and m < n
    a = ctx.cast(A, f64)
    if wide:
        a = ctx.op.Transpose(a, perm=la.swap_last(rank))
        columns = S.dim_0d(ctx, A, rank - 2)
    else:
        columns = S.dim_0d(ctx, A, rank - 1)
    eye = _identity(ctx, columns)
    start = ctx.op.Expand(
        eye, ctx.op.Concat(ctx.op.Shape(a, start=0, end=rank - 2), ctx.const([1, 1], i64), axis=0)
    )
    rotated, vectors = _jacobi(ctx, a, start, columns, eye, rank, one_sided=True)
    sigma = ctx.op.Sqrt(R.reduce(ctx, "ReduceSumSquare", rotated, [rank - 2], False))
    k = ctx.op.Min(S.dim_0d(ctx, A, rank - 2), S.dim_0d(ctx, A, rank - 1))
    sigma, order = nx.topk(ctx, sigma, k, rank - 2, largest=True)
    if not compute_uv:
        return None, sigma, None
    rotated = _columns_by(ctx, rotated, order, rank)
    vectors = _columns_by(ctx, vectors, order, rank)
    safe = ctx.op.Where(ctx.op.Greater(sigma, ctx.const(0.0, f64)), sigma, ctx.const(1.0, f64))
    left = ctx.op.Div(rotated, ctx.op.Unsqueeze(safe, ctx.const([rank - 2], i64)))
    if wide:
        left, vectors = vectors, left
    return left, sigma, vectors


def _empty_full_svd(ctx, A):
    """Full SVD of a matrix with no rows or no columns: identities and no singular values."""
    rank = ctx.rank(A)
    dtype = ctx.dtype(A)
    batch = ctx.op.Shape(A, start=0, end=rank - 2)

    def eye(axis):
        n = ctx.op.Squeeze(ctx.op.Shape(A, start=axis, end=axis + 1), ctx.const([0], i64))
        square = _identity(ctx, n)
        n1 = ctx.op.Reshape(n, ctx.const([1], i64))
        return ctx.cast(ctx.op.Expand(square, ctx.op.Concat(batch, n1, n1, axis=0)), dtype)

    sigma = S.constant_of_shape(ctx, ctx.op.Concat(batch, ctx.const([0], i64), axis=0), 0.0, dtype)
    return eye(rank - 2), sigma, eye(rank - 1)


def _refuse_full(ctx, A, full_matrices):
    shape = ctx.shape(A)
    if full_matrices and not (isinstance(shape[-1], int) and shape[-1] == shape[-2]):
        raise NotImplementedError(
            "svd with full_matrices=True of a non-square matrix needs an orthonormal completion "
            "that is not exported; use full_matrices=False (the reduced SVD)"
        )


@translates(aten._linalg_svd.default)
def _linalg_svd(ctx, A, full_matrices=False, compute_uv=True, *, driver=None):
    dtype = ctx.dtype(A)
    if not compute_uv:
        _, sigma, _ = svd(ctx, A, False)
        empty = ctx.const(torch.zeros(0, dtype=dtype))
        return empty, ctx.cast(sigma, dtype), empty
    shape = ctx.shape(A)
    if full_matrices and any(isinstance(d, int) and d == 0 for d in shape[-2:]):
        return _empty_full_svd(ctx, A)
    _refuse_full(ctx, A, full_matrices)
    u, sigma, v = svd(ctx, A)
    vh = ctx.op.Transpose(v, perm=la.swap_last(ctx.rank(A)))
    return ctx.cast(u, dtype), ctx.cast(sigma, dtype), ctx.cast(vh, dtype)


@translates(aten.linalg_svd.default)
def linalg_svd(ctx, A, full_matrices=True, *, driver=None):
    return _linalg_svd(ctx, A, full_matrices, True)


@translates(aten.svd.default)
def svd_legacy(ctx, self, some=True, compute_uv=True):
    dtype = ctx.dtype(self)
    shape = ctx.shape(self)
    if not some and any(isinstance(d, int) and d == 0 for d in shape[-2:]):
        u, sigma, v = _empty_full_svd(ctx, self)  # the identity is its own transpose
        if not compute_uv:
            u, v = ctx.op.Mul(u, ctx.scalar_like(0, u)), ctx.op.Mul(v, ctx.scalar_like(0, v))
        return u, sigma, v
    _refuse_full(ctx, self, not some)
    u, sigma, v = svd(ctx, self)
    if not compute_uv:
        # torch.svd still returns U and V, zero-filled.
        u, v = ctx.op.Mul(u, ctx.const(0.0, f64)), ctx.op.Mul(v, ctx.const(0.0, f64))
    return ctx.cast(u, dtype), ctx.cast(sigma, dtype), ctx.cast(v, dtype)


@translates(aten.linalg_svdvals.default)
def linalg_svdvals(ctx, A, *, driver=None):
    return ctx.cast(svd(ctx, A, False)[1], ctx.dtype(A))


def singular_values(ctx, A):
    """Singular values (descending, float64) for the matrix norms in reduction.py."""
    return svd(ctx, A, False)[1]


# ------------------------------------------------------------------------ pinv and rank


def _spectrum(ctx, A, hermitian):
    """(|values| [..., k], left vectors [..., m, k], right vectors [..., n, k], values)."""
    if hermitian:
        values, vectors = eigh(ctx, A)
        return ctx.op.Abs(values), vectors, vectors, values
    u, sigma, v = svd(ctx, A)
    return sigma, u, v, sigma


def _pinv(ctx, A, atol, rtol, hermitian):
    rank = ctx.rank(A)
    magnitudes, left, right, values = _spectrum(ctx, A, hermitian)
    largest = R.reduce(ctx, "ReduceMax", magnitudes, [rank - 2], True)
    threshold = la.tolerance(ctx, A, atol, rtol, largest)
    keep = ctx.op.Greater(magnitudes, threshold)
    safe = ctx.op.Where(keep, values, ctx.const(1.0, f64))
    inverse = ctx.op.Where(keep, ctx.op.Div(ctx.const(1.0, f64), safe), ctx.const(0.0, f64))
    scaled = ctx.op.Mul(right, ctx.op.Unsqueeze(inverse, ctx.const([rank - 2], i64)))
    result = ctx.op.MatMul(scaled, ctx.op.Transpose(left, perm=la.swap_last(rank)))
    return ctx.cast(result, ctx.out_dtype)


@translates(aten.linalg_pinv.atol_rtol_float, aten.linalg_pinv.atol_rtol_tensor)
def linalg_pinv(ctx, self, *, atol=None, rtol=None, hermitian=False):
    return _pinv(ctx, self, atol, rtol, hermitian)


@translates(aten.linalg_pinv.default, aten.linalg_pinv.rcond_tensor)
def linalg_pinv_rcond(ctx, self, rcond, hermitian=False):
    return _pinv(ctx, self, None, rcond, hermitian)


def _matrix_rank(ctx, A, atol, rtol, hermitian):
    rank = ctx.rank(A)
    if hermitian:
        magnitudes = ctx.op.Abs(eigh(ctx, A)[0])
    else:
        magnitudes = svd(ctx, A, False)[1]
    largest = R.reduce(ctx, "ReduceMax", magnitudes, [rank - 2], True)
    threshold = la.tolerance(ctx, A, atol, rtol, largest)
    above = ctx.cast(ctx.op.Greater(magnitudes, threshold), i64)
    return ctx.op.ReduceSum(above, ctx.const([rank - 2], i64), keepdims=0)


@translates(aten.linalg_matrix_rank.atol_rtol_float, aten.linalg_matrix_rank.atol_rtol_tensor)
def linalg_matrix_rank(ctx, input, *, atol=None, rtol=None, hermitian=False):
    return _matrix_rank(ctx, input, atol, rtol, hermitian)


@translates(aten.linalg_matrix_rank.default, aten.linalg_matrix_rank.tol_tensor)
def linalg_matrix_rank_tol(ctx, input, tol, hermitian=False):
    return _matrix_rank(ctx, input, tol, 0.0, hermitian)
