"""The report builder, checked cell by cell against a fixed, hand-written set of rows.

tests/data/rows_fixture.jsonl holds 38 lines: 22 op rows (one id twice: a failed run, then a
passing re-run at the end) and 16 model rows, for the exporters ``ours`` and ``torch-dynamo``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from torch_onnx_conformance.conformance.case import parse_case
from torch_onnx_conformance.reports import (
    build_reports,
    normalise_error,
    read_rows,
    render_markdown,
)
from torch_onnx_conformance.reports.__main__ import main
from torch_onnx_conformance.reports.charts import error_points, model_times, stage_counts
from torch_onnx_conformance.reports.rows import CaseResult
from torch_onnx_conformance.reports.signatures import MAX_SIGNATURE_CHARS
from torch_onnx_conformance.reports.summary_md import MAX_DIFFERING_CASES, summary_markdown

FIXTURE = Path(__file__).parents[1] / "data" / "rows_fixture.jsonl"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
OPS = ("__getitem__", "add", "nn.functional.conv2d", "sum")
MODELS = ("bert", "fasterrcnn_mobilenet_v3_large_fpn", "lstm_bidir", "resnet18")


@pytest.fixture(scope="module")
def rows() -> list[CaseResult]:
    return read_rows([FIXTURE])


@pytest.fixture(scope="module")
def markdown(rows) -> dict[str, str]:
    return render_markdown(rows)


@pytest.fixture(scope="module")
def built(rows, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("reports")
    build_reports(rows, out)
    return out


# --- markdown parsing helpers -------------------------------------------------------------


def section(md: str, title: str) -> str:
    """The text under the heading ``title`` up to the next heading of the same or higher level."""
    match = re.search(rf"^(#+) {re.escape(title)}$", md, re.MULTILINE)
    assert match, f"no heading {title!r} in:\n{md}"
    level = len(match.group(1))
    rest = md[match.end() :]
    end = re.search(rf"^#{{1,{level}}} ", rest, re.MULTILINE)
    return rest[: end.start()] if end else rest


_CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def split_cells(line: str) -> list[str]:
    cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
    return [
        _CODE_SPAN.sub(lambda m: m.group(2).strip(), c.strip()).replace("\\|", "|") for c in cells
    ]


def tables(md: str) -> list[list[dict[str, str]]]:
    """Every table in ``md`` as a list of {header: cell} rows."""
    found, lines = [], md.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("| ---"):
            headers = split_cells(lines[i])
            i += 2
            body = []
            while i < len(lines) and lines[i].startswith("|"):
                cells = split_cells(lines[i])
                assert len(cells) == len(headers), lines[i]
                body.append(dict(zip(headers, cells, strict=True)))
                i += 1
            found.append(body)
        else:
            i += 1
    return found


def only_table(md: str) -> list[dict[str, str]]:
    found = tables(md)
    assert len(found) == 1, f"expected one table, found {len(found)}"
    return found[0]


def by(table: list[dict[str, str]], *columns: str) -> dict:
    keyed = {}
    for row in table:
        key = tuple(row[c] for c in columns)
        keyed[key[0] if len(key) == 1 else key] = row
    return keyed


# --- rows -----------------------------------------------------------------------------------


def test_fixture_reads_with_last_row_winning(rows):
    assert len(rows) == 37  # 38 lines, one id repeated
    rerun = [r for r in rows if r.id == "op::add::s000::f32::static::opset20::cpu::ours"]
    assert [r.status for r in rerun] == ["pass"]


def test_torn_jsonl_line_is_skipped(tmp_path):
    torn = tmp_path / "rows.jsonl"
    torn.write_text(FIXTURE.read_text() + '{"id": "op::add::s009::f32::sta', encoding="utf-8")
    assert len(read_rows([tmp_path])) == 37
    out = tmp_path / "out"
    assert main(["build", str(torn), "--out", str(out), "--no-charts"]) == 0
    assert "**37 cases**" in (out / "summary.md").read_text()


# --- summary.md -----------------------------------------------------------------------------


def test_headline_counts_every_status(markdown):
    first_lines = markdown["summary.md"].split("## ")[0]
    assert (
        "**37 cases** · **pass 23/36 (64%)** of those that ran · fail 7 · xfail 2 · xpass 1 · skip 1 · "
        "crash 1 · timeout 1 · vacuous 1"
    ) in first_lines
    assert "21 op cases over 4 ops · 16 model cases over 4 models." in first_lines


def test_pass_rate_per_axis(markdown):
    table = by(only_table(section(markdown["summary.md"], "Pass rate by axis")), "axis", "value")
    assert table["exporter", "ours"]["pass"] == "14/19 (74%)"
    assert table["exporter", "torch-dynamo"]["pass"] == "9/17 (53%)"
    assert table["shapes", "static"]["pass"] == "15/19 (79%)"
    assert table["shapes", "dynamic"]["pass"] == "8/17 (47%)"
    assert table["dtype", "f32"]["pass"] == "22/34 (65%)"
    assert table["dtype", "f16"]["pass"] == "1/2 (50%)"
    assert table["provider", "cpu"]["pass"] == "23/36 (64%)"
    assert table["kind", "op"]["pass"] == "12/20 (60%)"
    assert table["kind", "model"]["vacuous"] == "1"
    assert table["exporter", "ours"]["crash"] == "1"
    assert table["exporter", "ours"]["timeout"] == "1"
    assert table["exporter", "ours"]["xpass"] == "1"
    assert table["exporter", "torch-dynamo"]["xfail"] == "2"


def test_side_by_side_counts_only_cases_every_exporter_ran(markdown):
    text = section(markdown["summary.md"], "Exporters side by side")
    shared = by(tables(text)[0], "kind")
    # sum (ours only) and conv2d f16 (ours only) are left out of the op comparison.
    assert shared["op"] == {
        "kind": "op",
        "shared cases": "9",
        "skipped": "0",
        "ours": "6/9 (67%)",
        "torch-dynamo": "5/9 (56%)",
    }
    assert shared["model"]["ours"] == "7/8 (88%)"
    assert shared["model"]["torch-dynamo"] == "4/8 (50%)"


def test_side_by_side_lists_exactly_the_differing_cases(markdown):
    text = section(markdown["summary.md"], "Exporters side by side")
    ops = only_table(section(text, "Op cases where the exporters disagree"))
    # The id is the failing exporter's full id: the one `python -m torch_onnx_conformance repro` takes.
    assert {row["case id (repro)"]: (row["ours"], row["torch-dynamo"]) for row in ops} == {
        "op::add::s000::f16::static::opset20::cpu::torch-dynamo": ("pass", "fail@compare"),
        "op::add::s001::f32::dynamic::opset20::cpu::torch-dynamo": ("pass", "fail@second-shape"),
        "op::nn.functional.conv2d::s000::f32::dynamic::opset20::cpu::ours": (
            "fail@compare",
            "pass",
        ),
    }
    for row in ops:
        assert parse_case(row["case id (repro)"]).id == row["case id (repro)"]
    assert "`ours` passes, `torch-dynamo` does not: 2" in text
    assert "`torch-dynamo` passes, `ours` does not: 1" in text
    models = only_table(section(text, "Model cases where the exporters disagree"))
    # fasterrcnn dynamic fails with both exporters, so it is no disagreement.
    assert [row["case id (repro)"] for row in models] == [
        "model::synthetic/lstm_bidir::f32::dynamic::opset20::cpu::torch-dynamo::opt",
        "model::torchvision/fasterrcnn_mobilenet_v3_large_fpn::f32::static::opset20::cpu::torch-dynamo::opt",
        "model::transformers/bert::f32::dynamic::opset20::cpu::torch-dynamo::opt",
    ]
    assert models[2]["torch-dynamo"] == "vacuous@compare"  # vacuous is never a pass


def test_side_by_side_caps_the_list_of_differences():
    rows = []
    for sample in range(MAX_DIFFERING_CASES + 7):
        for exporter, status in (("ours", "pass"), ("torch-dynamo", "fail")):
            rows.append(
                CaseResult(
                    id=f"op::neg::s{sample:03d}::f32::static::opset20::cpu::{exporter}",
                    kind="op", subject="neg", family="elementwise", dtype="f32",
                    shapes="static", opset=20, provider="cpu", exporter=exporter,
                    status=status, stage=None if status == "pass" else "compare",
                )
            )  # fmt: skip
    text = section(summary_markdown(rows), "Op cases where the exporters disagree")
    assert len(only_table(text)) == MAX_DIFFERING_CASES
    assert "… and 7 more" in text


def test_single_exporter_explains_how_to_compare(rows):
    ours_only = [r for r in rows if r.exporter == "ours"]
    text = section(summary_markdown(ours_only), "Exporters side by side")
    assert "--exporter ours --exporter torch-dynamo" in text
    assert not tables(text)


def test_top_error_signatures_count_per_exporter_stage_and_signature(markdown):
    table = only_table(section(markdown["summary.md"], "Top error signatures"))
    counts = {(r["exporter"], r["stage"], r["signature"]): r["count"] for r in table}
    assert counts == {
        ("torch-dynamo", "export", "Unsupported: data-dependent index"): "2",
        (
            "torch-dynamo",
            "export",
            "UserError: Could not guard on data-dependent expression Eq(<SYM>, <N>)",
        ): "2",
        ("ours", "compare", "AssertionError: Tensor-likes are not close!"): "1",
        ("torch-dynamo", "compare", "AssertionError: Tensor-likes are not close!"): "1",
        ("ours", "export", "Timeout: case exceeded <N> s"): "1",  # derived from the error text
        ("ours", "run", "Fatal Python error: Segmentation fault"): "1",
        ("ours", "second-shape", "AssertionError: second shape (<SHAPE>) gave wrong values"): "1",
        ("torch-dynamo", "compare", "eager output is near-constant (std <N> < <N>)"): "1",
        ("torch-dynamo", "second-shape", "AssertionError: second shape [<SHAPE>] gave wrong values"): "1",
        (
            "torch-dynamo",
            "second-shape",
            "RuntimeException: [ONNXRuntimeError] : <N> : RUNTIME_EXCEPTION : Non-zero status code "
            "returned while running LSTM node. Name:'<NAME>' Status Message: sequence…",
        ): "1",
    }  # fmt: skip
    assert [r["count"] for r in table[:2]] == ["2", "2"]  # most frequent first
    assert table[0]["statuses"] == "xfail×2"


def test_ops_headline_counts_ops_with_every_case_passing(markdown):
    table = by(only_table(section(markdown["summary.md"], "Ops")), "exporter")
    assert table["ours"]["ops passing"] == "1/4 (25%)"  # only add
    assert table["ours"]["op cases passing"] == "7/11 (64%)"
    assert table["torch-dynamo"]["ops passing"] == "1/3 (33%)"  # only conv2d


def test_model_headline_puts_exporters_side_by_side_per_family(markdown):
    table = only_table(section(markdown["summary.md"], "Models"))
    assert list(table[0]) == [
        "family",
        "ours static",
        "ours dynamic",
        "torch-dynamo static",
        "torch-dynamo dynamic",
    ]
    families = by(table, "family")
    assert families["torchvision"]["ours dynamic"] == "1/2 (50%)"
    assert families["transformers"]["torch-dynamo dynamic"] == "0/1 (0%)"  # the vacuous bert
    assert families["**all**"] == {
        "family": "**all**",
        "ours static": "4/4 (100%)",
        "ours dynamic": "3/4 (75%)",
        "torch-dynamo static": "3/4 (75%)",
        "torch-dynamo dynamic": "1/4 (25%)",
    }


def test_summary_links_the_other_reports(markdown):
    summary = markdown["summary.md"]
    for target in (
        "(ops.md)",
        "(models.md)",
        *(f"(charts/{name}.png)" for name in CHARTS),
    ):
        assert target in summary


def test_no_model_rows_means_no_model_section(rows):
    summary = summary_markdown([r for r in rows if r.kind == "op"])
    assert "## Models" not in summary
    assert "models.md" not in summary


def test_empty_rows_say_so(tmp_path):
    build_reports([], tmp_path, charts=False)
    assert "No result rows" in (tmp_path / "summary.md").read_text()
    assert not list(tmp_path.glob("junit/**/*.xml"))


# --- ops.md ---------------------------------------------------------------------------------


def test_ops_table_cells(markdown):
    # Every fixture op has an unexpected result: one table under the elementwise... headings.
    unexpected = section(markdown["ops.md"], "Ops with unexpected results (4)")
    table = by([row for found in tables(unexpected) for row in found], "op")
    assert sorted(table) == sorted(OPS)
    assert "### elementwise (1)" in unexpected and "### nn (1)" in unexpected
    add = table["add"]
    assert add["unexpected case"] == "op::add::s000::f16::static::opset20::cpu::torch-dynamo (+1)"
    assert add["f32 static cpu ours"] == "2/2"
    assert add["f32 dynamic cpu torch-dynamo"] == "1/2"
    assert add["f16 static cpu torch-dynamo"] == "0/1"
    assert add["all"] == "8/10 (80%)"
    assert add["failing stages"] == "compare×1, second-shape×1"
    conv = table["nn.functional.conv2d"]
    assert conv["f16 static cpu ours"] == "skip×1"  # a skip did not run: in no denominator
    assert conv["f16 static cpu torch-dynamo"] == ""  # never ran
    assert conv["all"] == "3/4 (75%)"
    getitem = table["__getitem__"]
    assert getitem["all"] == "0/4 (0%)"
    assert getitem["failing stages"] == "export×3, run×1"
    assert getitem["top error (an example, as raised)"] == "Unsupported: data-dependent index ×2"
    assert table["sum"]["f32 dynamic cpu ours"] == "0/1"  # an unexpected pass fails the case


def test_ops_table_adds_opset_columns_only_when_opsets_vary(rows):
    op_rows = [r for r in rows if r.kind == "op"]
    assert not any("opset" in h for h in tables(render_markdown(op_rows)["ops.md"])[0][0])
    extra = CaseResult(
        id="op::add::s000::f32::static::opset18::cpu::ours", kind="op", subject="add",
        family="elementwise", dtype="f32", shapes="static", opset=18, provider="cpu",
        exporter="ours", status="pass",
    )  # fmt: skip
    found = tables(render_markdown([*op_rows, extra])["ops.md"])
    table = by([row for rows_of_table in found for row in rows_of_table], "op")
    assert table["add"]["f32 static cpu ours opset18"] == "1/1"
    assert table["add"]["f32 static cpu ours opset20"] == "2/2"


# --- models.md ------------------------------------------------------------------------------


def test_models_table_cells(markdown):
    models_md = markdown["models.md"]
    table = by([row for found in tables(models_md) for row in found], "model")
    assert sorted(table) == sorted(MODELS)
    unexpected = only_table(section(models_md, "Models with unexpected results (2)"))
    assert [row["model"] for row in unexpected] == [
        "fasterrcnn_mobilenet_v3_large_fpn",
        "lstm_bidir",
    ]
    # bert's only non-pass is vacuous: no expectation covers it, but it is no failure either.
    rest = section(models_md, "Models with only expected failures or vacuous cases (1)")
    assert [row["model"] for row in tables(rest)[0]] == ["bert"]
    assert "<details><summary>Passing models (1)</summary>" in rest
    assert [row["model"] for row in tables(rest)[1]] == ["resnet18"]
    resnet = table["resnet18"]
    assert resnet["static ours cpu"] == "pass (2e-06)"  # extra.max_rel_scale wins over max_rel
    assert resnet["static torch-dynamo cpu"] == "pass (4e-06)"  # falls back to max_rel
    assert resnet["export s (ours)"] == "4"
    assert resnet["nodes (ours)"] == "50"  # the static export
    assert resnet["nodes (torch-dynamo)"] == "70"
    assert resnet["ORT latency ours/torch-dynamo"] == "0.90×"  # median of 10/12.5 and 11/11
    frcnn = table["fasterrcnn_mobilenet_v3_large_fpn"]
    assert frcnn["dynamic ours cpu"] == "fail@second-shape (0.5)"
    assert frcnn["static torch-dynamo cpu"] == "fail@export"
    assert frcnn["nodes (torch-dynamo)"] == ""
    assert frcnn["ORT latency ours/torch-dynamo"] == ""  # torch.onnx never ran it
    assert table["bert"]["dynamic torch-dynamo cpu"] == "vacuous@compare"
    assert table["bert"]["ORT latency ours/torch-dynamo"] == "1.25×"


# --- JUnit: pytest's own ---------------------------------------------------------------------


def test_reports_write_no_xml_and_a_rebuild_drops_stale_charts(rows, tmp_path):
    build_reports(rows, tmp_path)
    assert not list(tmp_path.rglob("*.xml"))
    assert (tmp_path / "charts" / "model_timings.png").exists()
    build_reports([r for r in rows if r.kind == "op"], tmp_path)
    assert not (tmp_path / "charts" / "model_timings.png").exists()


def test_harness_junit_is_pytests_with_properties_numbers_and_file_line(tmp_path):
    """The harness's pytest command writes the JUnit file; under xdist (-n 2) it keeps each
    case's properties, the failure message as raised (numbers unmasked) and file/line."""
    from torch_onnx_conformance.conformance.__main__ import build_pytest_command

    test_file = tmp_path / "test_cases.py"
    test_file.write_text(
        "import pytest\n"
        "@pytest.mark.parametrize('i', range(4))\n"
        "def test_case(i, record_property):\n"
        "    record_property('max_rel', 0.25 * i)\n"
        "    if i == 1:\n"
        "        pytest.fail('fail at stage compare\\noutput 0: 3/6 elements exceed rtol=1e-05',"
        " pytrace=False)\n"
    )
    junit = tmp_path / "junit.xml"
    command = build_pytest_command([str(test_file), "-n", "2", "-q"], junit)
    assert f"--junitxml={junit}" in command and "junit_family=xunit1" in command
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    cases = {case.get("name"): case for case in ET.parse(junit).getroot().iter("testcase")}
    assert len(cases) == 4
    failed = cases["test_case[1]"]
    assert failed.get("file") == "test_cases.py" and failed.get("line") == "1"
    assert "3/6 elements exceed rtol=1e-05" in failed.find("failure").get("message")
    for name, case in cases.items():
        (prop,) = case.iter("property")
        assert prop.get("name") == "max_rel"
        assert float(prop.get("value")) == 0.25 * int(name[-2])


