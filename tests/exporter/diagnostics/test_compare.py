"""THE comparison rule (torch_onnx_conformance/exporter/diagnostics/compare.py) and the op cases' tolerance policy."""

from __future__ import annotations

import numpy as np
import pytest

from torch_onnx_conformance.conformance.op_cases import OP_TOLERANCES_PATH
from torch_onnx_conformance.exporter.diagnostics.compare import (
    SCALE,
    align_vector_signs,
    compare_arrays,
    compare_distributions,
    compare_outputs,
    ks_statistic,
    load_policy,
)


def _compare(expected, actual, rtol=1e-5, atol=1e-5, **kwargs):
    return compare_outputs(expected, actual, rtol=rtol, atol=atol, **kwargs)


def test_within_tolerance_passes_and_records_errors():
    want = np.array([1.0, 2.0, 0.0], dtype=np.float32)
    got = want + np.array([1e-6, -2e-6, 5e-6], dtype=np.float32)
    result = _compare([want], [got])
    assert result.ok, result.message
    assert result.max_abs == pytest.approx(5e-6, rel=1e-2)
    # The zero element is judged by atol alone and left out of the relative error.
    assert result.max_rel == pytest.approx(1e-6, rel=1e-1)


def test_beyond_tolerance_fails_with_the_worst_element():
    want = np.array([1.0, 2.0], dtype=np.float32)
    got = np.array([1.0, 2.5], dtype=np.float32)
    result = _compare([want], [got])
    assert not result.ok
    assert "1/2 elements exceed" in result.message
    assert "expected 2" in result.message and "got 2.5" in result.message
    assert result.max_abs == pytest.approx(0.5)


def test_nan_positions_must_match():
    want = np.array([np.nan, 1.0], dtype=np.float32)
    assert _compare([want], [want.copy()]).ok
    moved = np.array([1.0, np.nan], dtype=np.float32)
    result = _compare([want], [moved])
    assert not result.ok and "NaN positions differ" in result.message


def test_infinities_must_match_in_sign():
    want = np.array([np.inf, 1.0], dtype=np.float32)
    result = _compare([want], [np.array([-np.inf, 1.0], dtype=np.float32)])
    assert not result.ok and "infinities" in result.message


def test_integers_and_bools_compare_exactly_whatever_the_tolerance():
    want = np.array([1, 2, 3], dtype=np.int64)
    result = _compare([want], [np.array([1, 2, 4], dtype=np.int64)], rtol=1, atol=10)
    assert not result.ok and "exact compare" in result.message
    bools = np.array([True, False])
    assert not _compare([bools], [~bools], rtol=1, atol=1).ok


@pytest.mark.parametrize(
    ("actual", "problem"),
    [
        (np.zeros((2, 3), dtype=np.float32), "shape [2, 3] != expected [3, 2]"),
        (np.zeros((3, 2), dtype=np.float64), "dtype float64 != expected float32"),
    ],
)
def test_shape_and_dtype_must_match(actual, problem):
    result = _compare([np.zeros((3, 2), dtype=np.float32)], [actual])
    assert not result.ok and problem in result.message


def test_output_count_must_match():
    result = _compare([np.zeros(1)], [np.zeros(1), np.zeros(1)])
    assert not result.ok and "output count differs" in result.message


def test_zero_d_and_empty_outputs_keep_their_shapes():
    scalar = np.array(3.0, dtype=np.float32)
    assert _compare([scalar], [scalar.copy()]).ok
    assert not _compare([scalar], [scalar.reshape(1)]).ok
    empty = np.zeros((0, 4), dtype=np.float32)
    assert _compare([empty], [empty.copy()]).ok


def test_shape_only_ignores_values_but_not_shapes():
    want = np.random.default_rng(0).random((4,)).astype(np.float32)
    assert _compare([want], [want + 100], shape_only=True).ok
    assert not _compare([want], [want[:2]], shape_only=True).ok


