"""Repro directories of model cases.

The same layout as op cases (``conformance/repro.py``: ``model.onnx``, ``inputs.npz``,
``expected.npz``, ``inputs2.npz``/``expected2.npz`` for dynamic cases, ``case.json``), with a
``repro.py`` that applies the model rule: onnxruntime with its default graph optimisations, and
errors judged against each output's scale (``conformance/models_compare.py``). It needs only
numpy and onnxruntime.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from conformance.repro import update_meta, write_artifacts

MODEL_REPRO_SCRIPT = '''\
"""Re-run one model conformance case with onnxruntime only: python repro.py [--provider cpu|cuda|reference]

Exit status 0 when every output matches the eager outputs saved next to this script, else 1.
A float output matches when max|actual - expected| <= atol + rtol * max|expected|.
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
        return {key: data[key] for key in data.files}


def run(path, feeds, provider):
    if provider == "reference":
        from onnx.reference import ReferenceEvaluator

        return [np.asarray(o) for o in ReferenceEvaluator(str(path)).run(None, feeds)]
    import onnxruntime as ort

    wanted = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}[provider]
    providers = [wanted] if provider == "cpu" else [wanted, "CPUExecutionProvider"]
    session = ort.InferenceSession(str(path), providers=providers)
    declared = {i.name for i in session.get_inputs()}
    return session.run(None, {k: v for k, v in feeds.items() if k in declared})


def compare(expected, actual, rtol, atol):
    if len(expected) != len(actual):
        return False, f"output count: eager {len(expected)}, onnx {len(actual)}"
    ok, lines = True, []
    for i, (want, got) in enumerate(zip(expected, actual)):
        got = np.asarray(got)
        if want.shape != got.shape or want.dtype != got.dtype:
            ok = False
            lines.append(f"output {i}: {got.dtype}{list(got.shape)} != eager {want.dtype}{list(want.shape)}")
            continue
        if want.size == 0:
            lines.append(f"output {i}: empty, shape and dtype match")
            continue
        if want.dtype.kind in "biu":
            bad = int((want != got).sum())
            ok = ok and not bad
            lines.append(f"output {i}: {bad}/{want.size} elements differ (exact)")
            continue
        w, g = want.astype(np.float64), got.astype(np.float64)
        if not np.array_equal(np.isnan(w), np.isnan(g)) or not np.array_equal(np.isinf(w), np.isinf(g)):
            ok = False
            lines.append(f"output {i}: NaN or infinity positions differ")
            continue
        finite = np.isfinite(w)
        if not finite.any():
            lines.append(f"output {i}: only NaN/inf, matching")
            continue
        diff = np.abs(g[finite] - w[finite])
        scale = float(np.abs(w[finite]).max())
        good = diff.max() <= atol + rtol * scale
        ok = ok and good
        lines.append(
            f"output {i}: max abs error {diff.max():.3g} at scale {scale:.3g} "
            f"(error/scale {diff.max() / scale if scale else diff.max():.3g}) {'ok' if good else 'TOO LARGE'}"
        )
    return ok, "\\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=CASE["id"])
    parser.add_argument("--provider", default=CASE["provider"])
    args = parser.parse_args()
    print(f"case: {CASE['id']}\\nrecorded: {CASE.get('status')} at {CASE.get('stage')}: {str(CASE.get('error', ''))[:300]}")
    if not (HERE / "model.onnx").exists():
        print("no model.onnx: the export itself failed. Re-run the case with:")
        print(f"  {CASE['rerun']}")
        sys.exit(1)
    all_ok = True
    for suffix in ("", "2"):
        if not (HERE / f"inputs{suffix}.npz").exists():
            continue
        feeds = load(f"inputs{suffix}.npz")
        want = load(f"expected{suffix}.npz")
        expected = [want[f"output_{i}"] for i in range(len(want))]
        try:
            actual = run(HERE / "model.onnx", feeds, args.provider)
        except Exception as error:
            print(f"--- {'second inputs' if suffix else 'example inputs'}: RUN FAILED\\n{error}")
            all_ok = False
            continue
        ok, report = compare(expected, actual, CASE["rtol"], CASE["atol"])
        print(f"--- {'second inputs' if suffix else 'example inputs'}: {'ok' if ok else 'MISMATCH'}")
        print(report)
        all_ok = all_ok and ok
    sys.exit(0 if all_ok else 1)
'''


def write_model_artifacts(
    directory: Path,
    *,
    meta: dict[str, Any],
    feeds: dict[str, np.ndarray],
    expected: list[np.ndarray],
    feeds2: dict[str, np.ndarray] | None = None,
    expected2: list[np.ndarray] | None = None,
) -> None:
    """(Re)write a model case's inputs, expected outputs, case.json and repro.py."""
    write_artifacts(
        directory,
        meta=meta,
        feeds=feeds,
        expected=expected,
        feeds2=feeds2,
        expected2=expected2,
    )
    (directory / "repro.py").write_text(MODEL_REPRO_SCRIPT, encoding="utf-8")


__all__ = ["MODEL_REPRO_SCRIPT", "update_meta", "write_model_artifacts"]
