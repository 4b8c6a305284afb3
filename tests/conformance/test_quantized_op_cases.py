"""The hand-written quantization op infos (``torch_onnx_conformance/conformance/quantized_ops.py``): found without
PyTorch's OpInfo database, all taken by a default run, built into modules that compute the op,
and judged by the ``[codes]`` rule of the policy file."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torch_onnx_conformance.conformance import op_cases, quantized_ops
from torch_onnx_conformance.conformance.families import op_family
from torch_onnx_conformance.conformance.op_cases import (
    OP_TOLERANCES_PATH,
    OpCase,
    build_op_call,
    opinfo_name,
)
from torch_onnx_conformance.conformance.runner import run_case
from torch_onnx_conformance.exporter.diagnostics.compare import compare_outputs, load_policy

NAMES = [opinfo_name(info) for info in quantized_ops.INFOS]


def test_names_are_unique_and_every_sample_fits_a_default_run():
    assert len(NAMES) == len(set(NAMES))
    for info, name in zip(quantized_ops.INFOS, NAMES, strict=True):
        assert name.startswith(("quantized_decomposed.", "fake_quantize", "_fake_quantize"))
        assert op_family(name) == "quantized"
        count = len(info.sample_inputs("cpu", torch.float32))
        assert 1 <= count <= op_cases.DEFAULT_SAMPLES, name


def test_resolved_without_importing_op_db():
    op_cases.op_db.cache_clear()
    info, inplace = op_cases.resolve_op("quantized_decomposed.quantize_per_channel.int4")
    assert info.name == "quantized_decomposed.quantize_per_channel" and not inplace
    assert op_cases.op_db.cache_info().currsize == 0


@pytest.mark.parametrize(
    "op",
    [
        "quantized_decomposed.quantize_per_channel.int4",
        "quantized_decomposed.quantize_per_tensor.ties",
    ],
)
def test_a_sample_builds_a_module_computing_the_op(op):
    call = build_op_call(op, 0, "f32")
    (codes,) = call.module(*call.inputs)
    assert codes.dtype == torch.int8 and codes.shape == call.inputs[0].shape
    if op.endswith("int4"):  # the int4 range in int8 storage, reached at both ends
        assert int(codes.min()) == -8 and int(codes.max()) == 7
    else:  # the ties landed on even codes (torch rounds half to even)
        x = call.inputs[0].reshape(-1)
        ties = (x / 0.5).frac().abs() == 0.5
        assert ties.any() and (codes.reshape(-1)[ties] % 2 == 0).all()


def test_the_policy_judges_quantize_outputs_as_codes_and_nothing_else():
    policy = load_policy(OP_TOLERANCES_PATH)
    fraction = policy.code_tie_fraction("quantized_decomposed.quantize_per_tensor.int8")
    assert fraction is not None and 0 < fraction < 0.01
    assert policy.code_tie_fraction("quantized_decomposed.dequantize_per_tensor.int8") is None
    assert policy.code_tie_fraction("add") is None

    want = np.arange(-100, 100, dtype=np.int8).repeat(10)  # 2000 codes
    one_tie = want.copy()
    one_tie[7] += 1
    two_codes = want.copy()
    two_codes[7] += 2
    many = want.copy()
    many[:50] += 1
    assert compare_outputs([want], [one_tie], rtol=0, atol=0, code_tie_fraction=fraction).ok
    assert not compare_outputs([want], [one_tie], rtol=0, atol=0).ok  # exact without the rule
    assert not compare_outputs([want], [two_codes], rtol=0, atol=0, code_tie_fraction=fraction).ok
    assert not compare_outputs([want], [many], rtol=0, atol=0, code_tie_fraction=fraction).ok


def test_a_case_runs_end_to_end_and_records_the_rule(tmp_path):
    case = OpCase(
        "quantized_decomposed.quantize_per_tensor.narrow", 0, "f32", "dynamic", 20, "cpu", "ours"
    )
    outcome = run_case(case, tmp_path)
    assert outcome.status == "pass", outcome.error
    assert outcome.extra["code_tie_fraction"] == load_policy(OP_TOLERANCES_PATH).code_tie_fraction(
        case.op
    )
