"""Does onnxruntime fuse a QDQ model into its quantized kernels?

A QuantizeLinear/DequantizeLinear model is only faster than float when onnxruntime's graph
optimizer turns each ``DQ -> Conv/Gemm/MatMul -> Q`` group into QLinearConv, QGemm,
QLinearMatMul (or a blocked int4 DQ -> MatMul into MatMulNBits). It does so only under
conditions (onnxruntime's ``qdq_selectors.cc``): weights are constant initializers, int8
activations with int8 weights do not fuse off ARM, a bias through DQ is int32, an output that
is not quantized again leaves a QLinear op without its output scale.

``check_fusion`` builds a session at ``ORT_ENABLE_ALL`` with ``optimized_model_filepath``, counts
the op types of the optimised graph, and for every float Conv/Gemm/MatMul left names why it did
not fuse, read from the model that went in.
"""

from __future__ import annotations

import collections
import dataclasses
import tempfile
from collections.abc import Mapping
from pathlib import Path

import onnx

#: The quantized kernels each float op becomes when onnxruntime fuses it.
FUSED_FORMS = {
    "Conv": ("QLinearConv",),
    "Gemm": ("QGemm",),
    "MatMul": ("QLinearMatMul", "MatMulIntegerToFloat", "MatMulNBits", "DynamicQuantizeMatMul"),
}
#: onnxruntime's float kernels that take in a Conv/Gemm with the Add/activation after it: still
#: float, named as not fused (the name is the Conv's or the Gemm's).
FLOAT_FUSIONS = ("FusedConv", "FusedGemm")
#: onnxruntime's names for fused kernels it may leave in place of those above.
QUANTIZED_KERNELS = frozenset(kind for forms in FUSED_FORMS.values() for kind in forms) | frozenset(
    (
        "MatMulInteger",
        "ConvInteger",
        "QLinearAdd",
        "QLinearMul",
        "QLinearSigmoid",
        "QLinearGlobalAveragePool",
        "GatherBlockQuantized",
    )
)


@dataclasses.dataclass
class FusionReport:
    """What onnxruntime's optimised graph holds, and what did not fuse."""

    counts: collections.Counter
    #: "QLinearConv: expected 2, found 1" for each expected kernel found fewer times.
    missing: list[str]
    #: "Conv 'node_3': <why>" for each float Conv/Gemm/MatMul left in the optimised graph.
    unfused: list[str]

    @property
    def ok(self) -> bool:
        return not self.missing

    def summary(self) -> str:
        found = ", ".join(
            f"{k} x{v}" for k, v in sorted(self.counts.items()) if k in QUANTIZED_KERNELS
        )
        lines = [f"fused: {found or 'nothing'}"]
        lines += [f"missing {m}" for m in self.missing]
        lines += [f"not fused: {u}" for u in self.unfused]
        return "\n".join(lines)


def optimized_model(model: onnx.ModelProto, directory: str | Path) -> onnx.ModelProto:
    """The model as onnxruntime's CPU provider optimises it at ``ORT_ENABLE_ALL``."""
    import onnxruntime as ort

    path = Path(directory) / "optimized.onnx"
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.optimized_model_filepath = str(path)
    options.log_severity_level = 3
    ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return onnx.load(str(path), load_external_data=False)


def check_fusion(model: onnx.ModelProto, expected: Mapping[str, int]) -> FusionReport:
    """Optimise ``model`` with onnxruntime and check it holds at least ``expected[kind]`` nodes
    of each quantized kernel (``{"QLinearConv": 2, "QGemm": 1}``; a key ``"QGemm|QLinearMatMul"``
    counts either); name why each float Conv/Gemm/MatMul left over did not fuse."""
    with tempfile.TemporaryDirectory() as tmp:
        optimized = optimized_model(model, tmp)
    counts = collections.Counter(node.op_type for node in optimized.graph.node)
    missing = [
        f"{kind}: expected {want}, found {_found(counts, kind)}"
        for kind, want in expected.items()
        if _found(counts, kind) < want
    ]
    original = {node.name: node for node in model.graph.node}
    unfused = [
        f"{node.op_type} {node.name!r}: {why_not_fused(model, original.get(node.name), node)}"
        for node in optimized.graph.node
        if (node.op_type in FUSED_FORMS and node.domain in ("", "ai.onnx"))
        or node.op_type in FLOAT_FUSIONS
    ]
    return FusionReport(counts=counts, missing=missing, unfused=unfused)


