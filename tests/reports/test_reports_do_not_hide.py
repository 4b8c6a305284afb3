"""Reports that do not hide how badly a case fails: example messages keep their numbers, the
error chart plots the bound that failed with labels that never overlap, a harness error is no
exporter's expected failure, the headline says why cases were skipped."""

from __future__ import annotations

import pytest

from torch_onnx_conformance.conformance import expectations as ex
from torch_onnx_conformance.conformance.case import row_facts
from torch_onnx_conformance.conformance.plugin import judge_outcome
from torch_onnx_conformance.reports.build import render_markdown
from torch_onnx_conformance.reports.charts import Chart, deciding_bound, draw, error_points
from torch_onnx_conformance.reports.rows import CaseResult

UPSAMPLE_MESSAGE = (
    "output 0: 9/5508 elements exceed rtol=1e-05 atol=1e-05; max abs error 2.12e-05, max rel "
    "error 0.00312; worst: expected 0.26588, got 0.265862"
)


def case(case_id: str, status: str, **fields) -> CaseResult:
    parts = case_id.split("::")
    base = dict(
        id=case_id, kind="op", subject=parts[1], family="nn", dtype="f32", shapes=parts[4],
        opset=20, provider="cpu", exporter="ours", status=status,
    )  # fmt: skip
    base.update(fields)
    return CaseResult(**base)


def upsample(status="fail", sample=2, op="_upsample_bilinear2d_aa") -> CaseResult:
    return case(
        f"op::{op}::s00{sample}::f32::static::opset20::cpu::ours",
        status,
        stage="compare",
        error=UPSAMPLE_MESSAGE,
        max_abs=2.12e-05,
        max_rel=0.00312,
        atol=1e-05,
        rtol=1e-05,
        expectation="antialiased upsampling differs in the last bits"
        if status == "xfail"
        else None,
    )


def skipped(op: str, shapes="dynamic") -> CaseResult:
    return case(
        f"op::{op}::s000::f32::{shapes}::opset20::cpu::ours",
        "skip",
        error="dynamic: no input dimension >= 2 to make dynamic (same as static)",
    )


@pytest.fixture
def markdown():
    rows = [
        upsample("fail", 2),
        upsample("xfail", 3, op="_upsample_bicubic2d_aa"),
        case("op::abs::s000::f32::static::opset20::cpu::ours", "pass"),
        case("op::abs::s000::f32::dynamic::opset20::cpu::ours", "pass"),
        case("op::sum::s000::f32::static::opset20::cpu::ours", "pass"),
        skipped("sum"),
        skipped("_upsample_bilinear2d_aa"),
    ]
    return render_markdown(rows)


def test_examples_keep_their_numbers(markdown):
    summary, ops = markdown["summary.md"], markdown["ops.md"]
    # The signature groups by masked text; the example beside it is the message as raised.
    signature_row = next(line for line in summary.splitlines() if "exceed rtol=<N>" in line)
    assert UPSAMPLE_MESSAGE in signature_row
    # The top error of an op with an unexpected result, and the example beside an xfail reason.
    assert f"`{UPSAMPLE_MESSAGE}` ×1" in ops
    reason = next(line for line in ops.splitlines() if "antialiased" in line)
    assert (
        f"antialiased upsampling differs in the last bits ×1 (e.g. `{UPSAMPLE_MESSAGE}`)" in reason
    )


def test_headline_says_why_cases_were_skipped_and_where_dynamic_was_tested(markdown):
    summary = markdown["summary.md"]
    assert (
        "**2 skipped**: 2 `dynamic: no input dimension >= <N> to make dynamic (same as static)`."
        in summary
    )
    # abs ran a dynamic case; sum and _upsample_bilinear2d_aa skipped every dynamic case.
    assert (
        "Dynamic shapes were tested for 1 of the 3 ops with dynamic cases; for the other 2"
        in summary
    )
    assert "| `sum` | nn | 1/1 | skip×1 | 1/1 (100%) |" in markdown["ops.md"]