# --- charts, step summary, CLI --------------------------------------------------------------


CHARTS = ("op_failures_by_stage", "model_failures_by_stage", "error_vs_tolerance", "model_timings")


def test_charts_are_png(built):
    for name in CHARTS:
        assert (built / "charts" / f"{name}.png").read_bytes().startswith(PNG_MAGIC)


def test_failure_chart_counts_cases_that_ran_by_family_and_stage(rows):
    counts = stage_counts(rows, "op")
    # indexing (__getitem__): ours export timeout and run crash, torch-dynamo 2 xfails at export.
    assert counts.counts[("indexing", "export", True)] == 2
    assert counts.counts[("indexing", "export", False)] == 1
    assert counts.counts[("indexing", "run", False)] == 1
    assert counts.families[0] == "indexing"  # most failures first
    assert counts.ran["nn"] == 4  # the skipped conv2d f16 case is in no denominator
    assert all(stage != "skip" for _, stage, _ in counts.counts)


def test_error_chart_takes_compare_failures_with_their_tolerance(rows):
    # The other compare failures of the fixture recorded no rtol: nothing to place them against.
    (point,) = error_points(rows)
    assert point.id == "op::add::s000::f16::static::opset20::cpu::torch-dynamo"
    assert (point.observed, point.tolerance, point.status) == (0.05, 1e-3, "fail")


