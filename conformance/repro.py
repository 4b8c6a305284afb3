"""Repro directories: everything needed to re-run a failing case without the project.

A case's artifacts (``model.onnx``, ``inputs.npz``, ``expected.npz``, for dynamic cases
``inputs2.npz`` and ``expected2.npz``, ``case.json`` and ``repro.py``) are written to a scratch
directory before onnxruntime runs, so that even a crash leaves them. A case that does not pass
gets its scratch directory moved to ``RESULTS/repros/<sanitised id>/``. ``repro.py`` needs only
numpy and onnxruntime (or onnx for the reference provider).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from conformance.cases import sanitise_id

REPROS_DIR = "repros"

REPRO_SCRIPT = '''\
"""Re-run one conformance case with onnxruntime only: python repro.py [--provider cpu|cuda|reference]

Exit status 0 when every output matches the eager outputs saved next to this script, else 1.
"""
import argparse
import json
import pathlib
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent


def load(name):
    with np.load(HERE / name, allow_pickle=False) as data:
        arrays = {key: data[key] for key in data.files}
    for key in CASE.get("bfloat16", {}).get(name, []):
        import ml_dtypes

        arrays[key] = arrays[key].view(ml_dtypes.bfloat16)
    return arrays


def run(path, feeds, provider):
    if provider == "reference":
        from onnx.reference import ReferenceEvaluator

        return [np.asarray(o) for o in ReferenceEvaluator(str(path)).run(None, feeds)]
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    wanted = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}[provider]
    providers = [wanted] if wanted == "CPUExecutionProvider" else [wanted, "CPUExecutionProvider"]
    session = ort.InferenceSession(str(path), options, providers=providers)
    declared = {i.name for i in session.get_inputs()}
    return session.run(None, {k: v for k, v in feeds.items() if k in declared})


def align_signs(expected, actual, spec):
    """Eigen/singular vectors are defined up to sign: take eager's signs (see case.json)."""
    actual, signs = [np.asarray(a) for a in actual], None
    for index, layout in spec:
        want, got = np.asarray(expected[index]), actual[index]
        if want.shape != got.shape or want.ndim < 2:
            return actual
        w = want if layout == "rows" else np.swapaxes(want, -1, -2)
        g = got if layout == "rows" else np.swapaxes(got, -1, -2)
        own = np.where(np.nansum(w * g, axis=-1) < 0, -1.0, 1.0)
        signs = own if signs is None else signs
        k = min(signs.shape[-1], own.shape[-1])
        g = g * np.concatenate([signs[..., :k], own[..., k:]], axis=-1)[..., None].astype(g.dtype)
        actual[index] = g if layout == "rows" else np.swapaxes(g, -1, -2)
    return actual


def compare(expected, actual, rtol, atol, shape_only):
    if len(expected) != len(actual):
        return False, f"output count: eager {len(expected)}, onnx {len(actual)}"
    ok, lines = True, []
    for i, (want, got) in enumerate(zip(expected, actual)):
        got = np.asarray(got)
        if want.shape != got.shape or want.dtype != got.dtype:
            ok = False
            lines.append(f"output {i}: {got.dtype}{list(got.shape)} != {want.dtype}{list(want.shape)}")
            continue
        if shape_only or want.size == 0:
            lines.append(f"output {i}: shape and dtype match")
            continue
        w, g = want.astype(np.float64), got.astype(np.float64)
        if want.dtype.kind in "biu":
            bad = w != g
        else:
            if not np.array_equal(np.isnan(w), np.isnan(g)):
                ok = False
                lines.append(f"output {i}: NaN positions differ")
                continue
            finite = np.isfinite(w)
            if not np.array_equal(w[~finite & ~np.isnan(w)], g[~finite & ~np.isnan(w)]):
                ok = False
                lines.append(f"output {i}: infinities differ")
                continue
            w, g = np.where(finite, w, 0.0), np.where(finite, g, 0.0)
            bad = np.abs(g - w) > atol + rtol * np.abs(w)
        diff = np.abs(g - w)
        rel = diff[w != 0] / np.abs(w[w != 0])
        lines.append(
            f"output {i}: max abs error {diff.max():.3g}, max rel error "
            f"{rel.max() if rel.size else 0.0:.3g}, {int(bad.sum())}/{w.size} elements off"
        )
        ok = ok and not bad.any()
    return ok, "\\n".join(lines)


