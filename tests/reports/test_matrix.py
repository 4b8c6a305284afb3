"""matrix.md: pass counts per opset and exporter from the rows of several runs."""

from __future__ import annotations

from tests.reports.test_reports import tables as _tables
from torch_onnx_conformance.reports import build_reports
from torch_onnx_conformance.reports.matrix_md import matrix_markdown
from torch_onnx_conformance.reports.rows import CaseResult


def _row(op, opset, status, exporter="ours", sample=0, shapes="static", dtype="f32"):
    return CaseResult(
        id=f"op::{op}::s{sample:03d}::{dtype}::{shapes}::opset{opset}::cpu::{exporter}",
        kind="op",
        subject=op,
        family="x",
        dtype=dtype,
        shapes=shapes,
        opset=opset,
        provider="cpu",
        exporter=exporter,
        status=status,
    )


def _rows_of_three_runs():
    rows = []
    # ours at opsets 17, 20, 23: abs passes everywhere, grid fails unexpectedly at 17, is an
    # expected failure at 20, rand is skipped at 23 and crashes at 17.
    for opset in (17, 20, 23):
        rows.append(_row("abs", opset, "pass"))
        rows.append(_row("abs", opset, "pass", shapes="dynamic"))
    rows += [_row("grid", 17, "fail"), _row("grid", 20, "xfail"), _row("grid", 23, "pass")]
    rows += [_row("rand", 17, "crash"), _row("rand", 20, "pass"), _row("rand", 23, "skip")]
    # torch.onnx ran opset 20 only, and one case more than ours there.
    rows += [
        _row("abs", 20, "pass", "torch-dynamo"),
        _row("abs", 20, "fail", "torch-dynamo", shapes="dynamic"),
        _row("grid", 20, "xpass", "torch-dynamo"),
        _row("extra", 20, "pass", "torch-dynamo"),
    ]
    return rows


def test_one_line_per_opset_with_each_exporter_beside_the_other():
    md = matrix_markdown(_rows_of_three_runs())
    assert "Opsets: 17, 20, 23." in md
    table = {line["opset"]: line for line in _tables(md)[0]}
    assert list(table) == ["17", "20", "23"]
    assert table["17"]["ours pass"] == "2/4 (50%)"
    assert table["17"]["ours unexpected"] == "2"  # the failure and the crash
    assert table["20"]["ours pass"] == "3/4 (75%)"  # the xfail ran and did not pass
    assert table["20"]["ours unexpected"] == "0"
    assert table["23"]["ours pass"] == "3/3 (100%)"  # the skip is in no denominator
    assert table["20"]["torch.onnx (dynamo) pass"] == "2/4 (50%)"
    assert table["20"]["torch.onnx (dynamo) unexpected"] == "2"  # the failure and the xpass
    # No torch.onnx row at 17: its cells are empty, not zero.
    assert table["17"]["torch.onnx (dynamo) pass"] == ""
    # The cases column counts a case once, whichever exporters ran it.
    assert table["20"]["cases"] == "5"


def test_like_with_like_over_the_cases_every_exporter_ran():
    md = matrix_markdown(_rows_of_three_runs())
    shared = {line["opset"]: line for line in _tables(md)[1]}
    assert list(shared) == ["20"]
    assert shared["20"]["cases"] == "3"  # extra (torch.onnx only) and rand (ours only) left out
    assert shared["20"]["ours pass"] == "2/3 (67%)"
    assert shared["20"]["torch.onnx (dynamo) pass"] == "1/3 (33%)"


def test_axes_that_vary_split_the_lines():
    rows = [_row("abs", 20, "pass"), _row("abs", 20, "fail", dtype="f16")]
    (table,) = _tables(matrix_markdown(rows))
    assert [(line["dtype"], line["opset"], line["ours pass"]) for line in table] == [
        ("f32", "20", "1/1 (100%)"),
        ("f16", "20", "0/1 (0%)"),
    ]


def test_no_rows_say_so_and_the_build_writes_the_page(tmp_path):
    assert "No result rows" in matrix_markdown([])
    build_reports(_rows_of_three_runs(), tmp_path, charts=False)
    assert "| 23 |" in (tmp_path / "matrix.md").read_text(encoding="utf-8")
    assert "(matrix.md)" in (tmp_path / "summary.md").read_text(encoding="utf-8")
