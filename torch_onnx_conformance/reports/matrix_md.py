"""matrix.md: pass counts per opset and exporter, ours beside torch.onnx, from the rows of one
run or of several (``python -m torch_onnx_conformance.reports build RESULTS_17 RESULTS_20 RESULTS_23 --out DIR``).

A pure function of the rows: one line per opset (and provider and dtype, where the rows hold
more than one), one column group per exporter with its pass count over the cases that ran, and
the results no expectation predicted. Where two exporters ran the same case at an opset, the
cells count only the cases both ran, so the exporters compare like with like.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch_onnx_conformance.reports.markdown import Table, document, heading, text
from torch_onnx_conformance.reports.rows import CaseResult
from torch_onnx_conformance.reports.tally import (
    case_key,
    combo_sort_key,
    fraction_with_percent,
    group_by,
    is_unexpected,
    ordered,
    pass_count,
    varying_axes,
)

#: How exporters are named to a reader (torch-dynamo is torch.onnx's dynamo exporter).
EXPORTER_LABELS = {
    "ours": "ours",
    "torch-dynamo": "torch.onnx (dynamo)",
    "torch-script": "torch.onnx (TorchScript)",
}
_SPLIT_AXES = ("provider", "dtype", "kind")


def matrix_markdown(rows: Sequence[CaseResult]) -> str:
    if not rows:
        return document(
            heading(1, "Conformance matrix"), "No result rows were found, so there is no matrix."
        )
    return document(
        heading(1, "Conformance matrix"),
        "Each cell is passed/ran (skips are in no denominator) for one exporter at one opset, "
        "then the count of unexpected results (failures, crashes, timeouts and passes no "
        "expectation predicted). Opsets: "
        + ", ".join(str(opset) for opset in sorted({row.opset for row in rows}))
        + ".",
        matrix_table(rows).render(),
        *_shared_cases_block(rows),
    )


def matrix_table(rows: Sequence[CaseResult]) -> Table:
    """One line per opset (× provider, dtype and kind where they vary), each exporter's pass
    count and unexpected count side by side."""
    split = varying_axes(rows, _SPLIT_AXES)
    exporters = ordered({row.exporter for row in rows}, "exporter")
    headers = [*split, "opset", "cases"]
    for exporter in exporters:
        label = EXPORTER_LABELS.get(exporter, exporter)
        headers += [f"{label} pass", f"{label} unexpected"]
    table = Table(headers, align=["l"] * (len(split) + 1) + ["r"] * (len(headers) - len(split) - 1))
    groups = group_by(rows, lambda r: (*(getattr(r, axis) for axis in split), r.opset))
    for key in sorted(groups, key=lambda k: combo_sort_key(k, (*split, "opset"))):
        group = groups[key]
        by_exporter = group_by(group, lambda r: r.exporter)
        cells = [text(value) for value in key]
        cells.append(str(len({case_key(row) for row in group})))
        for exporter in exporters:
            mine = by_exporter.get(exporter, [])
            if not mine:
                cells += ["", ""]
                continue
            cells.append(fraction_with_percent(*pass_count(mine)))
            cells.append(str(sum(1 for row in mine if is_unexpected(row))))
        table.add(*cells)
    return table


def _shared_cases_block(rows: Sequence[CaseResult]) -> list[str]:
    """Where several exporters ran: pass counts over the cases every one of them ran."""
    exporters = ordered({row.exporter for row in rows}, "exporter")
    if len(exporters) < 2:
        return []
    by_case = group_by(rows, case_key)
    shared = [
        row
        for group in by_case.values()
        if {row.exporter for row in group} == set(exporters)
        for row in group
    ]
    if not shared:
        return [
            "No case was run by every exporter, so there is no like-with-like comparison; run "
            "them in one run (`--exporter ours --exporter torch-dynamo`)."
        ]
    return [
        heading(2, "Cases every exporter ran"),
        "The same table over only the cases each of "
        + ", ".join(EXPORTER_LABELS.get(e, e) for e in exporters)
        + " ran, so a difference is the exporters', not the selection's.",
        matrix_table(shared).render(),
    ]
