"""Integer number theory: gcd and lcm.

torch's CPU kernels run the Euclidean algorithm per element on ``|a|`` and ``|b|`` with C
semantics: ``abs`` of the most negative value wraps to itself and ``%`` truncates towards zero,
so ``gcd(INT64_MIN, 6) == -2``. The translation replays exactly that recurrence in an ONNX Loop
over the broadcast tensors, with a C-style remainder built from Div (which truncates), so it
agrees with torch bit for bit, the most negative value included. The Loop runs until every
remainder is zero; Euclid needs at most ~93 steps for 64-bit values (Fibonacci worst case).

Narrower dtypes compute in int64: onnxruntime lacks Mod/Div/Where kernels for some of them, and
no intermediate of the recurrence leaves the source dtype's range once ``abs`` has wrapped there.
"""

from __future__ import annotations

import onnx_ir as ir
import torch

from torch_onnx_conformance.exporter.ops import _subgraph
from torch_onnx_conformance.exporter.ops._registry import translates

aten = torch.ops.aten
i64 = torch.int64

_INTEGER_DTYPES = frozenset({torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8})
#: torch's lcm computes ``a / g * b`` in C's promoted ``int`` for these, so ``abs`` comes before
#: the wrap to the result dtype; int32/int64 wrap first and take ``abs`` of the wrapped value.
_PROMOTED_TO_C_INT = frozenset({torch.int8, torch.int16, torch.uint8})


def _check_dtype(ctx, what: str) -> torch.dtype:
    dtype = ctx.out_dtype
    if dtype not in _INTEGER_DTYPES:
        raise TypeError(
            f"{what} is defined for integer tensors (int8, int16, int32, int64, uint8), got "
            f"{dtype}; cast the inputs to an integer dtype first"
        )
    return dtype


def _wrapped_abs(ctx, x: ir.Value, dtype: torch.dtype) -> ir.Value:
    """``abs`` in ``dtype`` (the most negative value maps to itself), returned as int64."""
    wide = ctx.cast(x, i64)
    if dtype == torch.uint8:
        return wide
    magnitude = ctx.op.Abs(wide)
    if dtype == i64:
        return magnitude
    # |INT_MIN| of a narrower dtype fits int64; the round trip wraps it back like C's abs.
    return ctx.cast(ctx.cast(magnitude, dtype), i64)


def _truncated_remainder(ctx, dividend: ir.Value, divisor: ir.Value) -> ir.Value:
    """C's ``%`` (sign of the dividend); ``divisor`` must be non-zero."""
    return ctx.op.Sub(dividend, ctx.op.Mul(ctx.op.Div(dividend, divisor), divisor))


def _any_nonzero(ctx, x: ir.Value) -> ir.Value:
    # A count, not ReduceMax, so an empty tensor gives False instead of a reduction error.
    count = ctx.op.ReduceSum(
        ctx.cast(ctx.op.Not(ctx.op.Equal(x, ctx.const(0, i64))), i64),
        ctx.const([], i64),
        keepdims=0,
    )
    return ctx.op.Greater(count, ctx.const(0, i64))


def _euclid(ctx, a: ir.Value, b: ir.Value) -> ir.Value:
    """``calc_gcd`` of torch on int64 values that already went through ``abs``."""
    # Expand broadcasts both ways, so each carried tensor has the result's shape.
    a = ctx.op.Expand(a, ctx.op.Shape(b))
    b = ctx.op.Expand(b, ctx.op.Shape(a))

    def step(sub, _iteration, states):
        a, b = states
        zero = sub.const(0, i64)
        active = sub.op.Not(sub.op.Equal(a, zero))
        # Finished elements divide by 1 so no lane divides by zero; their results are masked.
        safe = sub.op.Where(active, a, sub.const(1, i64))
        remainder = _truncated_remainder(sub, b, safe)
        return [sub.op.Where(active, remainder, a), sub.op.Where(active, a, b)]

    # The first step runs even when every element is done; masking makes it a no-op.
    _, result = _subgraph.loop(
        ctx,
        None,
        [a, b],
        step,
        [i64, i64],
        "gcd_euclid",
        condition=lambda sub, states: _any_nonzero(sub, states[0]),
    )
    return result


def _gcd_int64(ctx, self: ir.Value, other: ir.Value, dtype: torch.dtype) -> ir.Value:
    return _euclid(ctx, _wrapped_abs(ctx, self, dtype), _wrapped_abs(ctx, other, dtype))


@translates(aten.gcd.default)
def gcd(ctx, self, other):
    dtype = _check_dtype(ctx, "gcd")
    self, other = ctx.promote(self, other, dtype=dtype)
    return ctx.cast(_gcd_int64(ctx, self, other, dtype), dtype)


@translates(aten.lcm.default)
def lcm(ctx, self, other):
    dtype = _check_dtype(ctx, "lcm")
    self, other = ctx.promote(self, other, dtype=dtype)
    g = _gcd_int64(ctx, self, other, dtype)
    a, b = ctx.cast(self, i64), ctx.cast(other, i64)
    zero, one, minus_one = ctx.const(0, i64), ctx.const(1, i64), ctx.const(-1, i64)
    is_zero = ctx.op.Equal(g, zero)
    # g == -1 only with INT64_MIN, where torch's a / g traps (SIGFPE); onnxruntime would trap
    # too, so that lane negates instead (two's complement wrap) and never divides.
    by_minus_one = ctx.op.Equal(g, minus_one)
    divisor = ctx.op.Where(ctx.op.Or(is_zero, by_minus_one), one, g)
    quotient = ctx.op.Where(by_minus_one, ctx.op.Neg(a), ctx.op.Div(a, divisor))
    product = ctx.op.Mul(quotient, b)
    if dtype in _PROMOTED_TO_C_INT:
        magnitude = ctx.op.Abs(product)
    else:
        magnitude = ctx.op.Abs(ctx.cast(ctx.cast(product, dtype), i64))
    result = ctx.op.Where(is_zero, zero, magnitude)
    return ctx.cast(result, dtype)
