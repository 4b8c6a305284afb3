"""models.md: models with unexpected results first, then expected failures with their
expectation entries, passing models collapsed; status and scaled error per shapes × exporter ×
provider."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torch_onnx_conformance.reports.expectation_links import ExpectationLinks, xfail_reason_cells
from torch_onnx_conformance.reports.markdown import Table, code, details, document, heading, text
from torch_onnx_conformance.reports.rows import CaseResult
from torch_onnx_conformance.reports.signatures import error_headline
from torch_onnx_conformance.reports.tally import (
    PASSING_DEFINITION,
    REFERENCE_EXPORTER,
    case_key,
    combo_label,
    combo_sort_key,
    group_by,
    is_unexpected,
    median,
    ordered,
    pass_count,
    scaled_error,
    status_cell,
    subject_verdict,
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


def capture_rewrites(row: CaseResult) -> list[str]:
    """The model-side capture rewrites the export applied (ours picks the torchvision-detection
    ones by itself), so a reader sees a model passed with them."""
    return list((row.extra or {}).get("capture_patches") or [])


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


def models_table(
    model_rows: Sequence[CaseResult],
    columns_from: Sequence[CaseResult],
    extra_headers: Sequence[str] = (),
    extra_cells: Callable[[list[CaseResult]], list[str]] = lambda group: [],
) -> Table:
    """One row per model of ``model_rows``; the status columns come from ``columns_from`` (every
    model row), so tables in different sections line up."""
    axes = combo_axes(columns_from)
    exporters = ordered((row.exporter for row in columns_from), "exporter")

    def combo_of(row: CaseResult) -> tuple:
        return tuple(getattr(row, axis) for axis in axes)

    combos = sorted({combo_of(row) for row in columns_from}, key=lambda c: combo_sort_key(c, axes))
    rewrites = any(capture_rewrites(row) for row in columns_from)
    table = Table(
        [
            "model",
            "family",
            *(combo_label(c, axes) for c in combos),
            *(f"export s ({e})" for e in exporters),
            *(f"nodes ({e})" for e in exporters),
            f"ORT latency {OUR_EXPORTER}/{REFERENCE_EXPORTER}",
            *(["capture rewrites"] if rewrites else []),
            *extra_headers,
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
            *(
                [text(", ".join(sorted({n for row in group for n in capture_rewrites(row)})))]
                if rewrites
                else []
            ),
            *extra_cells(group),
        )
    return table


def _unexpected_cells(group: list[CaseResult]) -> list[str]:
    unexpected = sorted((row for row in group if is_unexpected(row)), key=lambda r: r.id)
    first = unexpected[0]
    more = f" (+{len(unexpected) - 1})" if len(unexpected) > 1 else ""
    return [code(first.id) + more, code(error_headline(first.error) or first.error_signature or "")]


def _reason_cells(links: ExpectationLinks | None, out_dir) -> Callable[[list], list[str]]:
    return lambda group: list(xfail_reason_cells(group, links, out_dir))


def models_markdown(
    rows: Sequence[CaseResult],
    links: ExpectationLinks | None = None,
    out_dir: str | None = None,
) -> str:
    """Models with unexpected results first, then those failing only as expected, each with
    the expectation entry's reason and link (relative to ``out_dir``); passing models folded."""
    model_rows = [row for row in rows if row.kind == "model"]
    if not model_rows:
        return document(heading(1, "Models"), "No model cases in these rows.")
    models = group_by(model_rows, lambda r: r.subject)
    verdicts = group_by(models, lambda model: subject_verdict(models[model]))

    def section(verdict: str) -> list[CaseResult]:
        return [row for model in verdicts.get(verdict, []) for row in models[model]]

    intro = (
        f"{len(models)} models, {len(model_rows)} cases. A cell shows the status "
        "(`status@stage` when it did not pass) and, in brackets, the max error relative to the "
        "output's scale. `export s` is the median export time; `nodes` counts the optimised "
        "static export; the latency ratio is the median over shared cases of our onnxruntime "
        f"latency divided by {REFERENCE_EXPORTER}'s (below 1 means ours is faster). "
        + PASSING_DEFINITION
    )
    unexpected, expected = section("unexpected"), section("expected failures")
    passing = section("passing")
    blocks = [heading(1, "Models"), intro]
    blocks.append(
        heading(2, f"Models with unexpected results ({len(verdicts.get('unexpected', []))})")
    )
    blocks.append(
        models_table(
            unexpected, model_rows, ["unexpected case", "message"], _unexpected_cells
        ).render()
        if unexpected
        else "None."
    )
    blocks.append(
        heading(
            2,
            f"Models with only expected failures or vacuous cases "
            f"({len(verdicts.get('expected failures', []))})",
        )
    )
    blocks.append(
        models_table(
            expected, model_rows, ["reason", "entry"], _reason_cells(links, out_dir)
        ).render()
        if expected
        else "None."
    )
    if passing:
        count = len(verdicts["passing"])
        blocks.append(
            details(f"Passing models ({count})", models_table(passing, model_rows).render())
        )
    not_run = sorted(verdicts.get("not run", []))
    if not_run:
        blocks.append(
            f"Not run ({len(not_run)}: every case skipped): " + ", ".join(code(m) for m in not_run)
        )
    return document(*blocks)
