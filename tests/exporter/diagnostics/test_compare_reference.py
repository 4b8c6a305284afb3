"""float16 judged against a higher-precision reference (compare.compare_to_reference): rounding
noise passes, a wrong model fails, whatever the fixed float16 tolerance would have said."""

from __future__ import annotations

import numpy as np
import pytest

from torch_onnx_conformance.conformance.op_cases import OP_TOLERANCES_PATH
from torch_onnx_conformance.exporter.diagnostics.compare import (
    SCALE,
    ReferenceRule,
    compare_outputs,
    compare_to_reference,
    float16_unit,
    load_reference_rule,
)


def _sample(n: int = 2000, seed: int = 0):
    """A float64 'true' output over several magnitudes and eager float16's rounding of it."""
    rng = np.random.default_rng(seed)
    reference = rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)
    return reference, reference.astype(np.float16)


def test_rounding_elsewhere_passes_where_the_fixed_tolerance_fails():
    reference, eager = _sample()
    rng = np.random.default_rng(1)
    # Ours rounds in other places: two float16 steps off on a third of the elements.
    steps = rng.choice([-2, 0, 2], reference.size).astype(np.float64)
    ours = (eager + steps * float16_unit(reference)).astype(np.float16)
    assert compare_to_reference(eager, ours, reference).ok
    # 2 steps at a value just above a power of two is ~2e-3 relative: beyond rtol 1e-3.
    assert not compare_outputs([eager], [ours], rtol=1e-3, atol=1e-3).ok


@pytest.mark.parametrize("where", ["everywhere", "one element"])
def test_a_wrong_model_fails(where):
    reference, eager = _sample()
    ours = eager.astype(np.float64)
    if where == "everywhere":
        ours = ours * 1.02
    else:
        ours[17] = ours[17] * 1.02 + 0.01
    found = compare_to_reference(eager, ours.astype(np.float16), reference)
    assert not found.ok
    assert "drift from the float64 reference" in found.message and found.mismatched >= 1


def test_float16_accumulation_drifts_beyond_eagers_float32_accumulation():
    # torch sums float16 in float32 and rounds once; a kernel that accumulates in float16 rounds
    # at every step and drifts by tens of steps over a long sum.
    rng = np.random.default_rng(2)
    x = rng.random((64, 4096)).astype(np.float16)
    reference = x.astype(np.float64).sum(axis=1)
    eager = x.astype(np.float32).sum(axis=1).astype(np.float16)
    running = np.zeros(64, np.float16)
    for column in x.T:
        running = (running + column).astype(np.float16)
    assert not compare_to_reference(eager, running, reference).ok
    assert compare_to_reference(eager, eager, reference).ok


def test_a_noisy_eager_allows_a_proportionally_noisy_ours():
    # Where eager's own float16 intermediates put it 40 steps off, ours may be as far off.
    reference = np.linspace(1.0, 2.0, 50)
    unit = float16_unit(reference)
    eager = (reference + 40 * unit).astype(np.float16)
    ours = (reference - 40 * unit).astype(np.float16)
    assert compare_to_reference(eager, ours, reference).ok
    assert not compare_to_reference(eager, ours, reference, multiple=0.5).ok


def test_exact_zeros_get_the_floor_only():
    reference = np.zeros(4)
    eager = np.zeros(4, np.float16)
    assert compare_to_reference(eager, np.full(4, 1e-6, np.float16), reference).ok
    found = compare_to_reference(eager, np.array([0, 0, 1e-3, 0], np.float16), reference)
    assert not found.ok and found.mismatched == 1


def test_structure_is_judged_against_eager():
    reference = np.array([1.0, np.inf, np.nan])
    eager = np.array([1.0, np.inf, np.nan], np.float16)
    assert compare_to_reference(eager, eager.copy(), reference).ok
    found = compare_to_reference(eager, np.array([1.0, np.inf, 3.0], np.float16), reference)
    assert not found.ok and "NaN positions differ" in found.message
    found = compare_to_reference(eager, np.ones(2, np.float16), reference)
    assert not found.ok and "shape" in found.message
    ints = np.array([1, 2, 3])
    assert not compare_to_reference(ints, ints + 1, ints.astype(np.float64)).ok


def test_scale_rule_judges_the_output_maximum():
    reference = np.array([1000.0, 0.001, -3.0])
    eager = np.array([1000.5, 0.0, -3.0], np.float16)  # eager is a step off at the scale
    close = np.array([999.0, 0.5, -3.0], np.float16)  # 0.5 off near zero: noise at scale 1000
    assert compare_to_reference(eager, close, reference, rule=SCALE).ok
    assert not compare_to_reference(eager, close, reference).ok  # elementwise it is not
    far = np.array([1000.0, 9.0, -3.0], np.float16)
    assert not compare_to_reference(eager, far, reference, rule=SCALE).ok


def test_compare_outputs_uses_the_reference_where_given():
    reference, eager = _sample(200)
    ours = (eager + 2 * float16_unit(reference)).astype(np.float16)
    ints = np.arange(3)
    rule = ReferenceRule(multiple=4, floor=1e-5)
    judged = compare_outputs(
        [eager, ints],
        [ours, ints],
        rtol=0,
        atol=0,
        references=[reference, None],
        reference_rule=rule,
    )
    assert judged.ok, judged.message
    # Without a reference (None, or another shape) the tolerance judges.
    assert not compare_outputs([eager], [ours], rtol=0, atol=0, references=[None]).ok
    assert not compare_outputs([eager], [ours], rtol=0, atol=0, references=[reference[:5]]).ok


def test_the_rule_is_read_from_the_tolerance_table(tmp_path):
    rule = load_reference_rule(OP_TOLERANCES_PATH)
    assert rule.multiple > 1 and 0 < rule.floor < 1e-3 and rule.reason
    assert rule.reference in ("float32", "float64")
    bad = tmp_path / "tolerances.toml"
    bad.write_text('[float16]\nmultiple = "many"\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"\[float16\]"):
        load_reference_rule(bad)


def test_where_eager_overflowed_inside_the_reference_judges_alone():
    # matrix_exp in float16: eager's intermediate powers overflow to NaN while the true result
    # (the float64 reference) is finite and representable in float16.
    reference = np.array([2454.48, -22966.99, 1.5, np.inf])
    eager = np.array([np.nan, np.nan, 1.5, np.inf], np.float16)
    right = reference.astype(np.float16)
    found = compare_to_reference(eager, right, reference)
    assert found.ok and "2 element(s) where eager overflowed" in found.message
    assert compare_to_reference(eager, eager.copy(), reference).ok  # overflowing like eager
    wrong = np.array([2454.48 * 1.01, -22966.99, 1.5, np.inf], np.float16)
    assert not compare_to_reference(eager, wrong, reference).ok
    # A true overflow (the reference is infinite too) still needs eager's infinity.
    assert not compare_to_reference(eager, np.array([*right[:3], 1.0], np.float16), reference).ok


def test_where_eager_lost_a_true_overflow_to_nan_ours_may_keep_the_infinity():
    reference = np.array([1e6, -1e6, 2.0])
    eager = np.array([np.nan, np.nan, 2.0], np.float16)
    assert compare_to_reference(eager, np.array([np.inf, -np.inf, 2.0], np.float16), reference).ok
    found = compare_to_reference(eager, np.array([np.inf, np.inf, 2.0], np.float16), reference)
    assert not found.ok and "infinities differ" in found.message
