"""The per-model conformance harness, end to end, on tiny synthetic model cases.

The cases are defined here (``model_cases()``) and handed to real pytest sessions over
``torch_onnx_conformance/conformance/test_models.py`` with the hidden ``--model-cases`` option, which replaces the zoo:
a zero-output model (must be ``vacuous``), a model that computes something else while it is being
exported (must fail at compare and leave a repro directory), a small MLP (must pass and carry its
timings), and a hand-sized bidirectional LSTM with a dynamic time axis, which torch.onnx exports
"successfully" with the example length baked in (research/torch_onnx.md §5.6): the second
inputs must turn that into a failure.
"""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch

from torch_onnx_conformance.conformance.model_cases import ModelCaseId, parse_model_id
from torch_onnx_conformance.reports.rows import read_rows

ROOT = Path(__file__).resolve().parents[2]
THIS_FILE = Path(__file__).resolve()


# --------------------------------------------------------------------------- the tiny cases


class _ZeroOutput(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) * 0.0


class _WrongUnderExport(torch.nn.Module):
    """Computes ``2 x`` while an exporter captures it and ``x + 1`` eagerly: a planted wrong
    result that no real exporter can fix."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch_onnx_conformance import exporter

        if exporter.is_in_onnx_export() or torch.onnx.is_in_onnx_export():
            return x * 2.0
        return x + 1.0


class _DiesUnderExport(torch.nn.Module):
    """Aborts the process (like a segfault in a kernel) or hangs while being exported."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import os
        import time

        from torch_onnx_conformance import exporter

        if exporter.is_in_onnx_export():
            if self.how == "crash":
                os.abort()
            time.sleep(3600)
        return x + 1.0


class _SmallMLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


