"""torch.linalg.lstsq: a fake kernel so torch.export can capture it, and its translation.

ATen tags linalg_lstsq ``dynamic_output_shape`` because one case really is data-dependent:
with the SVD drivers (gelss, gelsd) and more rows than columns, the residuals exist only when
A has full column rank. Every other case has output shapes fixed by the input shapes, so the
fake kernel below describes those and refuses that one case with a clear error.

Outputs per driver (eager torch, CPU):
  gels   solution; residuals [..., nrhs] when m > n else (0,); rank (0,); singular values (0,)
  gelsy  solution; residuals (0,); rank [...]; singular values (0,)   (the CPU default)
  gelss/gelsd  solution; residuals (0,) when m <= n; rank [...]; singular values [..., min(m, n)]

gels assumes full rank, as LAPACK's xGELS does, and follows it: Householder QR of A (m >= n,
least squares) or of A^T (m < n, minimum norm). The rank-revealing drivers use the SVD: the
solution is V diag(1/s) U^T B over the singular values above rcond * s_max, i.e. the minimum
norm solution of the truncated problem. For gelss/gelsd that is LAPACK's own definition. For
gelsy LAPACK truncates a column-pivoted QR instead and picks the rank by incremental condition
estimation of its leading triangle; for full-rank A both give the least-squares solution, and
for a clearly rank-deficient A (singular values well below rcond * s_max) both give the
minimum-norm solution. They can disagree on the rank only for a singular value near the
threshold. Everything is computed in float64 and cast back.
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import DynamicOutputShapeException

from torch_onnx_conformance.exporter.ops import _linalg_common as la
from torch_onnx_conformance.exporter.ops import _reduce as R
from torch_onnx_conformance.exporter.ops import _shape as S
from torch_onnx_conformance.exporter.ops._fake_kernels import fake_kernels
from torch_onnx_conformance.exporter.ops._registry import translates
from torch_onnx_conformance.exporter.ops.linalg_spectral import svd

aten = torch.ops.aten
i64, f64 = torch.int64, torch.float64

_DRIVERS = ("gels", "gelsy", "gelss", "gelsd")


# ------------------------------------------------------------------------------ fake kernel
class LstsqDataDependentError(DynamicOutputShapeException):
    """linalg_lstsq whose residuals' shape depends on the rank of A (gelss/gelsd, m > n)."""

    def __init__(self, func, driver: str, m, n) -> None:
        super().__init__(func)
        self.message = (
            f"{func}: with driver={driver!r} and more rows than columns (m={m} > n={n}), "
            "torch returns residuals only when A has full column rank, so their shape "
            "depends on the data and cannot be exported. Use driver='gels' (full-rank A) or "
            "'gelsy', or compute the residuals as ((A @ X - B) ** 2).sum(-2) yourself."
        )

    def __str__(self) -> str:
        return self.message


def _default_driver(device: torch.device) -> str:
    # torch picks gelsy on CPU and gels (the only one it has) elsewhere.
    return "gelsy" if device.type == "cpu" else "gels"


def _hint(size) -> int:
    """A size as the example inputs had it: the fake kernel's ``m > n`` guard was decided so."""
    return size if isinstance(size, int) else int(size.node.hint)


def _lstsq_fake(self, b, rcond=None, *, driver=None):
    torch._check(
        self.dim() >= 2,
        lambda: f"torch.linalg.lstsq: input must have at least 2 dimensions, got {self.dim()}",
    )
    torch._check(
        b.dim() >= 1,
        lambda: f"torch.linalg.lstsq: other must have at least 1 dimension, got {b.dim()}",
    )
    torch._check(
        0 <= self.dim() - b.dim() <= 1,
        lambda: (
            "torch.linalg.lstsq: input.dim() must be other.dim() or other.dim() + 1, got "
            f"shapes {tuple(self.shape)} and {tuple(b.shape)}"
        ),
    )
    torch._check(
        self.dtype == b.dtype,
        lambda: (
            f"torch.linalg.lstsq: input ({self.dtype}) and other ({b.dtype}) must have "
            "the same dtype"
        ),
    )
    chosen = driver if driver is not None else _default_driver(self.device)
    torch._check(
        chosen in _DRIVERS,
        lambda: f"torch.linalg.lstsq: driver must be one of {_DRIVERS}, got {driver!r}",
    )
    vector = b.dim() == self.dim() - 1
    b_matrix = b.unsqueeze(-1) if vector else b
    *a_batch, m, n = self.shape
    *b_batch, b_rows, nrhs = b_matrix.shape
    torch._check(
        b_rows == m,
        lambda: f"torch.linalg.lstsq: input has {m} rows but other has {b_rows}; they must match",
    )
    batch = tuple(torch.broadcast_shapes(tuple(a_batch), tuple(b_batch)))
    real = self.real.dtype if self.is_complex() else self.dtype
    solution = self.new_empty((*batch, n) if vector else (*batch, n, nrhs))
    empty = self.new_empty((0,), dtype=real)
    taller = m > n  # a guard: the outputs below depend on it
    svd_driver = chosen in ("gelss", "gelsd")
    # With no columns the rank is 0 == n, so the SVD drivers' residuals always exist.
    no_columns = isinstance(n, int) and n == 0
    if svd_driver and taller and not no_columns:
        raise LstsqDataDependentError(aten.linalg_lstsq.default, chosen, _hint(m), _hint(n))
    has_residuals = taller and (chosen == "gels" or svd_driver)
    residuals = self.new_empty((*batch, nrhs), dtype=real) if has_residuals else empty
    # rank and singular values keep A's own batch shape even when B broadcasts it (eager does).
    rank = self.new_empty((0,) if chosen == "gels" else tuple(a_batch), dtype=i64)
    if svd_driver:
        singular_values = self.new_empty((*a_batch, torch.sym_min(m, n)), dtype=real)
    else:
        singular_values = empty
    return solution, residuals, rank, singular_values


