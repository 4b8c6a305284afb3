"""``python -m torch_onnx_conformance.reports.diff OLD NEW``: status changes between two runs' rows."""

from __future__ import annotations

import json
import subprocess
import sys

from torch_onnx_conformance.reports.diff import main


def _row(case_id: str, status: str, stage=None, signature=None) -> dict:
    return {
        "id": case_id,
        "kind": "op",
        "subject": case_id.split("::")[1],
        "family": "elementwise",
        "dtype": "f32",
        "shapes": "static",
        "opset": 20,
        "provider": "cpu",
        "exporter": "ours",
        "status": status,
        "stage": stage,
        "error_signature": signature,
    }


def _write(path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


ABS = "op::abs::s000::f32::static::opset20::cpu::ours"
ADD = "op::add::s000::f32::static::opset20::cpu::ours"
SUB = "op::sub::s000::f32::static::opset20::cpu::ours"
MUL = "op::mul::s000::f32::static::opset20::cpu::ours"


def test_status_changes_and_cases_one_side_ran(tmp_path, capsys):
    old, new = tmp_path / "old.jsonl", tmp_path / "new.jsonl"
    _write(old, [_row(ABS, "pass"), _row(ADD, "pass"), _row(SUB, "xfail", "load", "Fail: x")])
    _write(
        new, [_row(ABS, "pass"), _row(ADD, "fail", "compare", "values differ"), _row(MUL, "pass")]
    )
    assert main([str(old), str(new)]) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"{ADD}: pass -> fail at compare: values differ",
        f"{SUB}: only in OLD",
        f"{MUL}: only in NEW",
        "1 same status, 1 changed, 1 only in OLD, 1 only in NEW",
    ]


def test_changed_only_leaves_out_the_cases_one_side_ran(tmp_path, capsys):
    old, new = tmp_path / "old.jsonl", tmp_path / "new.jsonl"
    _write(old, [_row(ABS, "pass"), _row(SUB, "pass")])
    _write(new, [_row(ABS, "skip")])
    assert main(["--changed-only", str(old), str(new)]) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"{ABS}: pass -> skip",
        "0 same status, 1 changed, 1 only in OLD, 0 only in NEW",
    ]


def test_same_statuses_exit_zero_whatever_the_details(tmp_path, capsys):
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir(), new.mkdir()
    _write(old / "main.jsonl", [_row(ABS, "xfail", "load", "Fail: one text")])
    _write(new / "main.jsonl", [_row(ABS, "xfail", "compare", "another text")])
    assert main([str(old), str(new)]) == 0
    assert (
        capsys.readouterr().out.strip() == "1 same status, 0 changed, 0 only in OLD, 0 only in NEW"
    )


def test_a_missing_folder_is_a_usage_error(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch_onnx_conformance.reports.diff",
            str(tmp_path / "nope"),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "nope: no such results folder or rows file" in result.stderr
