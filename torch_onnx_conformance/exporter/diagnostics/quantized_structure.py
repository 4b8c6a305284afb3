"""A quantized model's quantize/dequantize nodes, read from its program and from its ONNX
graph, for the structure rule (``compare.compare_quantization_structure``), and the quantized
kernels onnxruntime should make of it (for ``ort_fusion.check_fusion``).

Program side: PT2E's ``quantized_decomposed`` quantize/dequantize (per tensor, per channel)
and torchao's ``quantize_affine``/``dequantize_affine``, in a ``torch.fx.GraphModule`` (a
converted PT2E model) or a ``torch.export.ExportedProgram`` (a torchao model, captured).
Graph side: QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear.
"""

from __future__ import annotations

import collections
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from torch_onnx_conformance.exporter.diagnostics.compare import QuantizationNode

_QUANTIZE = ("quantize_per_tensor", "quantize_per_channel", "quantize_affine")
_DEQUANTIZE = ("dequantize_per_tensor", "dequantize_per_channel", "dequantize_affine")
#: int4 ranges held in int8/uint8 tensors.
_NARROW = {(-8, 7): "int4", (0, 15): "uint4"}


# ---------------------------------------------------------------- the program
def _program_graph(program: Any):
    """The fx graph and a function giving a node's constant tensor (None when computed)."""
    import torch

    if isinstance(program, torch.export.ExportedProgram):
        signature = program.graph_signature
        names = {
            **signature.inputs_to_parameters,
            **signature.inputs_to_buffers,
            **signature.inputs_to_lifted_tensor_constants,
        }
        values = {**program.state_dict, **program.constants}

        def constant(node):
            if node.op == "call_function" and "access_subclass_inner_tensor" in str(node.target):
                # a tensor subclass's inner tensor (torchao's qdata, scale, zero_point)
                outer = constant(node.args[0])
                return None if outer is None else getattr(outer, node.args[1], None)
            if node.op != "placeholder" or node.name not in names:
                return None
            return values.get(names[node.name])

        return program.graph, constant

    def attribute(node):
        if node.op != "get_attr":
            return None
        value = program
        for part in node.target.split("."):
            value = getattr(value, part)
        return value

    return program.graph, attribute


def _target_name(node) -> str:
    return getattr(node.target, "__name__", str(node.target)).split(".")[0]


def _namespace(node) -> str:
    return getattr(node.target, "namespace", "")


def _is_qdq(node) -> str | None:
    if node.op != "call_function" or _namespace(node) not in ("quantized_decomposed", "torchao"):
        return None
    name = _target_name(node)
    if name in _QUANTIZE:
        return "quantize"
    if name in _DEQUANTIZE:
        return "dequantize"
    return None


def _dtype_name(dtype, quant_min, quant_max) -> str:
    name = str(dtype).removeprefix("torch.")
    if isinstance(quant_min, int) and isinstance(quant_max, int):
        return _NARROW.get((quant_min, quant_max), name)
    return name


def _zero_points(value, constant) -> tuple[int, ...] | None:
    if value is None:
        return (0,)
    if isinstance(value, (int, float)):
        return (int(value),)
    symmetric = _symmetric_zero_point(value)
    if symmetric is not None:
        return symmetric
    tensor = constant(value) if hasattr(value, "op") else value
    if tensor is None:
        return None
    return tuple(int(v) for v in np.unique(tensor.detach().cpu().numpy()))


def _symmetric_zero_point(value) -> tuple[int] | None:
    """The zero point torchao's ``choose_qparams_affine`` gives a symmetric mapping: every
    element ``int((qmin + qmax + 1) / 2)`` (``full_like``), known without running it."""
    import operator

    if not hasattr(value, "op") or value.target is not operator.getitem or value.args[1] != 1:
        return None
    source = value.args[0]
    if not hasattr(source, "op") or _target_name(source) != "choose_qparams_affine":
        return None
    args = list(source.args) + [None] * 3
    mapping = str(getattr(args[1], "name", args[1]))
    if not mapping.startswith("SYMMETRIC") or args[4] is None or args[5] is None:
        return None
    return (int((args[5] + args[4] + 1) / 2),)


