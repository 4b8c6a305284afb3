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


@pytest.mark.parametrize("opset", [18, 21])
def test_int8_dynamic_activation_int8_weight_is_matmulinteger_and_exact(opset):
    model = _quantized(quantization.Int8DynamicActivationInt8WeightConfig())
    x = torch.randn(2, 3, 256, generator=torch.Generator().manual_seed(1))
    program = exporter.export(model, (x,), opset_version=opset)
    counts = collections.Counter(node.op_type for node in program.model.graph)
    assert counts["MatMulInteger"] == 2
    # the per-row activation quantization is QuantizeLinear per axis 0 of the [rows, hidden]
    # activation, not torch's formula written out
    quantize = [n for n in program.model.graph if n.op_type == "QuantizeLinear"]
    assert len(quantize) == 2 and not counts["Round"]
    for node in quantize:
        assert node.attributes["axis"].as_int() == 0
        assert node.outputs[0].dtype.name == "INT8"
        assert (len(node.inputs) == 2) == (opset >= 21)  # zero point 0: output_dtype from 21
    assert _structure_mismatches(model, (x,), program) == []
    weights = [
        v
        for v in program.model.graph.initializers.values()
        if v.dtype.name == "INT8" and len(v.shape) == 2
    ]
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


def _structure_mismatches(model, args, program):
    from torch_onnx_conformance.exporter.diagnostics import quantized_structure as qs
    from torch_onnx_conformance.exporter.diagnostics.compare import compare_quantization_structure

    captured = torch.export.export(model, args, strict=False)
    opset = program.model_proto.opset_import[0].version
    # blocks and int4 come with opset 21: before it the structure rule compares nothing there
    wanted = [n for n in qs.program_quantization(captured) if qs.representable_at(n, opset)]
    result = compare_quantization_structure(wanted, qs.graph_quantization(program.model_proto))
    return [] if result.ok else [result.message]


class AffineQuantize(torch.nn.Module):
    """torchao's dynamic quantization ops called directly: choose the qparams of ``x`` per
    ``block``, quantize with them."""

    def __init__(self, mapping, block, dtype, quant_range, scale_dtype=torch.float32):
        super().__init__()
        self.args = mapping, block, dtype, quant_range, scale_dtype

    def forward(self, x):
        mapping, block, dtype, (lo, hi), scale_dtype = self.args
        eps = torch.finfo(torch.float32).eps
        scale, zero_point = torch.ops.torchao.choose_qparams_affine(
            x, mapping, block, dtype, lo, hi, eps, scale_dtype, dtype, True
        )
        return torch.ops.torchao.quantize_affine(x, block, scale, zero_point, dtype, lo, hi)


_AFFINE_CASES = {
    # name: mapping, block_size over [4, 6, 64], dtype, range, opset, expected QuantizeLinear
    "per row symmetric": ("SYMMETRIC", [1, 1, 64], torch.int8, (-128, 127), 20, "rows"),
    "per row asymmetric": ("ASYMMETRIC", [1, 1, 64], torch.int8, (-128, 127), 20, "rows"),
    "per row uint8": ("ASYMMETRIC", [1, 1, 64], torch.uint8, (0, 255), 21, "rows"),
    "no clipping error": ("SYMMETRIC_NO_CLIPPING_ERR", [1, 1, 64], torch.int8, (-8, 7), 21, "rows"),
    "narrow range": ("SYMMETRIC", [1, 1, 64], torch.int8, (-127, 127), 20, "rows"),
    "per tensor": ("ASYMMETRIC", [4, 6, 64], torch.uint8, (0, 255), 20, "tensor"),
    "per axis 1": ("SYMMETRIC", [4, 1, 64], torch.int8, (-128, 127), 20, "axis"),
    "blocks of 16": ("SYMMETRIC", [1, 1, 16], torch.int8, (-8, 7), 21, "block"),
    # blocks before opset 21 (no block_size) take torch's formula, below
}


