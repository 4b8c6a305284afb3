"""Build the static dashboard: rows in, plain files out (see ``reports.html``)."""

from __future__ import annotations

import datetime
import json
import os
import shlex
import shutil
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from torch_onnx_conformance.reports.diff import diff_rows
from torch_onnx_conformance.reports.rows import CaseResult
from torch_onnx_conformance.reports.signatures import error_headline
from torch_onnx_conformance.reports.tally import (
    combo_label,
    combo_sort_key,
    group_by,
    is_pass,
    ordered,
    pass_count,
    status_counts,
)

#: The axes of a matrix column; the cases of one cell differ in sample and shapes.
COLUMN_AXES = ("exporter", "opset", "provider", "dtype")
#: The static files copied from this package into the site.
STATIC_FILES = ("index.html", "dashboard.js", "dashboard.css")
#: Longest message kept per case: a traceback past this is cut, saying how much was cut.
MAX_MESSAGE_CHARS = 4000
#: The history files the site writes; the next build reads them back through ``--history``.
HISTORY_FILE = "history.jsonl"
HISTORY_CASES_FILE = "history-cases.json"


def build_site(
    rows: Sequence[CaseResult],
    out_dir: str | os.PathLike,
    *,
    baseline: Sequence[CaseResult] | None = None,
    history: str | os.PathLike | None = None,
    runs: Sequence[Mapping[str, Any]] = (),
    completeness: str | None = None,
) -> list[Path]:
    """Write the dashboard for ``rows`` into ``out_dir``; returns the written paths.

    ``baseline`` (an earlier run's rows) fills the diff view. ``history`` names an earlier
    site's ``history.jsonl`` (a missing file starts a new history): its lines and this run's
    summary line are written to ``out_dir/history.jsonl``, and the per-case "status since" map
    kept beside it (``history-cases.json``) is carried forward. Only ``out_dir`` is written.
    """
    out = Path(out_dir)
    data = out / "data"
    if data.exists():
        shutil.rmtree(data)  # a family that vanished leaves no stale file behind
    data.mkdir(parents=True)
    written = [_copy_static(name, out) for name in STATIC_FILES]

    label = run_label(runs)
    earlier, since_before = read_history(history)
    since = status_since(rows, since_before, label)
    line = history_line(rows, runs, label)
    history_lines = [*earlier, line]
    written.append(
        _write(out / HISTORY_FILE, "".join(json.dumps(item) + "\n" for item in history_lines))
    )
    written.append(
        _write(
            out / HISTORY_CASES_FILE,
            json.dumps({"runs": [item["run"] for item in history_lines], "cases": since}),
        )
    )

    columns = _columns(rows)
    column_index = {key: i for i, key in enumerate(columns)}
    families = []
    by_family = group_by(rows, lambda r: (r.kind, r.family))
    for number, key in enumerate(
        sorted(by_family, key=lambda k: combo_sort_key(k, ("kind", "family")))
    ):
        kind, family = key
        family_rows = sorted(by_family[key], key=lambda r: (r.subject, r.id))
        name = f"f{number}"
        subjects = list(dict.fromkeys(row.subject for row in family_rows))
        subject_index = {subject: i for i, subject in enumerate(subjects)}
        cases = [
            _case(row, subject_index[row.subject], column_index[_column(row)], since)
            for row in family_rows
        ]
        written.append(_write_js(data / f"{name}.js", name, {"subjects": subjects, "cases": cases}))
        families.append(
            {
                "name": family,
                "kind": kind,
                "file": name,
                "subjects": subjects,
                "counts": status_counts(family_rows),
                "cells": _cells(family_rows, column_index),
            }
        )

    if baseline is not None:
        diff, against = _diff(baseline, rows), "the baseline rows (--baseline)"
    elif earlier and since_before:
        # Without --baseline, the previous run of the history: its statuses are in the map.
        previous = [
            SimpleNamespace(id=case_id, status=entry[0])
            for case_id, entry in since_before.items()
            if isinstance(entry, list) and entry and isinstance(entry[0], str)
        ]
        diff, against = (
            _diff(previous, rows),
            f"the previous run in the history, {earlier[-1]['run']}",
        )
    else:
        diff, against = None, None
    if diff is not None:
        written.append(_write_js(data / "diff.js", "diff", diff))
    written.append(_write_js(data / "history.js", "history", {"runs": history_lines}))
    passed, counted = pass_count(rows)
    index = {
        "title": "Conformance dashboard",
        "run": label,
        "runs": [_run_header(run) for run in runs],
        "completeness": completeness,
        "total": len(rows),
        "passed": passed,
        "counted": counted,
        "counts": status_counts(rows),
        "columns": [
            {"key": list(key), "label": combo_label(key, COLUMN_AXES), "exporter": key[0]}
            for key in columns
        ],
        "families": families,
        "diff": {name: len(items) for name, items in diff.items()} if diff else None,
        "diff_against": against,
        "history_runs": len(history_lines),
        "tolerances": _tolerances(),
    }
    written.append(_write_js(data / "index.js", "index", index))
    return written


