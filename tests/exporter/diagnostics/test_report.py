"""report=True: one markdown file per export with every section, on success and on failure."""

from __future__ import annotations

import re
import runpy
import warnings
from pathlib import Path

import pytest
import torch

import exporter
from exporter._record import ExportRecord
from exporter.diagnostics import report

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


class Small(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        return torch.sigmoid(self.lin(x))


def test_success_report_carries_every_section(tmp_path):
    program = exporter.export(
        Small().eval(),
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
        exporter.export(Small(), [torch.randn(2, 4)], report=True, artifacts_dir=tmp_path)
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
            Small().eval(),
            (torch.randn(2, 4),),
            report=True,
            verify=True,
            artifacts_dir=tmp_path,
            custom_translation_table={torch.ops.aten.sigmoid.default: planted_sigmoid},
        )
    path = program.report_path
    assert NAME.fullmatch(path.name).group(1) == "accuracy"
    repro = path.with_name(path.stem + "_repro")
    assert program.verification.repro_dir == repro
    assert (repro / "repro.py").exists() and (repro / "model.onnx").exists()
    assert f"`{repro}`" in section(path, "Accuracy")
    assert "First divergent FX node: **`sigmoid`**" in section(path, "Bisection")


def test_a_section_that_raises_shows_its_own_error_and_the_rest_survive(tmp_path, monkeypatch):
    def broken(record, program):
        raise RuntimeError("graph summary exploded")

    monkeypatch.setattr(report, "_graph_summary", broken)
    program = exporter.export(
        Small().eval(), (torch.randn(2, 4),), report=True, artifacts_dir=tmp_path
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
