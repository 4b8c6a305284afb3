"""Orthogonal polynomials (special.chebyshev_*, hermite_*, laguerre, legendre).

The degree ``n`` is data, so the three-term recurrence runs in an ONNX Loop for max(n) steps and
each element keeps the value whose step equals its own degree. Everything is computed in
float64 (torch's kernels run the same recurrence; float64 keeps float32 results exact to
rounding) and cast to the torch result dtype at the end. torch's closed-form shortcuts
(cos(n*acos x) for large n inside [-1, 1], the |x| == 1 endpoints) are replicated with Where so
values agree with torch's CPU kernels.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from torch_onnx_conformance.exporter.ops._registry import translates

aten = torch.ops.aten
F64 = torch.float64


def _as_f64(ctx, v):
    if isinstance(v, (int, float, bool)):
        return ctx.const(float(v), F64)
    return ctx.cast(v, F64)


class _Poly:
    """Float64 helpers over one context (the outer graph or a Loop body)."""

    def __init__(self, ctx) -> None:
        self.ctx = ctx
        self.op = ctx.op

    def c(self, value: float):
        return self.ctx.const(float(value), F64)

    def add(self, a, b):
        return self.op.Add(a, b)

    def sub(self, a, b):
        return self.op.Sub(a, b)

    def mul(self, a, b):
        return self.op.Mul(a, b)

    def div(self, a, b):
        return self.op.Div(a, b)

    def eq(self, a, b):
        return self.op.Equal(a, b)

    def where(self, cond, a, b):
        return self.op.Where(cond, a, b)


# A recurrence step: (poly helpers, x, k, P_{k-1}, P_k) -> P_{k+1}, k a float64 scalar >= 1.
Step = Callable


def _recurrence(ctx, x, n, p0, p1, step: Step, limit: int | None = None):
    """Value of the polynomial of degree n at x (broadcast), 0 where n < 0."""
    m = _Poly(ctx)
    zero = m.c(0.0)
    # Broadcast x and n against each other so every carried value has the result's shape.
    xb = m.add(x, m.mul(n, zero))
    nb = m.add(n, m.mul(x, zero))
    p0b = m.add(p0, m.mul(nb, zero))
    p1b = m.add(p1, m.mul(nb, zero))
    result = m.where(m.eq(nb, zero), p0b, m.where(m.eq(nb, m.c(1.0)), p1b, m.mul(nb, zero)))
    # max(n) - 1 steps; Concat with 0 keeps empty tensors and all-negative degrees at 0 steps.
    n_int = ctx.op.Cast(nb, to=7)
    flat = ctx.op.Concat(ctx.op.Reshape(n_int, [-1]), [0], axis=0)
    trips = ctx.op.Max(ctx.op.Sub(ctx.op.ReduceMax(flat, keepdims=0), 1), 0)
    if limit is not None:
        trips = ctx.op.Min(trips, limit)

    body = ctx.child("poly_recurrence")
    it = body.input(torch.empty((), dtype=torch.int64), "iteration")
    body.input(torch.empty((), dtype=torch.bool), "condition")
    carried = []
    for name in ("p_prev", "p_cur", "result"):
        v = body.input(torch.empty((), dtype=F64), name)
        v.shape = None
        carried.append(v)
    p, q, res = carried
    b = _Poly(body)
    k = b.add(body.op.Cast(it, to=11), b.c(1.0))
    r = step(b, xb, k, p, q)
    res_next = b.where(b.eq(nb, b.add(k, b.c(1.0))), r, res)
    keep = body.const(True, torch.bool)
    graph = body.finish([keep, q, r, res_next])
    _, _, out = ctx.op.Loop(trips, None, p0b, p1b, result, body=graph, _outputs=3)
    return out, xb, nb


def _finish(ctx, value):
    dtype = ctx.out_dtype or torch.float32
    return ctx.cast(value, dtype)


def _inputs(ctx, x, n):
    x64 = _as_f64(ctx, x)
    # torch truncates a floating degree to int64 (static_cast) before using it.
    if isinstance(n, (int, float, bool)):
        n64 = ctx.const(float(int(n)), F64)
    else:
        n64 = ctx.cast(n, F64)
        if ctx.dtype(n).is_floating_point:
            # Non-finite degrees count as negative (torch: -1 or INT64_MIN), so the result is 0.
            finite = ctx.op.Not(ctx.op.Or(ctx.op.IsNaN(n64), ctx.op.IsInf(n64)))
            n64 = ctx.op.Where(finite, n64, ctx.const(-1.0, F64))
            n64 = ctx.op.Cast(ctx.op.Cast(n64, to=7), to=11)
    return x64, n64


def _endpoint_sign(m, xb, nb, pos, neg_even, neg_odd):
    """torch's values at |x| == 1: pos at x == 1, neg_even/neg_odd at x == -1 by n's parity."""
    even = m.eq(m.op.Mod(nb, m.c(2.0), fmod=1), m.c(0.0))
    return m.where(m.op.Greater(xb, m.c(0.0)), pos, m.where(even, neg_even, neg_odd))


def _chebyshev(ctx, x, n, kind: str, shifted: bool):
    x64, n64 = _inputs(ctx, x, n)
    m = _Poly(ctx)
    if shifted:
        x64 = m.sub(m.add(x64, x64), m.c(1.0))
    one = m.c(1.0)
    p1 = {
        "t": x64,
        "u": m.add(x64, x64),
        "v": m.sub(m.add(x64, x64), one),
        "w": m.add(m.add(x64, x64), one),
    }[kind]

    def step(b, xb, k, p, q):
        return b.sub(b.mul(b.add(xb, xb), q), p)

    value, xb, nb = _recurrence(ctx, x64, n64, one, p1, step)
    ax = ctx.op.Abs(xb)
    n1 = m.add(nb, one)
    n21 = m.add(m.add(nb, nb), one)
    ends = {
        "t": (one, one, m.c(-1.0)),
        "u": (n1, n1, m.op.Neg(n1)),
        "v": (one, n21, m.op.Neg(n21)),
        "w": (n21, one, m.c(-1.0)),
    }[kind]
    endpoint = _endpoint_sign(m, xb, nb, *ends)
    # torch switches to trigonometric closed forms for large degrees inside (-1, 1), evaluated
    # in the input precision. onnxruntime has no float64 Acos, so they run in float32 there;
    # float64 inputs keep the (more accurate) float64 recurrence instead.
    if ctx.out_dtype != F64:
        # torch's degree thresholds differ between the plain and the shifted kernels.
        threshold = (
            {"t": 6.0, "u": 6.0, "v": 6.0, "w": 4.0}[kind]
            if shifted
            else (6.0 if kind == "t" else 8.0)
        )
        value = _trig_branch(ctx, kind, xb, nb, value, threshold)
    value = m.where(m.eq(ax, one), endpoint, value)
    value = m.where(ctx.op.Less(nb, m.c(0.0)), m.c(0.0), value)
    return _finish(ctx, value)


def _trig_branch(ctx, kind, xb, nb, value, threshold):
    f32 = torch.float32
    one = ctx.const(1.0, f32)
    half = ctx.const(0.5, f32)
    x = ctx.op.Cast(xb, to=1)
    n = ctx.op.Cast(nb, to=1)
    threshold = ctx.const(threshold, f32)
    inside = ctx.op.And(ctx.op.Greater(n, threshold), ctx.op.Less(ctx.op.Abs(x), one))
    theta = ctx.op.Acos(ctx.op.Where(inside, x, ctx.const(0.0, f32)))
    if kind == "t":
        trig = ctx.op.Cos(ctx.op.Mul(n, theta))
    elif kind == "u":
        trig = ctx.op.Div(ctx.op.Sin(ctx.op.Mul(ctx.op.Add(n, one), theta)), ctx.op.Sin(theta))
    elif kind == "v":
        angle = ctx.op.Mul(ctx.op.Add(n, half), theta)
        trig = ctx.op.Div(ctx.op.Cos(angle), ctx.op.Cos(ctx.op.Mul(theta, half)))
    else:
        angle = ctx.op.Mul(ctx.op.Add(n, half), theta)
        trig = ctx.op.Div(ctx.op.Sin(angle), ctx.op.Sin(ctx.op.Mul(theta, half)))
    return ctx.op.Where(inside, ctx.op.Cast(trig, to=11), value)


def _hermite_limit(ctx) -> int:
    return 512 if ctx.out_dtype == F64 else 128


def _hermite(ctx, x, n, physicists: bool):
    x64, n64 = _inputs(ctx, x, n)
    m = _Poly(ctx)
    scale = 2.0 if physicists else 1.0
    p1 = m.mul(x64, m.c(scale)) if physicists else x64

    def step(b, xb, k, p, q):
        # H_{k+1} = 2x H_k - 2k H_{k-1};  He_{k+1} = x He_k - k He_{k-1}
        return b.sub(b.mul(b.mul(xb, b.c(scale)), q), b.mul(b.mul(k, b.c(scale)), p))

    value, _, nb = _recurrence(ctx, x64, n64, m.c(1.0), p1, step, limit=_hermite_limit(ctx))
    # torch gives up (NaN) above a dtype-dependent degree instead of overflowing.
    value = m.where(ctx.op.Greater(nb, m.c(_hermite_limit(ctx))), m.c(float("nan")), value)
    value = m.where(ctx.op.Less(nb, m.c(0.0)), m.c(0.0), value)
    return _finish(ctx, value)


def _laguerre(ctx, x, n):
    x64, n64 = _inputs(ctx, x, n)
    m = _Poly(ctx)
    one = m.c(1.0)

    def step(b, xb, k, p, q):
        # (k+1) L_{k+1} = (2k+1-x) L_k - k L_{k-1}
        a = b.sub(b.add(b.add(k, k), b.c(1.0)), xb)
        return b.div(b.sub(b.mul(a, q), b.mul(k, p)), b.add(k, b.c(1.0)))

    value, xb, nb = _recurrence(ctx, x64, n64, one, m.sub(one, x64), step)
    value = m.where(m.eq(xb, m.c(0.0)), one, value)
    value = m.where(ctx.op.Less(nb, m.c(0.0)), m.c(0.0), value)
    return _finish(ctx, value)


def _legendre(ctx, x, n):
    x64, n64 = _inputs(ctx, x, n)
    m = _Poly(ctx)
    one = m.c(1.0)

    def step(b, xb, k, p, q):
        # (k+1) P_{k+1} = (2k+1) x P_k - k P_{k-1}
        a = b.mul(b.add(b.add(k, k), b.c(1.0)), xb)
        return b.div(b.sub(b.mul(a, q), b.mul(k, p)), b.add(k, b.c(1.0)))

    value, xb, nb = _recurrence(ctx, x64, n64, one, x64, step)
    endpoint = _endpoint_sign(m, xb, nb, one, one, m.c(-1.0))
    value = m.where(m.eq(ctx.op.Abs(xb), one), endpoint, value)
    value = m.where(ctx.op.Less(nb, m.c(0.0)), m.c(0.0), value)
    return _finish(ctx, value)


def _chebyshev_translation(kind: str, shifted: bool):
    def translate(ctx, x, n):
        return _chebyshev(ctx, x, n, kind, shifted)

    return translate


for _kind in "tuvw":
    for _shifted in (False, True):
        _name = ("shifted_" if _shifted else "") + f"chebyshev_polynomial_{_kind}"
        translates(getattr(aten, f"special_{_name}"))(_chebyshev_translation(_kind, _shifted))


@translates(aten.special_hermite_polynomial_h)
def hermite_polynomial_h(ctx, x, n):
    return _hermite(ctx, x, n, physicists=True)


@translates(aten.special_hermite_polynomial_he)
def hermite_polynomial_he(ctx, x, n):
    return _hermite(ctx, x, n, physicists=False)


@translates(aten.special_laguerre_polynomial_l)
def laguerre_polynomial_l(ctx, x, n):
    return _laguerre(ctx, x, n)


@translates(aten.special_legendre_polynomial_p)
def legendre_polynomial_p(ctx, x, n):
    return _legendre(ctx, x, n)
