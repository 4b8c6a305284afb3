"""Reductions and scans: sum/mean/prod, max/min and arg-variants, any/all, var/std, norms,
logsumexp, cumulative ops and their inverse (diff), and order statistics (median, mode,
kthvalue), histc, bincount.

Every reduction runs in a dtype onnxruntime has a kernel for (half floats accumulate in float32
as torch's CPU kernels do) and returns torch's result dtype. Max/min reductions propagate NaN
like torch (onnxruntime's ReduceMax skips NaNs). Scans with no ONNX operator (cumprod, cummax,
logcumsumexp) are an ONNX Scan, so they are exact and sequential like torch's kernels.
"""

from __future__ import annotations

import math
from typing import Any

import onnx_ir as ir
import torch

from torch_onnx_conformance.exporter.ops import _numerics as nx
from torch_onnx_conformance.exporter.ops import _reduce as R
from torch_onnx_conformance.exporter.ops import _shape as S
from torch_onnx_conformance.exporter.ops import _subgraph
from torch_onnx_conformance.exporter.ops._kernels import call
from torch_onnx_conformance.exporter.ops._registry import translates

aten = torch.ops.aten
prims = torch.ops.prims
i64 = torch.int64


def _squeeze(ctx, x: ir.Value, axes: list[int] | None, rank: int) -> ir.Value:
    """Drop reduced axes that were kept (axes None: every axis)."""
    if rank == 0:
        return x
    if axes is None:
        return ctx.op.Reshape(x, ctx.const([], i64))
    return ctx.op.Squeeze(x, ctx.const(axes, i64))


# ----------------------------------------------------------------------------- sum / mean
@translates(aten.sum.default, aten.sum.dim_IntList)
def sum_(ctx, self, dim=None, keepdim=False, *, dtype=None):
    out = ctx.out_dtype
    axes = R.reduce_axes(dim, ctx.rank(self))
    return R.reduce_as(ctx, "ReduceSum", ctx.cast(self, out), axes, keepdim, out)


@translates(prims.sum.default)
def prims_sum(ctx, inp, dims, *, output_dtype=None):
    return sum_(ctx, inp, dims, False)


@translates(aten.nansum.default)
def nansum(ctx, self, dim=None, keepdim=False, *, dtype=None):
    out = ctx.out_dtype
    work = R.reduce_dtype("ReduceSum", out)
    x = ctx.cast(ctx.cast(self, out), work)
    if work.is_floating_point:
        x = ctx.op.Where(ctx.op.IsNaN(x), ctx.const(0, work), x)
    axes = R.reduce_axes(dim, ctx.rank(self))
    return ctx.cast(R.reduce(ctx, "ReduceSum", x, axes, keepdim), out)


@translates(aten.mean.default, aten.mean.dim)
def mean(ctx, self, dim=None, keepdim=False, *, dtype=None):
    out = ctx.out_dtype
    work = R.float_work(out)
    x = ctx.cast(ctx.cast(self, out), work)
    axes = R.reduce_axes(dim, ctx.rank(self))
    return ctx.cast(_mean(ctx, x, axes, keepdim, R.static_count(ctx, self, axes) == 0), out)


def _mean(ctx, x, axes, keepdim, empty: bool):
    if empty:
        # ReduceMean of nothing is 0 in onnxruntime; torch's mean of nothing is NaN.
        total = R.reduce(ctx, "ReduceSum", x, axes, keepdim)
        return ctx.op.Div(total, ctx.scalar_like(0.0, total))
    return R.reduce(ctx, "ReduceMean", x, axes, keepdim)


@translates(aten.nanmean.default)
def nanmean(ctx, self, dim=None, keepdim=False, *, dtype=None):
    out = ctx.out_dtype
    work = R.float_work(out)
    x = ctx.cast(ctx.cast(self, out), work)
    axes = R.reduce_axes(dim, ctx.rank(self))
    is_nan = ctx.op.IsNaN(x)
    total = R.reduce(ctx, "ReduceSum", ctx.op.Where(is_nan, ctx.const(0, work), x), axes, keepdim)
    valid = R.reduce(ctx, "ReduceSum", ctx.cast(ctx.op.Not(is_nan), work), axes, keepdim)
    return ctx.cast(ctx.op.Div(total, valid), out)


# --------------------------------------------------------------------------------- prod
@translates(aten.prod.default, aten.prod.dim_int)
def prod(ctx, self, dim=None, keepdim=False, *, dtype=None):
    out = ctx.out_dtype
    axes = R.reduce_axes(dim, ctx.rank(self))
    return R.reduce_as(ctx, "ReduceProd", ctx.cast(self, out), axes, keepdim, out)


@translates(prims.prod.default)
def prims_prod(ctx, inp, dims, *, output_dtype=None):
    return prod(ctx, inp, dims, False)


