"""float16 cases carry a higher-precision reference: eager again on the same inputs' values
upcast (op cases: torch_onnx_conformance/conformance/op_cases.py; model cases: the float64 run of model_cases.py), and
the comparison judges ours against it ([float16] of torch_onnx_conformance/conformance/tolerances.toml)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from torch_onnx_conformance.conformance.model_cases import parse_model_id
from torch_onnx_conformance.conformance.modules import CallModule, split_call
from torch_onnx_conformance.conformance.op_cases import (
    OpCase,
    _low_precision_reference,
    _upcast_outputs,
)
from torch_onnx_conformance.exporter.diagnostics.compare import Tolerance, float16_unit


def _module(fn, *args):
    spec, leaves, tensors = split_call(args, {})
    return CallModule(fn, spec, leaves, False).eval(), tensors


def test_the_op_reference_is_eager_on_the_same_values_upcast():
    x = torch.randn(64, 300).to(torch.float16)
    module, inputs = _module(torch.sum, x, 1)
    (reference,) = _upcast_outputs(module, inputs, 0, "float64")
    assert reference.dtype == np.float64
    np.testing.assert_array_equal(reference, x.double().sum(1).numpy())
    module, inputs = _module(torch.argmax, x)
    assert _upcast_outputs(module, inputs, 0, "float64") == [None]  # no wider float to offer


def test_only_float16_cases_without_an_override_get_a_reference():
    x = torch.randn(8).to(torch.float16)
    module, inputs = _module(torch.exp, x)
    case = OpCase("exp", 0, "f16", "static", 20, "cpu", "ours")
    outcome = SimpleNamespace(extra={})
    rule, reference, second = _low_precision_reference(
        case, Tolerance(1e-3, 1e-3, "dtype f16"), False, module, (inputs, None), outcome
    )
    assert rule.multiple > 1 and second is None
    np.testing.assert_allclose(reference[0], np.exp(x.double().numpy()))
    assert "float64 reference" in outcome.extra["tolerance_source"]
    for changed, tolerance, skip in [
        ({"dtype": "f32"}, Tolerance(1e-5, 1e-5, "dtype f32"), False),
        ({}, Tolerance(1e-2, 1e-2, "override exp: a reason", overridden=True), False),
        ({}, Tolerance(1e-3, 1e-3, "dtype f16"), True),  # random or shape-only
    ]:
        found = _low_precision_reference(
            case.replace(**changed), tolerance, skip, module, (inputs, None), outcome
        )
        assert found == (None, None, None)


def test_a_float16_model_case_is_judged_against_its_float64_run():
    key = parse_model_id("model::synthetic/mlp::f16::static::opset20::cpu::ours::opt")
    outcome = SimpleNamespace(extra={}, rtol=None, atol=None)
    prepared = key.prepare(outcome)
    assert "float64 reference" in outcome.extra["tolerance_source"]
    session = SimpleNamespace(output_shapes=None)
    (expected,) = prepared.expected
    # Rounding elsewhere (two float16 steps at the output's scale) passes; 5% off fails.
    step = float(float16_unit(np.abs(expected.astype(np.float64)).max()))
    noisy = (expected.astype(np.float64) + 2 * step).astype(np.float16)
    assert prepared.compare(prepared.expected, [noisy], session).ok
    wrong = (expected.astype(np.float64) * 1.05).astype(np.float16)
    assert not prepared.compare(prepared.expected, [wrong], session).ok
