"""The conformance harness itself, end to end: real pytest sessions over planted cases.

Planted cases (``--planted``) are ``abs`` modules exported by a fake exporter that plants one
fault each: a crash in the exporter, a crash while onnxruntime runs, a hang, a wrong result, a
shape-specialising export, a crash of the pytest worker. They do not depend on any real
exporter, so these tests stay fast and stable.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from torch_onnx_conformance.conformance.expectations import load_expectations, tomllib
from torch_onnx_conformance.reports.rows import read_rows

ROOT = Path(__file__).resolve().parents[2]


def _case(name: str, shapes: str = "static", exporter: str = "ours") -> str:
    return f"op::planted.{name}::s000::f32::{shapes}::opset20::cpu::{exporter}"


def _pytest(*args: str, cwd: Path = ROOT, timeout: float = 600) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-m",
        "pytest",
        str(ROOT / "torch_onnx_conformance" / "conformance" / "test_ops.py"),
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        "-q",
        *args,
    ]
    return subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )


def _rows(results: Path) -> dict:
    return {row.id: row for row in read_rows([results])}


@pytest.fixture(scope="module")
def faults_run(tmp_path_factory):
    """One session over crash, hang, wrong-result and passing cases, with an expectations file
    holding a stale entry (for the pass) and a correct one (for the runtime crash)."""
    base = tmp_path_factory.mktemp("faults")
    expectations = base / "expectations"
    expectations.mkdir()
    (expectations / "ours.toml").write_text(
        f'[[expectation]]\nid = "{_case("pass")}"\nstatus = "xfail"\nstage = "compare"\n'
        'reason = "was wrong once"\n'
        f'[[expectation]]\nid = "op::planted.crash_run::*"\nstatus = "xfail"\nstage = "run"\n'
        'reason = "onnxruntime aborts"\nlink = "https://example.org/ort/1"\n',
        encoding="utf-8",
    )
    results = base / "results"
    args = [
        *("--planted", "pass", "--planted", "wrong", "--planted", "crash_export"),
        *("--planted", "crash_run", "--planted", "hang", "--shapes", "static"),
        *("--case-timeout", "10", "--results", str(results)),
        *("--expectations-dir", str(expectations), "--update-expectations"),
        *(f"--junitxml={base / 'junit.xml'}", "-o", "junit_family=xunit1"),
    ]
    proc = _pytest(*args)
    return {
        "proc": proc,
        "results": results,
        "expectations": expectations,
        "args": args,
        "base": base,
    }


def test_every_fault_ends_as_its_own_row_and_the_run_completes(faults_run):
    proc = faults_run["proc"]
    rows = _rows(faults_run["results"])
    summary = proc.stdout.splitlines()[-1]
    assert "4 failed" in summary and "1 xfailed" in summary, proc.stdout[-3000:]
    outcome = {case_id: (row.status, row.stage) for case_id, row in rows.items()}
    assert outcome == {
        _case("pass"): ("xpass", None),
        _case("wrong"): ("fail", "compare"),
        _case("crash_export"): ("crash", "export"),
        _case("crash_run"): ("crash", "run"),
        _case("hang"): ("timeout", "export"),
    }
    wrong = rows[_case("wrong")]
    assert wrong.max_abs == pytest.approx(4.0) and wrong.rtol == 1e-5
    assert "SIGABRT" in rows[_case("crash_export")].error
    assert rows[_case("crash_run")].expectation == "onnxruntime aborts"
    assert "timed out after 10 s" in rows[_case("hang")].error
    for row in rows.values():
        assert row.versions["torch"] and row.versions["onnxruntime"]
        assert row.family == "planted" and row.error_signature or row.status == "xpass"


def test_an_unexpected_pass_fails_its_item(faults_run):
    out = faults_run["proc"].stdout
    assert f"FAILED torch_onnx_conformance/conformance/test_ops.py::test_op[{_case('pass')}]" in out
    assert "unexpected pass" in out


def test_junit_cases_carry_their_properties(faults_run):
    tree = ET.parse(faults_run["base"] / "junit.xml")
    props = {}
    for testcase in tree.iter("testcase"):
        props[testcase.get("name")] = {
            p.get("name"): p.get("value") for p in testcase.iter("property")
        }
    wrong = props[f"test_op[{_case('wrong')}]"]
    assert (wrong["status"], wrong["stage"]) == ("fail", "compare")
    assert float(wrong["max_abs"]) == pytest.approx(4.0)
    suite_props = {p.get("name") for p in tree.getroot().iter("property")}
    assert {"torch", "onnxruntime", "opsets"} <= suite_props


def test_junit_failure_messages_lead_with_the_error_itself(faults_run):
    # A JUnit viewer shows the message's first line: it must say what went wrong, with numbers.
    tree = ET.parse(faults_run["base"] / "junit.xml")
    first_lines = {
        testcase.get("name"): failure.get("message").splitlines()[0]
        for testcase in tree.iter("testcase")
        for failure in testcase.iter("failure")
    }
    wrong = first_lines[f"test_op[{_case('wrong')}]"]
    assert "fail at stage compare: output 0: " in wrong and "max abs error 4" in wrong, wrong
    assert "timed out after 10 s" in first_lines[f"test_op[{_case('hang')}]"]
    assert "unexpected pass" in first_lines[f"test_op[{_case('pass')}]"]


def test_failures_leave_repro_directories_that_reproduce_without_the_project(faults_run, tmp_path):
    results = faults_run["results"]
    wrong = _rows(results)[_case("wrong")]
    directory = results / wrong.repro_dir
    expected_files = {"model.onnx", "inputs.npz", "expected.npz", "case.json", "repro.py"}
    assert expected_files <= {p.name for p in directory.iterdir()}
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-I", str(directory / "repro.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "MISMATCH" in proc.stdout and "max abs error 4" in proc.stdout
    # The crash in the exporter still leaves the inputs and a script that says what to do.
    crash = _rows(results)[_case("crash_export")]
    crash_dir = results / crash.repro_dir
    assert (crash_dir / "inputs.npz").exists() and not (crash_dir / "model.onnx").exists()
    assert json.loads((crash_dir / "case.json").read_text())["status"] == "crash"


def test_update_expectations_proposes_the_right_diff(faults_run):
    proposed = faults_run["expectations"] / "ours.proposed.toml"
    assert "1 stale entries dropped, 3 new failures added" in faults_run["proc"].stdout
    # Kept entries by their id; new failures are proposed as conditions on the op.
    entries = {e.id or e.match["op"]: e for e in load_expectations(proposed)}
    assert _case("pass") not in entries  # stale: the case passes now
    assert entries["op::planted.crash_run::*"].link == "https://example.org/ort/1"  # confirmed
    wrong = entries["planted.wrong"]
    assert (wrong.status, wrong.stage) == ("xfail", "compare")
    assert wrong.signature and "elements exceed" in wrong.signature
    crash_export = entries["planted.crash_export"]
    assert (crash_export.status, crash_export.stage) == ("skip", "export")
    assert entries["planted.hang"].status == "skip"
    raw = tomllib.loads(proposed.read_text())
    assert all("reason" in entry for entry in raw["expectation"])


def test_resume_skips_finished_cases(faults_run):
    results = faults_run["results"]
    before = sum(1 for _ in results.glob("*.jsonl") for _ in open(_))
    args = [a for a in faults_run["args"] if a != "--update-expectations"]
    proc = _pytest(*args, "--resume")
    assert "5 deselected" in proc.stdout, proc.stdout[-2000:]
    after = sum(1 for _ in results.glob("*.jsonl") for _ in open(_))
    assert after == before


def test_dynamic_mode_runs_a_second_shape_and_catches_specialisation(tmp_path):
    results = tmp_path / "results"
    proc = _pytest(
        *("--planted", "specialise", "--planted", "pass", "--shapes", "dynamic"),
        *("--results", str(results)),
    )
    rows = _rows(results)
    special = rows[_case("specialise", "dynamic")]
    assert (special.status, special.stage) == ("fail", "second-shape"), proc.stdout[-2000:]
    assert "input_0 dim 0 fixed to 3" in special.error
    passing = rows[_case("pass", "dynamic")]
    assert passing.status == "pass"
    assert passing.extra["second_shape_delta"] == 1
    assert (results / special.repro_dir / "inputs2.npz").exists()


def test_a_dead_worker_becomes_a_crash_row_and_the_run_goes_on(tmp_path):
    results = tmp_path / "results"
    proc = _pytest(
        *("-n", "1", "--planted", "worker_crash", "--planted", "pass", "--shapes", "static"),
        *("--results", str(results)),
    )
    rows = _rows(results)
    crashed = rows[_case("worker_crash")]
    assert (crashed.status, crashed.stage) == ("crash", "export"), proc.stdout[-2000:]
    assert "crashed while running" in crashed.error
    assert rows[_case("pass")].status == "pass"


def test_a_timed_out_case_under_xdist_leaves_the_worker_running(tmp_path):
    results = tmp_path / "results"
    proc = _pytest(
        *("-n", "1", "--planted", "hang", "--planted", "pass", "--shapes", "static"),
        *("--case-timeout", "10", "--results", str(results)),
    )
    assert "no active workers" not in proc.stdout + proc.stderr, proc.stdout[-2000:]
    rows = _rows(results)
    hung = rows[_case("hang")]
    assert (hung.status, hung.stage) == ("timeout", "export"), proc.stdout[-2000:]
    assert type(hung.stage) is str
    assert rows[_case("pass")].status == "pass"


def test_cli_run_builds_reports_and_repro_rebuilds_a_case(tmp_path):
    results, reports = tmp_path / "results", tmp_path / "reports"
    # As if started from a test on the second worker of an enclosing pytest-xdist run: what
    # that run put in the environment says nothing about this run's own workers.
    enclosing = {"PYTEST_XDIST_WORKER": "gw1", "PYTEST_XDIST_WORKER_COUNT": "2"}
    run = subprocess.run(
        [
            *(
                sys.executable,
                "-m",
                "torch_onnx_conformance",
                "run",
                "-n",
                "0",
                "-p",
                "no:cacheprovider",
            ),
            *("--planted", "pass", "--shapes", "static", "--results", str(results)),
            *("--reports-out", str(reports)),
        ],
        cwd=ROOT,
        env={**os.environ, **enclosing},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert (reports / "summary.md").exists(), run.stdout[-2000:] + run.stderr[-2000:]
    assert [path.name for path in results.glob("*.jsonl")], sorted(results.iterdir())
    assert not list(results.glob("*gw1*")), "the rows were filed under the enclosing worker"
    assert (results / "junit.xml").exists() and not (results / ".staging").exists()

    case_id = _case("wrong")
    repro = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch_onnx_conformance",
            "repro",
            case_id,
            "--results",
            str(results),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert repro.returncode == 1, repro.stdout + repro.stderr
    assert "fail at stage compare" in repro.stdout
    assert (
        results / "repros" / "op__planted.wrong__s000__f32__static__opset20__cpu__ours" / "repro.py"
    ).exists()


@pytest.mark.slow
def test_a_real_opinfo_case_runs_through_a_real_exporter(tmp_path):
    results = tmp_path / "results"
    proc = _pytest(
        *("--ops", "abs", "--samples", "1", "--exporter", "torch-dynamo"),
        *("--results", str(results)),
    )
    rows = _rows(results)
    assert {row.status for row in rows.values()} == {"pass"}, proc.stdout[-3000:]
    assert {row.shapes for row in rows.values()} == {"static", "dynamic"}
    assert all(row.family == "elementwise" and row.export_s for row in rows.values())
    assert list((results / ".cache").glob("opinfo-manifest-*-f32.json"))
