"""Linear algebra against eager torch: unrolled and Loop elimination, batches, singular inputs."""

from __future__ import annotations

import math

import pytest
import torch

from tests.op_check import case_params, check_op, dynamic, tensor_maker

r = tensor_maker(low=-3, high=3)


def spd(n):
    """A symmetric positive definite matrix."""
    a = torch.randn(n, n)
    return a @ a.mT + n * torch.eye(n)


def well_conditioned(*shape):
    """Random matrices with a dominant diagonal, so inverse/solve compare tightly."""
    n = shape[-1]
    return torch.randn(*shape) + n * torch.eye(n)


# Inputs are drawn at import: a fixed seed keeps every run on the same cases.
torch.manual_seed(0)

CASES = [
    ("det", lambda a: torch.linalg.det(a), (r(3, 3),), (r(3, 3),)),
    ("det_batched", lambda a: torch.det(a), (r(2, 4, 4),), (r(5, 4, 4),)),
    (
        "det_loop",
        lambda a: torch.linalg.det(a),
        (well_conditioned(12, 12) / 4,),
        (well_conditioned(10, 10) / 4,),
    ),
    ("det_singular", lambda a: torch.linalg.det(a), (torch.tensor([[1.0, 2], [2, 4]]),), None),
    (
        "det_needs_pivoting",
        lambda a: torch.linalg.det(a),
        (torch.tensor([[0.0, 1, 2], [1, 0, 3], [4, -3, 8]]),),
        None,
    ),
    ("det_empty", lambda a: torch.linalg.det(a), (torch.zeros(0, 0),), None),
    ("det_1x1", lambda a: torch.linalg.det(a), (torch.tensor([[3.0]]),), None),
    ("det_f64", lambda a: torch.linalg.det(a), (r(4, 4, dtype=torch.float64),), None),
    ("slogdet", lambda a: torch.linalg.slogdet(a), (r(2, 3, 3),), (r(4, 3, 3),)),
    ("slogdet_negative", lambda a: torch.slogdet(a), (torch.tensor([[0.0, 1], [1, 0]]),), None),
    ("logdet", lambda a: torch.logdet(a), (well_conditioned(2, 3, 3),), (r(1, 3, 3),)),
    ("inv", lambda a: torch.linalg.inv(a), (well_conditioned(4, 4),), (well_conditioned(4, 4),)),
    (
        "inv_batched",
        lambda a: torch.inverse(a),
        (well_conditioned(3, 2, 2),),
        (well_conditioned(6, 2, 2),),
    ),
    (
        "inv_loop",
        lambda a: torch.linalg.inv(a),
        (well_conditioned(10, 10),),
        (well_conditioned(12, 12),),
    ),
    ("inv_ex", lambda a: torch.linalg.inv_ex(a), (well_conditioned(2, 3, 3),), None),
    (
        "inv_ex_singular_info",
        lambda a: torch.linalg.inv_ex(a)[1],
        (torch.tensor([[[1.0, 2], [2, 4]], [[1.0, 0], [0, 1]]]),),
        None,
    ),
    (
        "solve",
        lambda a, b: torch.linalg.solve(a, b),
        (well_conditioned(3, 3), r(3, 2)),
        (well_conditioned(3, 3), r(3, 5)),
    ),
    ("solve_vector", lambda a, b: torch.linalg.solve(a, b), (well_conditioned(4, 4), r(4)), None),
    (
        "solve_batched_vector",
        lambda a, b: torch.linalg.solve(a, b),
        (well_conditioned(2, 3, 3), r(2, 3)),
        None,
    ),
    (
        "solve_broadcast",
        lambda a, b: torch.linalg.solve(a, b),
        (well_conditioned(3, 3), r(2, 3, 4)),
        None,
    ),
    (
        "solve_right",
        lambda a, b: torch.linalg.solve(a, b, left=False),
        (well_conditioned(3, 3), r(2, 3)),
        None,
    ),
    ("solve_ex", lambda a, b: torch.linalg.solve_ex(a, b), (well_conditioned(3, 3), r(3, 1)), None),
    (
        "solve_triangular",
        lambda a, b: torch.linalg.solve_triangular(a, b, upper=True),
        (well_conditioned(4, 4), r(4, 2)),
        (well_conditioned(5, 5), r(5, 3)),
    ),
    (
        "solve_triangular_lower_unit_right",
        lambda a, b: torch.linalg.solve_triangular(
            a, b, upper=False, left=False, unitriangular=True
        ),
        (r(3, 3), r(2, 3)),
        None,
    ),
    (
        "triangular_solve_transpose",
        lambda b, a: torch.triangular_solve(b, a, transpose=True),
        (r(3, 2), well_conditioned(3, 3)),
        None,
    ),
    (
        "cholesky",
        lambda a: torch.linalg.cholesky(a @ a.mT + torch.eye(a.shape[-1])),
        (r(2, 4, 4),),
        (r(3, 5, 5),),
    ),
    (
        "cholesky_upper_loop",
        lambda a: torch.linalg.cholesky(a @ a.mT + torch.eye(10), upper=True),
        (r(10, 10),),
        None,
    ),
    (
        "cholesky_ex_not_pd",
        lambda a: torch.linalg.cholesky_ex(a)[1],
        (torch.tensor([[[4.0, 0], [0, 1]], [[1.0, 2], [2, 1]]]),),
        None,
    ),
    (
        "cholesky_solve",
        lambda b, factor: torch.cholesky_solve(b, factor),
        (r(3, 2), torch.linalg.cholesky(spd(3))),
        None,
    ),
    (
        "cholesky_inverse",
        lambda factor: torch.cholesky_inverse(factor, upper=True),
        (torch.linalg.cholesky(spd(3)).mT,),
        None,
    ),
    (
        # LAPACK reads only the factor's triangle; the other may hold anything.
        "cholesky_solve_junk_upper_triangle",
        lambda b, factor: torch.cholesky_solve(b, factor),
        (r(3, 2), torch.linalg.cholesky(spd(3)) + torch.ones(3, 3).triu(1)),
        None,
    ),
    (
        "cholesky_inverse_junk_lower_triangle",
        lambda factor: torch.cholesky_inverse(factor, upper=True),
        (torch.linalg.cholesky(spd(3)).mT + torch.ones(3, 3).tril(-1),),
        None,
    ),
    ("lu_factor", lambda a: torch.linalg.lu_factor(a), (r(4, 4),), (r(6, 6),)),
    ("lu_factor_ex_batched", lambda a: torch.linalg.lu_factor_ex(a), (r(2, 3, 3),), None),
    ("lu_rectangular", lambda a: torch.linalg.lu(a), (r(2, 5, 3),), (r(3, 6, 4),)),
    ("lu_wide_loop", lambda a: torch.linalg.lu(a), (r(9, 11),), None),
    ("lu_unpack", lambda a: torch.lu_unpack(*torch.linalg.lu_factor(a)), (r(4, 4),), None),
    (
        "lu_solve",
        lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b),
        (well_conditioned(3, 3), r(3, 2)),
        (well_conditioned(5, 5), r(5, 1)),
    ),
    (
        "lu_solve_adjoint_right",
        lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b, left=False, adjoint=True),
        (well_conditioned(3, 3), r(2, 3)),
        None,
    ),
    ("qr", lambda a: torch.linalg.qr(a), (r(5, 3),), (r(7, 4),)),
    ("qr_complete_wide", lambda a: torch.linalg.qr(a, mode="complete"), (r(2, 3, 5),), None),
    ("qr_r_only_loop", lambda a: torch.linalg.qr(a, mode="r")[1], (r(12, 10),), None),
    ("geqrf", lambda a: torch.geqrf(a), (r(4, 3),), None),
    (
        "householder_product",
        lambda a: torch.linalg.householder_product(*torch.geqrf(a)),
        (r(5, 3),),
        None,
    ),
    (
        "ormqr",
        lambda a, c: torch.ormqr(*torch.geqrf(a), c, transpose=True),
        (r(4, 4), r(4, 2)),
        None,
    ),
    ("eigvalsh", lambda a: torch.linalg.eigvalsh(a + a.mT), (r(2, 5, 5),), (r(3, 4, 4),)),
    ("eigvalsh_upper_odd", lambda a: torch.linalg.eigvalsh(a, UPLO="U"), (r(7, 7),), None),
    ("svdvals", lambda a: torch.linalg.svdvals(a), (r(2, 5, 3),), (r(3, 4, 6),)),
    ("svd_full_of_empty", lambda a: torch.linalg.svd(a), (torch.zeros(2, 0, 3),), None),
    ("svdvals_wide", lambda a: torch.linalg.svdvals(a), (r(3, 6),), None),
    ("pinv", lambda a: torch.linalg.pinv(a), (r(4, 3),), (r(5, 2),)),
    ("pinv_singular", lambda a: torch.linalg.pinv(a @ a.mT), (r(5, 2),), None),
    ("pinv_hermitian", lambda a: torch.linalg.pinv(a + a.mT, hermitian=True), (r(4, 4),), None),
    ("matrix_rank", lambda a: torch.linalg.matrix_rank(a @ a.mT), (r(2, 5, 3),), None),
    (
        "matrix_rank_atol",
        lambda a: torch.linalg.matrix_rank(a, atol=1.0, rtol=0.1),
        (r(4, 4),),
        None,
    ),
    ("cross", lambda a, b: torch.linalg.cross(a, b), (r(4, 3), r(4, 3)), None),
    ("cross_dim0_broadcast", lambda a, b: torch.cross(a, b, dim=0), (r(3, 5), r(3, 1)), None),
    (
        "cross_int",
        lambda a, b: torch.linalg.cross(a, b),
        (r(2, 3, dtype=torch.int64), r(2, 3, dtype=torch.int64)),
        None,
    ),
    ("trace", lambda a: torch.trace(a), (r(3, 5),), (r(6, 2),)),
    ("trace_int", lambda a: torch.trace(a), (r(4, 4, dtype=torch.int32),), None),
    ("vecdot", lambda a, b: torch.linalg.vecdot(a, b), (r(3, 4), r(3, 4)), (r(2, 6), r(2, 6))),
    ("vecdot_dim0", lambda a, b: torch.linalg.vecdot(a, b, dim=0), (r(3, 4), r(3, 1)), None),
    ("dist", lambda a, b: torch.dist(a, b), (r(3, 4), r(3, 4)), (r(5, 2), r(5, 2))),
    ("dist_p", lambda a, b: torch.dist(a, b, 3), (r(3, 4), r(4)), None),
    ("dist_inf", lambda a, b: torch.dist(a, b, math.inf), (r(3, 4), r(3, 4)), None),
    ("cdist", lambda a, b: torch.cdist(a, b), (r(5, 3), r(4, 3)), (r(7, 2), r(3, 2))),
    ("cdist_mm", lambda a, b: torch.cdist(a, b), (r(30, 4), r(27, 4)), (r(40, 3), r(26, 3))),
    (
        "cdist_no_mm",
        lambda a, b: torch.cdist(a, b, compute_mode="donot_use_mm_for_euclid_dist"),
        (r(30, 4), r(27, 4)),
        None,
    ),
    (
        "cdist_p1_batched",
        lambda a, b: torch.cdist(a, b, p=1),
        (r(2, 5, 3), r(2, 4, 3)),
        (r(3, 6, 2), r(3, 2, 2)),
    ),
    (
        "cdist_p0",
        lambda a, b: torch.cdist(a, b, p=0),
        (torch.tensor([[0.0, 1], [2, 2]]), torch.tensor([[0.0, 2], [2, 2]])),
        None,
    ),
    (
        "cdist_pinf_broadcast",
        lambda a, b: torch.cdist(a, b, p=math.inf),
        (r(2, 1, 5, 3), r(3, 4, 3)),
        None,
    ),
    ("cdist_p3", lambda a, b: torch.cdist(a, b, p=3.0), (r(5, 3), r(4, 3)), None),
    ("pdist", lambda a: torch.pdist(a), (r(5, 3),), (r(7, 2),)),
    ("pdist_p1", lambda a: torch.nn.functional.pdist(a, 1), (r(4, 3),), None),
]