def test_error_chart_plots_the_bound_that_failed():
    # The worst element expected 0.26588: rtol * 0.26588 = 2.7e-6 < atol, so atol decided.
    assert deciding_bound(upsample()) == ("atol", 2.12e-05, 1e-05)
    (point,) = error_points([upsample()])
    assert point.bound == "atol" and round(point.times_over, 2) == 2.12  # not 312× rtol
    big = case(
        "op::exp::s000::f32::static::opset20::cpu::ours", "fail", stage="compare",
        error="output 0: 1/4 elements exceed rtol=1e-05 atol=1e-05; max abs error 3.0, max rel "
        "error 0.001; worst: expected 3000.0, got 3003.0",
        max_abs=3.0, max_rel=0.001, atol=1e-05, rtol=1e-05,
    )  # fmt: skip
    assert deciding_bound(big) == ("rtol", 0.001, 1e-05)
    # Without the worst element in the message: the bound with the smaller excess.
    bare = case(
        "op::exp::s001::f32::static::opset20::cpu::ours", "fail", stage="compare",
        max_abs=3.0, max_rel=0.001, atol=1e-05, rtol=1e-05,
    )  # fmt: skip
    assert deciding_bound(bare) == ("rtol", 0.001, 1e-05)


def test_error_chart_labels_never_overlap(tmp_path):
    pytest.importorskip("matplotlib")
    rows = [upsample("fail", n % 10) for n in range(6)]  # six on one spot
    rows += [
        case(
            f"op::op{n}::s000::f32::static::opset20::cpu::ours",
            "fail",
            stage="compare",
            max_abs=1e-4 * (1 + n / 50),
            max_rel=1e-3 * (1 + n / 40),
            atol=1e-5,
            rtol=1e-5,
        )  # fmt: skip
        for n in range(40)
    ]
    points = error_points(rows)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.text import Text

    from torch_onnx_conformance.reports.charts import _draw_error_points

    figure = Figure(figsize=(12.0, 6.5))
    FigureCanvasAgg(figure)
    _draw_error_points(figure, "t", points)
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    (axes,) = figure.axes
    for gid in ("point-name", "point-number"):
        # The text's own box (an annotation's extent would include its leader line).
        boxes = [Text.get_window_extent(t, renderer) for t in axes.texts if t.get_gid() == gid]
        assert boxes
        overlapping = [
            (i, j) for i in range(len(boxes)) for j in range(i) if boxes[i].overlaps(boxes[j])
        ]
        assert overlapping == [], (gid, overlapping)
    names = [t.get_text() for t in axes.texts if t.get_gid() == "point-name"]
    assert len(names) == 24 and names[0].startswith("1. ")
    assert draw(Chart("c.png", "t", points), tmp_path / "c.png").stat().st_size > 0


def test_update_expectations_writes_the_message_unmasked():
    row = upsample()
    row.error_signature = "output <N>: <N>/<N> elements exceed rtol=<N> atol=<N>"
    (added,) = ex.propose([], [row]).added
    assert "max abs error 2.12e-05" in added.reason
    assert added.signature == row.error_signature  # the masked match stays the signature


def test_harness_error_is_never_an_expected_failure():
    case_id = "op::to_sparse::s000::f32::static::opset20::cpu::ours"
    entry = ex.Expectation(index=0, status="xfail", id="op::to_sparse::*", stage="export")
    facts = row_facts(case_id, {})
    harness = {"stage": "export", "error_signature": "HarnessError: TypeError: can't convert"}
    verdict = judge_outcome([entry], facts, "fail", harness)
    assert (verdict.status, verdict.item, verdict.entry) == ("fail", "fail", None)
    assert "harness" in verdict.message
    exporter = {"stage": "export", "error_signature": "UnsupportedOpError: no translation"}
    assert judge_outcome([entry], facts, "fail", exporter).status == "xfail"


def test_sparse_outputs_compare_by_value():
    torch = pytest.importorskip("torch")
    from torch_onnx_conformance.conformance.flat_io import to_numpy

    dense = torch.tensor([[0.0, 1.5], [2.0, 0.0]])
    assert (to_numpy(dense.to_sparse()) == dense.numpy()).all()


def test_readme_holds_the_generated_tolerance_table():
    from torch_onnx_conformance.reports.tolerances import README, readme_block, tolerance_markdown

    copy = readme_block(README.read_text(encoding="utf-8"))
    assert copy is not None, "README.md lacks the tolerance table's markers"
    assert copy == tolerance_markdown(), (
        "README.md's tolerance table is stale: python -m torch_onnx_conformance.reports.tolerances --update README.md"
    )
    assert "| op cases | element | f32 | 1e-05 | 1e-05 |" in copy
    assert "Eager noise (model cases): rtol is raised to 4 x" in copy


def test_every_report_links_the_tolerance_table(tmp_path):
    from torch_onnx_conformance.reports.tolerances import README

    out = README.parent / "reports" / "latest"
    for name, content in render_markdown([upsample()], out_dir=out).items():
        assert "[the tolerance table](../../README.md#tolerances)" in content, name
