"""Does an ONNX output match the reference output? The one rule every comparison uses.

``verify=True``, bisection, the conformance harness (ops and models) and every repro directory's
``repro.py`` judge arrays here. This file imports numpy and the standard library only, so a repro
directory carries a copy of it beside its script and applies the very same rule without the
project.

Two ways to measure a float error, one rule otherwise:

- ``ELEMENT`` (ops, ``verify``, bisection): every element satisfies
  ``|actual - expected| <= atol + rtol * |expected|``.
- ``SCALE`` (whole models): ``max |actual - expected| <= atol + rtol * scale`` with ``scale =
  max |expected|`` over the finite elements, because elementwise relative error explodes on
  logits near zero while the model is fine.

Either way shapes must match, NaNs sit at the same positions, infinities match in position and
sign, and integer and bool outputs compare exactly whatever the tolerance.

Random outputs cannot match eager's values, only its distribution: ``DISTRIBUTION``
(``compare_distributions``) pools several draws of each output on both sides and bounds the
difference of their means, of their variances and the two-sample Kolmogorov-Smirnov statistic,
each at a false-failure rate of ``FALSE_FAILURE`` for two samples of one distribution.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ELEMENT = "element"
SCALE = "scale"
DISTRIBUTION = "distribution"
RULES = (ELEMENT, SCALE)

#: Upper edges of the absolute-error histogram buckets; the last bucket is ">= 1".
ERROR_BIN_EDGES = (1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0)
ERROR_BIN_LABELS = ("<1e-7", "<1e-6", "<1e-5", "<1e-4", "<1e-3", "<1e-2", "<0.1", "<1", ">=1")

#: Default (rtol, atol) per context and output dtype. ``export`` is ``verify=True``'s default:
#: onnxruntime accumulates reductions, matmuls and convolutions in another order than torch CPU,
#: and its fp16 kernels compute in fp16. ``model`` is the model harness's default, relative to
#: each output's scale (``SCALE``); ``torch_onnx_conformance/model_zoo/tolerances.toml`` overrides it per model. Op cases
#: read theirs, with per-op overrides, from ``torch_onnx_conformance/conformance/tolerances.toml`` (``load_policy``).
TOLERANCES: dict[str, dict[str, tuple[float, float]]] = {
    "export": {
        "float64": (1e-7, 1e-7),
        "float32": (1e-3, 1e-4),
        "float16": (1e-2, 1e-2),
        "bfloat16": (2e-2, 2e-2),
    },
    "model": {"float32": (1e-4, 1e-6), "float16": (1e-2, 1e-4)},
}
#: ``export``'s tolerance for dtypes not listed (integers and bools compare exactly anyway).
FALLBACK_TOLERANCE = (1e-3, 1e-4)

#: The harness's short dtype names, as they appear in case ids and data files.
SHORT_DTYPES = {
    "f64": "float64",
    "f32": "float32",
    "f16": "float16",
    "bf16": "bfloat16",
    "i64": "int64",
    "b8": "bool",
}


def default_tolerance(context: str, dtype: str | None) -> tuple[float, float]:
    """(rtol, atol) for an output ``dtype`` (numpy name or short name; None when unknown) in
    ``context``."""
    table = TOLERANCES[context]
    dtype = SHORT_DTYPES.get(dtype, dtype)
    if dtype in table:
        return table[dtype]
    if context == "export":
        return FALLBACK_TOLERANCE
    raise KeyError(f"no default {context} tolerance for dtype {dtype}")


def resolve_tolerance(
    context: str, dtype: str | None, rtol: float | None, atol: float | None
) -> tuple[float, float]:
    """The caller's (rtol, atol), each falling back to ``default_tolerance`` when None."""
    default_rtol, default_atol = default_tolerance(context, dtype)
    return (default_rtol if rtol is None else rtol, default_atol if atol is None else atol)


@dataclasses.dataclass
class ArrayComparison:
    """One output against its expected array."""

    ok: bool
    message: str
    max_abs: float | None = None
    #: Largest |error| / |expected| over elements whose expected value is non-zero.
    max_rel: float | None = None
    #: max_abs / max |expected| (the ``SCALE`` measure), for float outputs.
    max_rel_scale: float | None = None
    #: Elements outside the tolerance (non-finite elements that disagree included).
    mismatched: int = 0
    total: int = 0
    #: Counts of |actual - expected| per ERROR_BIN_LABELS bucket (finite elements only), when
    #: asked for.
    histogram: list[int] | None = None
    #: Set by callers that report each output of a model (``verify``): its position and name,
    #: the shapes and dtypes compared and the tolerance applied.
    index: int | None = None
    name: str | None = None
    expected_shape: tuple[int, ...] | None = None
    actual_shape: tuple[int, ...] | None = None
    expected_dtype: str | None = None
    actual_dtype: str | None = None
    rtol: float | None = None
    atol: float | None = None


