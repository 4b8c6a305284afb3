"""exporter.diagnostics.detection_match: detections compared up to score ties."""

from __future__ import annotations

import numpy as np

from torch_onnx_conformance.exporter.diagnostics.detection_match import (
    match_detections,
    match_flat_detections,
)


def _dets(scores, labels=None, shift=0.0, boxes=None):
    scores = np.asarray(scores, dtype=np.float32)
    n = len(scores)
    if boxes is None:
        boxes = np.arange(n * 4, dtype=np.float32).reshape(n, 4) * 10 + shift
    labels = np.asarray(labels if labels is not None else [1] * n, dtype=np.int64)
    return {"boxes": np.asarray(boxes, dtype=np.float32), "labels": labels, "scores": scores}


def test_identical_detections_match():
    eager = _dets([0.9, 0.5, 0.2])
    assert match_detections(eager, eager) == []


def test_near_tied_detections_may_swap_order():
    eager = _dets([0.9, 0.50005, 0.5])
    swapped = {k: v[[0, 2, 1]] for k, v in eager.items()}
    swapped["scores"] = np.asarray([0.9, 0.50004, 0.50003], dtype=np.float32)
    assert match_detections(eager, swapped) == []


def test_a_near_tie_at_the_cut_off_may_differ():
    eager = _dets([0.9, 0.3])
    other = _dets([0.9, 0.3002], boxes=[eager["boxes"][0], [5.0, 5.0, 9.0, 9.0]])
    assert match_detections(eager, other) == []


def test_a_moved_box_is_reported():
    eager = _dets([0.9, 0.5, 0.2])
    moved = {k: v.copy() for k, v in eager.items()}
    moved["boxes"][0] += 3.0
    problems = match_detections(eager, moved)
    assert any("detection 0" in p and "not among eager's" in p for p in problems)


def test_a_different_label_or_count_is_reported():
    eager = _dets([0.9, 0.5])
    assert match_detections(eager, _dets([0.9, 0.5], labels=[2, 1]))
    assert any("1 detections, eager has 2" in p for p in match_detections(eager, _dets([0.9])))


def test_unsorted_scores_and_wrong_dtypes_are_reported():
    eager = _dets([0.9, 0.5])
    unsorted = {k: v[::-1].copy() for k, v in eager.items()}
    assert "scores are not sorted in descending order" in match_detections(eager, unsorted)
    as_float64 = dict(eager, scores=eager["scores"].astype(np.float64))
    assert any("scores are float64" in p for p in match_detections(eager, as_float64))


def test_per_detection_extras_follow_their_detection():
    eager = _dets([0.9, 0.50005, 0.5])
    eager["keypoints"] = np.arange(3 * 5 * 3, dtype=np.float32).reshape(3, 5, 3)
    swapped = {k: v[[0, 2, 1]].copy() for k, v in eager.items()}
    assert match_detections(eager, swapped) == []
    swapped["keypoints"][1] += 2.0
    assert any("keypoints differ" in p for p in match_detections(eager, swapped))


def _with_keypoints(scores):
    dets = _dets(scores)
    count = len(scores)
    dets["keypoints"] = np.arange(count * 5 * 3, dtype=np.float32).reshape(count, 5, 3)
    dets["keypoints_scores"] = np.linspace(1, 20, count * 5, dtype=np.float32).reshape(count, 5)
    return dets


def test_a_keypoint_may_move_where_its_heatmap_tied():
    eager = _with_keypoints([0.9, 0.5, 0.2, 0.1])
    tied = {k: v.copy() for k, v in eager.items()}
    tied["keypoints"][1, 2, :2] += 9.0  # the other of two equal maxima: same score
    assert match_detections(eager, tied) == []
    tied["keypoints_scores"][1, 2] += 0.5  # a different maximum: a real difference
    assert any("keypoints differ" in p for p in match_detections(eager, tied))


def test_keypoints_moved_everywhere_are_not_ties():
    eager = _with_keypoints([0.9, 0.5])
    shifted = {k: v.copy() for k, v in eager.items()}
    shifted["keypoints"][:, :, 0] += 3.0  # every x off, scores unchanged: a bug, not ties
    assert any("more than heatmap ties explain" in p for p in match_detections(eager, shifted))


def test_extras_of_a_near_tied_neighbour_are_not_compared():
    # NMS kept a neighbour 0.3 px away with the same score: its keypoints come from its own box.
    eager = _with_keypoints([0.9, 0.5])
    neighbour = {k: v.copy() for k, v in eager.items()}
    neighbour["boxes"][1] += 0.3
    neighbour["keypoints"][1] += 5.0
    assert match_detections(eager, neighbour) == []
    neighbour["boxes"][1] = eager["boxes"][1]  # the same detection: its keypoints must agree
    neighbour["keypoints_scores"][1] += 1.0
    assert any("keypoints differ" in p for p in match_detections(eager, neighbour))


def test_flat_outputs_are_read_in_key_order():
    eager = _dets([0.9, 0.5])
    flat = [eager["boxes"], eager["labels"], eager["scores"]]
    assert match_flat_detections(flat, flat) == []
    assert "expected 3 outputs" in match_flat_detections(flat, flat[:2])[0]
