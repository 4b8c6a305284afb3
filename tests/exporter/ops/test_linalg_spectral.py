"""Symmetric eigendecomposition and SVD against eager torch. Eigenvector and singular vector signs
are a free choice, so vectors are checked through what they reconstruct; values compare
directly, as do pinv, matrix_rank, cond and the 2/nuclear norms built from them."""

from __future__ import annotations

import torch

from tests.op_check import check_op, tensor_maker

r = tensor_maker(seed_stride=41, seed_counts_rank=True)
TOL = {"rtol": 1e-3, "atol": 1e-4}


def symmetric(*shape, seed=0):
    a = r(*shape, seed=seed)
    return a + a.mT


def test_eigh_values_and_reconstruction():
    def eigh(a):
        values, vectors = torch.linalg.eigh(a)
        return values, vectors @ torch.diag_embed(values) @ vectors.mT, torch.linalg.eigvalsh(a)

    check_op(eigh, (symmetric(2, 4, 4),), **TOL)


def test_svd_values_and_reconstruction():
    def svd(a):
        u, s, vh = torch.linalg.svd(a, full_matrices=False)
        return s, u @ torch.diag_embed(s) @ vh, torch.linalg.svdvals(a)

    check_op(svd, (r(2, 5, 3),), **TOL)


def test_quantities_built_from_the_spectrum():
    a = r(4, 3)
    check_op(
        lambda a: (
            torch.linalg.pinv(a),
            torch.linalg.matrix_rank(a @ a.mT),
            torch.linalg.cond(a),
            torch.linalg.matrix_norm(a, ord=2),
            torch.linalg.matrix_norm(a, ord="nuc"),
        ),
        (a,),
        **TOL,
    )
