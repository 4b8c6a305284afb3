"""More matrix functions: polar decomposition and symmetric square root (from the Jacobi SVD
and eigh of linalg_spectral.py), Bunch-Kaufman LDL^T (ldl_factor, ldl_solve), and the Meta
kernel that lets torch.export trace geqrf with symbolic shapes.

LDL follows LAPACK's unblocked sytf2/sytrs with uplo='L' step for step (torch calls sytrf,
which runs sytf2 whenever the matrix is narrower than the block size): the same pivot tests
in the same order, the same packed layout (L's multipliers below the diagonal, D's 1x1 and
2x2 blocks on and just below it, only the trailing matrix interchanged) and the same 1-based
pivots, negative for both rows of a 2x2 block. The step width (1 or 2) differs between batch
elements, so each batch element carries its own column cursor and every step is masked.
"""

from __future__ import annotations

import numpy as np
import torch

from torch_onnx_conformance.exporter.ops import _linalg_common as la
from torch_onnx_conformance.exporter.ops import _reduce as R
from torch_onnx_conformance.exporter.ops import _shape as S
from torch_onnx_conformance.exporter.ops._fake_kernels import fake_kernels
from torch_onnx_conformance.exporter.ops._registry import translates
from torch_onnx_conformance.exporter.ops.linalg_spectral import eigh, svd

aten = torch.ops.aten
i64, i32, f64 = torch.int64, torch.int32, torch.float64


