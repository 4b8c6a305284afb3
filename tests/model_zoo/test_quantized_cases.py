"""The quantized zoo's residual-add quantizer: on a residual block, X86InductorQuantizer's
conv+add pattern leaves the conv's output float (onnxruntime cannot fuse that conv); the
``_qadd`` quantizer quantizes the add's inputs, and every conv and the add fuse."""

from __future__ import annotations

import functools

import pytest
import torch
from torch import nn

from torch_onnx_conformance import exporter
from torch_onnx_conformance.exporter.diagnostics import ort_fusion
from torch_onnx_conformance.exporter.diagnostics.compare import compare_in_steps
from torch_onnx_conformance.model_zoo import quantized_cases

pytest.importorskip("torchao.quantization.pt2e.quantize_pt2e")


class ResidualBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(4, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1)
        self.conv3 = nn.Conv2d(4, 4, 1)

    def forward(self, x):
        y = self.conv2(torch.relu(self.conv1(x)))
        return self.conv3(torch.relu(y + x))  # conv3 quantizes the block's output


def _inputs(sizes):
    generator = torch.Generator().manual_seed(sizes.get("seed", 0))
    return (torch.randn(2, 4, 8, 8, generator=generator),), {}


@functools.cache
def _exported(residual_adds: bool):
    torch.manual_seed(0)
    name = f"test/residual_{residual_adds}"
    model = quantized_cases._pt2e(ResidualBlock(), name, _inputs, {}, residual_adds)
    (x,), _ = _inputs({"seed": 7})
    return model, x, exporter.export(model, (x,)).model_proto, quantized_cases._STEP[name]


def _unfused_convs(report) -> list[str]:
    return [line for line in report.unfused if "output is not quantized again" in line]


def test_the_inductor_scheme_leaves_the_conv_before_the_add_unfused():
    _, _, proto, _ = _exported(residual_adds=False)
    report = ort_fusion.check_fusion(proto, {})
    # conv1 fuses; conv2 (into the add) and conv3 (the model's output) stay float
    assert report.counts["QLinearConv"] == 1, report.summary()
    assert report.counts["QLinearAdd"] == 0, report.summary()
    assert len(_unfused_convs(report)) == 2, report.summary()


def test_quantized_residual_adds_fuse_every_conv_and_the_add():
    model, x, proto, step = _exported(residual_adds=True)
    report = ort_fusion.check_fusion(proto, {"QLinearConv": 3, "QLinearAdd": 1})
    assert report.ok, report.summary()
    # conv3's output, the model's, is quantized too (the onnxruntime scheme quantizes every
    # conv's output): nothing stays float
    assert report.unfused == [], report.summary()
    import onnxruntime as ort

    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
    result = compare_in_steps(model(x).detach().numpy(), got, step=step)
    assert result.ok, result.message


# ------------------------------------------------- the structure rule and the expected kernels
def test_the_graph_holds_the_programs_quantize_and_dequantize():
    from torch_onnx_conformance.exporter.diagnostics import quantized_structure as qs
    from torch_onnx_conformance.exporter.diagnostics.compare import compare_quantization_structure

    model, _, proto, _ = _exported(residual_adds=True)
    program = qs.program_quantization(model.program)
    result = compare_quantization_structure(program, qs.graph_quantization(proto))
    assert result.ok, result.message
    weights = [node for node in program if node.stored]
    # three conv weights, int8 per output channel, symmetric
    assert len(weights) == 3, program
    assert {(w.kind, w.dtype, w.granularity, w.zero_points) for w in weights} == {
        ("dequantize", "int8", "axis 0", (0,))
    }
    assert {n.dtype for n in program if not n.stored} == {"uint8"}


