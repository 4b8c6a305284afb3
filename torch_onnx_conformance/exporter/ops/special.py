"""Special functions (gamma family, incomplete gamma, zeta, Bessel, erfcx, ndtri) and the small
real/complex helpers (angle, complex, polar, ldexp, frexp).

ONNX has none of these, so each is a fixed formula: unrolled where it is short, an ONNX Loop of a
fixed trip count where a recurrence runs many steps (the same operations in the same order, so the
same bits; igamma: 167 nodes instead of 1,364). Every formula runs in float64
inside the graph (onnxruntime's CPU provider has float64 Add/Mul/Div/Log/Exp/Sin/Cos/Where) and
rounds once to the result dtype: recurrences and series that cancel in float32 are exact enough
in float64 to meet torch's float32 results at 1e-5.
"""

from __future__ import annotations

import math

import onnx_ir as ir
import torch

from torch_onnx_conformance.exporter.ops import _formulas as F
from torch_onnx_conformance.exporter.ops._registry import translates
from torch_onnx_conformance.exporter.ops._subgraph import loop

aten = torch.ops.aten
f64 = torch.float64


# ----------------------------------------------------------------------------- helpers
def _result_dtype(ctx, *inputs) -> torch.dtype:
    out = ctx.out_dtype
    if out is not None and out.is_floating_point:
        return out
    return torch.get_default_dtype()


def _k(ctx, value: float) -> ir.Value:
    return ctx.scalar_like(float(value), f64)


def _wide(ctx, x: ir.Value) -> ir.Value:
    return ctx.cast(x, f64)


def _where(ctx, cond, a, b):
    return ctx.op.Where(cond, a, b)


def _steps(ctx, steps: int, states: list[ir.Value], step, name: str) -> tuple[ir.Value, ...]:
    """A recurrence of ``steps`` fixed steps over float64 ``states`` as one ONNX Loop.

    ``step(body_ctx, k, states) -> states`` with ``k`` the step's number 1, 2, ... as a float64
    0-d value (exact: small integers), so the body makes the same float64 operations, in the same
    order, that unrolled steps with Python-number constants would: the same bits, in a graph of
    one body instead of ``steps`` copies. Each state must keep its shape from step to step.
    """

    def body(sub, iteration, carried):
        return step(sub, sub.op.Add(sub.cast(iteration, f64), _k(sub, 1)), carried)

    trips = ctx.const(steps, torch.int64)
    return loop(ctx, trips, states, body, [f64] * len(states), name)


def _filled(ctx, value: float, *like: ir.Value) -> ir.Value:
    """``value`` (float64) broadcast to the common shape of ``like``: a Loop's starting state."""
    out = _k(ctx, value)
    for v in like:
        out = ctx.op.Expand(out, ctx.op.Shape(v))
    return out


def _is_integer(ctx, x: ir.Value) -> ir.Value:
    return ctx.op.Equal(ctx.op.Floor(x), x)


def _sin_pi(ctx, x: ir.Value) -> ir.Value:
    # Reducing by the nearest integer first keeps sin(pi * x) accurate (and exactly 0 at integers)
    # for large |x|; the parity of that integer carries the sign.
    n = ctx.op.Round(x)
    r = ctx.op.Sub(x, n)
    odd = ctx.op.Equal(
        ctx.op.Sub(n, ctx.op.Mul(ctx.op.Floor(ctx.op.Mul(n, _k(ctx, 0.5))), _k(ctx, 2))), _k(ctx, 1)
    )
    s = ctx.op.Sin(ctx.op.Mul(r, _k(ctx, math.pi)))
    return _where(ctx, odd, ctx.op.Neg(s), s)


def _cos_pi(ctx, x: ir.Value) -> ir.Value:
    n = ctx.op.Round(x)
    r = ctx.op.Sub(x, n)
    odd = ctx.op.Equal(
        ctx.op.Sub(n, ctx.op.Mul(ctx.op.Floor(ctx.op.Mul(n, _k(ctx, 0.5))), _k(ctx, 2))), _k(ctx, 1)
    )
    s = ctx.op.Cos(ctx.op.Mul(r, _k(ctx, math.pi)))
    return _where(ctx, odd, ctx.op.Neg(s), s)


