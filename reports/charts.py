"""PNG bar charts of pass rate by family, bars grouped per exporter.

matplotlib is imported only when a chart is drawn, so building the markdown never pays for it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from reports.rows import CaseResult
from reports.tally import group_by, ordered, pass_count

OPS_CHART = "charts/ops_pass_rate.png"
MODELS_CHART = "charts/models_pass_rate.png"


@dataclasses.dataclass
class FamilyPassRates:
    title: str
    families: list[str]
    exporters: list[str]
    #: (family, exporter) -> (passed, total); absent when that exporter ran no case of the family.
    counts: dict[tuple[str, str], tuple[int, int]]

    def rate(self, family: str, exporter: str) -> float | None:
        passed, total = self.counts.get((family, exporter), (0, 0))
        return passed / total if total else None


def family_pass_rates(rows: Sequence[CaseResult], title: str) -> FamilyPassRates:
    groups = group_by(rows, lambda r: (r.family, r.exporter))
    return FamilyPassRates(
        title=title,
        families=sorted({row.family for row in rows}),
        exporters=ordered((row.exporter for row in rows), "exporter"),
        counts={key: pass_count(group) for key, group in groups.items()},
    )


def planned_charts(rows: Sequence[CaseResult]) -> list[tuple[str, FamilyPassRates]]:
    """The charts these rows call for, as (path relative to the report dir, data)."""
    charts = []
    op_rows = [row for row in rows if row.kind == "op"]
    model_rows = [row for row in rows if row.kind == "model"]
    if op_rows:
        charts.append((OPS_CHART, family_pass_rates(op_rows, "Op pass rate by family")))
    if model_rows:
        charts.append((MODELS_CHART, family_pass_rates(model_rows, "Model pass rate by family")))
    return charts


def draw_pass_rates(data: FamilyPassRates, path: str | Path) -> Path:
    """Draw one grouped bar chart and save it as PNG."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    # A bare Figure with the Agg canvas leaves pyplot's global backend alone.
    width = max(6.0, 0.9 * len(data.families) * max(1, len(data.exporters)) / 2 + 2)
    figure = Figure(figsize=(min(width, 40.0), 4.8), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    bar_width = 0.8 / max(1, len(data.exporters))
    positions = range(len(data.families))
    for index, exporter in enumerate(data.exporters):
        offsets = [p - 0.4 + bar_width * (index + 0.5) for p in positions]
        heights = [100 * (data.rate(f, exporter) or 0.0) for f in data.families]
        bars = axes.bar(offsets, heights, bar_width, label=exporter)
        labels = [_bar_label(data.counts.get((f, exporter))) for f in data.families]
        axes.bar_label(bars, labels=labels, fontsize=7, padding=2)
    axes.set_xticks(list(positions), data.families, rotation=30, ha="right")
    axes.set_ylim(0, 112)
    axes.set_ylabel("pass rate (%)")
    axes.set_title(data.title)
    axes.legend(loc="upper right", fontsize=8)
    axes.grid(axis="y", alpha=0.3)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", dpi=110)
    return path


def _bar_label(counts: tuple[int, int] | None) -> str:
    if counts is None:
        return ""
    return f"{counts[0]}/{counts[1]}"
