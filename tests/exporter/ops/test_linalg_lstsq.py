"""torch.linalg.lstsq against eager torch: every driver whose output shapes are static, full
rank and rank deficient, vector and broadcast right-hand sides, empty inputs, and the one
data-dependent case (gelss/gelsd with m > n) refused with a clear error."""

from __future__ import annotations

import pytest
import torch

from tests.op_check import check_op, dynamic, static_and_dynamic
from torch_onnx_conformance import exporter
from torch_onnx_conformance.exporter.ops import linalg_lstsq

AUTO = torch.export.Dim.AUTO


def conditioned(*shape):
    """Matrices with singular values in [1, 2]: float32 eager and the float64 ONNX solution
    then agree to rounding, whatever the shape."""
    *batch, m, n = shape
    k = min(m, n)
    left = torch.linalg.qr(torch.randn(*batch, m, k)).Q
    right = torch.linalg.qr(torch.randn(*batch, n, k)).Q
    return left @ torch.diag_embed(torch.linspace(1, 2, k).expand(*batch, k)) @ right.mT


def low_rank(m, n, rank):
    return conditioned(m, rank) @ conditioned(rank, n)


def lstsq(driver=None, rcond=None):
    return lambda a, b: torch.linalg.lstsq(a, b, rcond=rcond, driver=driver)


# Inputs are drawn at import: a fixed seed keeps every run on the same cases.
torch.manual_seed(0)

# (id, fn, first inputs, second inputs at other sizes or None for static only)
CASES = [
    ("gels_wide", lstsq("gels"), (conditioned(2, 3), torch.randn(2, 3)), None),
    ("gels_square", lstsq("gels"), (conditioned(3, 3), torch.randn(3, 2)), None),
    ("gels_tall", lstsq("gels"), (conditioned(5, 3), torch.randn(5, 2)), None),
    (
        "gels_wide_batched",
        lstsq("gels"),
        (conditioned(3, 2, 3), torch.randn(3, 2, 3)),
        (conditioned(4, 3, 4), torch.randn(4, 3, 4)),
    ),
    (
        "gels_tall_batched",
        lstsq("gels"),
        (conditioned(2, 3, 5, 3), torch.randn(2, 3, 5, 2)),
        (conditioned(3, 4, 7, 4), torch.randn(3, 4, 7, 3)),
    ),
    ("gels_tall_loop", lstsq("gels"), (conditioned(12, 10), torch.randn(12, 2)), None),
    ("gels_wide_loop", lstsq("gels"), (conditioned(10, 12), torch.randn(10, 2)), None),
    ("gels_vector", lstsq("gels"), (conditioned(2, 5, 3), torch.randn(2, 5)), None),
    ("gels_broadcast", lstsq("gels"), (conditioned(1, 5, 3), torch.randn(3, 5, 2)), None),
    (
        "default_driver_tall",
        lstsq(),
        (conditioned(2, 5, 3), torch.randn(2, 5, 2)),
        (conditioned(3, 7, 4), torch.randn(3, 7, 3)),
    ),
    ("gelsy_wide", lstsq("gelsy"), (conditioned(2, 4), torch.randn(2, 3)), None),
    ("gelsy_vector", lstsq("gelsy"), (conditioned(2, 3, 5), torch.randn(2, 3)), None),
    (
        "gelss_wide_batched",
        lstsq("gelss"),
        (conditioned(3, 2, 3), torch.randn(3, 2, 3)),
        (conditioned(4, 3, 4), torch.randn(4, 3, 4)),
    ),
    ("gelsd_square", lstsq("gelsd"), (conditioned(3, 3), torch.randn(3, 2)), None),
    ("gelss_broadcast", lstsq("gelss"), (conditioned(1, 2, 4), torch.randn(3, 2, 2)), None),
    ("gelss_rcond", lstsq("gelss", rcond=0.6), (conditioned(3, 5), torch.randn(3, 2)), None),
    ("gelsy_rank_deficient", lstsq("gelsy"), (low_rank(5, 4, 2), torch.randn(5, 3)), None),
    ("gelss_rank_deficient", lstsq("gelss"), (low_rank(3, 5, 2), torch.randn(3, 2)), None),
    ("gelsd_rank_deficient", lstsq("gelsd"), (low_rank(4, 4, 3), torch.randn(4, 2)), None),
    ("gels_f64", lstsq("gels"), (conditioned(6, 3).double(), torch.randn(6, 2).double()), None),
    ("gels_no_rows", lstsq("gels"), (torch.randn(0, 3), torch.randn(0, 2)), None),
    ("gels_no_columns", lstsq("gels"), (torch.randn(4, 0), torch.randn(4, 2)), None),
    ("gelss_no_columns", lstsq("gelss"), (torch.randn(4, 0), torch.randn(4, 2)), None),
    ("gels_no_rhs", lstsq("gels"), (torch.randn(4, 3), torch.randn(4, 0)), None),
    (
        "first_two_outputs",
        lambda a, b: torch.linalg.lstsq(a, b, driver="gels")[:2],
        (conditioned(3, 4, 3), torch.randn(3, 4, 3)),
        (conditioned(4, 6, 4), torch.randn(4, 6, 4)),
    ),
]