@pytest.mark.parametrize("name", list(_AFFINE_CASES))
def test_torchao_dynamic_quantization_is_quantizelinear_with_torchs_codes(name):
    from torch_onnx_conformance.exporter.diagnostics.compare import compare_codes

    mapping, block, dtype, quant_range, opset, form = _AFFINE_CASES[name]
    model = AffineQuantize(mapping, block, dtype, quant_range).eval()
    x = torch.randn(4, 6, 64, generator=torch.Generator().manual_seed(2)) * 3 + 0.5
    x[0, 0] = 0.0  # a row of zeros: the scale is eps
    program = exporter.export(model, (x,), opset_version=opset)
    (node,) = [n for n in program.model.graph if n.op_type == "QuantizeLinear"]
    narrow = quant_range in ((-8, 7), (0, 15))
    assert node.outputs[0].dtype.name == ("INT4" if narrow else dtype.__repr__()[6:].upper())
    attributes = {k: v.value for k, v in node.attributes.items()}
    if form == "rows":  # [4, 6, 64] flattened to [24 rows (or 96 blocks), elements]
        assert attributes["axis"] == 0
        assert node.inputs[0].producer().op_type == "Reshape"
    elif form == "axis":
        assert attributes["axis"] == 1
    elif form == "block":
        assert attributes["axis"] == 2 and attributes["block_size"] == 16
    else:
        assert node.inputs[1].shape.dims == ()
    # torch's formula is not written out (an asymmetric zero point rounds min / scale once)
    rounds = [n for n in program.model.graph if n.op_type == "Round"]
    assert len(rounds) == (mapping == "ASYMMETRIC")
    want = model(x).numpy()
    got = _run(program, x, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    assert got.dtype == want.dtype
    # a symmetric scale puts each block's extreme on a tie (max|x| / scale = +-(qmax - qmin) / 2),
    # where torch's x * (1/scale) and ONNX's x / scale may round one code apart
    edge = _block_extremes(x, block) if mapping.startswith("SYMMETRIC") else np.zeros(x.shape, bool)
    assert np.abs(want.astype(int) - got.astype(int))[edge].max(initial=0) <= 1
    result = compare_codes(want[~edge], got[~edge])
    assert result.ok, result.message
    assert _structure_mismatches(model, (x,), program) == []


def _block_extremes(x, block):
    """Where |x| is the largest of its block (``block`` tiles ``x``)."""
    grouped = []
    for size, b in zip(x.shape, block):
        grouped += [size // b, b]
    magnitude = x.abs().reshape(grouped)
    largest = magnitude.amax(dim=tuple(range(1, len(grouped), 2)), keepdim=True)
    return (magnitude == largest).reshape(x.shape).numpy()


@pytest.mark.parametrize(
    "block, scale_dtype, opset",
    [
        # torch computes 1/scale in float16 there: QuantizeLinear's x/scale would differ
        ([1, 1, 64], torch.float16, 21),
        # blocks of 16 without opset 21's block_size
        ([1, 1, 16], torch.float32, 20),
    ],
)
def test_what_quantizelinear_cannot_say_keeps_torchs_formula_and_its_codes(
    block, scale_dtype, opset
):
    model = AffineQuantize("SYMMETRIC", block, torch.int8, (-128, 127), scale_dtype)
    x = torch.randn(4, 6, 64, generator=torch.Generator().manual_seed(3))
    program = exporter.export(model.eval(), (x,), opset_version=opset)
    assert not [n for n in program.model.graph if n.op_type == "QuantizeLinear"]
    np.testing.assert_array_equal(
        _run(program, x, ort.GraphOptimizationLevel.ORT_DISABLE_ALL), model(x).numpy()
    )


def test_dynamic_rows_export_with_a_dynamic_batch_and_sequence():
    model = _quantized(quantization.Int8DynamicActivationInt8WeightConfig())
    x = torch.randn(2, 3, 256, generator=torch.Generator().manual_seed(1))
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
    program = exporter.export(model, (x,), dynamic_shapes=({0: batch, 1: seq},))
    other = torch.randn(5, 7, 256, generator=torch.Generator().manual_seed(4))
    got = _run(program, other, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    want = model(other).detach().numpy()
    # rows whose extreme activation sits on the symmetric tie may be one code apart (above)
    np.testing.assert_allclose(got, want, rtol=0, atol=0.01 * np.abs(want).max())
    assert _structure_mismatches(model, (x,), program) == []


class ThreeProjections(torch.nn.Module):
    """Attention's q, k and v of one input: torchao quantizes that input once per projection."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Linear(64, 64) for _ in range(3))

    def forward(self, x):
        return self.q(x) + self.k(x) * self.v(x)


def test_quantizing_one_input_alike_for_three_projections_counts_once_on_both_sides():
    from torch_onnx_conformance.exporter.diagnostics import quantized_structure as qs

    torch.manual_seed(0)
    model = ThreeProjections().eval()
    quantization.quantize_(model, quantization.Int8DynamicActivationInt8WeightConfig())
    x = torch.randn(2, 5, 64, generator=torch.Generator().manual_seed(1))
    program = exporter.export(model, (x,), opset_version=20)
    captured = torch.export.export(model, (x,), strict=False)
    (wanted,) = qs.program_quantization(captured)  # three quantize_affine, one computation
    assert (wanted.kind, wanted.dtype, wanted.zero_points, wanted.granularity) == (
        "quantize",
        "int8",
        (0,),
        "rows",
    )
    assert qs.graph_quantization(program.model_proto) == [wanted]