# ------------------------------------------------------------------------- geqrf meta kernel
def _geqrf_meta(self: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    torch._check(
        self.dim() >= 2,
        lambda: f"geqrf: input must have at least 2 dimensions, got shape {tuple(self.shape)}",
    )
    torch._check(
        self.dtype.is_floating_point or self.dtype.is_complex,
        lambda: f"geqrf: input must be a floating point or complex tensor, got {self.dtype}",
    )
    *batch, m, n = self.shape
    # LAPACK writes the packed factors column-major, and eager geqrf returns them that way.
    packed = self.new_empty((*batch, n, m)).mT
    tau = self.new_empty((*batch, torch.sym_min(m, n)))
    return packed, tau


@fake_kernels
def _register_geqrf_meta() -> torch.library.Library | None:
    """Without a Meta kernel, fake tensors with symbolic sizes cannot run geqrf, so
    torch.export fails to capture it with dynamic shapes. A torch that has one keeps it."""
    if torch._C._dispatch_has_kernel_for_dispatch_key("aten::geqrf", "Meta"):
        return None
    library = torch.library.Library("aten", "IMPL")
    library.impl("geqrf", _geqrf_meta, "Meta")
    return library


# ------------------------------------------------------------------------------------ polar
# Named by string: torch 2.11 has no aten.linalg_polar (nor linalg_matrix_sqrth), and a
# string target is matched at lookup, so the op library still imports there.
@translates("aten::linalg_polar.default")
def linalg_polar(ctx, A):
    """A = U H with U = W V^T and H = V diag(S) V^T from the thin SVD A = W diag(S) V^T."""
    # A wide A (m < n) never gets here: torch's own shape check refuses it during capture.
    rank = ctx.rank(A)
    dtype = ctx.dtype(A)
    left, sigma, right = svd(ctx, A)
    right_t = ctx.op.Transpose(right, perm=la.swap_last(rank))
    unitary = ctx.op.MatMul(left, right_t)
    scaled = ctx.op.Mul(right, ctx.op.Unsqueeze(sigma, ctx.const([rank - 2], i64)))
    positive = ctx.op.MatMul(scaled, right_t)
    return ctx.cast(unitary, dtype), ctx.cast(positive, dtype)


# ------------------------------------------------------------------------------ matrix_sqrth
@translates("aten::linalg_matrix_sqrth.default")
def linalg_matrix_sqrth(ctx, self):
    """V diag(sqrt(max(w, 0))) V^T from eigh of the lower triangle, as torch computes it
    (a slightly negative eigenvalue from rounding gives 0, not NaN)."""
    rank = ctx.rank(self)
    values, vectors = eigh(ctx, self, "L")
    roots = ctx.op.Sqrt(ctx.op.Max(values, ctx.const(0.0, f64)))
    scaled = ctx.op.Mul(vectors, ctx.op.Unsqueeze(roots, ctx.const([rank - 2], i64)))
    result = ctx.op.MatMul(scaled, ctx.op.Transpose(vectors, perm=la.swap_last(rank)))
    return ctx.cast(result, ctx.dtype(self))


# ----------------------------------------------------------------------------------- LDL^T
def _bunch_kaufman_alpha(work):
    """(1 + sqrt(17)) / 8, rounded step by step in the working precision as sytf2 does."""
    numpy_type = np.float32 if work == torch.float32 else np.float64
    return float((numpy_type(1) + np.sqrt(numpy_type(17))) / numpy_type(8))


class _Indexing:
    """Per-batch gathers on [..., n, n] matrices at per-batch indices shaped [..., 1, 1]."""

    def __init__(self, rank):
        self.ra, self.ca = rank - 2, rank - 1
        self.perm = la.swap_last(rank)

    def column(self, c, m, index):
        """m[..., :, index] as [..., n, 1]."""
        shape = c.op.Concat(c.op.Shape(m, start=0, end=self.ca), c.const([1], i64), axis=0)
        return c.op.GatherElements(m, c.op.Expand(index, shape), axis=self.ca)

    def row(self, c, m, index):
        """m[..., index, :] as [..., 1, n]."""
        shape = c.op.Concat(
            c.op.Shape(m, start=0, end=self.ra),
            c.const([1], i64),
            c.op.Shape(m, start=self.ca),
            axis=0,
        )
        return c.op.GatherElements(m, c.op.Expand(index, shape), axis=self.ra)

    def entry_of_column(self, c, column, index):
        return c.op.GatherElements(column, index, axis=self.ra)

    def entry_of_row(self, c, row, index):
        return c.op.GatherElements(row, index, axis=self.ca)

    def transpose(self, c, m):
        return c.op.Transpose(m, perm=self.perm)

    def permute_rows(self, c, m, order):
        """Rows of m taken in ``order`` [..., n, 1]."""
        return c.op.GatherElements(m, c.op.Expand(order, c.op.Shape(m)), axis=self.ra)


def _mirror_lower(c, m, rows, cols, at):
    """The strict upper triangle replaced by the lower one (sytf2 reads only the lower)."""
    return c.op.Where(c.op.Greater(cols, rows), at.transpose(c, m), m)


def _ldl_step(c, state, rows, cols, slots, n, work, at, alpha):
    """One sytf2 step (1x1 or 2x2 pivot) at each batch element's own column ``k``."""
    m, pivots, info, k = state
    ra, ca = at.ra, at.ca
    zero, one = c.const(0.0, work), c.const(1.0, work)
    active = c.op.Less(k, n)  # [..., 1, 1]
    k = c.op.Min(k, c.op.Sub(n, c.const(1, i64)))
    column = at.column(c, m, k)
    absakk = c.op.Abs(at.entry_of_column(c, column, k))
    below = c.op.Greater(rows, k)
    magnitude = c.op.Where(below, c.op.Abs(column), c.const(-1.0, work))
    imax = c.op.ArgMax(magnitude, axis=ra, keepdims=1)  # the first largest, as i*amax
    colmax = c.op.Max(R.reduce(c, "ReduceMax", magnitude, [ra], True), zero)
    zero_column = c.op.Or(c.op.Equal(c.op.Max(absakk, colmax), zero), c.op.IsNaN(absakk))
    # Largest off-diagonal magnitude in row/column imax of the trailing matrix.
    row_imax = at.row(c, m, imax)
    in_row = c.op.And(c.op.GreaterOrEqual(cols, k), c.op.Less(cols, imax))
    in_column = c.op.Greater(rows, imax)
    rowmax = c.op.Max(
        R.reduce(c, "ReduceMax", c.op.Where(in_row, c.op.Abs(row_imax), zero), [ca], True),
        R.reduce(
            c, "ReduceMax", c.op.Where(in_column, c.op.Abs(at.column(c, m, imax)), zero), [ra], True
        ),
    )
    alpha_colmax = c.op.Mul(c.const(alpha, work), colmax)
    safe_rowmax = c.op.Where(c.op.Greater(rowmax, zero), rowmax, one)
    keep_k = c.op.Or(
        c.op.GreaterOrEqual(absakk, alpha_colmax),
        c.op.GreaterOrEqual(absakk, c.op.Mul(alpha_colmax, c.op.Div(colmax, safe_rowmax))),
    )
    keep_k = c.op.Or(zero_column, keep_k)
    imax_diagonal = c.op.Abs(at.entry_of_row(c, row_imax, imax))
    one_by_one = c.op.Or(
        keep_k, c.op.GreaterOrEqual(imax_diagonal, c.op.Mul(c.const(alpha, work), rowmax))
    )
    kp = c.op.Where(keep_k, k, imax)
    kstep = c.op.Where(one_by_one, c.const(1, i64), c.const(2, i64))
    kk = c.op.Add(k, c.op.Sub(kstep, c.const(1, i64)))

    # Interchange rows and columns kk and kp of the trailing matrix only.
    order = c.op.Where(c.op.Equal(rows, kk), kp, c.op.Where(c.op.Equal(rows, kp), kk, rows))
    permuted = at.permute_rows(c, m, order)
    permuted = at.transpose(c, at.permute_rows(c, at.transpose(c, permuted), order))
    trailing = c.op.And(c.op.GreaterOrEqual(rows, k), c.op.GreaterOrEqual(cols, k))
    m = c.op.Where(trailing, permuted, m)

    # 1x1 pivot: A22 += x (-d11 x^T) (syr), then x *= d11.
    column = at.column(c, m, k)
    x = c.op.Where(below, column, zero)
    d11 = c.op.Div(one, c.op.Where(zero_column, one, at.entry_of_column(c, column, k)))
    temp = c.op.Mul(c.op.Neg(d11), at.transpose(c, x))
    single = c.op.Where(c.op.And(below, c.op.Greater(cols, k)), c.op.Add(m, c.op.Mul(x, temp)), m)
    single = c.op.Where(c.op.And(below, c.op.Equal(cols, k)), c.op.Mul(x, d11), single)

    # 2x2 pivot on rows/columns k and k+1, with sytf2's scaled inverse of the block.
    k1 = c.op.Min(c.op.Add(k, c.const(1, i64)), c.op.Sub(n, c.const(1, i64)))
    column1 = at.column(c, m, k1)
    d21 = at.entry_of_column(c, column, k1)
    d21 = c.op.Where(one_by_one, one, d21)
    b11 = c.op.Div(at.entry_of_column(c, column1, k1), d21)
    b22 = c.op.Div(at.entry_of_column(c, column, k), d21)
    t = c.op.Div(one, c.op.Sub(c.op.Mul(b11, b22), one))
    scale = c.op.Div(t, d21)
    rest = c.op.Greater(rows, k1)  # rows k+2 and below
    a = c.op.Where(rest, column, zero)
    b = c.op.Where(rest, column1, zero)
    wk = c.op.Mul(scale, c.op.Sub(c.op.Mul(b11, a), b))
    wkp1 = c.op.Mul(scale, c.op.Sub(c.op.Mul(b22, b), a))
    updated = c.op.Sub(
        c.op.Sub(m, c.op.Mul(a, at.transpose(c, wk))), c.op.Mul(b, at.transpose(c, wkp1))
    )
    double = c.op.Where(c.op.And(rest, c.op.Greater(cols, k1)), updated, m)
    double = c.op.Where(c.op.And(rest, c.op.Equal(cols, k)), wk, double)
    double = c.op.Where(c.op.And(rest, c.op.Equal(cols, k1)), wkp1, double)

    stepped = c.op.Where(one_by_one, single, double)
    stepped = c.op.Where(c.op.Or(zero_column, c.op.Not(active)), m, stepped)
    m = _mirror_lower(c, stepped, rows, cols, at)

    # Pivots: 1-based kp, negated on both rows of a 2x2 block.
    squeeze_last = c.const([ca], i64)
    kp1 = c.cast(c.op.Add(c.op.Squeeze(kp, squeeze_last), c.const(1, i64)), i32)  # [..., 1]
    value = c.op.Where(c.op.Squeeze(one_by_one, squeeze_last), kp1, c.op.Neg(kp1))
    k_flat, k1_flat = c.op.Squeeze(k, squeeze_last), c.op.Squeeze(k1, squeeze_last)
    slot = c.op.Or(
        c.op.Equal(slots, k_flat),
        c.op.And(c.op.Not(c.op.Squeeze(one_by_one, squeeze_last)), c.op.Equal(slots, k1_flat)),
    )
    slot = c.op.And(slot, c.op.Squeeze(active, squeeze_last))
    pivots = c.op.Where(slot, value, pivots)
    if info is not None:
        both = c.const([ra, ca], i64)
        first_zero = c.op.And(
            c.op.Squeeze(c.op.And(active, zero_column), both), c.op.Equal(info, c.const(0, i32))
        )
        info = c.op.Where(
            first_zero, c.cast(c.op.Add(c.op.Squeeze(k, both), c.const(1, i64)), i32), info
        )
    k = c.op.Where(active, c.op.Add(k, kstep), n)
    return m, pivots, info, k


def _ldl_factor(ctx, A, with_info):
    rank = ctx.rank(A)
    dtype = ctx.dtype(A)
    work = R.float_work(dtype)
    at = _Indexing(rank)
    a = ctx.cast(A, work)
    n_static, n = S.static_dim(ctx, A, rank - 1), S.dim_0d(ctx, A, rank - 1)
    ids = ctx.op.Range(ctx.const(0, i64), n, ctx.const(1, i64))
    rows = ctx.op.Unsqueeze(ids, ctx.const([1], i64))  # [n, 1]
    cols = ctx.op.Unsqueeze(ids, ctx.const([0], i64))  # [1, n]
    batch = ctx.op.Shape(a, start=0, end=rank - 2)
    n1 = ctx.op.Reshape(n, ctx.const([1], i64))
    pivots = S.constant_of_shape(ctx, ctx.op.Concat(batch, n1, axis=0), 0, i32)
    info = S.constant_of_shape(ctx, batch, 0, i32) if with_info else None
    cursor = S.constant_of_shape(ctx, ctx.op.Concat(batch, ctx.const([1, 1], i64), axis=0), 0, i64)
    alpha = _bunch_kaufman_alpha(work)

    def step(c, _, states):
        return _ldl_step(c, states, rows, cols, ids, n, work, at, alpha)

    m = _mirror_lower(ctx, a, rows, cols, at)
    # Every step advances a cursor by at least one column, so n steps always suffice.
    m, pivots, info, _ = la.over_columns(
        ctx, n_static, n, (m, pivots, info, cursor), (work, i32, i32, i64), step, "ldl"
    )
    # torch returns LD lower triangular: LAPACK leaves the strict upper part alone, torch zeroes it.
    ld = ctx.cast(ctx.op.Trilu(m, upper=0), dtype)
    return ld, pivots, info


@translates(aten.linalg_ldl_factor_ex.default)
def linalg_ldl_factor_ex(ctx, self, *, hermitian=False, check_errors=False):
    # For real matrices hermitian and symmetric are the same factorisation.
    return _ldl_factor(ctx, self, True)


@translates(aten.linalg_ldl_factor.default)
def linalg_ldl_factor(ctx, self, *, hermitian=False):
    ld, pivots, _ = _ldl_factor(ctx, self, False)
    return ld, pivots


def _block_roles(ctx, pivots, rank_p):
    """(first, second) bool [..., n]: which rows open and close a 2x2 block.

    Negative pivots come in pairs, and a run of them between positive pivots pairs up from
    its start, so a row opens a block when its count within the run is odd.
    """
    negative = ctx.op.Less(pivots, ctx.const(0, i64))
    counts = ctx.op.CumSum(ctx.cast(negative, i64), ctx.const(rank_p - 1, i64))
    n = ctx.op.Shape(pivots, start=rank_p - 1, end=rank_p)
    ids = ctx.op.Range(ctx.const(0, i64), ctx.op.Squeeze(n, ctx.const([0], i64)), ctx.const(1, i64))
    # before[j, i]: row i is a positive pivot at or before row j.
    at_or_before = ctx.op.LessOrEqual(
        ctx.op.Unsqueeze(ids, ctx.const([0], i64)), ctx.op.Unsqueeze(ids, ctx.const([1], i64))
    )
    positive_before = ctx.op.And(
        at_or_before, ctx.op.Unsqueeze(ctx.op.Not(negative), ctx.const([rank_p - 1], i64))
    )
    counts_row = ctx.op.Unsqueeze(counts, ctx.const([rank_p - 1], i64))  # [..., 1, n]
    base = R.reduce(
        ctx,
        "ReduceMax",
        ctx.op.Where(positive_before, counts_row, ctx.const(0, i64)),
        [rank_p],
        False,
    )
    odd = ctx.op.Equal(ctx.op.Mod(ctx.op.Sub(counts, base), ctx.const(2, i64)), ctx.const(1, i64))
    first = ctx.op.And(negative, odd)
    second = ctx.op.And(negative, ctx.op.Not(odd))
    return first, second


@translates(aten.linalg_ldl_solve.default)
def linalg_ldl_solve(ctx, LD, pivots, B, *, hermitian=False):
    """sytrs: forward through P(k) L(k) D(k) in order, then back through L(k)^T P(k)^T."""
    dtype = ctx.out_dtype
    work = R.float_work(dtype)
    rank = max(ctx.rank(LD), ctx.rank(B))
    at = _Indexing(rank)
    ra, ca = at.ra, at.ca
    # Broadcast the batch dims of the factors and the right-hand sides against each other.
    ld, rhs = ctx.cast(LD, work), ctx.cast(B, work)
    b_batch = ctx.op.Shape(rhs, start=0, end=ctx.rank(B) - 2)
    ld_batch = ctx.op.Shape(ld, start=0, end=ctx.rank(LD) - 2)
    ld = ctx.op.Expand(ld, ctx.op.Concat(b_batch, ctx.const([1, 1], i64), axis=0))
    rhs = ctx.op.Expand(rhs, ctx.op.Concat(ld_batch, ctx.const([1, 1], i64), axis=0))
    piv = ctx.op.Expand(ctx.cast(pivots, i64), ctx.op.Concat(b_batch, ctx.const([1], i64), axis=0))
    rank_p = rank - 1
    first, second = _block_roles(ctx, piv, rank_p)
    swap_with = ctx.op.Sub(ctx.op.Abs(piv), ctx.const(1, i64))  # [..., n], 0-based
    n_static, n = S.static_dim(ctx, LD, ctx.rank(LD) - 1), S.dim_0d(ctx, LD, -1)
    rows = ctx.op.Unsqueeze(ctx.op.Range(ctx.const(0, i64), n, ctx.const(1, i64)), [1])
    last = ctx.op.Sub(n, ctx.const(1, i64))
    zero = ctx.const(0.0, work)

    def at_position(c, values, j):
        """values[..., j] as [..., 1, 1]."""
        index = c.op.Unsqueeze(j, c.const([0], i64)) if la.is_value(j) else c.const([j], i64)
        return c.op.Unsqueeze(c.op.Gather(values, index, axis=rank_p - 1), c.const([ca], i64))

    def swap(c, m, i, j):
        order = c.op.Where(c.op.Equal(rows, i), j, c.op.Where(c.op.Equal(rows, j), i, rows))
        return at.permute_rows(c, m, order)

    def forward(c, j, states):
        (x,) = states
        j0 = j if la.is_value(j) else c.const(j, i64)
        j1 = c.op.Min(c.op.Add(j0, c.const(1, i64)), last)
        opens = at_position(c, first, j)
        closes = at_position(c, second, j)
        p = at_position(c, swap_with, j)
        col0 = at.column(c, ld, j0)
        col1 = at.column(c, ld, j1)
        # 1x1: swap rows j and p, x[i>j] -= L[i, j] x[j] (ger), x[j] *= 1 / D[j, j].
        x1 = swap(c, x, j0, p)
        row0 = c.op.Gather(x1, c.op.Reshape(j0, c.const([1], i64)), axis=ra)
        tail = c.op.Where(c.op.Greater(rows, j0), col0, zero)
        x1 = c.op.Add(x1, c.op.Mul(tail, c.op.Neg(row0)))
        d = c.op.Gather(col0, c.op.Reshape(j0, c.const([1], i64)), axis=ra)
        x1 = c.op.Where(c.op.Equal(rows, j0), c.op.Mul(x1, c.op.Div(c.const(1.0, work), d)), x1)
        # 2x2: swap rows j+1 and p, eliminate both columns below, solve the 2x2 block.
        x2 = swap(c, x, j1, p)
        r0 = c.op.Gather(x2, c.op.Reshape(j0, c.const([1], i64)), axis=ra)
        r1 = c.op.Gather(x2, c.op.Reshape(j1, c.const([1], i64)), axis=ra)
        rest = c.op.Greater(rows, j1)
        x2 = c.op.Add(x2, c.op.Mul(c.op.Where(rest, col0, zero), c.op.Neg(r0)))
        x2 = c.op.Add(x2, c.op.Mul(c.op.Where(rest, col1, zero), c.op.Neg(r1)))
        akm1k = c.op.Gather(col0, c.op.Reshape(j1, c.const([1], i64)), axis=ra)
        akm1k = c.op.Where(opens, akm1k, c.const(1.0, work))
        akm1 = c.op.Div(c.op.Gather(col0, c.op.Reshape(j0, c.const([1], i64)), axis=ra), akm1k)
        ak = c.op.Div(c.op.Gather(col1, c.op.Reshape(j1, c.const([1], i64)), axis=ra), akm1k)
        denom = c.op.Sub(c.op.Mul(akm1, ak), c.const(1.0, work))
        bkm1, bk = c.op.Div(r0, akm1k), c.op.Div(r1, akm1k)
        new0 = c.op.Div(c.op.Sub(c.op.Mul(ak, bkm1), bk), denom)
        new1 = c.op.Div(c.op.Sub(c.op.Mul(akm1, bk), bkm1), denom)
        x2 = c.op.Where(c.op.Equal(rows, j0), new0, c.op.Where(c.op.Equal(rows, j1), new1, x2))
        return (c.op.Where(closes, x, c.op.Where(opens, x2, x1)),)

    def backward(c, step, states):
        (x,) = states
        j = c.op.Sub(last, step) if la.is_value(step) else c.op.Sub(last, c.const(step, i64))
        j_before = c.op.Max(c.op.Sub(j, c.const(1, i64)), c.const(0, i64))
        position = c.op.Unsqueeze(j, c.const([0], i64))
        opens = c.op.Unsqueeze(c.op.Gather(first, position, axis=rank_p - 1), [ca])
        closes = c.op.Unsqueeze(c.op.Gather(second, position, axis=rank_p - 1), [ca])
        p = c.op.Unsqueeze(c.op.Gather(swap_with, position, axis=rank_p - 1), [ca])
        after = c.op.Greater(rows, j)

        def reduced(column):
            # x[j] -= sum_{i > j} L[i, j] x[i] (gemv with the rows already solved).
            weights = c.op.Where(after, column, zero)
            return R.reduce(c, "ReduceSum", c.op.Mul(weights, x), [ra], True)

        own = c.op.Sub(x, reduced(at.column(c, ld, j)))
        previous = c.op.Sub(x, reduced(at.column(c, ld, j_before)))
        updated = c.op.Where(c.op.Equal(rows, j), own, x)
        updated = c.op.Where(c.op.And(closes, c.op.Equal(rows, j_before)), previous, updated)
        updated = swap(c, updated, j, p)
        return (c.op.Where(opens, x, updated),)

    (rhs,) = la.over_columns(ctx, n_static, n, (rhs,), (work,), forward, "ldl_forward")
    (rhs,) = la.over_columns(ctx, n_static, n, (rhs,), (work,), backward, "ldl_backward")
    return ctx.cast(rhs, dtype)