def _affine_granularity(block_size, shape) -> str:
    """torchao's ``block_size`` against the tensor's shape."""
    blocked = [(i, b) for i, (b, s) in enumerate(zip(block_size, shape)) if 1 < b < s]
    if blocked:
        return f"block {blocked[0][1]}"
    per_element = [i for i, (b, s) in enumerate(zip(block_size, shape)) if b == 1 and s != 1]
    if not per_element:
        return "tensor"
    if len(per_element) == 1:
        return f"axis {per_element[0]}"
    return "rows"


def program_quantization(program: Any) -> list[QuantizationNode]:
    """The quantize/dequantize nodes of ``program`` (GraphModule or ExportedProgram), one per
    distinct computation: PT2E gives each consumer of a quantized tensor a DequantizeLinear of
    its own, which an optimizer's common-subexpression pass merges into one (onnxruntime makes
    them unique again where a QDQ group needs its own, EnsureUniqueDQForNodeUnit); the graph
    side counts the same way."""
    graph, constant = _program_graph(program)
    distinct: dict[tuple, Any] = {}
    same_as: dict[Any, Any] = {}  # a node -> the first node computing the same
    for node in graph.nodes:
        if _is_qdq(node) or _is_qparams(node, same_as):
            args = [same_as.get(a, a) if hasattr(a, "op") else a for a in node.args]
            key = (str(node.target), *map(str, args), str(sorted(node.kwargs.items())))
            same_as[node] = distinct.setdefault(key, node)
    return [_read_node(node, constant) for node in distinct.values() if _is_qdq(node)]


def _is_qparams(node, same_as) -> bool:
    """A dynamic quantization's qparams (``choose_qparams*``, and the items taken from it):
    two computed from the same input alike are one, so the quantizes reading them are too
    (torchao quantizes the input of q, k and v projections once each)."""
    import operator

    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        return node.args[0] in same_as
    return _namespace(node) in ("quantized_decomposed", "torchao") and _target_name(
        node
    ).startswith("choose_qparams")


def _read_node(node, constant) -> QuantizationNode:
    name, args = _target_name(node), list(node.args)
    source = args[0]
    if name.endswith("_affine"):
        # (input, block_size, scale, zero_point, dtype, quant_min, quant_max)
        shape = tuple(source.meta["val"].shape) if "val" in source.meta else ()
        granularity = _affine_granularity(args[1], shape)
        zero_point, dtype = args[3], args[4]
        quant_min, quant_max = ([*args[5:7], None, None])[:2]
    elif name.endswith("per_channel"):
        # (input, scales, zero_points, axis, quant_min, quant_max, dtype)
        rank = len(source.meta["val"].shape) if "val" in source.meta else 1
        granularity = f"axis {args[3] % max(rank, 1)}"
        zero_point, quant_min, quant_max, dtype = args[2], args[4], args[5], args[6]
    else:
        # (input, scale, zero_point, quant_min, quant_max, dtype)
        granularity = "tensor"
        zero_point, quant_min, quant_max, dtype = args[2], args[3], args[4], args[5]
    return QuantizationNode(
        kind=_is_qdq(node),
        dtype=_dtype_name(dtype, quant_min, quant_max),
        zero_points=_zero_points(zero_point, constant),
        granularity=granularity,
        stored=constant(source) is not None,
    )


def representable_at(node: QuantizationNode, opset: int) -> bool:
    """Whether QuantizeLinear/DequantizeLinear of ``opset`` can hold ``node``: int4 types and
    blocks need opset 21."""
    narrow = node.dtype in _NARROW.values() or node.granularity.startswith("block")
    return opset >= 21 or not narrow


