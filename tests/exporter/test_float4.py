"""torch.float4_e2m1fn_x2 tensors (two float4 values packed per element) as ONNX FLOAT4E2M1.

torch packs the first of each pair in the low nibble (torch.testing's ``pack_uint4``), and ONNX
stores FLOAT4E2M1 two values per byte, the first in the low nibble too: the bytes are the same
and the ONNX shape's last dim is twice torch's. Inputs, outputs, weights, the ops that carry
a value unchanged, ``view(torch.uint8)`` and back (bytes computed from the values) and ops that
move whole pairs (run on those bytes) export at opset 23 and later; other computations on
float4 tensors, and older opsets, are refused by name.

onnxruntime 1.31 has no CPU kernel that takes FLOAT4E2M1 except com.microsoft's
GatherBlockQuantized (not even Identity): where it has none, the graph is checked structurally
(onnx.checker, dtype, shape, an initializer's raw bytes) and run by onnx's reference evaluator.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
import torch
from onnx.reference import ReferenceEvaluator

from torch_onnx_conformance import exporter
from torch_onnx_conformance.exporter import _dtypes

_X = torch.tensor([[0x21, 0xF3, 0x07]], dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
_W = torch.tensor([[0x5A, 0x0C]], dtype=torch.uint8).view(torch.float4_e2m1fn_x2)


def _ort_runs_float4(op: str) -> bool:
    from onnxruntime.capi.onnxruntime_pybind11_state import get_all_opkernel_def

    return any(
        kernel.op_name == op
        and kernel.domain == ""
        and any("float4" in t.lower() for ts in kernel.type_constraints.values() for t in ts)
        for kernel in get_all_opkernel_def()
    )


class PassThrough(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("w", _W.clone())

    def forward(self, x: torch.Tensor, y: torch.Tensor):
        return x.clone(), self.w, y + 1


class ToBytes(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(torch.uint8) + 1


class FromBytes(torch.nn.Module):
    def forward(self, data: torch.Tensor) -> torch.Tensor:
        return (data ^ 0x11).view(torch.float4_e2m1fn_x2)


class SignedBytes(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(torch.int8)


class Moves(torch.nn.Module):
    """Ops that move whole elements: on float4 pairs they do what they do on the bytes."""

    def forward(self, x: torch.Tensor, y: torch.Tensor):
        return (
            x.reshape(8, 6),
            torch.cat([x, y], 1),
            x[:, 1:3, 2:5],
            x.transpose(0, 1),
            x.permute(2, 0, 1),
            x.index_select(1, torch.tensor([3, 0])),
            x.unsqueeze(0).flatten(0, 1),
            x.select(1, 2),
        )


#: Every byte: every pair of float4 codes, -0.0 (code 8) included.
_ALL_BYTES = torch.arange(256, dtype=torch.uint8).reshape(4, 64)


def _bytes(tensor: torch.Tensor) -> list[int]:
    return tensor.view(torch.uint8).flatten().tolist()


@pytest.fixture(scope="module")
def program():
    return exporter.export(PassThrough().eval(), (_X, torch.ones(2)), opset_version=23)


def test_float4_inputs_outputs_and_weights_are_float4e2m1_of_the_unpacked_shape(program):
    graph = program.model.graph
    x, w = graph.inputs[0], graph.outputs[1]
    assert (x.dtype, list(x.shape)) == (ir.DataType.FLOAT4E2M1, [1, 6])
    assert (w.dtype, list(w.shape)) == (ir.DataType.FLOAT4E2M1, [1, 4])
    proto = program.model_proto
    onnx.checker.check_model(proto, full_check=True)
    (init,) = [i for i in proto.graph.initializer if i.name == "w"]
    assert init.data_type == onnx.TensorProto.FLOAT4E2M1 and list(init.dims) == [1, 4]
    assert list(init.raw_data) == _bytes(_W)  # the same bytes, low nibble first
    # 0x5A: low nibble 0xA is -1.0, high 0x5 is 3.0; 0x0C: -2.0 then 0.0
    np.testing.assert_array_equal(
        onnx.numpy_helper.to_array(init).astype(np.float32), [[-1, 3, -2, 0]]
    )


def test_float4_values_round_trip_through_the_graph(program):
    x = torch.tensor([[0x9E, 0x40, 0x11]], dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    feeds = {"x": _dtypes.to_numpy(x), "y": np.ones(2, np.float32)}
    if _ort_runs_float4("Identity"):
        got = program(x, torch.ones(2))
    else:
        with pytest.raises(Exception, match="Identity"):  # onnxruntime has no float4 kernel
            program(x, torch.ones(2))
        got = [
            _dtypes.from_numpy(o) for o in ReferenceEvaluator(program.model_proto).run(None, feeds)
        ]
    assert got[0].dtype is torch.float4_e2m1fn_x2 and _bytes(got[0]) == _bytes(x)
    assert _bytes(got[1]) == _bytes(_W)
    torch.testing.assert_close(got[2], torch.full((2,), 2.0))


def test_unpacking_puts_the_first_value_of_a_pair_in_the_low_nibble():
    values = _dtypes.to_numpy(_X).astype(np.float32)
    # 0x21: 0.5, 1.0; 0xF3: 1.5, -6.0; 0x07: 6.0, 0.0
    np.testing.assert_array_equal(values, [[0.5, 1.0, 1.5, -6.0, 6.0, 0.0]])
    assert _bytes(_dtypes.from_numpy(_dtypes.to_numpy(_X))) == _bytes(_X)


def test_an_opset_without_float4e2m1_is_refused_by_name():
    with pytest.raises(_dtypes.UnsupportedDtypeError, match=r"from opset 23 on; opset_version=18"):
        exporter.export(PassThrough().eval(), (_X, torch.ones(2)), opset_version=18)


@pytest.mark.parametrize("direction", ["to_bytes", "from_bytes"])
def test_a_view_between_float4_and_its_bytes_is_computed_exactly(direction):
    """ONNX's BitCast needs equal bit widths: the bytes are computed from the values."""
    if direction == "to_bytes":
        module, example = ToBytes(), _ALL_BYTES.view(torch.float4_e2m1fn_x2)
        feeds = {"x": _dtypes.to_numpy(example)}
    else:
        module, example = FromBytes(), _ALL_BYTES
        feeds = {"data": example.numpy()}
    program = exporter.export(module.eval(), (example,), opset_version=23)
    onnx.checker.check_model(program.model_proto, full_check=True)
    assert not _ort_runs_float4("Cast")  # else run it in onnxruntime too
    (got,) = ReferenceEvaluator(program.model_proto).run(None, feeds)
    assert _bytes(_dtypes.from_numpy(got)) == _bytes(module(example))


