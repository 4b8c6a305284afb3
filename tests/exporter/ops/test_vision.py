"""torchvision ops (nms, roi_align, roi_pool, ps_roi_align, deform_conv2d) against torchvision's
eager kernels, static and at a second shape, plus the import-order guarantee."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

from tests.op_check import Lambda, check_op
from torch_onnx_conformance import exporter

torchvision = pytest.importorskip("torchvision")
ops = torchvision.ops

DYN = torch.export.Dim.DYNAMIC
# batched_nms picks a Python loop above 4000 coordinates; keep the symbolic box count below it.
BOXES = torch.export.Dim("boxes", max=1000)


def random_boxes(n: int, size: float = 32.0, seed: int = 0) -> torch.Tensor:
    """n valid xyxy boxes (x1 < x2, y1 < y2) inside a size x size image."""
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g) * size
    wh = torch.rand(n, 2, generator=g) * size / 2 + 0.5
    return torch.cat([xy, xy + wh], 1)


def random_rois(n: int, batch: int, size: float = 28.0, seed: int = 0) -> torch.Tensor:
    """(n, 5) rois: batch index, then an xyxy box."""
    g = torch.Generator().manual_seed(seed + 100)
    index = torch.randint(0, batch, (n, 1), generator=g).float()
    return torch.cat([index, random_boxes(n, size, seed)], 1)


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def scores(n: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(n, generator=torch.Generator().manual_seed(seed + 7))


# --------------------------------------------------------------------------------------- nms
@pytest.mark.parametrize("iou", [0.0, 0.3, 0.5, 0.9])
def test_nms_matches_torchvision(iou):
    program = check_op(lambda b, s: ops.nms(b, s, iou), (random_boxes(80), scores(80)))
    assert "NonMaxSuppression" in {n.op_type for n in program.model.graph}


def test_nms_dynamic_box_count_including_empty():
    boxes, s = random_boxes(60), scores(60)
    shapes = (({0: BOXES}, {0: BOXES}),)
    check_op(
        lambda b, s: ops.nms(b, s, 0.5),
        (boxes, s),
        dynamic_shapes=shapes,
        second_args=(random_boxes(23, seed=1), scores(23, seed=1)),
    )
    check_op(
        lambda b, s: ops.nms(b, s, 0.5),
        (boxes, s),
        dynamic_shapes=shapes,
        second_args=(random_boxes(0), scores(0)),
    )


def test_nms_float64_and_batched_nms():
    check_op(lambda b, s: ops.nms(b, s, 0.4), (random_boxes(40).double(), scores(40).double()))
    labels = torch.randint(0, 3, (60,), generator=torch.Generator().manual_seed(3))
    labels2 = torch.randint(0, 3, (31,), generator=torch.Generator().manual_seed(4))
    check_op(
        lambda b, s, i: ops.batched_nms(b, s, i, 0.5),
        (random_boxes(60), scores(60), labels),
        dynamic_shapes=(({0: BOXES}, {0: BOXES}, {0: BOXES}),),
        second_args=(random_boxes(31, seed=2), scores(31, seed=2), labels2),
    )


def _roi_ops(b, s, x, r):
    return (
        ops.nms(b, s, 0.5),
        ops.roi_align(x, r, 2, 0.5, -1, False),
        ops.roi_pool(x, r, 2, 0.5),
        ops.ps_roi_align(x, r, 2, 0.5),
    )


def _roi_ops_args():
    return (random_boxes(30), scores(30), randn(2, 8, 12, 12), random_rois(5, 2))


# Opset 22 revised RoiAlign and MaxRoiPool; onnxruntime 1.31's CPU provider has no kernel for
# either revision, so from 22 on both are computed from other ops (and the model still loads).
@pytest.mark.parametrize("opset", [17, 21, 22, 23])
def test_nms_roi_ops_across_opsets(opset):
    check_op(_roi_ops, _roi_ops_args(), opset=opset)


# --------------------------------------------------------------------------------- roi_align
@pytest.mark.parametrize("aligned", [True, False])
@pytest.mark.parametrize("sampling_ratio", [-1, 0, 2])
def test_roi_align_matches_torchvision(aligned, sampling_ratio):
    x, rois = randn(2, 4, 16, 16), random_rois(9, 2)
    check_op(lambda x, r: ops.roi_align(x, r, (3, 4), 0.5, sampling_ratio, aligned), (x, rois))


def test_roi_align_dynamic_sizes_and_box_list():
    shapes = (({2: DYN, 3: DYN}, {0: DYN}),)
    check_op(
        lambda x, r: ops.roi_align(x, r, 3, 0.5, -1, True),
        (randn(2, 4, 16, 16), random_rois(7, 2)),
        dynamic_shapes=shapes,
        second_args=(randn(2, 4, 12, 20, seed=1), random_rois(3, 2, seed=1)),
    )
    rois = random_rois(7, 2)
    check_op(
        lambda x, a, b: ops.roi_align(x, [a, b], 2, 0.25, 2, False),
        (randn(2, 3, 12, 12), rois[:3, 1:], rois[3:, 1:]),
    )


@pytest.mark.parametrize("opset", [None, 22])  # RoiAlign, and from 22 on gathers
def test_roi_align_float64(opset):
    check_op(
        lambda x, r: ops.roi_align(x, r, 3, 0.5, -1, True),
        (randn(2, 4, 16, 16).double(), random_rois(7, 2).double()),
        atol=1e-10,
        rtol=1e-10,
        opset=opset,
    )


def test_roi_align_float16_runs_in_float32():
    # torchvision's half kernel rounds its coordinates in half precision; onnxruntime's RoiAlign
    # has no float16 kernel, so we compute in float32 and compare against float32 eager.
    x, rois = randn(2, 4, 16, 16).half(), random_rois(7, 2).half()
    program = exporter.export(
        Lambda(lambda x, r: ops.roi_align(x, r, 3, 0.5, -1, True)).eval(), (x, rois), optimize=False
    )
    session = ort.InferenceSession(
        program.model_proto.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    (got,) = session.run(None, {i.name: t.numpy() for i, t in zip(session.get_inputs(), (x, rois))})
    assert got.dtype == np.float16
    expected = ops.roi_align(x.float(), rois.float(), 3, 0.5, -1, True)
    torch.testing.assert_close(torch.from_numpy(got).float(), expected, atol=2e-3, rtol=2e-3)


# ---------------------------------------------------------------------------------- roi_pool
def test_roi_pool_matches_torchvision():
    x, rois = randn(2, 4, 16, 16), random_rois(9, 2)
    check_op(lambda x, r: ops.roi_pool(x, r, (3, 4), 0.5), (x, rois))
    # Box corners on .5 pixels exercise torchvision's round-half-away-from-zero.
    halves = torch.tensor([[0, 1.5, 2.5, 9.5, 7.5], [1, 0.5, 0.5, 3.5, 14.5], [0, 3, 3, 3, 3]])
    check_op(lambda x, r: ops.roi_pool(x, r, 2, 1.0), (x, halves))


@pytest.mark.parametrize("opset", [22, 23])
def test_roi_pool_without_a_max_roi_pool_kernel(opset):
    x, rois = randn(2, 4, 16, 16), random_rois(9, 2)
    # A box off the map has empty bins (0 in torchvision), and corners on .5 pixels round away
    # from zero.
    edge = torch.tensor([[0, 40.0, 40.0, 50.0, 50.0], [1, 1.5, 2.5, 9.5, 7.5], [0, 3, 3, 3, 3]])
    for boxes in (rois, edge):
        check_op(lambda x, r: ops.roi_pool(x, r, (3, 4), 0.5), (x, boxes), opset=opset)
    program = exporter.export(
        Lambda(lambda x, r: ops.roi_pool(x, r, 2, 0.5)).eval(), (x, rois), opset_version=opset
    )
    assert "MaxRoiPool" not in {n.op_type for n in program.model_proto.graph.node}
    check_op(
        lambda x, r: torch.ops.torchvision.roi_pool(x, r, 0.5, 3, 4),
        (x, rois),
        dynamic_shapes=(({2: DYN, 3: DYN}, {0: DYN}),),
        second_args=(randn(2, 4, 12, 20, seed=1), random_rois(3, 2, seed=1)),
        opset=opset,
    )


def test_roi_pool_argmax_output_dynamic():
    # The argmax output (what roi_pool's backward reads) is built only when it is used.
    shapes = (({2: DYN, 3: DYN}, {0: DYN}),)
    check_op(
        lambda x, r: torch.ops.torchvision.roi_pool(x, r, 0.5, 3, 4),
        (randn(2, 4, 16, 16), random_rois(7, 2)),
        dynamic_shapes=shapes,
        second_args=(randn(2, 4, 12, 20, seed=1), random_rois(3, 2, seed=1)),
    )


# ------------------------------------------------------------------------------ ps_roi_align
@pytest.mark.parametrize("sampling_ratio", [-1, 2])
def test_ps_roi_align_matches_torchvision(sampling_ratio):
    x, rois = randn(2, 2 * 12, 16, 16), random_rois(9, 2)
    check_op(lambda x, r: ops.ps_roi_align(x, r, (3, 4), 0.5, sampling_ratio), (x, rois))


def test_ps_roi_align_channel_mapping_dynamic():
    shapes = (({2: DYN, 3: DYN}, {0: DYN}),)
    check_op(
        lambda x, r: torch.ops.torchvision.ps_roi_align(x, r, 0.5, 2, 2, -1),
        (randn(2, 12, 16, 16), random_rois(7, 2)),
        dynamic_shapes=shapes,
        second_args=(randn(2, 12, 12, 20, seed=1), random_rois(3, 2, seed=1)),
    )


# ----------------------------------------------------------------------------- deform_conv2d
# onnxruntime's CPU provider has a DeformConv kernel (checked with 1.31), so these run there.
@pytest.mark.parametrize("opset", [19, 23])
def test_deform_conv2d_with_mask(opset):
    x, weight, bias = randn(2, 4, 9, 9), randn(6, 4, 3, 3, seed=1), randn(6, seed=2)
    offset, mask = randn(2, 2 * 9, 9, 9, seed=3) * 2, torch.rand(2, 9, 9, 9)
    check_op(
        lambda x, o, w, m, b: ops.deform_conv2d(x, o, w, b, padding=1, mask=m),
        (x, offset, weight, mask, bias),
        opset=opset,
        atol=1e-4,
        rtol=1e-4,
    )


def test_deform_conv2d_stride_dilation_without_mask_or_bias():
    x, weight = randn(2, 4, 9, 9), randn(6, 4, 3, 3, seed=1)
    offset = randn(2, 18, 5, 3, seed=3)
    check_op(
        lambda x, o, w: ops.deform_conv2d(x, o, w, stride=2, padding=(1, 0), dilation=(1, 2)),
        (x, offset, weight),
        atol=1e-4,
        rtol=1e-4,
    )


def test_deform_conv2d_groups_and_offset_groups():
    x, weight, bias = randn(2, 4, 7, 7), randn(6, 2, 3, 3, seed=1), randn(6, seed=2)
    offset, mask = randn(2, 2 * 2 * 9, 7, 7, seed=3), torch.rand(2, 2 * 9, 7, 7)
    check_op(
        lambda x, o, w, m, b: torch.ops.torchvision.deform_conv2d(
            x, w, o, m, b, 1, 1, 1, 1, 1, 1, 2, 2, True
        ),
        (x, offset, weight, mask, bias),
        atol=1e-4,
        rtol=1e-4,
    )


def test_deform_conv2d_below_opset_19_names_the_fix():
    x, weight, offset = randn(1, 2, 5, 5), randn(3, 2, 3, 3), randn(1, 18, 5, 5)
    with pytest.raises(exporter.OnnxExporterError, match="opset_version=19 or later"):
        exporter.export(
            Lambda(lambda x, o, w: ops.deform_conv2d(x, o, w, padding=1)).eval(),
            (x, offset, weight),
            opset_version=18,
        )


# ------------------------------------------------------------------------------ import order
def test_translations_work_when_torchvision_is_imported_after_exporter():
    script = textwrap.dedent(
        """
        import sys
        from torch_onnx_conformance import exporter
        assert "torchvision" not in sys.modules, "importing exporter imported torchvision"
        import numpy as np
        import onnxruntime as ort
        import torch
        import torchvision

        class Model(torch.nn.Module):
            def forward(self, boxes, scores, x, rois):
                return (torchvision.ops.nms(boxes, scores, 0.5),
                        torchvision.ops.roi_align(x, rois, 2, 1.0, -1, True))

        g = torch.Generator().manual_seed(0)
        xy = torch.rand(20, 2, generator=g) * 10
        boxes = torch.cat([xy, xy + 1 + torch.rand(20, 2, generator=g) * 5], 1)
        scores = torch.rand(20, generator=g)
        x = torch.randn(1, 2, 8, 8, generator=g)
        rois = torch.tensor([[0.0, 1.0, 1.0, 6.0, 5.0]])
        args = (boxes, scores, x, rois)
        program = exporter.export(Model(), args)
        session = ort.InferenceSession(program.model_proto.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        got = session.run(None, {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)})
        expected = Model()(*args)
        assert np.array_equal(got[0], expected[0].numpy()), (got[0], expected[0])
        assert np.allclose(got[1], expected[1].numpy(), atol=1e-5)
        print("ok")
        """
    )
    root = Path(__file__).resolve().parents[3]
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")


# ------------------------------------------------------------------- roi_align at opset >= 22
@pytest.mark.parametrize("opset", [22, 23])
@pytest.mark.parametrize("aligned", [True, False])
@pytest.mark.parametrize("sampling_ratio", [-1, 2])
def test_roi_align_from_gathers_where_onnxruntime_lacks_roialign(opset, aligned, sampling_ratio):
    # onnxruntime 1.31 has no RoiAlign-22 kernel, and a model has one default-domain opset:
    # from 22 on the translation computes torchvision's sampling itself. RoIs reaching past
    # the map (samples at -1..0 and beyond the edge) and, with aligned=True, of zero size.
    x, rois = randn(2, 4, 16, 16), random_rois(9, 2)
    edges = torch.tensor([[0, -6.0, -3.0, 40.0, 31.5], [1, 20.0, 5.0, 20.0, 5.0]])
    program = check_op(
        lambda x, r: ops.roi_align(x, r, (3, 4), 0.5, sampling_ratio, aligned),
        (x, torch.cat([rois, edges])),
        opset=opset,
    )
    assert "RoiAlign" not in {n.op_type for n in program.model.graph}


def test_roi_align_from_gathers_dynamic_sizes_and_no_rois():
    shapes = (({2: DYN, 3: DYN}, {0: DYN}),)
    for second in (random_rois(3, 2, seed=1), random_rois(0, 2)):
        check_op(
            lambda x, r: ops.roi_align(x, r, 3, 0.25, -1, False),
            (randn(2, 4, 16, 16), random_rois(7, 2)),
            dynamic_shapes=shapes,
            second_args=(randn(2, 4, 12, 20, seed=1), second),
            opset=22,
        )


def test_ps_roi_align_from_gathers():
    check_op(
        lambda x, r: ops.ps_roi_align(x, r, 2, 0.5),
        (randn(2, 8, 12, 12), random_rois(5, 2)),
        opset=22,
    )
