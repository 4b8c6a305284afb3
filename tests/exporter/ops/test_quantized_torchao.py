"""Models after torchao's ``quantize_``: int8 dynamic activation + int8 weight (MatMulInteger,
exact) and int4 weight-only through ``IntxWeightOnlyConfig`` (int4 initializers, blocked
DequantizeLinear on ``[K, N]``: onnxruntime's MatMulNBits form).

torchao 0.18's ``Int4WeightOnlyConfig`` does not run on CPU: its packing formats need mslk
('plain', 'preshuffled'), CUDA ('tile_packed_to_4d') or XPU/NPU ('plain_int32'); the CPU
int4 weight-only path is ``IntxWeightOnlyConfig(weight_dtype=torch.int4, PerGroup(g))``.
"""

from __future__ import annotations

import collections

import numpy as np
import onnxruntime as ort
import pytest
import torch

from torch_onnx_conformance import exporter
from torch_onnx_conformance.exporter.diagnostics import ort_fusion

quantization = pytest.importorskip("torchao.quantization")
granularity = pytest.importorskip("torchao.quantization.granularity")


class TwoLinears(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1 = torch.nn.Linear(256, 128)
        self.l2 = torch.nn.Linear(128, 32)

    def forward(self, x):
        return self.l2(torch.relu(self.l1(x)))


def _quantized(config):
    torch.manual_seed(0)
    model = TwoLinears().eval()
    quantization.quantize_(model, config)
    return model


def _run(program, x, level):
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    options.log_severity_level = 3
    session = ort.InferenceSession(
        program.model_proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]


def test_int8_dynamic_activation_int8_weight_is_matmulinteger_and_exact():
    model = _quantized(quantization.Int8DynamicActivationInt8WeightConfig())
    x = torch.randn(2, 3, 256, generator=torch.Generator().manual_seed(1))
    program = exporter.export(model, (x,))
    counts = collections.Counter(node.op_type for node in program.model.graph)
    assert counts["MatMulInteger"] == 2
    weights = [v for v in program.model.graph.initializers.values() if v.dtype.name == "INT8"]
    assert len(weights) == 2  # the weights stay int8
    want = model(x).detach().numpy()
    # integer matmuls and torch's own quantization formula: exact, whatever onnxruntime fuses
    for level in (
        ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    ):
        np.testing.assert_allclose(_run(program, x, level), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("group", [32, 64, 128])
def test_int4_weight_only_is_blocked_dequantizelinear_and_fuses_into_matmulnbits(group):
    config = quantization.IntxWeightOnlyConfig(
        weight_dtype=torch.int4, granularity=granularity.PerGroup(group)
    )
    model = _quantized(config)
    x = torch.randn(2, 3, 256, generator=torch.Generator().manual_seed(1))
    program = exporter.export(model, (x,), opset_version=21)
    dq = [n for n in program.model.graph if n.op_type == "DequantizeLinear"]
    assert len(dq) == 2
    for node in dq:
        assert node.inputs[0].dtype.name == "INT4" and node.inputs[0].const_value is not None
        k, n = node.inputs[0].shape  # stored [K, N], MatMul's B
        assert (n, k) in ((128, 256), (32, 128))
        if group < k:  # blocks along K
            assert node.attributes["axis"].as_int() == 0
            assert node.attributes["block_size"].as_int() == group
        else:  # one group per output: per channel along N
            assert node.attributes["axis"].as_int() == 1
    want = model(x).detach().numpy()
    # our graph is exact; onnxruntime's MatMulNBits (accuracy_level 4) quantizes activations
    # to int8 per block, about 1e-2 relative, so the fused run is compared loosely
    exact = _run(program, x, ort.GraphOptimizationLevel.ORT_ENABLE_BASIC)
    np.testing.assert_allclose(exact, want, rtol=1e-5, atol=1e-5)
    fused = _run(program, x, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    np.testing.assert_allclose(fused, want, rtol=0, atol=0.02 * np.abs(want).max())
    report = ort_fusion.check_fusion(program.model_proto, {"MatMulNBits": 2})
    assert report.ok, report.summary()


@pytest.mark.parametrize("dtype", [torch.int8, torch.int4])
def test_a_single_output_rows_weight_is_per_tensor_with_a_scale_and_zero_point_alike(dtype):
    # a [1, K] weight quantized per row is one block: per-tensor DequantizeLinear, whose zero
    # point ONNX wants in its scale's shape (0-d here)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 1)).eval()
    config = quantization.IntxWeightOnlyConfig(
        weight_dtype=dtype,
        granularity=granularity.PerAxis(0),
        mapping_type=quantization.MappingType.ASYMMETRIC,
    )
    quantization.quantize_(model, config)
    x = torch.randn(3, 64, generator=torch.Generator().manual_seed(1))
    program = exporter.export(model, (x,), opset_version=21)
    (dq,) = [n for n in program.model.graph if n.op_type == "DequantizeLinear"]
    _, scale, zero_point = dq.inputs
    assert zero_point.dtype.name == ("INT8" if dtype == torch.int8 else "INT4")
    assert scale.shape.dims == zero_point.shape.dims == ()
    want = model(x).detach().numpy()
    got = _run(program, x, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_an_unexportable_int4_packed_matmul_names_the_config_and_the_way_out():
    # the CPU int4 kernel torchao's Int4WeightOnlyConfig used on CPU (tinygemm-packed weights)
    packed = torch._convert_weight_to_int4pack_for_cpu(
        torch.randint(0, 16, (64, 128), dtype=torch.int32), 1
    )
    scales_zeros = torch.rand(128 // 32, 64, 2)

    class PackedInt4(torch.nn.Module):
        def forward(self, x):
            return torch._weight_int4pack_mm_for_cpu(x, packed, 32, scales_zeros)

    with pytest.raises(exporter.UnsupportedOpError) as error:
        exporter.export(PackedInt4().eval(), (torch.randn(4, 128),))
    message = str(error.value)
    assert "aten._weight_int4pack_mm_for_cpu.default" in message
    assert "Int4WeightOnlyConfig" in message and "IntxWeightOnlyConfig" in message


class Embedding(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Embedding(100, 64)

    def forward(self, ids):
        return self.table(ids)


@pytest.mark.parametrize("opset", [20, 21])
def test_an_int4_embedding_gathers_its_rows_before_dequantizing_them(opset):
    torch.manual_seed(0)
    model = Embedding().eval()
    config = quantization.IntxWeightOnlyConfig(
        weight_dtype=torch.int4, granularity=granularity.PerGroup(32)
    )
    quantization.quantize_(model, config, filter_fn=lambda m, _: isinstance(m, torch.nn.Embedding))
    ids = torch.tensor([[3, 99, 0, 3], [7, 7, 50, 1]])
    program = exporter.export(model, (ids,), opset_version=opset)
    gathers = [n for n in program.model.graph if n.op_type == "GatherBlockQuantized"]
    if opset < 21:  # no int4 DequantizeLinear to start from: torch's formula stays
        assert gathers == []
    else:  # the int4 table stays whole and stored; only the gathered rows are dequantized
        assert len(gathers) == 1 and gathers[0].domain == "com.microsoft"
        table = gathers[0].inputs[0]
        assert table.dtype.name == "INT4" and table.const_value is not None
        assert gathers[0].attributes["block_size"].as_int() == 32
        assert not [n for n in program.model.graph if n.op_type == "DequantizeLinear"]
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(
        program.model_proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    got = session.run(None, {session.get_inputs()[0].name: ids.numpy()})[0]
    np.testing.assert_allclose(got, model(ids).detach().numpy(), rtol=1e-6, atol=1e-6)