def _tolerances() -> dict[str, Any] | None:
    """The one tolerance table (``reports.tolerances``) for the page's Tolerances view; None
    where its sources cannot be read (the view says so)."""
    from torch_onnx_conformance.reports.tolerances import COLUMNS, tolerance_rows, tolerance_rules

    try:
        return {"columns": COLUMNS, "rows": tolerance_rows(), "rules": tolerance_rules()}
    except (ImportError, OSError, ValueError) as error:
        import sys

        print(f"warning: the dashboard has no tolerance table: {error}", file=sys.stderr)
        return None


def run_label(runs: Sequence[Mapping[str, Any]]) -> str:
    """The run's name in the history: its start time and commit when the manifests say."""
    started = [str(run["started"]) for run in runs if run.get("started")]
    commits = [str(run["commit"])[:12] for run in runs if run.get("commit")]
    when = max(started) if started else _now()
    return f"{when} {commits[-1]}" if commits else when


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def history_line(
    rows: Sequence[CaseResult], runs: Sequence[Mapping[str, Any]], label: str
) -> dict[str, Any]:
    """This run's summary line: totals and the pass rate per exporter and opset."""
    rates = []
    groups = group_by(rows, lambda r: (r.exporter, r.opset))
    for exporter in ordered({key[0] for key in groups}, "exporter"):
        for opset in sorted(key[1] for key in groups if key[0] == exporter):
            passed, counted = pass_count(groups[(exporter, opset)])
            rates.append({"exporter": exporter, "opset": opset, "passed": passed, "ran": counted})
    commits = [str(run["commit"]) for run in runs if run.get("commit")]
    return {
        "run": label,
        "commit": commits[-1] if commits else None,
        "cases": len(rows),
        "counts": dict(status_counts(rows)),
        "rates": rates,
    }


def read_history(path: str | os.PathLike | None) -> tuple[list[dict[str, Any]], dict]:
    """An earlier site's history lines and per-case "since" map; nothing for no or a missing
    file. A line that is not a JSON object is dropped with a warning."""
    if path is None:
        return [], {}
    path = Path(path)
    lines: list[dict[str, Any]] = []
    if path.is_file():
        for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not raw.strip():
                continue
            try:
                item = json.loads(raw)
            except ValueError:
                item = None
            if isinstance(item, dict) and isinstance(item.get("run"), str):
                lines.append(item)
            else:
                import sys

                print(f"warning: {path}:{number}: not a history line; left out", file=sys.stderr)
    since: dict = {}
    cases_file = path.parent / HISTORY_CASES_FILE
    if cases_file.is_file():
        try:
            loaded = json.loads(cases_file.read_text(encoding="utf-8")).get("cases")
        except (ValueError, AttributeError):
            loaded = None
        if isinstance(loaded, dict):
            since = loaded
    return lines, since


def status_since(
    rows: Sequence[CaseResult], before: Mapping[str, Any], label: str
) -> dict[str, list[str]]:
    """Each case's ``[status, run it has had that status since]``: carried from ``before``
    while the status stays, this run's label when it changed or the case is new."""
    since = {}
    for row in rows:
        earlier = before.get(row.id)
        if isinstance(earlier, list) and len(earlier) == 2 and earlier[0] == row.status:
            since[row.id] = [row.status, str(earlier[1])]
        else:
            since[row.id] = [row.status, label]
    return since