def test_policy_has_every_case_dtype_and_exact_integers():
    policy = load_policy(OP_TOLERANCES_PATH)
    for dtype in ("f32", "f16", "bf16", "i64", "b8"):
        tolerance = policy.tolerance("abs", dtype)
        assert tolerance.rtol >= 0 and tolerance.atol >= 0
    # An int64 case judges its float outputs (atan of int64 is float32) like float32...
    int_case = policy.tolerance("atan", "i64")
    assert (int_case.rtol, int_case.atol) == (policy.tolerance("atan", "f32").rtol, 1e-5)
    # ...while its integer outputs compare exactly whatever the tolerance.
    ints = np.array([1, 2, 3], dtype=np.int64)
    assert not _compare([ints], [ints + 1], rtol=int_case.rtol, atol=int_case.atol).ok


def test_policy_overrides_and_shape_only_come_from_data(tmp_path):
    path = tmp_path / "tolerances.toml"
    path.write_text(
        "[dtype.f32]\nrtol = 1e-5\natol = 1e-5\n"
        '[[override]]\nop = "nn.functional.conv*"\ndtype = "f32"\nrtol = 1e-3\natol = 2e-3\n'
        'reason = "accumulation order"\n'
        '[shape_only]\nops = ["bernoulli*"]\n',
        encoding="utf-8",
    )
    policy = load_policy(path)
    conv = policy.tolerance("nn.functional.conv2d", "f32")
    assert (conv.rtol, conv.atol) == (1e-3, 2e-3) and "accumulation order" in conv.source
    assert policy.tolerance("abs", "f32").rtol == 1e-5
    assert policy.is_shape_only("bernoulli") and not policy.is_shape_only("abs")


def test_policy_judges_random_ops_by_distribution():
    policy = load_policy(OP_TOLERANCES_PATH)
    for op in ("bernoulli", "normal", "nn.functional.dropout", "rand_like", "multinomial"):
        assert policy.is_distribution(op) and not policy.is_shape_only(op), op
    assert policy.is_shape_only("empty") and not policy.is_distribution("empty")
    assert not policy.is_distribution("nn.functional.normalize")


# ----------------------------------------------------------------- the distribution rule
def _draws(sampler, draws=4, size=1000):
    return [[sampler(size)] for _ in range(draws)]


def test_distribution_rule_passes_draws_of_one_distribution():
    rng = np.random.default_rng(0)
    for sampler in (
        lambda n: rng.normal(size=n).astype(np.float32),
        lambda n: rng.standard_cauchy(size=n),
        lambda n: (rng.random(n) < 0.3).astype(np.float32),
        lambda n: rng.integers(2, 9, size=n),
    ):
        result = compare_distributions(_draws(sampler), _draws(sampler))
        assert result.ok, result.message
    # Two outputs, one draw each side: constant outputs must agree exactly.
    ones = [np.ones(50, np.float32), rng.random(4000)]
    assert compare_distributions([ones], [[np.ones(50, np.float32), rng.random(4000)]]).ok


@pytest.mark.parametrize(
    ("wrong", "statistic"),
    [
        (lambda rng, n: rng.random(n), "KS"),  # uniform [0, 1) for a standard normal
        (lambda rng, n: rng.normal(0.2, 1.0, size=n), "mean"),
        (lambda rng, n: rng.normal(0.0, 1.3, size=n), "variance"),
    ],
)
def test_distribution_rule_fails_a_wrong_distribution(wrong, statistic):
    rng = np.random.default_rng(1)
    expected = _draws(lambda n: rng.normal(size=n))
    result = compare_distributions(expected, _draws(lambda n: wrong(rng, n)))
    assert not result.ok and statistic in result.message, result.message


def test_distribution_rule_checks_shapes_dtypes_and_nans():
    a = np.zeros((2, 3), np.float32)
    assert "shape" in compare_distributions([[a]], [[np.zeros((3, 2), np.float32)]]).message
    assert "dtype" in compare_distributions([[a]], [[a.astype(np.float64)]]).message
    nan = a.copy()
    nan[0, 0] = np.nan
    assert "NaN" in compare_distributions([[a]], [[nan]]).message
    assert not compare_distributions([[a]], [[a, a]]).ok