def compare_arrays(
    expected: Any,
    actual: Any,
    *,
    rtol: float,
    atol: float,
    rule: str = ELEMENT,
    histogram: bool = False,
) -> ArrayComparison:
    """Values of one output (see the module docstring). Dtypes are the caller's business: an
    integer array against a float one is compared as floats."""
    want, got = np.asarray(expected), np.asarray(actual)
    if want.shape != got.shape:
        return ArrayComparison(
            False, f"shape {list(got.shape)} != expected {list(want.shape)}", total=want.size
        )
    if want.size == 0:
        return ArrayComparison(True, "empty", 0.0, 0.0, 0.0, total=0)
    want64, got64 = want.astype(np.float64), got.astype(np.float64)
    result = ArrayComparison(True, "", total=int(want.size))
    if histogram:
        both_finite = np.isfinite(want64) & np.isfinite(got64)
        result.histogram = _histogram(np.abs(got64[both_finite] - want64[both_finite]))
    if want.dtype.kind in "biu" and got.dtype.kind in "biu":
        return _judge_exactly(result, want64, got64)

    want_nan, got_nan = np.isnan(want64), np.isnan(got64)
    want_inf, got_inf = np.isinf(want64), np.isinf(got64)
    # NaN against NaN and equal infinities agree; any other non-finite element does not.
    agreeing = (want_nan & got_nan) | (want_inf & (want64 == got64))

    def disagreeing() -> int:
        pair = np.isfinite(want64) & np.isfinite(got64)
        off = np.abs(got64[pair] - want64[pair]) > atol + rtol * np.abs(want64[pair])
        return int(np.count_nonzero(~pair & ~agreeing)) + int(np.count_nonzero(off))

    if not np.array_equal(want_nan, got_nan):
        result.ok, result.mismatched = False, disagreeing()
        result.message = (
            f"NaN positions differ ({int(np.count_nonzero(got_nan & ~want_nan))} unexpected NaN, "
            f"{int(np.count_nonzero(want_nan & ~got_nan))} missing NaN)"
        )
        return result
    if not np.array_equal(want_inf, got_inf) or not np.array_equal(
        want64[want_inf], got64[want_inf]
    ):
        result.ok, result.mismatched = False, disagreeing()
        result.message = "infinities differ in position or sign"
        return result
    finite = np.isfinite(want64)
    if not finite.any():
        result.max_abs = result.max_rel = result.max_rel_scale = 0.0
        result.message = "only NaN/inf, all matching"
        return result
    want_f, got_f = want64[finite], got64[finite]
    diff = np.abs(got_f - want_f)
    magnitude = np.abs(want_f)
    result.max_abs = float(diff.max())
    nonzero = magnitude > 0
    result.max_rel = float((diff[nonzero] / magnitude[nonzero]).max()) if nonzero.any() else 0.0
    scale = float(magnitude.max())
    result.max_rel_scale = result.max_abs / scale if scale > 0 else result.max_abs
    if rule == SCALE:
        return _judge_by_scale(result, want_f, got_f, diff, scale, rtol=rtol, atol=atol)
    if rule != ELEMENT:
        raise ValueError(f"unknown comparison rule {rule!r}; use one of {RULES}")
    return _judge_by_element(result, want_f, got_f, diff, magnitude, rtol=rtol, atol=atol)


def _judge_by_element(result, want_f, got_f, diff, magnitude, *, rtol, atol) -> ArrayComparison:
    allowed = atol + rtol * magnitude
    result.mismatched = int(np.count_nonzero(diff > allowed))
    if result.mismatched:
        worst = int(np.argmax(diff - allowed))
        result.ok = False
        result.message = (
            f"{result.mismatched}/{result.total} elements exceed rtol={rtol:g} atol={atol:g}; "
            f"max abs error {result.max_abs:.3g}, max rel error {result.max_rel:.3g}; "
            f"worst: expected {want_f[worst]:.6g}, got {got_f[worst]:.6g}"
        )
        return result
    result.message = f"max abs error {result.max_abs:.3g}, max rel error {result.max_rel:.3g}"
    return result


def _judge_exactly(result, want64, got64) -> ArrayComparison:
    """Integers and bools: equal or not, whatever the tolerance."""
    result.mismatched = int(np.count_nonzero(want64 != got64))
    result.max_abs = float(np.abs(want64 - got64).max())
    if result.mismatched:
        result.ok = False
        result.message = (
            f"{result.mismatched}/{want64.size} elements differ (exact compare), "
            f"max abs error {result.max_abs:g}"
        )
        return result
    result.max_rel = result.max_rel_scale = 0.0
    result.message = "equal"
    return result


def _judge_by_scale(result, want_f, got_f, diff, scale, *, rtol, atol) -> ArrayComparison:
    bound = atol + rtol * scale
    text = (
        f"max abs error {result.max_abs:.3g} at scale {scale:.3g} "
        f"(error/scale {result.max_rel_scale:.3g})"
    )
    result.mismatched = int(np.count_nonzero(diff > bound))
    if result.max_abs > bound:
        worst = int(np.argmax(diff))
        result.ok = False
        result.message = (
            f"{text} exceeds atol={atol:g} + rtol={rtol:g} x scale; {result.mismatched}"
            f"/{result.total} elements off; worst: expected {want_f[worst]:.6g}, got "
            f"{got_f[worst]:.6g}"
        )
        return result
    result.message = text
    return result


def _histogram(diff: np.ndarray) -> list[int]:
    edges = np.concatenate([[-np.inf], np.asarray(ERROR_BIN_EDGES), [np.inf]])
    # Right-open buckets: an error exactly 1e-5 counts as "<1e-4".
    counts = np.histogram(diff, bins=edges)[0] if diff.size else np.zeros(len(edges) - 1)
    return [int(c) for c in counts]


