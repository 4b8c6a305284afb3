"""Linear algebra: det/slogdet/logdet, inverse, solve, cross, trace, vecdot, cdist, pdist, dist.

ONNX has no matrix inverse or factorisation in its default domain. Determinants, inverses and
solves here are Gauss-Jordan elimination with partial pivoting (the pivot is the first largest
magnitude in its column, as LAPACK's getrf picks it), batched over leading dims. Small static
matrices unroll the elimination into straight-line ops; larger or symbolic ones run it in an
ONNX Loop over the columns.
"""

from __future__ import annotations

import math

import onnx_ir as ir
import torch

from torch_onnx_conformance.exporter.ops import _linalg_common as la
from torch_onnx_conformance.exporter.ops import _numerics as nx
from torch_onnx_conformance.exporter.ops import _reduce as R
from torch_onnx_conformance.exporter.ops import _shape as S
from torch_onnx_conformance.exporter.ops import _subgraph
from torch_onnx_conformance.exporter.ops._registry import translates
from torch_onnx_conformance.exporter.ops._shape import dim_value
from torch_onnx_conformance.exporter.ops.reduction import vector_norm

aten = torch.ops.aten
i64 = torch.int64


# --------------------------------------------------------------------------------- guards
def _refuse_unused_factorisation(ctx, op: str, first_unsupported: int) -> None:
    used = ctx.used_outputs()
    if any(i >= first_unsupported for i in used):
        raise NotImplementedError(
            f"{op}: only the first {first_unsupported} outputs can be exported (the LU factors "
            f"and pivots have no ONNX equivalent); use torch.linalg.det/slogdet/solve/inv"
        )


def _identity_like(ctx, a, work):
    """Identity matrices shaped like ``a`` ([..., n, n])."""
    rank = ctx.rank(a)
    square = S.constant_of_shape(ctx, ctx.op.Shape(a, start=rank - 2), 0.0, work)
    eye = ctx.op.EyeLike(square)
    eye.dtype = square.dtype
    return ctx.op.Expand(eye, ctx.op.Shape(a))


# ----------------------------------------------------------------------------- determinants
def _det(ctx, a):
    _, _, det, _, _ = la.gauss_jordan(ctx, a, None, "det", False)
    return ctx.cast(det, ctx.dtype(a))


@translates(aten.linalg_det.default, aten.det.default)
def linalg_det(ctx, A):
    return _det(ctx, A)


@translates(aten._linalg_det.default)
def _linalg_det(ctx, A):
    _refuse_unused_factorisation(ctx, "_linalg_det", 1)
    return _det(ctx, A), None, None


def _slogdet(ctx, a):
    _, _, log_abs, sign, _ = la.gauss_jordan(ctx, a, None, "logdet", False)
    dtype = ctx.dtype(a)
    return ctx.cast(sign, dtype), ctx.cast(log_abs, dtype)


@translates(aten.linalg_slogdet.default, aten.slogdet.default)
def slogdet(ctx, A):
    return _slogdet(ctx, A)


@translates(aten._linalg_slogdet.default)
def _linalg_slogdet(ctx, A):
    _refuse_unused_factorisation(ctx, "_linalg_slogdet", 2)
    sign, log_abs = _slogdet(ctx, A)
    return sign, log_abs, None, None


@translates(aten.logdet.default)
def logdet(ctx, self):
    sign, log_abs = _slogdet(ctx, self)
    dtype = ctx.dtype(self)
    # log of a negative determinant is NaN; of zero, -inf (log_abs already is).
    negative = ctx.op.Less(sign, ctx.const(0.0, dtype))
    return ctx.op.Where(negative, nx.nan_of(ctx, dtype), log_abs)


# -------------------------------------------------------------------------------- inverse
def _inverse(ctx, a, with_info):
    work = R.float_work(ctx.dtype(a))
    rhs = _identity_like(ctx, ctx.cast(a, work), work)
    _, inverse, _, _, info = la.gauss_jordan(ctx, a, rhs, "none", with_info)
    return ctx.cast(inverse, ctx.dtype(a)), info