def expected_kernels(program: Any, opset: int) -> dict[str, int]:
    """How many of each quantized kernel onnxruntime should make of ``program``: a conv whose
    input and weight are dequantized and whose output is only quantized again (through a
    relu/clamp onnxruntime folds) -> QLinearConv;
    a linear with dequantized input and weight -> QGemm; a linear whose weight is a blocked
    int4 dequantize -> MatMulNBits (opset 21+: blocked DequantizeLinear); torchao's integer
    matmul -> MatMulInteger or the kernels onnxruntime folds it into; a sigmoid or product of
    dequantized inputs, only quantized again -> QLinearSigmoid / QLinearMul. Keys with ``|`` name
    alternatives (``ort_fusion.check_fusion``)."""
    graph, constant = _program_graph(program)
    expected: collections.Counter = collections.Counter()

    def dequantized(value) -> Any:
        return value if hasattr(value, "op") and _is_qdq(value) == "dequantize" else None

    for node in graph.nodes:
        if node.op != "call_function":
            continue
        name = _target_name(node)
        if name in ("conv1d", "conv2d", "conv3d", "convolution", "linear"):
            activation, weight = dequantized(node.args[0]), dequantized(node.args[1])
            if weight is None:
                continue
            weight_type = _read_node(weight, constant)
            if activation is None:
                if name == "linear" and weight_type.granularity.startswith("block"):
                    if weight_type.dtype in ("int4", "uint4") and opset >= 21:
                        expected["MatMulNBits"] += 1
                continue
            if name == "linear":
                expected["QGemm|QLinearMatMul"] += 1
            elif node.users and all(_quantized_again(user) for user in node.users):
                expected["QLinearConv"] += 1
        elif name == "_int_mm":
            expected["MatMulInteger|MatMulIntegerToFloat|DynamicQuantizeMatMul"] += 1
        elif name in _ELEMENTWISE_KERNELS:
            kernel, arity = _ELEMENTWISE_KERNELS[name]
            inputs = node.args[:arity]
            if (
                all(dequantized(a) is not None for a in inputs)
                and node.users
                and all(_is_qdq(user) == "quantize" for user in node.users)
            ):
                expected[kernel] += 1
    return dict(expected)


#: Elementwise ops onnxruntime runs on uint8 when every input is dequantized and the output
#: only quantized again (its QDQ unary and binary rules), with their arity. Not add (a
#: residual add's output goes through a relu first in most programs) nor the pools (an
#: exporter may write them as ReduceMean, which has no quantized kernel).
_ELEMENTWISE_KERNELS = {"sigmoid": ("QLinearSigmoid", 1), "mul": ("QLinearMul", 2)}


#: Activations onnxruntime folds into the quantize after a QLinearConv (ReluQuantFusion,
#: ClipQuantFusion).
_FOLDED_ACTIVATIONS = ("relu", "relu_", "hardtanh", "hardtanh_", "clamp")


def _quantized_again(node) -> bool:
    """Whether a conv's output, through at most one activation onnxruntime folds, is only
    quantized again (the QuantizeLinear a QLinearConv takes its output scale from)."""
    if _is_qdq(node) == "quantize":
        return True
    if node.op == "call_function" and _target_name(node) in _FOLDED_ACTIVATIONS:
        return bool(node.users) and all(_is_qdq(user) == "quantize" for user in node.users)
    return False


# ---------------------------------------------------------------- the ONNX graph
_ONNX_QDQ = {
    "QuantizeLinear": "quantize",
    "DequantizeLinear": "dequantize",
    "DynamicQuantizeLinear": "quantize",
}