def test_timing_chart_compares_only_models_every_exporter_exported(rows):
    times = model_times(rows)
    assert times.exporters == ["ours", "torch-dynamo"]
    # torch.onnx failed to export fasterrcnn: its time-to-fail is not an export time.
    assert times.models == ["bert", "lstm_bidir", "resnet18"]
    assert times.export_s["resnet18", "ours"] == 4


def test_markdown_does_not_import_matplotlib():
    code = (
        "import sys; from torch_onnx_conformance.reports import read_rows, render_markdown; "
        f"render_markdown(read_rows([{str(FIXTURE)!r}])); "
        "sys.exit(1 if 'matplotlib' in sys.modules else 0)"
    )
    root = Path(__file__).resolve().parents[2]
    assert subprocess.run([sys.executable, "-c", code], cwd=root, check=False).returncode == 0


def test_github_step_summary_is_appended(rows, tmp_path, monkeypatch):
    target = tmp_path / "step_summary.md"
    target.write_text("# earlier step\n", encoding="utf-8")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(target))
    build_reports(rows, tmp_path / "out")
    content = target.read_text(encoding="utf-8")
    assert content.startswith("# earlier step\n")
    appended = content.removeprefix("# earlier step\n")
    summary = (tmp_path / "out" / "summary.md").read_text(encoding="utf-8")
    assert appended.startswith("# Conformance summary\n")
    assert only_table(section(appended, "Ops")) == only_table(section(summary, "Ops"))
    assert "failures_by_stage.png" in summary
    assert "failures_by_stage.png" not in appended  # relative images do not resolve on GitHub


