"""Where the expectation entry behind an xfail row lives, so a report can link to it.

A row records the entry's reason (``CaseResult.expectation``), not its place; this reads the
exporter's expectations files once and finds the entry whose id glob covers the row and whose
reason is the row's, as ``file#Lline``.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import re
from collections.abc import Sequence
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from torch_onnx_conformance.reports.markdown import code, text
from torch_onnx_conformance.reports.rows import CaseResult
from torch_onnx_conformance.reports.tally import example_message

EXPECTATIONS_DIR = Path(__file__).resolve().parent.parent / "conformance" / "expectations"
_ENTRY_HEADER = re.compile(r"^\s*\[\[expectation\]\]\s*(#.*)?$")


@dataclasses.dataclass(frozen=True)
class EntryPlace:
    path: Path
    line: int
    id_glob: str | None
    reason: str
    link: str


def expectations_file(row: CaseResult, folder: Path = EXPECTATIONS_DIR) -> Path | None:
    """The file the row's kind keeps its exporter's expectations in (``CaseKind``'s rule, the
    one the harness judges by); None for a kind the table does not know."""
    from torch_onnx_conformance.conformance.case import (
        KINDS,  # the reports package loads without the harness
    )

    kind = KINDS.get(row.kind)
    return kind.expectations_file(folder, row.exporter) if kind is not None else None


def read_entries(path: Path) -> list[EntryPlace]:
    """The entries of one expectations file with their header lines; none when it is missing
    or unreadable (a report never fails on an expectations file)."""
    try:
        content = path.read_text(encoding="utf-8")
        entries = tomllib.loads(content).get("expectation", [])
    except (OSError, ValueError):
        return []
    lines = [n for n, text in enumerate(content.splitlines(), 1) if _ENTRY_HEADER.match(text)]
    if len(lines) != len(entries):
        lines = [1] * len(entries)  # inline-table spellings: link the file, not a line
    return [
        EntryPlace(path, line, raw.get("id"), str(raw.get("reason", "")), str(raw.get("link", "")))
        for line, raw in zip(lines, entries, strict=True)
    ]


class ExpectationLinks:
    """Finds a row's entry; files are read on first use."""

    def __init__(self, folder: Path = EXPECTATIONS_DIR):
        self.folder = folder
        self._files: dict[Path, list[EntryPlace]] = {}

    def entry(self, row: CaseResult) -> EntryPlace | None:
        if not row.expectation:
            return None
        path = expectations_file(row, self.folder)
        if path is None:
            return None
        if path not in self._files:
            self._files[path] = read_entries(path)
        for place in self._files[path]:
            covers = place.id_glob is None or fnmatch.fnmatchcase(row.id, place.id_glob)
            if covers and place.reason == row.expectation:
                return place
        return None

    def markdown_link(self, row: CaseResult, out_dir: str | os.PathLike | None) -> str:
        """``[ours.toml:12](../../torch_onnx_conformance/conformance/expectations/ours.toml#L12)`` relative to the
        report folder, or just the file and line when no report folder is known."""
        place = self.entry(row)
        if place is None:
            return ""
        label = f"{place.path.name}:{place.line}"
        if out_dir is None:
            return label
        target = Path(os.path.relpath(place.path, Path(out_dir).resolve())).as_posix()
        return f"[{label}]({target}#L{place.line})"


#: Distinct reasons one cell lists before it says how many more there are.
MAX_REASONS = 3


def xfail_reason_cells(
    group: Sequence[CaseResult], links: ExpectationLinks | None, out_dir: str | os.PathLike | None
) -> tuple[str, str]:
    """(reasons, entry links) of the xfail rows of one op or model, one line per distinct
    reason with its case count."""
    xfails = sorted((row for row in group if row.status == "xfail"), key=lambda r: r.id)
    by_reason: dict[str, list[CaseResult]] = {}
    for row in xfails:
        by_reason.setdefault(row.expectation or "", []).append(row)
    reasons, entries = [], []
    for reason, rows in list(by_reason.items())[:MAX_REASONS]:
        example = example_message(rows[0])
        shown = f" (e.g. {code(example)})" if example and example != reason else ""
        reasons.append(f"{text(reason or '(no reason recorded)')} ×{len(rows)}{shown}")
        entries.append(links.markdown_link(rows[0], out_dir) if links is not None else "")
    if len(by_reason) > MAX_REASONS:
        reasons.append(f"… {len(by_reason) - MAX_REASONS} more reasons")
    return "<br>".join(reasons), "<br>".join(entry for entry in entries if entry)
