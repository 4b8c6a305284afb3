"""report=True: one markdown file per export with every section, on success and on failure."""

from __future__ import annotations

import re
import runpy
import warnings
from pathlib import Path

import pytest
import torch

from tests.exporter.diagnostics.models import LinearSigmoid
from torch_onnx_conformance import exporter
from torch_onnx_conformance.exporter._record import ExportRecord
from torch_onnx_conformance.exporter.diagnostics import report

NAME = re.compile(r"onnx_export_\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}-\d{6}_(\w+)\.md")


def headings(path: Path) -> list[str]:
    return [
        line[3:].strip()
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.startswith("## ")
    ]


def section(path: Path, title: str) -> str:
    text = path.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def only_report(folder: Path) -> Path:
    reports = sorted(folder.glob("onnx_export_*.md"))
    assert len(reports) == 1, reports
    return reports[0]


def test_success_report_carries_every_section(tmp_path):
    program = exporter.export(
        LinearSigmoid().eval(),
        (torch.randn(2, 4),),
        report=True,
        verify=True,
        artifacts_dir=tmp_path,
        dynamic_shapes=({0: "batch"},),
    )
    path = program.report_path
    assert path == only_report(tmp_path)
    assert NAME.fullmatch(path.name).group(1) == "success"
    assert headings(path) == list(report.SECTIONS)
    status = section(path, "Status")
    assert "✅ Capture with torch.export(strict=False)" in status
    assert "⚪ Capture with torch.export(strict=True): not tried" in status
    assert "✅ onnx.checker.check_model(full_check=True)" in status
    assert "✅ Accuracy at a second shape" in status
    assert "| input | `x` | FLOAT | [batch, 4] | batch |" in section(path, "Graph summary")
    assert "| `Gemm` | 1 |" in section(path, "Graph summary")
    accuracy = section(path, "Accuracy")
    assert "### second shape: x[3, 4]" in accuracy
    assert "Absolute error histogram" in accuracy
    assert "torch.ops.aten.linear.default" in section(path, "Exported program")
    assert "| translation |" in section(path, "Stage timings")
    assert section(path, "Errors").strip().endswith("No errors.")


@torch.library.custom_op("diagreport::first", mutates_args=())
def first_op(x: torch.Tensor) -> torch.Tensor:
    # numpy bodies: no trace can follow them, so the ops stay without a translation
    return torch.from_numpy(x.numpy() * 2)