@pytest.mark.parametrize(("fn", "args", "second"), static_and_dynamic(CASES))
def test_lstsq_matches_eager(fn, args, second):
    check_op(
        fn,
        args,
        dynamic_shapes=None if second is None else dynamic(*args, dim=AUTO),
        second_args=second,
        rtol=1e-4,
        atol=1e-4,
    )


@pytest.mark.parametrize("opset", [17, 23])
@pytest.mark.parametrize("driver", ["gels", "gelsd"])
def test_lstsq_opsets(opset, driver):
    check_op(lstsq(driver), (conditioned(2, 3, 4), torch.randn(2, 3, 2)), opset=opset)


@pytest.mark.parametrize("driver", ["gelsy", "gelss", "gelsd"])
def test_rank_deficient_rank_output(driver):
    """A rank-2 matrix: eager reports rank 2 and the minimum-norm solution; check_op compares
    the exported rank and solution with it."""
    a, b = low_rank(3, 6, 2), torch.randn(3, 2)
    assert int(torch.linalg.lstsq(a, b, driver=driver).rank) == 2
    check_op(lstsq(driver), (a, b), rtol=1e-4, atol=1e-4)


class _Lstsq(torch.nn.Module):
    def __init__(self, driver):
        super().__init__()
        self.driver = driver

    def forward(self, a, b):
        return torch.linalg.lstsq(a, b, driver=self.driver)


@pytest.mark.parametrize("driver", ["gelss", "gelsd"])
def test_svd_driver_with_more_rows_is_refused(driver):
    """Their residuals exist only for full column rank: a shape no fake kernel can know."""
    with pytest.raises(exporter.OnnxExporterError, match="depends on the data") as info:
        exporter.export(_Lstsq(driver).eval(), (conditioned(5, 3), torch.randn(5, 2)))
    assert f"driver={driver!r}" in str(info.value)


def test_fake_kernel_registers_once_and_only_while_exporting():
    from torch_onnx_conformance.exporter.ops._fake_kernels import installed

    with installed():
        assert linalg_lstsq._register_fake() is None  # already there
    library = linalg_lstsq._register_fake()  # gone again after the export
    assert library is not None
    library._destroy()


def test_fake_kernel_shapes_follow_eager():
    """Output shapes under fake tensors equal eager's for every driver with static shapes."""
    from torch_onnx_conformance.exporter.ops._fake_kernels import installed

    cases = [((2, 3), (2, 3)), ((4, 3), (4, 2)), ((3, 3), (3,)), ((1, 2, 4), (3, 2, 2))]
    with installed():
        _check_fake_shapes(cases)


def _check_fake_shapes(cases):
    for driver in (None, "gels", "gelsy", "gelss", "gelsd"):
        for a_shape, b_shape in cases:
            a, b = torch.randn(*a_shape), torch.randn(*b_shape)
            if driver in ("gelss", "gelsd") and a_shape[-2] > a_shape[-1]:
                continue  # the refused case
            want = [(x.shape, x.dtype) for x in torch.linalg.lstsq(a, b, driver=driver)]
            with torch._subclasses.fake_tensor.FakeTensorMode() as mode:
                fake = torch.linalg.lstsq(mode.from_tensor(a), mode.from_tensor(b), driver=driver)
                got = [(x.shape, x.dtype) for x in fake]
            assert got == want, (driver, a_shape, b_shape)