@fake_kernels
def _register_fake() -> torch.library.Library | None:
    """Register the fake kernel; a torch (or an outer export) that has one keeps it."""
    if torch._library.simple_registry.singleton.find("aten::linalg_lstsq").fake_impl.kernel:
        return None
    library = torch.library.Library("aten", "FRAGMENT")
    torch.library.register_fake("aten::linalg_lstsq", _lstsq_fake, lib=library)
    return library


# ------------------------------------------------------------------------------ translation
def _driver(ctx, A, driver) -> str:
    if driver is not None:
        return driver
    meta = ctx.meta(A)
    device = meta.device if isinstance(meta, torch.Tensor) else torch.device("cpu")
    return _default_driver(device)


def _broadcast_pair(ctx, a, b, a_rank, b_rank):
    """Expand a [..., m, n] and b [..., m, nrhs] to their common batch shape."""
    ones = ctx.const([1, 1], i64)
    a_full = ctx.op.Expand(a, ctx.op.Concat(ctx.op.Shape(b, start=0, end=b_rank - 2), ones, axis=0))
    b_full = ctx.op.Expand(b, ctx.op.Concat(ctx.op.Shape(a, start=0, end=a_rank - 2), ones, axis=0))
    return a_full, b_full


def _first(ctx, x, count, axis):
    """The first ``count`` (0-d int64 value) entries of ``x`` along ``axis``."""
    return ctx.op.Slice(
        x, ctx.const([0], i64), ctx.op.Reshape(count, ctx.const([1], i64)), ctx.const([axis], i64)
    )


def _gels(ctx, a_full, b_full, rank, m_s, n_s, batch_shape, taller):
    """(solution [..., n, nrhs], residuals [..., nrhs] or None) by Householder QR, float64."""
    if taller:
        # A = Q R: x = R1^-1 (Q^T B)[:n]; LAPACK's residuals are |(Q^T B)[n:]|^2 per column.
        S.with_shape(a_full, (*batch_shape, m_s, n_s))
        r, reflectors, taus = la.householder(ctx, a_full)
        _, n, k, k_static = la.matrix_sizes(ctx, a_full, rank)
        b_t = ctx.op.Transpose(b_full, perm=la.swap_last(rank))
        qtb = ctx.op.Transpose(
            la.apply_reflectors(ctx, b_t, reflectors, taus, rank, k, k_static),
            perm=la.swap_last(rank),
        )
        r1 = _first(ctx, r, n, rank - 2)
        c1 = _first(ctx, qtb, n, rank - 2)
        _, x, _, _, _ = la.gauss_jordan(ctx, r1, c1, "none", False, rank, k_static)
        tail = ctx.op.Slice(
            qtb,
            ctx.op.Reshape(n, ctx.const([1], i64)),
            ctx.const([torch.iinfo(i64).max], i64),
            ctx.const([rank - 2], i64),
        )
        residuals = R.reduce(ctx, "ReduceSumSquare", tail, [rank - 2], False)
        return x, residuals
    # A^T = Q R: A = R1^T Q1^T, so x = Q1 R1^-T B is the minimum-norm solution.
    a_t = S.with_shape(ctx.op.Transpose(a_full, perm=la.swap_last(rank)), (*batch_shape, n_s, m_s))
    r, reflectors, taus = la.householder(ctx, a_t)
    _, _, k, k_static = la.matrix_sizes(ctx, a_t, rank)
    r1 = _first(ctx, r, k, rank - 2)  # [..., m, m]
    r1_t = ctx.op.Transpose(r1, perm=la.swap_last(rank))
    _, y, _, _, _ = la.gauss_jordan(ctx, r1_t, b_full, "none", False, rank, k_static)
    eye = la.eye_like_rows(ctx, r, rank, f64)  # [..., n, n]
    q = la.apply_reflectors(ctx, eye, reflectors, taus, rank, k, k_static)
    q1 = _first(ctx, q, k, rank - 1)  # [..., n, m]
    return ctx.op.MatMul(q1, y), None


