"""Quantization ops one at a time: quantized_decomposed's quantize/dequantize/choose_qparams and
ATen's fake-quantize family, exported and run in onnxruntime against eager.

Quantized integers follow ``compare_codes`` (equal, one code apart on at most a tiny fraction:
torch multiplies by 1/scale, ONNX divides); dequantized floats follow ``compare_in_steps``.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers torch.ops.quantized_decomposed)

from tests.op_check import Lambda, run_onnx, tensor_maker
from torch_onnx_conformance import exporter
from torch_onnx_conformance.exporter.diagnostics.compare import compare_codes, compare_in_steps

qd = torch.ops.quantized_decomposed
r = tensor_maker(seed_stride=7)


def _export(fn, args, opset=None):
    program = exporter.export(Lambda(fn).eval(), tuple(args), opset_version=opset)
    counts = collections.Counter(node.op_type for node in program.model.graph)
    return program, counts


def _check_codes(fn, args, opset=None):
    program, counts = _export(fn, args, opset)
    want = fn(*args)
    got = run_onnx(program, args)[0]
    result = compare_codes(want.numpy(), got)
    assert result.ok, result.message
    return counts, want.numpy(), got


# ----------------------------------------------------------------- quantize
# (name, fn, expected Q count, expected Clip count)
QUANTIZE = [
    ("uint8", lambda x: qd.quantize_per_tensor(x, 0.05, 128, 0, 255, torch.uint8), 0),
    ("int8", lambda x: qd.quantize_per_tensor(x, 0.03, -3, -128, 127, torch.int8), 0),
    # a range narrower than the dtype: QuantizeLinear saturates to the dtype, a Clip to it
    ("int8_narrow", lambda x: qd.quantize_per_tensor(x, 0.03, 0, -127, 127, torch.int8), 1),
    ("uint4_in_uint8", lambda x: qd.quantize_per_tensor(x, 0.2, 8, 0, 15, torch.uint8), 1),
    (
        "tensor_qparams",
        lambda x: qd.quantize_per_tensor.tensor(
            x, torch.tensor(0.04), torch.tensor(10), 0, 255, torch.uint8
        ),
        0,
    ),
    (
        "tensor2_bounds",
        lambda x: qd.quantize_per_tensor.tensor2(
            x, torch.tensor(0.04), torch.tensor(1), torch.tensor(-20), torch.tensor(20), torch.int8
        ),
        1,
    ),
]


@pytest.mark.parametrize(("fn", "clips"), [pytest.param(f, c, id=n) for n, f, c in QUANTIZE])
def test_quantize_per_tensor_is_quantizelinear_and_matches_codes(fn, clips):
    x = r(4, 64) * 4
    counts, _, _ = _check_codes(fn, (x,))
    assert counts["QuantizeLinear"] == 1
    assert counts["Clip"] == clips


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8])
def test_ties_at_half_steps_round_half_to_even_in_both(dtype):
    # scale 0.5: x / scale and x * (1 / scale) are exact, so every tie is a true tie
    zp = 0 if dtype == torch.int8 else 100
    x = torch.arange(-40, 40, dtype=torch.float32) * 0.25  # k/2 steps: every other value ties
    low, high = torch.iinfo(dtype).min, torch.iinfo(dtype).max
    _, want, got = _check_codes(
        lambda t: qd.quantize_per_tensor(t, 0.5, zp, low, high, dtype), (x,)
    )
    np.testing.assert_array_equal(want, got)
    assert (want[1::2] % 2 == 0).all()  # the ties landed on even codes (zero points even)


def test_ties_with_a_scale_whose_inverse_is_inexact_stay_within_one_code():
    # x exactly on k.5 steps of scale 0.1 in float32: torch's x * (1/0.1) and ONNX's x / 0.1
    # may round apart; compare_codes allows one code there, on few elements
    scale = np.float32(0.1)
    x = torch.from_numpy((np.arange(-300, 300, dtype=np.float32) + np.float32(0.5)) * scale)
    fn = lambda t: qd.quantize_per_tensor(t, float(scale), 0, -128, 127, torch.int8)  # noqa: E731
    program, _ = _export(fn, (x,))
    want, got = fn(x).numpy(), run_onnx(program, (x,))[0]
    diff = np.abs(want.astype(int) - got.astype(int))
    assert diff.max() <= 1
    assert compare_codes(want, got, max_fraction=0.5).ok


@pytest.mark.parametrize(("axis", "dtype"), [(0, torch.int8), (1, torch.uint8), (-1, torch.int8)])
def test_quantize_per_channel(axis, dtype):
    x = r(3, 4, 5) * 3
    channels = x.shape[axis]
    scales = torch.linspace(0.02, 0.05, channels, dtype=torch.float64)
    zps = torch.arange(channels, dtype=torch.int64) + (100 if dtype == torch.uint8 else -2)
    low, high = torch.iinfo(dtype).min, torch.iinfo(dtype).max

    def fn(t):
        return qd.quantize_per_channel(t, scales, zps, axis, low, high, dtype)

    counts, _, _ = _check_codes(fn, (x,))
    assert counts["QuantizeLinear"] == 1


def test_int16_takes_quantizelinear_from_opset_21_and_torchs_formula_before():
    fn = lambda x: qd.quantize_per_tensor(x, 0.001, 5, -32768, 32767, torch.int16)  # noqa: E731
    x = r(8, 16)
    counts21, _, _ = _check_codes(fn, (x,), opset=21)
    counts20, _, _ = _check_codes(fn, (x,), opset=20)
    assert counts21["QuantizeLinear"] == 1
    assert counts20["QuantizeLinear"] == 0


@pytest.mark.parametrize(
    ("dtype", "low", "high", "zero_point", "onnx_type"),
    [(torch.int8, -8, 7, 1, "INT4"), (torch.uint8, 0, 15, 8, "UINT4")],
)
@pytest.mark.parametrize("opset", [20, 21])
def test_int4_range_quantizes_to_int4_from_opset_21_and_dequantizes_from_it(
    dtype, low, high, zero_point, onnx_type, opset
):
    # PT2E's int4: int8/uint8 storage with int4's range. From opset 21 QuantizeLinear gives
    # INT4/UINT4 (cast back to the storage torch holds) and DequantizeLinear reads that int4
    # value; before it, int8/uint8 with a Clip to the range
    def fn(x):
        q = qd.quantize_per_tensor(x, 0.25, zero_point, low, high, dtype)
        return q, qd.dequantize_per_tensor(q, 0.25, zero_point, low, high, dtype)

    x = r(4, 64) * 2
    program, counts = _export(fn, (x,), opset)
    (quantize,) = [n for n in program.model.graph if n.op_type == "QuantizeLinear"]
    (dequantize,) = [n for n in program.model.graph if n.op_type == "DequantizeLinear"]
    if opset >= 21:
        assert quantize.outputs[0].dtype.name == onnx_type and counts["Clip"] == 0
        assert dequantize.inputs[0].dtype.name == onnx_type
        assert dequantize.inputs[2].dtype.name == onnx_type
    else:
        assert quantize.outputs[0].dtype.name == dtype.__repr__()[6:].upper()
        assert counts["Clip"] == 1
    want_q, want = fn(x)
    got_q, got = run_onnx(program, (x,))
    result = compare_codes(want_q.numpy(), got_q)
    assert result.ok, result.message
    assert compare_in_steps(want.numpy(), got, step=0.25, steps=1.0).ok


# --------------------------------------------------------------- dequantize
@pytest.mark.parametrize(
    ("low", "high", "opset", "stored"),
    [
        (-128, 127, None, "INT8"),
        # int4's range in int8 storage: an int4 initializer from opset 21
        (-8, 7, 21, "INT4"),
    ],
)
def test_pt2e_style_dequantize_is_dequantizelinear_with_integer_weights(low, high, opset, stored):
    # PT2E: an int8 weight per channel with float32 scales and int64 zero points
    weight = r(6, 5, dtype=torch.int8, low=low, high=high)
    scales = torch.linspace(0.01, 0.06, 6)
    zps = torch.tensor([0, 1, -1, 2, 0, 7]) if opset else torch.zeros(6, dtype=torch.int64)

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("w", weight)

        def forward(self, x):
            # (not fed to a MatMul here: onnxruntime turns DQ(int8) -> MatMul into MatMulNBits
            # with accuracy_level 4, which quantizes x too, about 1% off; see ort_fusion)
            return x + qd.dequantize_per_channel(self.w, scales, zps, 0, low, high, torch.int8)

    x = r(6, 5)
    program = exporter.export(M().eval(), (x,), opset_version=opset)
    nodes = list(program.model.graph)
    dq = [n for n in nodes if n.op_type == "DequantizeLinear"]
    assert len(dq) == 1 and dq[0].attributes["axis"].as_int() == 0
    assert dq[0].inputs[0].const_value is not None
    assert dq[0].inputs[0].dtype.name == stored
    assert len(dq[0].inputs) < 3 or dq[0].inputs[2].dtype.name == stored
    np.testing.assert_allclose(run_onnx(program, (x,))[0], M()(x).numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("per_channel", [False, True])
def test_int32_bias_stays_an_int32_initializer_through_dequantizelinear(per_channel):
    # onnxruntime's QDQ Conv/Gemm fusion wants the bias as DQ(int32, zero point 0); computed as
    # Sub/Mul, the optimizer would fold it into a float constant
    bias = torch.tensor([5, -3, 1000, 2**30], dtype=torch.int32)
    scales, zps = torch.tensor([1e-4, 2e-4, 3e-4, 4e-4]), torch.zeros(4, dtype=torch.int64)
    low, high = torch.iinfo(torch.int32).min, torch.iinfo(torch.int32).max

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("b", bias)

        def forward(self, x):
            if per_channel:
                dq = qd.dequantize_per_channel(self.b, scales, zps, 0, low, high, torch.int32)
            else:
                dq = qd.dequantize_per_tensor(self.b, 5e-4, 0, low, high, torch.int32)
            return x + dq

    x = r(3, 4)
    program = exporter.export(M().eval(), (x,))
    dq = [n for n in program.model.graph if n.op_type == "DequantizeLinear"]
    assert len(dq) == 1 and len(dq[0].inputs) == 2  # no zero point: int32 takes none
    assert dq[0].inputs[0].const_value is not None and dq[0].inputs[0].dtype.name == "INT32"
    np.testing.assert_array_equal(run_onnx(program, (x,))[0], M()(x).numpy())


# ---------------------------------------------------------------- choose_qparams
def test_choose_qparams_uint8_is_dynamicquantizelinear():
    def fn(x):
        scale, zp = qd.choose_qparams.tensor(x, 0, 255, torch.finfo(torch.float32).eps, torch.uint8)
        q = qd.quantize_per_tensor.tensor(x, scale, zp, 0, 255, torch.uint8)
        return qd.dequantize_per_tensor.tensor(q, scale, zp, 0, 255, torch.uint8)

    x = r(4, 32) * 2
    program, counts = _export(fn, (x,))
    assert counts["DynamicQuantizeLinear"] == 1
    assert counts["QuantizeLinear"] == 0  # the quantized output of DynamicQuantizeLinear serves
    scale, _ = qd.choose_qparams.tensor(x, 0, 255, torch.finfo(torch.float32).eps, torch.uint8)
    result = compare_in_steps(fn(x).numpy(), run_onnx(program, (x,))[0], step=float(scale))
    assert result.ok, result.message


@pytest.mark.parametrize("symmetric", [False, True])
def test_choose_qparams_int8_matches_torch(symmetric):
    op = qd.choose_qparams_symmetric.tensor if symmetric else qd.choose_qparams.tensor

    def fn(x):
        return op(x, -128, 127, torch.finfo(torch.float32).eps, torch.int8)

    x = r(4, 32) * 3 + 0.5
    program, _ = _export(fn, (x,))
    (want_scale, want_zp), (scale, zp) = fn(x), run_onnx(program, (x,))
    assert scale.dtype == np.float64 and zp.dtype == np.int64
    np.testing.assert_array_equal(want_zp.numpy(), zp)
    np.testing.assert_allclose(want_scale.numpy(), scale, rtol=1e-7)


@pytest.mark.parametrize("asymmetric", [True, False])
def test_per_token_dynamic_quantization_matches_torch(asymmetric):
    choose = qd.choose_qparams_per_token_asymmetric if asymmetric else qd.choose_qparams_per_token

    def fn(x):
        scales, zps = choose(x, torch.int8)
        codes = qd.quantize_per_token(x, scales, zps, -128, 127, torch.int8)
        return codes, qd.dequantize_per_token(
            codes, scales, zps, -128, 127, torch.int8, torch.float32
        )

    x = r(2, 3, 16) * 2 + 0.5
    program, _ = _export(fn, (x,))
    (want_codes, want), (codes, got) = fn(x), run_onnx(program, (x,))
    assert compare_codes(want_codes.numpy(), codes).ok
    np.testing.assert_array_equal(want.numpy(), got)


def test_per_channel_group_int4_round_trip_matches_torch():
    # 8da4w-style int4 weights: groups of 4 along each row, int8 storage with range -8..7
    scales = torch.rand(8) * 0.1 + 0.05
    zps = torch.tensor([0, 1, -1, 2, -2, 0, 3, -3], dtype=torch.int32)

    def fn(w):
        codes = qd.quantize_per_channel_group(w, scales, zps, -8, 7, torch.int8, 4)
        dq = qd.dequantize_per_channel_group(
            codes, scales, zps, -8, 7, torch.int8, 4, torch.float32
        )
        return codes, dq

    w = r(4, 8) * 0.5
    program, _ = _export(fn, (w,))
    (want_codes, want), (codes, got) = fn(w), run_onnx(program, (w,))
    assert compare_codes(want_codes.numpy(), codes).ok
    assert codes.min() >= -8 and codes.max() <= 7 and (codes == -8).any()  # saturated somewhere
    np.testing.assert_array_equal(want.numpy(), got)


# ------------------------------------------------------------ fake quantize
def _fake_cases():
    scale_t, zp_t = torch.tensor([0.05]), torch.tensor([3], dtype=torch.int32)
    per_ch_scale = torch.tensor([0.02, 0.05, 0.1])
    per_ch_zp = torch.tensor([0, 5, -3], dtype=torch.int32)
    aten = torch.ops.aten
    return [
        ("per_tensor", lambda x: torch.fake_quantize_per_tensor_affine(x, 0.05, 3, 0, 255)),
        ("per_tensor_int8", lambda x: torch.fake_quantize_per_tensor_affine(x, 0.05, 0, -128, 127)),
        ("per_tensor_narrow", lambda x: torch.fake_quantize_per_tensor_affine(x, 0.1, 2, 0, 15)),
        (
            "tensor_qparams",
            lambda x: torch.fake_quantize_per_tensor_affine(x, scale_t, zp_t, 0, 255),
        ),
        (
            "per_channel",
            lambda x: torch.fake_quantize_per_channel_affine(
                x, per_ch_scale, per_ch_zp, 1, -128, 127
            ),
        ),
        (
            "cachemask",
            lambda x: aten.fake_quantize_per_tensor_affine_cachemask(x, 0.05, 3, 0, 255),
        ),
        (
            "cachemask_tensor_qparams",
            lambda x: aten._fake_quantize_per_tensor_affine_cachemask_tensor_qparams(
                x, scale_t, zp_t, torch.tensor([1], dtype=torch.long), 0, 255
            ),
        ),
        (
            "cachemask_tensor_qparams_off",
            lambda x: aten._fake_quantize_per_tensor_affine_cachemask_tensor_qparams(
                x, scale_t, zp_t, torch.tensor([0], dtype=torch.long), 0, 255
            ),
        ),
        # QAT's learnable fake quantize: float zero points rounded (half to even) and clamped
        (
            "learnable_per_tensor",
            lambda x: torch._fake_quantize_learnable_per_tensor_affine(
                x, torch.tensor([0.05]), torch.tensor([2.5]), 0, 255, 1.0
            ),
        ),
        (
            "learnable_per_channel",
            lambda x: torch._fake_quantize_learnable_per_channel_affine(
                x, per_ch_scale, torch.tensor([0.4, 5.5, -300.0]), 1, -128, 127, 1.0
            ),
        ),
        (
            "per_channel_cachemask",
            lambda x: aten.fake_quantize_per_channel_affine_cachemask(
                x, per_ch_scale, per_ch_zp, 1, -128, 127
            ),
        ),
    ]


@pytest.mark.parametrize("fn", [pytest.param(f, id=n) for n, f in _fake_cases()])
def test_fake_quantize_matches_eager(fn, request):
    x = r(2, 3, 16) * 4
    program, counts = _export(fn, (x,))
    # each range fits uint8 or int8 and the zero points are integers: a Q/DQ pair (none when
    # the constant fake_quant_enabled flag is off: the input passes through)
    pairs = 0 if request.node.callspec.id.endswith("_off") else 1
    assert counts["QuantizeLinear"] == pairs and counts["DequantizeLinear"] == pairs, counts
    want = fn(x)
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    got = run_onnx(program, (x,))
    # one step: a tie may land one code apart (torch multiplies by 1/scale, ONNX divides)
    result = compare_in_steps(want[0].numpy(), got[0], step=0.1, steps=1.0)
    assert result.ok, result.message
    if len(want) > 1:  # the mask of values that were inside the range
        np.testing.assert_array_equal(want[1].numpy(), got[1])