def _found(counts: collections.Counter, kinds: str) -> int:
    return sum(counts.get(kind, 0) for kind in kinds.split("|"))


def why_not_fused(
    model: onnx.ModelProto, node: onnx.NodeProto | None, optimized: onnx.NodeProto | None = None
) -> str:
    """The first of onnxruntime's QDQ fusion conditions that ``node`` (of the model that went
    in; ``optimized`` is what onnxruntime left in its place) misses."""
    if optimized is not None and optimized.op_type == "FusedGemm":
        return (
            "onnxruntime fused the activation after this Gemm into it (FusedGemm) before its "
            "quantized rules ran, and FusedGemm matches none of them"
        )
    if node is None:
        return "onnxruntime created this node; it has no counterpart in the exported model"
    producers = {out: n for n in model.graph.node for out in n.output}
    consumers = collections.defaultdict(list)
    for n in model.graph.node:
        for name in n.input:
            consumers[name].append(n)
    initializers = {i.name: i for i in model.graph.initializer}

    def dq_input(index: int) -> onnx.NodeProto | None:
        if index >= len(node.input) or not node.input[index]:
            return None
        source = producers.get(node.input[index])
        return source if source is not None and source.op_type == "DequantizeLinear" else None

    activation, weight = dq_input(0), dq_input(1)
    if activation is None:
        return "its input is float: no DequantizeLinear before it (the activation is not quantized)"
    if weight is None:
        return "its weight is float: no DequantizeLinear before it"
    if weight.input[0] not in initializers:
        return "its weight's DequantizeLinear reads a computed value, not a constant initializer"
    act_type = _elem_type(model, activation.input[0], initializers)
    weight_type = initializers[weight.input[0]].data_type
    if act_type == onnx.TensorProto.INT8 and weight_type == onnx.TensorProto.INT8:
        return (
            "int8 activations with int8 weights (S8S8) do not fuse on x86; quantize "
            "activations to uint8"
        )
    if node.op_type in ("Conv", "Gemm") and len(node.input) > 2 and node.input[2]:
        bias = dq_input(2)
        if bias is None and node.op_type == "Gemm":
            return (
                "its bias is float: QGemm takes a bias only as int32 through a DequantizeLinear "
                "(add a float bias after the Gemm, as the exporter's optimize step does)"
            )
        if bias is not None and initializers.get(bias.input[0]) is not None:
            if initializers[bias.input[0]].data_type != onnx.TensorProto.INT32:
                return "its bias goes through a DequantizeLinear that is not int32"
    users = consumers.get(node.output[0], [])
    if node.op_type == "Conv" and not any(u.op_type == "QuantizeLinear" for u in users):
        why = "its output is not quantized again (QLinearConv needs a QuantizeLinear after it)"
        if any(u.op_type == "Add" for u in users):
            why += (
                "; it feeds a float Add: X86InductorQuantizer annotates conv + residual add "
                "for Inductor's fused kernel, quantizing the add's inputs instead lets it fuse"
            )
        return why
    return "no condition named here fails; see onnxruntime's qdq_selectors.cc"


def _elem_type(model: onnx.ModelProto, name: str, initializers) -> int | None:
    if name in initializers:
        return initializers[name].data_type
    for info in (*model.graph.input, *model.graph.value_info, *model.graph.output):
        if info.name == name:
            return info.type.tensor_type.elem_type
    for node in model.graph.node:
        if name in node.output and node.op_type in ("QuantizeLinear", "DynamicQuantizeLinear"):
            zero_point = node.input[2] if len(node.input) > 2 else ""
            if zero_point in initializers:
                return initializers[zero_point].data_type
            return onnx.TensorProto.UINT8
    return None
