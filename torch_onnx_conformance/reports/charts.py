"""PNG charts that answer a triage question each, one denominator per chart.

- ``failures_by_stage``: per family, how many cases that ran did not pass, split by the stage
  they stopped at (unexpected solid, xfail hatched): where the work is.
- ``error_vs_tolerance``: for cases that failed at compare or second shape, the observed error
  against the bound that failed it (max abs error against atol where atol decided, max relative
  error against rtol otherwise): near misses versus wrong answers, each point numbered and named.
- ``model_timings``: per model, export time and onnxruntime latency, ours beside torch.onnx
  where both ran.

The plan (which charts, what data) is pure; matplotlib is imported only when one is drawn.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from pathlib import Path

from torch_onnx_conformance.reports.rows import STAGES, CaseResult
from torch_onnx_conformance.reports.tally import (
    REFERENCE_EXPORTER,
    group_by,
    is_pass,
    median,
    ordered,
    ran,
)

CHARTS_DIR = "charts"
#: Stages a failure can stop at, in pipeline order, plus rows that recorded none.
_STAGE_ORDER = (*STAGES, "unknown")
#: Failing statuses drawn in the stage chart; an xpass has no failing stage.
_FAILED = ("fail", "crash", "timeout", "xfail")
#: Points named on the error-vs-tolerance chart (the worst misses), in a column beside it.
MAX_LABELLED_POINTS = 24
#: "worst: expected X" in a compare message: the element the failure was measured at.
_WORST_EXPECTED = re.compile(
    r"worst: expected (?P<value>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?inf|nan)"
)
MAX_MODELS = 40


@dataclasses.dataclass
class StageCounts:
    """Cases that ran and did not pass, per (family, stage, expected?)."""

    kind: str
    families: list[str]
    #: (family, stage, expected) -> number of cases; expected means xfail.
    counts: dict[tuple[str, str, bool], int]
    #: Cases that ran per family: the denominator printed beside each bar.
    ran: dict[str, int]


@dataclasses.dataclass
class ErrorPoint:
    id: str
    subject: str
    status: str
    observed: float
    tolerance: float
    #: Which bound failed: "atol" (observed is the max abs error) or "rtol" (max rel error).
    bound: str = "rtol"

    @property
    def times_over(self) -> float:
        return self.observed / self.tolerance


@dataclasses.dataclass
class ModelTimes:
    models: list[str]
    exporters: list[str]
    #: (model, exporter) -> median seconds (export) or milliseconds (latency).
    export_s: dict[tuple[str, str], float]
    latency_ms: dict[tuple[str, str], float]


@dataclasses.dataclass
class Chart:
    path: str  # relative to the report folder
    title: str
    data: StageCounts | list[ErrorPoint] | ModelTimes


def stage_counts(rows: Sequence[CaseResult], kind: str) -> StageCounts | None:
    counted = ran(row for row in rows if row.kind == kind)
    failed = [row for row in counted if row.status in _FAILED]
    if not failed:
        return None
    counts: dict[tuple[str, str, bool], int] = {}
    for row in failed:
        key = (row.family, row.stage or "unknown", row.status == "xfail")
        counts[key] = counts.get(key, 0) + 1
    ran_per_family = {f: len(group) for f, group in group_by(counted, lambda r: r.family).items()}
    per_family = {f: len(group) for f, group in group_by(failed, lambda r: r.family).items()}
    families = sorted(per_family, key=lambda f: (-per_family[f], f))
    return StageCounts(kind, families, counts, ran_per_family)


def error_points(rows: Sequence[CaseResult]) -> list[ErrorPoint]:
    """Compare and second-shape failures (expected or not) that recorded their errors, each
    against the bound that failed it (``deciding_bound``)."""
    points = []
    for row in rows:
        if is_pass(row) or row.stage not in ("compare", "second-shape"):
            continue
        if row.status not in _FAILED:
            continue
        decided = deciding_bound(row)
        if decided is None:
            continue
        bound, observed, tolerance = decided
        points.append(ErrorPoint(row.id, row.subject, row.status, observed, tolerance, bound))
    return points


def _positive(value: float | None) -> bool:
    return value is not None and math.isfinite(value) and value > 0


def deciding_bound(row: CaseResult) -> tuple[str, float, float] | None:
    """("atol", max abs error, atol) when atol decided the failure, ("rtol", max rel error,
    rtol) otherwise; None when the row lacks the numbers.

    An element fails when ``|got - expected| > atol + rtol * |expected|``: atol decided where
    ``atol >= rtol * |expected|`` at the worst element (its expected value is in the message).
    Without it, the bound with the smaller excess is taken: the larger term of the sum is the
    one the error was measured against, so the smaller ratio is the truer "times over".
    """
    has_abs = _positive(row.max_abs) and _positive(row.atol)
    has_rel = _positive(row.max_rel) and _positive(row.rtol)
    if not (has_abs or has_rel):
        return None
    if has_abs and has_rel:
        match = _WORST_EXPECTED.search(row.error or "")
        magnitude = abs(float(match.group("value"))) if match else None
        if magnitude is not None and math.isfinite(magnitude):
            atol_decided = row.atol >= row.rtol * magnitude
        else:
            atol_decided = row.max_abs / row.atol <= row.max_rel / row.rtol
    else:
        atol_decided = has_abs
    if atol_decided:
        return "atol", row.max_abs, row.atol
    return "rtol", row.max_rel, row.rtol


def model_times(rows: Sequence[CaseResult]) -> ModelTimes | None:
    # A failed export's time is the time to fail: not comparable with a finished one.
    model_rows = [row for row in rows if row.kind == "model" and row.stage != "export"]
    exporters = ordered((row.exporter for row in model_rows), "exporter")
    export_s: dict[tuple[str, str], float] = {}
    latency_ms: dict[tuple[str, str], float] = {}
    for (model, exporter), group in group_by(model_rows, lambda r: (r.subject, r.exporter)).items():
        seconds = median(row.export_s for row in group)
        if seconds is not None:
            export_s[model, exporter] = seconds
        latency = median(row.latency_ms for row in group)
        if latency is not None:
            latency_ms[model, exporter] = latency
    if not export_s:
        return None
    models = sorted({model for model, _ in export_s})
    if len(exporters) > 1:
        # Side by side means on the same model: only models that every exporter exported.
        models = [m for m in models if all((m, e) in export_s for e in exporters)]
        if not models:
            return None
    slowest = sorted(models, key=lambda m: -max(export_s.get((m, e), 0) for e in exporters))
    return ModelTimes(sorted(slowest[:MAX_MODELS]), exporters, export_s, latency_ms)


def planned_charts(rows: Sequence[CaseResult]) -> list[Chart]:
    """The charts these rows call for; a chart with nothing to show is not planned."""
    charts = []
    for kind, noun in (("op", "Op"), ("model", "Model")):
        counts = stage_counts(rows, kind)
        if counts is not None:
            charts.append(
                Chart(
                    f"{CHARTS_DIR}/{kind}_failures_by_stage.png",
                    f"{noun} cases not passing, by family and stage",
                    counts,
                )
            )
    points = error_points(rows)
    if points:
        charts.append(
            Chart(
                f"{CHARTS_DIR}/error_vs_tolerance.png",
                "Compare failures: observed error against the bound that failed",
                points,
            )
        )
    times = model_times(rows)
    if times is not None:
        title = "Model export time and onnxruntime latency"
        if len(times.exporters) > 1:
            title += f": {' vs '.join(times.exporters)}"
        charts.append(Chart(f"{CHARTS_DIR}/model_timings.png", title, times))
    return charts


def chart_paths() -> list[str]:
    """Every file name a build may write under the report folder's ``charts/``: the build
    removes them first, so a chart whose data vanished leaves no stale picture."""
    names = [f"{kind}_failures_by_stage.png" for kind in ("op", "model")]
    names += ["error_vs_tolerance.png", "model_timings.png"]
    # Names of earlier versions of this module, removed so they do not linger beside new ones.
    names += ["ops_pass_rate.png", "models_pass_rate.png"]
    return [f"{CHARTS_DIR}/{name}" for name in names]


# --------------------------------------------------------------------------- drawing


def draw(chart: Chart, path: str | Path) -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    data = chart.data
    if isinstance(data, StageCounts):
        size = (9.0, 1.6 + 0.42 * len(data.families))
    elif isinstance(data, ModelTimes):
        size = (11.0, 1.8 + 0.32 * len(data.models) * max(1, len(data.exporters)))
    else:
        size = (12.0, 6.5)
    # A bare Figure with the Agg canvas leaves pyplot's global backend alone. The error chart
    # places its label column itself, outside what a constrained layout would track.
    layout = None if isinstance(data, list) else "constrained"
    figure = Figure(figsize=size, layout=layout)
    FigureCanvasAgg(figure)
    if isinstance(data, StageCounts):
        _draw_stage_counts(figure, chart.title, data)
    elif isinstance(data, ModelTimes):
        _draw_model_times(figure, chart.title, data)
    else:
        _draw_error_points(figure, chart.title, data)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", dpi=100)
    return path


def _draw_stage_counts(figure, title: str, data: StageCounts) -> None:
    from matplotlib.patches import Patch

    axes = figure.add_subplot()
    families = list(reversed(data.families))  # largest at the top
    positions = range(len(families))
    colours = _stage_colours()
    left = [0] * len(families)
    for stage in _STAGE_ORDER:
        for expected in (False, True):
            widths = [data.counts.get((f, stage, expected), 0) for f in families]
            if not any(widths):
                continue
            axes.barh(
                positions,
                widths,
                left=left,
                color=colours[stage],
                alpha=0.45 if expected else 1.0,
                hatch="//" if expected else None,
                edgecolor="white" if not expected else colours[stage],
                linewidth=0.5,
            )
            left = [a + b for a, b in zip(left, widths, strict=True)]
    for position, family, width in zip(positions, families, left, strict=True):
        axes.annotate(
            f" {width} of {data.ran.get(family, 0)} ran",
            (width, position),
            va="center",
            fontsize=8,
        )
    axes.set_yticks(list(positions), families)
    axes.set_xlim(0, max(left) * 1.3 + 1)
    axes.set_xlabel("cases that ran and did not pass (count)")
    axes.set_title(title)
    stages = [s for s in _STAGE_ORDER if any(k[1] == s for k in data.counts)]
    handles = [Patch(color=colours[s], label=s) for s in stages]
    handles.append(Patch(facecolor="white", edgecolor="grey", hatch="//", label="xfail (expected)"))
    # Below the axes: a legend never covers a bar.
    figure.legend(
        handles=handles, loc="outside lower center", ncols=min(7, len(handles)), fontsize=8
    )
    axes.grid(axis="x", alpha=0.3)


def _stage_colours() -> dict[str, str]:
    palette = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#7f7f7f")
    return dict(zip(_STAGE_ORDER, palette, strict=False))


def _draw_error_points(figure, title: str, points: list[ErrorPoint]) -> None:
    """Observed error against the bound that failed, on one log-log plane (both are "error
    against its allowance"): filled markers where rtol decided, hollow where atol did. The
    worst ``MAX_LABELLED_POINTS`` are numbered, and named in a column right of the plot, in
    the order of their height, one line each, so no two labels ever overlap."""
    axes = figure.add_subplot()
    figure.subplots_adjust(left=0.08, right=0.5, top=0.9, bottom=0.1)
    styles = {
        ("fail", "rtol"): dict(marker="o", color="#c44e52"),
        ("fail", "atol"): dict(marker="o", facecolors="none", edgecolors="#c44e52"),
        ("xfail", "rtol"): dict(marker="s", color="#7f7f7f"),
        ("xfail", "atol"): dict(marker="s", facecolors="none", edgecolors="#7f7f7f"),
    }
    for (status, bound), style in styles.items():
        chosen = [p for p in points if ("xfail" if p.status == "xfail" else "fail") == status]
        chosen = [p for p in chosen if p.bound == bound]
        if chosen:
            name = "unexpected" if status == "fail" else "xfail"
            what = "abs error vs atol" if bound == "atol" else "rel error vs rtol"
            axes.scatter(
                [p.tolerance for p in chosen],
                [p.observed for p in chosen],
                s=24,
                label=f"{name}, {what} ({len(chosen)})",
                **style,
            )
    low = min(min(p.tolerance for p in points), min(p.observed for p in points)) / 3
    high = max(max(p.tolerance for p in points), max(p.observed for p in points)) * 3
    axes.plot([low, high], [low, high], color="black", linewidth=0.8, linestyle="--")
    axes.text(high / 1.5, high / 1.2, "error = bound", ha="right", va="top", fontsize=8)
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlim(low, high)
    axes.set_ylim(low, high)
    worst = sorted(points, key=lambda p: (-p.times_over, p.id))[:MAX_LABELLED_POINTS]
    slots = len(worst)
    # Points drawn on the same spot share one number label ("1-4"), so numbers never overlap.
    spots = group_by(
        range(len(worst)),
        lambda i: (f"{worst[i].tolerance:.2e}", f"{worst[i].observed:.2e}", worst[i].bound),
    )
    renderer = figure.canvas.get_renderer()
    placed = []
    for numbers in spots.values():
        point = worst[numbers[0]]
        first, last = numbers[0] + 1, numbers[-1] + 1
        label = axes.annotate(
            f"{first}" if first == last else f"{first}-{last}" if len(numbers) == last - first + 1
            else ",".join(str(n + 1) for n in numbers),
            (point.tolerance, point.observed), fontsize=7, xytext=(4, 3),
            textcoords="offset points", gid="point-number",
        )  # fmt: skip
        box = label.get_window_extent(renderer)
        if any(box.overlaps(other) for other in placed):
            label.remove()  # a crowded spot: its leader line from the name column marks it
        else:
            placed.append(box)
    for rank, point in enumerate(sorted(worst, key=lambda p: (-p.observed, p.id))):
        number = worst.index(point) + 1
        case = point.id.split("::", 1)[-1]
        axes.annotate(
            f"{number}. {case}: {point.times_over:.3g}× {point.bound}",
            (point.tolerance, point.observed),
            xytext=(1.04, 1 - (rank + 0.5) / max(slots, 12)),
            textcoords="axes fraction",
            fontsize=7,
            va="center",
            annotation_clip=False,
            arrowprops=dict(arrowstyle="-", color="#bbbbbb", linewidth=0.5),
            gid="point-name",
        )
    from matplotlib.ticker import LogLocator, NullFormatter

    for axis in (axes.xaxis, axes.yaxis):
        # Decade ticks only: labelled minor ticks collide on a log axis.
        axis.set_major_locator(LogLocator(base=10))
        axis.set_minor_formatter(NullFormatter())
    unlabelled = len(points) - slots
    axes.set_xlabel("the bound that failed: atol (hollow) or rtol (filled)")
    axes.set_ylabel("observed max abs error (hollow) or max relative error (filled)")
    count = f"{len(points)} case{'s' if len(points) != 1 else ''}"
    if unlabelled > 0:
        count += f", the {slots} worst numbered"
    axes.set_title(f"{title} ({count})", fontsize=10)
    axes.legend(loc="lower right", fontsize=7)
    axes.grid(alpha=0.3, which="both")


def _draw_model_times(figure, title: str, data: ModelTimes) -> None:
    from matplotlib.ticker import FuncFormatter, NullFormatter

    export_axes, latency_axes = figure.subplots(1, 2, sharey=True)
    models = list(reversed(data.models))
    height = 0.8 / max(1, len(data.exporters))
    for axes, values, label in (
        (export_axes, data.export_s, "export time (s, median, log scale)"),
        (latency_axes, data.latency_ms, "onnxruntime latency (ms, median, log scale)"),
    ):
        for index, exporter in enumerate(data.exporters):
            # The first exporter on top within each model's group.
            offsets = [p + 0.4 - height * (index + 0.5) for p in range(len(models))]
            widths = [values.get((m, exporter), 0.0) for m in models]
            present = [(o, w) for o, w in zip(offsets, widths, strict=True) if w > 0]
            if present:
                axes.barh([o for o, _ in present], [w for _, w in present], height, label=exporter)
        axes.set_xscale("log")
        # Decade labels only, written as plain numbers: minor labels overlap on narrow axes.
        axes.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        axes.xaxis.set_minor_formatter(NullFormatter())
        axes.set_xlabel(label)
        axes.grid(axis="x", alpha=0.3, which="both")
    export_axes.set_yticks(list(range(len(models))), models, fontsize=8)
    figure.suptitle(title)
    if len(data.exporters) > 1:
        figure.legend(*export_axes.get_legend_handles_labels(), loc="outside lower center", ncols=3)
    note = (
        f"models that every exporter exported; {REFERENCE_EXPORTER} is torch.onnx"
        if len(data.exporters) > 1
        else f"only {data.exporters[0]} ran"
    )
    export_axes.set_title(note, fontsize=8)