# ----------------------------------------------------------------------------- log gamma
# Lanczos approximation, g = 7, nine coefficients (relative error ~1e-15 for x >= 0.5).
_LANCZOS_G = 7.0
_LANCZOS = [
    0.99999999999980993,
    676.5203681218851,
    -1259.1392167224028,
    771.32342877765313,
    -176.61502916214059,
    12.507343278686905,
    -0.13857109526572012,
    9.9843695780195716e-6,
    1.5056327351493116e-7,
]


def _lgamma_positive(ctx, x: ir.Value) -> ir.Value:
    """log Gamma(x) for x >= 0.5 (float64)."""
    z = ctx.op.Sub(x, _k(ctx, 1))
    series = _k(ctx, _LANCZOS[0])
    for i, coefficient in enumerate(_LANCZOS[1:], start=1):
        series = ctx.op.Add(series, ctx.op.Div(_k(ctx, coefficient), ctx.op.Add(z, _k(ctx, i))))
    t = ctx.op.Add(z, _k(ctx, _LANCZOS_G + 0.5))
    return ctx.op.Add(
        ctx.op.Sub(ctx.op.Mul(ctx.op.Add(z, _k(ctx, 0.5)), ctx.op.Log(t)), t),
        ctx.op.Add(_k(ctx, 0.5 * math.log(2 * math.pi)), ctx.op.Log(series)),
    )


def lgamma64(ctx, x: ir.Value) -> ir.Value:
    """log|Gamma(x)| in float64, inf at the poles and at +-inf."""
    half = _k(ctx, 0.5)
    reflect = ctx.op.Less(x, half)
    safe = _where(ctx, ctx.op.IsInf(x), _k(ctx, 2), x)
    shifted = _where(ctx, reflect, ctx.op.Sub(_k(ctx, 1), safe), safe)
    positive = _lgamma_positive(ctx, shifted)
    # Gamma(x) Gamma(1 - x) = pi / sin(pi x)
    reflected = ctx.op.Sub(
        ctx.op.Sub(_k(ctx, math.log(math.pi)), ctx.op.Log(ctx.op.Abs(_sin_pi(ctx, safe)))),
        positive,
    )
    value = _where(ctx, reflect, reflected, positive)
    pole = ctx.op.Or(ctx.op.IsInf(x), ctx.op.And(reflect, _is_integer(ctx, x)))
    return _where(ctx, pole, _k(ctx, math.inf), value)


@translates(aten.lgamma.default)
def lgamma(ctx, self):
    return ctx.cast(lgamma64(ctx, _wide(ctx, self)), _result_dtype(ctx, self))


# ---------------------------------------------------------------------- digamma, polygamma
_SHIFT = 10  # recurrence steps before the asymptotic series (argument >= 10 there)


def _digamma_positive(ctx, x: ir.Value) -> ir.Value:
    """psi(x) for x > 0 (float64)."""

    def step(body, k, states):
        acc, y = states
        return [body.op.Sub(acc, body.op.Reciprocal(y)), body.op.Add(y, _k(body, 1))]

    acc, y = _steps(ctx, _SHIFT, [_filled(ctx, 0, x), x], step, "digamma_shift")
    inv2 = ctx.op.Reciprocal(ctx.op.Mul(y, y))
    # ln y - 1/(2y) - sum B_2k / (2k y^2k)
    tail = F.polynomial(
        ctx, inv2, [-691 / 32760, 1 / 132, -1 / 240, 1 / 252, -1 / 120, 1 / 12, 0.0]
    )
    asym = ctx.op.Sub(
        ctx.op.Sub(ctx.op.Log(y), ctx.op.Mul(_k(ctx, 0.5), ctx.op.Reciprocal(y))), tail
    )
    return ctx.op.Add(acc, asym)


def _cot_derivative_poly(n: int) -> list[float]:
    """Coefficients (highest power first) of P_n with d^n/dx^n cot(pi x) = pi^n P_n(cot(pi x))."""
    poly = [0.0, 1.0]  # lowest power first: c
    for _ in range(n):
        derivative = [i * poly[i] for i in range(1, len(poly))] or [0.0]
        # -(1 + c^2) * P'
        out = [0.0] * (len(derivative) + 2)
        for i, coefficient in enumerate(derivative):
            out[i] -= coefficient
            out[i + 2] -= coefficient
        poly = out
    return list(reversed(poly))


