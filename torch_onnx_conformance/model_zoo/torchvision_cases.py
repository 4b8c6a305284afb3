"""torchvision models with ``weights=None``, re-initialised and BatchNorm-calibrated.

Every classification model that ``torchvision.models.list_models(module=torchvision.models)``
lists, plus segmentation, detection, video and optical-flow models. Inputs are the smallest
the architecture accepts, so the full tier stays affordable on a CPU; nothing is downloaded.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torchvision
from torch import nn

from torch_onnx_conformance.exporter.diagnostics.detection_match import (
    DETECTION_KEYS,
    match_flat_detections,
)
from torch_onnx_conformance.model_zoo._common import generator_for, seed_for
from torch_onnx_conformance.model_zoo.init import calibrate_batch_norm_, reinit_
from torch_onnx_conformance.model_zoo.registry import Inputs, ModelCase, register

_SMOKE = {"resnet18", "mobilenet_v3_small"}
_DEFAULT = {
    "squeezenet1_0",
    "shufflenet_v2_x0_5",
    "efficientnet_b0",
    "regnet_x_400mf",
    "lraspp_mobilenet_v3_large",
    "ssdlite320_mobilenet_v3_large",
    "r3d_18",
}


def _tier(model_name: str) -> str:
    if model_name in _SMOKE:
        return "smoke"
    if model_name in _DEFAULT:
        return "default"
    return "full"


@dataclasses.dataclass(frozen=True)
class _Vision:
    """How one torchvision model is built and fed."""

    height: int = 64
    width: int = 64
    spatial_dynamic: bool = False
    constructor_kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    notes: str = ""


# Families whose networks are fully convolutional up to a global pooling: their spatial axes
# are declared dynamic too (non-square, so a swapped height/width shows up).
_SPATIAL_DYNAMIC_PREFIXES = (
    "resnet",
    "resnext",
    "wide_resnet",
    "mobilenet",
    "efficientnet",
    "regnet",
    "mnasnet",
    "shufflenet",
    "squeezenet",
    "densenet",
    "convnext",
)

_CLASSIFICATION_OVERRIDES: dict[str, _Vision] = {
    "inception_v3": _Vision(96, 96, notes="inception_v3 needs at least 75x75 inputs."),
    "maxvit_t": _Vision(224, 224, notes="MaxViT's 7x7 partitions need 224x224 inputs."),
    **{
        name: _Vision(
            size,
            size,
            constructor_kwargs={"image_size": size},
            notes=f"Built with image_size={size} (default 224) to keep it cheap.",
        )
        for name, size in (
            ("vit_b_16", 64),
            ("vit_b_32", 64),
            ("vit_l_16", 64),
            ("vit_l_32", 64),
            ("vit_h_14", 56),
        )
    },
}


def _classification_spec(model_name: str) -> _Vision:
    if model_name in _CLASSIFICATION_OVERRIDES:
        return _CLASSIFICATION_OVERRIDES[model_name]
    if model_name.startswith(_SPATIAL_DYNAMIC_PREFIXES):
        return _Vision(64, 56, spatial_dynamic=True)
    return _Vision()


def _image_case(
    model_name: str,
    family: str,
    constructor: Callable[..., nn.Module],
    spec: _Vision,
    batch: int = 2,
) -> ModelCase:
    name = f"torchvision/{model_name}"
    axes = {0: "batch"}
    sizes = {"batch": batch}
    second_sizes = {"batch": batch + 1}
    if spec.spatial_dynamic:
        axes.update({2: "height", 3: "width"})
        sizes.update(height=spec.height, width=spec.width)
        second_sizes.update(height=spec.height + 32, width=spec.width + 24)

    def make_inputs(axis_sizes: Mapping[str, int]) -> Inputs:
        generator = generator_for(name, axis_sizes)
        shape = (
            axis_sizes["batch"],
            3,
            axis_sizes.get("height", spec.height),
            axis_sizes.get("width", spec.width),
        )
        return (torch.randn(shape, generator=generator),), {}

    def make_module() -> nn.Module:
        module = constructor(weights=None, **spec.constructor_kwargs)
        return _deterministic(module, name, make_inputs(sizes))

    return register(
        ModelCase(
            name=name,
            family=family,
            tier=_tier(model_name),
            make_module=make_module,
            make_inputs=make_inputs,
            sizes=sizes,
            second_sizes=second_sizes,
            dynamic_shapes=(axes,),
            notes=spec.notes,
        )
    )


def _deterministic(
    module: nn.Module,
    name: str,
    inputs: Inputs,
    before_calibration: Callable[[nn.Module], None] | None = None,
) -> nn.Module:
    reinit_(module, seed_for(name))
    if before_calibration is not None:
        before_calibration(module)
    args, kwargs = inputs
    return calibrate_batch_norm_(module, args, kwargs)


def _register_classification() -> None:
    for model_name in torchvision.models.list_models(module=torchvision.models):
        _image_case(
            model_name,
            "torchvision-classification",
            torchvision.models.get_model_builder(model_name),
            _classification_spec(model_name),
        )


def _register_segmentation() -> None:
    segmentation = torchvision.models.segmentation
    for model_name in (
        "fcn_resnet50",
        "deeplabv3_mobilenet_v3_large",
        "deeplabv3_resnet50",
        "lraspp_mobilenet_v3_large",
    ):
        _image_case(
            model_name,
            "torchvision-segmentation",
            getattr(segmentation, model_name),
            _Vision(
                64,
                56,
                spatial_dynamic=True,
                constructor_kwargs={"weights_backbone": None, "num_classes": 5},
                notes="num_classes=5; returns {'out': logits} upsampled to the input size.",
            ),
        )


# --- detection -------------------------------------------------------------------------------

_SMALL_RCNN = {"min_size": 128, "max_size": 160}
_DETECTION: dict[str, dict[str, Any]] = {
    "fasterrcnn_mobilenet_v3_large_320_fpn": {
        "num_classes": 3,
        "box_score_thresh": 0.0,
        "box_detections_per_img": 20,
    },
    "fasterrcnn_resnet50_fpn": {
        **_SMALL_RCNN,
        "num_classes": 3,
        "box_score_thresh": 0.0,
        "box_detections_per_img": 20,
    },
    "maskrcnn_resnet50_fpn": {
        **_SMALL_RCNN,
        "num_classes": 3,
        "box_score_thresh": 0.0,
        "box_detections_per_img": 10,
    },
    "keypointrcnn_resnet50_fpn": {
        **_SMALL_RCNN,
        "num_classes": 2,
        "num_keypoints": 5,
        "box_score_thresh": 0.0,
        "box_detections_per_img": 10,
    },
    "retinanet_resnet50_fpn": {
        **_SMALL_RCNN,
        "num_classes": 3,
        "score_thresh": 0.0,
        "detections_per_img": 20,
    },
    "fcos_resnet50_fpn": {
        **_SMALL_RCNN,
        "num_classes": 3,
        "score_thresh": 0.0,
        "detections_per_img": 20,
    },
    "ssd300_vgg16": {"num_classes": 3, "score_thresh": 0.0, "detections_per_img": 20},
    "ssdlite320_mobilenet_v3_large": {
        "num_classes": 3,
        "score_thresh": 0.0,
        "detections_per_img": 20,
    },
}

_DETECTION_NOTES = (
    "Input is a list of one 3xHxW image (H and W dynamic); the model resizes it internally. "
    "weights_backbone=None, small num_classes, score threshold 0 so the output is never empty. "
    "Outputs are boxes/scores/labels after NMS and top-k, so tiny numeric differences can "
    "reorder detections: they are compared up to score ties "
    "(exporter.diagnostics.detection_match). Exported with default arguments: the exporter "
    "applies its torchvision-detection capture patches itself. Residual branches are damped (last BatchNorm gain x0.2) so eager float32 "
    "reproduces its own float64 detections; undamped, rounding alone changed them."
)


def _detection_keys(model_name: str) -> tuple[str, ...]:
    """The output dict's keys in the order the model returns (and the export flattens) them."""
    if "rcnn" not in model_name:  # RetinaNet, FCOS, SSD and SSDlite
        return ("boxes", "scores", "labels")
    if model_name.startswith("maskrcnn"):
        return (*DETECTION_KEYS, "masks")
    if model_name.startswith("keypointrcnn"):
        return (*DETECTION_KEYS, "keypoints", "keypoints_scores")
    return DETECTION_KEYS


