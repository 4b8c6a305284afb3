"""Matrix factorisations against eager torch (LAPACK's conventions, so factors compare directly):
LU with partial pivoting and its solve/unpack, Householder QR and the Householder products."""

from __future__ import annotations

import torch

from tests.op_check import check_op, tensor_maker

r = tensor_maker(seed_stride=37, seed_counts_rank=True)
TOL = {"rtol": 1e-4, "atol": 1e-4}


def test_lu_factors_and_pivots():
    a = r(2, 4, 4)
    check_op(lambda a: torch.linalg.lu_factor(a), (a,), **TOL)
    check_op(lambda a: torch.linalg.lu(a), (a,), **TOL)


def test_lu_solve_and_unpack():
    a, b = r(3, 3), r(3, 2, seed=1)
    check_op(
        lambda a, b: (
            torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b),
            torch.lu_unpack(*torch.linalg.lu_factor(a)),
        ),
        (a, b),
        **TOL,
    )


def test_qr_modes():
    a = r(5, 3)
    check_op(
        lambda a: (
            torch.linalg.qr(a),
            torch.linalg.qr(a, mode="complete"),
            torch.linalg.qr(a, "r"),
        ),
        (a,),
        **TOL,
    )


def test_householder_products():
    a, c = r(4, 3), r(4, 2, seed=1)
    check_op(
        lambda a, c: (
            torch.linalg.householder_product(*torch.geqrf(a)),
            torch.ormqr(*torch.geqrf(a), c),
            torch.ormqr(*torch.geqrf(a), c, transpose=True),
        ),
        (a, c),
        **TOL,
    )