def _cot_pi(ctx, x: ir.Value) -> ir.Value:
    return ctx.op.Div(_cos_pi(ctx, x), _sin_pi(ctx, x))


def digamma64(ctx, x: ir.Value) -> ir.Value:
    negative = ctx.op.Less(x, _k(ctx, 0))
    finite = _where(ctx, ctx.op.IsInf(x), _k(ctx, 2), x)
    shifted = _where(ctx, negative, ctx.op.Sub(_k(ctx, 1), finite), finite)
    positive = _where(ctx, ctx.op.Equal(shifted, _k(ctx, 0)), _k(ctx, 1), shifted)
    psi = _digamma_positive(ctx, positive)
    # psi(x) = psi(1 - x) - pi cot(pi x)
    reflected = ctx.op.Sub(psi, ctx.op.Mul(_k(ctx, math.pi), _cot_pi(ctx, finite)))
    value = _where(ctx, negative, reflected, psi)
    # torch: psi(+-0) = -+inf, negative integers and -inf -> nan, +inf -> inf
    value = _where(ctx, ctx.op.And(negative, _is_integer(ctx, x)), _k(ctx, math.nan), value)
    zero = ctx.op.Equal(x, _k(ctx, 0))
    signed_inf = ctx.op.Div(_k(ctx, -1), x)
    value = _where(ctx, zero, signed_inf, value)
    return _where(ctx, ctx.op.IsInf(x, detect_negative=0), x, value)


@translates(aten.digamma.default)
def digamma(ctx, self):
    return ctx.cast(digamma64(ctx, _wide(ctx, self)), _result_dtype(ctx, self))


def _hurwitz_tail(ctx, s: ir.Value, a: ir.Value) -> ir.Value:
    """Euler-Maclaurin tail sum_{k>=0} (a+k)^-s for a >= 10 (float64, s > 1)."""
    a_pow = ctx.op.Pow(a, ctx.op.Neg(s))
    total = ctx.op.Add(
        ctx.op.Div(ctx.op.Mul(a, a_pow), ctx.op.Sub(s, _k(ctx, 1))),
        ctx.op.Mul(_k(ctx, 0.5), a_pow),
    )
    # B_2j / (2j)!; the rising factorial s (s+1) ... (s+2j-2) times a^(-s-2j+1)
    bernoulli = [1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6, -3617 / 510]
    coefficients = ctx.const(
        torch.tensor([b2j / math.factorial(2 * j) for j, b2j in enumerate(bernoulli, 1)], dtype=f64)
    )
    inv_a2 = ctx.op.Reciprocal(ctx.op.Mul(a, a))

    def step(body, j, states):
        total, factor, power = states
        coefficient = body.op.Gather(coefficients, body.op.Cast(body.op.Sub(j, _k(body, 1)), to=7))
        total = body.op.Add(total, body.op.Mul(body.op.Mul(coefficient, factor), power))
        two_j = body.op.Add(j, j)
        factor = body.op.Mul(
            factor,
            body.op.Mul(body.op.Add(s, body.op.Sub(two_j, _k(body, 1))), body.op.Add(s, two_j)),
        )
        return [total, factor, body.op.Mul(power, inv_a2)]

    power = ctx.op.Div(a_pow, a)  # a^(-s-1)
    states = [total, s, power]
    return _steps(ctx, len(bernoulli), states, step, "hurwitz_tail")[0]


