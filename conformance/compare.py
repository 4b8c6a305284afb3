"""Comparing runtime outputs with eager outputs: count, shapes, dtypes, NaN positions, values.

Pure numpy, so the standalone ``repro.py`` of a repro directory can carry the same rule.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np


@dataclasses.dataclass
class Comparison:
    ok: bool
    message: str = ""
    max_abs: float | None = None
    max_rel: float | None = None
    #: One line per output, for repro files and error messages.
    details: list[str] = dataclasses.field(default_factory=list)


def compare_outputs(
    expected: Sequence[np.ndarray],
    actual: Sequence[np.ndarray],
    *,
    rtol: float,
    atol: float,
    shape_only: bool = False,
    sign_invariant: Sequence[Sequence] = (),
) -> Comparison:
    """Compare outputs pairwise (after ``align_vector_signs`` when ``sign_invariant`` is given).

    Shapes and dtypes must match exactly. Float outputs pass when
    ``|actual - expected| <= atol + rtol * |expected|`` elementwise, with NaNs at the same
    positions and equal infinities; integer and bool outputs must be equal. ``max_rel`` is taken
    over elements whose expected value is non-zero (zeros are judged by ``atol`` alone).
    """
    if len(expected) != len(actual):
        return Comparison(
            False, f"output count differs: eager has {len(expected)}, ONNX has {len(actual)}"
        )
    if sign_invariant:
        actual = align_vector_signs(expected, actual, sign_invariant)
    problems: list[str] = []
    details: list[str] = []
    max_abs: float | None = None
    max_rel: float | None = None
    for index, (want, got) in enumerate(zip(expected, actual, strict=True)):
        want, got = np.asarray(want), np.asarray(got)
        if want.shape != got.shape:
            problems.append(f"output {index}: shape {got.shape} != expected {want.shape}")
            details.append(problems[-1])
            continue
        if want.dtype != got.dtype:
            problems.append(f"output {index}: dtype {got.dtype} != expected {want.dtype}")
            details.append(problems[-1])
            continue
        if shape_only or want.size == 0:
            details.append(f"output {index}: shape {want.shape} {want.dtype} ok")
            continue
        result = _compare_values(want, got, rtol=rtol, atol=atol)
        details.append(f"output {index}: {result.message}")
        if result.max_abs is not None:
            max_abs = result.max_abs if max_abs is None else max(max_abs, result.max_abs)
        if result.max_rel is not None:
            max_rel = result.max_rel if max_rel is None else max(max_rel, result.max_rel)
        if not result.ok:
            problems.append(f"output {index}: {result.message}")
    if problems:
        return Comparison(False, "; ".join(problems), max_abs, max_rel, details)
    return Comparison(True, "", max_abs, max_rel, details)


def _is_exact_dtype(dtype: np.dtype) -> bool:
    return dtype.kind in "biu"


def _compare_values(want: np.ndarray, got: np.ndarray, *, rtol: float, atol: float) -> Comparison:
    if _is_exact_dtype(want.dtype):
        mismatched = int(np.count_nonzero(want != got))
        diff = np.abs(want.astype(np.float64) - got.astype(np.float64))
        max_abs = float(diff.max())
        if mismatched:
            return Comparison(
                False,
                f"{mismatched}/{want.size} elements differ (exact compare), max abs error {max_abs:g}",
                max_abs,
                None,
            )
        return Comparison(True, "equal", max_abs, 0.0)

    want64 = want.astype(np.float64)
    got64 = got.astype(np.float64)
    want_nan, got_nan = np.isnan(want64), np.isnan(got64)
    if not np.array_equal(want_nan, got_nan):
        extra = int(np.count_nonzero(got_nan & ~want_nan))
        missing = int(np.count_nonzero(want_nan & ~got_nan))
        return Comparison(
            False, f"NaN positions differ ({extra} unexpected NaN, {missing} missing NaN)"
        )
    want_inf, got_inf = np.isinf(want64), np.isinf(got64)
    if not np.array_equal(want_inf, got_inf) or not np.array_equal(
        want64[want_inf], got64[got_inf]
    ):
        return Comparison(False, "infinities differ in position or sign")

    finite = np.isfinite(want64)
    if not finite.any():
        return Comparison(True, "only NaN/inf, all matching", 0.0, 0.0)
    want_f, got_f = want64[finite], got64[finite]
    diff = np.abs(got_f - want_f)
    magnitude = np.abs(want_f)
    max_abs = float(diff.max())
    nonzero = magnitude > 0
    max_rel = float((diff[nonzero] / magnitude[nonzero]).max()) if nonzero.any() else 0.0
    bad = diff > atol + rtol * magnitude
    if bad.any():
        worst = int(np.argmax(diff - (atol + rtol * magnitude)))
        return Comparison(
            False,
            f"{int(bad.sum())}/{want.size} elements exceed rtol={rtol:g} atol={atol:g}; "
            f"max abs error {max_abs:.3g}, max rel error {max_rel:.3g}; "
            f"worst: expected {want_f[worst]:.6g}, got {got_f[worst]:.6g}",
            max_abs,
            max_rel,
        )
    return Comparison(
        True, f"max abs error {max_abs:.3g}, max rel error {max_rel:.3g}", max_abs, max_rel
    )


def align_vector_signs(
    expected: Sequence[np.ndarray], actual: Sequence[np.ndarray], spec: Sequence[Sequence]
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
