"""Repro directories: model, inputs, expected outputs and a numpy+onnxruntime-only repro.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

import exporter
from exporter import repro

aten = torch.ops.aten


def planted_sigmoid(ctx, x):
    return ctx.op.Mul(ctx.op.Sigmoid(x), ctx.const(1.5, torch.float32))


class Small(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        return torch.sigmoid(self.lin(x))


def run_clean(folder):
    """Run repro.py the way a user would, with nothing of this project importable."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "repro.py"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_repro_of_a_failed_verification_reproduces_it_in_a_clean_subprocess(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = exporter.export(
            Small().eval(),
            (torch.randn(2, 4),),
            report=True,
            verify=True,
            artifacts_dir=tmp_path,
            dynamic_shapes=({0: "batch"},),
            custom_translation_table={aten.sigmoid.default: planted_sigmoid},
        )
    folder = program.verification.repro_dir
    assert folder is not None and folder.parent == tmp_path
    assert {p.name for p in folder.iterdir()} == {
        "model.onnx",
        "inputs.npz",
        "expected.npz",
        "inputs2.npz",
        "expected2.npz",
        "exported_program.pt2",
        "case.json",
        "repro.py",
    }
    script = (folder / "repro.py").read_text()
    assert "exporter" not in script and "torch" not in script
    done = run_clean(folder)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "--- example inputs: x[2, 4]" in done.stdout
    assert "--- second shape: x[3, 4]" in done.stdout
    assert "MISMATCH output 0: max abs error" in done.stdout
    assert done.stdout.rstrip().endswith("result: MISMATCH")
    case = json.loads((folder / "case.json").read_text())
    assert case["stage"] == "accuracy" and "sigmoid" in case["note"]
    loaded = torch.export.load(folder / "exported_program.pt2")
    assert any(n.target == aten.sigmoid.default for n in loaded.graph.nodes)


def test_repro_of_a_matching_model_exits_zero(tmp_path):
    model = Small().eval()
    x = torch.randn(2, 4)
    program = exporter.export(model, (x,))
    with torch.no_grad():
        expected = model(x).numpy()
    folder = repro.write_repro(
        tmp_path / "ok",
        model_proto=program.model_proto,
        inputs=[x.numpy()],
        expected=[expected],
        rtol=1e-4,
        atol=1e-5,
    )
    done = run_clean(folder)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok       output 0: max abs error" in done.stdout
    with np.load(folder / "inputs.npz") as feeds, np.load(folder / "expected.npz") as outs:
        assert feeds.files == ["x"] and outs.files == ["output_0"]


def test_repro_reports_an_onnxruntime_failure_as_a_mismatch(tmp_path):
    program = exporter.export(Small().eval(), (torch.randn(2, 4),))
    folder = repro.write_repro(
        tmp_path / "bad",
        model_proto=program.model,
        inputs={"x": np.zeros((5, 7), np.float32)},
        expected=[np.zeros((5, 3), np.float32)],
        rtol=0,
        atol=0,
    )
    done = run_clean(folder)
    assert done.returncode == 1
    assert "MISMATCH: cpu failed:" in done.stdout


def test_write_repro_replaces_a_repro_but_never_a_foreign_folder(tmp_path):
    program = exporter.export(Small().eval(), (torch.randn(2, 4),))
    args = dict(
        model_proto=program.model_proto,
        inputs=[np.zeros((2, 4), np.float32)],
        expected=[np.zeros((2, 3), np.float32)],
        rtol=0,
        atol=0,
    )
    folder = repro.write_repro(tmp_path / "r", **args)
    (folder / "stale.txt").write_text("old")
    repro.write_repro(folder, **args)
    assert not (folder / "stale.txt").exists()
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not a repro"):
        repro.write_repro(foreign, **args)
    assert (foreign / "notes.txt").read_text() == "keep me"


def test_bfloat16_arrays_are_stored_as_uint16_and_listed(tmp_path):
    import ml_dtypes

    values = np.array([1.5, -2.0], dtype=ml_dtypes.bfloat16)
    folder = repro.write_repro(
        tmp_path / "bf16",
        model_proto=None,
        inputs={"x": values},
        expected=[values],
        rtol=0,
        atol=0,
        meta={"id": "bf16 case"},
    )
    case = json.loads((folder / "case.json").read_text())
    assert case["bfloat16"] == {"inputs.npz": ["x"], "expected.npz": ["output_0"]}
    with np.load(folder / "inputs.npz") as data:
        assert data["x"].dtype == np.uint16
        assert np.array_equal(data["x"].view(ml_dtypes.bfloat16), values)
    done = run_clean(folder)  # no model.onnx: the export failed, and the script says so
    assert done.returncode == 1 and "no model.onnx" in done.stdout