@translates(aten.linalg_inv.default, aten.inverse.default)
def linalg_inv(ctx, A):
    return _inverse(ctx, A, False)[0]


@translates(aten.linalg_inv_ex.default)
def linalg_inv_ex(ctx, A, *, check_errors=False):
    return _inverse(ctx, A, True)


# ---------------------------------------------------------------------------------- solve


@translates(aten.linalg_solve.default)
def linalg_solve(ctx, A, B, *, left=True):
    return la.solve(ctx, A, B, left, False)[0]


@translates(aten.linalg_solve_ex.default)
def linalg_solve_ex(ctx, A, B, *, left=True, check_errors=False):
    return la.solve(ctx, A, B, left, True)


@translates(aten._linalg_solve_ex.default)
def _linalg_solve_ex(ctx, A, B, *, left=True, check_errors=False):
    _refuse_unused_factorisation(ctx, "_linalg_solve_ex", 1)
    used = ctx.used_outputs()
    result, info = la.solve(ctx, A, B, left, 3 in used)
    return result, None, None, info


# --------------------------------------------------------------------- triangular systems
def _triangle(ctx, A, upper, unitriangular):
    """Only the triangle a triangular solver reads (with a unit diagonal if asked)."""
    work = R.float_work(ctx.dtype(A))
    a = ctx.op.Trilu(ctx.cast(A, work), upper=int(bool(upper)))
    if unitriangular:
        eye = _identity_like(ctx, A, work)
        a = ctx.op.Add(ctx.op.Sub(a, ctx.op.Mul(a, eye)), eye)
    return a


@translates(aten.linalg_solve_triangular.default)
def linalg_solve_triangular(ctx, self, B, *, upper, left=True, unitriangular=False):
    matrix = _triangle(ctx, self, upper, unitriangular)
    return la.solve(ctx, self, B, left, False, vectors=False, matrix=matrix)[0]


@translates(aten.triangular_solve.default)
def triangular_solve(ctx, self, A, upper=True, transpose=False, unitriangular=False):
    matrix = _triangle(ctx, A, upper, unitriangular)
    if transpose:
        rank = ctx.rank(A)
        matrix = ctx.op.Transpose(matrix, perm=[*range(rank - 2), rank - 1, rank - 2])
    solution = la.solve(ctx, A, self, True, False, vectors=False, matrix=matrix)[0]
    return solution, ctx.op.Identity(A)


# ------------------------------------------------------------------------------- Cholesky
def _cholesky(ctx, A, upper, with_info):
    """Cholesky-Banachiewicz, one column per step: L[:, j] = (A[:, j] - L L[j, :]^T) / L[j, j]."""
    rank = ctx.rank(A)
    work = R.float_work(ctx.dtype(A))
    a = ctx.cast(A, work)
    ra, ca = rank - 2, rank - 1
    n_static, n = S.static_dim(ctx, A, ca), S.dim_0d(ctx, A, ca)
    ids = ctx.op.Range(ctx.const(0, i64), n, ctx.const(1, i64))
    row_ids = ctx.op.Unsqueeze(ids, ctx.const([1], i64))  # [n, 1]
    col_ids = ctx.op.Unsqueeze(ids, ctx.const([0], i64))  # [1, n]
    lower = S.constant_of_shape(ctx, ctx.op.Shape(a), 0.0, work)
    info = S.constant_of_shape(ctx, ctx.op.Shape(a, start=0, end=rank - 2), 0, torch.int32)
    info = info if with_info else None

    def step(c, k, states):
        low, inf = states
        k_row = c.op.Unsqueeze(k, c.const([0], i64)) if la.is_value(k) else c.const([k], i64)
        k_scalar = k if la.is_value(k) else c.const(k, i64)
        row_k = c.op.Gather(low, k_row, axis=ra)  # [..., 1, n]; entries from column k on are 0
        column = c.op.Sub(
            c.op.Gather(a, k_row, axis=ca),
            c.op.MatMul(low, c.op.Transpose(row_k, perm=la.swap_last(rank))),
        )
        pivot = c.op.Gather(column, k_row, axis=ra)  # [..., 1, 1]
        if inf is not None:
            failed = c.op.Squeeze(
                c.op.Not(c.op.Greater(pivot, c.const(0.0, work))), c.const([ra, ca], i64)
            )
            first = c.op.And(failed, c.op.Equal(inf, c.const(0, torch.int32)))
            k_info = c.op.Add(c.cast(k_scalar, torch.int32), c.const(1, torch.int32))
            inf = c.op.Where(first, k_info, inf)
        column = c.op.Div(column, c.op.Sqrt(pivot))
        column = c.op.Where(c.op.Less(row_ids, k_scalar), c.const(0.0, work), column)
        low = c.op.Where(c.op.Equal(col_ids, k_scalar), column, low)
        return low, inf

    lower, info = la.over_columns(
        ctx, n_static, n, (lower, info), (work, torch.int32), step, "cholesky"
    )
    if upper:
        lower = ctx.op.Transpose(lower, perm=la.swap_last(rank))
    return ctx.cast(lower, ctx.dtype(A)), info


