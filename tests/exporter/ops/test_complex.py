"""Complex tensors against eager torch. A complex tensor travels as a real tensor with a trailing
(real, imaginary) pair; the checks build complex values in the graph from real inputs (as models
do) and compare complex outputs through that pair: arithmetic, abs/angle, products, reductions,
views and joins."""

from __future__ import annotations

import torch

from tests.op_check import check_op, dynamic, tensor_maker

r = tensor_maker(seed_stride=29, seed_counts_rank=True)
TOL = {"rtol": 1e-4, "atol": 1e-5}


def parts(*shape, seed=0):
    """Real and imaginary parts of one complex input."""
    return r(*shape, seed=seed), r(*shape, seed=seed + 1)


def test_complex_arithmetic():
    def arithmetic(ar, ai, br, bi):
        a, b = torch.complex(ar, ai), torch.complex(br, bi)
        return a + b, a - b, a * b, a / b, -a, a * 2.5, a.reciprocal(), a.exp()

    check_op(arithmetic, (*parts(3, 4), *parts(3, 4, seed=2)), **TOL)


def test_abs_angle_and_parts():
    def measures(ar, ai):
        a = torch.complex(ar, ai)
        return a.abs(), a.angle(), a.real + 1, a.imag * 2, a == a

    check_op(measures, parts(2, 5), **TOL)


def test_polar_times_complex_dynamic():
    x, y = parts(3, 4)
    check_op(
        lambda x, y: torch.polar(x.abs(), y) * torch.complex(x, y),
        (x, y),
        dynamic_shapes=dynamic(x, y),
        second_args=parts(5, 2),
        **TOL,
    )


def test_complex_products_and_reductions():
    def products(mr, mi, vr, vi):
        m, v = torch.complex(mr, mi), torch.complex(vr, vi)
        return (
            m @ v,
            m.transpose(0, 1) @ m,
            torch.vdot(v, v),
            torch.dot(v, v),
            m.sum(0),
            m.mean(),
        )

    check_op(products, (*parts(3, 4), *parts(4, seed=2)), **TOL)


def test_complex_views_and_joins():
    def views(ar, ai):
        a = torch.complex(ar, ai)
        return (
            a.permute(2, 0, 1),
            a.reshape(6, 4),
            a[:, 1],
            a[..., 1:3],
            a.unsqueeze(0).squeeze(0),
            torch.cat([a, a], 1),
            torch.stack([a[0], a[1]]),
        )

    check_op(views, parts(2, 3, 4))