def _register_detection() -> None:
    detection = torchvision.models.detection
    for model_name, constructor_kwargs in _DETECTION.items():
        _detection_case(model_name, getattr(detection, model_name), constructor_kwargs)


def _detection_case(
    model_name: str, constructor: Callable[..., nn.Module], constructor_kwargs: Mapping[str, Any]
) -> ModelCase:
    name = f"torchvision/{model_name}"
    sizes = {"height": 120, "width": 104}

    def make_inputs(axis_sizes: Mapping[str, int]) -> Inputs:
        generator = generator_for(name, axis_sizes)
        image = torch.rand((3, axis_sizes["height"], axis_sizes["width"]), generator=generator)
        return ([image],), {}

    def make_module() -> nn.Module:
        module = constructor(weights=None, weights_backbone=None, **constructor_kwargs)
        module = _deterministic(module, name, make_inputs(sizes), _damp_residual_branches)
        _spread_class_scores(module)
        return module

    return register(
        ModelCase(
            name=name,
            family="torchvision-detection",
            tier=_tier(model_name),
            make_module=make_module,
            make_inputs=make_inputs,
            sizes=sizes,
            second_sizes={"height": 136, "width": 112},
            dynamic_shapes=([{1: "height", 2: "width"}],),
            compare=functools.partial(match_flat_detections, keys=_detection_keys(model_name)),
            notes=_DETECTION_NOTES,
        )
    )