@dataclasses.dataclass
class Comparison:
    """All outputs of one run against the expected outputs."""

    ok: bool
    message: str = ""
    max_abs: float | None = None
    max_rel: float | None = None
    max_rel_scale: float | None = None
    #: One line per output, for repro scripts and error messages, and whether it passed.
    details: list[str] = dataclasses.field(default_factory=list)
    detail_ok: list[bool] = dataclasses.field(default_factory=list)
    outputs: list[ArrayComparison] = dataclasses.field(default_factory=list)
    #: Every problem ``fail_with`` was given (the message lists the first few).
    problems: list[str] = dataclasses.field(default_factory=list)
    #: Set by callers that run a model on inputs of their own (``verify``): which inputs
    #: ("example inputs", "second shape") and each graph input's (name, shape), for display,
    #: and the stage this comparison stands for (``exporter.stages`` words: the stage that
    #: failed when it is not ok).
    label: str = ""
    input_shapes: list[tuple[str, tuple[int, ...]]] = dataclasses.field(default_factory=list)
    stage: str | None = None

    def add_detail(self, ok: bool, line: str) -> None:
        self.details.append(line)
        self.detail_ok.append(ok)

    def shapes_text(self) -> str:
        """The inputs' names and shapes: ``x[2, 4], y[2]``."""
        return ", ".join(f"{n}{list(s)}" for n, s in self.input_shapes) or "no inputs"

    def fail_with(self, problems: list[str]) -> None:
        """Not ok when there are ``problems``; the message lists the first few."""
        if not problems:
            return
        self.problems.extend(problems)
        self.ok = False
        self.message = "; ".join(problems[:MAX_LISTED_PROBLEMS]) + (
            f"; and {len(problems) - MAX_LISTED_PROBLEMS} more"
            if len(problems) > MAX_LISTED_PROBLEMS
            else ""
        )


#: How many output problems a Comparison's message lists before "and N more".
MAX_LISTED_PROBLEMS = 6


def compare_outputs(
    expected: Sequence[Any],
    actual: Sequence[Any],
    *,
    rtol: float,
    atol: float,
    rule: str = ELEMENT,
    tolerances: Sequence[Sequence[float]] | None = None,
    shape_only: bool = False,
    sign_invariant: Sequence[Sequence] = (),
    declared_shapes: Sequence[Sequence[int | str | None] | None] | None = None,
    references: Sequence[Any] | None = None,
    reference_rule: ReferenceRule | None = None,
    code_tie_fraction: float | None = None,
) -> Comparison:
    """Outputs pairwise: count, shapes, dtypes, then values by ``compare_arrays``.

    ``tolerances`` optionally gives (rtol, atol) per output. ``sign_invariant`` aligns eigen and
    singular vectors first (``align_vector_signs``). ``declared_shapes`` are the ONNX model's
    declared output shapes: a dimension declared fixed that comes out at another size means the
    export specialised it (onnxruntime only warns). ``references`` (higher-precision outputs,
    one per output or None) judge float outputs by ``compare_to_reference`` under
    ``reference_rule`` instead of the tolerance. ``code_tie_fraction`` judges integer outputs
    as quantized codes (``compare_codes``) instead of exactly.
    """
    if len(expected) != len(actual):
        return Comparison(
            False, f"output count differs: eager has {len(expected)}, ONNX has {len(actual)}"
        )
    if sign_invariant:
        actual = align_vector_signs(expected, actual, sign_invariant)
    problems: list[str] = []
    result = Comparison(True)
    for index, (want, got) in enumerate(zip(expected, actual, strict=True)):
        want, got = np.asarray(want), np.asarray(got)
        declared = declared_shapes[index] if declared_shapes is not None else None
        contradicted = _fixed_dims_contradicted(declared, got.shape)
        if contradicted:
            problems.append(
                f"output {index}: the model declares {contradicted} but it came out as "
                f"{list(got.shape)} (a dimension was specialised at export)"
            )
        if want.shape != got.shape:
            problems.append(
                f"output {index}: shape {list(got.shape)} != expected {list(want.shape)}"
            )
            result.add_detail(False, problems[-1])
            continue
        if want.dtype != got.dtype:
            problems.append(f"output {index}: dtype {got.dtype} != expected {want.dtype}")
            result.add_detail(False, problems[-1])
            continue
        if shape_only or want.size == 0:
            result.add_detail(True, f"output {index}: {want.dtype}{list(want.shape)}, shape ok")
            continue
        r, a = tolerances[index] if tolerances and index < len(tolerances) else (rtol, atol)
        if code_tie_fraction is not None and want.dtype.kind in "iu":
            one = compare_codes(want, got, max_fraction=code_tie_fraction)
        else:
            one = _judge_output(want, got, references, index, reference_rule, rule, r, a)
        result.outputs.append(one)
        result.add_detail(one.ok and not contradicted, f"output {index}: {one.message}")
        result.max_abs = max_or_none(result.max_abs, one.max_abs)
        result.max_rel = max_or_none(result.max_rel, one.max_rel)
        if rule == SCALE:
            result.max_rel_scale = max_or_none(result.max_rel_scale, one.max_rel_scale)
        if not one.ok:
            problems.append(f"output {index}: {one.message}")
    result.fail_with(problems)
    return result


def _judge_output(want, got, references, index, reference_rule, rule, rtol, atol):
    reference = references[index] if references is not None and index < len(references) else None
    if reference is None or np.shape(reference) != want.shape or want.dtype.kind != "f":
        return compare_arrays(want, got, rtol=rtol, atol=atol, rule=rule)
    rule_data = reference_rule or ReferenceRule()
    return compare_to_reference(
        want, got, reference, rule=rule, multiple=rule_data.multiple, floor=rule_data.floor
    )


#: The chance that ``compare_distributions`` fails two samples of one distribution, per statistic
#: and output (a mean, a variance and a KS bound each).
FALSE_FAILURE = 1e-6
#: How many values per output the distribution rule wants pooled over the draws of a case.
DISTRIBUTION_VALUES = 4000