def test_ops_that_move_whole_pairs_run_on_their_bytes():
    x = (torch.arange(48, dtype=torch.uint8) * 5).reshape(2, 4, 6)
    y = (torch.arange(12, dtype=torch.uint8) * 7).reshape(2, 1, 6)
    float4 = (x.view(torch.float4_e2m1fn_x2), y.view(torch.float4_e2m1fn_x2))
    program = exporter.export(Moves().eval(), float4, opset_version=23)
    onnx.checker.check_model(program.model_proto, full_check=True)
    feeds = {"x": _dtypes.to_numpy(float4[0]), "y": _dtypes.to_numpy(float4[1])}
    got = ReferenceEvaluator(program.model_proto).run(None, feeds)
    expected = Moves()(x, y)  # the same ops on the bytes (torch has no float4 cat kernel)
    assert len(got) == len(expected)
    for value, want in zip(got, expected):
        value = _dtypes.from_numpy(value)
        assert value.dtype is torch.float4_e2m1fn_x2 and value.shape == want.shape
        assert _bytes(value) == _bytes(want.contiguous())
    # where torch has a float4 kernel, it moves the pairs as their bytes move
    assert _bytes(float4[0].transpose(0, 1).contiguous()) == _bytes(expected[3].contiguous())


def test_another_computation_on_float4_is_refused_by_name():
    with pytest.raises(
        _dtypes.UnsupportedDtypeError,
        match=r"computes aten\.view\.dtype on torch\.float4_e2m1fn_x2",
    ):
        exporter.export(SignedBytes().eval(), (_X,), opset_version=23)


def test_without_an_opset_float4_weights_or_inputs_export_at_opset_23_with_a_warning():
    with pytest.warns(UserWarning, match=r"exporting at opset 23, not the default"):
        program = exporter.export(PassThrough().eval(), (_X, torch.ones(2)))
    assert program.model.opset_imports[""] == 23