# ------------------------------------------------------------------------------ max / min
def _any_true(ctx, mask: ir.Value, axes: list[int] | None, keepdim: bool) -> ir.Value:
    """Logical-or reduction of a bool tensor.

    It runs on uint8 even where ReduceMax has a bool kernel (opset 20): onnxruntime's bool
    kernels reject empty reductions, whose answers (any: False, all: True) torch defines.
    """
    reduced = R.reduce(ctx, "ReduceMax", ctx.cast(mask, torch.uint8), axes, keepdim)
    return ctx.cast(reduced, torch.bool)


def _all_true(ctx, mask: ir.Value, axes: list[int] | None, keepdim: bool) -> ir.Value:
    reduced = R.reduce(ctx, "ReduceMin", ctx.cast(mask, torch.uint8), axes, keepdim)
    return ctx.cast(reduced, torch.bool)


def extremum(ctx, op_type: str, x: ir.Value, axes: list[int] | None, keepdim: bool) -> ir.Value:
    """ReduceMax/ReduceMin over ``axes`` with torch's NaN propagation, in x's dtype."""
    dtype = ctx.dtype(x)
    work = R.reduce_dtype(op_type, dtype)
    xw = ctx.cast(x, work)
    result = R.reduce(ctx, op_type, xw, axes, keepdim)
    if work.is_floating_point:
        has_nan = _any_true(ctx, ctx.op.IsNaN(xw), axes, keepdim)
        result = ctx.op.Where(has_nan, nx.nan_of(ctx, work), result)
    return ctx.cast(result, dtype)


@translates(aten.amax.default)
def amax(ctx, self, dim=(), keepdim=False):
    return extremum(ctx, "ReduceMax", self, R.reduce_axes(dim, ctx.rank(self)), keepdim)


@translates(aten.amin.default)
def amin(ctx, self, dim=(), keepdim=False):
    return extremum(ctx, "ReduceMin", self, R.reduce_axes(dim, ctx.rank(self)), keepdim)


@translates(prims.amax.default)
def prims_amax(ctx, inp, dims, *, output_dtype=None):
    return amax(ctx, inp, dims or (), False)


@translates(prims.amin.default)
def prims_amin(ctx, inp, dims, *, output_dtype=None):
    return amin(ctx, inp, dims or (), False)


@translates(aten.max.default)
def max_all(ctx, self):
    return extremum(ctx, "ReduceMax", self, None, False)


@translates(aten.min.default)
def min_all(ctx, self):
    return extremum(ctx, "ReduceMin", self, None, False)


@translates(aten.aminmax.default)
def aminmax(ctx, self, *, dim=None, keepdim=False):
    axes = R.reduce_axes(dim, ctx.rank(self))
    return (
        extremum(ctx, "ReduceMin", self, axes, keepdim),
        extremum(ctx, "ReduceMax", self, axes, keepdim),
    )


def arg_extremum(ctx, op_type: str, x: ir.Value, ax: int, keepdim: bool) -> ir.Value:
    """ArgMax/ArgMin along ``ax``; a NaN wins, like torch (onnxruntime skips NaNs)."""
    dtype = ctx.dtype(x)
    work = R.reduce_dtype("ArgMax", dtype)
    xw = ctx.cast(x, work)
    if work.is_floating_point:
        sign = 1 if op_type == "ArgMax" else -1
        xw = ctx.op.Where(ctx.op.IsNaN(xw), ctx.const(sign * float("inf"), work), xw)
    return getattr(ctx.op, op_type)(xw, axis=ax, keepdims=int(keepdim))


def _arg_reduce(ctx, op_type, self, dim, keepdim):
    rank = ctx.rank(self)
    if dim is None or rank == 0:
        index = arg_extremum(ctx, op_type, S.flatten(ctx, self), 0, False)
        if keepdim and rank > 0:
            return ctx.op.Reshape(index, ctx.const([1] * rank, i64))
        return index
    return arg_extremum(ctx, op_type, self, S.axis(dim, rank), keepdim)


@translates(aten.argmax.default)
def argmax(ctx, self, dim=None, keepdim=False):
    return _arg_reduce(ctx, "ArgMax", self, dim, keepdim)


@translates(aten.argmin.default)
def argmin(ctx, self, dim=None, keepdim=False):
    return _arg_reduce(ctx, "ArgMin", self, dim, keepdim)


def _extremum_dim(ctx, op_type, self, dim, keepdim):
    rank = ctx.rank(self)
    if rank == 0:
        return ctx.op.Identity(self), ctx.const(0, i64)
    ax = S.axis(dim, rank)
    index = arg_extremum(ctx, op_type, self, ax, True)
    values = ctx.op.GatherElements(self, index, axis=ax)
    if not keepdim:
        values = _squeeze(ctx, values, [ax], rank)
        index = _squeeze(ctx, index, [ax], rank)
    return values, index