@translates(aten.linalg_cholesky.default)
def linalg_cholesky(ctx, self, *, upper=False):
    return _cholesky(ctx, self, upper, False)[0]


@translates(aten.linalg_cholesky_ex.default)
def linalg_cholesky_ex(ctx, self, *, upper=False, check_errors=False):
    return _cholesky(ctx, self, upper, True)


def _from_factor(ctx, factor, upper):
    """A = L L^T (or U^T U) from its Cholesky factor. Like LAPACK, only the factor's own
    triangle is read: whatever the other triangle holds is ignored."""
    rank = ctx.rank(factor)
    factor = ctx.op.Trilu(factor, upper=1 if upper else 0)
    transposed = ctx.op.Transpose(factor, perm=la.swap_last(rank))
    return ctx.op.MatMul(transposed, factor) if upper else ctx.op.MatMul(factor, transposed)


@translates(aten.cholesky_solve.default)
def cholesky_solve(ctx, self, input2, upper=False):
    matrix = _from_factor(ctx, input2, upper)
    return la.solve(ctx, input2, self, True, False, vectors=False, matrix=matrix)[0]


@translates(aten.cholesky_inverse.default)
def cholesky_inverse(ctx, self, upper=False):
    matrix = _from_factor(ctx, ctx.cast(self, R.float_work(ctx.dtype(self))), upper)
    rhs = _identity_like(ctx, self, R.float_work(ctx.dtype(self)))
    rank = ctx.rank(self)
    _, inverse, _, _, _ = la.gauss_jordan(
        ctx, matrix, rhs, "none", False, rank, S.static_dim(ctx, self, rank - 1)
    )
    return ctx.cast(inverse, ctx.out_dtype)


# --------------------------------------------------------------------- products and sums
@translates(aten.linalg_cross.default)
def linalg_cross(ctx, self, other, *, dim=-1):
    a, b = ctx.promote(self, other, dtype=_arith_dtype(ctx.out_dtype))
    rank = max(ctx.rank(self), ctx.rank(other))
    ax = S.axis(dim, rank)
    a_rank, b_rank = ctx.rank(self), ctx.rank(other)
    a_ax = ax - (rank - a_rank)
    b_ax = ax - (rank - b_rank)
    yzx, zxy = ctx.const([1, 2, 0], i64), ctx.const([2, 0, 1], i64)
    first = ctx.op.Mul(ctx.op.Gather(a, yzx, axis=a_ax), ctx.op.Gather(b, zxy, axis=b_ax))
    second = ctx.op.Mul(ctx.op.Gather(a, zxy, axis=a_ax), ctx.op.Gather(b, yzx, axis=b_ax))
    return ctx.cast(ctx.op.Sub(first, second), ctx.out_dtype)


def _arith_dtype(dtype):
    """A dtype onnxruntime's Mul/Sub have kernels for (bfloat16 has none)."""
    return torch.float32 if dtype is torch.bfloat16 else dtype


