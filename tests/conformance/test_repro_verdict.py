"""``python -m torch_onnx_conformance repro`` judges the replayed outcome as a run would: an expected
failure says so (and the command exits 0), a pass an entry expects to fail is an xpass."""

from __future__ import annotations

from torch_onnx_conformance.conformance.op_cases import parse_case_id
from torch_onnx_conformance.conformance.repro import judge_replay

SPARSE = "op::to_sparse::s000::f32::static::opset20::cpu::ours"
ABS = "op::abs::s000::f32::static::opset20::cpu::ours"


def test_an_expected_failure_replays_as_xfail():
    outcome = {
        "status": "fail",
        "stage": "export",
        "error": "UnsupportedOpError: no translation for aten._to_sparse.default",
    }
    verdict = judge_replay(parse_case_id(SPARSE), outcome)
    assert (verdict.status, verdict.item) == ("xfail", "xfail")
    assert "aten._to_sparse has no ONNX translation" in verdict.entry.reason


def test_a_harness_error_replays_as_a_failure_whatever_the_entries_say():
    outcome = {
        "status": "fail",
        "stage": "export",
        "error": "conformance harness error: TypeError: no numpy",
        "error_signature": "HarnessError: TypeError: no numpy",
    }
    verdict = judge_replay(parse_case_id(SPARSE), outcome)
    assert (verdict.status, verdict.item, verdict.entry) == ("fail", "fail", None)


def test_unexpected_results_stay_failures():
    assert judge_replay(parse_case_id(ABS), {"status": "pass"}).item == "pass"
    failed = {"status": "fail", "stage": "compare", "error": "output 0: 1/4 elements exceed"}
    assert judge_replay(parse_case_id(ABS), failed).item == "fail"
    assert judge_replay(parse_case_id(SPARSE), {"status": "pass"}).status == "xpass"