@translates(aten.max.dim)
def max_dim(ctx, self, dim, keepdim=False):
    return _extremum_dim(ctx, "ArgMax", self, dim, keepdim)


@translates(aten.min.dim)
def min_dim(ctx, self, dim, keepdim=False):
    return _extremum_dim(ctx, "ArgMin", self, dim, keepdim)


# ------------------------------------------------------------------------------- any / all
def _truthy(ctx, x: ir.Value) -> ir.Value:
    return x if ctx.dtype(x) is torch.bool else ctx.op.Cast(x, to=ir.DataType.BOOL)


@translates(aten.any.default, aten.any.dim, aten.any.dims)
def any_(ctx, self, dim=None, keepdim=False):
    axes = R.reduce_axes(dim, ctx.rank(self))
    return ctx.cast(_any_true(ctx, _truthy(ctx, self), axes, keepdim), ctx.out_dtype)


@translates(aten.all.default, aten.all.dim, aten.all.dims)
def all_(ctx, self, dim=None, keepdim=False):
    axes = R.reduce_axes(dim, ctx.rank(self))
    return ctx.cast(_all_true(ctx, _truthy(ctx, self), axes, keepdim), ctx.out_dtype)


@translates(aten.count_nonzero.default, aten.count_nonzero.dim_IntList)
def count_nonzero(ctx, self, dim=None):
    axes = R.reduce_axes(dim, ctx.rank(self))
    return R.reduce(ctx, "ReduceSum", ctx.cast(_truthy(ctx, self), i64), axes, False)


# ---------------------------------------------------------------------------- var / std
def _variance(ctx, self, dim, correction, keepdim, *, sqrt: bool, with_mean: bool):
    out = ctx.out_dtype
    work = R.float_work(ctx.dtype(self))
    x = ctx.cast(self, work)
    rank = ctx.rank(self)
    axes = R.reduce_axes(dim, rank)
    mean_kept = _mean(ctx, x, axes, True, R.static_count(ctx, self, axes) == 0)
    squares = R.reduce(ctx, "ReduceSumSquare", ctx.op.Sub(x, mean_kept), axes, keepdim)
    correction = 1 if correction is None else correction
    n = R.count(ctx, self, axes)
    if isinstance(n, int):
        denominator = ctx.const(max(n - correction, 0), work)
    else:
        denominator = ctx.op.Max(
            ctx.op.Sub(ctx.cast(n, work), ctx.const(correction, work)), ctx.const(0, work)
        )
    result = ctx.op.Div(squares, denominator)
    if sqrt:
        result = ctx.op.Sqrt(result)
    result = ctx.cast(result, out)
    if not with_mean:
        return result
    mean_out = mean_kept if keepdim else _squeeze(ctx, mean_kept, axes, rank)
    return result, ctx.cast(mean_out, out)


def _unbiased(unbiased) -> int:
    return 1 if unbiased is None or unbiased else 0


@translates(aten.var.correction)
def var_correction(ctx, self, dim=None, *, correction=None, keepdim=False):
    return _variance(ctx, self, dim, correction, keepdim, sqrt=False, with_mean=False)


@translates(aten.var.dim)
def var_dim(ctx, self, dim, unbiased=True, keepdim=False):
    return _variance(ctx, self, dim, _unbiased(unbiased), keepdim, sqrt=False, with_mean=False)


@translates(aten.var.default)
def var_default(ctx, self, unbiased=True):
    return _variance(ctx, self, None, _unbiased(unbiased), False, sqrt=False, with_mean=False)


@translates(prims.var.default)
def prims_var(ctx, inp, dims, correction=1, *, output_dtype=None):
    return _variance(ctx, inp, dims, correction, False, sqrt=False, with_mean=False)


@translates(aten.std.correction)
def std_correction(ctx, self, dim=None, *, correction=None, keepdim=False):
    return _variance(ctx, self, dim, correction, keepdim, sqrt=True, with_mean=False)


@translates(aten.std.dim)
def std_dim(ctx, self, dim, unbiased=True, keepdim=False):
    return _variance(ctx, self, dim, _unbiased(unbiased), keepdim, sqrt=True, with_mean=False)


@translates(aten.std.default)
def std_default(ctx, self, unbiased=True):
    return _variance(ctx, self, None, _unbiased(unbiased), False, sqrt=True, with_mean=False)


@translates(aten.var_mean.correction)
def var_mean_correction(ctx, self, dim=None, *, correction=None, keepdim=False):
    return _variance(ctx, self, dim, correction, keepdim, sqrt=False, with_mean=True)


@translates(aten.var_mean.dim)
def var_mean_dim(ctx, self, dim, unbiased=True, keepdim=False):
    return _variance(ctx, self, dim, _unbiased(unbiased), keepdim, sqrt=False, with_mean=True)


