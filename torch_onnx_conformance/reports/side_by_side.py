"""The exporters compared on identical cases: only case keys that every exporter ran."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

from torch_onnx_conformance.reports.rows import CaseResult
from torch_onnx_conformance.reports.tally import (
    case_key,
    group_by,
    is_pass,
    ordered,
    subjects_passing,
)


@dataclasses.dataclass
class Comparison:
    """One kind's (ops or models) shared cases, keyed by case key, then by exporter."""

    kind: str
    exporters: list[str]
    cases: dict[str, dict[str, CaseResult]]

    @functools.cached_property
    def judged(self) -> dict[str, dict[str, CaseResult]]:
        """Shared cases that no exporter skipped: a skip (eager rejects the sample, nothing to
        make dynamic) judges neither exporter, as in the per-axis pass rates."""
        return {
            key: by_exporter
            for key, by_exporter in self.cases.items()
            if all(row.status != "skip" for row in by_exporter.values())
        }

    def pass_count(self, exporter: str) -> int:
        return sum(1 for by_exporter in self.judged.values() if is_pass(by_exporter[exporter]))

    def subjects_passing(self, exporter: str) -> tuple[int, int]:
        """(subjects that pass, subjects judged) over the judged shared cases, by the one
        definition of a passing op (model), ``reports.tally.subject_passes``."""
        return subjects_passing(by_exporter[exporter] for by_exporter in self.judged.values())

    def differing_keys(self) -> list[str]:
        """Keys where at least one exporter passes and at least one does not."""
        return sorted(
            key
            for key, by_exporter in self.cases.items()
            if len({is_pass(row) for row in by_exporter.values()}) > 1
        )

    def only_passes(self, winner: str, loser: str) -> int:
        return sum(
            1
            for by_exporter in self.cases.values()
            if is_pass(by_exporter[winner]) and not is_pass(by_exporter[loser])
        )


def compare_exporters(rows: Sequence[CaseResult]) -> list[Comparison]:
    """One comparison per kind that was run with two or more exporters."""
    comparisons = []
    by_kind = group_by(rows, lambda r: r.kind)
    for kind in ordered(by_kind, "kind"):
        kind_rows = by_kind[kind]
        exporters = ordered((row.exporter for row in kind_rows), "exporter")
        if len(exporters) < 2:
            continue
        by_key: dict[str, dict[str, CaseResult]] = {}
        for row in kind_rows:
            by_key.setdefault(case_key(row), {})[row.exporter] = row
        shared = {key: cell for key, cell in by_key.items() if len(cell) == len(exporters)}
        comparisons.append(Comparison(kind, exporters, dict(sorted(shared.items()))))
    return comparisons