class _GraphFacts:
    """What a graph states about its values: stored tensors (initializers and Constant nodes),
    element types and ranks."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        self.initializers = {i.name: i for i in graph.initializer}
        self.constants = {
            node.output[0]: attr.t
            for node in graph.node
            if node.op_type == "Constant"
            for attr in node.attribute
            if attr.name == "value"
        }
        self.types = {
            info.name: info.type.tensor_type
            for info in (*graph.input, *graph.value_info, *graph.output)
        }
        self.producers = {output: node for node in graph.node for output in node.output}

    def tensor(self, name: str):
        proto = self.initializers.get(name) or self.constants.get(name)
        return None if proto is None else numpy_helper.to_array(proto)

    def elem_type(self, name: str) -> int | None:
        if name in self.initializers:
            return self.initializers[name].data_type
        if name in self.constants:
            return self.constants[name].data_type
        info = self.types.get(name)
        return info.elem_type if info is not None and info.elem_type else None

    def uniform(self, name: str) -> tuple[int] | None:
        """The one number a computed tensor holds where the graph states it: a ConstantOfShape
        (seen through Cast/Reshape/Identity)."""
        node = self.producers.get(name)
        while node is not None and node.op_type in ("Cast", "Reshape", "Identity"):
            node = self.producers.get(node.input[0])
        if node is None or node.op_type != "ConstantOfShape":
            return None
        for attr in node.attribute:
            if attr.name == "value":
                return (int(numpy_helper.to_array(attr.t).reshape(-1)[0]),)
        return (0,)

    def flattened_rows(self, name: str) -> bool:
        """Whether ``name`` is a rank-2 Reshape/Flatten of a tensor of rank 3 or more: the
        leading axes flattened into rows (one scale per row: torchao's per-token block)."""
        node = self.producers.get(name)
        if node is None or node.op_type not in ("Reshape", "Flatten") or self.rank(name) != 2:
            return False
        source = self.rank(node.input[0])
        return source is not None and source >= 3

    def rank(self, name: str) -> int | None:
        if name in self.initializers:
            return len(self.initializers[name].dims)
        info = self.types.get(name)
        return len(info.shape.dim) if info is not None and info.HasField("shape") else None


def graph_quantization(model: onnx.ModelProto) -> list[QuantizationNode]:
    """The QuantizeLinear/DequantizeLinear/DynamicQuantizeLinear nodes of ``model`` (shape
    inference fills the types and ranks the nodes do not state)."""
    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001, S110 - types then come from initializers and zero points
        pass
    facts = _GraphFacts(model.graph)
    found, seen = [], set()
    for node in model.graph.node:
        if node.op_type == "GatherBlockQuantized" and node.domain == "com.microsoft":
            found.append(_gathered_table(node, facts.initializers, facts.tensor))
            continue
        kind = _ONNX_QDQ.get(node.op_type)
        if kind is None or node.domain not in ("", "ai.onnx"):
            continue
        key = (node.op_type, tuple(node.input), tuple(map(str, node.attribute)))
        if key in seen:  # one per distinct computation (see program_quantization)
            continue
        seen.add(key)
        found.append(_qdq_node(node, kind, facts))
    return found


def _qdq_node(node: onnx.NodeProto, kind: str, facts: _GraphFacts) -> QuantizationNode:
    """One Q/DQ node's integer type, zero points, granularity and whether its input is stored."""
    if node.op_type == "DynamicQuantizeLinear":
        return QuantizationNode(kind, "uint8", None, "tensor", False)
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    zero_name = node.input[2] if len(node.input) > 2 else ""
    integer = node.input[0] if kind == "dequantize" else node.output[0]
    dtype = facts.elem_type(integer) or (facts.elem_type(zero_name) if zero_name else None)
    if dtype is None:
        dtype = attrs.get("output_dtype") or onnx.TensorProto.UINT8
    if zero_name:
        values = facts.tensor(zero_name)
        zero_points = facts.uniform(zero_name)
        if values is not None:
            zero_points = tuple(int(v) for v in np.unique(values))
    else:
        zero_points = (0,)
    scale = facts.tensor(node.input[1])
    # a scale computed at run time (dynamic quantization) is per axis when it has one
    scale_rank = facts.rank(node.input[1]) if scale is None else scale.ndim
    if attrs.get("block_size"):
        granularity = f"block {attrs['block_size']}"
    elif (scale is not None and scale.size > 1) or (scale is None and scale_rank):
        axis = attrs.get("axis", 1)
        data_rank = facts.rank(node.input[0])
        granularity = f"axis {axis % data_rank if data_rank else axis}"
        if granularity == "axis 0" and facts.flattened_rows(node.input[0]):
            granularity = "rows"
    else:
        granularity = "tensor"
    return QuantizationNode(
        kind=kind,
        dtype=_ONNX_NARROW.get(dtype) or onnx.helper.tensor_dtype_to_np_dtype(dtype).name,
        zero_points=zero_points,
        granularity=granularity,
        stored=node.input[0] in facts.initializers,
    )


_ONNX_NARROW = {onnx.TensorProto.INT4: "int4", onnx.TensorProto.UINT4: "uint4"}


def _gathered_table(node: onnx.NodeProto, initializers, tensor) -> QuantizationNode:
    """com.microsoft.GatherBlockQuantized(table, ids, scales[, zero_points]): the exporter's
    form of a blocked dequantize of an int4 table read by a Gather (it dequantizes only the
    rows gathered), counted as that dequantize."""
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    table = initializers.get(node.input[0])
    dtype = _ONNX_NARROW.get(table.data_type, "uint8") if table is not None else "uint8"
    zero = tensor(node.input[3]) if len(node.input) > 3 and node.input[3] else None
    zero_points = (0,) if zero is None else tuple(int(v) for v in np.unique(zero))
    return QuantizationNode(
        "dequantize", dtype, zero_points, f"block {attrs.get('block_size', 128)}", table is not None
    )
