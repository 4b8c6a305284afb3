"""ops.md: ops with unexpected results first, then expected failures, each grouped by family;
passing ops in a collapsed table. Cells are pass/total per dtype × shapes × provider × exporter."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torch_onnx_conformance.reports.expectation_links import ExpectationLinks, xfail_reason_cells
from torch_onnx_conformance.reports.markdown import Table, code, details, document, heading, text
from torch_onnx_conformance.reports.rows import CaseResult
from torch_onnx_conformance.reports.tally import (
    PASSING_DEFINITION,
    cell_fraction,
    combo_label,
    combo_sort_key,
    example_message,
    example_of,
    fraction_with_percent,
    group_by,
    is_unexpected,
    pass_count,
    ran,
    stage_breakdown,
    subject_verdict,
    subjects_passing,
    top_signature,
    varying_axes,
)

COMBO_AXES = ("dtype", "shapes", "provider", "exporter")


def combo_axes(rows: Sequence[CaseResult]) -> list[str]:
    """dtype × shapes × provider × exporter, plus opset when the rows hold several opsets."""
    return [*COMBO_AXES, *varying_axes(rows, ("opset",))]


class _Columns:
    """The pass/total columns every ops table shares, fixed over all op rows so that tables in
    different sections line up."""

    def __init__(self, op_rows: Sequence[CaseResult]):
        self.axes = combo_axes(op_rows)
        self.combos = sorted(
            {self.combo_of(row) for row in op_rows}, key=lambda c: combo_sort_key(c, self.axes)
        )

    def combo_of(self, row: CaseResult) -> tuple:
        return tuple(getattr(row, axis) for axis in self.axes)

    def headers(self) -> list[str]:
        return [combo_label(c, self.axes) for c in self.combos]

    def cells(self, op_rows: Sequence[CaseResult]) -> list[str]:
        by_combo = group_by(op_rows, self.combo_of)
        return [cell_fraction(by_combo[c]) if c in by_combo else "" for c in self.combos]


def _table(
    ops: dict[str, list[CaseResult]],
    columns: _Columns,
    extra_headers: Sequence[str],
    extra_cells: Callable[[list[CaseResult]], list[str]],
    family_column: bool = False,
) -> Table:
    table = Table(["op", *(["family"] if family_column else []), *columns.headers(), "all",
                   *extra_headers])  # fmt: skip
    for op, group in sorted(ops.items()):
        family = [text(", ".join(sorted({row.family for row in group})))] if family_column else []
        table.add(
            code(op),
            *family,
            *columns.cells(group),
            fraction_with_percent(*pass_count(group)),
            *extra_cells(group),
        )
    return table


def _by_family(ops: dict[str, list[CaseResult]], render: Callable[[dict], Table]) -> str:
    families = group_by(ops.items(), lambda item: item[1][0].family)
    blocks = []
    for family, items in sorted(families.items()):
        blocks += [heading(3, f"{family} ({len(items)})"), render(dict(items)).render()]
    return document(*blocks).rstrip("\n")


def _failure_cells(group: list[CaseResult]) -> list[str]:
    top = top_signature(group)
    example = example_of(ran(group), top[0]) if top else None
    unexpected = sorted(row.id for row in group if is_unexpected(row))
    return [
        stage_breakdown(group),
        f"{code(example_message(example) or top[0])} ×{top[1]}" if top and example else "",
        code(unexpected[0]) + (f" (+{len(unexpected) - 1})" if len(unexpected) > 1 else "")
        if unexpected
        else "",
    ]


def _reason_cells(links: ExpectationLinks | None, out_dir) -> Callable[[list], list[str]]:
    return lambda group: [stage_breakdown(group), *xfail_reason_cells(group, links, out_dir)]


def ops_markdown(
    rows: Sequence[CaseResult],
    links: ExpectationLinks | None = None,
    out_dir: str | None = None,
) -> str:
    """``links`` finds the expectation entry behind each xfail; its link is relative to
    ``out_dir``, the folder ops.md is written to."""
    op_rows = [row for row in rows if row.kind == "op"]
    if not op_rows:
        return document(heading(1, "Ops"), "No op cases in these rows.")
    ops = group_by(op_rows, lambda r: r.subject)
    verdicts = group_by(ops, lambda op: subject_verdict(ops[op]))
    passing, judged = subjects_passing(op_rows)
    columns = _Columns(op_rows)
    intro = (
        f"{len(ops)} ops, {len(op_rows)} cases; {passing} of the {judged} ops with a case that "
        f"ran pass. {PASSING_DEFINITION} Each cell is passed/total cases for one "
        "dtype × shapes × provider × exporter (a skip is in no denominator: `+N skip` beside it, "
        "`skip×N` where none ran, e.g. a dynamic column whose sample has no dim to vary); `all` "
        "sums the row."
    )

    def section(verdict: str) -> dict[str, list[CaseResult]]:
        return {op: ops[op] for op in verdicts.get(verdict, [])}

    unexpected, expected = section("unexpected"), section("expected failures")
    blocks = [heading(1, "Ops"), intro]
    blocks.append(heading(2, f"Ops with unexpected results ({len(unexpected)})"))
    blocks.append(
        _by_family(
            unexpected,
            lambda part: _table(
                part,
                columns,
                ["failing stages", "top error (an example, as raised)", "unexpected case"],
                _failure_cells,
            ),
        )  # fmt: skip
        if unexpected
        else "None."
    )
    blocks.append(heading(2, f"Ops with expected failures only ({len(expected)})"))
    blocks.append(
        "Every failure of these ops is an `xfail`: covered by an entry of "
        "`torch_onnx_conformance/conformance/expectations/<exporter>.toml` with the reason shown."
    )
    blocks.append(
        _by_family(
            expected,
            lambda part: _table(
                part, columns, ["failing stages", "reason", "entry"], _reason_cells(links, out_dir)
            ),
        )
        if expected
        else "None."
    )
    passing_ops = section("passing")
    if passing_ops:
        table = _table(passing_ops, columns, [], lambda group: [], family_column=True)
        blocks.append(details(f"Passing ops ({len(passing_ops)})", table.render()))
    not_run = sorted(section("not run"))
    if not_run:
        blocks.append(
            f"Not run ({len(not_run)}: every case skipped): "
            + ", ".join(code(op) for op in not_run)
        )
    return document(*blocks)