def test_the_structure_rule_names_a_dequantize_the_graph_lost_and_a_changed_zero_point():
    import onnx

    from torch_onnx_conformance.exporter.diagnostics import quantized_structure as qs
    from torch_onnx_conformance.exporter.diagnostics.compare import compare_quantization_structure

    model, _, proto, _ = _exported(residual_adds=True)
    broken = onnx.ModelProto()
    broken.CopyFrom(proto)
    graph = broken.graph
    weight_dq = next(
        n
        for n in graph.node
        if n.op_type == "DequantizeLinear" and n.input[0] in {i.name for i in graph.initializer}
    )
    # the weight is no longer stored: the DequantizeLinear reads it through an Identity
    graph.node.insert(0, onnx.helper.make_node("Identity", [weight_dq.input[0]], ["copied"]))
    weight_dq.input[0] = "copied"
    result = compare_quantization_structure(
        qs.program_quantization(model.program), qs.graph_quantization(broken)
    )
    assert not result.ok and result.mismatched == 2, result.message
    assert "in the program only: 1 x dequantize int8 zp=0 per axis 0 of a stored tensor" in (
        result.message
    )
    assert "in the graph only: 1 x dequantize int8 zp=0 per axis 0;" in result.message + ";"


def test_expected_kernels_follow_the_programs_qdq_groups():
    from torch_onnx_conformance.exporter.diagnostics import quantized_structure as qs

    inductor, _, _, _ = _exported(residual_adds=False)
    onnxruntime, _, _, _ = _exported(residual_adds=True)
    # the Inductor scheme quantizes conv1's output (through its relu) only: conv2's goes
    # into the add float, conv3's is the model's; the onnxruntime scheme quantizes all three
    assert qs.expected_kernels(inductor.program, 20) == {"QLinearConv": 1}
    assert qs.expected_kernels(onnxruntime.program, 20) == {"QLinearConv": 3}


def test_check_quantized_export_reports_structure_and_fusion_in_the_row(tmp_path):
    import onnx

    model, x, proto, _ = _exported(residual_adds=True)
    path = tmp_path / "model.onnx"
    onnx.save(proto, path)
    problems, facts = quantized_cases.check_quantized_export(model, (x,), {}, path, 20)
    assert problems == [], problems
    assert facts["kernels_fused"]["QLinearConv"] == 3, facts
    # x, conv1's relu, conv2, the add's relu and conv3 quantized; 3 weights + 5 activations
    # dequantized (x's two dequantizes, one for conv1 and one for the add, are one computation)
    assert facts["structure"] == "program 5 quantize / 8 dequantize, graph 5 / 8", facts


def test_the_quantized_tier_runs_in_the_default_tier_static_and_dynamic_in_float32_only():
    from torch_onnx_conformance.conformance import model_cases

    one_of_each = {"opsets": [20], "providers": ["cpu"], "exporters": ["ours"], "optimize": [True]}
    selected = model_cases.collect(
        tier="default",
        names=["quantized/*"],
        dtypes=["f32", "f16"],
        shapes=["static", "dynamic"],
        shard=None,
        **one_of_each,
    )
    models = {key.model for key, _ in selected}
    assert {
        "quantized/resnet18_pt2e_x86_qadd",
        "quantized/mobilenet_v2_pt2e_x86_qadd",
        "quantized/mobilenet_v3_large_pt2e_x86_qadd",
        "quantized/efficientnet_b0_pt2e_x86_qadd",
        "quantized/bert_int8_dynamic",
        "quantized/llama_int4_weight_only_g32",
    } == models
    assert {(key.dtype, key.shapes) for key, _ in selected} == {
        ("f32", "static"),
        ("f32", "dynamic"),
    }


