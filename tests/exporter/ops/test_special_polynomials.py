"""Orthogonal polynomials against eager torch: the degree is data, so each runs its recurrence
for max(n) steps; degrees broadcast against x, including degree 0 and negative degrees."""

from __future__ import annotations

import pytest
import torch

from tests.op_check import check_op, dynamic

POLYNOMIALS = {
    "hermite_h": torch.special.hermite_polynomial_h,
    "hermite_he": torch.special.hermite_polynomial_he,
    "laguerre_l": torch.special.laguerre_polynomial_l,
    "legendre_p": torch.special.legendre_polynomial_p,
    "chebyshev_t": torch.special.chebyshev_polynomial_t,
    "chebyshev_u": torch.special.chebyshev_polynomial_u,
}


def points(n, seed=0):
    return torch.rand(n, generator=torch.Generator().manual_seed(seed)) * 1.8 - 0.9


@pytest.mark.parametrize("name", sorted(POLYNOMIALS))
def test_polynomial_with_degree_tensor_dynamic(name):
    x, n = points(6), torch.tensor([0, 1, 2, 3, 5, -1])
    check_op(
        POLYNOMIALS[name],
        (x, n),
        dynamic_shapes=dynamic(x, n),
        second_args=(points(4, seed=1), torch.tensor([4, 0, 6, 2])),
        rtol=1e-4,
        atol=1e-4,
    )


@pytest.mark.parametrize("name", ["hermite_h", "legendre_p"])
def test_polynomial_degree_broadcasts_over_x(name):
    check_op(
        POLYNOMIALS[name],
        (points(5).reshape(5, 1), torch.tensor([[0, 2, 3]])),
        rtol=1e-4,
        atol=1e-4,
    )
