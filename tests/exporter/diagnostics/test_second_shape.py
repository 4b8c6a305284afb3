"""The second shape's one rule for "asked to be dynamic, fixed in the ONNX model", and verify's
plan of which dims of an exported model grow."""

from __future__ import annotations

import onnx_ir as ir
import torch

from torch_onnx_conformance.exporter.diagnostics import second_shape


def test_specialised_dims_names_only_dims_the_model_declares_fixed():
    declared = {"x": [2, "batch"], "y": None, "z": [None, 3]}
    requested = {
        "x": {0: "batch", 1: "n"},  # dim 0 fixed, dim 1 symbolic
        "y": {0: None},  # no declared shape: nothing to contradict
        "z": {0: "a", 1: None},  # dim 0 unknown (not fixed), dim 1 fixed, no name to show
        "w": {0: None},  # not a graph input
    }
    assert second_shape.specialised_dims(declared, requested) == [
        "x dim 0 (batch) fixed to 2",
        "z dim 1 fixed to 3",
    ]


def _model(*inputs: ir.Value) -> ir.Model:
    graph = ir.Graph(list(inputs), list(inputs), nodes=[], opset_imports={"": 20})
    return ir.Model(graph, ir_version=10)


def test_plan_grows_symbolic_dims_and_names_requested_dims_the_model_fixed():
    x = ir.Value(name="x", shape=ir.Shape([2, "n"]), type=ir.TensorType(ir.DataType.FLOAT))
    tensors = [(0, torch.ones(2, 3))]
    plan = second_shape.plan_second_shape(_model(x), None, tensors, {0: {0: "batch"}}, 1)
    assert plan.new_shapes == {0: [3, 4]}
    assert plan.changed == ["x dim 1 (n): 3 -> 4", "x dim 0 (batch, fixed in ONNX): 2 -> 3"]
    assert plan.specialised == ["x dim 0 (batch) fixed to 2"]


def test_plan_moves_dims_sharing_a_symbol_together_and_follows_expressions():
    x = ir.Value(name="x", shape=ir.Shape(["s0", 4]), type=ir.TensorType(ir.DataType.FLOAT))
    y = ir.Value(name="y", shape=ir.Shape(["s0", "2*s0"]), type=ir.TensorType(ir.DataType.FLOAT))
    tensors = [(0, torch.ones(3, 4)), (1, torch.ones(3, 6))]
    plan = second_shape.plan_second_shape(_model(x, y), None, tensors, {}, 2)
    assert plan.new_shapes == {0: [5, 4], 1: [5, 10]}
    assert plan.specialised == []


def test_plan_is_none_when_the_graph_inputs_do_not_line_up():
    x = ir.Value(name="x", shape=ir.Shape([2]), type=ir.TensorType(ir.DataType.FLOAT))
    tensors = [(0, torch.ones(2)), (1, torch.ones(2))]
    assert second_shape.plan_second_shape(_model(x), None, tensors, {}, 1) is None