def compare_distributions(
    expected_draws: Sequence[Sequence[Any]],
    actual_draws: Sequence[Sequence[Any]],
    *,
    rtol: float = 0.0,
    atol: float = 0.0,
    false_failure: float = FALSE_FAILURE,
) -> Comparison:
    """Random outputs by distribution. ``*_draws[k]`` are the outputs of the k-th draw (a run of
    eager or of the ONNX model on the same inputs); each output's values are pooled over the
    draws, so the two sides are samples of the same mixture when the model is right.

    Per output: every draw has the expected shape and dtype, as many NaNs as eager's draws, and
    over the finite values, with ``z`` the two-sided normal quantile of ``false_failure``:

    - means: ``|mean_a - mean_e| <= z * sqrt(var_e / n + var_a / m)``;
    - variances: ``|var_a - var_e| <= z * sqrt(se_e**2 + se_a**2)``, ``se**2 = (m4 - var**2) / n``
      (m4 the fourth central moment);
    - shape: the two-sample KS statistic ``D <= sqrt(-ln(false_failure / 2) / 2) *
      sqrt((n + m) / (n m))`` (Dvoretzky-Kiefer-Wolfowitz/Massart; conservative for discrete
      values and for draws that mix per-element distributions in equal numbers on both sides).

    Each bound is for independent values; where the draws show that the values of one draw
    move together (``_design_effect``), the bounds widen by the square root of that factor
    (the effective sample size of cluster sampling).

    Values within ``atol + rtol * |value|`` of each other count as equal (KS compares the
    CDFs that far apart, the Levy-distance way; the mean and variance bounds widen by as much),
    so rounding in the parts of an output that are not random (rrelu's positive inputs, a
    low-rank product that is exact) does not fail. Heavy tails (a Cauchy draw) widen the mean
    and variance bounds with their own spread, so KS is what judges them.
    """
    if not expected_draws or not actual_draws:
        return Comparison(False, "no draws to compare")
    if len(expected_draws[0]) != len(actual_draws[0]):
        return Comparison(
            False,
            f"output count differs: eager has {len(expected_draws[0])}, "
            f"ONNX has {len(actual_draws[0])}",
        )
    z = _normal_quantile(false_failure / 2)
    ks_factor = float(np.sqrt(-np.log(false_failure / 2) / 2))
    result = Comparison(True)
    problems: list[str] = []
    for index in range(len(expected_draws[0])):
        wants = [np.asarray(draw[index]) for draw in expected_draws]
        gots = [np.asarray(draw[index]) for draw in actual_draws]
        one = _compare_one_distribution(wants, gots, z, ks_factor, rtol, atol)
        result.outputs.append(one)
        result.add_detail(one.ok, f"output {index}: {one.message}")
        if not one.ok:
            problems.append(f"output {index}: {one.message}")
    result.fail_with(problems)
    if result.ok:
        result.message = f"distributions match over {len(actual_draws)} draws"
    return result


def _compare_one_distribution(
    wants, gots, z: float, ks_factor: float, rtol: float, atol: float
) -> ArrayComparison:
    want0 = wants[0]
    for got in gots:
        if got.shape != want0.shape:
            return ArrayComparison(
                False, f"shape {list(got.shape)} != expected {list(want0.shape)}", total=want0.size
            )
        if got.dtype != want0.dtype:
            return ArrayComparison(False, f"dtype {got.dtype} != expected {want0.dtype}")
    want = np.concatenate([w.astype(np.float64).ravel() for w in wants])
    got = np.concatenate([g.astype(np.float64).ravel() for g in gots])
    total = int(got.size)
    if want.size == 0 or got.size == 0:
        return ArrayComparison(True, "empty", total=0)
    want_nan = np.count_nonzero(np.isnan(want)) / want.size
    got_nan = np.count_nonzero(np.isnan(got)) / got.size
    if want_nan != got_nan:
        return ArrayComparison(
            False, f"NaN share {got_nan:.3g} != expected {want_nan:.3g}", total=total
        )
    want, got = want[~np.isnan(want)], got[~np.isnan(got)]
    if want.size == 0:
        return ArrayComparison(True, "only NaN, as expected", total=total)
    n, m = want.size, got.size
    # Values of one draw may move together (feature dropout drops whole channels): the bounds
    # widen by the square root of the design effect that the draws show.
    widen = float(np.sqrt(max(_design_effect(wants, want), _design_effect(gots, want))))
    statistic = ks_statistic(want, got, rtol=rtol, atol=atol)
    ks_bound = widen * ks_factor * float(np.sqrt((n + m) / (n * m)))
    finite_w, finite_g = want[np.isfinite(want)], got[np.isfinite(got)]
    text = f"{m} values against {n}: KS {statistic:.3g} (bound {ks_bound:.3g})"
    if widen > 1:
        text += f", bounds widened x{widen:.3g} for values that move together"
    problems = []
    if statistic > ks_bound:
        problems.append(f"KS statistic {statistic:.3g} > {ks_bound:.3g}")
    if finite_w.size > 1 and finite_g.size > 1:
        mean_w, mean_g = float(finite_w.mean()), float(finite_g.mean())
        var_w, var_g = float(finite_w.var()), float(finite_g.var())
        scale = float(np.abs(finite_w).mean())
        slack = atol + rtol * scale + 1e-6 * max(abs(mean_w), abs(mean_g), np.sqrt(var_w), 1e-30)
        spread = float(np.sqrt(var_w / finite_w.size + var_g / finite_g.size))
        mean_bound = widen * z * spread + slack
        m4_w = float(((finite_w - mean_w) ** 4).mean())
        m4_g = float(((finite_g - mean_g) ** 4).mean())
        var_se = np.sqrt(
            max(m4_w - var_w**2, 0.0) / finite_w.size + max(m4_g - var_g**2, 0.0) / finite_g.size
        )
        var_bound = (
            widen * z * float(var_se)
            + 2 * np.sqrt(max(var_w, var_g)) * (atol + rtol * scale)
            + 1e-6 * max(var_w, var_g, 1e-30)
        )
        text += (
            f", mean {mean_g:.4g} vs {mean_w:.4g} (bound {mean_bound:.3g}), "
            f"variance {var_g:.4g} vs {var_w:.4g} (bound {var_bound:.3g})"
        )
        if abs(mean_g - mean_w) > mean_bound:
            problems.append(f"mean {mean_g:.4g} vs expected {mean_w:.4g} (bound {mean_bound:.3g})")
        if abs(var_g - var_w) > var_bound:
            problems.append(f"variance {var_g:.4g} vs expected {var_w:.4g} (bound {var_bound:.3g})")
    if problems:
        return ArrayComparison(
            False, "; ".join(problems) + f" ({m} values against {n})", total=total
        )
    return ArrayComparison(True, text, total=total)