@translates(aten.var_mean.default)
def var_mean_default(ctx, self, unbiased=True):
    return _variance(ctx, self, None, _unbiased(unbiased), False, sqrt=False, with_mean=True)


@translates(aten.std_mean.correction)
def std_mean_correction(ctx, self, dim=None, *, correction=None, keepdim=False):
    return _variance(ctx, self, dim, correction, keepdim, sqrt=True, with_mean=True)


@translates(aten.std_mean.dim)
def std_mean_dim(ctx, self, dim, unbiased=True, keepdim=False):
    return _variance(ctx, self, dim, _unbiased(unbiased), keepdim, sqrt=True, with_mean=True)


@translates(aten.std_mean.default)
def std_mean_default(ctx, self, unbiased=True):
    return _variance(ctx, self, None, _unbiased(unbiased), False, sqrt=True, with_mean=True)


# ----------------------------------------------------------------------------- logsumexp
@translates(aten.logsumexp.default, aten.special_logsumexp.default)
def logsumexp(ctx, self, dim=(), keepdim=False):
    out = ctx.out_dtype
    work = R.float_work(out)
    axes = R.reduce_axes(dim, ctx.rank(self))
    # onnxruntime's ReduceLogSumExp subtracts the max first (stable for large inputs).
    return ctx.cast(R.reduce(ctx, "ReduceLogSumExp", ctx.cast(self, work), axes, keepdim), out)


# --------------------------------------------------------------------------------- norms
def vector_norm(
    ctx, x: ir.Value, ord: Any, axes: list[int] | None, keepdim: bool, out: torch.dtype
) -> ir.Value:
    """torch.linalg.vector_norm of a real tensor, computed in float32 for half inputs."""
    work = R.float_work(out)
    x = ctx.cast(ctx.cast(x, out), work)
    ord = float(ord)
    if ord == 2:
        result = R.reduce(ctx, "ReduceL2", x, axes, keepdim)
    elif ord == 1:
        result = R.reduce(ctx, "ReduceL1", x, axes, keepdim)
    elif ord == math.inf:
        result = extremum(ctx, "ReduceMax", ctx.op.Abs(x), axes, keepdim)
    elif ord == -math.inf:
        result = extremum(ctx, "ReduceMin", ctx.op.Abs(x), axes, keepdim)
    elif ord == 0:
        result = R.reduce(ctx, "ReduceSum", ctx.cast(_truthy(ctx, x), work), axes, keepdim)
    else:
        powered = ctx.op.Pow(ctx.op.Abs(x), ctx.const(ord, work))
        total = R.reduce(ctx, "ReduceSum", powered, axes, keepdim)
        result = ctx.op.Pow(total, ctx.const(1.0 / ord, work))
    return ctx.cast(result, out)


@translates(aten.linalg_vector_norm.default)
def linalg_vector_norm(ctx, self, ord=2, dim=None, keepdim=False, *, dtype=None):
    axes = R.reduce_axes(dim, ctx.rank(self))
    return vector_norm(ctx, self, ord, axes, keepdim, ctx.out_dtype)


@translates(aten.norm.Scalar, aten.norm.ScalarOpt_dtype)
def norm_all(ctx, self, p=2, *, dtype=None):
    return vector_norm(ctx, self, 2 if p is None else p, None, False, ctx.out_dtype)


@translates(aten.norm.ScalarOpt_dim, aten.norm.ScalarOpt_dim_dtype)
def norm_dim(ctx, self, p, dim, keepdim=False, *, dtype=None):
    axes = R.reduce_axes(dim, ctx.rank(self))
    return vector_norm(ctx, self, 2 if p is None else p, axes, keepdim, ctx.out_dtype)


@translates(aten.frobenius_norm.dim)
def frobenius_norm(ctx, self, dim, keepdim=False):
    axes = R.reduce_axes(dim, ctx.rank(self))
    return vector_norm(ctx, self, 2, axes, keepdim, ctx.out_dtype)


@translates(aten._weight_norm.default)
def weight_norm(ctx, v, g, dim=0):
    """``v * (g / ||v||)``, the norm over every axis but ``dim`` (``dim=-1``: over all of v,
    as aten's norm_except_dim reads it), so ``weight_norm``/``parametrizations.weight_norm``
    need no decomposition."""
    rank = ctx.rank(v)
    axes = None if dim == -1 else [axis for axis in range(rank) if axis != dim]
    dtype = ctx.dtype(v)
    if axes == []:  # a 1-d v normalized along its only axis: each entry is its own norm
        norm = ctx.op.Abs(v)
    else:
        norm = ctx.cast(vector_norm(ctx, v, 2, axes, True, dtype), dtype)
    return ctx.op.Mul(v, ctx.op.Div(g, norm))


