"""models.md: one row per model, status and scaled error per shapes × exporter × provider."""

from __future__ import annotations

from collections.abc import Sequence

from reports.markdown import Table, code, document, heading, text
from reports.rows import CaseResult
from reports.tally import (
    REFERENCE_EXPORTER,
    case_key,
    combo_label,
    combo_sort_key,
    group_by,
    median,
    ordered,
    pass_count,
    scaled_error,
    status_cell,
    varying_axes,
)

COMBO_AXES = ("shapes", "exporter", "provider")
#: Axes that join the columns only when the rows hold more than one value of them.
OPTIONAL_AXES = ("opset", "dtype", "optimize")
OUR_EXPORTER = "ours"


def combo_axes(rows: Sequence[CaseResult]) -> list[str]:
    return [*COMBO_AXES, *varying_axes(rows, OPTIONAL_AXES)]


def status_with_error(rows: Sequence[CaseResult]) -> str:
    """``pass (3.1e-06)`` for one row; ``2/3 pass (…)`` when several rows share a cell."""
    errors = [e for e in (scaled_error(row) for row in rows) if e is not None]
    error = f" ({format_error(max(errors))})" if errors else ""
    if len(rows) == 1:
        return status_cell(rows[0]) + error
    passed, total = pass_count(rows)
    return f"{passed}/{total} pass{error}"


def format_error(value: float) -> str:
    return f"{value:.2g}"


def export_seconds(rows: Sequence[CaseResult]) -> str:
    value = median(row.export_s for row in rows)
    return f"{value:.3g}" if value is not None else ""


def node_count(rows: Sequence[CaseResult]) -> str:
    """Nodes of the optimised static export when there is one: the size users ship."""
    candidates = sorted(
        (row for row in rows if row.node_count is not None),
        key=lambda r: (r.optimize is False, r.shapes != "static", r.opset, r.provider, r.id),
    )
    return str(candidates[0].node_count) if candidates else ""


def latency_ratio(rows: Sequence[CaseResult]) -> float | None:
    """Median over case keys of ours' ORT latency divided by torch.onnx's on the same case."""
    by_key = group_by(rows, case_key)
    ratios = []
    for group in by_key.values():
        latency = {row.exporter: row.latency_ms for row in group}
        ours, reference = latency.get(OUR_EXPORTER), latency.get(REFERENCE_EXPORTER)
        if ours is not None and reference:
            ratios.append(ours / reference)
    return median(ratios)


def models_table(rows: Sequence[CaseResult]) -> Table:
    model_rows = [row for row in rows if row.kind == "model"]
    axes = combo_axes(model_rows)
    exporters = ordered((row.exporter for row in model_rows), "exporter")

    def combo_of(row: CaseResult) -> tuple:
        return tuple(getattr(row, axis) for axis in axes)

    combos = sorted({combo_of(row) for row in model_rows}, key=lambda c: combo_sort_key(c, axes))
    table = Table(
        [
            "model",
            "family",
            *(combo_label(c, axes) for c in combos),
            *(f"export s ({e})" for e in exporters),
            *(f"nodes ({e})" for e in exporters),
            f"ORT latency {OUR_EXPORTER}/{REFERENCE_EXPORTER}",
        ]
    )
    for model, group in sorted(group_by(model_rows, lambda r: r.subject).items()):
        by_combo = group_by(group, combo_of)
        by_exporter = group_by(group, lambda r: r.exporter)
        ratio = latency_ratio(group)
        table.add(
            code(model),
            text(", ".join(sorted({row.family for row in group}))),
            *(status_with_error(by_combo[c]) if c in by_combo else "" for c in combos),
            *(export_seconds(by_exporter.get(e, [])) for e in exporters),
            *(node_count(by_exporter.get(e, [])) for e in exporters),
            f"{ratio:.2f}×" if ratio is not None else "",
        )
    return table


def models_markdown(rows: Sequence[CaseResult]) -> str:
    model_rows = [row for row in rows if row.kind == "model"]
    if not model_rows:
        return document(heading(1, "Models"), "No model cases in these rows.")
    models = {row.subject for row in model_rows}
    intro = (
        f"{len(models)} models, {len(model_rows)} cases. A cell shows the status "
        "(`status@stage` when it did not pass) and, in brackets, the max error relative to the "
        "output's scale. `export s` is the median export time; `nodes` counts the optimised "
        "static export; the latency ratio is the median over shared cases of our onnxruntime "
        f"latency divided by {REFERENCE_EXPORTER}'s (below 1 means ours is faster)."
    )
    return document(heading(1, "Models"), intro, models_table(model_rows).render())
