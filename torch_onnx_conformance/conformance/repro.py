"""Repro directories: everything needed to re-run a failing case without the project.

A case's artifacts (``model.onnx``, ``inputs.npz``, ``expected.npz``, for dynamic cases
``inputs2.npz`` and ``expected2.npz``, ``case.json``, ``repro.py`` and ``compare.py``) are written
to a scratch directory before onnxruntime runs, so that even a crash leaves them. A case that does
not pass gets its scratch directory moved to ``RESULTS/repros/<sanitised id>/``. The layout,
script and comparison rule are ``exporter.diagnostics.repro``'s, the same for op, model and export repros;
``case.json`` says which rule (``element`` for ops, ``scale`` for models) applies.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from torch_onnx_conformance.conformance import expectations
from torch_onnx_conformance.conformance.case import kind_of, row_facts, sanitise_id
from torch_onnx_conformance.conformance.errors import signature_of
from torch_onnx_conformance.conformance.expectations import EXPECTATIONS_DIR
from torch_onnx_conformance.exporter.diagnostics.repro import install_scripts, save_arrays

REPROS_DIR = "repros"


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
            save_arrays(directory / name, arrays, meta)
    for name, outputs in (("expected.npz", expected), ("expected2.npz", expected2)):
        if outputs is not None:
            save_arrays(directory / name, {f"output_{i}": o for i, o in enumerate(outputs)}, meta)
    (directory / "case.json").write_text(json.dumps(meta, indent=1, default=str), encoding="utf-8")
    install_scripts(directory)


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


def judge_replay(
    case, outcome: dict[str, Any], results_dir: Path | None = None, expectations_dir=None
):
    """The expectations' verdict on a replayed case, as a run would give it: an expected
    failure is ``xfail`` with the entry's reason, a pass an entry expects to fail is ``xpass``.

    The sample's facts (what ``match`` tables look at) come from the outcome, else from the
    case's row in ``results_dir``, else only the id's fields are matched."""
    sample = (outcome.get("extra") or {}).get("sample") or case.row_extra().get("sample")
    if sample is None and results_dir is not None and Path(results_dir).is_dir():
        from torch_onnx_conformance.reports.rows import read_rows

        rows = [row for row in read_rows([results_dir]) if row.id == case.id]
        sample = rows[-1].extra.get("sample") if rows else None
    path = kind_of(case.id).expectations_file(expectations_dir or EXPECTATIONS_DIR, case.exporter)
    entries = expectations.load_expectations(path)
    facts = row_facts(case.id, sample)
    if outcome.get("error") and not outcome.get("error_signature"):
        outcome = {**outcome, "error_signature": signature_of(outcome["error"])}
    return expectations.judge_outcome(entries, facts, outcome["status"], outcome)
