"""exporter.detection_match: detections compared up to score ties."""

from __future__ import annotations

import numpy as np

from exporter.detection_match import match_detections, match_flat_detections


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


def test_flat_outputs_are_read_in_key_order():
    eager = _dets([0.9, 0.5])
    flat = [eager["boxes"], eager["labels"], eager["scores"]]
    assert match_flat_detections(flat, flat) == []
    assert "expected 3 outputs" in match_flat_detections(flat, flat[:2])[0]
