"""Shared op helpers answer one question one way, whichever family asks."""

from __future__ import annotations

import ast
import inspect
import operator
from pathlib import Path

import onnx_ir as ir
import pytest
import torch
import torch.fx

from torch_onnx_conformance.exporter import _translate
from torch_onnx_conformance.exporter.ops import _kernels, _reduce, _shape
from torch_onnx_conformance.exporter.ops._context import EVERY_OUTPUT, TranslationContext
from torch_onnx_conformance.exporter.ops._registry import DEFAULT_REGISTRY


def _graph_with_users(*, read: tuple[int, ...], dead: tuple[int, ...] = (), escape: bool = False):
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    multi = graph.call_function(torch.ops.aten.var_mean.correction, (x,))
    outputs = [graph.call_function(operator.getitem, (multi, i)) for i in read]
    for i in dead:
        graph.call_function(operator.getitem, (multi, i))
    graph.output(multi if escape else tuple(outputs))
    return multi


def test_used_outputs_counts_getitems_that_something_reads():
    ctx = TranslationContext(None, _graph_with_users(read=(1,), dead=(0,)))
    assert ctx.used_outputs() == {1}


def test_used_outputs_counts_everything_when_the_tuple_escapes_whole():
    ctx = TranslationContext(None, _graph_with_users(read=(), escape=True))
    assert ctx.used_outputs() == EVERY_OUTPUT


def test_used_outputs_counts_everything_inside_a_hand_built_body():
    assert TranslationContext(None, None).used_outputs() == EVERY_OUTPUT


def test_kernel_dtype_keeps_supported_and_unknown_dtypes():
    assert _kernels.kernel_dtype("Pad", torch.float32) is torch.float32
    assert _kernels.kernel_dtype("Pad", None) is None
    assert _kernels.kernel_dtype("NotAnOnnxOp", torch.bfloat16) is torch.bfloat16


def test_kernel_dtype_answers_a_dtype_the_table_lists_for_every_gap():
    every = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.bool]
    every += [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]
    for op_type, supported in _kernels.SUPPORTED.items():
        for dtype in every:
            try:
                run = _kernels.kernel_dtype(op_type, dtype)
            except TypeError:
                continue  # no kernel can hold these values (And on floats, BitShift on signed)
            assert run in supported, (op_type, dtype, run)


# ------------------------------------------------------------------ _shape and _reduce
def _ctx(opset: int = 20) -> TranslationContext:
    """A context over an empty graph, as a hand-built body gets (no FX node)."""
    translator = _translate.Translator(
        DEFAULT_REGISTRY, opset, metadata=False, names=_translate.SymbolNames(), root_class="M"
    )
    graph = ir.Graph(inputs=[], outputs=[], nodes=[], name="g")
    return TranslationContext(_translate.GraphScope(translator, graph, parent=None), None)


def _value(shape: list[int | None] | None) -> ir.Value:
    """An intermediate value: a recorded shape (None: unknown rank), no FX metadata."""
    return ir.Value(
        name="x",
        type=ir.TensorType(ir.DataType.FLOAT),
        shape=None if shape is None else ir.Shape(shape),
    )


def _attrs(value: ir.Value) -> dict:
    return {k: a.value for k, a in value.producer().attributes.items()}


def test_dim_size_is_an_int_when_static_and_a_shape_slice_when_not():
    ctx = _ctx()
    x = _value([2, None, 5])
    assert _shape.dim_size(ctx, x, -1) == 5
    dynamic = _shape.dim_size(ctx, x, -2)
    assert dynamic.producer().op_type == "Shape"
    assert _attrs(dynamic) == {"start": 1, "end": 2}
    static = _shape.dim_value(ctx, x, 0)
    assert static.producer().op_type == "Constant"
    assert static.producer().attributes["value"].as_tensor().numpy().tolist() == [2]