def test_a_build_without_charts_links_none(rows, tmp_path):
    build_reports(rows, tmp_path, charts=False)
    summary = (tmp_path / "summary.md").read_text(encoding="utf-8")
    assert "## Ops" in summary
    assert ".png" not in summary
    assert not (tmp_path / "charts").exists()


def test_no_step_summary_without_the_variable(rows, tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    written = build_reports(rows, tmp_path, charts=False)
    assert {p.name for p in written} == {"summary.md", "ops.md", "models.md", "matrix.md"}


def test_cli_builds_from_a_directory(tmp_path, capsys):
    results = tmp_path / "results"
    results.mkdir()
    (results / "w0.jsonl").write_text(FIXTURE.read_text(), encoding="utf-8")
    assert main(["build", str(results), "--out", str(tmp_path / "out")]) == 0
    assert "37 cases, 23 passed" in capsys.readouterr().out
    assert (
        (tmp_path / "out" / "charts" / "op_failures_by_stage.png")
        .read_bytes()
        .startswith(PNG_MAGIC)
    )


def test_cli_names_a_missing_results_path(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["build", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    assert "nowhere" in capsys.readouterr().err


# --- error signatures -----------------------------------------------------------------------


def test_signatures_ignore_numbers_paths_addresses_and_shapes():
    first = (
        'Traceback (most recent call last):\n  File "/home/a/run.py", line 12, in <module>\n'
        "    main()\n"
        "RuntimeError: shape [2, 3] vs torch.Size([4, 5]) for 'val_12' at 0x7f3a1c in "
        "/tmp/a/model.onnx after 3 tries"
    )
    second = (
        'Traceback (most recent call last):\n  File "/srv/b/other.py", line 99, in f\n'
        "    g()\n"
        "RuntimeError: shape [7, 1, 9] vs torch.Size([1]) for 'val_3' at 0xdeadbeef in "
        "/var/tmp/x/y/model.onnx after 17 tries"
    )
    assert normalise_error(first) == normalise_error(second)
    assert normalise_error(first) == (
        "RuntimeError: shape [<SHAPE>] vs torch.Size([<SHAPE>]) for '<NAME>' at <ADDR> in "
        "<PATH> after <N> tries"
    )


def test_signatures_keep_what_tells_errors_apart():
    assert normalise_error(ValueError("bad dtype 'float16'")) == "ValueError: bad dtype 'float16'"
    assert normalise_error(KeyError("x")) != normalise_error(ValueError("x"))
    assert normalise_error(RuntimeError()) == "RuntimeError"
    assert normalise_error("\n=====\nSegmentation fault (core dumped)\nmore") == (
        "Segmentation fault (core dumped)"
    )
    qualified = "torch._dynamo.exc.Unsupported: call_function in conv2d_3"
    assert normalise_error(qualified) == "Unsupported: call_function in conv2d_<N>"


def test_signatures_are_capped():
    signature = normalise_error("ValueError: " + "word " * 100)
    assert len(signature) <= MAX_SIGNATURE_CHARS
    assert signature.endswith("…")


def test_rows_round_trip_through_json(rows):
    # The fixture holds only known fields plus extra; to_json/from_dict must keep them intact.
    for row in rows:
        assert CaseResult.from_dict(json.loads(row.to_json())) == row


def test_side_by_side_leaves_skips_out_and_counts_ops_that_fully_pass():
    outcomes = {  # (op, sample, shapes): (ours, torch-dynamo)
        ("neg", 0, "static"): ("pass", "pass"),
        ("neg", 0, "dynamic"): ("skip", "skip"),
        ("abs", 0, "static"): ("pass", "fail"),
        ("abs", 1, "static"): ("pass", "pass"),
        ("exp", 0, "static"): ("fail", "pass"),
    }
    rows = []
    for (op, sample, shapes), statuses in outcomes.items():
        for exporter, status in zip(("ours", "torch-dynamo"), statuses):
            rows.append(
                CaseResult(
                    id=f"op::{op}::s{sample:03d}::f32::{shapes}::opset20::cpu::{exporter}",
                    kind="op", subject=op, family="elementwise", dtype="f32", shapes=shapes,
                    opset=20, provider="cpu", exporter=exporter, status=status,
                    stage="compare" if status == "fail" else None,
                )
            )  # fmt: skip
    text = section(summary_markdown(rows), "Exporters side by side")
    counts, fully = tables(text)[0], tables(text)[1]
    assert by(counts, "kind")["op"] == {
        "kind": "op",
        "shared cases": "5",
        "skipped": "1",
        "ours": "3/4 (75%)",
        "torch-dynamo": "3/4 (75%)",
    }
    # ours: neg and abs; torch-dynamo: neg and exp.
    assert by(fully, "kind")["ops"] == {
        "kind": "ops",
        "ours: passing": "2/3 (67%)",
        "torch-dynamo: passing": "2/3 (67%)",
    }


def test_summary_gives_each_exporter_static_and_dynamic_per_kind_and_dtype():
    outcomes = [
        ("ours", "f32", "static", "pass"),
        ("ours", "f32", "static", "fail"),
        ("ours", "f32", "dynamic", "pass"),
        ("ours", "f32", "dynamic", "skip"),
        ("ours", "i64", "static", "pass"),
        ("torch-dynamo", "f32", "static", "fail"),
    ]
    rows = [
        CaseResult(
            id=f"op::neg::s{i:03d}::{dtype}::{shapes}::opset20::cpu::{exporter}",
            kind="op", subject="neg", family="elementwise", dtype=dtype, shapes=shapes,
            opset=20, provider="cpu", exporter=exporter, status=status,
            stage="compare" if status == "fail" else None,
        )
        for i, (exporter, dtype, shapes, status) in enumerate(outcomes)
    ]  # fmt: skip
    table = tables(section(summary_markdown(rows), "Pass rate by exporter"))[0]
    cells = {(row["exporter"], row["dtype"]): (row["static"], row["dynamic"]) for row in table}
    assert cells == {
        ("ours", "f32"): ("1/2 (50%)", "1/1 (100%)"),  # the skip judges nothing
        ("ours", "i64"): ("1/1 (100%)", ""),
        ("torch-dynamo", "f32"): ("0/1 (0%)", ""),
    }


def test_models_table_names_the_capture_rewrites_an_export_applied():
    def model_row(model, exporter, extra):
        return CaseResult(
            id=f"model::torchvision/{model}::f32::static::opset20::cpu::{exporter}::opt",
            kind="model", subject=f"torchvision/{model}", family="detection", dtype="f32",
            shapes="static", opset=20, provider="cpu", exporter=exporter, status="pass",
            extra=extra,
        )  # fmt: skip

    rows = [
        model_row("fcos_resnet50_fpn", "ours", {"capture_patches": ["torchvision-detection"]}),
        model_row("fcos_resnet50_fpn", "torch-dynamo", {}),
        model_row("resnet18", "ours", {}),
    ]
    table = by(
        [row for found in tables(render_markdown(rows)["models.md"]) for row in found], "model"
    )
    assert table["torchvision/fcos_resnet50_fpn"]["capture rewrites"] == "torchvision-detection"
    assert table["torchvision/resnet18"]["capture rewrites"] == ""
    # Without any rewrite in the rows, no such column.
    plain = tables(render_markdown(rows[2:])["models.md"])
    assert not any("capture rewrites" in row for found in plain for row in found)


# --- triage ---------------------------------------------------------------------------------


def test_summary_opens_with_the_unexpected_results(markdown):
    summary = markdown["summary.md"]
    assert summary.index("## Unexpected results") < summary.index("## Pass rate by exporter")
    table = by(only_table(section(summary, "Unexpected results")), "case id")
    assert list(table) == [  # fail, then crash, timeout, xpass; ops before models
        "op::add::s000::f16::static::opset20::cpu::torch-dynamo",
        "op::add::s001::f32::dynamic::opset20::cpu::torch-dynamo",
        "op::nn.functional.conv2d::s000::f32::dynamic::opset20::cpu::ours",
        "model::synthetic/lstm_bidir::f32::dynamic::opset20::cpu::torch-dynamo::opt",
        "model::torchvision/fasterrcnn_mobilenet_v3_large_fpn::f32::dynamic::opset20::cpu::ours::opt",
        "model::torchvision/fasterrcnn_mobilenet_v3_large_fpn::f32::dynamic::opset20::cpu::torch-dynamo::opt",
        "model::torchvision/fasterrcnn_mobilenet_v3_large_fpn::f32::static::opset20::cpu::torch-dynamo::opt",
        "op::__getitem__::s000::f32::static::opset20::cpu::ours",
        "op::__getitem__::s000::f32::dynamic::opset20::cpu::ours",
        "op::sum::s000::f32::dynamic::opset20::cpu::ours",
    ]  # fmt: skip
    # op::add::s000 f32 static ours failed, then passed on its re-run: the last row counts.
    second_shape = table["op::add::s001::f32::dynamic::opset20::cpu::torch-dynamo"]
    assert second_shape["status"] == "fail"
    assert second_shape["stage"] == "second-shape"
    # The message as raised, numbers kept (the signature tables mask them).
    assert second_shape["message"] == "AssertionError: second shape [3, 5] gave wrong values"
    assert second_shape["repro folder"] == "results/repro/add-s001"
    timeout = table["op::__getitem__::s000::f32::dynamic::opset20::cpu::ours"]
    assert (timeout["status"], timeout["message"]) == ("timeout", "Timeout: case exceeded 60 s")
    conv = table["op::nn.functional.conv2d::s000::f32::dynamic::opset20::cpu::ours"]
    assert conv["message"] == "AssertionError: Tensor-likes are not close!"  # escape dropped
    assert table["op::sum::s000::f32::dynamic::opset20::cpu::ours"]["status"] == "xpass"
    for case_id in table:
        if case_id.startswith("op::"):
            assert parse_case(case_id).id == case_id


def test_triage_says_so_when_nothing_is_unexpected(rows):
    expected_only = [r for r in rows if r.status in ("pass", "xfail", "skip")]
    text = section(summary_markdown(expected_only), "Unexpected results")
    assert text.strip().startswith("None: every case that ran passed or failed as")
    assert not tables(text)


def _neg_row(sample: int, status: str, error: str | None = None) -> CaseResult:
    return CaseResult(
        id=f"op::neg::s{sample:03d}::f32::dynamic::opset20::cpu::ours",
        kind="op", subject="neg", family="elementwise", dtype="f32", shapes="dynamic",
        opset=20, provider="cpu", exporter="ours", status=status,
        stage=None if status in ("pass", "skip") else "compare", error=error,
    )  # fmt: skip


def test_skips_are_counted_apart_from_error_signatures():
    rows = [
        _neg_row(i, "skip", "dynamic: no input dimension >= 2 to make dynamic") for i in range(5)
    ]
    rows.append(_neg_row(9, "fail", "AssertionError: output 0: 3/6 elements exceed rtol=1e-05"))
    summary = summary_markdown(rows)
    signatures = only_table(section(summary, "Top error signatures"))
    assert [r["signature"] for r in signatures] == [
        "AssertionError: output <N>: <N>/<N> elements exceed rtol=<N>"
    ]
    skips = only_table(section(summary, "Skipped cases"))
    assert [(r["count"], r["reason"]) for r in skips] == [
        ("5", "dynamic: no input dimension >= <N> to make dynamic")
    ]
    triage = only_table(section(summary, "Unexpected results"))
    assert triage[0]["message"] == "AssertionError: output 0: 3/6 elements exceed rtol=1e-05"


def test_one_definition_of_a_passing_op_in_every_report():
    # neg: one pass and skips -> passes; abs: an xfail -> does not pass; exp: only skips -> not
    # judged. Summary, ops.md and the side-by-side table all say 1 of 2.
    rows = []
    for exporter in ("ours", "torch-dynamo"):
        for op, status in (("neg", "pass"), ("neg", "skip"), ("abs", "pass"), ("abs", "xfail"),
                           ("exp", "skip")):  # fmt: skip
            sample = sum(1 for r in rows if r.subject == op and r.exporter == exporter)
            rows.append(
                CaseResult(
                    id=f"op::{op}::s{sample:03d}::f32::static::opset20::cpu::{exporter}",
                    kind="op", subject=op, family="elementwise", dtype="f32", shapes="static",
                    opset=20, provider="cpu", exporter=exporter, status=status,
                    stage="export" if status == "xfail" else None,
                )
            )  # fmt: skip
    markdown = render_markdown(rows)
    ops = by(only_table(section(markdown["summary.md"], "Ops")), "exporter")
    assert ops["ours"]["ops passing"] == ops["torch-dynamo"]["ops passing"] == "1/2 (50%)"
    side = by(tables(section(markdown["summary.md"], "Exporters side by side"))[1], "kind")
    assert side["ops"]["ours: passing"] == "1/2 (50%)"
    assert "1 of the 2 ops with a case that ran pass" in markdown["ops.md"]


def test_summary_header_names_commit_command_versions_provider_and_opset(rows):
    runs = [
        {
            "run_id": "20261124T030222052602-31089",
            "started": "2026-11-24T03:03:44+00:00",
            "commit": "a6a71b2deadb",
            "command": "python -m torch_onnx_conformance run --ops add",
        }
    ]
    summary = summary_markdown(rows, runs=runs)
    header = summary.split("## Unexpected results")[0]
    assert "Commit: `a6a71b2deadb`" in header
    assert "Run: 2026-11-24T03:03:44+00:00" in header
    assert "Command: `python -m torch_onnx_conformance run --ops add`" in header
    assert "Versions: torch 2.14.1 · onnx 1.23.2 · onnxruntime 1.31.1" in header
    assert "Provider: cpu · opset: 20" in header
    assert "commit and command unknown" in summary_markdown(rows).split("## Unexpected")[0]


def test_manifest_records_commit_and_command(tmp_path, monkeypatch):
    from torch_onnx_conformance.conformance import runs

    monkeypatch.setenv(runs.COMMAND_ENV, "python -m torch_onnx_conformance run --ops add")
    path = runs.write_manifest(tmp_path, "20261124T000000000000-1", resume=False, cases=["a"])
    manifest = json.loads(path.read_text())
    assert manifest["command"] == "python -m torch_onnx_conformance run --ops add"
    head = subprocess.run(
        ["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
        cwd=Path(__file__).parent,
    ).stdout.strip()  # fmt: skip
    assert manifest["commit"].startswith(head)
    found = read_rows_with_runs(tmp_path)
    assert found.runs[0]["command"] == "python -m torch_onnx_conformance run --ops add"


def read_rows_with_runs(folder: Path):
    from torch_onnx_conformance.reports.rows import scan_rows

    return scan_rows([folder])


def test_expected_failures_show_reason_and_link_to_their_entry(tmp_path):
    from torch_onnx_conformance.reports.expectation_links import ExpectationLinks
    from torch_onnx_conformance.reports.ops_md import ops_markdown

    folder = tmp_path / "expectations"
    folder.mkdir()
    (folder / "ours.toml").write_text(
        "# header comment\n\n"
        '[[expectation]]\nid = "op::abs::*"\nstatus = "xfail"\nstage = "compare"\n'
        'reason = "another reason"\nlink = "issue 1"\n\n'
        '[[expectation]]\nid = "op::equal::*"\nstatus = "xfail"\nstage = "export"\n'
        'reason = "data-dependent output"\nlink = "issue 3"\n'
    )
    rows = [
        CaseResult(
            id=f"op::equal::s00{i}::f32::static::opset20::cpu::ours", kind="op",
            subject="equal", family="comparison", dtype="f32", shapes="static", opset=20,
            provider="cpu", exporter="ours", status=status,
            stage="export" if status == "xfail" else None,
            expectation="data-dependent output" if status == "xfail" else None,
        )
        for i, status in enumerate(("xfail", "pass", "xfail"))
    ]  # fmt: skip
    out = tmp_path / "reports"
    text = ops_markdown(rows, ExpectationLinks(folder), str(out))
    expected = section(text, "Ops with expected failures only (1)")
    (row,) = only_table(section(expected, "comparison (1)"))
    assert row["reason"] == "data-dependent output ×2"
    assert row["entry"] == "[ours.toml:10](../expectations/ours.toml#L10)"
    assert row["f32 static cpu ours"] == "1/3"
    assert "None." in section(text, "Ops with unexpected results (0)")


def test_expectation_links_read_the_file_the_case_kind_names(tmp_path):
    """A row's entry is looked up in the file its kind's table row names (``CaseKind``), the
    one the harness judged it by: model rows in models-<exporter>.toml, op rows in
    <exporter>.toml; a kind the table does not know has no entry."""
    from torch_onnx_conformance.conformance.case import KINDS
    from torch_onnx_conformance.reports.expectation_links import ExpectationLinks, expectations_file

    folder = tmp_path / "expectations"
    folder.mkdir()
    entry = '[[expectation]]\nid = "{kind}::*"\nstatus = "xfail"\nreason = "{kind} reason"\n'
    for kind in KINDS.values():
        kind.expectations_file(folder, "ours").write_text(entry.format(kind=kind.name))
    links = ExpectationLinks(folder)

    def xfail_row(kind: str, reason: str) -> CaseResult:
        return CaseResult(
            id=f"{kind}::x", kind=kind, subject="x", family="f", dtype="f32", shapes="static",
            opset=20, provider="cpu", exporter="ours", status="xfail", expectation=reason,
        )  # fmt: skip

    for kind in KINDS.values():
        row = xfail_row(kind.name, f"{kind.name} reason")
        assert expectations_file(row, folder) == kind.expectations_file(folder, "ours")
        assert links.markdown_link(row, None) == f"{kind.expectations_file(folder, 'ours').name}:1"
    assert {"op", "model"} <= set(KINDS)
    stray = xfail_row("other", "op reason")
    assert expectations_file(stray, folder) is None
    assert links.entry(stray) is None


def test_report_axis_orders_follow_the_harness_tables():
    """The order reports list axis values in is the harness's own: kinds as ``KINDS`` holds
    them (ops, then models), dtypes, shapes, providers and exporters as ``conformance.case``
    names them. Reports load without the harness, so they keep a copy this test holds equal."""
    from torch_onnx_conformance.conformance import case
    from torch_onnx_conformance.reports.tally import PREFERRED_ORDER

    assert PREFERRED_ORDER["kind"] == tuple(case.KINDS)
    assert PREFERRED_ORDER["dtype"] == case.DTYPES
    assert PREFERRED_ORDER["shapes"] == case.SHAPES
    assert PREFERRED_ORDER["provider"] == case.PROVIDERS
    assert PREFERRED_ORDER["exporter"] == case.EXPORTERS


def test_side_by_side_lists_kinds_in_the_kinds_order():
    from torch_onnx_conformance.reports.side_by_side import compare_exporters

    def row(kind: str, exporter: str) -> CaseResult:
        return CaseResult(
            id=f"{kind}::x::{exporter}", kind=kind, subject="x", family="f", dtype="f32",
            shapes="static", opset=20, provider="cpu", exporter=exporter, status="pass",
        )  # fmt: skip

    rows = [
        row(kind, exporter)
        for kind in ("zz", "model", "op")
        for exporter in ("ours", "torch-dynamo")
    ]
    assert [c.kind for c in compare_exporters(rows)] == ["op", "model", "zz"]