def zeta64(ctx, s: ir.Value, q: ir.Value) -> ir.Value:
    """Hurwitz zeta(s, q) in float64, with Cephes/torch's domain rules."""
    minus_s = ctx.op.Neg(s)

    def step(body, k, states):
        acc, a = states
        return [body.op.Add(acc, body.op.Pow(a, minus_s)), body.op.Add(a, _k(body, 1))]

    acc, a = _steps(ctx, _SHIFT, [_filled(ctx, 0, s, q), q], step, "zeta_shift")
    value = ctx.op.Add(acc, _hurwitz_tail(ctx, s, a))
    one = _k(ctx, 1)
    nonpositive_q = ctx.op.LessOrEqual(q, _k(ctx, 0))
    value = _where(
        ctx, ctx.op.And(nonpositive_q, ctx.op.Not(_is_integer(ctx, s))), _k(ctx, math.nan), value
    )
    value = _where(ctx, ctx.op.And(nonpositive_q, _is_integer(ctx, q)), _k(ctx, math.inf), value)
    value = _where(ctx, ctx.op.Less(s, one), _k(ctx, math.nan), value)
    return _where(ctx, ctx.op.Equal(s, one), _k(ctx, math.inf), value)


@translates(aten.special_zeta.default)
def special_zeta(ctx, self, other):
    dtype = _result_dtype(ctx)
    s, q = ctx.promote(self, other, dtype=f64)
    return ctx.cast(zeta64(ctx, s, q), dtype)


def polygamma64(ctx, n: int, x: ir.Value) -> ir.Value:
    if n == 0:
        return digamma64(ctx, x)
    # psi^(n)(x) = (-1)^(n+1) n! zeta(n+1, x) for x > 0; reflection for x < 0:
    # psi^(n)(x) = (-1)^n psi^(n)(1-x) - pi^(n+1) P_n(cot(pi x))
    negative = ctx.op.Less(x, _k(ctx, 0))
    shifted = _where(ctx, negative, ctx.op.Sub(_k(ctx, 1), x), x)
    sign = (-1) ** (n + 1) * math.factorial(n)
    positive = ctx.op.Mul(_k(ctx, sign), zeta64(ctx, _k(ctx, n + 1), shifted))
    cot = _cot_pi(ctx, x)
    reflected = ctx.op.Sub(
        ctx.op.Mul(_k(ctx, (-1) ** n), positive),
        ctx.op.Mul(_k(ctx, math.pi ** (n + 1)), F.polynomial(ctx, cot, _cot_derivative_poly(n))),
    )
    return _where(ctx, negative, reflected, positive)


@translates(aten.polygamma.default)
def polygamma(ctx, n, self):
    if not isinstance(n, int):
        raise TypeError("polygamma: the order n must be a Python int known at export time")
    if n < 0:
        raise ValueError(f"polygamma: the order n must be >= 0, got {n}")
    dtype = _result_dtype(ctx, self)
    x = _wide(ctx, self)
    value = polygamma64(ctx, n, x)
    if n == 1 and dtype != f64:
        value = _where(
            ctx, ctx.op.Less(x, _k(ctx, 0.5)), _torch_trigamma_reflected(ctx, self, x), value
        )
    return ctx.cast(value, dtype)


@translates(aten.polygamma_.default)
def polygamma_inplace(ctx, self, n):
    # The in-place overload takes (self, n), the functional one (n, self): the automatic
    # in-place -> functional fallback would pass them swapped.
    return polygamma(ctx, n, self)


def _torch_trigamma_reflected(ctx, self: ir.Value, x: ir.Value) -> ir.Value:
    # torch's float trigamma reflects with sin(pi x) evaluated in float32, which is off by up to
    # ~1e-5 relative for |x| of a few units; OpInfo compares against that, so do the same.
    narrow = ctx.cast(self, torch.float32)
    sin_pi_x = _wide(ctx, ctx.op.Sin(ctx.op.Mul(narrow, ctx.scalar_like(math.pi, torch.float32))))
    pole_term = ctx.op.Div(_k(ctx, math.pi * math.pi), ctx.op.Mul(sin_pi_x, sin_pi_x))
    return ctx.op.Sub(pole_term, polygamma64(ctx, 1, ctx.op.Sub(_k(ctx, 1), x)))


# ----------------------------------------------------------------- incomplete gamma
_IGAMMA_STEPS = 60


def _guard_tiny(ctx, v: ir.Value) -> ir.Value:
    tiny = _k(ctx, 1e-30)
    return _where(ctx, ctx.op.Less(ctx.op.Abs(v), tiny), tiny, v)


