"""exporter._pipeline: the export as a list of stages, each run under the record's stage."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import torch
from torch.export import Dim

from torch_onnx_conformance import exporter
from torch_onnx_conformance.exporter import _pipeline, _validate
from torch_onnx_conformance.exporter._errors import InvalidExportArgumentsError
from torch_onnx_conformance.exporter._record import ExportRecord
from torch_onnx_conformance.exporter.ops._opsets import DEFAULT_OPSET
from torch_onnx_conformance.exporter.stages import RECORD_STAGES, VERIFY_STAGES, Stage


class Add(torch.nn.Module):
    def forward(self, x, y):
        return x + y


def _arguments(model, args, **options):
    """export()'s parameters by name, defaults filled in, as export() hands them to validate."""
    bound = inspect.signature(exporter.export).bind(model, args, **options)
    bound.apply_defaults()
    return dict(bound.arguments)


def test_the_steps_are_the_export_stages_of_the_one_vocabulary_then_finish():
    staged = [step.stage for step in _pipeline.STEPS if step.stage is not None]
    assert staged == [s for s in RECORD_STAGES if s not in VERIFY_STAGES]
    assert _pipeline.STEPS[-1].stage is None and _pipeline.STEPS[-1].run is _pipeline.finish


def test_validate_returns_a_frozen_request_with_defaults_resolved():
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    record = ExportRecord()
    arguments = _arguments(
        Add().eval(), (x, y), input_names=["a", "b"], dynamic_axes={"a": {0: "n"}, "b": {0: "n"}}
    )
    with pytest.warns(UserWarning, match="dynamic_axes"):
        request = _validate.validate(arguments, record)
    assert request.opset == record.opset == DEFAULT_OPSET
    assert request.dynamic_shapes == {"x": {0: "n"}, "y": {0: "n"}}
    assert request.capture_shapes == {"x": {0: Dim.DYNAMIC}, "y": {0: Dim.DYNAMIC}}
    assert request.axis_names.by_leaf == {0: {0: "n"}, 1: {0: "n"}}
    assert request.capture_patches == () and request.dump_dir is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.opset = 18  # type: ignore[misc]


def test_an_argument_error_leaves_the_facts_known_before_it_in_the_record():
    record = ExportRecord()
    arguments = _arguments(Add().eval(), (torch.ones(1), torch.ones(1)), output_names=["o", "o"])
    with pytest.raises(InvalidExportArgumentsError, match="duplicates"):
        _validate.validate(arguments, record)
    assert record.opset == DEFAULT_OPSET and record.registry is None


def test_run_records_each_stage_skips_and_failures(monkeypatch):
    calls = []

    def step(name, fail=False):
        def fn(request, state, record):
            calls.append(name)
            if fail:
                raise RuntimeError(f"{name} broke")

        return fn

    monkeypatch.setattr(
        _pipeline,
        "STEPS",
        (
            _pipeline.Step(
                Stage.CAPTURE,
                step("capture"),
                skip=lambda request: True,
                skip_note="not captured",
                then=step("after capture"),
            ),
            _pipeline.Step(Stage.DECOMPOSITION, step("decompose")),
            _pipeline.Step(Stage.TRANSLATION, step("translate", fail=True)),
            _pipeline.Step(Stage.OPTIMIZE, step("optimize")),
        ),
    )
    record = ExportRecord()
    with pytest.raises(RuntimeError, match="translate broke"):
        _pipeline.run(None, record)  # type: ignore[arg-type]
    assert calls == ["after capture", "decompose", "translate"]
    assert record.status == {"capture": "skipped", "decomposition": "ok", "translation": "failed"}
    assert record.notes == ["not captured"]
    assert [e["stage"] for e in record.errors] == ["translation"]
    assert set(record.timings) == {"decomposition", "translation"}