# ------------------------------------- the _qact quantizer: SiLU and squeeze-excitation in uint8
class SiluExcitationBlock(nn.Module):
    """EfficientNet's pattern: conv + SiLU, then a squeeze-excitation (pool, conv + SiLU,
    conv + sigmoid, the product with its input), then a conv."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(4, 8, 3, padding=1)
        self.squeeze = nn.Conv2d(8, 2, 1)
        self.excite = nn.Conv2d(2, 8, 1)
        self.conv2 = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        y = nn.functional.silu(self.conv1(x))
        scale = nn.functional.adaptive_avg_pool2d(y, 1)
        scale = torch.sigmoid(self.excite(nn.functional.silu(self.squeeze(scale))))
        return self.conv2(scale * y)


@functools.cache
def _excitation_exported(activations: bool):
    torch.manual_seed(0)
    name = f"test/excitation_{activations}"
    model = quantized_cases._pt2e(
        SiluExcitationBlock(), name, _inputs, {}, residual_adds=True, activations=activations
    )
    (x,), _ = _inputs({"seed": 7})
    return model, x, exporter.export(model, (x,)).model_proto, quantized_cases._STEP[name]


def test_the_qadd_scheme_leaves_silu_and_excitation_float_between_the_convs():
    _, _, proto, _ = _excitation_exported(activations=False)
    report = ort_fusion.check_fusion(proto, {})
    assert report.counts["QLinearConv"] == 4, report.summary()
    # both SiLUs stay float: a dequantized conv output into Sigmoid and Mul, quantized after
    assert report.counts["Sigmoid"] == 2 and report.counts["Mul"] == 2, report.summary()


def test_quantized_activations_run_silu_and_excitation_on_uint8():
    from torch_onnx_conformance.exporter.diagnostics import quantized_structure as qs

    model, x, proto, step = _excitation_exported(activations=True)
    # every silu became x * sigmoid(x) before prepare_pt2e, each quantized
    targets = {node.target for node in model.program.graph.nodes}
    assert torch.ops.aten.silu.default not in targets
    # the program's QDQ groups: 2 SiLUs + the excitation's sigmoid, 2 SiLU + 1 scale products
    assert qs.expected_kernels(model.program, 20) == {
        "QLinearConv": 4,
        "QLinearSigmoid": 3,
        "QLinearMul": 3,
    }
    # _qadd's program has the excitation's sigmoid and product between Q/DQ already here (and
    # onnxruntime fuses them: the test above), not the SiLUs
    assert qs.expected_kernels(_excitation_exported(activations=False)[0].program, 20) == {
        "QLinearConv": 4,
        "QLinearSigmoid": 1,
        "QLinearMul": 1,
    }
    report = ort_fusion.check_fusion(
        proto,
        {"QLinearConv": 4, "QLinearSigmoid": 3, "QLinearMul": 3, "QLinearGlobalAveragePool": 1},
    )
    assert report.ok, report.summary()
    # nothing float between the model's QuantizeLinear and its output's DequantizeLinear
    floats = {"Sigmoid", "Mul", "GlobalAveragePool", "ReduceMean", "Conv"}
    assert not floats & set(report.counts), report.summary()
    import onnxruntime as ort

    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
    result = compare_in_steps(model(x).detach().numpy(), got, step=step)
    assert result.ok, result.message


# ------------------------------------- the bench's serving size (--image-size): other input shapes
def test_the_torchvision_cases_draw_inputs_at_another_image_size_and_keep_the_zoos_by_default():
    from torch_onnx_conformance.model_zoo import registry

    assert "quantized/resnet18_pt2e_x86_qadd" in quantized_cases.IMAGE_CASES
    assert "quantized/bert_int8_dynamic" not in quantized_cases.IMAGE_CASES
    for name in sorted(quantized_cases.IMAGE_CASES):
        case = registry.get(name)
        (zoo,), _ = case.inputs()
        (serving,), _ = case.inputs({"batch": 1, "image": 96})
        assert zoo.shape == (2, 3, 64, 64), name
        assert serving.shape == (1, 3, 96, 96), name
        again, _ = case.inputs({"batch": 1, "image": 96})
        torch.testing.assert_close(again[0], serving)  # seeded by the case and the sizes