def _truncated_svd_solve(ctx, A, b, rcond, driver):
    """(solution [..., n, nrhs], rank [...], singular values [..., k]) in float64."""
    rank = ctx.rank(A)
    u, sigma, v = svd(ctx, A)
    if rcond is not None and rcond < 0:
        # LAPACK's gelss/gelsd read a negative rcond as machine precision; gelsy keeps it.
        rcond = torch.finfo(ctx.dtype(A)).eps if driver != "gelsy" else 0.0
    largest = R.reduce(ctx, "ReduceMax", sigma, [rank - 2], True)  # [..., 1]
    threshold = la.tolerance(ctx, A, None, rcond, largest)
    kept = ctx.op.Greater(sigma, threshold)
    safe = ctx.op.Where(kept, sigma, ctx.const(1.0, f64))
    inverse = ctx.op.Where(kept, ctx.op.Reciprocal(safe), ctx.const(0.0, f64))
    utb = ctx.op.MatMul(ctx.op.Transpose(u, perm=la.swap_last(rank)), b)  # [..., k, nrhs]
    scaled = ctx.op.Mul(ctx.op.Unsqueeze(inverse, ctx.const([rank - 1], i64)), utb)
    x = ctx.op.MatMul(v, scaled)
    # Like torch, rank and singular values keep A's own batch shape when B broadcasts it.
    count = R.reduce(ctx, "ReduceSum", ctx.cast(kept, i64), [rank - 2], False)
    return x, count, sigma


def _degenerate(ctx, chosen, b_work, rank):
    """Outputs when A or B has no elements: a zero solution and rank 0. For m > n = 0, gels
    zeroes B before torch reads residuals from it, while gelss/gelsd leave B as it is."""
    outputs = [_static_zeros(ctx, meta) for meta in ctx.out]
    if chosen in ("gelss", "gelsd") and ctx.out[1].numel() > 0:
        residuals = R.reduce(ctx, "ReduceSumSquare", b_work, [rank - 2], False)
        outputs[1] = ctx.cast(residuals, ctx.out[1].dtype)
    return tuple(outputs)


def _static_zeros(ctx, meta):
    if not all(isinstance(d, int) for d in meta.shape):
        raise NotImplementedError(
            "torch.linalg.lstsq: an empty A or B with dynamic batch dimensions is not "
            f"exported (output shape {tuple(meta.shape)}); export it with static shapes"
        )
    shape = list(meta.shape)
    return ctx.const(torch.zeros(shape, dtype=meta.dtype))


@translates(aten.linalg_lstsq.default)
def linalg_lstsq(ctx, self, b, rcond=None, *, driver=None):
    chosen = _driver(ctx, self, driver)
    if chosen not in _DRIVERS:
        raise ValueError(f"torch.linalg.lstsq: driver must be one of {_DRIVERS}, got {driver!r}")
    dtype = ctx.dtype(self)
    if dtype is None or not dtype.is_floating_point:
        raise NotImplementedError(
            f"torch.linalg.lstsq: only real floating-point inputs can be exported, got {dtype}"
        )
    out_solution, out_residuals, out_rank, out_sv = ctx.out
    a_shape, b_shape = ctx.shape(self), ctx.shape(b)
    a_rank, b_rank = len(a_shape), len(b_shape)
    vector = b_rank == a_rank - 1
    m_s, n_s = a_shape[-2], a_shape[-1]
    b_work = ctx.cast(b, f64)
    if vector:
        b_work = ctx.op.Unsqueeze(b_work, ctx.const([b_rank], i64))
        b_rank += 1
    rank = max(a_rank, b_rank)
    batch_shape = tuple(out_solution.shape)[: rank - 2]
    if any(isinstance(d, int) and d == 0 for d in (m_s, n_s)) or (
        R.static_count(ctx, b, None) == 0
    ):
        return _degenerate(ctx, chosen, b_work, rank)

    residuals = rank_out = singular_values = None
    if chosen == "gels":
        taller = _hint(m_s) > _hint(n_s)
        a_full, b_full = _broadcast_pair(ctx, ctx.cast(self, f64), b_work, a_rank, b_rank)
        x, residuals = _gels(ctx, a_full, b_full, rank, m_s, n_s, batch_shape, taller)
    else:
        x, rank_out, singular_values = _truncated_svd_solve(ctx, self, b_work, rcond, chosen)
        if chosen == "gelsy":
            singular_values = None  # gelsy reports none
    if vector:
        x = ctx.op.Squeeze(x, ctx.const([rank - 1], i64))
    solution = ctx.cast(x, dtype)
    real = out_residuals.dtype

    def or_empty(value, dtype):
        return ctx.const(torch.zeros(0, dtype=dtype)) if value is None else ctx.cast(value, dtype)

    return (
        solution,
        or_empty(residuals, real),
        or_empty(rank_out, i64),
        or_empty(singular_values, out_sv.dtype),
    )