#: Gain of each residual branch's last normalisation in the detection backbones.
_RESIDUAL_BRANCH_GAIN = 0.2


def _damp_residual_branches(module: nn.Module) -> None:
    """Scale the last BatchNorm gain of every residual branch down (torchvision's
    ``zero_init_residual``, but not to zero, so every branch still counts).

    With fan-in init and calibrated BatchNorm, each ResNet-50 stage adds its branches at full
    scale and float32 rounding grows about 5x per stage: eager float32 and float64 then differ
    by 2e-3 (relative) in the FPN features, enough to change which proposals survive NMS, so
    eager itself does not reproduce its own detections in float64 and no export could match
    them (measured on Mask and Keypoint R-CNN). Damped branches keep the features within 1e-5
    of float64 and the detections identical."""
    from torchvision.models.mobilenetv3 import InvertedResidual
    from torchvision.models.resnet import BasicBlock, Bottleneck

    with torch.no_grad():
        for block in module.modules():
            if isinstance(block, Bottleneck):
                norm = block.bn3
            elif isinstance(block, BasicBlock):
                norm = block.bn2
            elif isinstance(block, InvertedResidual) and block.use_res_connect:
                norm = block.block[-1][1]
            else:
                continue
            norm.weight.mul_(_RESIDUAL_BRANCH_GAIN)


def _spread_class_scores(module: nn.Module) -> None:
    """Fan-in init makes the class logits large enough to saturate the softmax, which ties
    every score at 1.0 and leaves NMS's order to rounding; a smaller last classification layer
    spreads the scores out."""
    with torch.no_grad():
        head = getattr(module, "head", None)
        if head is not None and hasattr(head, "classification_head"):
            classification = head.classification_head
            layers = getattr(classification, "module_list", None)
            if layers is not None:  # SSD, SSDlite
                for block in layers:
                    last = block[-1] if isinstance(block, nn.Sequential) else block
                    last.weight.mul_(0.1)
            elif hasattr(classification, "cls_logits"):  # RetinaNet, FCOS
                classification.cls_logits.weight.mul_(0.1)
        roi_heads = getattr(module, "roi_heads", None)
        if roi_heads is not None:
            roi_heads.box_predictor.cls_score.weight.mul_(0.1)


# --- video -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Clip:
    frames: int
    size: int
    time_dynamic: bool
    notes: str = ""


