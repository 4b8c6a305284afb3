"""ops.md: one row per op, pass/total for every dtype × shapes × provider × exporter run."""

from __future__ import annotations

from collections.abc import Sequence

from reports.markdown import Table, code, document, heading, text
from reports.rows import CaseResult
from reports.tally import (
    PASSING_DEFINITION,
    combo_label,
    combo_sort_key,
    fraction,
    fraction_with_percent,
    group_by,
    pass_count,
    stage_breakdown,
    subjects_passing,
    top_signature,
    varying_axes,
)

COMBO_AXES = ("dtype", "shapes", "provider", "exporter")


def combo_axes(rows: Sequence[CaseResult]) -> list[str]:
    """dtype × shapes × provider × exporter, plus opset when the rows hold several opsets."""
    return [*COMBO_AXES, *varying_axes(rows, ("opset",))]


def ops_table(rows: Sequence[CaseResult]) -> Table:
    op_rows = [row for row in rows if row.kind == "op"]
    axes = combo_axes(op_rows)

    def combo_of(row: CaseResult) -> tuple:
        return tuple(getattr(row, axis) for axis in axes)

    combos = sorted({combo_of(row) for row in op_rows}, key=lambda c: combo_sort_key(c, axes))
    table = Table(
        [
            "op",
            "family",
            *(combo_label(c, axes) for c in combos),
            "all",
            "failing stages",
            "top error signature",
        ]
    )
    for op, op_group in sorted(group_by(op_rows, lambda r: r.subject).items()):
        by_combo = group_by(op_group, combo_of)
        cells = [fraction(*pass_count(by_combo[c])) if c in by_combo else "" for c in combos]
        top = top_signature(op_group)
        table.add(
            code(op),
            text(", ".join(sorted({row.family for row in op_group}))),
            *cells,
            fraction_with_percent(*pass_count(op_group)),
            stage_breakdown(op_group),
            f"{code(top[0])} ×{top[1]}" if top else "",
        )
    return table


def ops_markdown(rows: Sequence[CaseResult]) -> str:
    op_rows = [row for row in rows if row.kind == "op"]
    if not op_rows:
        return document(heading(1, "Ops"), "No op cases in these rows.")
    ops = group_by(op_rows, lambda r: r.subject)
    passing, judged = subjects_passing(op_rows)
    intro = (
        f"{len(ops)} ops, {len(op_rows)} cases; {passing} of the {judged} ops with a case that "
        f"ran pass. {PASSING_DEFINITION} "
        "Each cell is passed/total cases for one dtype × shapes × provider × exporter; "
        "`all` sums the row. Only `pass` counts as passed."
    )
    return document(heading(1, "Ops"), intro, ops_table(op_rows).render())