def matrix_norm(ctx, x: ir.Value, ord: Any, dim: Any, keepdim: bool, out: torch.dtype) -> ir.Value:
    rank = ctx.rank(x)
    rows, cols = (S.axis(d, rank) for d in dim)
    if ord == "fro":
        return vector_norm(ctx, x, 2, sorted([rows, cols]), keepdim, out)
    if ord in ("nuc", 2, -2):
        return _spectral_norm(ctx, x, ord, rows, cols, keepdim, out)
    if ord not in (1, -1, math.inf, -math.inf):
        raise ValueError(f"linalg.matrix_norm: unsupported ord {ord!r}")
    work = R.float_work(out)
    absolute = ctx.op.Abs(ctx.cast(ctx.cast(x, out), work))
    # ord=±1 sums each column (over rows) and takes the max/min over columns; ±inf swaps them.
    summed_axis, picked_axis = (rows, cols) if abs(ord) == 1 else (cols, rows)
    sums = R.reduce(ctx, "ReduceSum", absolute, [summed_axis], True)
    op_type = "ReduceMax" if ord > 0 else "ReduceMin"
    result = extremum(ctx, op_type, sums, [picked_axis], True)
    if not keepdim:
        result = _squeeze(ctx, result, sorted([rows, cols]), rank)
    return ctx.cast(result, out)


def _spectral_norm(ctx, x, ord, rows, cols, keepdim, out):
    """Nuclear (sum), 2 (largest) and -2 (smallest) norms of the singular values."""
    from torch_onnx_conformance.exporter.ops.linalg_spectral import singular_values

    rank = ctx.rank(x)
    # The singular values of the matrices spanned by (rows, cols), moved to the end.
    batch = [d for d in range(rank) if d not in (rows, cols)]
    matrices = ctx.op.Transpose(ctx.cast(x, torch.float64), perm=[*batch, rows, cols])
    S.annotate(ctx, matrices, ctx.meta(x).to(torch.float64).permute(*batch, rows, cols))
    sigma = singular_values(ctx, matrices)  # [..., k]
    last = [rank - 2]
    if ord == "nuc":
        result = R.reduce(ctx, "ReduceSum", sigma, last, False)
    else:
        result = R.reduce(ctx, "ReduceMax" if ord == 2 else "ReduceMin", sigma, last, False)
    if keepdim:
        result = ctx.op.Unsqueeze(result, ctx.const(sorted([rows, cols]), i64))
    return ctx.cast(result, out)


@translates(aten.linalg_matrix_norm.default, aten.linalg_matrix_norm.str_ord)
def linalg_matrix_norm(ctx, self, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None):
    return matrix_norm(ctx, self, ord, dim, keepdim, ctx.out_dtype)


@translates(aten.linalg_norm.default, aten.linalg_norm.ord_str)
def linalg_norm(ctx, self, ord=None, dim=None, keepdim=False, *, dtype=None):
    rank = ctx.rank(self)
    dims = None if dim is None else ([dim] if isinstance(dim, int) else list(dim))
    if dims is not None and len(dims) == 2:
        return matrix_norm(ctx, self, "fro" if ord is None else ord, dims, keepdim, ctx.out_dtype)
    if dims is None and ord is not None and rank == 2:
        return matrix_norm(ctx, self, ord, (-2, -1), keepdim, ctx.out_dtype)
    axes = R.reduce_axes(dims, rank)
    return vector_norm(ctx, self, 2 if ord is None else ord, axes, keepdim, ctx.out_dtype)


# ------------------------------------------------------------------------- cumulative ops
def _scan_work(dtype: torch.dtype) -> torch.dtype:
    if dtype in (torch.float16, torch.bfloat16):
        return torch.float32
    if dtype.is_floating_point:
        return dtype
    return i64


@translates(aten.cumsum.default)
def cumsum(ctx, self, dim, *, dtype=None):
    out = ctx.out_dtype
    rank = ctx.rank(self)
    x = ctx.cast(self, out)
    if rank == 0:
        return ctx.op.Identity(x)
    work = _scan_work(out)
    summed = ctx.op.CumSum(ctx.cast(x, work), ctx.const(S.axis(dim, rank), i64))
    return ctx.cast(summed, out)