def _igamma_recurrences(ctx, a, x):
    """Both incomplete-gamma recurrences, ``_IGAMMA_STEPS`` steps each, in one ONNX Loop.

    The series for P(a, x) = x^a e^-x / Gamma(a+1) * sum x^k / ((a+1)...(a+k)) (good for
    x < a + 1) and the Legendre continued fraction for Q(a, x) by modified Lentz (good for
    x >= a + 1). Returns (series sum, fraction value).
    """
    b = ctx.op.Sub(ctx.op.Add(x, _k(ctx, 1)), a)
    # Carried values keep one shape across iterations: the scalar starts are broadcast to a and
    # x's common shape (b's), which copies their values unchanged.
    one = _filled(ctx, 1, b)
    d = ctx.op.Reciprocal(_guard_tiny(ctx, b))
    states = [
        ctx.op.Expand(a, ctx.op.Shape(b)),  # series: denominator a + k
        one,  # series: term x^k / ((a+1)...(a+k))
        one,  # series: total
        b,  # fraction: b_k = x + 1 - a + 2k
        _filled(ctx, 1e30, b),  # fraction: Lentz's c
        d,  # fraction: Lentz's d
        d,  # fraction: the value h
    ]

    def step(body, i, carried):
        denominator, term, total, b, c, d, h = carried
        denominator = body.op.Add(denominator, _k(body, 1))
        term = body.op.Mul(term, body.op.Div(x, denominator))
        total = body.op.Add(total, term)
        an = body.op.Mul(body.op.Neg(i), body.op.Sub(i, a))
        b = body.op.Add(b, _k(body, 2))
        d = body.op.Reciprocal(_guard_tiny(body, body.op.Add(body.op.Mul(an, d), b)))
        c = _guard_tiny(body, body.op.Add(b, body.op.Div(an, c)))
        h = body.op.Mul(h, body.op.Mul(d, c))
        return [denominator, term, total, b, c, d, h]

    final = _steps(ctx, _IGAMMA_STEPS, states, step, "igamma_steps")
    return final[2], final[6]


def igamma64(ctx, a, x, upper: bool):
    zero, one = _k(ctx, 0), _k(ctx, 1)
    # Keep the formulas away from the special points; the Wheres below answer those.
    ok = ctx.op.And(ctx.op.Greater(a, zero), ctx.op.Greater(x, zero))
    ok = ctx.op.And(ok, ctx.op.Not(ctx.op.Or(ctx.op.IsInf(a), ctx.op.IsInf(x))))
    sa = _where(ctx, ok, a, one)
    sx = _where(ctx, ok, x, one)
    log_prefix = ctx.op.Sub(ctx.op.Mul(sa, ctx.op.Log(sx)), sx)
    use_series = ctx.op.Less(sx, ctx.op.Add(sa, one))
    total, fraction = _igamma_recurrences(ctx, sa, sx)
    # P(a, x) by the series, Q(a, x) by the fraction
    lower_series = ctx.op.Mul(
        ctx.op.Exp(ctx.op.Sub(log_prefix, lgamma64(ctx, ctx.op.Add(sa, one)))), total
    )
    upper_fraction = ctx.op.Mul(ctx.op.Exp(ctx.op.Sub(log_prefix, lgamma64(ctx, sa))), fraction)
    if upper:
        value = _where(ctx, use_series, ctx.op.Sub(one, lower_series), upper_fraction)
        at_zero_a, at_zero_x, at_inf_a, at_inf_x = zero, one, one, zero
    else:
        value = _where(ctx, use_series, lower_series, ctx.op.Sub(one, upper_fraction))
        at_zero_a, at_zero_x, at_inf_a, at_inf_x = one, zero, zero, one
    nan = _k(ctx, math.nan)
    # Same precedence as torch's calc_igamma / calc_igammac.
    value = _where(ctx, ctx.op.IsInf(x), at_inf_x, value)
    value = _where(ctx, ctx.op.IsInf(a), _where(ctx, ctx.op.IsInf(x), nan, at_inf_a), value)
    value = _where(ctx, ctx.op.Equal(x, zero), at_zero_x, value)
    value = _where(
        ctx, ctx.op.Equal(a, zero), _where(ctx, ctx.op.Greater(x, zero), at_zero_a, nan), value
    )
    invalid = ctx.op.Or(ctx.op.Less(x, zero), ctx.op.Less(a, zero))
    invalid = ctx.op.Or(invalid, ctx.op.Or(ctx.op.IsNaN(a), ctx.op.IsNaN(x)))
    return _where(ctx, invalid, nan, value)