def test_distribution_rule_false_failure_rate_is_small():
    """200 pairs of small samples of one distribution: at 1e-6 per statistic none fails."""
    rng = np.random.default_rng(2)
    passed = [
        compare_distributions([[rng.exponential(size=200)]], [[rng.exponential(size=200)]]).ok
        for _ in range(200)
    ]
    assert all(passed)


def test_ks_statistic():
    a = np.arange(10.0)
    assert ks_statistic(a, a) == 0.0
    assert ks_statistic(a, a + 100) == 1.0
    assert ks_statistic(np.array([0.0, 0.0, 1.0]), np.array([0.0, 1.0, 1.0])) == pytest.approx(
        1 / 3
    )


def test_vectors_are_compared_up_to_a_paired_sign():
    rng = np.random.default_rng(0)
    u, s, vh = np.linalg.svd(rng.standard_normal((4, 3)).astype(np.float32), full_matrices=False)
    flip = np.array([1.0, -1.0, -1.0], dtype=np.float32)
    spec = [[0, "columns"], [2, "rows"]]
    # Flipping u_i and v_i together is the same decomposition...
    same = [u * flip, s, vh * flip[:, None]]
    assert compare_outputs([u, s, vh], same, rtol=1e-6, atol=1e-6, sign_invariant=spec).ok
    # ...flipping one without its partner is not.
    mispaired = [u * flip, s, vh]
    assert not compare_outputs([u, s, vh], mispaired, rtol=1e-6, atol=1e-6, sign_invariant=spec).ok
    assert not compare_outputs([u, s, vh], same, rtol=1e-6, atol=1e-6).ok
    aligned = align_vector_signs([u, s, vh], same, spec)
    np.testing.assert_allclose(aligned[0], u, rtol=1e-6)


def test_sign_alignment_leaves_shape_mismatches_to_the_comparison():
    eigvecs = np.eye(3, dtype=np.float32)
    result = compare_outputs(
        [eigvecs], [np.eye(2, dtype=np.float32)], rtol=0, atol=0, sign_invariant=[[0, "columns"]]
    )
    assert not result.ok and "shape" in result.message


def test_sign_invariant_entries_are_validated(tmp_path):
    path = tmp_path / "tolerances.toml"
    path.write_text('[[sign_invariant]]\nop = "svd"\noutputs = [[0, "diagonal"]]\n')
    with pytest.raises(ValueError, match="sign_invariant"):
        load_policy(path)
    assert load_policy(OP_TOLERANCES_PATH).sign_invariant("linalg.eigh") == [[1, "columns"]]


def test_errors_are_judged_against_the_output_scale():
    expected = [np.array([1000.0, 0.001], dtype=np.float32)]
    # 0.05 off on an output of scale 1000: elementwise that is 5000% on the small element,
    # relative to the scale it is 5e-5, within rtol 1e-4.
    close = [np.array([1000.0, 0.051], dtype=np.float32)]
    result = compare_outputs(expected, close, rtol=1e-4, atol=1e-6, rule=SCALE)
    assert result.ok and result.max_rel_scale == pytest.approx(5e-5, rel=1e-3)
    assert not compare_outputs(expected, close, rtol=1e-4, atol=1e-6).ok  # elementwise
    far = [np.array([1000.5, 0.001], dtype=np.float32)]
    assert not compare_outputs(expected, far, rtol=1e-4, atol=1e-6, rule=SCALE).ok


def test_a_declared_fixed_dimension_that_comes_out_different_is_a_failure():
    out = [np.zeros((3, 9, 2), dtype=np.float32) + 1]
    result = compare_outputs(out, out, rtol=1e-4, atol=0, rule=SCALE, declared_shapes=[["b", 7, 2]])
    assert not result.ok and "declares [b, 7, 2]" in result.message