@pytest.mark.parametrize(("fn", "args", "second", "shapes"), case_params(CASES))
def test_linalg(fn, args, second, shapes):
    if shapes == "dynamic":
        check_op(fn, args, dynamic_shapes=dynamic(*args), second_args=second, rtol=1e-4, atol=1e-4)
    else:
        check_op(fn, args, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("opset", [17, 20, 23])
def test_det_and_inverse_across_opsets(opset):
    a = well_conditioned(2, 3, 3)
    check_op(
        lambda t: (torch.linalg.det(t), torch.linalg.inv(t)),
        (a,),
        opset=opset,
        rtol=1e-4,
        atol=1e-4,
    )


def run(fn, *args):
    from tests.op_check import Lambda, run_onnx
    from torch_onnx_conformance import exporter

    program = exporter.export(Lambda(fn), args, optimize=False)
    return [torch.from_numpy(out) for out in run_onnx(program, args)]


@pytest.mark.parametrize("n", [4, 7])
def test_eigh_decomposes(n):
    """Eigenvectors are unique only up to sign: check values, reconstruction, orthonormality."""
    a = r(2, n, n)
    a = a + a.mT
    values, vectors = run(torch.linalg.eigh, a)
    torch.testing.assert_close(values, torch.linalg.eigvalsh(a), rtol=1e-4, atol=1e-4)
    rebuilt = vectors @ torch.diag_embed(values) @ vectors.mT
    torch.testing.assert_close(rebuilt, a, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(
        vectors.mT @ vectors, torch.eye(n).expand(2, n, n), atol=1e-5, rtol=0
    )


@pytest.mark.parametrize("shape", [(5, 3), (3, 5)])
def test_svd_decomposes(shape):
    a = r(*shape)
    u, s, vh = run(lambda t: torch.linalg.svd(t, full_matrices=False), a)
    torch.testing.assert_close(s, torch.linalg.svdvals(a), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(u @ torch.diag(s) @ vh, a, rtol=1e-4, atol=1e-4)


def test_svd_orientation_is_decided_at_run_time():
    """Exported on a tall matrix, run on a wide one: the surplus columns must drop out."""
    a = r(5, 3)
    program = check_op(
        lambda t: torch.linalg.svd(t, full_matrices=False)[1],
        (a,),
        dynamic_shapes=dynamic(a),
        second_args=(r(3, 6),),
        rtol=1e-4,
        atol=1e-4,
    )
    assert "Loop" in {n.op_type for n in program.model_proto.graph.node}


def test_cross_with_a_dynamic_batch():
    batch = torch.export.Dim("batch")
    args = (r(4, 3), r(4, 3))
    check_op(
        torch.linalg.cross,
        args,
        dynamic_shapes=(({0: batch}, {0: batch}),),
        second_args=(r(7, 3), r(7, 3)),
    )


def test_elimination_uses_a_loop_for_symbolic_sizes():
    a = well_conditioned(3, 3)
    program = check_op(
        torch.linalg.inv,
        (a,),
        dynamic_shapes=dynamic(a),
        second_args=(well_conditioned(6, 6),),
        rtol=1e-4,
        atol=1e-4,
    )
    assert "Loop" in {n.op_type for n in program.model_proto.graph.node}


def test_lu_factors_are_refused_clearly():
    from torch_onnx_conformance import exporter

    class LuFactors(torch.nn.Module):
        def forward(self, a):
            return torch.ops.aten._linalg_det(a)[1]

    with pytest.raises(exporter.OnnxExporterError, match="LU factors"):
        exporter.export(LuFactors().eval(), (r(3, 3),))
