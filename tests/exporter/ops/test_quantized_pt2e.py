"""A Conv+BN+Conv+Linear model quantized with PT2E (torchao's ``prepare_pt2e`` / calibration /
``convert_pt2e``, X86InductorQuantizer's default scheme: uint8 activations, int8 weights per
channel) exported as QDQ: its structure, its integers, its outputs, and onnxruntime's fusion."""

from __future__ import annotations

import collections
import functools

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from torch_onnx_conformance import exporter
from torch_onnx_conformance.exporter.diagnostics import ort_fusion
from torch_onnx_conformance.exporter.diagnostics.compare import compare_codes, compare_in_steps

pt2e = pytest.importorskip("torchao.quantization.pt2e.quantize_pt2e")
torchao_pt2e = pytest.importorskip("torchao.quantization.pt2e")
x86 = pytest.importorskip("torchao.quantization.pt2e.quantizer.x86_inductor_quantizer")


class ConvBnConvLinear(torch.nn.Module):
    def __init__(self, bias: bool = True) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3)
        self.bn = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3)
        self.fc = torch.nn.Linear(8 * 4 * 4, 10, bias=bias)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv1(x)))
        return self.fc(self.conv2(x).flatten(1))


def _quantized(bias: bool = True) -> torch.fx.GraphModule:
    torch.manual_seed(0)
    model = ConvBnConvLinear(bias).eval()
    example = (torch.randn(2, 3, 8, 8),)
    captured = torch.export.export(model, example).module()
    quantizer = x86.X86InductorQuantizer()
    quantizer.set_global(x86.get_default_x86_inductor_quantization_config())
    prepared = pt2e.prepare_pt2e(captured, quantizer)
    generator = torch.Generator().manual_seed(1)
    for _ in range(4):  # calibration
        prepared(torch.randn(2, 3, 8, 8, generator=generator))
    converted = pt2e.convert_pt2e(prepared)
    torchao_pt2e.move_exported_model_to_eval(converted)
    return converted


@functools.cache
def _exported(bias: bool = True):
    model = _quantized(bias)
    x = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(2))
    program = exporter.export(model, (x,))
    return model, x, program