@torch.library.custom_op("diagreport::second", mutates_args=())
def second_op(x: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(x.numpy() + 2)


@torch.library.custom_op("diagreport::third", mutates_args=())
def third_op(x: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(x.numpy() - 2)


for _op in (first_op, second_op, third_op):
    _op.register_fake(lambda x: torch.empty_like(x))


class ThreeCustomOps(torch.nn.Module):
    def forward(self, x):
        y = torch.ops.diagreport.first(x)  # unsupported-1
        y = torch.ops.diagreport.second(torch.sigmoid(y))  # unsupported-2
        return torch.ops.diagreport.third(y)  # unsupported-3


def _line_of(marker: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.rstrip().endswith(f"# {marker}"))


def test_failing_export_report_lists_every_unsupported_op_at_once(tmp_path):
    with pytest.raises(exporter.UnsupportedOpError):
        exporter.export(
            ThreeCustomOps().eval(), (torch.randn(2, 3),), report=True, artifacts_dir=tmp_path
        )
    path = only_report(tmp_path)
    assert NAME.fullmatch(path.name).group(1) == "translation"
    assert headings(path) == list(report.SECTIONS)
    unsupported = section(path, "Unsupported ops")
    assert "3 FX nodes use 3 ops that have no translation" in unsupported
    for i, (op, node) in enumerate(
        (("first", "first"), ("second", "second"), ("third", "third")), start=1
    ):
        line = _line_of(f"unsupported-{i}")
        row = f"| {i} | `diagreport.{op}.default` | `{node}` | {__file__}:{line} in forward:"
        assert row in unsupported, unsupported
    assert "❌ Translation to ONNX" in section(path, "Status")
    assert "UnsupportedOpError" in section(path, "Errors")
    assert "torch.ops.diagreport.first.default" in section(path, "Exported program")
    assert "translation did not produce" in section(path, "Graph summary")
    # The program that failed to translate is kept, and re-exporting it fails the same way.
    repro = path.with_name(path.stem + "_repro")
    files = {p.name for p in repro.iterdir()}
    assert {"rerun_export.py", "weights.npz", "inputs.npz", "case.json", "repro.py"} <= files
    assert not any(name.endswith((".pt2", ".pt", ".pkl")) for name in files)
    # rerun_export.py rebuilds the program from source (the custom ops are registered in this
    # process, as its docstring asks) and the export fails the same way.
    with pytest.raises(exporter.UnsupportedOpError, match="3 ops have no ONNX translation"):
        runpy.run_path(str(repro / "rerun_export.py"), run_name="__main__")


class DataDependentBranch(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # data-dependent-branch
            return x
        return -x


def test_capture_failure_report_shows_each_strategy_and_its_source_line(tmp_path):
    with pytest.raises(exporter.CaptureError):
        exporter.export(
            DataDependentBranch().eval(), (torch.randn(2, 3),), report=True, artifacts_dir=tmp_path
        )
    path = only_report(tmp_path)
    assert NAME.fullmatch(path.name).group(1) == "capture"
    assert headings(path) == list(report.SECTIONS)
    errors = section(path, "Errors")
    assert "### capture with torch.export(strict=False)" in errors
    assert "### capture with torch.export(strict=True)" in errors
    line = _line_of("data-dependent-branch")
    assert errors.count(f"User source line: {__file__}:{line} in forward") == 2
    status = section(path, "Status")
    assert status.count("❌ Capture with") == 2
    assert "⚪ Translation to ONNX: not reached" in status


def test_report_of_bad_arguments_keeps_the_original_error(tmp_path):
    with pytest.raises(exporter.InvalidExportArgumentsError, match="args must be a tuple"):
        exporter.export(LinearSigmoid(), [torch.randn(2, 4)], report=True, artifacts_dir=tmp_path)
    path = only_report(tmp_path)
    assert NAME.fullmatch(path.name).group(1) == "arguments"
    assert headings(path) == list(report.SECTIONS)
    errors = section(path, "Errors")
    assert "args must be a tuple" in errors
    assert f"export() was called at {__file__}:" in errors


def test_mismatch_report_links_a_repro_directory(tmp_path):
    def planted_sigmoid(ctx, x):
        return ctx.op.Mul(ctx.op.Sigmoid(x), ctx.const(1.5, torch.float32))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = exporter.export(
            LinearSigmoid().eval(),
            (torch.randn(2, 4),),
            report=True,
            verify=True,
            artifacts_dir=tmp_path,
            custom_translation_table={torch.ops.aten.sigmoid.default: planted_sigmoid},
        )
    path = program.report_path
    assert NAME.fullmatch(path.name).group(1) == "compare"
    repro = path.with_name(path.stem + "_repro")
    assert program.verification.repro_dir == repro
    assert (repro / "repro.py").exists() and (repro / "model.onnx").exists()
    assert f"`{repro}`" in section(path, "Accuracy")
    assert "First divergent FX node: **`sigmoid`**" in section(path, "Bisection")


def test_onnxruntime_failing_on_the_example_inputs_is_the_run_stage(tmp_path):
    def impossible_reshape(ctx, x):
        # The batch is symbolic, so nothing rejects the shape before onnxruntime runs it.
        return ctx.op.Reshape(ctx.op.Sigmoid(x), ctx.const([5, -1], torch.int64))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        program = exporter.export(
            LinearSigmoid(out_features=8).eval(),
            (torch.randn(2, 4),),
            report=True,
            verify=True,
            dynamic_shapes=({0: "batch"},),
            artifacts_dir=tmp_path,
            custom_translation_table={torch.ops.aten.sigmoid.default: impossible_reshape},
        )
    status = program.record.status
    assert (status["load"], status["run"]) == ("ok", "failed")
    assert status["compare"] == status["second-shape"] == "skipped"
    (run,) = program.verification.runs
    assert not run.ok and run.stage == "run" and run.outputs == []
    assert run.message.startswith("onnxruntime failed: ")
    assert any("example inputs (x[2, 4]): onnxruntime failed" in str(w.message) for w in caught)
    path = program.report_path
    assert NAME.fullmatch(path.name).group(1) == "run"
    accuracy = section(path, "Accuracy")
    assert "### example inputs: x[2, 4]" in accuracy and run.message in accuracy
    assert "second shape (dynamic dims changed) skipped: onnxruntime failed" in accuracy


def test_a_section_that_raises_shows_its_own_error_and_the_rest_survive(tmp_path, monkeypatch):
    def broken(record, program):
        raise RuntimeError("graph summary exploded")

    monkeypatch.setattr(report, "_graph_summary", broken)
    program = exporter.export(
        LinearSigmoid().eval(), (torch.randn(2, 4),), report=True, artifacts_dir=tmp_path
    )
    path = program.report_path
    assert headings(path) == list(report.SECTIONS)
    assert "could not be rendered: RuntimeError: graph summary exploded" in section(
        path, "Graph summary"
    )
    assert "✅ Translation to ONNX" in section(path, "Status")


def test_write_report_on_an_empty_record_still_writes_every_section(tmp_path):
    path = report.write_report(
        ExportRecord(model_class="Nothing"), tmp_path / "new", error=ValueError("boom")
    )
    assert path.parent == tmp_path / "new"
    assert headings(path) == list(report.SECTIONS)
    assert NAME.fullmatch(path.name).group(1) == "error"


def test_report_path_is_printed_on_success_and_noted_on_the_failure(tmp_path, capsys):
    program = exporter.export(
        LinearSigmoid().eval(), (torch.randn(2, 4),), report=True, artifacts_dir=tmp_path / "ok"
    )
    assert f"[exporter] export report written to {program.report_path}" in capsys.readouterr().out
    with pytest.raises(exporter.UnsupportedOpError) as raised:
        exporter.export(
            ThreeCustomOps().eval(), (torch.randn(2, 3),), report=True, artifacts_dir=tmp_path / "x"
        )
    path = only_report(tmp_path / "x")
    assert f"export report written to {path}" in capsys.readouterr().out
    assert f"export report: {path}" in raised.value.__notes__


def test_verify_requested_but_not_reached_says_so(tmp_path):
    path = _failed_report(tmp_path, verify=True)
    for title in ("Accuracy", "Bisection"):
        text = section(path, title)
        assert "`verify=True` was requested, but the export failed at translation" in text
        assert "not requested" not in text and "pass `verify=True`" not in text
    assert "pass verify=True" not in section(path, "Status")


def test_without_verify_the_report_says_how_to_ask_for_it(tmp_path):
    program = exporter.export(
        LinearSigmoid().eval(), (torch.randn(2, 4),), report=True, artifacts_dir=tmp_path
    )
    assert "Not run: pass `verify=True`" in section(program.report_path, "Accuracy")
    assert "Not run: pass `verify=True`" in section(program.report_path, "Bisection")


class ScaledSigmoid(torch.nn.Module):
    def forward(self, x):
        return torch.sigmoid(x) * 1.75


def test_report_shows_the_onnx_graph_as_text_collapsed(tmp_path):
    program = exporter.export(
        ScaledSigmoid().eval(), (torch.randn(2, 4),), report=True, artifacts_dir=tmp_path
    )
    text = section(program.report_path, "ONNX graph")
    assert "<details><summary>The graph as text (2 nodes in the main graph)</summary>" in text
    assert "::Sigmoid(" in text and "::Mul(" in text
    assert "{1.75}" in text  # the constant's value, where a wrong one would show
    assert "translation did not produce" in section(
        _failed_report(tmp_path / "failed"), "ONNX graph"
    )


def _failed_report(folder: Path, **options) -> Path:
    """The report of an export that fails at translation (three ops without a translation)."""
    with pytest.raises(exporter.UnsupportedOpError):
        exporter.export(
            ThreeCustomOps().eval(),
            (torch.randn(2, 3),),
            report=True,
            artifacts_dir=folder,
            **options,
        )
    return only_report(folder)


ROOT = Path(__file__).resolve().parents[3]


def test_custom_op_repro_and_dump_import_the_module_that_registers_the_ops(tmp_path):
    """In a fresh process the custom ops exist only after their module is imported: the
    repro script and the report's torch.export.load line both import it first."""
    import json
    import subprocess
    import sys

    path = _failed_report(tmp_path, dump_exported_program=True)
    repro = report.repro_folder(path)
    assert json.loads((repro / "case.json").read_text())["imports"] == [__name__]
    header = path.read_text().split("\n## ")[0]
    assert f"imports `{__name__}` first" in header
    rerun = subprocess.run(
        [sys.executable, str(repro / "rerun_export.py")],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    # The ops are registered (no "unknown operator" from torch): the export fails as it did.
    assert rerun.returncode == 1 and "3 ops have no ONNX translation" in rerun.stderr, rerun.stderr
    load = re.search(r"load it with `([^`]+)`", header).group(1)
    assert load.startswith(f"import {__name__}; import torch; program = torch.export.load(")
    loaded = subprocess.run(
        [sys.executable, "-c", load + "; print(len(program.graph.nodes))"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert loaded.returncode == 0, loaded.stderr
