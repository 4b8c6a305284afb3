"""Tensor creation: ranges, constant fills (and their new_ variants), eye, triangle indices.
Sizes may be symbolic; fills never bake a symbolic size into the graph. (The _like fills and
scalar_tensor live in elementwise.py.)"""

from __future__ import annotations

import onnx_ir as ir
import torch

from torch_onnx_conformance.exporter.ops import _kernels
from torch_onnx_conformance.exporter.ops import _shape as S
from torch_onnx_conformance.exporter.ops._registry import translates

aten = torch.ops.aten

_RANGE_INT_DTYPES = (torch.int16, torch.int32, torch.int64)


def _out_dtype(ctx, dtype=None) -> torch.dtype:
    out = ctx.out_dtype
    if out is not None:
        return out
    return dtype or torch.get_default_dtype()


def _number(ctx, value, dtype: torch.dtype) -> ir.Value:
    """A 0-d value of ``dtype`` from a Python number, a SymInt/SymFloat value or a 0-d tensor."""
    if isinstance(value, ir.Value):
        value = ctx.cast(value, dtype)
        return value if ctx.rank(value) == 0 else ctx.op.Reshape(value, [])
    return ctx.const(value, dtype)


def _is_integral(value) -> bool:
    if isinstance(value, ir.Value):
        dtype = value.dtype
        return dtype is not None and dtype.is_integer()
    return isinstance(value, int)


# ----------------------------------------------------------------------------- ranges
def _count(ctx, start, end, step) -> S.Size:
    """Number of arange elements: the metadata's when static, else ceil((end-start)/step)."""
    n = S.out_shape(ctx)[0]
    if S.is_static(n):
        return n
    f64 = torch.float64
    span = ctx.op.Sub(_number(ctx, end, f64), _number(ctx, start, f64))
    n = ctx.op.Ceil(ctx.op.Div(span, _number(ctx, step, f64)))
    return ctx.op.Reshape(ctx.op.Max(ctx.cast(n, torch.int64), ctx.const(0, torch.int64)), [1])


def arange_values(ctx, start, end, step, dtype: torch.dtype) -> ir.Value:
    if all(_is_integral(v) for v in (start, end, step)) and not dtype.is_floating_point:
        i64 = torch.int64
        values = ctx.op.Range(
            _number(ctx, start, i64), _number(ctx, end, i64), _number(ctx, step, i64)
        )
        return ctx.cast(values, dtype)
    # torch computes start + i * step (not a running sum), so rounding does not accumulate.
    work = torch.float64
    n = _count(ctx, start, end, step)
    zero, one = ctx.const(0, torch.int64), ctx.const(1, torch.int64)
    index = ctx.cast(ctx.op.Range(zero, S.as_0d(ctx, n), one), work)
    values = ctx.op.Add(ctx.op.Mul(index, _number(ctx, step, work)), _number(ctx, start, work))
    return ctx.cast(values, dtype)


@translates(aten.arange.default)
def arange(ctx, end, *, dtype=None, layout=None, device=None, pin_memory=None):
    return arange_values(ctx, 0, end, 1, _out_dtype(ctx, dtype))


@translates(aten.arange.start)
def arange_start(ctx, start, end, *, dtype=None, layout=None, device=None, pin_memory=None):
    return arange_values(ctx, start, end, 1, _out_dtype(ctx, dtype))


@translates(aten.arange.start_step)
def arange_start_step(
    ctx, start, end, step=1, *, dtype=None, layout=None, device=None, pin_memory=None
):
    return arange_values(ctx, start, end, step, _out_dtype(ctx, dtype))