@translates(aten.igamma.default)
def igamma(ctx, self, other):
    dtype = _result_dtype(ctx)
    a, x = ctx.promote(self, other, dtype=f64)
    return ctx.cast(igamma64(ctx, a, x, upper=False), dtype)


@translates(aten.igammac.default)
def igammac(ctx, self, other):
    dtype = _result_dtype(ctx)
    a, x = ctx.promote(self, other, dtype=f64)
    return ctx.cast(igamma64(ctx, a, x, upper=True), dtype)


# -------------------------------------------------------------------------- erfcx, ndtri
@translates(aten.special_erfcx.default)
def special_erfcx(ctx, self):
    x = _wide(ctx, self)
    # erfc(z) = t exp(-z^2 + P(t)) (the fit used by _formulas.erfc), so erfcx(z) = t exp(P(t))
    # for z >= 0 with no overflow; erfcx(-z) = 2 exp(z^2) - erfcx(z).
    z = ctx.op.Abs(x)
    t = ctx.op.Reciprocal(ctx.op.Add(_k(ctx, 1), ctx.op.Mul(z, _k(ctx, 0.5))))
    positive = ctx.op.Mul(t, ctx.op.Exp(F.polynomial(ctx, t, F._ERFC_COEFFICIENTS)))
    negative = ctx.op.Sub(ctx.op.Mul(_k(ctx, 2), ctx.op.Exp(ctx.op.Mul(x, x))), positive)
    value = _where(ctx, ctx.op.Less(x, _k(ctx, 0)), negative, positive)
    return ctx.cast(value, _result_dtype(ctx, self))


def _erfc64(ctx, z: ir.Value) -> ir.Value:
    """erfc(z) for z >= 0 (float64, relative error ~1e-7)."""
    t = ctx.op.Reciprocal(ctx.op.Add(_k(ctx, 1), ctx.op.Mul(z, _k(ctx, 0.5))))
    exponent = ctx.op.Sub(F.polynomial(ctx, t, F._ERFC_COEFFICIENTS), ctx.op.Mul(z, z))
    return ctx.op.Mul(t, ctx.op.Exp(exponent))


@translates(aten.special_ndtri.default)
def special_ndtri(ctx, self):
    p = _wide(ctx, self)
    zero, one, half = _k(ctx, 0), _k(ctx, 1), _k(ctx, 0.5)
    # Solve Q(z) = q for the upper-tail probability q = min(p, 1 - p), then put the sign back:
    # working on the tail side keeps full relative precision down to the smallest float32 p.
    q = ctx.op.Min(p, ctx.op.Sub(one, p))
    valid = ctx.op.And(ctx.op.Greater(q, zero), ctx.op.LessOrEqual(q, half))
    q = _where(ctx, valid, q, half)
    # Abramowitz & Stegun 26.2.23 (absolute error < 4.5e-4) as the starting point.
    t = ctx.op.Sqrt(ctx.op.Mul(_k(ctx, -2), ctx.op.Log(q)))
    numerator = F.polynomial(ctx, t, [0.010328, 0.802853, 2.515517])
    denominator = F.polynomial(ctx, t, [0.001308, 0.189269, 1.432788, 1.0])
    z = ctx.op.Max(ctx.op.Sub(t, ctx.op.Div(numerator, denominator)), zero)
    log_q = ctx.op.Log(q)
    # Newton on log Q(z) = log q converges quadratically from that start, in both regions.
    for _ in range(3):
        tail = ctx.op.Mul(_erfc64(ctx, ctx.op.Mul(z, _k(ctx, 1 / math.sqrt(2)))), half)
        density = ctx.op.Mul(
            ctx.op.Exp(ctx.op.Mul(_k(ctx, -0.5), ctx.op.Mul(z, z))),
            _k(ctx, 1 / math.sqrt(2 * math.pi)),
        )
        step = ctx.op.Mul(ctx.op.Sub(ctx.op.Log(tail), log_q), ctx.op.Div(tail, density))
        z = ctx.op.Max(ctx.op.Add(z, step), zero)
    value = _where(ctx, ctx.op.Less(p, half), ctx.op.Neg(z), z)
    value = _where(ctx, ctx.op.Equal(p, zero), _k(ctx, -math.inf), value)
    value = _where(ctx, ctx.op.Equal(p, one), _k(ctx, math.inf), value)
    bad = ctx.op.Or(ctx.op.Less(p, zero), ctx.op.Greater(p, one))
    value = _where(ctx, ctx.op.Or(bad, ctx.op.IsNaN(p)), _k(ctx, math.nan), value)
    return ctx.cast(value, _result_dtype(ctx, self))