# The ResNet-style video models halve time and space three times after the stem; 16 frames of
# 32x32 keep every intermediate size at 2 or more, since a size-1 intermediate makes
# torch.export guard the input size (4 frames captured, then failed "frames <= 4" at 6).
_SMALL_CLIP = _Clip(16, 32, time_dynamic=True)
_VIDEO: dict[str, _Clip] = {
    "r3d_18": _SMALL_CLIP,
    "mc3_18": _SMALL_CLIP,
    "r2plus1d_18": _SMALL_CLIP,
    "s3d": _Clip(16, 224, time_dynamic=False, notes="S3D's final 2x7x7 pool needs 16x224x224."),
    "mvit_v1_b": _Clip(16, 224, False, notes="MViT's position embeddings fix 16x224x224."),
    "mvit_v2_s": _Clip(16, 224, False, notes="MViT's position embeddings fix 16x224x224."),
    "swin3d_t": _Clip(4, 64, time_dynamic=False),
}


def _register_video() -> None:
    video = torchvision.models.video
    for model_name, clip in _VIDEO.items():
        _video_case(model_name, getattr(video, model_name), clip)


def _video_case(model_name: str, constructor: Callable[..., nn.Module], clip: _Clip) -> ModelCase:
    name = f"torchvision/{model_name}"
    axes = {0: "batch"}
    sizes = {"batch": 2}
    second_sizes = {"batch": 3}
    if clip.time_dynamic:
        axes[2] = "frames"
        sizes["frames"] = clip.frames
        second_sizes["frames"] = clip.frames + 2

    def make_inputs(axis_sizes: Mapping[str, int]) -> Inputs:
        generator = generator_for(name, axis_sizes)
        frames = axis_sizes.get("frames", clip.frames)
        shape = (axis_sizes["batch"], 3, frames, clip.size, clip.size)
        return (torch.randn(shape, generator=generator),), {}

    def make_module() -> nn.Module:
        return _deterministic(constructor(weights=None), name, make_inputs(sizes))

    return register(
        ModelCase(
            name=name,
            family="torchvision-video",
            tier=_tier(model_name),
            make_module=make_module,
            make_inputs=make_inputs,
            sizes=sizes,
            second_sizes=second_sizes,
            dynamic_shapes=(axes,),
            notes=clip.notes,
        )
    )


# --- optical flow ----------------------------------------------------------------------------


class FinalFlow(nn.Module):
    """RAFT with a fixed number of refinement steps, returning only the final flow field."""

    def __init__(self, raft: nn.Module, flow_updates: int) -> None:
        super().__init__()
        self.raft = raft
        self.flow_updates = flow_updates

    def forward(self, first_frame: torch.Tensor, second_frame: torch.Tensor) -> torch.Tensor:
        return self.raft(first_frame, second_frame, num_flow_updates=self.flow_updates)[-1]


def _register_optical_flow() -> None:
    name = "torchvision/raft_small"
    height, width = 128, 136  # RAFT needs feature maps of 16+ after its 8x downsampling

    def make_inputs(axis_sizes: Mapping[str, int]) -> Inputs:
        generator = generator_for(name, axis_sizes)
        shape = (axis_sizes["batch"], 3, height, width)
        frames = tuple(torch.rand(shape, generator=generator) * 2 - 1 for _ in range(2))
        return frames, {}

    def make_module() -> nn.Module:
        raft = torchvision.models.optical_flow.raft_small(weights=None)
        return _deterministic(FinalFlow(raft, flow_updates=3), name, make_inputs({"batch": 2}))

    register(
        ModelCase(
            name=name,
            family="torchvision-optical-flow",
            tier=_tier("raft_small"),
            make_module=make_module,
            make_inputs=make_inputs,
            sizes={"batch": 2},
            second_sizes={"batch": 3},
            dynamic_shapes=({0: "batch"}, {0: "batch"}),
            notes="Two 128x136 frames in [-1, 1]; 3 flow updates (default 12); returns the last "
            "flow field only.",
        )
    )


_register_classification()
_register_segmentation()
_register_detection()
_register_video()
_register_optical_flow()
