"""Capture patches: model-side rewrites for code torch.export cannot capture as written.

torchvision's detection models decide things in Python on sizes torch.export keeps symbolic
or data-dependent, so every one of them fails at capture (torch.onnx too). Inside
``torchvision_detection_patches()`` these torchvision functions are replaced by equivalents
that compute the same values with traceable ops (each replacement's docstring says why):

- ``ops.boxes.batched_nms``: no ``numel() == 0`` early return, no size-based switch to a loop;
- ``ops.poolers._multiscale_roi_align``: no ``len(rois)``/index_put per FPN level;
- ``ops.poolers._setup_scales``: FPN scales from the example's concrete sizes;
- ``models.detection._utils._topk_min``: ``torch.sym_min`` instead of Python ``min``;
- ``models.detection.transform``: resize size computed in float64 tensors (exactly eager's
  doubles) instead of Python floats; padding to the size divisor in integer arithmetic;
  box rescaling without ``torch.tensor(symbolic size)``;
- ``SSD.postprocess_detections``: one score filter instead of one per class;
- ``models.detection.transform.paste_masks_in_image`` (Mask R-CNN): all masks pasted at once
  with ``grid_sample`` instead of a loop slicing by box coordinates;
- ``roi_heads.heatmaps_to_keypoints`` (Keypoint R-CNN): every RoI's heatmaps resampled at once
  by bicubic weight matrices instead of a loop resizing each to a size read from box data;
  ``transform.resize_keypoints`` without ``torch.tensor(symbolic size)``.

The number of detections stays dynamic in the exported model. ``exporter.export`` applies the
patches made for the model's kind by default (:func:`resolve` picks them, and the export record
and report list them); ``export(..., capture_patches=())`` turns them off, and
``capture_patches=[...]`` names them explicitly (``CAPTURE_PATCHES`` maps the accepted names to
the context managers). They are active only while the model is captured, because they change
library code (and so are not thread-safe). torchvision is imported only when a patch applies.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch


@contextlib.contextmanager
def _patched(replacements: list[tuple[Any, str, Any]]) -> Iterator[None]:
    """Set ``owner.name = value`` for each triple and restore every original on exit."""
    originals = [
        (owner, name, owner.__dict__.get(name, _MISSING)) for owner, name, _ in replacements
    ]
    try:
        for owner, name, value in replacements:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, original in reversed(originals):
            if original is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, original)


_MISSING = object()


# --------------------------------------------------------------------------- torchvision
def _batched_nms(boxes, scores, idxs, iou_threshold):
    """torchvision.ops.batched_nms with the coordinate trick at every size.

    torchvision switches to a per-class Python loop above 4000 box coordinates and returns
    early for empty inputs; both are decisions on data-dependent sizes. The offset trick gives
    the same kept set at any size; a zero is folded into the maximum so an empty input needs
    no special case.
    """
    from torchvision.ops import boxes as box_ops

    max_coordinate = torch.nn.functional.pad(boxes.reshape(-1), (0, 1)).max()
    offsets = idxs.to(boxes) * (max_coordinate + 1)
    return box_ops.nms(boxes + offsets[:, None], scores, iou_threshold)


def _multiscale_roi_align(x_filtered, boxes, output_size, sampling_ratio, scales, mapper):
    """torchvision.ops.poolers._multiscale_roi_align without data-dependent indexing.

    torchvision pools each FPN level's RoIs (found with ``torch.where``) into a zeros tensor
    sized ``len(rois)``, which needs the data-dependent RoI count as a Python int. Pooling every
    RoI at every level and keeping, per RoI, the level the mapper chose gives identical values
    (each RoI is pooled independently) with only tensor ops.
    """
    from torchvision.ops import roi_align
    from torchvision.ops.poolers import _convert_to_roi_format

    if scales is None or mapper is None:
        raise ValueError("scales and mapper should not be None")
    rois = _convert_to_roi_format(boxes)
    if len(x_filtered) == 1:
        return roi_align(
            x_filtered[0],
            rois,
            output_size=output_size,
            spatial_scale=scales[0],
            sampling_ratio=sampling_ratio,
        )
    levels = mapper(boxes)[:, None, None, None]
    result = None
    for level, (feature, scale) in enumerate(zip(x_filtered, scales)):
        pooled = roi_align(
            feature,
            rois,
            output_size=output_size,
            spatial_scale=scale,
            sampling_ratio=sampling_ratio,
        )
        result = (
            pooled
            if result is None
            else torch.where(levels == level, pooled, result.to(pooled.dtype))
        )
    return result


def _topk_min(input, orig_kval, axis):
    """torchvision.models.detection._utils._topk_min as a symbolic minimum.

    Python's ``min(k, size)`` forces torch.export to decide which is smaller: a guard that
    specialises the input size, or a hard error when the size is data-dependent (SSD's
    score-filtered candidates).
    """
    return torch.sym_min(orig_kval, input.size(axis))


#: Example values of the sizes the resize patch computes as data (unbacked symbols), so code
#: that needs a concrete number at capture time (FPN scale inference) can still get the value
#: eager computes for the example input. Filled and cleared by torchvision_detection_patches.
_EXAMPLE_VALUES: dict[Any, int] = {}


def _example_int(size: Any) -> int:
    """The value a (possibly symbolic) size has for the example inputs."""
    if isinstance(size, int):
        return size
    node = size.node
    expr = node.expr
    known = {}
    for symbol in expr.free_symbols:
        if symbol in node.shape_env.var_to_val:
            known[symbol] = node.shape_env.var_to_val[symbol]
        elif symbol in _EXAMPLE_VALUES:
            known[symbol] = _EXAMPLE_VALUES[symbol]
        else:
            raise RuntimeError(f"no example value is known for size {size}")
    return int(expr.xreplace(known))


def _resized_side(side: int, scale: float) -> int:
    return int(math.floor(float(side) * scale))


def _resize_image_and_masks(image, self_min_size, self_max_size, target=None, fixed_size=None):
    """GeneralizedRCNNTransform's resize without Python float arithmetic on symbolic sizes.

    torchvision picks ``min(min_side_scale, max_side_scale)`` with Python's ``min`` (a guard
    that specialises the export to the example's aspect ratio) and floors ``side * scale`` in
    Python floats. For static inputs that arithmetic runs in Python as in eager. For dynamic
    inputs the same float64 arithmetic runs on 0-d tensors, so the graph computes exactly the
    size eager computes (IEEE double, like Python), and each resized side enters the trace as
    one fresh symbol instead of a nested float expression that makes every later shape check
    slow (measured: 20 s instead of 64 s to capture Faster R-CNN).
    """
    if fixed_size is not None:
        size = [fixed_size[1], fixed_size[0]]
    else:
        height, width = image.shape[-2:]
        example_h, example_w = _example_int(height), _example_int(width)
        example_scale = min(
            self_min_size / min(example_h, example_w), self_max_size / max(example_h, example_w)
        )
        examples = [
            _resized_side(example_h, example_scale),
            _resized_side(example_w, example_scale),
        ]
        if isinstance(height, int) and isinstance(width, int):
            size = examples
        else:
            h = torch.scalar_tensor(height, dtype=torch.float64)
            w = torch.scalar_tensor(width, dtype=torch.float64)
            # Tensor / tensor: ``float / tensor`` is reciprocal-then-multiply in torch, which
            # can land one ulp below Python's division and floor to one pixel less.
            target_min = torch.scalar_tensor(float(self_min_size), dtype=torch.float64)
            target_max = torch.scalar_tensor(float(self_max_size), dtype=torch.float64)
            scale = torch.minimum(
                target_min / torch.minimum(h, w), target_max / torch.maximum(h, w)
            )
            size = []
            for side, example in zip((h, w), examples):
                new = torch.floor(side * scale).to(torch.int64).item()
                torch._check(new >= 1)
                if isinstance(new, torch.SymInt):
                    _EXAMPLE_VALUES[new.node.expr] = example
                size.append(new)
    image = torch.nn.functional.interpolate(
        image[None], size=size, mode="bilinear", align_corners=False
    )[0]
    if target is None:
        return image, target
    if "masks" in target:
        mask = target["masks"]
        mask = torch.nn.functional.interpolate(mask[:, None].float(), size=size)[:, 0].byte()
        target["masks"] = mask
    return image, target


def _setup_scales(features, image_shapes, canonical_scale, canonical_level):
    """torchvision.ops.poolers._setup_scales on the example's concrete sizes.

    MultiScaleRoIAlign infers each FPN level's scale (a power of two) from feature and image
    sizes on its first call and caches it; RoIAlign needs it as a constant. torchvision reads
    the sizes through ``torch.tensor(...).item()``, which fails on symbolic sizes; the scales
    are the ones eager infers for the example input.
    """
    from torchvision.ops.poolers import initLevelMapper

    if not image_shapes:
        raise ValueError("images list should not be empty")
    original = (
        max(_example_int(s[0]) for s in image_shapes),
        max(_example_int(s[1]) for s in image_shapes),
    )

    def infer_scale(feature):
        approx = np.float32(_example_int(feature.shape[-2]) / original[0])
        return float(2 ** float(np.round(np.log2(approx))))

    scales = [infer_scale(f) for f in features]
    lvl_min = -math.log2(scales[0])
    lvl_max = -math.log2(scales[-1])
    mapper = initLevelMapper(
        int(lvl_min), int(lvl_max), canonical_scale=canonical_scale, canonical_level=canonical_level
    )
    return scales, mapper


def _batch_images(self, images, size_divisible=32):
    """GeneralizedRCNNTransform.batch_images with the padded size in integer arithmetic.

    torchvision rounds the size up through ``math.ceil(float(size) / stride)``, a float round
    trip that torch.export resolves to the example's padded size; ``-(-size // stride)`` is the
    same ceiling on integers and stays symbolic. Padding replaces the in-place copy into a
    zeros tensor.
    """
    heights = [img.shape[-2] for img in images]
    widths = [img.shape[-1] for img in images]
    max_height, max_width = heights[0], widths[0]
    for h, w in zip(heights[1:], widths[1:]):
        max_height, max_width = torch.sym_max(max_height, h), torch.sym_max(max_width, w)
    stride = int(size_divisible)
    padded_height = -(-max_height // stride) * stride
    padded_width = -(-max_width // stride) * stride
    padded = [
        torch.nn.functional.pad(
            img, (0, padded_width - img.shape[-1], 0, padded_height - img.shape[-2])
        )
        for img in images
    ]
    return torch.stack(padded)


def _ratio(new, old, device):
    """new / old in float32 from (possibly symbolic) sizes, as torchvision's
    ``torch.tensor(new) / torch.tensor(old)``."""
    new = torch.scalar_tensor(new, dtype=torch.float32, device=device)
    old = torch.scalar_tensor(old, dtype=torch.float32, device=device)
    return new / old


def _resize_boxes(boxes, original_size, new_size):
    """torchvision's resize_boxes without ``torch.tensor(size)``, which bakes symbolic sizes in
    as constants; float32 ratios as in torchvision."""

    ratio_height = _ratio(new_size[0], original_size[0], boxes.device)
    ratio_width = _ratio(new_size[1], original_size[1], boxes.device)
    xmin, ymin, xmax, ymax = boxes.unbind(1)
    return torch.stack(
        (xmin * ratio_width, ymin * ratio_height, xmax * ratio_width, ymax * ratio_height), dim=1
    )


def _paste_masks_in_image(masks, boxes, img_shape, padding=1):
    """roi_heads.paste_masks_in_image without a Python loop over the (data-dependent) number of
    masks and without slicing by box coordinates read as ints: every mask is resampled onto the
    whole image at once with grid_sample and kept inside its box.

    Same values: eager resizes each mask to its box (bilinear, align_corners=False), whose
    source coordinate for box pixel i is (i + 0.5) * M / w - 0.5, clamped to the mask; the
    grid (i + 0.5) / w * 2 - 1 with padding_mode="border" samples exactly there."""
    from torchvision.models.detection.roi_heads import expand_boxes, expand_masks

    masks, scale = expand_masks(masks, padding=padding)
    boxes = expand_boxes(boxes, scale).to(dtype=torch.int64)
    im_h, im_w = img_shape
    x0, y0, x1, y1 = (boxes[:, k : k + 1] for k in range(4))
    w = (x1 - x0 + 1).clamp(min=1)
    h = (y1 - y0 + 1).clamp(min=1)
    xs = torch.arange(im_w, device=masks.device)[None, :]
    ys = torch.arange(im_h, device=masks.device)[None, :]
    grid_x = ((xs - x0).to(masks.dtype) + 0.5) / w.to(masks.dtype) * 2 - 1
    grid_y = ((ys - y0).to(masks.dtype) + 0.5) / h.to(masks.dtype) * 2 - 1
    count = masks.shape[0]
    grid = torch.stack(
        (
            grid_x[:, None, :].expand(count, im_h, im_w),
            grid_y[:, :, None].expand(count, im_h, im_w),
        ),
        dim=-1,
    )
    pasted = torch.nn.functional.grid_sample(
        masks, grid, mode="bilinear", padding_mode="border", align_corners=False
    )
    inside_x = (xs >= x0) & (xs < x0 + w)
    inside_y = (ys >= y0) & (ys < y0 + h)
    inside = inside_y[:, :, None] & inside_x[:, None, :]
    return torch.where(inside[:, None], pasted, torch.zeros((), dtype=pasted.dtype))


def _bicubic_weights(out_sizes, out_max, in_size):
    """(K, out_max, in_size) matrices that resample an axis of ``in_size`` samples to each
    RoI's ``out_sizes[k]`` samples as ``F.interpolate(mode="bicubic", align_corners=False)``
    does (rows past a RoI's size are zero). Same float32 arithmetic as torch's CPU kernel:
    scale ``in / out``, source ``scale * (i + 0.5) - 0.5`` unclamped, Keys' cubic with
    A = -0.75, the four taps clamped to the edges."""
    a = -0.75
    dtype = torch.float32
    positions = torch.arange(out_max, device=out_sizes.device).to(dtype)[None, :]
    scale = in_size / out_sizes.to(dtype)[:, None]
    source = scale * (positions + 0.5) - 0.5
    floor = torch.floor(source)
    t = source - floor
    taps = (
        ((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a,
        ((a + 2) * t - (a + 3)) * t * t + 1,
        ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1,
        ((a * (2 - t) - 5 * a) * (2 - t) + 8 * a) * (2 - t) - 4 * a,
    )
    first = floor.to(torch.int64) - 1
    samples = torch.arange(in_size, device=out_sizes.device)
    weights = sum(
        torch.where((first + j).clamp(0, in_size - 1)[..., None] == samples, tap[..., None], 0.0)
        for j, tap in enumerate(taps)
    )
    inside = positions < out_sizes[:, None]
    return torch.where(inside[..., None], weights, 0.0)


def _heatmaps_to_keypoints(maps, rois):
    """roi_heads.heatmaps_to_keypoints without a Python loop over the (data-dependent) RoIs
    and without resizing to sizes read from box data as ints.

    Eager resizes each RoI's heatmaps (bicubic) to the RoI's ceiled size and takes the first
    maximum. Here every RoI's heatmaps are resampled at once by separable weight matrices onto
    a grid as large as the largest RoI, with the cells past a RoI's own size at -inf, so the
    row-major first maximum is the one eager finds."""
    offset_x, offset_y = rois[:, 0], rois[:, 1]
    widths = (rois[:, 2] - rois[:, 0]).clamp(min=1)
    heights = (rois[:, 3] - rois[:, 1]).clamp(min=1)
    widths_ceil, heights_ceil = widths.ceil(), heights.ceil()
    count, num_keypoints, map_h, map_w = maps.shape
    sizes = torch.stack((heights_ceil, widths_ceil), dim=1).to(torch.int64)
    # A zero row folded into the maximum keeps an empty input valid.
    largest = torch.nn.functional.pad(sizes, (0, 0, 0, 1), value=1).amax(dim=0)
    grid_h, grid_w = largest[0].item(), largest[1].item()
    torch._check(grid_h >= 1)
    torch._check(grid_w >= 1)
    rows = _bicubic_weights(sizes[:, 0], grid_h, map_h)  # (K, grid_h, map_h)
    cols = _bicubic_weights(sizes[:, 1], grid_w, map_w)  # (K, grid_w, map_w)
    resized = torch.matmul(
        torch.matmul(rows[:, None], maps), cols[:, None].transpose(-1, -2)
    )  # (K, keypoints, grid_h, grid_w)
    inside = (torch.arange(grid_h, device=maps.device)[None, :, None] < sizes[:, 0, None, None]) & (
        torch.arange(grid_w, device=maps.device)[None, None, :] < sizes[:, 1, None, None]
    )
    resized = torch.where(inside[:, None], resized, float("-inf"))
    flat = resized.reshape(count, num_keypoints, grid_h * grid_w)
    end_scores, pos = flat.max(dim=2)
    x_int = pos % grid_w
    y_int = torch.div(pos - x_int, grid_w, rounding_mode="floor")
    x = (x_int.float() + 0.5) * (widths / widths_ceil)[:, None] + offset_x[:, None]
    y = (y_int.float() + 0.5) * (heights / heights_ceil)[:, None] + offset_y[:, None]
    return torch.stack((x, y, torch.ones_like(x)), dim=2), end_scores


def _resize_keypoints(keypoints, original_size, new_size):
    """transform.resize_keypoints without ``torch.tensor(size)`` (constants for symbolic
    sizes) and without in-place scaling of a clone; float32 ratios as in torchvision."""
    ratio_h = _ratio(new_size[0], original_size[0], keypoints.device)
    ratio_w = _ratio(new_size[1], original_size[1], keypoints.device)
    x, y, rest = keypoints[..., 0], keypoints[..., 1], keypoints[..., 2]
    return torch.stack((x * ratio_w, y * ratio_h, rest), dim=-1)


def _ssd_postprocess_detections(self, head_outputs, image_anchors, image_shapes):
    """SSD.postprocess_detections with one data-dependent filter instead of one per class.

    torchvision filters each class's scores by the threshold, takes the top-k of what is left
    and concatenates the per-class pieces: data-dependent sizes everywhere. Taking the top-k of
    every class over all anchors with sub-threshold scores pushed to -inf, then dropping the
    sub-threshold entries once, selects the same candidates in the same (class-major, score
    descending) order.
    """
    import torch.nn.functional as F
    from torchvision.ops import boxes as box_ops

    pred_scores = F.softmax(head_outputs["cls_logits"], dim=-1)
    detections = []
    for boxes, scores, anchors, image_shape in zip(
        head_outputs["bbox_regression"], pred_scores, image_anchors, image_shapes
    ):
        boxes = self.box_coder.decode_single(boxes, anchors)
        boxes = box_ops.clip_boxes_to_image(boxes, image_shape)
        class_scores = scores[:, 1:].t()  # (classes - 1, anchors)
        masked = torch.where(
            class_scores > self.score_thresh,
            class_scores,
            torch.full_like(class_scores, float("-inf")),
        )
        k = torch.sym_min(self.topk_candidates, class_scores.shape[1])
        top_scores, top_idxs = masked.topk(k, dim=1)
        labels = torch.arange(1, scores.shape[1], device=scores.device)[:, None].expand_as(top_idxs)
        top_scores, top_idxs, labels = (
            top_scores.reshape(-1),
            top_idxs.reshape(-1),
            labels.reshape(-1),
        )
        valid = torch.where(top_scores > self.score_thresh)[0]
        image_scores, image_labels = top_scores[valid], labels[valid]
        image_boxes = boxes[top_idxs[valid]]
        keep = box_ops.batched_nms(image_boxes, image_scores, image_labels, self.nms_thresh)
        keep = keep[: self.detections_per_img]
        detections.append(
            {"boxes": image_boxes[keep], "scores": image_scores[keep], "labels": image_labels[keep]}
        )
    return detections


def _torchvision_replacements() -> list[tuple[Any, str, Any]]:
    import torchvision.ops
    from torchvision.models.detection import _utils as det_utils
    from torchvision.models.detection import roi_heads, ssd, transform
    from torchvision.ops import boxes as box_ops
    from torchvision.ops import poolers

    return [
        (box_ops, "batched_nms", _batched_nms),
        (torchvision.ops, "batched_nms", _batched_nms),
        (poolers, "_multiscale_roi_align", _multiscale_roi_align),
        (poolers, "_setup_scales", _setup_scales),
        (det_utils, "_topk_min", _topk_min),
        (transform, "_resize_image_and_masks", _resize_image_and_masks),
        (transform, "resize_boxes", _resize_boxes),
        (transform.GeneralizedRCNNTransform, "batch_images", _batch_images),
        (ssd.SSD, "postprocess_detections", _ssd_postprocess_detections),
        (transform, "paste_masks_in_image", _paste_masks_in_image),
        (transform, "resize_keypoints", _resize_keypoints),
        (roi_heads, "heatmaps_to_keypoints", _heatmaps_to_keypoints),
    ]


@contextlib.contextmanager
def torchvision_detection_patches() -> Iterator[None]:
    """Make torchvision's detection models (Faster/Mask/Keypoint R-CNN, RetinaNet, FCOS, SSD,
    SSDlite) capturable by torch.export, with the number of detections left dynamic."""
    _EXAMPLE_VALUES.clear()
    try:
        with _patched(_torchvision_replacements()):
            yield
    finally:
        _EXAMPLE_VALUES.clear()


def is_torchvision_detection(model: Any) -> bool:
    """Whether ``model`` is (or wraps at its top) one of torchvision's detection models."""
    return any(
        cls.__module__.startswith("torchvision.models.detection") for cls in type(model).__mro__
    )


def patches_for(model: Any) -> list[str]:
    """The capture patches that apply to ``model``: what a failing capture suggests."""
    return ["torchvision-detection"] if is_torchvision_detection(model) else []


def resolve(requested: Any, model: Any) -> tuple[tuple[str, ...], str | None]:
    """The patches capture applies, and a note when they were chosen for the user.

    ``requested=None`` (export's default) applies the patches made for ``model``'s kind;
    a sequence, the empty one included, is taken as given."""
    if requested is not None:
        return tuple(requested), None
    chosen = tuple(patches_for(model))
    if not chosen:
        return (), None
    return chosen, (
        f"{type(model).__name__} is a torchvision detection model: capture applied "
        f"capture_patches={list(chosen)} automatically (pass capture_patches=() to turn it off)."
    )


#: Names accepted by ``export(..., capture_patches=[...])``.
CAPTURE_PATCHES: dict[str, Callable[[], contextlib.AbstractContextManager[None]]] = {
    "torchvision-detection": torchvision_detection_patches,
}
