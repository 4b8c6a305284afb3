"""Special functions (torch_onnx_conformance/exporter/ops/special.py) against eager torch: wide value ranges, the
special points (poles, zeros, infinities, nan), a dynamic-shape case per family, and dtypes."""

from __future__ import annotations

import math

import pytest
import torch

from tests.op_check import check_op, dynamic

NAN, INF = math.nan, math.inf


def spread(low, high, n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, generator=g) * (high - low) + low


# Poles, zeros, infinities and nan where each function has its own rule in torch.
SPECIAL = torch.tensor([0.0, -0.0, 1.0, 2.0, -1.0, -3.0, 0.5, -2.5, INF, -INF, NAN, 1e-6, 40.0])


@pytest.mark.parametrize(
    ("name", "fn", "low", "high"),
    [
        ("lgamma", torch.lgamma, -20, 40),
        ("digamma", torch.digamma, -20, 40),
        ("erfcx", torch.special.erfcx, -9, 40),
        ("i0", torch.i0, -80, 80),
        ("i0e", torch.special.i0e, -200, 200),
        ("i1", torch.special.i1, -80, 80),
        ("i1e", torch.special.i1e, -200, 200),
        ("angle", torch.angle, -5, 5),
    ],
)
def test_unary_over_a_range_and_special_points(name, fn, low, high):
    x = torch.cat([spread(low, high), SPECIAL])
    check_op(fn, (x,))


def test_lgamma_large_and_mvlgamma():
    check_op(torch.lgamma, (torch.tensor([1e10, 3e37, 1e-30, -1e-30, -123.25]),))
    check_op(lambda x: torch.mvlgamma(x, 3), (spread(1.5, 30),))


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4])
def test_polygamma(n):
    x = torch.cat([spread(-8, 20, seed=n), torch.tensor([0.25, 1.0, 7.5, 100.0, NAN])])
    check_op(lambda t: torch.polygamma(n, t), (x,), rtol=2e-5)


def test_zeta():
    s = torch.cat([spread(1.01, 8), torch.tensor([1.0, 0.5, 2.0, 3.0, 2.5])])
    q = torch.cat([spread(0.05, 30, seed=1), torch.tensor([1.0, 1.0, -2.0, -1.5, -1.5])])
    check_op(torch.special.zeta, (s, q), rtol=2e-5)


@pytest.mark.parametrize("fn", [torch.igamma, torch.igammac])
def test_incomplete_gamma(fn):
    a = torch.cat([spread(0.01, 12), torch.tensor([0.0, 0.0, 1.0, INF, INF, -1.0, 2.0, 3.0])])
    x = torch.cat([spread(0.0, 25, seed=2), torch.tensor([1.0, 0.0, 0.0, 2.0, INF, 1.0, INF, 3.0])])
    check_op(fn, (a, x))


def test_ndtri_tails_and_edges():
    p = torch.cat(
        [spread(0, 1), torch.tensor([0.0, 1.0, -0.1, 1.1, 1e-30, 1e-10, 0.999999, 0.5, NAN])]
    )
    check_op(torch.special.ndtri, (p,))


def test_ldexp_promotes_like_torch():
    x = spread(-3, 3, n=12).reshape(3, 4)
    check_op(torch.ldexp, (x, torch.randint(-10, 10, (4,))))
    check_op(torch.ldexp, (torch.arange(4), torch.arange(4)))  # int, int -> float32


def test_frexp_outputs_and_special_values():
    x = torch.cat(
        [spread(-1e4, 1e4), torch.tensor([0.0, -0.0, INF, -INF, NAN, 0.5, 1.0, 2.0**-140, 3e38])]
    )
    check_op(torch.frexp, (x,), atol=0, rtol=0)


def test_complex_and_polar_broadcast():
    real, imag = spread(-2, 2, n=6).reshape(2, 3), spread(-2, 2, n=3, seed=4)
    check_op(torch.complex, (real, imag))
    check_op(torch.polar, (spread(0, 2, n=6).reshape(2, 3), imag))


def test_dynamic_shapes():
    x = spread(0.1, 10, n=12).reshape(3, 4)
    x2 = spread(0.1, 10, n=20).reshape(5, 4)
    check_op(torch.lgamma, (x,), dynamic_shapes=dynamic(x), second_args=(x2,))
    check_op(
        torch.igamma, (x, x.flip(0)), dynamic_shapes=dynamic(x, x), second_args=(x2, x2.flip(1))
    )
    check_op(torch.complex, (x, x.flip(1)), dynamic_shapes=dynamic(x, x), second_args=(x2, x2 + 1))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.int64])
def test_other_dtypes(dtype):
    x = (spread(0.2, 9, n=16) if dtype.is_floating_point else torch.arange(1, 17)).to(dtype)
    tol = {"rtol": 2e-3, "atol": 2e-3} if dtype == torch.float16 else {}
    check_op(torch.lgamma, (x,), **tol)
    check_op(torch.special.i0e, (x,), **tol)
    check_op(torch.digamma, (x,), **tol)
