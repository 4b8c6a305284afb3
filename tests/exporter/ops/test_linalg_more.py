"""linalg.polar, linalg.matrix_sqrth, LDL^T (ldl_factor[_ex], ldl_solve) and geqrf with
symbolic shapes, against eager at the example inputs and at a second, larger shape."""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim

from tests.op_check import check_op
from torch_onnx_conformance.exporter.ops import linalg_more

AUTO = Dim.AUTO


def _symmetric_indefinite(*shape, seed):
    """Random symmetric matrices; indefinite ones make Bunch-Kaufman take 2x2 pivots."""
    generator = torch.Generator().manual_seed(seed)
    a = torch.randn(*shape, generator=generator)
    return a + a.mT


def _spd(*shape, seed):
    generator = torch.Generator().manual_seed(seed)
    a = torch.randn(*shape, generator=generator)
    return a @ a.mT + shape[-1] * torch.eye(shape[-1])


def _dynamic(*ranks):
    """Every dim dynamic; the extra level is check_op's ``forward(*args)`` varargs."""
    return (tuple({d: AUTO for d in range(rank)} for rank in ranks),)


# -------------------------------------------------------------------------------- polar
@pytest.mark.parametrize("shape, second", [((5, 3), (7, 4)), ((2, 4, 4), (3, 6, 6))])
def test_polar(shape, second):
    a = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    b = torch.randn(*second, generator=torch.Generator().manual_seed(1))
    check_op(torch.linalg.polar, (a,))
    check_op(torch.linalg.polar, (a,), dynamic_shapes=_dynamic(len(shape)), second_args=(b,))


# ------------------------------------------------------------------------- matrix_sqrth
def test_matrix_sqrth():
    a, b = _spd(2, 5, 5, seed=0), _spd(3, 7, 7, seed=1)
    # Only the lower triangle is read, as in eager: garbage above the diagonal changes nothing.
    a = a + torch.triu(torch.full_like(a, 3.0), diagonal=1)
    check_op(torch.linalg.matrix_sqrth, (a,), atol=1e-4, rtol=1e-5)
    check_op(
        torch.linalg.matrix_sqrth,
        (a,),
        dynamic_shapes=_dynamic(3),
        second_args=(b,),
        atol=1e-4,
        rtol=1e-5,
    )


def test_matrix_sqrth_empty():
    check_op(torch.linalg.matrix_sqrth, (torch.zeros(0, 4, 4),))


# ---------------------------------------------------------------------------------- LDL
def _ldl_factor_ex(a):
    return torch.linalg.ldl_factor_ex(a)


def test_ldl_inputs_take_two_by_two_pivots():
    # The factor tests below are only meaningful if eager really pivots in 2x2 blocks.
    _, pivots, _ = torch.linalg.ldl_factor_ex(_symmetric_indefinite(3, 6, 6, seed=0))
    assert (pivots < 0).any() and (pivots > 0).any()


@pytest.mark.parametrize("opset", [17, 20, 23])
def test_ldl_factor_ex_pivots_like_lapack(opset):
    a = _symmetric_indefinite(3, 6, 6, seed=0)
    # sytf2 reads only the lower triangle.
    a = a + torch.triu(torch.full_like(a, 5.0), diagonal=1)
    check_op(_ldl_factor_ex, (a,), opset=opset, rtol=1e-5, atol=1e-5)


def test_ldl_factor_ex_dynamic_loop():
    # 10 columns run the factorisation as an ONNX Loop; 6 unroll it (both paths, both shapes).
    a, b = _symmetric_indefinite(2, 6, 6, seed=1), _symmetric_indefinite(3, 10, 10, seed=2)
    check_op(_ldl_factor_ex, (a,), dynamic_shapes=_dynamic(3), second_args=(b,))
    check_op(_ldl_factor_ex, (b,), dynamic_shapes=_dynamic(3), second_args=(a,))


def test_ldl_factor_zero_column_sets_info():
    a = _symmetric_indefinite(5, 5, seed=3)
    a[1, :] = 0.0
    a[:, 1] = 0.0
    ld, pivots, info = torch.linalg.ldl_factor_ex(a)
    assert info.item() > 0  # eager reports the zero pivot; the export must report the same one
    check_op(_ldl_factor_ex, (a,))


def test_ldl_factor_and_empty():
    check_op(torch.linalg.ldl_factor, (_symmetric_indefinite(4, 4, seed=4),))
    check_op(_ldl_factor_ex, (torch.zeros(0, 3, 3),))
    check_op(_ldl_factor_ex, (torch.zeros(0, 0),))


def _ldl_case(batch, n, rhs_batch, k, seed):
    a = _symmetric_indefinite(*batch, n, n, seed=seed)
    ld, pivots = torch.linalg.ldl_factor(a)
    b = torch.randn(*rhs_batch, n, k, generator=torch.Generator().manual_seed(seed + 100))
    return ld, pivots, b


@pytest.mark.parametrize("rhs_batch", [(), (3,)])
def test_ldl_solve(rhs_batch):
    ld, pivots, b = _ldl_case((3,), 6, rhs_batch, 4, seed=5)
    assert (pivots < 0).any()
    check_op(torch.linalg.ldl_solve, (ld, pivots, b), rtol=1e-4, atol=1e-4)


def test_ldl_solve_dynamic():
    first = _ldl_case((2,), 6, (2,), 3, seed=6)
    second = _ldl_case((3,), 10, (3,), 5, seed=7)
    check_op(
        torch.linalg.ldl_solve,
        first,
        dynamic_shapes=_dynamic(3, 2, 3),
        second_args=second,
        rtol=1e-4,
        atol=1e-4,
    )


def test_ldl_solve_empty():
    ld, pivots = torch.linalg.ldl_factor(torch.zeros(0, 0))
    check_op(torch.linalg.ldl_solve, (ld, pivots, torch.zeros(0, 5)))


# -------------------------------------------------------------------------------- geqrf
def test_geqrf_meta_kernel_exists_only_while_exporting():
    from torch_onnx_conformance.exporter.ops._fake_kernels import installed

    def has_meta():
        return torch._C._dispatch_has_kernel_for_dispatch_key("aten::geqrf", "Meta")

    assert not has_meta()  # torch as shipped, outside an export
    with installed():
        assert has_meta()
        # A second registration attempt (a newer torch with its own kernel) leaves it alone.
        assert linalg_more._register_geqrf_meta() is None
        a, tau = torch.geqrf(torch.empty(2, 5, 3, device="meta"))
        assert a.shape == (2, 5, 3) and a.stride() == (15, 1, 5) and tau.shape == (2, 3)
    assert not has_meta()


def test_geqrf_dynamic():
    a = torch.randn(2, 5, 3, generator=torch.Generator().manual_seed(8))
    b = torch.randn(3, 7, 4, generator=torch.Generator().manual_seed(9))
    check_op(torch.geqrf, (a,), dynamic_shapes=_dynamic(3), second_args=(b,))


@pytest.mark.parametrize("optimize", [False, True])
def test_geqrf_no_columns(optimize):
    # The optimizer used to turn a no-op Slice over the empty axis into an invalid Split.
    check_op(torch.geqrf, (torch.randn(5, 0),), optimize=optimize)
