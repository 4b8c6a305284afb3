"""summary.md: run header, the unexpected results to triage, pass rates, exporters side by side,
error signatures (skips apart), ops and models."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from torch_onnx_conformance.reports.charts import planned_charts
from torch_onnx_conformance.reports.markdown import Table, code, details, document, heading, text
from torch_onnx_conformance.reports.rows import STATUSES, UNEXPECTED, CaseResult
from torch_onnx_conformance.reports.side_by_side import Comparison, compare_exporters
from torch_onnx_conformance.reports.signatures import error_headline
from torch_onnx_conformance.reports.tally import (
    PASSING_DEFINITION,
    count_list,
    example_message,
    fraction_with_percent,
    group_by,
    is_pass,
    is_unexpected,
    ordered,
    pass_count,
    ran,
    signature_of,
    status_cell,
    status_counts,
    subjects_passing,
)

HEADLINE_AXES = ("kind", "exporter", "shapes", "dtype", "provider", "opset")
MAX_UNEXPECTED = 200
MAX_MISSING = 200
OPS_PASSING = "ops passing"
NON_PASS_STATUSES = tuple(s for s in STATUSES if s != "pass")
MAX_DIFFERING_CASES = 50
MAX_SIGNATURES = 15


def summary_markdown(
    rows: Sequence[CaseResult],
    completeness: str | None = None,
    runs: Sequence[Mapping[str, Any]] = (),
    missing: Sequence[str] = (),
) -> str:
    """``completeness`` (``incomplete: N of M cases have results``) heads the report when the
    run stopped before every collected case had a row: the rates below cover only N, and the
    ``missing`` case ids are listed (``--resume`` runs them).
    ``runs`` are the manifests of the runs the rows came from (commit, command, start)."""
    warning = f"**{completeness}**: the run stopped early; the numbers below cover only them."
    incomplete = [warning] if completeness else []
    if not rows:
        return document(
            heading(1, "Conformance summary"),
            *incomplete,
            run_header(rows, runs),
            "No result rows were found, so there is nothing to report.",
        )
    return document(
        heading(1, "Conformance summary"),
        *incomplete,
        run_header(rows, runs),
        missing_cases(missing) if completeness else None,
        headline(rows),
        heading(2, "Unexpected results"),
        triage_section(rows),
        links(rows),
        heading(2, "Pass rate by exporter"),
        "Each row counts the cases that exporter ran (skips excluded); exporters compare like "
        "with like in the side-by-side section below.",
        by_exporter_table(rows).render(),
        heading(2, "Pass rate by axis"),
        pass_rate_table(rows).render(),
        heading(2, "Exporters side by side"),
        side_by_side_section(rows),
        heading(2, "Top error signatures"),
        signature_section(rows),
        heading(2, "Skipped cases"),
        skip_section(rows),
        heading(2, "Ops"),
        ops_headline(rows),
        *model_blocks(rows),
    )


def missing_cases(missing: Sequence[str]) -> str | None:
    if not missing:
        return None
    shown = "\n".join(f"- {code(case_id)}" for case_id in missing[:MAX_MISSING])
    more = f"\n- … and {len(missing) - MAX_MISSING} more" if len(missing) > MAX_MISSING else ""
    return details(
        f"{len(missing)} cases without a result (<code>--resume</code> runs them)", shown + more
    )


def run_header(rows: Sequence[CaseResult], runs: Sequence[Mapping[str, Any]]) -> str:
    """Which code, command and libraries produced these rows, and on what provider and opset."""
    lines = []
    commits = list(dict.fromkeys(str(run["commit"]) for run in runs if run.get("commit")))
    if commits:
        lines.append("Commit: " + ", ".join(code(commit) for commit in commits))
    started = [str(run["started"]) for run in runs if run.get("started")]
    if started:
        lines.append(
            "Run: "
            + (started[0] if len(set(started)) == 1 else f"{min(started)} to {max(started)}")
        )
    for command in dict.fromkeys(str(run["command"]) for run in runs if run.get("command")):
        lines.append("Command: " + code(command))
    versions = versions_text(rows)
    if versions:
        lines.append("Versions: " + versions)
    if rows:
        providers = ", ".join(str(v) for v in ordered({r.provider for r in rows}, "provider"))
        opsets = ", ".join(str(v) for v in sorted({r.opset for r in rows}))
        lines.append(f"Provider: {providers} · opset: {opsets}")
    if not runs:
        lines.append("(no run manifest beside these rows: commit and command unknown)")
    return "  \n".join(lines)


def triage_section(rows: Sequence[CaseResult]) -> str:
    """Every result no expectation predicted, with what it takes to look at it: the id that
    ``python -m torch_onnx_conformance repro`` takes, the stage, the message as raised, the repro folder."""
    unexpected = sorted(
        (row for row in rows if is_unexpected(row)),
        key=lambda r: (UNEXPECTED.index(r.status), r.kind != "op", r.id),
    )
    if not unexpected:
        return (
            "None: every case that ran passed or failed as its expectation entry says "
            f"({count_list(status_counts(rows), 'status')})."
        )
    table = Table(["case id", "status", "stage", "message", "repro folder"])
    for row in unexpected[:MAX_UNEXPECTED]:
        table.add(
            code(row.id),
            row.status,
            text(row.stage or ""),
            code(error_headline(row.error) or row.error_signature or _xpass_note(row)),
            code(row.repro_dir or ""),
        )
    more = len(unexpected) - MAX_UNEXPECTED
    counts = count_list(status_counts(unexpected), "status")
    intro = (
        f"{len(unexpected)} ({counts}). Re-run one with "
        "`python -m torch_onnx_conformance repro CASE_ID --results RESULTS`; the repro folder is relative "
        "to the results folder (`python RESULTS/FOLDER/repro.py` replays it without torch)."
    )
    note = f"… and {more} more; the result rows hold them all." if more > 0 else None
    return document(intro, table.render(), note).rstrip("\n")


def _xpass_note(row: CaseResult) -> str:
    if row.status == "xpass":
        return f"passed, but expected to fail: {row.expectation or 'expectation entry'}"
    return ""


def headline(rows: Sequence[CaseResult]) -> str:
    passed, total = pass_count(rows)
    counts = status_counts(rows)
    others = " · ".join(f"{status} {counts[status]}" for status in NON_PASS_STATUSES)
    line = (
        f"**{len(rows)} cases** · **pass {fraction_with_percent(passed, total)}** of those that "
        f"ran · {others}"
    )
    kinds = []
    for kind, noun in (("op", "ops"), ("model", "models")):
        kind_rows = [row for row in rows if row.kind == kind]
        if kind_rows:
            subjects = len({row.subject for row in kind_rows})
            kinds.append(f"{len(kind_rows)} {kind} cases over {subjects} {noun}")
    skips = skip_headline(rows)
    return (
        line
        + ("\n\n" + " · ".join(kinds) + "." if kinds else "")
        + ("\n\n" + skips if skips else "")
    )


def links(rows: Sequence[CaseResult]) -> str:
    items = []
    if any(row.kind == "op" for row in rows):
        items.append("[ops.md](ops.md)")
    if any(row.kind == "model" for row in rows):
        items.append("[models.md](models.md)")
    items.append("[matrix.md](matrix.md) (per opset and exporter)")
    items.append("JUnit XML (pytest's own) in the run's `RESULTS/junit.xml`")
    images = [f"![{chart.title}]({chart.path})" for chart in planned_charts(rows)]
    return "Details: " + " · ".join(items) + ("\n\n" + "\n".join(images) if images else "")


def by_exporter_table(rows: Sequence[CaseResult]) -> Table:
    """Each exporter's pass rate per kind and dtype, static and dynamic side by side: the
    numbers a reader looks for first (the axis table below mixes exporters)."""
    shapes = ordered({row.shapes for row in rows}, "shapes")
    table = Table(["exporter", "kind", "dtype", *shapes])
    groups = group_by(rows, lambda r: (r.exporter, r.kind, r.dtype))
    exporters = ordered({row.exporter for row in rows}, "exporter")
    kinds = ordered({row.kind for row in rows}, "kind")
    dtypes = ordered({row.dtype for row in rows}, "dtype")
    for key in ((e, k, d) for e in exporters for k in kinds for d in dtypes):
        if key not in groups:
            continue
        by_shapes = group_by(groups[key], lambda r: r.shapes)
        cells = [
            fraction_with_percent(*pass_count(by_shapes[s])) if s in by_shapes else ""
            for s in shapes
        ]
        table.add(*(text(part) for part in key), *cells)
    return table


def pass_rate_table(rows: Sequence[CaseResult]) -> Table:
    table = Table(["axis", "value", "pass", *NON_PASS_STATUSES])
    for axis in HEADLINE_AXES:
        groups = group_by(rows, lambda r, axis=axis: getattr(r, axis))
        for value in ordered(groups, axis):
            group = groups[value]
            counts = status_counts(group)
            table.add(
                axis,
                text(f"opset{value}" if axis == "opset" else value),
                fraction_with_percent(*pass_count(group)),
                *(str(counts[status]) for status in NON_PASS_STATUSES),
            )
    return table


def side_by_side_section(rows: Sequence[CaseResult]) -> str:
    comparisons = compare_exporters(rows)
    if not comparisons:
        exporters = ", ".join(f"`{e}`" for e in ordered({r.exporter for r in rows}, "exporter"))
        return (
            f"Only one exporter ({exporters}) ran each kind of case. Run with "
            "`--exporter ours --exporter torch-dynamo` to compare exporters on the same cases."
        )
    exporters = ordered({e for c in comparisons for e in c.exporters}, "exporter")
    counts = Table(["kind", "shared cases", "skipped", *exporters])
    subjects = Table(["kind", *(f"{e}: passing" for e in exporters)])
    for comparison in comparisons:
        shared, judged = len(comparison.cases), len(comparison.judged)
        cells = [
            fraction_with_percent(comparison.pass_count(e), judged)
            if e in comparison.exporters
            else ""
            for e in exporters
        ]
        counts.add(comparison.kind, str(shared), str(shared - judged), *cells)
        subjects.add(
            f"{comparison.kind}s",
            *(
                fraction_with_percent(*comparison.subjects_passing(e))
                if e in comparison.exporters
                else ""
                for e in exporters
            ),
        )
    intro = (
        "Only cases that every exporter ran are counted (the same case id apart from the "
        "exporter), so the numbers compare like with like. Pass rates leave out the cases "
        "any exporter skipped (a skip judges no exporter); the second table counts the ops "
        "(models) that pass on those cases. " + PASSING_DEFINITION
    )
    return document(
        intro, counts.render(), subjects.render(), *(_differences(c) for c in comparisons)
    ).rstrip("\n")


def _differences(comparison: Comparison) -> str:
    title = heading(3, f"{comparison.kind.capitalize()} cases where the exporters disagree")
    pairs = [
        f"- `{winner}` passes, `{loser}` does not: {comparison.only_passes(winner, loser)}"
        for winner in comparison.exporters
        for loser in comparison.exporters
        if winner != loser
    ]
    keys = comparison.differing_keys()
    if not keys:
        return document(
            title,
            "\n".join(pairs),
            "No shared case passes with one exporter and fails with another.",
        ).rstrip("\n")
    table = Table(["case id (repro)", *comparison.exporters])
    for key in keys[:MAX_DIFFERING_CASES]:
        by_exporter = comparison.cases[key]
        # The full id of the exporter that did not pass: the one ``repro`` is wanted for.
        failing = next(row for row in by_exporter.values() if not is_pass(row))
        table.add(code(failing.id), *(status_cell(by_exporter[e]) for e in comparison.exporters))
    more = len(keys) - MAX_DIFFERING_CASES
    note = f"… and {more} more; the result rows hold them all." if more > 0 else None
    return document(title, "\n".join(pairs), table.render(), note).rstrip("\n")


def signature_counts(
    rows: Sequence[CaseResult],
) -> list[tuple[tuple[str, str, str], list[CaseResult]]]:
    """Rows that ran and did not pass, grouped by (exporter, stage, signature), most frequent
    first. Skips are counted apart (``skip_section``): they judge no exporter."""
    groups = group_by(
        (row for row in ran(rows) if not is_pass(row) and signature_of(row)),
        lambda r: (r.exporter, r.stage or "", signature_of(r)),
    )
    return sorted(groups.items(), key=lambda item: (-len(item[1]), item[0]))


def signature_section(rows: Sequence[CaseResult]) -> str:
    ranked = signature_counts(rows)
    if not ranked:
        return "No failing case recorded an error."
    table = Table(["count", "exporter", "stage", "statuses", "signature", "example", "its message"])
    for (exporter, stage, signature), group in ranked[:MAX_SIGNATURES]:
        example = min(group, key=lambda row: row.id)
        table.add(
            str(len(group)),
            text(exporter),
            text(stage),
            count_list(status_counts(group), "status"),
            code(signature),
            code(example.id),
            code(example_message(example)),
        )
    more = len(ranked) - MAX_SIGNATURES
    note = f"… and {more} rarer signatures." if more > 0 else None
    return document(table.render(), note).rstrip("\n")


def skip_section(rows: Sequence[CaseResult]) -> str:
    skipped = [row for row in rows if row.status == "skip"]
    if not skipped:
        return "No case was skipped."
    table = Table(["count", "reason", "example", "its message"])
    for reason, group in skip_reasons(skipped):
        example = min(group, key=lambda row: row.id)
        table.add(
            str(len(group)),
            code(reason or "(no reason recorded)"),
            code(example.id),
            code(example_message(example)),
        )
    intro = (
        f"{len(skipped)} cases did not run (eager rejects the sample, or no dim can be made "
        "dynamic); they are in no pass rate and no signature count above."
    )
    return document(intro, table.render()).rstrip("\n")


def skip_reasons(skipped: Sequence[CaseResult]) -> list[tuple[str, list[CaseResult]]]:
    """Skipped rows grouped by their (masked) reason, most frequent first."""
    by_reason = group_by(skipped, signature_of)
    return sorted(by_reason.items(), key=lambda item: (-len(item[1]), item[0]))


#: How many skip reasons the headline names.
HEADLINE_SKIP_REASONS = 3


def skip_headline(rows: Sequence[CaseResult]) -> str | None:
    """Why cases were skipped (the top reasons with counts) and for how many ops dynamic shapes
    were tested at all: a dynamic case whose sample has no dim to vary is skipped."""
    skipped = [row for row in rows if row.status == "skip"]
    if not skipped:
        return None
    ranked = skip_reasons(skipped)
    reasons = "; ".join(
        f"{len(group)} {code(reason or '(no reason recorded)')}"
        for reason, group in ranked[:HEADLINE_SKIP_REASONS]
    )
    more = len(ranked) - HEADLINE_SKIP_REASONS
    line = f"**{len(skipped)} skipped**: {reasons}" + (
        f"; {more} other reasons (see Skipped cases)." if more > 0 else "."
    )
    dynamic = group_by((r for r in rows if r.kind == "op" and r.shapes == "dynamic"), _subject)
    if dynamic:
        tested = sum(1 for group in dynamic.values() if ran(group))
        untested = len(dynamic) - tested
        line += (
            f" Dynamic shapes were tested for {tested} of the {len(dynamic)} ops with dynamic "
            + (
                f"cases; for the other {untested} every dynamic case was skipped "
                "(`skip×N` in their dynamic column of [ops.md](ops.md))."
                if untested
                else "cases."
            )
        )
    return line


def _subject(row: CaseResult) -> str:
    return row.subject


def ops_headline(rows: Sequence[CaseResult]) -> str:
    op_rows = [row for row in rows if row.kind == "op"]
    if not op_rows:
        return "No op cases in these rows."
    table = Table(["exporter", OPS_PASSING, "op cases passing"])
    by_exporter = group_by(op_rows, lambda r: r.exporter)
    for exporter in ordered(by_exporter, "exporter"):
        exporter_rows = by_exporter[exporter]
        table.add(
            text(exporter),
            fraction_with_percent(*subjects_passing(exporter_rows)),
            fraction_with_percent(*pass_count(exporter_rows)),
        )
    return document(PASSING_DEFINITION, table.render()).rstrip("\n")


def model_family_table(rows: Sequence[CaseResult]) -> Table:
    """Per model family: pass counts for each exporter side by side, static and dynamic."""
    model_rows = [row for row in rows if row.kind == "model"]
    exporters = ordered((row.exporter for row in model_rows), "exporter")
    shapes = ordered((row.shapes for row in model_rows), "shapes")
    columns = [(e, s) for e in exporters for s in shapes]
    table = Table(["family", *(f"{e} {s}" for e, s in columns)])
    groups = group_by(model_rows, lambda r: (r.family, r.exporter, r.shapes))

    def cell(family: str | None, exporter: str, shape: str) -> str:
        if family is None:
            group = [r for r in model_rows if (r.exporter, r.shapes) == (exporter, shape)]
        else:
            group = groups.get((family, exporter, shape), [])
        return fraction_with_percent(*pass_count(group)) if group else ""

    for family in sorted({row.family for row in model_rows}):
        table.add(text(family), *(cell(family, e, s) for e, s in columns))
    table.add("**all**", *(cell(None, e, s) for e, s in columns))
    return table


def model_blocks(rows: Sequence[CaseResult]) -> list[str]:
    if not any(row.kind == "model" for row in rows):
        return []
    return [
        heading(2, "Models"),
        "Pass counts per model family, each exporter on static and dynamic shapes. "
        "Per-model detail: [models.md](models.md).",
        model_family_table(rows).render(),
    ]


#: The libraries the header names first, in this order; any other recorded version follows.
HEADER_VERSIONS = ("torch", "onnx", "onnxruntime", "python")


def versions_text(rows: Sequence[CaseResult]) -> str | None:
    seen: dict[str, Counter[str]] = {}
    for row in rows:
        for name, version in (row.versions or {}).items():
            seen.setdefault(name, Counter())[str(version)] += 1
    if not seen:
        return None
    names = [n for n in HEADER_VERSIONS if n in seen] + sorted(set(seen) - set(HEADER_VERSIONS))
    return " · ".join(f"{name} {' / '.join(sorted(seen[name]))}" for name in names)
