"""Bessel functions, airy_ai and orthogonal polynomials against torch's CPU kernels.

Inputs sweep every branch of the piecewise approximations (the switch points at 2, 5 and 8, the
airy regions at +-2.09, zeros, negatives, infinities); polynomial degrees are tensors (float and
int), broadcast against x, and include negative degrees and torch's large-degree shortcuts.
"""

from __future__ import annotations

import math

import pytest
import torch

from tests.op_check import check_op

# check_op's forward takes *args, so dynamic_shapes nest one level deeper than the inputs.
DYN = torch.export.Dim.DYNAMIC
special = torch.special

UNARY = {
    "bessel_j0": special.bessel_j0,
    "bessel_j1": special.bessel_j1,
    "bessel_y0": special.bessel_y0,
    "bessel_y1": special.bessel_y1,
    "modified_bessel_i0": special.modified_bessel_i0,
    "modified_bessel_i1": special.modified_bessel_i1,
    "modified_bessel_k0": special.modified_bessel_k0,
    "modified_bessel_k1": special.modified_bessel_k1,
    "scaled_modified_bessel_k0": special.scaled_modified_bessel_k0,
    "scaled_modified_bessel_k1": special.scaled_modified_bessel_k1,
    "spherical_bessel_j0": special.spherical_bessel_j0,
    "airy_ai": special.airy_ai,
}

POLYNOMIALS = {
    "chebyshev_t": special.chebyshev_polynomial_t,
    "chebyshev_u": special.chebyshev_polynomial_u,
    "chebyshev_v": special.chebyshev_polynomial_v,
    "chebyshev_w": special.chebyshev_polynomial_w,
    "shifted_chebyshev_t": special.shifted_chebyshev_polynomial_t,
    "shifted_chebyshev_u": special.shifted_chebyshev_polynomial_u,
    "shifted_chebyshev_v": special.shifted_chebyshev_polynomial_v,
    "shifted_chebyshev_w": special.shifted_chebyshev_polynomial_w,
    "hermite_h": special.hermite_polynomial_h,
    "hermite_he": special.hermite_polynomial_he,
    "laguerre_l": special.laguerre_polynomial_l,
    "legendre_p": special.legendre_polynomial_p,
}


def _sweep(dtype=torch.float32):
    edges = [
        0.0,
        1e-6,
        0.3,
        0.5,
        1.0,
        1.99,
        2.0,
        2.01,
        2.09,
        3.0,
        4.99,
        5.0,
        5.01,
        7.9,
        8.0,
        8.1,
        8.33,
        12.0,
        25.0,
        60.0,
    ]
    values = sorted({v for e in edges for v in (e, -e)}) + [math.inf, -math.inf]
    return torch.tensor(values, dtype=dtype)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_matches_torch_on_every_branch(name):
    fn = UNARY[name]
    x = _sweep()
    # Relative tolerance dominates: I0/I1 grow like exp(|x|), the others have zeros. Ai(-60)
    # has phase ~310, which torch's float32 kernel rounds; we evaluate in float64.
    atol = 1e-5 if name == "airy_ai" else 1e-6
    check_op(fn, (x,), rtol=2e-5, atol=atol)


@pytest.mark.parametrize("name", ["bessel_y0", "modified_bessel_k1", "airy_ai"])
def test_unary_float64_and_int_inputs(name):
    fn = UNARY[name]
    check_op(fn, (_sweep(torch.float64),), rtol=1e-10, atol=1e-12)
    check_op(fn, (torch.tensor([[0, 1, 3], [6, 9, 20]]),), rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["bessel_j1", "modified_bessel_i0"])
def test_unary_dynamic_shape_and_empty(name):
    fn = UNARY[name]
    x = torch.linspace(-9, 9, 12).reshape(3, 4)
    check_op(fn, (x,), dynamic_shapes=(({0: DYN, 1: DYN},),), second_args=(torch.randn(5, 2) * 6,))
    check_op(fn, (torch.empty(0, 3),))
    check_op(fn, (torch.tensor(3.5),))


def _poly_x(name):
    grid = [-1.0, -0.9, -0.5, -0.2, 0.0, 0.3, 0.5, 0.77, 1.0, 1.5, -2.0]
    return torch.tensor(grid).reshape(-1, 1)


@pytest.mark.parametrize("name", sorted(POLYNOMIALS))
def test_polynomial_matches_torch_with_tensor_degrees(name):
    fn = POLYNOMIALS[name]
    x = _poly_x(name)
    n = torch.tensor([-2.0, 0.0, 1.0, 2.0, 3.0, 5.0, 7.0, 9.0, 12.0])
    check_op(fn, (x, n), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["chebyshev_t", "hermite_h", "legendre_p", "laguerre_l"])
def test_polynomial_dynamic_shapes_and_second_degrees(name):
    fn = POLYNOMIALS[name]
    x = torch.linspace(-0.95, 0.95, 6).reshape(2, 3)
    n = torch.tensor([[1.0, 4.0, 2.0], [0.0, 3.0, 6.0]])
    second = (torch.linspace(-0.9, 0.9, 8).reshape(4, 2), torch.full((4, 2), 8.0))
    check_op(
        fn,
        (x, n),
        dynamic_shapes=(({0: DYN, 1: DYN}, {0: DYN, 1: DYN}),),
        second_args=second,
        rtol=1e-4,
        atol=1e-4,
    )


def test_polynomial_integer_degree_and_scalar_overloads():
    x = torch.linspace(-1, 1, 5)
    check_op(special.legendre_polynomial_p, (x, torch.tensor([0, 1, 2, 3, 4])))
    check_op(lambda x: special.chebyshev_polynomial_u(x, 3), (x,))
    check_op(lambda n: special.hermite_polynomial_he(0.5, n), (torch.tensor([0.0, 2.0, 5.0]),))


def test_polynomial_non_finite_and_empty_degrees():
    x = torch.tensor([0.25, 0.5, 0.75])
    n = torch.tensor([math.nan, math.inf, 3.0])
    check_op(special.hermite_polynomial_h, (x, n))
    check_op(special.chebyshev_polynomial_t, (torch.empty(0), torch.empty(0)))