def test_dim_0d_is_a_0d_constant_when_static_and_a_squeezed_shape_slice_when_not():
    """The one helper linalg's loops, eigh/svd and cummax/cummin take a 0-d axis size from."""
    ctx = _ctx()
    x = _value([2, None, 5])
    static = _shape.dim_0d(ctx, x, -1)
    assert static.producer().op_type == "Constant"
    assert static.producer().attributes["value"].as_tensor().numpy().tolist() == 5
    assert static.shape == ir.Shape([])
    dynamic = _shape.dim_0d(ctx, x, 1)
    squeeze = dynamic.producer()
    assert squeeze.op_type == "Squeeze"
    sliced, axes = squeeze.inputs
    assert sliced.producer().op_type == "Shape"
    assert _attrs(sliced) == {"start": 1, "end": 2}
    assert axes.producer().attributes["value"].as_tensor().numpy().tolist() == [0]


def test_dim_size_rejects_an_out_of_range_dim_by_name():
    with pytest.raises(IndexError, match="dim 3 is out of range for a tensor of rank 3"):
        _shape.dim_size(_ctx(), _value([2, None, 5]), 3)


def test_dim_size_of_a_value_of_unknown_rank_slices_shape_with_the_dim_as_given():
    size = _shape.dim_size(_ctx(), _value(None), -1)
    assert size.producer().op_type == "Shape"
    assert _attrs(size) == {"start": -1}


def test_reshape_takes_allowzero_by_keyword_only_and_without_default():
    parameter = inspect.signature(_shape.reshape).parameters["allowzero"]
    assert parameter.kind is inspect.Parameter.KEYWORD_ONLY
    assert parameter.default is inspect.Parameter.empty
    ctx, x = _ctx(), _value([2, 3])
    with pytest.raises(TypeError, match="allowzero"):
        _shape.reshape(ctx, x, [3, 2])
    assert _attrs(_shape.reshape(ctx, x, [3, 0], allowzero=True)) == {"allowzero": 1}
    assert _attrs(_shape.reshape(ctx, x, [3, 2], allowzero=False)) == {}


def test_reshape_takes_a_target_value_as_it_is():
    ctx, x = _ctx(), _value([2, 3])
    target = ctx.op.Shape(_value([3, 2]))
    out = _shape.reshape(ctx, x, target, allowzero=True)
    assert out.producer().inputs[1] is target
    assert _attrs(out) == {"allowzero": 1}


def test_translations_reshape_with_allowzero_only_through_the_helper():
    """ONNX's two meanings of a 0 in a Reshape target are chosen in one place,
    ``_shape.reshape``'s required ``allowzero``: no translation spells the attribute itself."""
    ops = Path(_shape.__file__).parent
    spelled = []
    for path in sorted(ops.glob("*.py")):
        if path.name == "_shape.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "Reshape"
                and any(keyword.arg == "allowzero" for keyword in node.keywords)
            ):
                spelled.append(f"{path.name}:{node.lineno}")
    assert not spelled, f"use _shape.reshape(..., allowzero=True) instead: {spelled}"


def test_reduce_axes_wraps_negative_dims_and_rejects_out_of_range_ones():
    assert _reduce.reduce_axes([-1, 0, -3], 3) == [0, 2]
    assert _reduce.reduce_axes(None, 3) is None
    assert _reduce.reduce_axes([], 3) is None
    assert _reduce.reduce_axes(-1, 0) is None
    with pytest.raises(IndexError, match="out of range"):
        _reduce.reduce_axes([0, 3], 3)


@pytest.mark.parametrize(
    ("opset", "op_type", "as_input"),
    [(17, "ReduceMax", False), (17, "ReduceSum", True), (18, "ReduceMax", True)],
)
def test_reduce_gives_axes_as_an_input_or_an_attribute_by_opset(opset, op_type, as_input):
    ctx = _ctx(opset)
    out = _reduce.reduce(ctx, op_type, _value([2, 3]), [1], keepdim=True)
    node = out.producer()
    assert (len(node.inputs) == 2) is as_input
    assert _attrs(out) == ({"keepdims": 1} if as_input else {"axes": (1,), "keepdims": 1})
