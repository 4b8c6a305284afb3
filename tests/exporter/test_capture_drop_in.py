"""Drop-in fidelity of capture, side by side with torch.onnx where it behaves correctly.

torch.export rejects some dynamic_shapes with "Constraints violated" and suggested fixes;
torch.onnx applies them and exports. Ours does the same, and also says which dims changed.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.export import Dim

from torch_onnx_conformance import exporter


class AddTwo(torch.nn.Module):
    def forward(self, x, y):
        return x + y


class DoubleWhenLong(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] > 3:
            return x * 2.0
        return x


def _export_both(module, args, dynamic_shapes, **ours_kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours = exporter.export(module, args, dynamic_shapes=dynamic_shapes, **ours_kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = torch.onnx.export(module, args, dynamic_shapes=dynamic_shapes, dynamo=True)
    refined = [str(w.message) for w in caught if "suggested fixes" in str(w.message)]
    return ours, theirs, refined


def _assert_runs_like_eager(module, programs, args):
    expected = module(*args)
    for program in programs:
        (got,) = program(*args)
        torch.testing.assert_close(torch.as_tensor(got), expected)


def test_tied_dims_are_refined_and_named():
    module = AddTwo().eval()
    args = (torch.rand(3, 4), torch.rand(3, 4))
    ours, theirs, refined = _export_both(module, args, ({0: Dim("a")}, {0: Dim("b")}))
    assert len(refined) == 1
    assert "dynamic_shapes[1][0]: Dim('b', min=0) -> Dim('a', min=0)" in refined[0]
    assert refined[0] in ours.record.notes
    assert [str(d) for d in ours.model.graph.inputs[1].shape] == ["a", "4"]
    _assert_runs_like_eager(module, (ours, theirs), (torch.rand(7, 4), torch.rand(7, 4)))


def test_narrowed_range_is_refined_and_the_graph_generalises():
    module = DoubleWhenLong().eval()
    ours, theirs, refined = _export_both(module, (torch.rand(5, 2),), ({0: Dim("n")},))
    assert "dynamic_shapes[0][0]: Dim('n', min=0) -> Dim('n', min=4)" in refined[0]
    _assert_runs_like_eager(module, (ours, theirs), (torch.rand(9, 2),))


def test_dim_fixed_by_a_static_partner_is_reported(tmp_path):
    module = AddTwo().eval()
    args = (torch.rand(3, 4), torch.rand(3, 4))
    ours, theirs, refined = _export_both(
        module, args, ({0: Dim("a")}, None), report=True, artifacts_dir=tmp_path
    )
    assert "dynamic_shapes[0][0]: Dim('a', min=0) -> 3" in refined[0]
    assert [str(d) for d in ours.model.graph.inputs[0].shape] == ["3", "4"]
    assert "Dim('a', min=0) -> 3" in ours.report_path.read_text()
    _assert_runs_like_eager(module, (ours, theirs), args)


class DoubleAtFive(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] == 5:
            return x * 2.0
        return x


class BranchOnCount(torch.nn.Module):
    def forward(self, x):
        kept = x[x > 0.5]
        if kept.shape[0] > 2:
            return kept * 2.0
        return kept


class BranchOnLongSum(torch.nn.Module):
    def forward(self, x):
        kept = x[x > 0.5]
        count = kept.shape[0]
        if sum((count + i) // (i + 2) for i in range(60)) > 7:
            return kept * 2.0
        return kept


def test_a_dim_the_model_fixes_is_named_with_its_line():
    # torch.onnx fails here too, with the message cut after "from model tracing:".
    with pytest.raises(exporter.OnnxExporterError) as caught:
        exporter.export(DoubleAtFive().eval(), (torch.rand(5, 4),), dynamic_shapes=({0: "n"},))
    message = str(caught.value)
    assert "static shape of 5 for dimension inputs[0].shape[0]" in message
    assert "x dim 0 (size 5), by the guard x.shape[0] == 5 at " in message
    assert "in forward: if x.shape[0] == 5:" in message
    assert "x dim 1" not in message


def test_a_data_dependent_guard_names_its_line_and_remedies():
    with pytest.raises(exporter.OnnxExporterError) as caught:
        exporter.export(BranchOnCount().eval(), (torch.rand(10),))
    message = str(caught.value)
    assert "The guard that failed reads tensor data: u0 > 2" in message
    assert "test_capture_drop_in.py" in message
    assert "in forward: if kept.shape[0] > 2:" in message
    assert "torch._check(" in message and "Dim(" in message


def test_a_long_data_dependent_guard_is_shown_in_short_form():
    # The guard's expression is 60 floor divisions (over 1000 characters): the message keeps
    # its shape and names the symbol instead of printing it whole, in any line.
    with pytest.raises(exporter.OnnxExporterError) as caught:
        exporter.export(BranchOnLongSum().eval(), (torch.rand(10),))
    message = str(caught.value)
    assert (
        "The guard that failed reads tensor data: (u0//2) + ((u0 + 1)//3) + \u2026 58 more "
        "terms > 7 (" in message
    )
    assert "characters in full; u0 read from tensor data)" in message
    assert "in forward: if sum((count + i) // (i + 2) for i in range(60)) > 7:" in message
    assert max(len(line) for line in message.splitlines()) < 400
