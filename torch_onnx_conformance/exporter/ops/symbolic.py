"""Arithmetic on symbolic sizes and scalars: Python operators, math, torch.sym_* and item().

With dynamic shapes, the FX graph computes sizes with plain Python operators on SymInts
(``operator.mul(sym_size, 2)``), and data-dependent scalars come from ``aten.item``. Every such
value travels as a 0-d ONNX tensor: int64 for SymInt, float32 for SymFloat, bool for SymBool
(the translator's convention). Operands may also be Python numbers.

``aten.sym_size`` and friends read tensor metadata; they live with the views in ``shape.py``.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import onnx_ir as ir
import torch

from torch_onnx_conformance.exporter.ops._registry import translates

aten = torch.ops.aten


def _kind_dtype(x: Any) -> torch.dtype | None:
    """The ONNX-side dtype of a symbolic value or Python number (bool before int: bool is int)."""
    if isinstance(x, (torch.SymBool, bool)):
        return torch.bool
    if isinstance(x, (torch.SymInt, int)):
        return torch.int64
    if isinstance(x, (torch.SymFloat, float)):
        return torch.float32
    return None


def _out_dtype(ctx, *operands: Any) -> torch.dtype:
    dtype = _kind_dtype(ctx.out)
    if dtype is not None:
        return dtype
    # No metadata: Python's own promotion (bool < int < float).
    kinds = [ctx.dtype(x) for x in operands]
    if any(k is not None and k.is_floating_point for k in kinds):
        return torch.float32
    if all(k == torch.bool for k in kinds):
        return torch.bool
    return torch.int64


def _scalar(ctx, x: Any, dtype: torch.dtype) -> ir.Value:
    if isinstance(x, ir.Value):
        x = ctx.op.Reshape(x, []) if ctx.rank(x) not in (0, None) else x
        return ctx.cast(x, dtype)
    return ctx.const(x, dtype)


def _compute_dtype(ctx, *operands: Any) -> torch.dtype:
    """Common dtype of operands for arithmetic and comparisons (bool computes as int64)."""
    kinds = [ctx.dtype(x) for x in operands]
    if any(k is not None and k.is_floating_point for k in kinds):
        return torch.float32
    return torch.int64


# ------------------------------------------------------------------------- arithmetic
def _binary(onnx_op: str):
    def translation(ctx, a, b):
        dtype = _out_dtype(ctx, a, b)
        compute = dtype if dtype != torch.bool else _compute_dtype(ctx, a, b)
        x, y = _scalar(ctx, a, compute), _scalar(ctx, b, compute)
        return ctx.cast(getattr(ctx.op, onnx_op)(x, y), dtype)

    translation.__qualname__ = translation.__name__ = f"sym_{onnx_op.lower()}"
    return translation


translates(operator.add)(_binary("Add"))
translates(operator.sub)(_binary("Sub"))
translates(operator.mul)(_binary("Mul"))


@translates(operator.truediv)
def sym_truediv(ctx, a, b):
    return ctx.op.Div(_scalar(ctx, a, torch.float32), _scalar(ctx, b, torch.float32))


@translates(operator.floordiv)
def sym_floordiv(ctx, a, b):
    dtype = _out_dtype(ctx, a, b)
    x, y = _scalar(ctx, a, dtype), _scalar(ctx, b, dtype)
    if dtype.is_floating_point:
        return ctx.op.Floor(ctx.op.Div(x, y))
    # Python floors; integer Div truncates. Step down when the signs differ and it was inexact.
    quotient = ctx.op.Div(x, y)
    zero = ctx.const(0, dtype)
    inexact = ctx.op.Not(ctx.op.Equal(ctx.op.Mul(quotient, y), x))
    signs_differ = ctx.op.Xor(ctx.op.Less(x, zero), ctx.op.Less(y, zero))
    step = ctx.cast(ctx.op.And(inexact, signs_differ), dtype)
    return ctx.op.Sub(quotient, step)


@translates(operator.mod)
def sym_mod(ctx, a, b):
    dtype = _out_dtype(ctx, a, b)
    x, y = _scalar(ctx, a, dtype), _scalar(ctx, b, dtype)
    if not dtype.is_floating_point:
        return ctx.op.Mod(x, y)  # fmod=0 is Python's sign-of-divisor remainder
    return ctx.op.Sub(x, ctx.op.Mul(ctx.op.Floor(ctx.op.Div(x, y)), y))


@translates(operator.pow)
def sym_pow(ctx, a, b):
    dtype = _out_dtype(ctx, a, b)
    return ctx.op.Pow(_scalar(ctx, a, dtype), _scalar(ctx, b, dtype))


@translates(operator.neg)
def sym_neg(ctx, a):
    dtype = _out_dtype(ctx, a)
    return ctx.op.Neg(_scalar(ctx, a, dtype))


@translates(operator.pos)
def sym_pos(ctx, a):
    return ctx.op.Identity(_scalar(ctx, a, _out_dtype(ctx, a)))


@translates(operator.abs, abs)
def sym_abs(ctx, a):
    return ctx.op.Abs(_scalar(ctx, a, _out_dtype(ctx, a)))


# ------------------------------------------------------------------------ comparisons
def _comparison(onnx_op: str, negate: bool = False):
    def translation(ctx, a, b):
        dtype = _compute_dtype(ctx, a, b)
        out = getattr(ctx.op, onnx_op)(_scalar(ctx, a, dtype), _scalar(ctx, b, dtype))
        return ctx.op.Not(out) if negate else out

    translation.__qualname__ = translation.__name__ = (
        f"sym_{'not_' if negate else ''}{onnx_op.lower()}"
    )
    return translation


translates(operator.eq)(_comparison("Equal"))
translates(operator.ne)(_comparison("Equal", negate=True))
translates(operator.lt)(_comparison("Less"))
translates(operator.le)(_comparison("LessOrEqual"))
translates(operator.gt)(_comparison("Greater"))
translates(operator.ge)(_comparison("GreaterOrEqual"))


# ------------------------------------------------------------------------------ logic
@translates(operator.and_)
def sym_and(ctx, a, b):
    if _out_dtype(ctx, a, b) == torch.bool:
        return ctx.op.And(_scalar(ctx, a, torch.bool), _scalar(ctx, b, torch.bool))
    return ctx.op.BitwiseAnd(_scalar(ctx, a, torch.int64), _scalar(ctx, b, torch.int64))


@translates(operator.or_)
def sym_or(ctx, a, b):
    if _out_dtype(ctx, a, b) == torch.bool:
        return ctx.op.Or(_scalar(ctx, a, torch.bool), _scalar(ctx, b, torch.bool))
    return ctx.op.BitwiseOr(_scalar(ctx, a, torch.int64), _scalar(ctx, b, torch.int64))


@translates(operator.not_, torch.sym_not)
def sym_not(ctx, a):
    return ctx.op.Not(_scalar(ctx, a, torch.bool))


# ---------------------------------------------------------------- math and torch.sym_*
@translates(math.ceil)
def sym_ceil(ctx, a):
    return _to_int(ctx, a, "Ceil")


@translates(math.floor)
def sym_floor(ctx, a):
    return _to_int(ctx, a, "Floor")


@translates(math.trunc, torch.sym_int)
def sym_trunc(ctx, a):
    return _to_int(ctx, a, None)


def _to_int(ctx, a, rounding: str | None) -> ir.Value:
    if ctx.dtype(a) in (torch.int64, torch.bool):
        return _scalar(ctx, a, torch.int64)
    x = _scalar(ctx, a, torch.float32)
    if rounding is not None:
        x = getattr(ctx.op, rounding)(x)
    return ctx.cast(x, torch.int64)  # Cast truncates toward zero


@translates(math.sqrt, *[f for f in (getattr(torch, "_sym_sqrt", None),) if f is not None])
def sym_sqrt(ctx, a):
    return ctx.op.Sqrt(_scalar(ctx, a, torch.float32))


@translates(torch.sym_float)
def sym_float(ctx, a):
    return _scalar(ctx, a, torch.float32)


@translates(torch.sym_max)
def sym_max(ctx, a, b):
    dtype = _out_dtype(ctx, a, b)
    return ctx.op.Max(_scalar(ctx, a, dtype), _scalar(ctx, b, dtype))


@translates(torch.sym_min)
def sym_min(ctx, a, b):
    dtype = _out_dtype(ctx, a, b)
    return ctx.op.Min(_scalar(ctx, a, dtype), _scalar(ctx, b, dtype))


@translates(torch.sym_ite)
def sym_ite(ctx, condition, true_value, false_value):
    dtype = _out_dtype(ctx, true_value, false_value)
    where_dtype = torch.int64 if dtype == torch.bool else dtype  # no bool Where kernel
    out = ctx.op.Where(
        _scalar(ctx, condition, torch.bool),
        _scalar(ctx, true_value, where_dtype),
        _scalar(ctx, false_value, where_dtype),
    )
    return ctx.cast(out, dtype)


if hasattr(torch, "sym_sum"):

    @translates(torch.sym_sum)
    def sym_sum(ctx, args):
        args = list(args)
        dtype = _out_dtype(ctx, *args)
        if not args:
            return ctx.const(0, dtype)
        total = _scalar(ctx, args[0], dtype)
        for term in args[1:]:
            total = ctx.op.Add(total, _scalar(ctx, term, dtype))
        return ctx.op.Identity(total) if len(args) == 1 else total


# ---------------------------------------------------------------------- tensor -> scalar
@translates(aten._local_scalar_dense.default, aten.item.default)
def local_scalar_dense(ctx, self):
    dtype = _kind_dtype(ctx.out)
    if dtype is None:
        source = ctx.dtype(self)
        dtype = (
            torch.bool
            if source == torch.bool
            else (torch.float32 if source is not None and source.is_floating_point else torch.int64)
        )
    return ctx.cast(ctx.op.Reshape(self, []), dtype)