@translates(aten.diff.default)
def diff(ctx, self, n=1, dim=-1, prepend=None, append=None):
    """``n`` rounds of ``x[1:] - x[:-1]`` along ``dim`` (xor for bool) after joining
    ``prepend`` and ``append``. A translation of its own, so that a model using it (transformers'
    packed-sequence check on ``position_ids``) skips the whole-graph re-trace that
    decomposing it would cost. Slice clamps, so ``n`` past the length gives an empty axis as in
    torch."""
    out = ctx.out_dtype
    if n == 0:  # torch returns the input as it is, prepend and append ignored
        return ctx.op.Identity(ctx.cast(self, out))
    ax = S.axis(dim, ctx.rank(self))
    parts = [ctx.cast(t, out) for t in (prepend, self, append) if t is not None]
    x = parts[0] if len(parts) == 1 else ctx.op.Concat(*parts, axis=ax)
    for _ in range(n):
        later = ctx.op.Slice(x, [1], [S.INT64_MAX], [ax])
        earlier = ctx.op.Slice(x, [0], [-1], [ax])
        x = ctx.op.Xor(later, earlier) if out == torch.bool else call(ctx, "Sub", later, earlier)
    return x


def _scan_ready(ctx, self, dim, out):
    """The input in its scan dtype and axis, or None when the scan is the identity."""
    rank = ctx.rank(self)
    x = ctx.cast(self, out)
    if rank == 0 or S.static_dim(ctx, self, S.axis(dim, rank)) in (0, 1):
        return None, x
    return S.axis(dim, rank), x


@translates(aten.cumprod.default)
def cumprod(ctx, self, dim, *, dtype=None):
    out = ctx.out_dtype
    ax, x = _scan_ready(ctx, self, dim, out)
    if ax is None:
        return ctx.op.Identity(x)
    work = _scan_work(out)
    x = ctx.cast(x, work)
    if ctx.has("CumProd"):  # onnxruntime's kernel covers every scan work dtype
        return ctx.cast(ctx.op.CumProd(x, ctx.const(ax, i64)), out)
    ones = S.constant_of_shape(ctx, S.shape_without(ctx, self, ax), 1, work)

    def body(sub, states, slices):
        product = sub.op.Mul(states[0], slices[0])
        return [product], [product]

    _, stacked = _subgraph.scan_along(ctx, [x], ax, [ones], body, [work], [work], "cumprod")
    return ctx.cast(stacked, out)


@translates(aten.logcumsumexp.default)
def logcumsumexp(ctx, self, dim):
    out = ctx.out_dtype
    ax, x = _scan_ready(ctx, self, dim, out)
    if ax is None:
        return ctx.op.Identity(x)
    work = R.float_work(out)
    x = ctx.cast(x, work)
    start = S.constant_of_shape(ctx, S.shape_without(ctx, self, ax), float("-inf"), work)

    def body(sub, states, slices):
        # log(e^a + e^b) = max + log(1 + e^(min - max)); equal infinities give NaN
        # differences, which 0 replaces (the max alone is then the answer).
        acc, value = states[0], slices[0]
        high, low = sub.op.Max(acc, value), sub.op.Min(acc, value)
        diff = sub.op.Sub(low, high)
        diff = sub.op.Where(sub.op.IsNaN(diff), sub.const(0, work), diff)
        total = sub.op.Add(high, sub.op.Log(sub.op.Add(sub.const(1, work), sub.op.Exp(diff))))
        return [total], [total]

    _, stacked = _subgraph.scan_along(ctx, [x], ax, [start], body, [work], [work], "logcumsumexp")
    return ctx.cast(stacked, out)


def _cumulative_extremum(ctx, self, dim, maximum: bool):
    dtype = ctx.dtype(self)
    ax, x = _scan_ready(ctx, self, dim, dtype)
    if ax is None:
        zeros = S.constant_of_shape(ctx, ctx.op.Shape(x), 0, i64)
        return ctx.op.Identity(x), zeros
    work = _scan_work(dtype)
    x = ctx.cast(x, work)
    if work.is_floating_point:
        start_value = float("-inf") if maximum else float("inf")
    else:
        info = torch.iinfo(work)
        start_value = info.min if maximum else info.max
    rest = S.shape_without(ctx, self, ax)
    positions = ctx.op.Range(ctx.const(0, i64), S.dim_0d(ctx, self, ax), ctx.const(1, i64))

    def body(sub, states, slices):
        best, best_index = states
        value, position = slices
        # torch takes the newest of equal values, and a NaN once seen sticks.
        better = sub.op.GreaterOrEqual(value, best) if maximum else sub.op.LessOrEqual(value, best)
        if work.is_floating_point:
            better = sub.op.Or(
                sub.op.IsNaN(value), sub.op.And(sub.op.Not(sub.op.IsNaN(best)), better)
            )
        new_best = sub.op.Where(better, value, best)
        new_index = sub.op.Where(better, position, best_index)
        return [new_best, new_index], [new_best, new_index]

    starts = [
        S.constant_of_shape(ctx, rest, start_value, work),
        S.constant_of_shape(ctx, rest, 0, i64),
    ]
    _, _, values, indices = _subgraph.scan_along(
        ctx,
        [x, positions],
        [ax, 0],
        starts,
        body,
        [work, i64],
        [work, i64],
        "cummax" if maximum else "cummin",
        out_axis=ax,
    )
    return ctx.cast(values, dtype), indices


