"""Comparing a model's runtime outputs with eager, relative to each output's scale.

Elementwise relative error means little for a whole model: logits near zero make it explode
while the model is fine. A float output passes when ``max |actual - expected| <= atol + rtol *
scale``, with ``scale = max |expected|`` over the finite elements (``model_zoo.output_scale``);
NaN and infinity positions must agree; integer and bool outputs must be equal. The reported
``max_rel_scale`` is the largest ``max abs error / scale`` over the outputs.

The declared output shapes are checked too: a dimension the ONNX model declares fixed but that
comes out at another size means the export specialised it (the runtime only warns).

Pure numpy, so a repro directory's ``repro.py`` can apply the same rule.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

#: Default tolerances per dtype (rtol is relative to the output's scale); the zoo's
#: ``tolerances.toml`` overrides them per model.
DEFAULT_TOLERANCES = {"f32": (1e-4, 1e-6), "f16": (1e-2, 1e-4)}


@dataclasses.dataclass
class ModelComparison:
    ok: bool
    message: str = ""
    max_abs: float | None = None
    max_rel: float | None = None  # elementwise, over non-zero expected values
    max_rel_scale: float | None = None
    details: list[str] = dataclasses.field(default_factory=list)


def compare_model_outputs(
    expected: Sequence[np.ndarray],
    actual: Sequence[np.ndarray],
    *,
    rtol: float,
    atol: float,
    declared_shapes: Sequence[list[int | str | None] | None] | None = None,
) -> ModelComparison:
    if len(expected) != len(actual):
        return ModelComparison(
            False, f"output count differs: eager has {len(expected)}, ONNX has {len(actual)}"
        )
    problems: list[str] = []
    details: list[str] = []
    result = ModelComparison(True)
    for index, (want, got) in enumerate(zip(expected, actual)):
        want, got = np.asarray(want), np.asarray(got)
        declared = declared_shapes[index] if declared_shapes is not None else None
        fixed = _fixed_dims_contradicted(declared, got.shape)
        if fixed:
            problems.append(
                f"output {index}: the model declares {fixed} but it came out as "
                f"{list(got.shape)} (a dimension was specialised at export)"
            )
        if want.shape != got.shape:
            problems.append(f"output {index}: shape {list(got.shape)} != eager {list(want.shape)}")
            continue
        if want.dtype != got.dtype:
            problems.append(f"output {index}: dtype {got.dtype} != eager {want.dtype}")
            continue
        if want.size == 0:
            details.append(f"output {index}: empty {want.dtype}{list(want.shape)}")
            continue
        line, ok, max_abs, max_rel, rel_scale = _compare_values(want, got, rtol=rtol, atol=atol)
        details.append(f"output {index}: {line}")
        result.max_abs = _max(result.max_abs, max_abs)
        result.max_rel = _max(result.max_rel, max_rel)
        result.max_rel_scale = _max(result.max_rel_scale, rel_scale)
        if not ok:
            problems.append(f"output {index}: {line}")
    result.details = details
    if problems:
        result.ok = False
        result.message = "; ".join(problems[:6]) + (
            f"; and {len(problems) - 6} more" if len(problems) > 6 else ""
        )
    return result


def _fixed_dims_contradicted(declared, shape: tuple[int, ...]) -> str:
    if not declared or len(declared) != len(shape):
        return ""
    if all(not isinstance(d, int) or d == s for d, s in zip(declared, shape)):
        return ""
    return "[" + ", ".join(str(d) if d is not None else "?" for d in declared) + "]"


def _compare_values(want: np.ndarray, got: np.ndarray, *, rtol: float, atol: float):
    """(message, ok, max_abs, max_rel, max_rel_scale) for one output of matching shape/dtype."""
    if want.dtype.kind in "biu":
        differ = int(np.count_nonzero(want != got))
        max_abs = float(np.abs(want.astype(np.float64) - got.astype(np.float64)).max())
        if differ:
            return (
                f"{differ}/{want.size} elements differ (exact compare)",
                False,
                max_abs,
                None,
                None,
            )
        return "equal", True, 0.0, 0.0, 0.0
    want64, got64 = want.astype(np.float64), got.astype(np.float64)
    if not np.array_equal(np.isnan(want64), np.isnan(got64)):
        return "NaN positions differ", False, None, None, None
    want_inf = np.isinf(want64)
    if not np.array_equal(want_inf, np.isinf(got64)) or not np.array_equal(
        want64[want_inf], got64[want_inf]
    ):
        return "infinities differ in position or sign", False, None, None, None
    finite = np.isfinite(want64)
    if not finite.any():
        return "only NaN/inf, all matching", True, 0.0, 0.0, 0.0
    want_f, got_f = want64[finite], got64[finite]
    diff = np.abs(got_f - want_f)
    max_abs = float(diff.max())
    scale = float(np.abs(want_f).max())
    nonzero = want_f != 0
    max_rel = float((diff[nonzero] / np.abs(want_f[nonzero])).max()) if nonzero.any() else 0.0
    rel_scale = max_abs / scale if scale > 0 else max_abs
    bound = atol + rtol * scale
    text = f"max abs error {max_abs:.3g} at scale {scale:.3g} (error/scale {rel_scale:.3g})"
    if max_abs > bound:
        worst = int(np.argmax(diff))
        return (
            f"{text} exceeds atol={atol:g} + rtol={rtol:g} x scale; {int((diff > bound).sum())}"
            f"/{want.size} elements off; worst: expected {want_f[worst]:.6g}, got "
            f"{got_f[worst]:.6g}",
            False,
            max_abs,
            max_rel,
            rel_scale,
        )
    return text, True, max_abs, max_rel, rel_scale


def _max(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)
