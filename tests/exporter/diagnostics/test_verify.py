"""verify=True: the real checker, onnxruntime, and comparison with the EAGER module at two sizes."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from tests.exporter.diagnostics.models import LinearSigmoid
from torch_onnx_conformance import exporter
from torch_onnx_conformance.exporter.diagnostics import verify
from torch_onnx_conformance.exporter.diagnostics.compare import ERROR_BIN_LABELS, Comparison
from torch_onnx_conformance.exporter.diagnostics.verify import OnnxVerificationWarning

aten = torch.ops.aten
VERIFY_STAGES = ("checker", "load", "run", "compare", "second-shape")


class TwoLayers(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Linear(4, 8)
        self.second = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.sigmoid(self.second(torch.sigmoid(self.first(x))))


def _export_quietly(*args, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        program = exporter.export(*args, **kwargs)
    return program, [w for w in caught if issubclass(w.category, OnnxVerificationWarning)]


def test_matching_model_passes_every_stage_at_both_sizes():
    x = torch.randn(2, 4)
    program, complaints = _export_quietly(
        TwoLayers().eval(), (x,), verify=True, dynamic_shapes=({0: "batch"},)
    )
    assert complaints == []
    result = program.verification
    assert result.ok and result.reference == "the eager module"
    assert {s: program.record.status[s] for s in VERIFY_STAGES} == dict.fromkeys(
        VERIFY_STAGES, "ok"
    )
    assert [r.label for r in result.runs] == ["example inputs", "second shape"]
    # One result model: each run is compare's Comparison, each output names itself.
    assert all(isinstance(r, Comparison) for r in result.runs)
    graph_output = program.model.graph.outputs[0].name
    assert [(o.index, o.name) for o in result.runs[0].outputs] == [(0, graph_output)]
    assert result.runs[1].input_shapes == [("x", (3, 4))]
    assert result.changed_dims == ["x dim 0 (batch): 2 -> 3"]
    out = result.runs[1].outputs[0]
    assert (out.expected_shape, out.actual_shape) == ((3, 8), (3, 8))
    assert out.expected_dtype == out.actual_dtype == "float32"
    assert sum(out.histogram) == out.total == 24


def sigmoid_fixed_to_example_batch(ctx, x):
    """Shape-specialising: reshapes to the example's concrete batch instead of the symbolic one."""
    batch = ctx.shape(x)[0]
    example = batch.node.hint if isinstance(batch, torch.SymInt) else batch
    return ctx.op.Reshape(ctx.op.Sigmoid(x), ctx.const([example, -1], torch.int64))


def test_shape_specialising_translation_is_caught_at_the_second_size():
    table = {aten.sigmoid.default: sigmoid_fixed_to_example_batch}
    x = torch.randn(2, 4)
    program, complaints = _export_quietly(
        LinearSigmoid(out_features=8).eval(),
        (x,),
        verify=True,
        dynamic_shapes=({0: "batch"},),
        custom_translation_table=table,
    )
    status = program.record.status
    assert status["compare"] == "ok"  # right at the example size...
    assert status["second-shape"] == "failed"  # ...wrong at any other
    second = program.verification.runs[1]
    assert second.outputs[0].message == "shape [2, 12] != expected [3, 8]"
    assert len(complaints) == 1 and "second shape (x[3, 4])" in str(complaints[0].message)
    first = program.verification.bisection.first
    assert first.fx_node == "sigmoid" and "shape [2, 12]" in first.comparison.message


def test_strict_mode_raises_naming_the_output_its_error_and_the_input_shapes():
    table = {aten.sigmoid.default: sigmoid_fixed_to_example_batch}
    with pytest.raises(exporter.OnnxVerificationError) as info:
        exporter.export(
            LinearSigmoid(out_features=8).eval(),
            (torch.randn(2, 4),),
            verify="strict",
            dynamic_shapes=({0: "batch"},),
            custom_translation_table=table,
        )
    message = str(info.value)
    assert "second shape (x[3, 4])" in message
    assert "output 0 (sigmoid)" in message
    assert "shape [2, 12] != expected [3, 8]" in message


