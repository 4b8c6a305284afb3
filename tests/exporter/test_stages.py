"""One stage vocabulary: the exporter's records, result rows and expectations share it."""

import json
import subprocess
import sys

import pytest

from torch_onnx_conformance.exporter._record import STAGES as RECORD_STAGES
from torch_onnx_conformance.exporter.stages import CASE_STAGES, Stage, stage_named
from torch_onnx_conformance.reports.rows import STAGES as ROW_STAGES
from torch_onnx_conformance.reports.rows import CaseResult


def test_rows_and_records_speak_the_same_names():
    assert ROW_STAGES == ("export", "checker", "load", "run", "compare", "second-shape")
    assert ROW_STAGES == tuple(CASE_STAGES)
    # The exporter's verify stages are the case stages after the export.
    assert tuple(RECORD_STAGES[-5:]) == ROW_STAGES[1:]


def test_a_stage_reads_as_its_plain_name():
    assert f"{Stage.SECOND_SHAPE}" == str(Stage.SECOND_SHAPE) == "second-shape"
    assert json.dumps({"stage": Stage.LOAD}) == '{"stage": "load"}'


@pytest.mark.parametrize(
    ("name", "stage"),
    [
        ("ort_load", Stage.LOAD),
        ("ort_run", Stage.RUN),
        ("accuracy", Stage.COMPARE),
        ("second_shape_accuracy", Stage.SECOND_SHAPE),
        ("second-shape", Stage.SECOND_SHAPE),
        ("export", Stage.EXPORT),
    ],
)
def test_former_and_current_names_are_read(name, stage):
    assert stage_named(name) is stage


def test_an_unknown_stage_names_the_choices():
    with pytest.raises(ValueError, match="unknown stage 'acuracy'; choose one of capture"):
        stage_named("acuracy")


def test_a_row_written_with_a_former_name_reads_as_the_current_one():
    row = CaseResult.from_dict(
        {
            "id": "op::abs::s000::f32::static::opset20::cpu::ours",
            "kind": "op",
            "subject": "abs",
            "family": "elementwise",
            "dtype": "f32",
            "shapes": "static",
            "opset": 20,
            "provider": "cpu",
            "exporter": "ours",
            "status": "fail",
            "stage": "accuracy",
        }
    )
    assert row.stage == "compare"


def test_the_vocabulary_loads_without_torch():
    """The report builder and the conformance controller read stage names; neither may pay
    for torch and the op library to do it."""
    code = (
        "import sys, torch_onnx_conformance.reports.rows, "
        "torch_onnx_conformance.conformance.plugin, torch_onnx_conformance.exporter.stages; "
        "print(sorted(m for m in ('torch', 'torch_onnx_conformance.exporter.ops') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
