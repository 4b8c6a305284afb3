"""The specialisation audit: every dim declared dynamic says whether it stayed symbolic, and a dim
a guard held at its example size is named with the guard and the user's line.

torch.onnx runs beside ours: it keeps the same graph inputs symbolic and says nothing about the
guard, which is the silent specialisation users report.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.export import Dim

from torch_onnx_conformance import exporter
from torch_onnx_conformance.exporter import _dynamic_shapes


class SqueezeBatchOfOne(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] == 1:
            return x.squeeze(0) * 2.0
        return x.sum(0)


class AddRow(torch.nn.Module):
    def forward(self, x):
        return x + torch.ones(1, 4)


class FixedReshape(torch.nn.Module):
    def forward(self, x):
        return x.reshape(3, 4)


class ScaleByLength(torch.nn.Module):
    def forward(self, x):
        return x * float(x.shape[0])


class BiLSTM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(4, 5, bidirectional=True, batch_first=True)

    def forward(self, x):
        return self.lstm(x)[0]


def _export(module, args, dynamic_shapes, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        program = exporter.export(module.eval(), args, dynamic_shapes=dynamic_shapes, **kwargs)
    held = [str(w.message) for w in caught if "held dynamic dims" in str(w.message)]
    return program, held


def _torch_onnx_warnings(module, args, dynamic_shapes):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        theirs = torch.onnx.export(module.eval(), args, dynamic_shapes=dynamic_shapes, dynamo=True)
    return theirs, [str(w.message) for w in caught]


def _symbolic(program, index=-1):
    return [not isinstance(d, int) for d in program.model.graph.inputs[index].shape]


def test_batch_of_one_held_by_a_guard_names_the_line():
    args, shapes = (torch.rand(1, 4),), ({0: "batch"},)
    program, held = _export(SqueezeBatchOfOne(), args, shapes)
    (dim,) = program.specialized_dims
    assert (dim.input, dim.axis, dim.size, dim.status) == ("x", 0, 1, _dynamic_shapes.HELD)
    assert dim.guard == "x.shape[0] == 1"
    assert dim.source.endswith("in forward: if x.shape[0] == 1:")
    assert "test_dim_audit.py" in dim.source
    assert len(held) == 1 and dim.source in held[0]
    theirs, their_warnings = _torch_onnx_warnings(SqueezeBatchOfOne(), args, shapes)
    assert _symbolic(theirs) == [True, False]
    assert not any("x.shape[0] == 1" in w for w in their_warnings)


def test_batch_of_one_that_broadcasts_stays_dynamic():
    program, held = _export(AddRow(), (torch.rand(1, 4),), ({0: "batch"},))
    assert [(a.axis, a.status) for a in program.record.dim_audit] == [(0, "dynamic")]
    assert program.specialized_dims == [] and held == []
    x = torch.rand(3, 4)
    torch.testing.assert_close(torch.as_tensor(program(x)[0]), AddRow()(x))


def test_dim_auto_held_by_reshape_names_the_line():
    program, held = _export(FixedReshape(), (torch.rand(12),), ({0: Dim.AUTO},))
    (dim,) = program.specialized_dims
    assert dim.status == _dynamic_shapes.HELD and dim.size == 12
    assert "x.shape[0]" in dim.guard and "12" in dim.guard
    assert dim.source.endswith("in forward: return x.reshape(3, 4)")
    assert dim.source in held[0]
    theirs, their_warnings = _torch_onnx_warnings(
        FixedReshape(), (torch.rand(12),), ({0: Dim.AUTO},)
    )
    assert _symbolic(theirs) == [True]
    assert not any("reshape(3, 4)" in w for w in their_warnings)


def test_float_of_a_size_stays_symbolic():
    program, held = _export(ScaleByLength(), (torch.rand(5, 4),), ({0: "n"},))
    assert [a.status for a in program.record.dim_audit] == ["dynamic"] and held == []
    x = torch.rand(8, 4)
    torch.testing.assert_close(torch.as_tensor(program(x)[0]), ScaleByLength()(x))


def test_bilstm_time_axis_stays_symbolic():
    torch.manual_seed(0)
    module = BiLSTM().eval()
    program, held = _export(module, (torch.rand(1, 6, 4),), ({0: "batch", 1: "time"},))
    assert [(a.axis, a.status) for a in program.record.dim_audit] == [
        (0, "dynamic"),
        (1, "dynamic"),
    ]
    assert held == []
    x = torch.rand(2, 9, 4)
    torch.testing.assert_close(torch.as_tensor(program(x)[0]), module(x), rtol=1e-4, atol=1e-5)


def test_report_has_the_dims_table(tmp_path):
    program, _ = _export(
        FixedReshape(), (torch.rand(12),), ({0: Dim.AUTO},), report=True, artifacts_dir=tmp_path
    )
    text = program.report_path.read_text()
    section = text.split("## Dynamic dims", 1)[1].split("\n## ", 1)[0]
    assert "| x | 0 | 12 | held |" in section
    assert "return x.reshape(3, 4)" in section


@pytest.mark.parametrize("shapes", [None, ({0: None},)])
def test_nothing_declared_nothing_audited(shapes):
    program, held = _export(AddRow(), (torch.rand(2, 4),), shapes)
    assert program.record.dim_audit == [] and held == []


class GuardOnTwo(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] == 2:
            return x + 1
        return x - 1


def test_failed_capture_report_names_the_guard_its_error_names(tmp_path):
    # Dim.DYNAMIC must stay dynamic, so the guard fails the capture instead of warning; the
    # report's dims section repeats what the error says instead of "no guard held one".
    with pytest.raises(exporter.CaptureError, match=r"by the guard x\.shape\[0\] == 2"):
        exporter.export(
            GuardOnTwo().eval(),
            (torch.rand(2, 3),),
            dynamic_shapes=({0: Dim.DYNAMIC},),
            report=True,
            artifacts_dir=tmp_path,
        )
    (report,) = tmp_path.glob("*_capture.md")
    section = report.read_text().split("## Dynamic dims", 1)[1].split("\n## ", 1)[0]
    assert "no guard held one" not in section
    assert "x dim 0 (size 2), by the guard x.shape[0] == 2" in section
