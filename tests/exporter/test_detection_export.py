"""torchvision detection models export with default arguments and match eager.

The capture patches (torch_onnx_conformance/exporter/_capture_patches.py) replace the torchvision functions
torch.export cannot capture; export applies them itself to a detection model (the SSDlite test
applies them around ``exporter.export``, the way a user can for a model export does not
recognise). Detections are compared up
to ties: two detections whose scores differ by less than the tolerance may come out in either
order, and near the ``detections_per_img`` cut-off either may be the one kept.
"""

from __future__ import annotations

import functools

import numpy as np
import onnxruntime as ort
import pytest
import torch

from torch_onnx_conformance import exporter
from torch_onnx_conformance.exporter._capture_patches import (
    CAPTURE_PATCHES,
    patches_for,
    resolve,
    torchvision_detection_patches,
)
from torch_onnx_conformance.exporter.diagnostics.detection_match import match_detections

torchvision = pytest.importorskip("torchvision")
detection = torchvision.models.detection


@functools.cache
def build(name: str) -> torch.nn.Module:
    """A small random-init detector with non-degenerate, unsaturated class scores (built once
    per test session: construction and BatchNorm calibration dominate these tests' time)."""
    from torch_onnx_conformance.model_zoo.init import calibrate_batch_norm_, reinit_

    if name.startswith("fasterrcnn"):
        kwargs = {"num_classes": 3, "box_score_thresh": 0.0, "box_detections_per_img": 20}
    else:
        kwargs = {"num_classes": 3, "score_thresh": 0.0, "detections_per_img": 20}
    model = getattr(detection, name)(weights=None, weights_backbone=None, **kwargs).eval()
    reinit_(model, 7)
    calibrate_batch_norm_(model, ([image(120, 104)],))
    # Fan-in init makes the class logits large enough to saturate the softmax, which ties
    # every score at 1.0; shrinking the last classification layer spreads them out.
    with torch.no_grad():
        if hasattr(model, "head"):
            for block in model.head.classification_head.module_list:
                block[-1].weight.mul_(0.1)
        else:
            model.roi_heads.box_predictor.cls_score.weight.mul_(0.1)
    return model


def image(height: int, width: int, seed: int = 1) -> torch.Tensor:
    return torch.rand(3, height, width, generator=torch.Generator().manual_seed(seed))


