"""Math that ONNX has no single operator for, built from ops onnxruntime runs everywhere.

Every function takes a ``ctx`` and float values of one dtype and returns a value of that dtype.
Callers choose the dtype (see ``_kernels.opmath_dtype``: float16 is computed in float32, the way
torch computes it). The formulas favour accuracy near the points where the naive expression
loses it (log1p near 0, erfc in the tail, erfinv near +-1), because models use these functions
exactly there.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import onnx_ir as ir

from torch_onnx_conformance.exporter.ops import _kernels

if TYPE_CHECKING:
    from torch_onnx_conformance.exporter.ops._context import TranslationContext


def c(ctx: TranslationContext, value: float, like: ir.Value) -> ir.Value:
    """A 0-d constant with ``like``'s dtype."""
    return ctx.scalar_like(value, like)


def polynomial(ctx: TranslationContext, x: ir.Value, coefficients: list[float]) -> ir.Value:
    """Horner evaluation; ``coefficients`` run from the highest power to the constant."""
    acc = c(ctx, coefficients[0], x)
    for k in coefficients[1:]:
        acc = ctx.op.Add(ctx.op.Mul(acc, x), c(ctx, k, x))
    return acc


def trunc(ctx: TranslationContext, x: ir.Value) -> ir.Value:
    # Flooring |x| never overflows (unlike a cast to int). The sign goes back on with a Mul,
    # which keeps trunc(-0.5) == -0.0 like torch; onnxruntime's Where can drop a -0.0.
    return ctx.op.Mul(
        ctx.op.Floor(ctx.op.Abs(x)), sign_factor(ctx, ctx.op.Less(x, c(ctx, 0, x)), x)
    )


def sign_factor(ctx: TranslationContext, negative: ir.Value, like: ir.Value) -> ir.Value:
    """-1 where ``negative`` is true, else 1, in ``like``'s dtype (for a sign-exact Mul)."""
    as_number = ctx.cast(negative, ctx.dtype(like))
    return ctx.op.Sub(c(ctx, 1, like), ctx.op.Add(as_number, as_number))


def signbit(ctx: TranslationContext, x: ir.Value) -> ir.Value:
    """True for negative numbers and -0.0 (1/-0.0 is -inf)."""
    zero = c(ctx, 0, x)
    negative_zero = ctx.op.And(ctx.op.Equal(x, zero), ctx.op.Less(ctx.op.Reciprocal(x), zero))
    return ctx.op.Or(ctx.op.Less(x, zero), negative_zero)


def log1p(ctx: TranslationContext, x: ir.Value) -> ir.Value:
    # Kahan: log(u) * x / (u - 1) with u = 1 + x cancels the rounding error of u, so tiny x
    # keeps full relative precision instead of collapsing to 0.
    one = c(ctx, 1, x)
    u = ctx.op.Add(x, one)
    u_minus_one = ctx.op.Sub(u, one)
    log_u = ctx.op.Log(u)
    corrected = ctx.op.Mul(log_u, ctx.op.Div(x, u_minus_one))
    small = ctx.op.Where(ctx.op.Equal(u_minus_one, c(ctx, 0, x)), x, corrected)
    return ctx.op.Where(ctx.op.IsInf(x), log_u, small)


def expm1(ctx: TranslationContext, x: ir.Value) -> ir.Value:
    # Kahan's counterpart of log1p: (u - 1) * x / log(u) with u = exp(x), for |x| < 1.
    one = c(ctx, 1, x)
    u = ctx.op.Exp(x)
    u_minus_one = ctx.op.Sub(u, one)
    corrected = ctx.op.Mul(u_minus_one, ctx.op.Div(x, ctx.op.Log(u)))
    near_zero = ctx.op.Where(ctx.op.Equal(u, one), x, corrected)
    return ctx.op.Where(ctx.op.Less(ctx.op.Abs(x), one), near_zero, u_minus_one)


def softplus(ctx: TranslationContext, x: ir.Value) -> ir.Value:
    """log(1 + exp(x)) without overflow."""
    if ctx.dtype(x) in _kernels.SUPPORTED["Softplus"]:
        return ctx.op.Softplus(x)
    zero = c(ctx, 0, x)
    return ctx.op.Add(ctx.op.Max(x, zero), log1p(ctx, ctx.op.Exp(ctx.op.Neg(ctx.op.Abs(x)))))


# Chebyshev fit of erfc(z) = t * exp(-z^2 + P(t)), t = 1 / (1 + z/2), relative error < 1.2e-7
# for every z >= 0 (Press et al., Numerical Recipes, section 6.2).
_ERFC_COEFFICIENTS = [
    0.17087277,
    -0.82215223,
    1.48851587,
    -1.13520398,
    0.27886807,
    -0.18628806,
    0.09678418,
    0.37409196,
    1.00002368,
    -1.26551223,
]