def _design_effect(draws: list[np.ndarray], reference: np.ndarray) -> float:
    """How much more the per-draw means of the values, and of the indicator ``value <= median
    of reference``, vary than independent values would: ``var(draw means) * per-draw size /
    var(values)``, the largest of the two, at least 1 (1 when there are fewer than 8 draws or
    one value per draw, too few to tell)."""
    size = draws[0].size
    if len(draws) < 8 or size < 2:
        return 1.0
    values = np.stack([d.astype(np.float64).ravel() for d in draws])
    if not np.isfinite(values).all():
        return 1.0
    median = float(np.median(reference[np.isfinite(reference)]))
    effect = 1.0
    for unit in (values, (values <= median).astype(np.float64)):
        total = float(unit.var())
        if total > 0:
            effect = max(effect, float(unit.mean(axis=1).var(ddof=1)) * size / total)
    return effect


def ks_statistic(a: np.ndarray, b: np.ndarray, *, rtol: float = 0.0, atol: float = 0.0) -> float:
    """The two-sample Kolmogorov-Smirnov statistic: the largest gap between the empirical CDFs
    (evaluated at every value of both, so ties count right). With a tolerance, each CDF is
    compared with the other's ``atol + rtol * |t|`` further on, so values that far apart count
    as equal (0 when they are)."""
    a, b = np.sort(a), np.sort(b)
    points = np.concatenate([a, b])
    ahead = points + (atol + rtol * np.abs(points))
    cdf_a = np.searchsorted(a, points, side="right") / a.size
    cdf_b = np.searchsorted(b, points, side="right") / b.size
    cdf_a_ahead = np.searchsorted(a, ahead, side="right") / a.size
    cdf_b_ahead = np.searchsorted(b, ahead, side="right") / b.size
    gap = np.maximum(cdf_a - cdf_b_ahead, cdf_b - cdf_a_ahead)
    return float(max(gap.max(), 0.0))


def _normal_quantile(tail: float) -> float:
    """z with P(N(0, 1) > z) = tail, by bisection on erfc (the standard library only)."""
    import math

    low, high = 0.0, 40.0
    for _ in range(200):
        mid = (low + high) / 2
        if 0.5 * math.erfc(mid / math.sqrt(2)) > tail:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def _fixed_dims_contradicted(declared, shape: tuple[int, ...]) -> str:
    if not declared or len(declared) != len(shape):
        return ""
    if all(not isinstance(d, int) or d == s for d, s in zip(declared, shape)):
        return ""
    return "[" + ", ".join(str(d) if d is not None else "?" for d in declared) + "]"


def max_or_none(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)


def align_vector_signs(
    expected: Sequence[Any], actual: Sequence[Any], spec: Sequence[Sequence]
) -> list[np.ndarray]:
    """``actual`` with each eigen/singular vector's sign matched to ``expected``'s.

    Such vectors are defined up to sign, and LAPACK's choice is not a rule another
    implementation can follow. ``spec`` lists ``[output index, "columns" | "rows"]`` (how the
    output stores its vectors); the first entry decides each vector's sign from its dot product
    with the expected vector, and the other entries (U and V of an SVD) flip the same vectors,
    so that a wrong pairing still fails. Outputs whose shapes differ are left for the comparison
    to report.
    """
    aligned = [np.asarray(a) for a in actual]
    signs = None
    for index, layout in spec:
        if index >= min(len(expected), len(aligned)):
            return aligned
        want, got = np.asarray(expected[index]), aligned[index]
        if want.shape != got.shape or want.ndim < 2 or want.dtype.kind != "f":
            return aligned
        # Vectors along the last axis: [..., vector, entry].
        want_v = want if layout == "rows" else np.swapaxes(want, -1, -2)
        got_v = got if layout == "rows" else np.swapaxes(got, -1, -2)
        own = np.where(np.nansum(want_v * got_v, axis=-1) < 0, -1.0, 1.0)
        if signs is None:
            signs = own
        count = min(signs.shape[-1], own.shape[-1])
        # Vectors beyond the deciding output's count (the completed part of a full U) have no
        # partner and take their own sign.
        use = np.concatenate([signs[..., :count], own[..., count:]], axis=-1)
        flipped = got_v * use[..., None].astype(got.dtype)
        aligned[index] = flipped if layout == "rows" else np.swapaxes(flipped, -1, -2)
    return aligned