def run_onnx(program: exporter.ONNXProgram, img: torch.Tensor) -> list[np.ndarray]:
    session = ort.InferenceSession(
        program.model_proto.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    return session.run(None, {session.get_inputs()[0].name: img.numpy()})


def assert_detections_match(outputs: list[np.ndarray], expected: dict[str, torch.Tensor]):
    """Same detections up to ties (see the module docstring)."""
    problems = match_detections(
        {k: v.numpy() for k, v in expected.items()},
        dict(zip(expected, outputs)),  # the ONNX outputs follow the eager dict's order
    )
    assert not problems, "\n".join(problems)


def detection_count_dim(program: exporter.ONNXProgram):
    return program.model.graph.outputs[0].shape[0]


# ------------------------------------------------------------------------------ the patches
def test_registry_names_the_torchvision_patches():
    assert CAPTURE_PATCHES["torchvision-detection"] is torchvision_detection_patches


def test_patches_restore_the_originals_even_after_an_error():
    from torchvision.models.detection import transform
    from torchvision.ops import boxes, poolers

    originals = (
        boxes.batched_nms,
        poolers._multiscale_roi_align,
        transform.resize_boxes,
        transform.GeneralizedRCNNTransform.batch_images,
    )
    with pytest.raises(RuntimeError, match="inside"):
        with torchvision_detection_patches():
            assert boxes.batched_nms is not originals[0]
            raise RuntimeError("inside")
    assert (
        boxes.batched_nms,
        poolers._multiscale_roi_align,
        transform.resize_boxes,
        transform.GeneralizedRCNNTransform.batch_images,
    ) == originals


@pytest.mark.parametrize(
    "name, score_thresh",
    [
        ("fasterrcnn_mobilenet_v3_large_320_fpn", None),
        ("ssdlite320_mobilenet_v3_large", 0.0),
        ("ssdlite320_mobilenet_v3_large", 0.4),
    ],
)
def test_patched_models_compute_what_torchvision_computes(name, score_thresh):
    # Eager only: the replacements must not change results. 60x200 has an aspect ratio above
    # 2, so Faster R-CNN's resize takes its max-size branch; 77x77 floors to 319 in doubles.
    # SSD resizes to a fixed 320x320, so one size does; at threshold 0.4 it exercises the score
    # filter the SSD patch restructures.
    sizes = [(120, 104), (60, 200), (77, 77)] if name.startswith("faster") else [(120, 104)]
    model = build(name)
    saved = getattr(model, "score_thresh", None)
    if score_thresh is not None:
        model.score_thresh = score_thresh
    try:
        with torch.no_grad():
            for size in sizes:
                img = image(*size, seed=sum(size))
                expected = model([img])[0]
                with torchvision_detection_patches():
                    got = model([img])[0]
                assert len(expected["scores"]) > 0
                assert expected.keys() == got.keys()
                for key in expected:
                    torch.testing.assert_close(got[key], expected[key], rtol=0, atol=0)
    finally:
        if score_thresh is not None:
            model.score_thresh = saved


# -------------------------------------------------------------------------------- exports
@pytest.mark.slow
def test_fasterrcnn_mobilenet_exports_and_matches_eager():
    model = build("fasterrcnn_mobilenet_v3_large_320_fpn")
    img = image(120, 104)
    # MultiScaleRoIAlign caches the FPN scales eager inferred; forget them so the export infers
    # them through the patch (wrong scales would pool other features and change detections).
    pooler = model.roi_heads.box_roi_pool
    pooler.scales = pooler.map_levels = None
    program = exporter.export(model, ([img],))  # default arguments: the patches apply
    assert any(
        "capture_patches=['torchvision-detection'] automatically" in n for n in program.record.notes
    )
    assert program.record.capture_patches == ["torchvision-detection"]
    outputs = [v.name for v in program.model.graph.outputs]
    assert outputs == ["output.0.boxes", "output.0.labels", "output.0.scores"]  # image 0's dict
    # The number of detections is data-dependent: it must stay symbolic in the model.
    assert not isinstance(detection_count_dim(program), int)
    with torch.no_grad():
        expected = model([img])[0]
    assert len(expected["scores"]) > 0
    assert_detections_match(run_onnx(program, img), expected)


@pytest.mark.slow
def test_ssdlite_exports_with_dynamic_image_size_and_matches_eager_at_two_sizes():
    model = build("ssdlite320_mobilenet_v3_large")
    img = image(120, 104)
    with torchvision_detection_patches():
        program = exporter.export(model, ([img],), dynamic_shapes=([{1: "height", 2: "width"}],))
    assert not isinstance(detection_count_dim(program), int)
    assert [str(d) for d in program.model.graph.inputs[0].shape] == ["3", "height", "width"]
    for size in [(120, 104), (136, 90)]:
        img = image(*size, seed=size[0])
        with torch.no_grad():
            expected = model([img])[0]
        assert_detections_match(run_onnx(program, img), expected)


def test_detection_models_are_recognised():
    assert patches_for(build("ssdlite320_mobilenet_v3_large")) == ["torchvision-detection"]
    assert patches_for(torch.nn.Linear(2, 2)) == []
    assert resolve(None, torch.nn.Linear(2, 2)) == ((), None)
    assert resolve((), build("ssdlite320_mobilenet_v3_large")) == ((), None)


@pytest.mark.slow
def test_patches_turned_off_fail_capture_and_name_the_patch_and_line():
    model = build("fasterrcnn_mobilenet_v3_large_320_fpn")
    with pytest.raises(exporter.OnnxExporterError) as caught:
        exporter.export(model, ([image(120, 104)],), capture_patches=())
    message = str(caught.value)
    assert "capture_patches=['torchvision-detection']" in message
    assert "torchvision/ops/boxes.py" in message


@pytest.mark.parametrize("count", [0, 1, 30])
def test_mask_paste_patch_equals_torchvision(count):
    from torchvision.models.detection import roi_heads

    from torch_onnx_conformance.exporter._capture_patches import _paste_masks_in_image

    generator = torch.Generator().manual_seed(count)
    masks = torch.rand(count, 1, 28, 28, generator=generator)
    corner = torch.rand(count, 2, generator=generator) * 60
    size = torch.rand(count, 2, generator=generator) * 60 + 0.3  # below 1 pixel too
    boxes = torch.cat([corner, corner + size], dim=1)  # inside the image, as the model's are
    expected = roi_heads.paste_masks_in_image(masks, boxes, (100, 90))
    torch.testing.assert_close(
        _paste_masks_in_image(masks, boxes, (100, 90)), expected, rtol=0, atol=1e-5
    )


@pytest.mark.parametrize("count", [0, 1, 30])
def test_keypoint_patch_equals_torchvision(count):
    # Boxes from under a pixel (clamped to 1) to larger than the heatmap, so the bicubic
    # resize both shrinks and enlarges, and RoIs differ in size (the padded grid is masked).
    from torchvision.models.detection import roi_heads

    from torch_onnx_conformance.exporter._capture_patches import _heatmaps_to_keypoints

    generator = torch.Generator().manual_seed(count)
    maps = torch.randn(count, 5, 56, 56, generator=generator)
    corner = torch.rand(count, 2, generator=generator) * 60
    size = torch.rand(count, 2, generator=generator) * 90 + 0.3
    rois = torch.cat([corner, corner + size], dim=1)
    expected_xy, expected_scores = roi_heads.heatmaps_to_keypoints(maps, rois)
    xy, scores = _heatmaps_to_keypoints(maps, rois)
    torch.testing.assert_close(xy, expected_xy, rtol=0, atol=0)  # the same argmax pixel
    torch.testing.assert_close(scores, expected_scores, rtol=1e-5, atol=1e-4)


def test_keypoint_resize_patch_equals_torchvision():
    from torchvision.models.detection import transform

    from torch_onnx_conformance.exporter._capture_patches import _resize_keypoints

    keypoints = torch.rand(4, 5, 3, generator=torch.Generator().manual_seed(0)) * 100
    expected = transform.resize_keypoints(keypoints, [128, 111], [120, 104])
    torch.testing.assert_close(
        _resize_keypoints(keypoints, [128, 111], [120, 104]), expected, rtol=0, atol=0
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", ["maskrcnn_resnet50_fpn", "keypointrcnn_resnet50_fpn"])
def test_zoo_detection_cases_reproduce_their_detections_in_float64(name):
    # Eager float32 must agree with float64 on the zoo's build, else no export can match eager
    # up to ties: with undamped residual branches float32 rounding changed the proposals that
    # survive NMS (model_zoo.torchvision_cases._damp_residual_branches).
    import copy

    from torch_onnx_conformance.model_zoo import registry

    case = registry.get(f"torchvision/{name}")
    model, _, _ = case.build()
    model64 = copy.deepcopy(model).double()
    for sizes in (case.sizes, case.second_sizes):
        (images,), _ = case.inputs(sizes)
        with torch.no_grad():
            single = model(images)[0]
            double = model64([images[0].double()])[0]
        assert len(single["scores"]) > 0
        problems = match_detections(
            {
                k: v.float().numpy() if v.is_floating_point() else v.numpy()
                for k, v in double.items()
            },
            {k: v.numpy() for k, v in single.items()},
        )
        assert not problems, "\n".join(problems)