def erfc(ctx: TranslationContext, x: ir.Value) -> ir.Value:
    # 1 - erf(x) cancels to 0 for x > ~4 in float32; the fit keeps the relative precision of
    # the tail, where erfc is used (normal tail probabilities).
    # erfc underflows to 0 long before 30; the cap keeps inf out of the splitting below.
    z = ctx.op.Min(ctx.op.Abs(x), c(ctx, 30, x))
    t = ctx.op.Reciprocal(ctx.op.Add(c(ctx, 1, x), ctx.op.Mul(z, c(ctx, 0.5, x))))
    # exp(-z^2) loses the low bits of z^2 (z^2 ~ 80 in the tail). Split z = hi + lo with hi a
    # multiple of 1/16, so hi^2 is exact and z^2 - hi^2 = lo * (z + hi) is small and accurate.
    sixteen = c(ctx, 16, x)
    hi = ctx.op.Div(ctx.op.Floor(ctx.op.Mul(z, sixteen)), sixteen)
    rest = ctx.op.Mul(ctx.op.Sub(z, hi), ctx.op.Add(z, hi))
    exponent = ctx.op.Sub(polynomial(ctx, t, _ERFC_COEFFICIENTS), rest)
    tail = ctx.op.Mul(
        ctx.op.Mul(t, ctx.op.Exp(ctx.op.Neg(ctx.op.Mul(hi, hi)))), ctx.op.Exp(exponent)
    )
    return ctx.op.Where(ctx.op.Less(x, c(ctx, 0, x)), ctx.op.Sub(c(ctx, 2, x), tail), tail)


# Giles, "Approximating the erfinv function" (GPU Computing Gems, 2011), single precision:
# erfinv(x) = x * P(w), w = -log(1 - x^2), with one polynomial for the centre (w < 5) and
# one for the tails.
_ERFINV_CENTRE = [
    2.81022636e-08,
    3.43273939e-07,
    -3.5233877e-06,
    -4.39150654e-06,
    0.00021858087,
    -0.00125372503,
    -0.00417768164,
    0.246640727,
    1.50140941,
]
_ERFINV_TAIL = [
    -0.000200214257,
    0.000100950558,
    0.00134934322,
    -0.00367342844,
    0.00573950773,
    -0.0076224613,
    0.00943887047,
    1.00167406,
    2.83297682,
]


# Below 0.9 one Newton step on erf(y) = x halves the fit's error; above, the step is limited
# by Erf's own rounding (the slope of erf is small there) and makes it worse.
NEWTON_LIMIT = 0.9


def erfinv(ctx: TranslationContext, x: ir.Value) -> ir.Value:
    one = c(ctx, 1, x)
    w = ctx.op.Neg(ctx.op.Log(ctx.op.Mul(ctx.op.Sub(one, x), ctx.op.Add(one, x))))
    centre = polynomial(ctx, ctx.op.Sub(w, c(ctx, 2.5, x)), _ERFINV_CENTRE)
    tail = polynomial(ctx, ctx.op.Sub(ctx.op.Sqrt(w), c(ctx, 3, x)), _ERFINV_TAIL)
    y = ctx.op.Mul(ctx.op.Where(ctx.op.Less(w, c(ctx, 5, x)), centre, tail), x)
    slope = ctx.op.Mul(c(ctx, 2 / math.sqrt(math.pi), x), ctx.op.Exp(ctx.op.Neg(ctx.op.Mul(y, y))))
    refined = ctx.op.Sub(y, ctx.op.Div(ctx.op.Sub(_erf(ctx, y), x), slope))
    y = ctx.op.Where(ctx.op.Less(ctx.op.Abs(x), c(ctx, NEWTON_LIMIT, x)), refined, y)
    # At +-1 the polynomials see w = inf; erfinv(+-1) is +-inf.
    return ctx.op.Where(ctx.op.Equal(ctx.op.Abs(x), one), ctx.op.Mul(x, c(ctx, math.inf, x)), y)


def _erf(ctx: TranslationContext, x: ir.Value) -> ir.Value:
    return _kernels.call(ctx, "Erf", x)


def gelu(ctx: TranslationContext, x: ir.Value, approximate: str) -> ir.Value:
    """0.5 x (1 + erf(x / sqrt 2)), or with tanh(sqrt(2/pi) (x + 0.044715 x^3))."""
    half = c(ctx, 0.5, x)
    if approximate == "tanh":
        inner = ctx.op.Mul(
            c(ctx, math.sqrt(2 / math.pi), x),
            ctx.op.Add(x, ctx.op.Mul(c(ctx, 0.044715, x), ctx.op.Mul(x, ctx.op.Mul(x, x)))),
        )
        gate = _kernels.call(ctx, "Tanh", inner)
    else:
        gate = _erf(ctx, ctx.op.Mul(x, c(ctx, 1 / math.sqrt(2), x)))
    return ctx.op.Mul(ctx.op.Mul(x, half), ctx.op.Add(c(ctx, 1, x), gate))