def _columns(rows: Sequence[CaseResult]) -> list[tuple]:
    keys = {_column(row) for row in rows}
    return sorted(keys, key=lambda key: combo_sort_key(key, COLUMN_AXES))


def _column(row: CaseResult) -> tuple:
    return tuple(getattr(row, axis) for axis in COLUMN_AXES)


def _cells(rows: Sequence[CaseResult], column_index: Mapping[tuple, int]) -> dict[str, Any]:
    cells = {}
    for key, group in group_by(rows, _column).items():
        cells[str(column_index[key])] = dict(status_counts(group))
    return cells


def _message(row: CaseResult) -> str:
    """The message exactly as raised (numbers intact), cut only past ``MAX_MESSAGE_CHARS``."""
    message = row.error or ""
    if len(message) > MAX_MESSAGE_CHARS:
        cut = len(message) - MAX_MESSAGE_CHARS
        message = message[:MAX_MESSAGE_CHARS] + f"\n… ({cut} more characters in the rows file)"
    return message


def _case(row: CaseResult, subject: int, column: int, since: Mapping[str, list[str]]) -> dict:
    case = {
        "s": subject,
        "c": column,
        "id": row.id,
        "st": row.status,
        "sh": row.shapes,
        "r": repro_command(row.id),
        "since": since.get(row.id, [row.status, ""])[1],
    }
    optional = {
        "sg": row.stage,
        "h": error_headline(row.error) if row.error and not is_pass(row) else None,
        "m": _message(row) if not is_pass(row) else None,
        "x": row.expectation,
        "ma": row.max_abs,
        "mr": row.max_rel,
        "at": row.atol,
        "rt": row.rtol,
        "n": row.sample,
    }
    case.update({key: value for key, value in optional.items() if value is not None})
    return case


def repro_command(case_id: str) -> str:
    """The command that replays one case, quoted for a POSIX shell."""
    return f"python -m torch_onnx_conformance repro {shlex.quote(case_id)}"


def _diff(baseline: Sequence[Any], rows: Sequence[CaseResult]) -> dict[str, list]:
    """wpt.fyi's view of two runs: fixed (now passes), broken (passed, now does not), changed
    (another status change), new and removed cases. ``baseline`` needs only ids and statuses."""
    diff = diff_rows(baseline, rows)
    out: dict[str, list] = {"fixed": [], "broken": [], "changed": [], "new": [], "removed": []}
    for old, new in diff.changed:
        kind = "fixed" if is_pass(new) else "broken" if is_pass(old) else "changed"
        out[kind].append(
            {
                "id": new.id,
                "was": old.status,
                "now": new.status,
                "sg": new.stage or "",
                "m": error_headline(new.error) if new.error else "",
                "r": repro_command(new.id),
            }
        )
    now = {row.id: row for row in rows}
    before = {row.id: row for row in baseline}
    out["new"] = [{"id": case_id, "now": now[case_id].status} for case_id in diff.only_new]
    out["removed"] = [{"id": case_id, "was": before[case_id].status} for case_id in diff.only_old]
    return out


def _run_header(run: Mapping[str, Any]) -> dict[str, str]:
    return {key: str(run[key]) for key in ("commit", "started", "command") if run.get(key)}


def _copy_static(name: str, out: Path) -> Path:
    source = resources.files("torch_onnx_conformance.reports.html").joinpath("static", name)
    return _write(out / name, source.read_text(encoding="utf-8"))


def _write(path: Path, content: str) -> Path:
    path.write_text(content, encoding="utf-8")
    return path


def _write_js(path: Path, name: str, payload: Any) -> Path:
    """A data file the page loads with a ``<script>`` tag: it hands ``payload`` to the page.
    ``json.dumps`` escapes every non-ASCII character and ``<``, so no text in it can end the
    script or read as anything but a string."""
    body = json.dumps(payload, separators=(",", ":"), sort_keys=True).replace("<", "\\u003c")
    return _write(path, f"window.dashboardLoaded({json.dumps(name)},{body});\n")