class _TimeFirstBiLSTM(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = torch.nn.LSTM(16, 8, bidirectional=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rnn(x)[0]


def _seeded(module_class):
    def make() -> torch.nn.Module:
        torch.manual_seed(0)
        return module_class()

    return make


def _batch_inputs(features: int):
    def make(sizes):
        generator = torch.Generator().manual_seed(sizes["batch"])
        return (torch.randn(sizes["batch"], features, generator=generator),), {}

    return make


def _time_inputs(sizes):
    generator = torch.Generator().manual_seed(sizes["time"])
    return (torch.randn(sizes["time"], 6, 16, generator=generator),), {}


def model_cases():
    """Read by the harness through ``--model-cases`` (in the pytest process and its child)."""
    from torch_onnx_conformance.model_zoo import ModelCase

    batch = {"sizes": {"batch": 3}, "second_sizes": {"batch": 5}, "dynamic_shapes": ({0: "batch"},)}
    return [
        ModelCase("tiny/mlp", "synthetic", "smoke", _seeded(_SmallMLP), _batch_inputs(4), **batch),
        ModelCase(
            "tiny/zeros", "synthetic", "smoke", _seeded(_ZeroOutput), _batch_inputs(4), **batch
        ),
        ModelCase(
            "tiny/wrong",
            "synthetic",
            "default",
            _seeded(_WrongUnderExport),
            _batch_inputs(4),
            **batch,
        ),
        ModelCase(
            "tiny/crash",
            "synthetic",
            "full",
            lambda: _DiesUnderExport("crash"),
            _batch_inputs(4),
            **batch,
        ),
        ModelCase(
            "tiny/hang",
            "synthetic",
            "full",
            lambda: _DiesUnderExport("hang"),
            _batch_inputs(4),
            **batch,
        ),
        ModelCase(
            "tiny/bilstm",
            "synthetic",
            "full",
            _seeded(_TimeFirstBiLSTM),
            _time_inputs,
            sizes={"time": 5},
            second_sizes={"time": 9},
            dynamic_shapes=({0: "time"},),
        ),
    ]


# --------------------------------------------------------------------------- helpers


def _pytest(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-m",
        "pytest",
        str(ROOT / "torch_onnx_conformance" / "conformance" / "test_models.py"),
        "-p",
        "no:cacheprovider",
        "-q",
        "--model-cases",
        str(THIS_FILE),
        *args,
    ]
    return subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
    )


def _collected(*args: str) -> list[str]:
    proc = _pytest("--collect-only", *args)
    assert proc.returncode in (0, 5), proc.stdout[-3000:] + proc.stderr[-3000:]  # 5: none
    prefix = "torch_onnx_conformance/conformance/test_models.py::test_model["
    return [line[len(prefix) : -1] for line in proc.stdout.splitlines() if line.startswith(prefix)]


def _id(model: str, shapes: str = "static", exporter: str = "ours", optimize: str = "opt") -> str:
    return f"model::{model}::f32::{shapes}::opset20::cpu::{exporter}::{optimize}"


# --------------------------------------------------------------------------- ids and axes


def test_ids_round_trip_and_say_every_axis():
    key = ModelCaseId("torchvision/resnet18", "f32", "dynamic", 18, "cpu", "torch-script", False)
    assert key.id == "model::torchvision/resnet18::f32::dynamic::opset18::cpu::torch-script::noopt"
    assert parse_model_id(key.id) == key
    with pytest.raises(ValueError, match="expected|Expected"):
        parse_model_id("model::torchvision/resnet18::f32::static::opset20::cpu::ours")
    with pytest.raises(ValueError, match="unknown exporter"):
        parse_model_id("model::x/y::f32::static::opset20::cpu::onnxmltools::opt")


def test_default_axes_are_ours_opset20_cpu_optimised_static_and_dynamic_of_the_tier():
    assert _collected() == [
        _id(model, shapes)
        for model in ("tiny/mlp", "tiny/zeros", "tiny/wrong")
        for shapes in ("static", "dynamic")
    ]
    assert _collected("--tier", "smoke") == [
        _id(model, shapes)
        for model in ("tiny/mlp", "tiny/zeros")
        for shapes in ("static", "dynamic")
    ]


def test_every_axis_multiplies_the_cases():
    ids = _collected(
        *("--tier", "full", "--models", "tiny/bilstm", "--shapes", "dynamic"),
        *("--exporter", "ours", "--exporter", "torch-dynamo", "--exporter", "torch-script"),
        *("--opset", "18", "--opset", "20", "--optimize", "both", "--dtype", "f16"),
    )
    expected = [
        f"model::tiny/bilstm::f16::dynamic::opset{opset}::cpu::{exporter}::{flag}"
        for opset in (18, 20)
        for exporter in ("ours", "torch-dynamo", "torch-script")
        for flag in ("opt", "noopt")
    ]
    assert ids == expected
    # --ops narrows a run to op cases unless --models asks for models too.
    assert _collected("--ops", "abs") == []


# --------------------------------------------------------------------------- comparison rule


# --------------------------------------------------------------------------- real sessions


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("models")
    expectations = base / "expectations"
    expectations.mkdir()
    results = base / "results"
    proc = _pytest(
        *("--results", str(results), "--expectations-dir", str(expectations)),
        *(f"--junitxml={base / 'junit.xml'}", "-o", "junit_family=xunit1"),
    )
    return {
        "proc": proc,
        "rows": {r.id: r for r in read_rows([results])},
        "results": results,
        "base": base,
    }


def test_a_zero_output_model_is_vacuous_never_a_pass(tiny_run):
    rows = tiny_run["rows"]
    for shapes in ("static", "dynamic"):
        row = rows[_id("tiny/zeros", shapes)]
        assert row.status == "vacuous", (row.status, row.error)
        assert "near-constant" in row.error
    assert (
        f"FAILED torch_onnx_conformance/conformance/test_models.py::test_model[{_id('tiny/zeros')}]"
        in (tiny_run["proc"].stdout)
    )


def test_a_planted_failing_model_leaves_a_row_and_a_repro_directory(tiny_run, tmp_path):
    row = tiny_run["rows"][_id("tiny/wrong")]
    assert (row.status, row.stage) == ("fail", "compare"), row.error
    assert row.kind == "model" and row.subject == "tiny/wrong" and row.family == "synthetic"
    assert row.repro_dir and row.extra["max_rel_scale"] > 0.1
    repro = tiny_run["results"] / row.repro_dir
    assert {"model.onnx", "inputs.npz", "expected.npz", "case.json", "repro.py"} <= {
        p.name for p in repro.iterdir()
    }
    assert json.loads((repro / "case.json").read_text())["status"] == "fail"
    proc = subprocess.run(
        [sys.executable, str(repro / "repro.py")],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert proc.returncode == 1 and "MISMATCH" in proc.stdout, proc.stdout + proc.stderr


def test_a_passing_model_records_its_measurements(tiny_run):
    rows = tiny_run["rows"]
    for shapes in ("static", "dynamic"):
        row = rows[_id("tiny/mlp", shapes)]
        assert row.status == "pass", row.error
        assert row.optimize is True and row.exporter == "ours" and row.opset == 20
        assert row.node_count >= 3 and row.latency_ms > 0 and row.session_create_s > 0
        assert row.export_s > 0 and row.run_s > 0
        assert 0 <= row.extra["max_rel_scale"] < 1e-4
        assert row.repro_dir is None
    assert rows[_id("tiny/mlp", "dynamic")].extra["second_inputs"] == "x[5, 4]"
    junit = ET.parse(tiny_run["base"] / "junit.xml")
    props = {
        case.get("name"): {p.get("name"): p.get("value") for p in case.iter("property")}
        for case in junit.iter("testcase")
    }
    assert float(props[f"test_model[{_id('tiny/mlp')}]"]["latency_ms"]) > 0


@pytest.mark.slow
def test_second_inputs_catch_the_bidirectional_lstm_specialised_by_torch_onnx(tmp_path):
    results = tmp_path / "results"
    proc = _pytest(
        *("--tier", "full", "--models", "tiny/bilstm", "--shapes", "dynamic"),
        *("--exporter", "torch-dynamo", "--results", str(results)),
        *("--expectations-dir", str(tmp_path)),
    )
    rows = {r.id: r for r in read_rows([results])}
    row = rows[_id("tiny/bilstm", "dynamic", "torch-dynamo")]
    assert row.status == "fail" and row.stage in ("second-shape", "run"), (
        row.status,
        row.stage,
        row.error,
        proc.stdout[-2000:],
    )
    assert row.repro_dir and (results / row.repro_dir / "inputs2.npz").exists()
    assert "1 failed" in proc.stdout.splitlines()[-1]


@pytest.mark.slow
def test_a_crash_or_a_hang_costs_one_case_and_the_run_goes_on(tmp_path):
    results = tmp_path / "results"
    proc = _pytest(
        *("--tier", "full", "--shapes", "static", "--model-case-timeout", "15"),
        *("--models", "tiny/crash", "--models", "tiny/hang", "--models", "tiny/mlp"),
        *("--results", str(results), "--expectations-dir", str(tmp_path)),
    )
    rows = {r.id: r for r in read_rows([results])}
    assert (rows[_id("tiny/crash")].status, rows[_id("tiny/crash")].stage) == ("crash", "export")
    assert "SIGABRT" in rows[_id("tiny/crash")].error
    assert (rows[_id("tiny/hang")].status, rows[_id("tiny/hang")].stage) == ("timeout", "export")
    assert rows[_id("tiny/mlp")].status == "pass", proc.stdout[-2000:]
    assert rows[_id("tiny/crash")].repro_dir and rows[_id("tiny/hang")].repro_dir


def test_repro_command_rebuilds_a_model_case(tmp_path):
    case_id = "model::synthetic/mlp::f32::static::opset20::cpu::ours::opt"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch_onnx_conformance",
            "repro",
            case_id,
            "--results",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{case_id}: pass" in proc.stdout
    (directory,) = (tmp_path / "repros").iterdir()
    assert json.loads((directory / "case.json").read_text())["status"] == "pass"
    rerun = subprocess.run(
        [sys.executable, str(directory / "repro.py")], capture_output=True, text=True, timeout=300
    )
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