# ----------------------------------------------------------------------- Bessel I0, I1
_BESSEL_SPLIT = 30.0
_SERIES_TERMS = 50
_ASYMPTOTIC_TERMS = 20


def _bessel_series(ctx, ax: ir.Value, order: int) -> ir.Value:
    """I_order(|x|) by its power series (float64, |x| < 30)."""
    q = ctx.op.Mul(ctx.op.Mul(ax, ax), _k(ctx, 0.25))

    # Term by term rather than Horner: the high-order coefficients 1/(k! (k+order)!) are far
    # below float32's range, and onnxruntime's graph optimizer was seen to flush such float64
    # constants to 0.
    # Step k's factor 1 / (k (k + order)): the product of small integers is exact in float64,
    # so its reciprocal rounds exactly like the Python constant did. Not Div(1, .): onnxruntime
    # fuses Mul(q, Div(1, m)) into Div(q, m), which rounds differently.
    def step(body, k, states):
        term, value = states
        factor = body.op.Reciprocal(body.op.Mul(k, body.op.Add(k, _k(body, order))))
        term = body.op.Mul(term, body.op.Mul(q, factor))
        return [term, body.op.Add(value, term)]

    first = _filled(ctx, 1.0 / math.factorial(order), q)
    _, value = _steps(ctx, _SERIES_TERMS - 1, [first, first], step, "bessel_series")
    if order == 1:
        value = ctx.op.Mul(value, ctx.op.Mul(ax, _k(ctx, 0.5)))
    return value


def _bessel_scaled_asymptotic(ctx, ax: ir.Value, order: int) -> ir.Value:
    """exp(-|x|) I_order(|x|) by the large-argument expansion (|x| >= 30)."""
    mu = 4.0 * order * order
    coefficients = [1.0]
    for k in range(1, _ASYMPTOTIC_TERMS):
        coefficients.append(coefficients[-1] * -(mu - (2 * k - 1) ** 2) / (k * 8.0))
    inv = ctx.op.Reciprocal(ax)
    series = F.polynomial(ctx, inv, list(reversed(coefficients)))
    return ctx.op.Div(series, ctx.op.Sqrt(ctx.op.Mul(ax, _k(ctx, 2 * math.pi))))


def _bessel(ctx, self, order: int, scaled: bool) -> ir.Value:
    x = _wide(ctx, self)
    ax = ctx.op.Abs(x)
    small = ctx.op.Less(ax, _k(ctx, _BESSEL_SPLIT))
    small_ax = _where(ctx, small, ax, _k(ctx, 1))
    large_ax = _where(ctx, small, _k(ctx, _BESSEL_SPLIT), ax)
    series = _bessel_series(ctx, small_ax, order)
    asymptotic = _bessel_scaled_asymptotic(ctx, large_ax, order)
    if scaled:
        series = ctx.op.Mul(series, ctx.op.Exp(ctx.op.Neg(small_ax)))
    else:
        asymptotic = ctx.op.Mul(asymptotic, ctx.op.Exp(large_ax))
    value = _where(ctx, small, series, asymptotic)
    if order == 1:  # odd function
        value = ctx.op.Mul(value, F.sign_factor(ctx, ctx.op.Less(x, _k(ctx, 0)), x))
    value = _where(ctx, ctx.op.IsNaN(x), x, value)
    return ctx.cast(value, _result_dtype(ctx, self))