# ----------------------------------------------------------------- op tolerances from data
@dataclasses.dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float
    source: str  # "dtype f32" or "override nn.functional.conv2d: <reason>"
    #: Set by a per-op override entry (the dtype's default otherwise).
    overridden: bool = False


@dataclasses.dataclass(frozen=True)
class Policy:
    """The op cases' comparison policy: per-dtype tolerances, per-op overrides, the ops compared
    on shape and dtype only, and the ops whose eigen/singular vectors compare up to sign."""

    by_dtype: dict[str, tuple[float, float]]
    overrides: tuple[dict, ...]
    shape_only_globs: tuple[str, ...]
    shape_only_reason: str
    sign_invariant_entries: tuple[dict, ...] = ()
    #: Ops whose outputs are random: judged by ``compare_distributions``.
    distribution_globs: tuple[str, ...] = ()
    #: Ops whose integer outputs are quantized codes (``compare_codes``), and the fraction of
    #: elements that may be one code apart.
    codes_globs: tuple[str, ...] = ()
    codes_max_fraction: float = 0.0

    def tolerance(self, op: str, dtype: str, provider: str = "cpu") -> Tolerance:
        for entry in self.overrides:
            if (
                fnmatch.fnmatchcase(op, entry["op"])
                and entry.get("dtype", dtype) == dtype
                and entry.get("provider", provider) == provider
            ):
                return Tolerance(
                    float(entry["rtol"]),
                    float(entry["atol"]),
                    f"override {entry['op']}: {entry.get('reason', '')}".rstrip(": "),
                    overridden=True,
                )
        if dtype not in self.by_dtype:
            raise KeyError(f"the tolerance policy has no [dtype.{dtype}] table")
        rtol, atol = self.by_dtype[dtype]
        return Tolerance(rtol, atol, f"dtype {dtype}")

    def is_shape_only(self, op: str) -> bool:
        return any(fnmatch.fnmatchcase(op, pattern) for pattern in self.shape_only_globs)

    def is_distribution(self, op: str) -> bool:
        return any(fnmatch.fnmatchcase(op, pattern) for pattern in self.distribution_globs)

    def code_tie_fraction(self, op: str) -> float | None:
        """``compare_outputs``' ``code_tie_fraction`` for the op: None unless ``[codes]`` names it."""
        if any(fnmatch.fnmatchcase(op, pattern) for pattern in self.codes_globs):
            return self.codes_max_fraction
        return None

    def sign_invariant(self, op: str) -> list[list]:
        """``align_vector_signs``'s spec for the op, or [] (the first match wins)."""
        for entry in self.sign_invariant_entries:
            if fnmatch.fnmatchcase(op, entry["op"]):
                return [list(item) for item in entry["outputs"]]
        return []


