"""Repro directories: everything needed to re-run a failing case without the project.

A case's artifacts (``model.onnx``, ``inputs.npz``, ``expected.npz``, for dynamic cases
``inputs2.npz`` and ``expected2.npz``, ``case.json``) are written to a scratch directory before
onnxruntime runs, so that even a crash leaves them (rewritten in place: ``REUSED_FILES``). A case
that does not pass gets its scratch directory moved to ``RESULTS/repros/<sanitised id>/``, where
``repro.py`` and ``compare.py`` join them (the same two files for every case: copied once a
directory is kept, not for every case). The layout, script and comparison rule are
``exporter.diagnostics.repro``'s, the same for op, model and export repros; ``case.json`` says
which rule (``element`` for ops, ``scale`` for models) applies.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from torch_onnx_conformance.conformance import expectations
from torch_onnx_conformance.conformance.case import kind_of, row_facts, sanitise_id
from torch_onnx_conformance.conformance.errors import signature_of
from torch_onnx_conformance.conformance.expectations import EXPECTATIONS_DIR
from torch_onnx_conformance.exporter.diagnostics.repro import arrays_bytes, install_scripts

REPROS_DIR = "repros"


#: The files every case rewrites in its scratch folder. They are rewritten in place, case after
#: case, never deleted and created again: on a filesystem mounted with online discard (ext4
#: ``discard``) each unlink or truncation of a file costs about a third of a millisecond, and
#: a case wrote five or six files. Which of the files belong to the case in flight is what
#: ``case.json`` lists under ``artifacts``; whatever it does not list is left over from an
#: earlier case and never reaches a repro directory (``keep_repro``).
REUSED_FILES = (
    "case.json",
    "model.onnx",
    "inputs.npz",
    "expected.npz",
    "inputs2.npz",
    "expected2.npz",
)
ARTIFACTS = "artifacts"


def write_in_place(path: Path, data: bytes) -> None:
    """Write ``data`` as the whole content of ``path``, into the file's own blocks when it
    exists (no truncation to zero, no new file)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


def reset_scratch(directory: Path) -> None:
    """Before a case: nothing in ``directory`` belongs to it yet (``case.json`` lists no
    artifacts); files other than ``REUSED_FILES`` (a model's external data) are deleted."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        _remove_all_but(directory, REUSED_FILES)
        write_in_place(directory / "case.json", b"{}")
    except OSError:  # whatever stands in the way: the folder goes, as it did before each case
        shutil.rmtree(directory, ignore_errors=True)


def _remove_all_but(directory: Path, kept) -> None:
    """Delete every file and folder in ``directory`` whose name is not in ``kept``."""
    for entry in os.scandir(directory):
        if entry.name in kept:
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)


def write_artifacts(
    directory: Path,
    *,
    meta: dict[str, Any],
    feeds: dict[str, np.ndarray] | None = None,
    expected: list[np.ndarray] | None = None,
    feeds2: dict[str, np.ndarray] | None = None,
    expected2: list[np.ndarray] | None = None,
) -> None:
    """Write a case's inputs and expected outputs into ``directory`` and list them in
    ``case.json``: what was there before belongs to the case no more."""
    directory.mkdir(parents=True, exist_ok=True)
    meta = dict(meta)
    written = []
    for name, arrays in (("inputs.npz", feeds), ("inputs2.npz", feeds2)):
        if arrays is not None:
            write_in_place(directory / name, arrays_bytes(name, arrays, meta))
            written.append(name)
    for name, outputs in (("expected.npz", expected), ("expected2.npz", expected2)):
        if outputs is not None:
            named = {f"output_{i}": o for i, o in enumerate(outputs)}
            write_in_place(directory / name, arrays_bytes(name, named, meta))
            written.append(name)
    meta[ARTIFACTS] = written
    _write_meta(directory, meta)


def claim_export(directory: Path) -> None:
    """After the export wrote into ``directory``: ``model.onnx`` and any file that is not one
    of ``REUSED_FILES`` (external data) belong to the case."""
    meta = _read_meta(directory)
    names = {
        entry.name
        for entry in os.scandir(directory)
        if entry.name == "model.onnx" or entry.name not in REUSED_FILES
    }
    meta[ARTIFACTS] = sorted({*meta.get(ARTIFACTS, ()), *names})
    _write_meta(directory, meta)


def update_meta(directory: Path, **fields: Any) -> None:
    meta = _read_meta(directory)
    meta.update(fields)
    _write_meta(directory, meta)


def _read_meta(directory: Path) -> dict[str, Any]:
    path = directory / "case.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def _write_meta(directory: Path, meta: dict[str, Any]) -> None:
    text = json.dumps(meta, indent=1, default=str)
    write_in_place(directory / "case.json", text.encode("utf-8"))


def keep_repro(scratch: Path, results_dir: Path, case_id: str, **fields: Any) -> str | None:
    """Move a case's scratch artifacts (those ``case.json`` lists) to its repro directory with
    the scripts that rerun it; returns the path relative to the results directory, or None when
    the case left no artifacts."""
    if not scratch.exists():
        return None
    meta = _read_meta(scratch)
    claimed = meta.pop(ARTIFACTS, None)
    if claimed is None:
        return None
    _remove_all_but(scratch, {"case.json", *claimed})
    relative = Path(REPROS_DIR) / sanitise_id(case_id)
    target = results_dir / relative
    if target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(scratch), str(target))
    install_scripts(target)
    meta.update(fields)
    _write_meta(target, meta)
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
