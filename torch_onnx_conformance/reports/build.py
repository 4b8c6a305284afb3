"""The one place reports touch the disk: render every report from rows and write it out."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from torch_onnx_conformance.reports.charts import chart_paths, draw, planned_charts
from torch_onnx_conformance.reports.expectation_links import ExpectationLinks
from torch_onnx_conformance.reports.matrix_md import matrix_markdown
from torch_onnx_conformance.reports.models_md import models_markdown
from torch_onnx_conformance.reports.ops_md import ops_markdown
from torch_onnx_conformance.reports.rows import (
    CaseResult,
    RowsRead,
    read_rows,
    report_invalid,
    scan_rows,
)
from torch_onnx_conformance.reports.summary_md import summary_markdown
from torch_onnx_conformance.reports.tolerances import report_link

STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"


def render_markdown(
    rows: Sequence[CaseResult],
    completeness: str | None = None,
    runs: Sequence[Mapping[str, Any]] = (),
    links: ExpectationLinks | None = None,
    out_dir: str | os.PathLike | None = None,
    missing: Sequence[str] = (),
) -> dict[str, str]:
    """The markdown reports, keyed by file name. No matplotlib; the disk only through
    ``links`` (the expectation entries behind xfails, linked relative to ``out_dir``)."""
    reports = {
        "summary.md": summary_markdown(rows, completeness, runs, missing),
        "ops.md": ops_markdown(rows, links, out_dir),
        "models.md": models_markdown(rows, links, out_dir),
        "matrix.md": matrix_markdown(rows),
    }
    # Every report says where the bounds its pass and fail verdicts used are listed.
    footer = f"Tolerances of every comparison: {report_link(out_dir)}.\n"
    return {name: content.rstrip("\n") + "\n\n" + footer for name, content in reports.items()}


def build_reports(
    rows: Sequence[CaseResult],
    out_dir: str | os.PathLike,
    *,
    charts: bool = True,
    missing: Sequence[str] = (),
    completeness: str | None = None,
    runs: Sequence[Mapping[str, Any]] = (),
) -> list[Path]:
    """Write summary.md, ops.md, models.md, matrix.md and charts into ``out_dir``.

    ``missing`` (collected case ids without a row) and ``completeness`` (the line saying so)
    make an incomplete run read as one; ``runs`` (run manifests) name the commit and command in
    the summary's header. Returns the written paths. Appends summary.md to
    ``$GITHUB_STEP_SUMMARY`` when it is set.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _remove_stale_outputs(out)
    written = []
    markdown = render_markdown(rows, completeness, runs, ExpectationLinks(), out, missing)
    if not charts:
        # No chart is drawn, so none may be linked.
        markdown["summary.md"] = without_chart_images(markdown["summary.md"])
    for name, content in markdown.items():
        written.append(_write_text(out / name, content))
    if charts:
        for chart in planned_charts(rows):
            written.append(draw(chart, out / chart.path))
    append_step_summary(without_chart_images(markdown["summary.md"]))
    return written


def build_from_paths(
    results: Iterable[str | os.PathLike],
    out_dir: str | os.PathLike | None,
    *,
    charts: bool = True,
    html: str | os.PathLike | None = None,
    baseline: Iterable[str | os.PathLike] | None = None,
    history: str | os.PathLike | None = None,
) -> tuple[RowsRead, list[Path]]:
    """Read rows from JSONL files or directories and build every report from them: the
    markdown reports into ``out_dir`` (when given), the dashboard into ``html`` (when given, with
    ``baseline`` rows for its diff view and an earlier ``history.jsonl``). Each line that is
    not a valid row is named on stderr and left out."""
    found = scan_rows(results)
    report_invalid(found.invalid)
    written = []
    if out_dir is not None:
        written += build_reports(
            found.rows,
            out_dir,
            charts=charts,
            missing=found.missing,
            completeness=found.completeness(),
            runs=found.runs,
        )
    if html is not None:
        from torch_onnx_conformance.reports.html import build_site

        written += build_site(
            found.rows,
            html,
            baseline=read_rows(baseline) if baseline is not None else None,
            history=history,
            runs=found.runs,
            completeness=found.completeness(),
        )
    return found, written


def without_chart_images(summary: str) -> str:
    """The summary without its chart images: for a build that draws none, and for GitHub's
    job-summary page, where relative paths do not resolve (the charts travel in the uploaded
    report artifact instead)."""
    return "\n".join(line for line in summary.splitlines() if not line.startswith("![")) + "\n"


def append_step_summary(summary: str, environ: Mapping[str, str] | None = None) -> bool:
    """Append the summary to GitHub's job summary file when the run is a GitHub Actions step."""
    target = (os.environ if environ is None else environ).get(STEP_SUMMARY_ENV)
    if not target:
        return False
    try:
        with open(target, "a", encoding="utf-8") as handle:
            handle.write(summary if summary.endswith("\n") else summary + "\n")
    except OSError as error:
        # The reports on disk are the product; a broken job-summary path must not discard them.
        print(
            f"warning: could not append to ${STEP_SUMMARY_ENV} ({target}): {error}", file=sys.stderr
        )
        return False
    return True


def _write_text(path: Path, content: str) -> Path:
    path.write_text(content, encoding="utf-8")
    return path


def _remove_stale_outputs(out: Path) -> None:
    """Drop the charts an earlier build drew, so a chart whose data vanished leaves none."""
    for chart in chart_paths():
        (out / chart).unlink(missing_ok=True)