@functools.cache
def load_policy(path: str | Path) -> Policy:
    """Read a policy file (format: ``torch_onnx_conformance/conformance/tolerances.toml``); a clear error when it is
    unreadable or an entry lacks a field."""
    import tomllib

    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"cannot read the tolerance policy {path}: {exc}") from exc
    by_dtype = {}
    for dtype, table in data.get("dtype", {}).items():
        try:
            by_dtype[dtype] = (float(table["rtol"]), float(table["atol"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: [dtype.{dtype}] needs numeric rtol and atol") from exc
    overrides = tuple(data.get("override", ()))
    for index, entry in enumerate(overrides):
        missing = {"op", "rtol", "atol"} - set(entry)
        if missing:
            raise ValueError(
                f"{path}: [[override]] #{index + 1} lacks {', '.join(sorted(missing))}"
            )
    sign_invariant = tuple(data.get("sign_invariant", ()))
    for index, entry in enumerate(sign_invariant):
        outputs = entry.get("outputs")
        if (
            "op" not in entry
            or not outputs
            or any(len(item) != 2 or item[1] not in ("columns", "rows") for item in outputs)
        ):
            raise ValueError(
                f"{path}: [[sign_invariant]] #{index + 1} needs op and outputs = "
                '[[index, "columns" | "rows"], ...]'
            )
    shape_only = data.get("shape_only", {})
    codes = data.get("codes", {})
    return Policy(
        by_dtype=by_dtype,
        overrides=overrides,
        shape_only_globs=tuple(shape_only.get("ops", ())),
        shape_only_reason=shape_only.get("reason", "outputs compared on shape and dtype only"),
        sign_invariant_entries=sign_invariant,
        distribution_globs=tuple(data.get("distribution", {}).get("ops", ())),
        codes_globs=tuple(codes.get("ops", ())),
        codes_max_fraction=float(codes.get("max_fraction", CODE_TIE_FRACTION)),
    )


# ---------------------------------------------------------------- quantized tensors and outputs
#: Quantized integers may be one code apart on at most this fraction of the elements: torch
#: quantizes ``round(x * (1/scale))``, ONNX's QuantizeLinear ``round(x / scale)``; the two
#: products differ in the last bit now and then, which moves a value sitting on a half-step tie
#: to the neighbouring code. Anything further apart, or more often, is a wrong translation.
CODE_TIE_FRACTION = 1e-3
#: A dequantized model output may differ from torch's by this many of its quantization steps:
#: one code flipped on a tie upstream moves it by about one step.
QUANTIZED_OUTPUT_STEPS = 2.0


def compare_codes(
    expected: Any, actual: Any, *, max_fraction: float = CODE_TIE_FRACTION
) -> ArrayComparison:
    """Quantized integer tensors: equal, except at most one code apart on at most
    ``max_fraction`` of the elements (see CODE_TIE_FRACTION)."""
    want, got = np.asarray(expected), np.asarray(actual)
    if want.shape != got.shape:
        return ArrayComparison(False, f"shape {got.shape} != expected {want.shape}")
    if want.dtype != got.dtype:
        return ArrayComparison(False, f"dtype {got.dtype} != expected {want.dtype}")
    diff = np.abs(want.astype(np.int64) - got.astype(np.int64))
    total = int(diff.size)
    widest = int(diff.max()) if total else 0
    apart = int(np.count_nonzero(diff))
    allowed = int(max_fraction * total)
    ok = widest <= 1 and apart <= allowed
    message = (
        f"{apart} of {total} codes differ (at most {allowed} may, by one code), "
        f"widest gap {widest} code(s)"
    )
    return ArrayComparison(ok, message, max_abs=float(widest), mismatched=apart, total=total)


def compare_in_steps(
    expected: Any, actual: Any, *, step: float, steps: float = QUANTIZED_OUTPUT_STEPS
) -> ArrayComparison:
    """A float output of a quantized model: every element within ``steps`` quantization
    steps (``step`` is the output's scale) of the expected value."""
    want = np.asarray(expected, dtype=np.float64)
    got = np.asarray(actual, dtype=np.float64)
    if want.shape != got.shape:
        return ArrayComparison(False, f"shape {got.shape} != expected {want.shape}")
    diff = np.abs(want - got)
    bound = steps * step
    bad = int(np.count_nonzero(~(diff <= bound)))
    widest = float(np.nanmax(diff)) if diff.size else 0.0
    message = (
        f"max |diff| {widest:.3g} = {widest / step:.3g} steps of {step:.3g} "
        f"(at most {steps:g}); {bad} of {diff.size} elements outside"
    )
    return ArrayComparison(bad == 0, message, max_abs=widest, mismatched=bad, total=diff.size)


@dataclasses.dataclass(frozen=True)
class QuantizationNode:
    """One quantize or dequantize of a quantized model, as the structure rule compares it
    (``exporter.diagnostics.quantized_structure`` reads them from a program and an ONNX graph):
    ``dtype`` the integer type ("uint8", "int8", "int4"...), ``zero_points`` its distinct zero
    points (None: computed at run time), ``granularity`` "tensor", "axis N", "block B" or
    "rows", ``stored`` whether the tensor quantized or dequantized is a stored constant."""

    kind: str  # "quantize" | "dequantize"
    dtype: str
    zero_points: tuple[int, ...] | None
    granularity: str
    stored: bool

    def __str__(self) -> str:
        zero = "runtime" if self.zero_points is None else ",".join(map(str, self.zero_points))
        where = " of a stored tensor" if self.stored else ""
        return f"{self.kind} {self.dtype} zp={zero} per {self.granularity}{where}"


def compare_quantization_structure(
    program: Sequence[QuantizationNode], graph: Sequence[QuantizationNode]
) -> ArrayComparison:
    """A quantized export's structure: the graph holds one QuantizeLinear/DequantizeLinear per
    quantize/dequantize of the program, with the program's integer type, zero points and
    axis (or block), each stored weight an integer initializer. Compared as multisets:
    ``mismatched`` counts the nodes on one side only."""
    import collections

    want, got = collections.Counter(program), collections.Counter(graph)
    only_program, only_graph = want - got, got - want

    def counted(nodes: collections.Counter, kind: str) -> int:
        return sum(n for node, n in nodes.items() if node.kind == kind)

    def listed(nodes: collections.Counter) -> str:
        return "; ".join(f"{n} x {node}" for node, n in sorted(nodes.items(), key=str))

    message = (
        f"program {counted(want, 'quantize')} quantize / {counted(want, 'dequantize')} "
        f"dequantize, graph {counted(got, 'quantize')} / {counted(got, 'dequantize')}"
    )
    if only_program:
        message += f"; in the program only: {listed(only_program)}"
    if only_graph:
        message += f"; in the graph only: {listed(only_graph)}"
    mismatched = sum(only_program.values()) + sum(only_graph.values())
    return ArrayComparison(
        mismatched == 0, message, mismatched=mismatched, total=sum(want.values())
    )


# ------------------------------------------------- low precision against a higher-precision reference
#: The float16 rule's defaults; torch_onnx_conformance/conformance/tolerances.toml ``[float16]`` states the values the
#: harness uses and why.
LOW_PRECISION_MULTIPLE = 8.0
LOW_PRECISION_FLOOR = 1e-5


@dataclasses.dataclass(frozen=True)
class ReferenceRule:
    """How a float16 output is judged against a higher-precision reference (eager on the same
    inputs' values upcast): ours' error against the reference may be ``multiple`` times eager
    float16's own error against it, plus ``floor`` (for exact zeros). ``reference`` names the
    dtype the reference runs in for op cases (model cases run theirs in float32)."""

    multiple: float = LOW_PRECISION_MULTIPLE
    floor: float = LOW_PRECISION_FLOOR
    reference: str = "float64"
    reason: str = ""


def load_reference_rule(path: str | Path) -> ReferenceRule:
    """The ``[float16]`` table of a policy file (format: ``torch_onnx_conformance/conformance/tolerances.toml``); the
    defaults above where the file has none."""
    import tomllib

    path = Path(path)
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8")).get("float16", {})
        return ReferenceRule(
            multiple=float(table.get("multiple", LOW_PRECISION_MULTIPLE)),
            floor=float(table.get("floor", LOW_PRECISION_FLOOR)),
            reference=str(table.get("reference", "float64")),
            reason=str(table.get("reason", "")),
        )
    except (OSError, tomllib.TOMLDecodeError, TypeError, ValueError) as exc:
        raise ValueError(
            f"cannot read [float16] of {path} (needs numeric multiple and floor): {exc}"
        ) from exc


def float16_unit(values: np.ndarray) -> np.ndarray:
    """One float16 rounding step (ulp) at each ``|value|``: the size of rounding noise there.
    Values past float16's largest finite number take its step there (32)."""
    magnitude = np.minimum(np.abs(values), float(np.finfo(np.float16).max))
    return np.spacing(magnitude.astype(np.float16)).astype(np.float64)


def compare_to_reference(
    expected: Any,
    actual: Any,
    reference: Any,
    *,
    rule: str = ELEMENT,
    multiple: float = LOW_PRECISION_MULTIPLE,
    floor: float = LOW_PRECISION_FLOOR,
) -> ArrayComparison:
    """A low-precision output (``actual``) judged against a higher-precision ``reference``,
    with eager's own low-precision output (``expected``) as the measure of rounding noise.

    Shapes, dtypes, NaN and infinity positions and integer outputs are judged against
    ``expected`` as ``compare_arrays`` does. Then, over the elements finite on every side, with
    ``e_ours = |actual - ref|``, ``e_eager = |expected - ref|`` and ``u`` one float16 step at
    ``|ref|`` (``float16_unit``):

    - ``ELEMENT``: every element satisfies ``e_ours <= multiple * max(e_eager, u) + floor``;
    - ``SCALE``: ``max e_ours <= multiple * max(max e_eager, u(scale)) + floor``, scale the
      output's largest finite ``|ref|``.

    So ours may round differently from eager (a few steps), but not drift further from the
    true value than a few times eager's own float16 error. A ``reference`` of another shape, or
    a non-float output, leaves only the structural checks (the caller's tolerance judges it
    then). The measures (max_abs, max_rel, ...) are against ``expected``, as everywhere."""
    want, got, ref = np.asarray(expected), np.asarray(actual), np.asarray(reference)
    want, rescued = _overflow_rescued(want, got, ref)
    result = compare_arrays(want, got, rtol=0.0, atol=np.inf, rule=ELEMENT)
    if not result.ok or want.dtype.kind != "f" or ref.shape != want.shape or want.size == 0:
        return result
    if ref.dtype.kind not in "fiub":
        raise ValueError(f"a reference of dtype {ref.dtype} cannot judge a float output")
    want64, got64, ref64 = (a.astype(np.float64) for a in (want, got, ref))
    both = np.isfinite(want64) & np.isfinite(ref64)
    if not both.any():
        return result
    want_f, got_f, ref_f = want64[both], got64[both], ref64[both]
    ours, eager = np.abs(got_f - ref_f), np.abs(want_f - ref_f)
    if rule == SCALE:
        scale = float(np.abs(ref_f).max())
        noise = max(float(eager.max()), float(float16_unit(np.asarray(scale))))
        allowed = np.full_like(ours, multiple * noise + floor)
        measure = f"max error vs reference {ours.max():.3g}, eager's {eager.max():.3g}"
    elif rule == ELEMENT:
        noise_each = np.maximum(eager, float16_unit(ref_f))
        allowed = multiple * noise_each + floor
        ratio = float((ours / noise_each).max())
        measure = f"error vs reference up to {ratio:.3g} x eager's (or one float16 step)"
    else:
        raise ValueError(f"unknown comparison rule {rule!r}; use one of {RULES}")
    bad = ours > allowed
    result.mismatched = int(np.count_nonzero(bad))
    if result.mismatched:
        worst = int(np.argmax(ours - allowed))
        result.ok = False
        result.message = (
            f"{result.mismatched}/{want.size} elements drift from the {ref.dtype} reference "
            f"beyond {multiple:g} x eager {want.dtype}'s own error + {floor:g} ({measure}); "
            f"worst: reference {ref_f[worst]:.6g}, eager {want_f[worst]:.6g}, "
            f"got {got_f[worst]:.6g}"
        )
        return result
    result.message = f"{measure}; max abs error vs eager {result.max_abs:.3g}" + (
        f"; {rescued} element(s) where eager overflowed inside judged by the reference alone"
        if rescued
        else ""
    )
    return result


def _overflow_rescued(want: np.ndarray, got: np.ndarray, ref: np.ndarray) -> tuple[np.ndarray, int]:
    """Eager's float16 output with the elements it lost to an overflow inside the op replaced
    by the reference rounded to float16, and their count. Lost: eager is NaN or infinite where
    the reference is not NaN and rounds to something else (a finite value, or an infinity of
    another sign), and ours is not NaN. There ours must be that rounded value's infinity, or
    within ``multiple`` float16 steps of the reference, since eager's own error is unbounded.
    Where eager's value is the true one rounded (a true overflow) or ours is NaN like eager,
    eager's value stands."""
    if want.dtype.kind != "f" or ref.shape != want.shape or got.shape != want.shape:
        return want, 0
    with np.errstate(invalid="ignore", over="ignore"):
        rounded = ref.astype(want.dtype)
        lost = ~np.isfinite(want) & ~np.isnan(ref) & ~np.isnan(got) & (want != rounded)
    count = int(np.count_nonzero(lost))
    if not count:
        return want, 0
    restored = want.copy()
    restored[lost] = rounded[lost]
    return restored, count