@translates(aten.cummax.default)
def cummax(ctx, self, dim):
    return _cumulative_extremum(ctx, self, dim, maximum=True)


@translates(aten.cummin.default)
def cummin(ctx, self, dim):
    return _cumulative_extremum(ctx, self, dim, maximum=False)


# ----------------------------------------------------------------------- order statistics
def _as_vector(ctx, x):
    """A 0-d tensor as shape [1] (order statistics need an axis)."""
    return S.with_shape(S.reshape(ctx, x, [1], allowzero=False), [1]) if ctx.rank(x) == 0 else x


def _kth_smallest(ctx, x, k, ax, keepdim, rank):
    """Values and indices of the k-th smallest (1-based ``k``: int or 0-d value) along ``ax``."""
    values, indices = nx.topk(ctx, x, k, ax, largest=False)
    if isinstance(k, ir.Value):
        last = ctx.op.Sub(ctx.cast(k, i64), ctx.const(1, i64))
    else:
        last = ctx.const(int(k) - 1, i64)
    if keepdim and rank > 0:
        last = ctx.op.Reshape(last, ctx.const([1], i64))
    return ctx.op.Gather(values, last, axis=ax), ctx.op.Gather(indices, last, axis=ax)


def _middle(ctx, n):
    """1-based position of the lower median among ``n`` values (int or 0-d value)."""
    if isinstance(n, int):
        return (n - 1) // 2 + 1
    return ctx.op.Add(
        ctx.op.Div(ctx.op.Sub(n, ctx.const(1, i64)), ctx.const(2, i64)), ctx.const(1, i64)
    )


@translates(aten.kthvalue.default)
def kthvalue(ctx, self, k, dim=-1, keepdim=False):
    rank = ctx.rank(self)
    x = _as_vector(ctx, self)
    return _kth_smallest(ctx, x, k, S.axis(dim, rank), keepdim, rank)


def _median_dim(ctx, self, dim, keepdim, ignore_nan: bool):
    value, where = _median_work(ctx, self, dim, keepdim, ignore_nan)
    return ctx.cast(value, ctx.dtype(self)), where


def _median_work(ctx, self, dim, keepdim, ignore_nan: bool):
    """Median values (in a dtype onnxruntime sorts and selects in) and their indices."""
    rank = ctx.rank(self)
    dtype = R.reduce_dtype("TopK", ctx.dtype(self))
    x = ctx.cast(self, dtype)
    if rank == 0:
        x = S.with_shape(S.reshape(ctx, x, [1], allowzero=False), [1])
    ax = S.axis(dim, rank)
    floating = dtype.is_floating_point
    if ignore_nan and floating:
        valid = ctx.op.Not(ctx.op.IsNaN(x))
        n = R.reduce(ctx, "ReduceSum", ctx.cast(valid, i64), [ax], False)
        position = ctx.op.Max(_middle(ctx, n), ctx.const(1, i64))
        values, indices = nx.topk(ctx, x, S.dim_size(ctx, x, ax), ax, largest=False)
        index = ctx.op.Sub(position, ctx.const(1, i64))
        index = ctx.op.Unsqueeze(index, ctx.const([ax], i64))
        value = ctx.op.GatherElements(values, index, axis=ax)
        where = ctx.op.GatherElements(indices, index, axis=ax)
        if not keepdim or rank == 0:
            value = _squeeze(ctx, value, [ax], max(rank, 1))
            where = _squeeze(ctx, where, [ax], max(rank, 1))
        if rank == 0:
            value = ctx.op.Reshape(value, ctx.const([], i64))
            where = ctx.op.Reshape(where, ctx.const([], i64))
        return value, where
    n = S.dim_size(ctx, x, ax)
    middle = _middle(ctx, n if S.is_static(n) else S.as_0d(ctx, n))
    value, where = _kth_smallest(ctx, x, middle, ax, keepdim, rank)
    if floating:
        # torch's median is NaN (at the first NaN) as soon as the slice has one.
        is_nan = ctx.op.IsNaN(x)
        has_nan = _any_true(ctx, is_nan, [ax], keepdim and rank > 0)
        first_nan = ctx.op.ArgMax(
            ctx.cast(is_nan, torch.uint8), axis=ax, keepdims=int(keepdim and rank > 0)
        )
        if rank == 0:
            has_nan = ctx.op.Reshape(has_nan, ctx.const([], i64))
            first_nan = ctx.op.Reshape(first_nan, ctx.const([], i64))
        value = ctx.op.Where(has_nan, nx.nan_of(ctx, dtype), value)
        where = ctx.op.Where(has_nan, first_nan, where)
    return value, where


@translates(aten.median.dim)
def median_dim(ctx, self, dim, keepdim=False):
    return _median_dim(ctx, self, dim, keepdim, ignore_nan=False)