class BatchAsConstant(torch.nn.Module):
    """float(x.shape[0]) bakes the example batch into the graph (a guard, with Dim.AUTO)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x) + float(x.shape[0])


def test_model_that_bakes_a_dynamic_dimension_is_caught():
    x = torch.randn(2, 4)
    program, complaints = _export_quietly(
        BatchAsConstant().eval(), (x,), verify=True, dynamic_shapes=({0: torch.export.Dim.AUTO},)
    )
    # Capture defers the guard, so the input stays dynamic; the baked 2.0 is wrong at batch 3,
    # and verification's second shape says so.
    assert not isinstance(program.model.graph.inputs[0].shape[0], int)
    assert program.record.status["compare"] == "ok"
    assert program.record.status["second-shape"] == "failed"
    assert "second shape" in str(complaints[0].message)
    assert any("x dim 0 (size 2)" in note for note in program.record.notes)


def sigmoid_with_bogus_attribute(ctx, x):
    return ctx.op.Sigmoid(x, not_an_attribute=1)


def test_checker_really_runs_and_its_failure_is_recorded():
    table = {aten.sigmoid.default: sigmoid_with_bogus_attribute}
    program, complaints = _export_quietly(
        LinearSigmoid(out_features=8).eval(),
        (torch.randn(2, 4),),
        verify=True,
        optimize=False,
        custom_translation_table=table,
    )
    status = program.record.status
    assert status["checker"] == "failed"
    assert "not_an_attribute" in program.verification.checker
    assert status["load"] == "failed"
    assert complaints and "onnx.checker" in str(complaints[0].message)
    assert {e["stage"] for e in program.record.errors} >= {"checker", "load"}


def test_exported_program_input_is_compared_with_its_module_and_says_so():
    model = TwoLayers().eval()
    ep = torch.export.export(model, (torch.randn(2, 4),))
    program, complaints = _export_quietly(ep, verify=True)  # no args: the example inputs
    assert complaints == []
    assert program.verification.reference.startswith("exported_program.module()")
    assert program.verification.runs[0].input_shapes == [("x", (2, 4))]
    assert program.record.status["second-shape"] == "skipped"
    assert program.verification.skipped["second-shape"] == ("the model has no dynamic dimensions")


class SharedBatch(torch.nn.Module):
    def forward(self, x, y):
        return torch.cat([torch.sigmoid(x), y], dim=1)


def test_dims_sharing_an_axis_name_change_together():
    x, y = torch.randn(2, 3), torch.randn(2, 5)
    program, complaints = _export_quietly(
        SharedBatch(), (x, y), verify=True, dynamic_shapes=({0: "batch"}, {0: "batch"})
    )
    assert complaints == []
    assert program.verification.runs[1].input_shapes == [("x", (3, 3)), ("y", (3, 5))]


class CountsCalls(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls.add_(1)
        return self.lin(x) + self.calls


def test_verification_does_not_change_the_users_module():
    model = CountsCalls().eval()
    program, _ = _export_quietly(model, (torch.randn(2, 4),), verify=True)
    assert program.record.status["run"] == "ok"
    assert model.calls.item() == 0


def test_compare_output_flags_dtype_and_counts_elements():
    want = np.array([1.0, 2.0, 3.0], np.float32)
    result = verify.compare_output(0, "y", want, want.astype(np.float64), rtol=None, atol=None)
    assert not result.ok and "dtype float64 != expected float32" in result.message
    result = verify.compare_output(
        0, "y", want, np.array([1.0, 2.0, 3.5], np.float32), rtol=1e-3, atol=1e-3
    )
    assert not result.ok and result.mismatched == 1 and result.max_abs == pytest.approx(0.5)
    assert result.histogram[ERROR_BIN_LABELS.index("<1")] == 1
    assert sum(result.histogram) == 3


def test_second_size_respects_the_declared_range():
    x = torch.randn(3, 4)
    batch = torch.export.Dim("batch", min=2, max=3)
    program, complaints = _export_quietly(
        LinearSigmoid(out_features=8).eval(), (x,), verify=True, dynamic_shapes=({0: batch},)
    )
    assert complaints == []
    assert program.verification.changed_dims == ["x dim 0 (batch): 3 -> 2"]


class RaisesOnlyInEager(torch.nn.Module):
    """Exports (the ONNX-export flag is up while capturing) but raises when run eagerly, so the
    reference verify compares against cannot be computed."""

    def forward(self, x):
        if not torch.onnx.is_in_onnx_export():
            raise RuntimeError("this module only runs under export")
        return x * 2


def test_a_reference_that_raises_is_reported_not_a_key_error():
    x = torch.randn(2, 3)
    program, complaints = _export_quietly(RaisesOnlyInEager(), (x,), verify=True)
    assert len(complaints) == 1
    message = str(complaints[0].message)
    assert message.startswith("verify could not run: the reference raised on the example inputs")
    assert "RuntimeError: this module only runs under export" in message
    assert program.record.status["compare"] == "skipped"
    with pytest.raises(exporter.OnnxVerificationError, match="only runs under export"):
        exporter.export(RaisesOnlyInEager(), (x,), verify="strict")
