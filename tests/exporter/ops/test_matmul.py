"""Matrix products against eager torch: linear, addmm and friends, batched and broadcast matmul,
outer products, einsum, kron and tensordot; float and integer operands, static and dynamic."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.op_check import check_op, dynamic, tensor_maker

r = tensor_maker(seed_stride=19, seed_counts_rank=True)
TOL = {"rtol": 1e-4, "atol": 1e-4}


def test_linear_with_and_without_bias_dynamic_batch():
    x, w, b = r(3, 5, 4), r(6, 4, seed=1), r(6, seed=2)
    check_op(
        lambda x, w, b: (F.linear(x, w, b), F.linear(x, w)),
        (x, w, b),
        dynamic_shapes=(({0: torch.export.Dim.DYNAMIC, 1: torch.export.Dim.DYNAMIC}, None, None),),
        second_args=(r(2, 7, 4), w, b),
        **TOL,
    )


def test_scaled_sums():
    m, a, b, v = r(3, 5), r(3, 4, seed=1), r(4, 5, seed=2), r(4, seed=3)
    check_op(
        lambda m, a, b, v: (
            torch.addmm(m, a, b, beta=0.5, alpha=2.0),
            torch.addmv(m[:, 0], a, v, beta=2.0),
            torch.addr(a, a[:, 0], v, alpha=-1.5),
        ),
        (m, a, b, v),
        **TOL,
    )


def test_batched_products():
    a, b, c = r(2, 3, 4), r(2, 4, 5, seed=1), r(3, 5, seed=2)
    check_op(
        lambda a, b, c: (
            torch.bmm(a, b),
            torch.baddbmm(c, a, b, beta=0.5),
            torch.addbmm(c, a, b),
            a @ b[0],
        ),
        (a, b, c),
        **TOL,
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64], ids=["f32", "i64"])
def test_matmul_broadcast_and_vectors(dtype):
    a, b, v = r(2, 1, 3, 4, dtype=dtype), r(5, 4, 2, dtype=dtype), r(4, dtype=dtype)
    check_op(lambda a, b, v: (a @ b, a @ v, v @ b, v @ v), (a, b, v), **TOL)


def test_matmul_dynamic_inner_and_batch():
    a, b = r(3, 4, 5), r(5, 2)
    check_op(
        torch.matmul,
        (a, b),
        dynamic_shapes=dynamic(a, b),
        second_args=(r(2, 6, 7), r(7, 3)),
        **TOL,
    )


def test_outer_einsum_kron_tensordot():
    a, b, m = r(3), r(4, seed=1), r(2, 3, 4)
    check_op(
        lambda a, b, m: (
            torch.outer(a, b),
            torch.einsum("i,bij,j->b", a, m, b),
            torch.einsum("bij->jb", m),
            torch.kron(m[0], m[1, :2]),
            torch.tensordot(m, m, dims=([1, 2], [1, 2])),
        ),
        (a, b, m),
        **TOL,
    )