@translates(aten.cross.default)
def cross(ctx, self, other, dim=None):
    if dim is None:
        # Deprecated default: the first dim of size 3 (a symbolic dim by its example size).
        sizes = [d if isinstance(d, int) else d.node.hint for d in ctx.shape(self)]
        dim = sizes.index(3)
    return linalg_cross(ctx, self, other, dim=dim)


@translates(aten.trace.default)
def trace(ctx, self):
    out = ctx.out_dtype
    work = R.reduce_dtype("ReduceSum", out)
    x = ctx.cast(self, work)
    eye = ctx.op.EyeLike(x)
    eye.dtype = x.dtype
    diagonal = ctx.op.Mul(x, eye)
    return ctx.cast(R.reduce(ctx, "ReduceSum", diagonal, None, False), out)


@translates(aten.linalg_vecdot.default)
def linalg_vecdot(ctx, x, y, *, dim=-1):
    a, b = ctx.promote(x, y, dtype=ctx.out_dtype)
    rank = max(ctx.rank(x), ctx.rank(y))
    work = R.reduce_dtype("ReduceSum", ctx.out_dtype)
    product = ctx.op.Mul(ctx.cast(a, work), ctx.cast(b, work))
    return ctx.cast(R.reduce(ctx, "ReduceSum", product, [S.axis(dim, rank)], False), ctx.out_dtype)


@translates(aten.dist.default)
def dist(ctx, self, other, p=2):
    a, b = ctx.promote(self, other, dtype=R.float_work(ctx.out_dtype))
    return vector_norm(ctx, ctx.op.Sub(a, b), p, None, False, ctx.out_dtype)


# -------------------------------------------------------------------------- cdist / pdist
def _pairwise_p(ctx, diff, p, axis, work):
    """p-norm over ``axis`` of pairwise differences."""
    if p == 0:
        return R.reduce(
            ctx,
            "ReduceSum",
            ctx.cast(ctx.op.Not(ctx.op.Equal(diff, ctx.const(0.0, work))), work),
            [axis],
            False,
        )
    if p == 1:
        return R.reduce(ctx, "ReduceL1", diff, [axis], False)
    if p == 2:
        return R.reduce(ctx, "ReduceL2", diff, [axis], False)
    if p == math.inf:
        return R.reduce(ctx, "ReduceMax", ctx.op.Abs(diff), [axis], False)
    powered = ctx.op.Pow(ctx.op.Abs(diff), ctx.const(float(p), work))
    return ctx.op.Pow(R.reduce(ctx, "ReduceSum", powered, [axis], False), ctx.const(1.0 / p, work))


def _uses_matmul(compute_mode, sizes) -> bool:
    """torch's rule for p=2: the matmul expansion unless told otherwise or both sides are small."""
    if compute_mode == 1:
        return True
    if compute_mode == 2:
        return False
    return any(not isinstance(s, int) or s > 25 for s in sizes)


@translates(aten._cdist_forward.default)
def cdist_forward(ctx, x1, x2, p, compute_mode=None):
    out = ctx.out_dtype
    work = R.float_work(out)
    a, b = ctx.cast(x1, work), ctx.cast(x2, work)
    rank1, rank2 = ctx.rank(x1), ctx.rank(x2)
    shape1, shape2 = ctx.shape(x1), ctx.shape(x2)
    # Batch dims broadcast numpy-style, like MatMul and elementwise ops align them.
    if p == 2 and _uses_matmul(compute_mode, [shape1[-2], shape2[-2]]):
        # |a - b|^2 = |a|^2 + |b|^2 - 2 a.b, clamped at 0 against rounding.
        a_sq = R.reduce(ctx, "ReduceSumSquare", a, [rank1 - 1], True)  # [..., P, 1]
        b_sq = R.reduce(ctx, "ReduceSumSquare", b, [rank2 - 1], True)  # [..., R, 1]
        perm2 = [*range(rank2 - 2), rank2 - 1, rank2 - 2]
        cross_term = ctx.op.MatMul(a, ctx.op.Transpose(b, perm=perm2))
        squared = ctx.op.Add(
            ctx.op.Sub(a_sq, ctx.op.Mul(cross_term, ctx.const(2.0, work))),
            ctx.op.Transpose(b_sq, perm=perm2),
        )
        distance = ctx.op.Sqrt(ctx.op.Max(squared, ctx.const(0.0, work)))
        return ctx.cast(distance, out)
    diff = ctx.op.Sub(
        ctx.op.Unsqueeze(a, ctx.const([rank1 - 1], i64)),
        ctx.op.Unsqueeze(b, ctx.const([rank2 - 2], i64)),
    )  # [..., P, R, M]
    return ctx.cast(_pairwise_p(ctx, diff, p, max(rank1, rank2), work), out)