CASE = json.loads((HERE / "case.json").read_text())

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=CASE["id"])
    parser.add_argument("--provider", default=CASE["provider"])
    args = parser.parse_args()
    print(f"case: {CASE['id']}\\nrecorded: {CASE.get('status')} at {CASE.get('stage')}: {CASE.get('error', '')[:300]}")
    if not (HERE / "model.onnx").exists():
        print("no model.onnx: the export itself failed. Re-run it with:")
        print(f"  python -m conformance repro '{CASE['id']}'")
        sys.exit(1)
    all_ok = True
    for suffix in ("", "2"):
        if not (HERE / f"inputs{suffix}.npz").exists():
            continue
        feeds = load(f"inputs{suffix}.npz")
        want = load(f"expected{suffix}.npz")
        expected = [want[f"output_{i}"] for i in range(len(want))]
        actual = run(HERE / "model.onnx", feeds, args.provider)
        if CASE.get("sign_invariant") and len(actual) == len(expected):
            actual = align_signs(expected, actual, CASE["sign_invariant"])
        ok, report = compare(expected, actual, CASE["rtol"], CASE["atol"], CASE["shape_only"])
        print(f"--- {'second shape' if suffix else 'first shape'}: {'ok' if ok else 'MISMATCH'}")
        print(report)
        all_ok = all_ok and ok
    sys.exit(0 if all_ok else 1)
'''


def _save_npz(path: Path, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    """Save arrays; bfloat16 ones are stored as uint16 and listed in ``case.json``."""
    stored = {}
    for name, array in arrays.items():
        if array.dtype.name == "bfloat16":
            meta.setdefault("bfloat16", {}).setdefault(path.name, []).append(name)
            array = array.view(np.uint16)
        stored[name] = array
    np.savez(path, **stored)


def write_artifacts(
    directory: Path,
    *,
    meta: dict[str, Any],
    model_bytes: bytes | None = None,
    feeds: dict[str, np.ndarray] | None = None,
    expected: list[np.ndarray] | None = None,
    feeds2: dict[str, np.ndarray] | None = None,
    expected2: list[np.ndarray] | None = None,
) -> None:
    """(Re)write a case's artifacts into ``directory``, replacing what was there."""
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    meta = dict(meta)
    if model_bytes is not None:
        (directory / "model.onnx").write_bytes(model_bytes)
    for name, arrays in (("inputs.npz", feeds), ("inputs2.npz", feeds2)):
        if arrays is not None:
            _save_npz(directory / name, arrays, meta)
    for name, outputs in (("expected.npz", expected), ("expected2.npz", expected2)):
        if outputs is not None:
            _save_npz(directory / name, {f"output_{i}": o for i, o in enumerate(outputs)}, meta)
    (directory / "case.json").write_text(json.dumps(meta, indent=1, default=str), encoding="utf-8")
    (directory / "repro.py").write_text(REPRO_SCRIPT, encoding="utf-8")


def update_meta(directory: Path, **fields: Any) -> None:
    path = directory / "case.json"
    meta = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    meta.update(fields)
    path.write_text(json.dumps(meta, indent=1, default=str), encoding="utf-8")


def keep_repro(scratch: Path, results_dir: Path, case_id: str, **fields: Any) -> str | None:
    """Move a case's scratch artifacts to its repro directory; returns the path relative to the
    results directory, or None when the case left no artifacts."""
    if not scratch.exists():
        return None
    relative = Path(REPROS_DIR) / sanitise_id(case_id)
    target = results_dir / relative
    if target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(scratch), str(target))
    update_meta(target, **fields)
    return relative.as_posix()
