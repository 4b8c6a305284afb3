"""Bisection: the first FX node whose ONNX value diverges, found with one onnxruntime session."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from torch_onnx_conformance import exporter
from torch_onnx_conformance.exporter._validate import registry_with as _registry_with
from torch_onnx_conformance.exporter.diagnostics import bisect as bisect_mod
from torch_onnx_conformance.exporter.diagnostics.verify import OnnxVerificationWarning

aten = torch.ops.aten


def planted_relu(ctx, x):
    """A wrong relu: scales the result by 1.5."""
    return ctx.op.Mul(ctx.op.Relu(x), ctx.const(1.5, torch.float32))


PLANTED = {aten.relu.default: planted_relu}


class ThreeLayers(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Linear(4, 8)
        self.second = torch.nn.Linear(8, 8)
        self.third = torch.nn.Linear(8, 3)

    def forward(self, x):
        h = self.first(x) + 0.5
        h = torch.relu(self.second(h))  # the planted relu runs here
        return torch.sigmoid(self.third(h))


def _line_of(marker: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if marker in line and "#" in line)


@pytest.fixture(scope="module")
def planted_export():
    torch.manual_seed(0)
    model = ThreeLayers().eval()
    x = torch.randn(3, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        program = exporter.export(model, (x,), verify=True, custom_translation_table=PLANTED)
    return model, x, program, caught


def test_planted_translation_is_found_with_its_node_and_source_line(planted_export):
    _, _, program, caught = planted_export
    assert any(issubclass(w.category, OnnxVerificationWarning) for w in caught)
    found = program.verification.bisection
    assert found is not None and found.first is not None
    first = found.first
    assert first.fx_node == "relu"
    assert first.aten_op == "aten.relu.default"
    line = _line_of("the planted relu runs here")
    assert first.source.startswith(f"{__file__}:{line} in forward")
    assert "torch.relu(self.second(h))" in first.source
    # Everything before it agreed, and the exported program itself matches eager: the fault
    # is in the translation, not in capture.
    assert found.divergent[0].fx_node == "relu"
    assert found.program_vs_reference == "match"
    assert "relu" in program.verification.summary()


def test_bisection_names_the_translation_that_produced_the_node(planted_export):
    model, x, program, _ = planted_export
    found = bisect_mod.bisect(program, (x,), rtol=1e-3, atol=1e-4, registry=_registry_with(PLANTED))
    assert found.first.fx_node == "relu"
    assert found.first.translation.endswith("planted_relu")


def test_export_verify_names_a_custom_translation(planted_export):
    _, _, program, _ = planted_export
    assert program.verification.bisection.first.translation.endswith("planted_relu")


def test_bisection_builds_exactly_one_session(planted_export, monkeypatch):
    import onnxruntime

    _, x, program, _ = planted_export
    created = []
    real = onnxruntime.InferenceSession

    def counting(*args, **kwargs):
        created.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(onnxruntime, "InferenceSession", counting)
    found = bisect_mod.bisect(program, (x,), rtol=1e-3, atol=1e-4, registry=_registry_with(PLANTED))
    assert found.first.fx_node == "relu"
    assert found.compared >= 4  # linear, add, linear, relu at least: one session for all
    assert len(created) == 1


class FoldedWeights(torch.nn.Module):
    """``self.w + 1.0`` depends only on a weight: the optimiser folds it away."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4))
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.sigmoid(self.lin(x) + (self.w + 1.0))


def test_optimised_model_is_retranslated_when_fx_values_were_folded_away():
    model = FoldedWeights().eval()
    x = torch.randn(2, 4)
    program = exporter.export(model, (x,))
    present = bisect_mod._node_outputs(program.model.graph)
    mapping = program.model.graph.meta["exporter.fx_values"]
    assert any(v not in present for v in mapping.values()), "the optimiser kept every value"
    found = bisect_mod.bisect(program, (x,), rtol=1e-3, atol=1e-4, registry=_registry_with(None))
    assert found.model_used == "unoptimised re-translation"
    assert found.first is None
    assert found.compared == found.candidates == len(mapping)


def test_correct_model_has_no_divergent_node():
    model = ThreeLayers().eval()
    x = torch.randn(2, 4)
    program = exporter.export(model, (x,), optimize=False)
    found = bisect_mod.bisect(program, (x,), rtol=1e-3, atol=1e-4)
    assert found.first is None
    assert found.divergent == []
    assert found.compared == found.candidates
    assert "no divergent node" in found.summary()


class PlantedLast(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        return torch.relu(self.lin(x)), self.lin.weight


def test_bisection_reads_the_exported_model_when_output_names_rename_an_output_and_a_weight():
    """The caller's output_names rename the planted node's output and a returned weight: the
    FX-node-to-value map follows them, so the exported model itself is bisected (no
    re-translation) and the renamed output's node is compared."""
    torch.manual_seed(0)
    x = torch.randn(3, 4)
    program = exporter.export(
        PlantedLast().eval(), (x,), custom_translation_table=PLANTED, output_names=["out", "w"]
    )
    assert [v.name for v in program.model.graph.outputs] == ["out", "w"]
    found = bisect_mod.bisect(program, (x,), rtol=1e-3, atol=1e-4, registry=_registry_with(PLANTED))
    assert found.model_used == "exported model"
    assert found.uncompared == []
    assert found.first is not None and found.first.fx_node == "relu"