def test_compare_arrays_reports_shape_nan_and_tolerance_problems():
    zeros = np.zeros((2, 3), np.float32)
    found = compare_arrays(zeros, np.zeros((3, 2), np.float32), rtol=0, atol=0)
    assert not found.ok and "shape [3, 2] != expected [2, 3]" in found.message
    found = compare_arrays(np.array([1.0, np.nan]), np.array([1.0, 2.0]), rtol=0, atol=0)
    assert not found.ok and "NaN positions differ" in found.message and found.mismatched == 1
    found = compare_arrays(np.array([1.0, 2.0]), np.array([1.0, 2.5]), rtol=1e-3, atol=1e-3)
    assert not found.ok and found.max_abs == pytest.approx(0.5) and found.mismatched == 1
    assert compare_arrays(np.array([3, 4]), np.array([3, 4]), rtol=0, atol=0).ok


def test_histogram_counts_finite_errors_per_bin():
    want = np.array([1.0, 2.0, 3.0, np.inf], np.float32)
    got = np.array([1.0, 2.0 + 2e-6, 3.5, np.inf], np.float32)
    found = compare_arrays(want, got, rtol=0, atol=1e-3, histogram=True)
    from torch_onnx_conformance.exporter.diagnostics.compare import ERROR_BIN_LABELS

    counts = dict(zip(ERROR_BIN_LABELS, found.histogram))
    assert counts["<1e-7"] == 1 and counts["<1e-5"] == 1 and counts["<1"] == 1
    assert sum(found.histogram) == 3  # the matching infinities are not an error size


def test_an_unknown_rule_is_an_error():
    with pytest.raises(ValueError, match="unknown comparison rule"):
        compare_arrays(np.ones(2), np.ones(2), rtol=0, atol=0, rule="relative")


def test_distribution_rule_tolerates_rounding_in_deterministic_parts():
    """The same values on both sides, off by rounding: KS counts values within the tolerance as
    equal, so a repeated (non-random) output passes with a tolerance and fails without one."""
    values = np.array([0.5, 1.0, 2.0])
    expected = [[values] for _ in range(400)]
    actual = [[values * (1 + 1e-6)] for _ in range(400)]
    assert compare_distributions(expected, actual, rtol=1e-5, atol=1e-5).ok
    assert "KS" in compare_distributions(expected, actual).message
    assert ks_statistic(values, values + 1e-6, atol=1e-5) == 0.0


def test_distribution_rule_widens_for_values_that_move_together():
    """Feature dropout keeps or drops whole channels: 30 draws of 36 channels x 36 values are
    1080 coin flips, not 38880 values. Counted as independent values, the KS bound would be far
    too tight; the design effect the draws show widens it."""
    rng = np.random.default_rng(3)

    def draw(p=0.5):
        keep = rng.random((36, 1)) < p
        return [np.broadcast_to(keep, (36, 36)).astype(np.float32) * 2.0]

    passed = [
        compare_distributions([draw() for _ in range(30)], [draw() for _ in range(30)]).ok
        for _ in range(30)
    ]
    assert all(passed)
    wrong = [draw(0.8) for _ in range(30)]
    assert not compare_distributions([draw() for _ in range(30)], wrong).ok


def test_quantization_structure_compares_the_nodes_as_multisets():
    from torch_onnx_conformance.exporter.diagnostics.compare import (
        QuantizationNode,
        compare_quantization_structure,
    )

    activation = QuantizationNode("quantize", "uint8", (128,), "tensor", False)
    weight = QuantizationNode("dequantize", "int8", (0,), "axis 0", True)
    same = compare_quantization_structure(
        [activation, weight, weight], [weight, activation, weight]
    )
    assert same.ok and same.mismatched == 0 and same.total == 3
    assert same.message == "program 1 quantize / 2 dequantize, graph 1 / 2"
    # a weight left float-stored, and a zero point that moved: both sides named
    computed = QuantizationNode("dequantize", "int8", (0,), "axis 0", False)
    shifted = QuantizationNode("quantize", "uint8", (127,), "tensor", False)
    differ = compare_quantization_structure([activation, weight], [shifted, computed])
    assert not differ.ok and differ.mismatched == 4
    assert "in the program only: 1 x dequantize int8 zp=0 per axis 0 of a stored tensor; " in (
        differ.message
    )
    assert "in the graph only: 1 x dequantize int8 zp=0 per axis 0; " in differ.message
    assert "1 x quantize uint8 zp=127 per tensor" in differ.message
