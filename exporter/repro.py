"""One-directory repros: a failing model, its inputs and expected outputs, and a script.

Layout (shared with the conformance harness's repro directories)::

    model.onnx            the ONNX model (plus model.onnx.data for models over 2 GiB)
    inputs.npz            graph inputs by name
    expected.npz          reference outputs as output_0, output_1, ...
    inputs2.npz           optional second input set (the second shape of a dynamic model)
    expected2.npz         its reference outputs
    exported_program.pt2  the torch.export program, when there is one (torch.export.load)
    case.json             id, provider, rtol/atol, notes; which arrays are bfloat16
    repro.py              numpy + onnxruntime only: runs the model, compares, exits 1 on mismatch

bfloat16 arrays are stored as uint16 (npz has no bfloat16) and listed in case.json.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

MODEL_FILE = "model.onnx"
CASE_FILE = "case.json"
SCRIPT_FILE = "repro.py"
PROGRAM_FILE = "exported_program.pt2"
#: Models whose serialised size passes this go to an external data file (protobuf's limit is 2 GiB).
EXTERNAL_DATA_BYTES = 1536 * 1024 * 1024

REPRO_SCRIPT = '''\
"""Re-run a failing ONNX model: python repro.py [--provider cpu|cuda|reference]

Needs numpy and onnxruntime (onnx for --provider reference, ml_dtypes for bfloat16 arrays).
Exits 0 when every output matches the expected outputs saved next to this script, else 1.
"""
import argparse
import json
import pathlib
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
CASE = json.loads((HERE / "case.json").read_text())


def load(name):
    with np.load(HERE / name, allow_pickle=False) as data:
        arrays = {key: data[key] for key in data.files}
    for key in CASE.get("bfloat16", {}).get(name, []):
        import ml_dtypes

        arrays[key] = arrays[key].view(ml_dtypes.bfloat16)
    return arrays


def run(provider, feeds):
    model = HERE / "model.onnx"
    if provider == "reference":
        from onnx.reference import ReferenceEvaluator

        return [np.asarray(o) for o in ReferenceEvaluator(str(model)).run(None, feeds)]
    import onnxruntime as ort

    options = ort.SessionOptions()
    if CASE.get("ort_optimization") == "disable_all":
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    wanted = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}[provider]
    providers = [wanted] + (["CPUExecutionProvider"] if provider != "cpu" else [])
    session = ort.InferenceSession(str(model), options, providers=providers)
    declared = [i.name for i in session.get_inputs()]
    return [np.asarray(o) for o in session.run(None, {k: feeds[k] for k in declared})]


def check(index, want, got, rtol, atol):
    """(ok, line) for one output: shape, dtype, NaN/inf positions, |got - want| <= atol + rtol|want|."""
    if want.shape != got.shape or want.dtype != got.dtype:
        return False, f"output {index}: got {got.dtype}{list(got.shape)}, expected {want.dtype}{list(want.shape)}"
    if want.size == 0 or CASE.get("shape_only"):
        return True, f"output {index}: {want.dtype}{list(want.shape)}, shape and dtype match"
    w, g = want.astype(np.float64), got.astype(np.float64)
    if want.dtype.kind in "biu":
        off = w != g
    else:
        agree = (np.isnan(w) & np.isnan(g)) | (np.isinf(w) & (w == g))
        finite = np.isfinite(w) & np.isfinite(g)
        off = ~finite & ~agree
        off[finite] = np.abs(g[finite] - w[finite]) > atol + rtol * np.abs(w[finite])
        w, g = np.where(finite, w, 0.0), np.where(finite, g, 0.0)
    diff = np.abs(g - w)
    rel = diff[w != 0] / np.abs(w[w != 0])
    line = (f"output {index}: max abs error {diff.max():.6g}, max rel error "
            f"{rel.max() if rel.size else 0.0:.6g}, {int(off.sum())}/{w.size} elements off "
            f"(rtol={rtol:g}, atol={atol:g})")
    return not off.any(), line


def main():
    parser = argparse.ArgumentParser(description=CASE.get("id", "repro"))
    parser.add_argument("--provider", default=CASE.get("provider", "cpu"),
                        choices=["cpu", "cuda", "reference"])
    provider = parser.parse_args().provider
    print(f"case: {CASE.get('id', '?')}")
    for key in ("status", "stage", "error", "note"):
        if CASE.get(key):
            print(f"{key}: {str(CASE[key])[:500]}")
    if not (HERE / "model.onnx").exists():
        print("no model.onnx here: the export itself failed, so there is nothing to run")
        return 1
    tolerances = CASE.get("tolerances")
    all_ok = True
    for suffix, label in (("", "example inputs"), ("2", "second shape")):
        if not (HERE / f"inputs{suffix}.npz").exists():
            continue
        feeds = load(f"inputs{suffix}.npz")
        expected = load(f"expected{suffix}.npz")
        shapes = ", ".join(f"{k}{list(v.shape)}" for k, v in feeds.items())
        print(f"--- {label}: {shapes}")
        try:
            actual = run(provider, feeds)
        except Exception as exc:
            print(f"MISMATCH: {provider} failed: {type(exc).__name__}: {exc}")
            all_ok = False
            continue
        if len(actual) != len(expected):
            print(f"MISMATCH: {len(actual)} outputs, expected {len(expected)}")
            all_ok = False
        for i, got in enumerate(actual[:len(expected)]):
            rtol, atol = tolerances[i] if tolerances and i < len(tolerances) else (
                CASE["rtol"], CASE["atol"])
            ok, line = check(i, expected[f"output_{i}"], got, rtol, atol)
            print(("ok       " if ok else "MISMATCH ") + line)
            all_ok = all_ok and ok
    print("result: " + ("all outputs match" if all_ok else "MISMATCH"))
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
'''


def _save_npz(path: Path, arrays: Mapping[str, np.ndarray], case: dict[str, Any]) -> None:
    stored = {}
    for name, array in arrays.items():
        array = np.asarray(array)
        if array.dtype.name == "bfloat16":
            case.setdefault("bfloat16", {}).setdefault(path.name, []).append(name)
            array = array.view(np.uint16)
        stored[name] = array
    np.savez(path, **stored)


def _named_inputs(
    inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray],
    input_names: Sequence[str] | None,
    model_inputs: list[str] | None,
) -> dict[str, np.ndarray]:
    if isinstance(inputs, Mapping):
        return dict(inputs)
    names = list(input_names or model_inputs or [])
    if len(names) != len(inputs):
        raise ValueError(
            f"write_repro got {len(inputs)} input arrays but {len(names)} input names "
            f"({names}); pass input_names or a dict {{name: array}}"
        )
    return dict(zip(names, inputs))


def _write_model(folder: Path, model: Any) -> list[str]:
    """Writes model.onnx; returns the graph input names."""
    import onnx
    import onnx_ir as ir

    path = folder / MODEL_FILE
    if isinstance(model, bytes):
        path.write_bytes(model)
        return [i.name for i in onnx.load_model_from_string(model).graph.input]
    if isinstance(model, ir.Model):
        from exporter._program import _initializer_bytes

        if _initializer_bytes(model) > EXTERNAL_DATA_BYTES:
            ir.save(model, path, external_data=MODEL_FILE + ".data")
        else:
            ir.save(model, path)
        return [v.name for v in model.graph.inputs]
    if model.ByteSize() > EXTERNAL_DATA_BYTES:
        onnx.save_model(model, path, save_as_external_data=True, location=MODEL_FILE + ".data")
    else:
        onnx.save_model(model, path)
    return [i.name for i in model.graph.input]


def write_repro(
    folder: str | Path,
    *,
    model_proto: Any,
    inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray],
    expected: Sequence[np.ndarray],
    exported_program: Any = None,
    rtol: float,
    atol: float,
    input_names: Sequence[str] | None = None,
    inputs2: Sequence[np.ndarray] | Mapping[str, np.ndarray] | None = None,
    expected2: Sequence[np.ndarray] | None = None,
    tolerances: Sequence[tuple[float, float]] | None = None,
    meta: Mapping[str, Any] | None = None,
) -> Path:
    """Write a repro directory (layout in the module docstring) and return its path.

    ``model_proto`` is an ``onnx.ModelProto``, an ``onnx_ir.Model``, serialised bytes, or None
    when the export itself failed. ``inputs`` are arrays in graph-input order (named by
    ``input_names``, else by the model's inputs) or a dict by name. ``tolerances`` optionally
    gives (rtol, atol) per output. ``meta`` goes into case.json: ``id``, ``provider``
    (cpu|cuda|reference), ``ort_optimization`` ("disable_all" to turn onnxruntime's graph
    optimisations off), ``status``, ``stage``, ``error``, ``note`` and anything else useful.
    An existing repro directory at ``folder`` is replaced; any other non-empty folder is an error.
    """
    folder = Path(folder)
    if folder.exists():
        if not folder.is_dir():
            raise FileExistsError(f"cannot write a repro to {folder}: it is a file")
        if any(folder.iterdir()) and not (folder / CASE_FILE).exists():
            raise FileExistsError(
                f"cannot write a repro to {folder}: it holds files that are not a repro; "
                f"choose an empty or new folder"
            )
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    case: dict[str, Any] = {
        "id": "export",
        "provider": "cpu",
        "rtol": float(rtol),
        "atol": float(atol),
        "shape_only": False,
    }
    case.update(meta or {})
    if tolerances is not None:
        case["tolerances"] = [[float(r), float(a)] for r, a in tolerances]
    model_inputs = _write_model(folder, model_proto) if model_proto is not None else None
    _save_npz(folder / "inputs.npz", _named_inputs(inputs, input_names, model_inputs), case)
    _save_npz(folder / "expected.npz", {f"output_{i}": o for i, o in enumerate(expected)}, case)
    if inputs2 is not None and expected2 is not None:
        _save_npz(folder / "inputs2.npz", _named_inputs(inputs2, input_names, model_inputs), case)
        _save_npz(
            folder / "expected2.npz", {f"output_{i}": o for i, o in enumerate(expected2)}, case
        )
    if exported_program is not None:
        try:
            import torch

            torch.export.save(exported_program, folder / PROGRAM_FILE)
        except Exception as exc:  # noqa: BLE001 - the repro works without it
            case["exported_program_error"] = f"{type(exc).__name__}: {exc}"
            (folder / PROGRAM_FILE).unlink(missing_ok=True)
    (folder / CASE_FILE).write_text(json.dumps(case, indent=1, default=str), encoding="utf-8")
    (folder / SCRIPT_FILE).write_text(REPRO_SCRIPT, encoding="utf-8")
    return folder


def write_verification_repro(folder: str | Path, program: Any, verification: Any) -> Path:
    """The repro of a failed ``verify``: the exported model with the runs' inputs and the
    reference outputs (second-shape inputs too when there were any)."""
    case = verification.case
    rtol, atol = verification.rtol, verification.atol
    runs = verification.runs
    per_output = None
    if runs and runs[0].outputs:
        per_output = [(o.rtol, o.atol) for o in runs[0].outputs]
    if rtol is None or atol is None:
        from exporter.verify import FALLBACK_TOLERANCE

        rtol = FALLBACK_TOLERANCE[0] if rtol is None else rtol
        atol = FALLBACK_TOLERANCE[1] if atol is None else atol
    problems = verification.problems()
    meta = {
        "id": f"export of {getattr(getattr(program, 'record', None), 'model_class', 'model')}",
        "status": "fail",
        "stage": _failed_stage(verification),
        "error": "\n".join(problems),
        "reference": verification.reference,
    }
    if verification.bisection is not None and verification.bisection.first is not None:
        meta["note"] = verification.bisection.first.describe()
    return write_repro(
        folder,
        model_proto=program.model,
        inputs=case.feeds,
        expected=case.expected,
        exported_program=program.exported_program,
        rtol=rtol,
        atol=atol,
        inputs2=case.feeds2,
        expected2=case.expected2,
        tolerances=per_output,
        meta=meta,
    )


def _failed_stage(verification: Any) -> str:
    if verification.ort_load_error:
        return "ort_load"
    for run in verification.runs:
        if not run.ok:
            if run.error and run.error.startswith("onnxruntime failed"):
                return "ort_run" if run.label == "example inputs" else "second_shape_accuracy"
            return "accuracy" if run.label == "example inputs" else "second_shape_accuracy"
    return "second_shape_accuracy" if verification.specialised else "checker"


def write_failed_export_repro(
    folder: str | Path, record: Any, error: BaseException, *, stage: str
) -> Path:
    """The repro of an export that failed before an ONNX model existed: the program it was
    translating (``exported_program.pt2``) and that program's example inputs."""
    import torch
    from torch.export import graph_signature as gs

    from exporter._program import _to_numpy, flatten_inputs

    program = record.exported_program or record.captured_program
    feeds: dict[str, np.ndarray] = {}
    if program.example_inputs is not None:
        args, kwargs = program.example_inputs
        names = [
            s.arg.name
            for s in program.graph_signature.input_specs
            if s.kind == gs.InputKind.USER_INPUT and isinstance(s.arg, gs.TensorArgument)
        ]
        tensors = [t for t in flatten_inputs(args, kwargs) if isinstance(t, torch.Tensor)]
        feeds = {
            names[i] if i < len(names) else f"input_{i}": _to_numpy(t)
            for i, t in enumerate(tensors)
        }
    meta = {
        "id": f"export of {record.model_class or 'model'}",
        "status": "fail",
        "stage": stage,
        "error": f"{type(error).__name__}: {error}"[:4000],
        "note": (
            "the export failed before an ONNX model existed; re-run it from the saved "
            'program with: python -c "import torch, exporter; exporter.export('
            "torch.export.load('exported_program.pt2'), report=True)\""
        ),
    }
    return write_repro(
        folder,
        model_proto=None,
        inputs=feeds,
        expected=[],
        exported_program=program,
        rtol=0.0,
        atol=0.0,
        meta=meta,
    )
