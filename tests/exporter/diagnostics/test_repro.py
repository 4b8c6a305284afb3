"""Repro directories: model, inputs, expected outputs and a numpy+onnxruntime-only repro.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import torch_onnx_conformance.exporter.diagnostics.compare  # noqa: F401
from tests.exporter.diagnostics.models import LinearSigmoid
from torch_onnx_conformance import exporter
from torch_onnx_conformance.exporter.diagnostics import repro

aten = torch.ops.aten


def planted_sigmoid(ctx, x):
    return ctx.op.Mul(ctx.op.Sigmoid(x), ctx.const(1.5, torch.float32))


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
            LinearSigmoid().eval(),
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
        "case.json",
        "repro.py",
        "compare.py",
    }
    script = (folder / "repro.py").read_text()
    assert "exporter" not in script and "torch" not in script
    # The rule the script applies is the project's own file, copied, not a second copy of it.
    rule = (folder / "compare.py").read_text()
    assert rule == Path(exporter.diagnostics.compare.__file__).read_text()
    done = run_clean(folder)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "--- example inputs: x[2, 4]" in done.stdout
    assert "--- second shape: x[3, 4]" in done.stdout
    assert "MISMATCH output 0: " in done.stdout and "max abs error" in done.stdout
    assert done.stdout.rstrip().endswith("result: MISMATCH")
    case = json.loads((folder / "case.json").read_text())
    assert case["stage"] == "compare" and "sigmoid" in case["note"]


def test_repro_of_a_matching_model_exits_zero(tmp_path):
    model = LinearSigmoid().eval()
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
    program = exporter.export(LinearSigmoid().eval(), (torch.randn(2, 4),))
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
    program = exporter.export(LinearSigmoid().eval(), (torch.randn(2, 4),))
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


class _Payload:
    """Unpickling this creates ``marker``: the proof that a pickle ran."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_repro_folder_runs_no_pickle_it_holds(tmp_path):
    import pickle

    program = exporter.export(LinearSigmoid().eval(), (torch.randn(2, 4),))
    folder = repro.write_repro(
        tmp_path / "planted",
        model_proto=program.model_proto,
        inputs=[np.zeros((2, 4), np.float32)],
        expected=[np.zeros((2, 3), np.float32)],
        rtol=0,
        atol=0,
    )
    assert not any(p.suffix in (".pt2", ".pt", ".pkl") for p in folder.iterdir())
    marker = tmp_path / "pickle-ran"
    # Someone swaps the arrays for object arrays (np.savez pickles those) and drops a pickled
    # program beside them.
    np.savez(folder / "inputs.npz", x=np.array([_Payload(marker)], dtype=object))
    np.savez(folder / "expected.npz", output_0=np.array([_Payload(marker)], dtype=object))
    (folder / "exported_program.pt2").write_bytes(pickle.dumps(_Payload(marker)))
    done = run_clean(folder)
    assert done.returncode != 0
    assert "allow_pickle" in done.stderr, done.stderr
    assert not marker.exists()


def test_a_failed_exports_rerun_script_loads_no_pickle(tmp_path):
    from torch_onnx_conformance.exporter._record import ExportRecord

    model = LinearSigmoid().eval()
    program = torch.export.export(model, (torch.randn(2, 4),))
    record = ExportRecord(model_class="LinearSigmoid", exported_program=program)
    folder = repro.write_failed_export_repro(
        tmp_path / "failed", record, RuntimeError("translation failed"), stage="translation"
    )
    script = (folder / "rerun_export.py").read_text()
    assert "aten.linear.default" in script  # the program, as source
    case = json.loads((folder / "case.json").read_text())
    assert case["input_order"] == ["x"] and case["placeholders"] == ["lin.weight", "lin.bias", None]
    with np.load(folder / "weights.npz", allow_pickle=False) as weights:
        assert np.array_equal(weights["lin.weight"], model.lin.weight.detach().numpy())
    # The script rebuilds the program, and the export of it succeeds here.
    env = {**os.environ, "PYTHONPATH": str(Path(exporter.__file__).parents[2])}
    rerun = [sys.executable, "rerun_export.py"]
    done = subprocess.run(rerun, cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "the export succeeds now" in done.stdout, done.stderr
    # With planted pickles for weights, nothing runs: the load refuses them.
    marker = tmp_path / "pickle-ran"
    np.savez(folder / "weights.npz", **{"lin.weight": np.array([_Payload(marker)], dtype=object)})
    done = subprocess.run(rerun, cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "allow_pickle" in done.stderr
    assert not marker.exists()
