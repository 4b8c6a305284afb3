"""Compare object detections up to score ties: a pure function of two sets of detections.

After box decoding, NMS and top-k, a difference in the last bits of two scores can swap the
order of near-tied detections, or swap which of two near-tied detections survives the
``detections_per_img`` cut-off. Element-wise comparison then fails though both sets are the
same detections. Here every detection of one set must have a partner in the other (same label,
score within ``score_atol``, box within ``box_atol`` pixels), except near-ties at the cut-off.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

SCORE_ATOL = 1e-3
BOX_ATOL = 0.5  # pixels
#: A partner this close is the same detection; one within BOX_ATOL but not this close is a
#: near-tied neighbour NMS kept instead, whose masks and keypoints come from another box.
SAME_BOX_ATOL = 0.05  # pixels
#: A keypoint is its heatmap's argmax: two near-equal maxima may swap, moving the keypoint
#: while its score stays. A moved keypoint whose score agrees this closely is such a tie...
KEYPOINT_SCORE_RTOL = 1e-4
#: ...unless more than this share of the compared keypoints moved: ties are rare.
MAX_KEYPOINT_TIE_SHARE = 0.25

#: The keys torchvision's R-CNN models return per image, in their order (RetinaNet, FCOS and
#: SSD return boxes, scores, labels).
DETECTION_KEYS = ("boxes", "labels", "scores")


def match_detections(
    expected: Mapping[str, np.ndarray],
    actual: Mapping[str, np.ndarray],
    *,
    score_atol: float = SCORE_ATOL,
    box_atol: float = BOX_ATOL,
) -> list[str]:
    """What differs between two detection sets beyond score ties (empty: they match).

    Both map ``boxes`` (N x 4), ``labels`` (N) and ``scores`` (N, sorted descending) to arrays;
    other keys (masks, keypoints) must have one row per detection, and the rows of matched
    detections are compared with ``box_atol`` where the partner is the same detection
    (``SAME_BOX_ATOL``); a keypoint may move where its score says the heatmap tied.
    """
    exp = {k: np.asarray(v) for k, v in expected.items()}
    got = {k: np.asarray(v) for k, v in actual.items()}
    problems = _form_problems(exp, got, score_atol)
    if problems:
        return problems
    count = len(got["scores"])
    extra = sorted(set(exp) & set(got) - set(DETECTION_KEYS))
    unmatched = list(range(count))
    compared_keypoints = keypoint_ties = 0
    cutoff = float(exp["scores"].min()) if count else 0.0
    for i in range(count):
        partner = next(
            (
                j
                for j in unmatched
                if exp["labels"][j] == got["labels"][i]
                and abs(float(exp["scores"][j]) - float(got["scores"][i])) <= score_atol
                and np.abs(exp["boxes"][j] - got["boxes"][i]).max() <= box_atol
            ),
            None,
        )
        if partner is None:
            if got["scores"][i] > cutoff + score_atol:
                problems.append(
                    f"detection {i} (label {got['labels'][i]}, score {got['scores'][i]:.5f}, "
                    f"box {got['boxes'][i].round(2).tolist()}) is not among eager's"
                )
            continue
        unmatched.remove(partner)
        if np.abs(exp["boxes"][partner] - got["boxes"][i]).max() > SAME_BOX_ATOL:
            continue
        if "keypoints" in extra:
            compared_keypoints += len(exp["keypoints"][partner])
        for key in extra:
            expected, actual = exp[key][partner].astype(np.float64), got[key][i]
            if key == "keypoints" and "keypoints_scores" in extra:
                tied = _keypoint_ties(expected, actual, exp, got, partner, i, box_atol)
                keypoint_ties += int(tied.sum())
                expected, actual = expected[~tied], actual[~tied]
            diff = float(np.abs(expected - actual).max(initial=0))
            if diff > box_atol:
                problems.append(f"detection {i}: {key} differ from eager's by {diff:.4g}")
    if keypoint_ties > MAX_KEYPOINT_TIE_SHARE * compared_keypoints:
        problems.append(
            f"{keypoint_ties} of {compared_keypoints} keypoints moved with their scores "
            f"unchanged: more than heatmap ties explain"
        )
    floor = float(got["scores"].min()) if count else 0.0
    problems += [
        f"eager detection {j} (label {exp['labels'][j]}, score {exp['scores'][j]:.5f}) is missing"
        for j in unmatched
        if exp["scores"][j] > floor + score_atol
    ]
    return problems


def _form_problems(
    exp: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray], score_atol: float
) -> list[str]:
    """What keeps two detection sets from being compared: missing keys, other dtypes, rows
    that do not line up, a count that differs, scores out of order."""
    problems = [f"missing {k!r}" for k in DETECTION_KEYS if k not in got or k not in exp]
    if problems:
        return problems
    problems = [
        f"{k} are {got[k].dtype}, eager's {exp[k].dtype}"
        for k in DETECTION_KEYS
        if got[k].dtype != exp[k].dtype
    ]
    count = len(got["scores"])
    if got["boxes"].shape != (count, 4):
        problems.append(f"boxes have shape {list(got['boxes'].shape)}, expected [{count}, 4]")
    for key in set(got) - {"scores"}:
        if got[key].shape[:1] != (count,):
            problems.append(f"{key} has {got[key].shape[:1]} rows for {count} detections")
    if len(exp["scores"]) != count:
        problems.append(f"{count} detections, eager has {len(exp['scores'])}")
    if np.any(np.diff(got["scores"]) > score_atol):
        problems.append("scores are not sorted in descending order")
    return problems


def _keypoint_ties(expected, actual, exp, got, partner, i, box_atol):
    """Which keypoints of one detection moved (beyond ``box_atol``) with their score the same:
    the heatmap had two near-equal maxima."""
    moved = np.abs(expected - actual).max(axis=-1) > box_atol
    score_expected = exp["keypoints_scores"][partner].astype(np.float64)
    same_score = np.abs(score_expected - got["keypoints_scores"][i]) <= KEYPOINT_SCORE_RTOL * (
        np.maximum(np.abs(score_expected), 1.0)
    )
    return moved & same_score


def match_flat_detections(
    expected: Sequence[np.ndarray],
    actual: Sequence[np.ndarray],
    keys: Sequence[str] = DETECTION_KEYS,
) -> list[str]:
    """:func:`match_detections` for flat output lists (one image's dict flattened in ``keys``
    order, as the exported model returns it)."""
    if len(expected) != len(keys) or len(actual) != len(keys):
        return [
            f"expected {len(keys)} outputs ({', '.join(keys)}); eager has {len(expected)}, "
            f"ONNX has {len(actual)}"
        ]
    return match_detections(dict(zip(keys, expected)), dict(zip(keys, actual)))