def _session(program, level=ort.GraphOptimizationLevel.ORT_ENABLE_BASIC):
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    options.log_severity_level = 3
    return ort.InferenceSession(
        program.model_proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def _quant_nodes(model):
    graph = torch.export.export(model, (torch.zeros(2, 3, 8, 8),)).graph
    return [
        n
        for n in graph.nodes
        if n.op == "call_function" and getattr(n.target, "namespace", "") == "quantized_decomposed"
    ]


def test_structure_matches_the_program():
    model, _, program = _exported()
    nodes = _quant_nodes(model)
    kinds = collections.Counter(n.target.__name__.split(".")[0] for n in nodes)
    graph = list(program.model.graph)
    counts = collections.Counter(n.op_type for n in graph)
    assert counts["QuantizeLinear"] == kinds["quantize_per_tensor"] == 4
    assert (
        counts["DequantizeLinear"]
        == kinds["dequantize_per_tensor"] + kinds["dequantize_per_channel"]
    )
    # zero points and axes as in the program
    want_zps = sorted(int(n.args[2]) for n in nodes if n.target.__name__.startswith("quantize"))
    got_zps = sorted(
        int(n.inputs[2].const_value.numpy()) for n in graph if n.op_type == "QuantizeLinear"
    )
    assert got_zps == want_zps
    per_channel = [n for n in graph if n.op_type == "DequantizeLinear" and n.inputs[1].shape.rank()]
    assert len(per_channel) == kinds["dequantize_per_channel"] == 3
    for node in per_channel:
        assert node.attributes["axis"].as_int() == 0
        # weights stay integer initializers feeding DequantizeLinear (never folded to float)
        weight = node.inputs[0]
        assert weight.const_value is not None and weight.dtype.name == "INT8"
        assert node.inputs[2].dtype.name == "INT8"


def test_quantized_integers_and_outputs_match_eager():
    model, x, program = _exported()
    session = _session(program)
    got = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
    want = model(x).detach().numpy()
    # the output follows a Linear on activations quantized with this scale: one code flipped on
    # a tie moves it by about one step of it
    nodes = _quant_nodes(model)
    step = float([n for n in nodes if n.target.__name__.startswith("quantize")][-1].args[1])
    result = compare_in_steps(want, got, step=step)
    assert result.ok, result.message

    # the input's codes: torch's quantize_per_tensor against onnxruntime's QuantizeLinear,
    # read as an extra output of the exported model
    first_q = next(n for n in program.model.graph if n.op_type == "QuantizeLinear")
    scale, zp = (float(v.const_value.numpy()) for v in first_q.inputs[1:3])
    want_codes = torch.ops.quantized_decomposed.quantize_per_tensor(
        x, scale, int(zp), 0, 255, torch.uint8
    ).numpy()
    proto = program.model_proto
    proto.graph.output.append(
        onnx.helper.make_tensor_value_info(first_q.outputs[0].name, onnx.TensorProto.UINT8, None)
    )
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    probe = ort.InferenceSession(
        proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    got_codes = probe.run(None, {"x": x.numpy()})[1]
    codes = compare_codes(want_codes, got_codes)
    assert codes.ok, codes.message


def test_the_linear_with_a_float_bias_fuses_into_qgemm():
    # PT2E leaves a Linear's bias in float; onnxruntime's QGemm rule wants every Gemm input
    # dequantized, so the export adds the bias after the Gemm (torch_onnx_conformance/exporter/ops/_quantized_rewrites.py)
    model, x, program = _exported(bias=True)
    gemm = next(n for n in program.model.graph if n.op_type == "Gemm")
    assert len(gemm.inputs) == 2
    assert [use.op_type for use, _ in gemm.outputs[0].uses()] == ["Add"]
    report = ort_fusion.check_fusion(program.model_proto, {"QLinearConv": 2, "QGemm": 1})
    assert report.ok, report.summary()
    assert not report.unfused, report.summary()
    got = _session(program, ort.GraphOptimizationLevel.ORT_ENABLE_ALL).run(None, {"x": x.numpy()})
    nodes = _quant_nodes(model)
    step = float([n for n in nodes if n.target.__name__.startswith("quantize")][-1].args[1])
    result = compare_in_steps(model(x).detach().numpy(), got[0], step=step)
    assert result.ok, result.message


def test_the_fusion_check_names_why_a_gemm_with_a_float_bias_did_not_fuse():
    # a Gemm written by hand with its float bias inside: onnxruntime keeps it in float
    helper, numpy_helper = onnx.helper, onnx.numpy_helper
    initializers = [
        numpy_helper.from_array(np.ones((4, 8), np.int8), "w"),
        numpy_helper.from_array(np.full(4, 0.5, np.float32), "w_scale"),
        numpy_helper.from_array(np.zeros(4, np.int8), "w_zero"),
        numpy_helper.from_array(np.array(0.1, np.float32), "x_scale"),
        numpy_helper.from_array(np.array(3, np.uint8), "x_zero"),
        numpy_helper.from_array(np.ones(4, np.float32), "bias"),
    ]
    nodes = [
        helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zero"], ["x"]),
        helper.make_node("DequantizeLinear", ["w", "w_scale", "w_zero"], ["wf"], axis=0),
        helper.make_node("Gemm", ["x", "wf", "bias"], ["y"], transB=1, name="fc"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("xq", onnx.TensorProto.UINT8, [2, 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 4])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    report = ort_fusion.check_fusion(model, {"QGemm": 1})
    assert not report.ok and "QGemm: expected 1, found 0" in report.missing
    assert any("'fc'" in line and "bias is float" in line for line in report.unfused), (
        report.summary()
    )


def test_without_a_bias_the_linear_fuses_into_qgemm():
    model, x, program = _exported(bias=False)
    report = ort_fusion.check_fusion(program.model_proto, {"QLinearConv": 2, "QGemm": 1})
    assert report.ok, report.summary()
    # the fused integer kernels stay within the output rule too
    got = _session(program, ort.GraphOptimizationLevel.ORT_ENABLE_ALL).run(None, {"x": x.numpy()})[
        0
    ]
    nodes = _quant_nodes(model)
    step = float([n for n in nodes if n.target.__name__.startswith("quantize")][-1].args[1])
    result = compare_in_steps(model(x).detach().numpy(), got, step=step)
    assert result.ok, result.message