def _lin(ctx, start, end, steps: int, dtype: torch.dtype) -> ir.Value:
    """torch's linspace: start + i*step in the first half, end - (steps-1-i)*step after, so
    both ends are exact. Integer results are computed in float64 and truncated, like torch."""
    work = (
        dtype
        if dtype in (torch.float32, torch.float64)
        else (torch.float64 if not dtype.is_floating_point else torch.float32)
    )
    first, last = _number(ctx, start, work), _number(ctx, end, work)
    if steps == 1:
        return ctx.op.Reshape(first, [1])
    step = ctx.op.Div(ctx.op.Sub(last, first), ctx.const(steps - 1, work))
    index = ctx.op.Range(
        ctx.const(0, torch.int64), ctx.const(steps, torch.int64), ctx.const(1, torch.int64)
    )
    findex = ctx.cast(index, work)
    rising = ctx.op.Add(first, ctx.op.Mul(step, findex))
    falling = ctx.op.Sub(last, ctx.op.Mul(step, ctx.op.Sub(ctx.const(steps - 1, work), findex)))
    return ctx.op.Where(ctx.op.Less(index, ctx.const(steps // 2, torch.int64)), rising, falling)


def _steps(steps) -> int:
    if isinstance(steps, ir.Value):
        raise ValueError(
            "linspace/logspace with a symbolic number of steps is not supported; pass a Python int"
        )
    return int(steps)


@translates(
    aten.linspace.default,
    aten.linspace.Tensor_Tensor,
    aten.linspace.Tensor_Scalar,
    aten.linspace.Scalar_Tensor,
)
def linspace(ctx, start, end, steps, *, dtype=None, layout=None, device=None, pin_memory=None):
    dtype = _out_dtype(ctx, dtype)
    steps = _steps(steps)
    if steps == 0:
        return S.constant_of_shape(ctx, [0], 0, dtype)
    return ctx.cast(_lin(ctx, start, end, steps, dtype), dtype)


@translates(
    aten.logspace.default,
    aten.logspace.Tensor_Tensor,
    aten.logspace.Tensor_Scalar,
    aten.logspace.Scalar_Tensor,
)
def logspace(
    ctx, start, end, steps, base=10.0, *, dtype=None, layout=None, device=None, pin_memory=None
):
    dtype = _out_dtype(ctx, dtype)
    steps = _steps(steps)
    if steps == 0:
        return S.constant_of_shape(ctx, [0], 0, dtype)
    exponents = _lin(ctx, start, end, steps, dtype)
    work = ctx.dtype(exponents)
    return ctx.cast(ctx.op.Pow(ctx.const(float(base), work), exponents), dtype)


# ------------------------------------------------------------------------------ fills
def fill(ctx, shape: ir.Value, value, dtype: torch.dtype) -> ir.Value:
    if isinstance(value, ir.Value):
        return _kernels.data_op(ctx, "Expand", "Expand", _number(ctx, value, dtype), shape)
    if dtype.is_complex:
        raise ValueError("complex fills are not supported by the ONNX exporter")
    return S.constant_of_shape(ctx, shape, value, dtype)


@translates(aten.zeros.default, aten.empty.memory_format)
def zeros(ctx, size, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    # Uninitialised memory has no ONNX counterpart; zeros are a valid value for it.
    return fill(ctx, S.shape_arg(ctx, size), 0, _out_dtype(ctx, dtype))


@translates(aten.ones.default)
def ones(ctx, size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return fill(ctx, S.shape_arg(ctx, size), 1, _out_dtype(ctx, dtype))


@translates(aten.full.default)
def full(ctx, size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None):
    return fill(ctx, S.shape_arg(ctx, size), fill_value, _out_dtype(ctx, dtype))


@translates(aten.empty_strided.default)
def empty_strided(ctx, size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
    return fill(ctx, S.shape_arg(ctx, size), 0, _out_dtype(ctx, dtype))


@translates(aten.empty_permuted.default)
def empty_permuted(
    ctx, size, physical_layout, *, dtype=None, layout=None, device=None, pin_memory=None
):
    return fill(ctx, S.shape_arg(ctx, size), 0, _out_dtype(ctx, dtype))


@translates(aten.new_zeros.default, aten.new_empty.default)
def new_zeros(ctx, self, size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return fill(ctx, S.shape_arg(ctx, size), 0, _out_dtype(ctx, dtype))


@translates(aten.new_ones.default)
def new_ones(ctx, self, size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return fill(ctx, S.shape_arg(ctx, size), 1, _out_dtype(ctx, dtype))


@translates(aten.new_full.default)
def new_full(ctx, self, size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None):
    return fill(ctx, S.shape_arg(ctx, size), fill_value, _out_dtype(ctx, dtype))


@translates(aten.new_empty_strided.default)
def new_empty_strided(
    ctx, self, size, stride, *, dtype=None, layout=None, device=None, pin_memory=None
):
    return fill(ctx, S.shape_arg(ctx, size), 0, _out_dtype(ctx, dtype))


# ---------------------------------------------------------------------- eye, triangles
def _steps_to(ctx, n) -> ir.Value:
    return ctx.op.Range(
        ctx.const(0, torch.int64), S.as_0d(ctx, S.as_size(ctx, n)), ctx.const(1, torch.int64)
    )


@translates(aten.eye.default, aten.eye.m)
def eye(ctx, n, m=None, *, dtype=None, layout=None, device=None, pin_memory=None):
    rows = ctx.op.Unsqueeze(_steps_to(ctx, n), [1])
    cols = ctx.op.Unsqueeze(_steps_to(ctx, n if m is None else m), [0])
    return ctx.cast(ctx.op.Equal(rows, cols), _out_dtype(ctx, dtype))


def _triangle_indices(ctx, row, col, offset, upper: bool, dtype) -> ir.Value:
    dtype = _out_dtype(ctx, dtype)
    if all(S.is_static(v) for v in (row, col, offset)):
        make = torch.triu_indices if upper else torch.tril_indices
        return ctx.op.Identity(ctx.const(make(row, col, offset), dtype))
    # NonZero lists coordinates in row-major order, the order torch uses.
    shape = S.concat_sizes(ctx, [S.as_size(ctx, row), S.as_size(ctx, col)])
    ones = S.constant_of_shape(ctx, shape, 1, torch.int64)
    mask = ctx.op.Trilu(ones, ctx.scalar(offset), upper=int(upper))
    return ctx.cast(ctx.op.NonZero(mask), dtype)


@translates(aten.tril_indices.default)
def tril_indices(ctx, row, col, offset=0, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _triangle_indices(ctx, row, col, offset, False, dtype)


@translates(aten.triu_indices.default)
def triu_indices(ctx, row, col, offset=0, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _triangle_indices(ctx, row, col, offset, True, dtype)
