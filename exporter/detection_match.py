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
    detections are compared with ``box_atol``.
    """
    exp = {k: np.asarray(v) for k, v in expected.items()}
    got = {k: np.asarray(v) for k, v in actual.items()}
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
    if problems:
        return problems
    extra = sorted(set(exp) & set(got) - set(DETECTION_KEYS))
    unmatched = list(range(count))
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
        for key in extra:
            diff = float(np.abs(exp[key][partner].astype(np.float64) - got[key][i]).max(initial=0))
            if diff > box_atol:
                problems.append(f"detection {i}: {key} differ from eager's by {diff:.4g}")
    floor = float(got["scores"].min()) if count else 0.0
    problems += [
        f"eager detection {j} (label {exp['labels'][j]}, score {exp['scores'][j]:.5f}) is missing"
        for j in unmatched
        if exp["scores"][j] > floor + score_atol
    ]
    return problems


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