@translates(aten.cdist.default)
def cdist(ctx, x1, x2, p=2.0, compute_mode=None):
    mode = {
        None: None,
        "use_mm_for_euclid_dist_if_necessary": None,
        "use_mm_for_euclid_dist": 1,
        "donot_use_mm_for_euclid_dist": 2,
    }.get(compute_mode)
    return cdist_forward(ctx, x1, x2, p, mode)


@translates(aten._pdist_forward.default, aten.pdist.default)
def pdist_forward(ctx, self, p=2.0):
    out = ctx.out_dtype
    work = R.float_work(out)
    x = ctx.cast(self, work)
    diff = ctx.op.Sub(
        ctx.op.Unsqueeze(x, ctx.const([1], i64)), ctx.op.Unsqueeze(x, ctx.const([0], i64))
    )  # [N, N, M]
    full = _pairwise_p(ctx, diff, p, 2, work)  # [N, N]
    n = ctx.op.Squeeze(dim_value(ctx, self, 0), ctx.const([0], i64))
    ids = ctx.op.Range(ctx.const(0, i64), n, ctx.const(1, i64))
    upper = ctx.op.Less(
        ctx.op.Unsqueeze(ids, ctx.const([1], i64)), ctx.op.Unsqueeze(ids, ctx.const([0], i64))
    )
    flat = ctx.op.Reshape(full, ctx.const([-1], i64))
    picked = ctx.op.Compress(flat, ctx.op.Reshape(upper, ctx.const([-1], i64)), axis=0)
    return ctx.cast(picked, out)


# ------------------------------------------------------------------------ matrix exponential
#: Taylor degree for exp(B) with ||B||_1 <= 1: the truncation error is below 1/19! ~ 8e-18.
_EXP_TAYLOR_DEGREE = 18


@translates(aten.linalg_matrix_exp.default, aten.matrix_exp.default)
def linalg_matrix_exp(ctx, self):
    """Scaling and squaring: exp(A) = exp(A / 2^s)^(2^s) with ||A / 2^s||_1 <= 1, in float64."""
    rank = ctx.rank(self)
    f64 = torch.float64
    a = ctx.cast(self, f64)
    eye = _identity_like(ctx, self, f64)
    # One s for the whole batch: the largest column-sum norm decides it.
    norm = ctx.op.ReduceMax(
        ctx.op.ReduceSum(ctx.op.Abs(a), ctx.const([rank - 2], i64), keepdims=0), keepdims=0
    )
    log2 = ctx.op.Div(
        ctx.op.Log(ctx.op.Max(norm, ctx.const(1.0, f64))), ctx.const(math.log(2.0), f64)
    )
    squarings = ctx.op.Cast(ctx.op.Ceil(log2), to=ir.DataType.INT64)
    scale = ctx.op.Pow(ctx.const(2.0, f64), ctx.cast(squarings, f64))
    b = ctx.op.Div(a, scale)
    # Horner: I + B (I + B/2 (I + B/3 (...))).
    series = eye
    for degree in range(_EXP_TAYLOR_DEGREE, 0, -1):
        series = ctx.op.Add(
            eye, ctx.op.Div(ctx.op.MatMul(b, series), ctx.const(float(degree), f64))
        )

    def square(c, _, states):
        return [c.op.MatMul(states[0], states[0])]

    (result,) = _subgraph.loop(ctx, squarings, [series], square, [f64], "matrix_exp")
    return ctx.cast(result, ctx.out_dtype)