@translates(aten.nanmedian.dim)
def nanmedian_dim(ctx, self, dim, keepdim=False):
    return _median_dim(ctx, self, dim, keepdim, ignore_nan=True)


@translates(aten.median.default)
def median(ctx, self):
    return _median_dim(ctx, S.flatten(ctx, self), 0, False, ignore_nan=False)[0]


@translates(aten.nanmedian.default)
def nanmedian(ctx, self):
    return _median_dim(ctx, S.flatten(ctx, self), 0, False, ignore_nan=True)[0]


@translates(aten.mode.default)
def mode(ctx, self, dim=-1, keepdim=False):
    rank = ctx.rank(self)
    dtype = ctx.dtype(self)
    x = _as_vector(ctx, self)
    ax = S.axis(dim, rank)
    work = R.reduce_dtype("ReduceMax", dtype)
    xw = ctx.cast(x, work)
    # Count, for every element, the equal elements in its slice (pairwise comparison).
    pairs = ctx.op.Equal(
        ctx.op.Unsqueeze(xw, ctx.const([ax + 1], i64)), ctx.op.Unsqueeze(xw, ctx.const([ax], i64))
    )
    counts = R.reduce(ctx, "ReduceSum", ctx.cast(pairs, i64), [ax + 1], False)
    most = R.reduce(ctx, "ReduceMax", counts, [ax], True)
    if work.is_floating_point:
        biggest = float("inf")
    else:
        biggest = torch.iinfo(work).max
    candidates = ctx.op.Where(ctx.op.Equal(counts, most), xw, ctx.const(biggest, work))
    # Among equally frequent values torch picks the smallest, at its last position.
    value = R.reduce(ctx, "ReduceMin", candidates, [ax], True)
    hits = ctx.cast(ctx.op.Equal(xw, value), torch.uint8)
    index = ctx.op.ArgMax(hits, axis=ax, keepdims=1, select_last_index=1)
    value = ctx.cast(value, dtype)
    if not keepdim or rank == 0:
        value = _squeeze(ctx, value, [ax], 1 if rank == 0 else rank)
        index = _squeeze(ctx, index, [ax], 1 if rank == 0 else rank)
    return value, index


# ---------------------------------------------------------------------- histc / bincount
def _data_range(ctx, x, low, high, widen):
    """Outer bin edges: the given range, else the data's min and max (widened when equal)."""
    work = ctx.dtype(x)
    if low is not None and low != high:
        return ctx.const(low, work), ctx.const(high, work)
    low = extremum(ctx, "ReduceMin", x, None, False)
    high = extremum(ctx, "ReduceMax", x, None, False)
    same = ctx.op.Equal(low, high)
    step = ctx.const(widen, work)
    return (
        ctx.op.Where(same, ctx.op.Sub(low, step), low),
        ctx.op.Where(same, ctx.op.Add(high, step), high),
    )


def _bin_totals(ctx, index, bins, weights, work):
    """Sum of ``weights`` (or counts) per bin; index ``bins`` collects what is dropped."""
    zeros = S.constant_of_shape(ctx, ctx.const([bins + 1], i64), 0, work)
    if weights is None:
        weights = ctx.op.Expand(ctx.const(1, work), ctx.op.Shape(index))
    totals = ctx.op.ScatterElements(zeros, index, weights, axis=0, reduction="add")
    return ctx.op.Slice(totals, ctx.const([0], i64), ctx.const([bins], i64))


@translates(aten.histc.default)
def histc(ctx, self, bins=100, min=0, max=0):
    out = ctx.out_dtype
    work = R.float_work(out)
    x = S.flatten(ctx, ctx.cast(self, work))
    low, high = _data_range(ctx, x, min, max, 1.0)
    index = nx.bin_index(ctx, x, low, high, bins)
    return ctx.cast(_bin_totals(ctx, index, bins, None, work), out)


@translates(aten.bincount.default)
def bincount(ctx, self, weights=None, minlength=0):
    out = ctx.out_dtype
    work = i64 if weights is None else _scan_work(out)
    index = ctx.cast(self, i64)
    largest = R.reduce(ctx, "ReduceMax", index, None, True)
    length = ctx.op.Max(
        ctx.op.Add(largest, ctx.const([1], i64)),
        ctx.op.Reshape(ctx.scalar(minlength, i64), ctx.const([1], i64)),
    )
    zeros = S.constant_of_shape(ctx, length, 0, work)
    if weights is None:
        updates = ctx.op.Expand(ctx.const(1, work), ctx.op.Shape(index))
    else:
        updates = ctx.cast(weights, work)
    counts = ctx.op.ScatterElements(zeros, index, updates, axis=0, reduction="add")
    return ctx.cast(counts, out)