@translates(aten.i0.default, aten.special_i0.default)
def i0(ctx, self):
    return _bessel(ctx, self, 0, scaled=False)


@translates(aten.special_i0e.default)
def special_i0e(ctx, self):
    return _bessel(ctx, self, 0, scaled=True)


@translates(aten.special_i1.default)
def special_i1(ctx, self):
    return _bessel(ctx, self, 1, scaled=False)


@translates(aten.special_i1e.default)
def special_i1e(ctx, self):
    return _bessel(ctx, self, 1, scaled=True)


# --------------------------------------------------------------- real/complex helpers
@translates(aten.angle.default)
def angle(ctx, self):
    # Complex inputs take torch_onnx_conformance/exporter/ops/complex.py's angle.
    dtype = _result_dtype(ctx, self)
    x = ctx.cast(self, dtype)
    zero = ctx.scalar_like(0.0, dtype)
    value = _where(ctx, ctx.op.Less(x, zero), ctx.scalar_like(math.pi, dtype), zero)
    return _where(ctx, ctx.op.IsNaN(x), x, value)


def _stack_complex(ctx, real: ir.Value, imag: ir.Value) -> ir.Value:
    # Expand broadcasts both ways, so the pair ends up with the common broadcast shape.
    real = ctx.op.Expand(real, ctx.op.Shape(imag))
    imag = ctx.op.Expand(imag, ctx.op.Shape(real))
    return ctx.op.Concat(ctx.op.Unsqueeze(real, [-1]), ctx.op.Unsqueeze(imag, [-1]), axis=-1)


@translates(aten.complex.default)
def complex_(ctx, real, imag):
    return _stack_complex(ctx, real, imag)


@translates(aten.polar.default)
def polar(ctx, abs, angle):  # noqa: A002 - torch's argument name
    return _stack_complex(
        ctx, ctx.op.Mul(abs, ctx.op.Cos(angle)), ctx.op.Mul(abs, ctx.op.Sin(angle))
    )


@translates(aten.ldexp.Tensor)
def ldexp(ctx, self, other):
    # torch: self * pow(2., other), in the promoted float dtype
    dtype = _result_dtype(ctx)
    x, e = ctx.promote(self, other, dtype=dtype)
    return ctx.op.Mul(x, ctx.op.Pow(ctx.scalar_like(2.0, dtype), e))


@translates(aten.frexp.Tensor)
def frexp(ctx, self):
    dtype = ctx.dtype(self)
    x = _wide(ctx, self)
    ax = ctx.op.Abs(x)
    special = ctx.op.Or(ctx.op.Equal(ax, _k(ctx, 0)), ctx.op.Or(ctx.op.IsInf(ax), ctx.op.IsNaN(ax)))
    safe = _where(ctx, special, _k(ctx, 1), ax)
    exponent = ctx.op.Add(
        ctx.op.Floor(ctx.op.Div(ctx.op.Log(safe), _k(ctx, math.log(2)))), _k(ctx, 1)
    )
    two = _k(ctx, 2)
    mantissa = ctx.op.Div(safe, ctx.op.Pow(two, exponent))
    # log rounding can leave the mantissa just outside [0.5, 1): one correction each way
    too_big = ctx.op.GreaterOrEqual(mantissa, _k(ctx, 1))
    mantissa = _where(ctx, too_big, ctx.op.Mul(mantissa, _k(ctx, 0.5)), mantissa)
    exponent = _where(ctx, too_big, ctx.op.Add(exponent, _k(ctx, 1)), exponent)
    too_small = ctx.op.Less(mantissa, _k(ctx, 0.5))
    mantissa = _where(ctx, too_small, ctx.op.Mul(mantissa, two), mantissa)
    exponent = _where(ctx, too_small, ctx.op.Sub(exponent, _k(ctx, 1)), exponent)
    mantissa = ctx.op.Mul(mantissa, F.sign_factor(ctx, ctx.op.Less(x, _k(ctx, 0)), x))
    mantissa = _where(ctx, special, x, mantissa)
    exponent = _where(ctx, special, _k(ctx, 0), exponent)
    return ctx.cast(mantissa, dtype), ctx.cast(exponent, torch.int32)
