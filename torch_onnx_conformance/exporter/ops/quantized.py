"""Quantization ops: PT2E's ``quantized_decomposed`` library (quantize, dequantize, choose
qparams) and ATen's fake-quantize family (QAT) as QuantizeLinear/DequantizeLinear, the QDQ form
onnxruntime fuses into QLinearConv, QGemm, QLinearMatMul.

The ``quantized_decomposed`` ops are registered by qualified name: their library exists only
once ``torch.ao.quantization.fx._decomposed`` (or torchao's PT2E) is imported, which the
exporter never does itself.

Where ONNX and torch agree, a Q/DQ node is emitted:

- torch quantizes ``round(x * (1/scale)) + zero_point``, ONNX ``round(x / scale) +
  zero_point`` (both round half to even): a value on a tie between two codes can land one
  code apart (``exporter.diagnostics.compare.compare_codes`` is the rule that allows it);
- a ``quant_min``/``quant_max`` narrower than the dtype is a Clip after QuantizeLinear; int4's
  range in int8/uint8 storage (-8..7, 0..15) is QuantizeLinear to INT4/UINT4 from opset 21,
  cast back to the storage, and the DequantizeLinear of it (or of a constant weight in that
  range, stored as an int4 initializer) reads int4;
- an int32 tensor with zero points 0 (a bias) is a DequantizeLinear without zero point, so a
  constant bias stays an int32 initializer (onnxruntime's QDQ fusion wants it so);
- scales are float32 (torch computes there), zero points are cast to the quantized dtype.

Where they do not, the translation computes torch's formula step by step instead of emitting
a node that would compute something else: a dtype QuantizeLinear does not take at the target
opset (int16 before opset 21, int32, float8), a constant zero point outside the dtype, float64
scales a float32 scale cannot hold, and ``dequantize_per_channel`` with zero points of the
input's own narrow dtype (torch's subtraction then wraps around). Per-token quantization
(``quantize_per_token``, ``choose_qparams_per_token*``) is torch's formula throughout.

QAT graphs: the fake-quantize family (cachemask variants and the learnable ones, whose float
zero points are rounded as torch's kernel does) is a Q/DQ pair; the fused observer
(``fused_moving_avg_obs_fake_quant``) is one once its observer is off, with the qparams torch
derives from the constant running min/max.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import torch

from torch_onnx_conformance.exporter import _dtypes
from torch_onnx_conformance.exporter.ops import _reduce as R
from torch_onnx_conformance.exporter.ops import _shape as S
from torch_onnx_conformance.exporter.ops._fake_kernels import fake_kernels, meta_library
from torch_onnx_conformance.exporter.ops._kernels import call
from torch_onnx_conformance.exporter.ops._registry import translates

#: Integer dtypes QuantizeLinear/DequantizeLinear take -> the ONNX feature that brings them.
_QDQ_FEATURE = {
    torch.uint8: None,
    torch.int8: None,
    torch.uint16: "QuantizeLinear-16bit",
    torch.int16: "QuantizeLinear-16bit",
}


def _bounds(dtype: torch.dtype) -> tuple[int, int]:
    info = torch.iinfo(dtype)
    return int(info.min), int(info.max)


def _qdq_takes(ctx, dtype: torch.dtype) -> bool:
    if dtype not in _QDQ_FEATURE:
        return False
    feature = _QDQ_FEATURE[dtype]
    return feature is None or ctx.has(feature)


def _constant(value):
    """A Python number, or the numpy array of a constant value (seen through the Identity a
    lifted constant's ``detach`` leaves), else None."""
    if isinstance(value, (int, float)):
        return np.asarray(value)
    while isinstance(value, ir.Value) and value.const_value is None:
        node = value.producer()
        if node is None or node.op_type != "Identity":
            return None
        value = node.inputs[0]
    if isinstance(value, ir.Value):
        return value.const_value.numpy()
    return None


def _fits(value, dtype: torch.dtype) -> bool:
    """Whether a zero point (number or value) surely lies inside ``dtype``'s range; a value
    computed at run time counts as fitting (torch's own ops produce it within range)."""
    array = _constant(value)
    if array is None:
        return True
    lo, hi = _bounds(dtype)
    return bool(np.all((array >= lo) & (array <= hi)))


def _int32_bias(dtype: torch.dtype, zero_point) -> bool:
    """An int32 tensor with zero points surely 0 (a bias, quantized at activation scale x
    weight scale): DequantizeLinear takes int32 only without a zero point, at every opset."""
    if dtype != torch.int32:
        return False
    array = _constant(zero_point)
    return zero_point is None or (array is not None and not np.any(array))


def _float32_scale(value) -> bool:
    """Whether float32 holds the scale(s) exactly (PT2E's float64 scales come from float32)."""
    array = _constant(value)
    if array is None:
        return value is None or not isinstance(value, ir.Value) or value.dtype != ir.DataType.DOUBLE
    return bool(np.all(array.astype(np.float32).astype(array.dtype) == array))


def _typed(value: ir.Value, dtype: torch.dtype) -> ir.Value:
    value.dtype = _dtypes.to_ir(dtype)
    return value


def _per_tensor_param(ctx, value, dtype: torch.dtype) -> ir.Value:
    """A per-tensor scale or zero point (number or 1-element tensor) as a 0-d ``dtype``."""
    if isinstance(value, ir.Value):
        return ctx.cast(ctx.op.Reshape(value, ctx.const([], torch.int64)), dtype)
    return ctx.const(value, dtype)


def _per_channel_param(ctx, value, dtype: torch.dtype) -> ir.Value:
    return ctx.cast(ctx.op.Reshape(value, ctx.const([-1], torch.int64)), dtype)


def _along(ctx, values, axis, rank):
    """A 1-D per-channel ``values`` shaped to broadcast along ``axis`` of a rank-``rank``
    tensor."""
    shape = [1] * rank
    shape[axis] = -1
    return ctx.op.Reshape(values, shape)


def _binary(ctx, op_type, x, y):
    dtype = ctx.result_type(x, y)
    return call(ctx, op_type, *ctx.promote(x, y, dtype=dtype), _dtype=dtype)


# ---------------------------------------------------------------- QDQ emitters
#: int4 as PT2E stores it (int8/uint8 with the range -8..7 / 0..15) -> ONNX's type (opset 21).
#: The codes each ONNX integer type holds (the int4 types only from opset 21).
CODE_RANGES = {
    ir.DataType.INT4: (-8, 7),
    ir.DataType.UINT4: (0, 15),
    ir.DataType.INT8: (-128, 127),
    ir.DataType.UINT8: (0, 255),
}

_INT4_RANGES = {
    (torch.int8, -8, 7): ir.DataType.INT4,
    (torch.uint8, 0, 15): ir.DataType.UINT4,
}


def _int_tensor(ctx, array, dtype: ir.DataType) -> ir.Value:
    """A constant of ``dtype`` (int4/uint4 too) holding the integers of ``array``, of its shape
    (a 0-d per-tensor zero point stays 0-d like its scale: ``np.ascontiguousarray`` made it
    ``[1]``)."""
    value = ctx.op.Constant(value=ir.tensor(np.asarray(array, order="C"), dtype=dtype))
    value.dtype = dtype
    return value


def _int4_type(ctx, dtype, quant_min, quant_max) -> ir.DataType | None:
    """INT4/UINT4 where the range is int4's in int8/uint8 storage and the opset has the type."""
    lo, hi = _constant(quant_min), _constant(quant_max)
    if lo is None or hi is None or not ctx.has("Cast-int4"):
        return None
    return _INT4_RANGES.get((dtype, int(lo), int(hi)))


def _int4_zero_point(ctx, raw, value, narrow: ir.DataType, shape) -> ir.Value | None:
    """A zero point as ``narrow``: a constant checked to fit (None where it does not), one
    given at run time cast (torch's own ops keep it in the range, as ``_fits`` has it)."""
    array = _constant(raw)
    if array is None:
        return ctx.op.Cast(value, to=narrow)
    lo, hi = CODE_RANGES[narrow]
    if not np.all((array >= lo) & (array <= hi)):
        return None
    storage = np.int8 if narrow == ir.DataType.INT4 else np.uint8
    return _int_tensor(ctx, np.asarray(array, storage).reshape(shape), narrow)


def _quantize_linear(
    ctx, x, scale, zero_point, quant_min, quant_max, dtype, axis=None, raw_zero_point=None
):
    """QuantizeLinear of ``x`` (in float32, as torch computes), then a Clip to ``quant_min``/
    ``quant_max`` where those are narrower than ``dtype`` (or given at run time). int4's range
    in int8/uint8 storage quantizes to INT4/UINT4 from opset 21 (cast back to the storage)."""
    attrs = {} if axis is None else {"axis": axis}
    narrow = _int4_type(ctx, dtype, quant_min, quant_max)
    if narrow is not None:
        shape = [] if axis is None else [-1]
        zp4 = _int4_zero_point(ctx, raw_zero_point, zero_point, narrow, shape)
        if zp4 is not None:
            q = ctx.op.QuantizeLinear(ctx.cast(x, torch.float32), scale, zp4, **attrs)
            q.dtype = narrow
            return _typed(ctx.op.Cast(q, to=_dtypes.to_ir(dtype)), dtype)
    q = _typed(ctx.op.QuantizeLinear(ctx.cast(x, torch.float32), scale, zero_point, **attrs), dtype)
    lo, hi = _bounds(dtype)
    qmin, qmax = _constant(quant_min), _constant(quant_max)
    if qmin is not None and qmax is not None and int(qmin) <= lo and int(qmax) >= hi:
        return q
    low = _per_tensor_param(ctx, quant_min, dtype)
    high = _per_tensor_param(ctx, quant_max, dtype)
    return _typed(ctx.op.Clip(q, low, high), dtype)


def _dequantize_linear(ctx, q, scale, zero_point, out_dtype, axis=None, int4=None):
    """DequantizeLinear; ``int4``: (dtype, quant_min, quant_max, the zero point as given), for
    int4's range: from opset 21 an INT4/UINT4 input (the int4 QuantizeLinear's output before
    its Cast back, or a constant weight stored so) with its zero point of that type."""
    attrs = {} if axis is None else {"axis": axis}
    if int4 is not None and (narrow := _int4_type(ctx, *int4[:3])) is not None:
        q, zero_point = _int4_input(ctx, q, zero_point, narrow, int4[3], axis)
    inputs = (q, scale) if zero_point is None else (q, scale, zero_point)
    scale_dtype = ctx.dtype(scale)
    return ctx.cast(_typed(ctx.op.DequantizeLinear(*inputs, **attrs), scale_dtype), out_dtype)


def _int4_input(ctx, q, zero_point, narrow, raw_zero_point, axis):
    """``q`` and its zero point as ``narrow`` where that computes the same, else as given."""
    producer = q.producer()
    if producer is not None and producer.op_type == "Cast" and producer.inputs[0].dtype == narrow:
        source = producer.inputs[0]  # the int4 QuantizeLinear's output: exact widening
    else:
        array = _constant(q)
        lo, hi = CODE_RANGES[narrow]
        if array is None or not np.all((array >= lo) & (array <= hi)):
            return q, zero_point
        source = None
    zp4 = None
    if zero_point is not None:
        shape = [] if axis is None else [-1]
        zp4 = _int4_zero_point(ctx, raw_zero_point, zero_point, narrow, shape)
        if zp4 is None:
            return q, zero_point
    if source is None:  # a constant weight in int4's range: stored as int4
        storage = np.int8 if narrow == ir.DataType.INT4 else np.uint8
        source = _int_tensor(ctx, np.asarray(_constant(q), storage), narrow)
    return source, zp4


# --------------------------------------------------------- torch's formulas, exactly
def _torch_codes(ctx, x, inv_scale, zero_point):
    """``round(x * inv_scale) + zero_point`` in float32, as torch's kernels compute it."""
    scaled = ctx.op.Mul(ctx.cast(x, torch.float32), ctx.cast(inv_scale, torch.float32))
    return ctx.op.Add(ctx.op.Round(scaled), ctx.cast(zero_point, torch.float32))


def _inverse(ctx, scale):
    """``1.0 / scale`` computed in float64 (torch divides a Python float), then float32."""
    if isinstance(scale, (int, float)):
        return ctx.const(np.float32(1.0 / scale), torch.float32)
    wide = ctx.cast(scale, torch.float64)
    return ctx.cast(ctx.op.Div(ctx.const(1.0, torch.float64), wide), torch.float32)


def _clamp_codes(ctx, codes, quant_min, quant_max):
    low = _per_tensor_param(ctx, quant_min, torch.float32)
    high = _per_tensor_param(ctx, quant_max, torch.float32)
    return ctx.op.Clip(codes, low, high)


# ----------------------------------------------------------------- quantize
@translates(
    "quantized_decomposed::quantize_per_tensor.default",
    "quantized_decomposed::quantize_per_tensor.tensor",
    "quantized_decomposed::quantize_per_tensor.tensor2",
)
def quantize_per_tensor(ctx, input, scale, zero_point, quant_min, quant_max, dtype):
    dynamic = _dynamic_codes(ctx, input, scale, zero_point, quant_min, quant_max, dtype)
    if dynamic is not None:
        return dynamic
    if _qdq_takes(ctx, dtype) and _fits(zero_point, dtype):
        return _quantize_linear(
            ctx,
            input,
            _per_tensor_param(ctx, scale, torch.float32),
            _per_tensor_param(ctx, zero_point, dtype),
            quant_min,
            quant_max,
            dtype,
            raw_zero_point=zero_point,
        )
    inv = _inverse(ctx, scale if not isinstance(scale, ir.Value) else ctx.op.Reshape(scale, []))
    zp = _per_tensor_param(ctx, zero_point, torch.float32)
    codes = _clamp_codes(ctx, _torch_codes(ctx, input, inv, zp), quant_min, quant_max)
    return ctx.cast(codes, dtype)


@translates("quantized_decomposed::quantize_per_channel.default")
def quantize_per_channel(ctx, input, scales, zero_points, axis, quant_min, quant_max, dtype):
    rank = ctx.rank(input)
    axis = S.axis(axis, rank)
    if _qdq_takes(ctx, dtype) and _fits(zero_points, dtype):
        return _quantize_linear(
            ctx,
            input,
            _per_channel_param(ctx, scales, torch.float32),
            _per_channel_param(ctx, zero_points, dtype),
            quant_min,
            quant_max,
            dtype,
            axis=axis,
            raw_zero_point=zero_points,
        )
    # torch: round(x * (1.0 / scales)) in the scales' dtype (float64 ones widen x), then + zp
    wide = torch.float64 if ctx.dtype(scales) == torch.float64 else torch.float32
    inv = ctx.op.Div(ctx.const(1.0, wide), ctx.cast(scales, wide))
    scaled = ctx.op.Mul(ctx.cast(input, wide), _along(ctx, inv, axis, rank))
    codes = ctx.op.Add(ctx.op.Round(scaled), ctx.cast(_along(ctx, zero_points, axis, rank), wide))
    low, high = ctx.const(quant_min, wide), ctx.const(quant_max, wide)
    return ctx.cast(ctx.op.Clip(codes, low, high), dtype)


# ---------------------------------------------------------------- dequantize
@translates(
    "quantized_decomposed::dequantize_per_tensor.default",
    "quantized_decomposed::dequantize_per_tensor.tensor",
    "quantized_decomposed::dequantize_per_tensor.tensor2",
)
def dequantize_per_tensor(
    ctx, input, scale, zero_point, quant_min, quant_max, dtype, *, out_dtype=None
):
    out_dtype = out_dtype or torch.float32
    # torch's kernel converts to the output dtype first, then shifts and scales there; for
    # float32 that is what DequantizeLinear computes. In float16/bfloat16 torch rounds the
    # scale (or not: a Python float scale stays float32 in its kernel), so those take torch's
    # formula below.
    wide = out_dtype == torch.float32
    bias = _int32_bias(dtype, zero_point)
    if wide and (bias or (_qdq_takes(ctx, dtype) and _fits(zero_point, dtype))):
        return _dequantize_linear(
            ctx,
            input,
            _per_tensor_param(ctx, scale, out_dtype),
            None if bias else _per_tensor_param(ctx, zero_point, dtype),
            ctx.out_dtype,
            int4=(dtype, quant_min, quant_max, zero_point),
        )
    converted = ctx.cast(input, out_dtype)
    scale = ctx.op.Reshape(scale, []) if isinstance(scale, ir.Value) else scale
    zero_point = ctx.op.Reshape(zero_point, []) if isinstance(zero_point, ir.Value) else zero_point
    return ctx.cast(
        _binary(ctx, "Mul", _binary(ctx, "Sub", converted, zero_point), scale), ctx.out_dtype
    )


@translates("quantized_decomposed::dequantize_per_channel.default")
def dequantize_per_channel(
    ctx, input, scales, zero_points, axis, quant_min, quant_max, dtype, *, out_dtype=None
):
    rank = ctx.rank(input)
    axis = S.axis(axis, rank)
    # torch subtracts in the promoted integer dtype: zero points of the input's own narrow
    # dtype wrap around there, which DequantizeLinear does not do.
    wraps = zero_points is not None and ctx.dtype(zero_points) == ctx.dtype(input)
    bias = _int32_bias(dtype, zero_points)
    if _float32_scale(scales) and (
        bias
        or (
            _qdq_takes(ctx, dtype)
            and not wraps
            and (zero_points is None or _fits(zero_points, dtype))
        )
    ):
        zp = None if bias or zero_points is None else _per_channel_param(ctx, zero_points, dtype)
        return _dequantize_linear(
            ctx,
            input,
            _per_channel_param(ctx, scales, torch.float32),
            zp,
            ctx.out_dtype,
            axis=axis,
            int4=(dtype, quant_min, quant_max, zero_points),
        )
    shifted = input
    if zero_points is not None:
        shifted = _binary(ctx, "Sub", input, _along(ctx, zero_points, axis, rank))
    scaled = _binary(ctx, "Mul", shifted, _along(ctx, scales, axis, rank))
    return ctx.cast(scaled, ctx.out_dtype)


@translates("quantized_decomposed::dequantize_per_token.default")
def dequantize_per_token(
    ctx, input, scales, zero_points, quant_min, quant_max, dtype, output_dtype
):
    shifted = _binary(ctx, "Sub", input, zero_points)
    return ctx.cast(_binary(ctx, "Mul", shifted, scales), ctx.out_dtype)


# ---------------------------------------------------------- dynamic quantization
@translates("quantized_decomposed::choose_qparams.tensor")
def choose_qparams(ctx, input, quant_min, quant_max, eps, dtype):
    """torch's ``determine_qparams`` (per-tensor affine): the range widened to hold 0,
    ``scale = max(range / (qmax - qmin), eps)``, ``zero_point = clamp(qmin -
    round(min / scale))``. Returned as torch does: a float64 [1] scale, an int64 [1] zero
    point.

    For uint8 over 0..255 this is DynamicQuantizeLinear (whose quantized output the following
    ``quantize_per_tensor.tensor`` reuses); it differs from torch only where the range is
    below ``255 * eps`` (torch raises the scale to ``eps``, onnxruntime does not).
    """
    if dtype == torch.uint8 and (quant_min, quant_max) == (0, 255):
        x = ctx.cast(input, torch.float32)
        q, scale, zp = ctx.op.DynamicQuantizeLinear(x, _outputs=3)
        _typed(q, torch.uint8), _typed(scale, torch.float32), _typed(zp, torch.uint8)
        return (
            ctx.cast(ctx.op.Reshape(scale, [1]), torch.float64),
            ctx.cast(ctx.op.Reshape(zp, [1]), torch.int64),
        )
    return _affine_qparams(ctx, input, quant_min, quant_max, eps, symmetric=False, dtype=dtype)


@translates("quantized_decomposed::choose_qparams_symmetric.tensor")
def choose_qparams_symmetric(ctx, input, quant_min, quant_max, eps, dtype):
    return _affine_qparams(ctx, input, quant_min, quant_max, eps, symmetric=True, dtype=dtype)


def _affine_qparams(ctx, input, quant_min, quant_max, eps, *, symmetric, dtype):
    x = ctx.cast(input, torch.float32)
    zero = ctx.const(0.0, torch.float32)
    low = ctx.op.Min(ctx.op.ReduceMin(x, keepdims=0), zero)
    high = ctx.op.Max(ctx.op.ReduceMax(x, keepdims=0), zero)
    eps_value = ctx.const(np.float32(eps), torch.float32)
    if symmetric:
        high = ctx.op.Max(ctx.op.Neg(low), high)
        span = ctx.const(np.float32(float(quant_max - quant_min) / 2), torch.float32)
        scale = ctx.op.Max(ctx.op.Div(high, span), eps_value)
        zp_value = 128 if dtype == torch.uint8 else 0
        zp = ctx.const([zp_value], torch.int64)
    else:
        span = ctx.const(np.float32(float(quant_max - quant_min)), torch.float32)
        scale = ctx.op.Max(ctx.op.Div(ctx.op.Sub(high, low), span), eps_value)
        offset = ctx.cast(ctx.op.Round(ctx.op.Div(low, scale)), torch.int64)
        zp = ctx.op.Sub(ctx.const(quant_min, torch.int64), offset)
        zp = ctx.op.Clip(zp, ctx.const(quant_min, torch.int64), ctx.const(quant_max, torch.int64))
        zp = ctx.op.Reshape(zp, ctx.const([1], torch.int64))
    scale = ctx.cast(ctx.op.Reshape(scale, ctx.const([1], torch.int64)), torch.float64)
    return scale, zp


def _dynamic_codes(ctx, input, scale, zero_point, quant_min, quant_max, dtype):
    """The quantized output of the DynamicQuantizeLinear that ``choose_qparams`` emitted for
    this same input, when ``scale``/``zero_point`` are its results: one node computes both."""
    if not isinstance(scale, ir.Value) or dtype != torch.uint8:
        return None
    if (_constant(quant_min), _constant(quant_max)) != (0, 255):
        return None
    dql = _source(scale)
    if dql is None or dql is not _source(zero_point) or dql.outputs[1] is not _through(scale):
        return None
    if _through(ctx.cast(input, torch.float32)) is not dql.inputs[0]:
        return None
    return dql.outputs[0]


def _through(value):
    """``value`` with the Reshape/Cast chain choose_qparams adds peeled off."""
    while value.producer() is not None and value.producer().op_type in ("Cast", "Reshape"):
        value = value.producer().inputs[0]
    return value


def _source(value):
    origin = _through(value) if isinstance(value, ir.Value) else None
    node = origin.producer() if origin is not None else None
    return node if node is not None and node.op_type == "DynamicQuantizeLinear" else None


# ------------------------------------------------------------- per token (dynamic)
def _token_extremes(ctx, input):
    """Each token's (last axis) min and max, kept as a size-1 last axis, in float32."""
    x = ctx.cast(input, torch.float32)
    last = [ctx.rank(input) - 1]
    return R.reduce(ctx, "ReduceMin", x, last, True), R.reduce(ctx, "ReduceMax", x, last, True)


@translates("quantized_decomposed::choose_qparams_per_token.default")
def choose_qparams_per_token(ctx, input, dtype):
    """torch: ``scales = max|x| per token, clamped to >= 1e-5, / 127`` (int8 only), zero points
    0, both float32."""
    low, high = _token_extremes(ctx, input)
    largest = ctx.op.Max(ctx.op.Neg(low), high)
    floor = ctx.const(np.float32(1e-5), torch.float32)
    scales = ctx.op.Div(ctx.op.Max(largest, floor), ctx.const(np.float32(127), torch.float32))
    return scales, ctx.op.Mul(scales, ctx.const(0.0, torch.float32))


@translates("quantized_decomposed::choose_qparams_per_token_asymmetric.default")
def choose_qparams_per_token_asymmetric(ctx, input, dtype):
    """torch's per-token asymmetric int8 qparams (XNNPACK's rule): the range widened to hold 0,
    ``scale = max(range / 255, eps)``, the zero point from whichever end errs less, clamped
    then rounded; a float64 scale and an int64 zero point."""
    f32 = torch.float32
    low, high = _token_extremes(ctx, input)
    zero = ctx.const(0.0, f32)
    low, high = ctx.op.Min(low, zero), ctx.op.Max(high, zero)
    eps = ctx.const(np.float32(torch.finfo(torch.float32).eps), f32)
    scale = ctx.op.Max(ctx.op.Div(ctx.op.Sub(high, low), ctx.const(255.0, f32)), eps)
    descaled_min, descaled_max = ctx.op.Div(low, scale), ctx.op.Div(high, scale)
    qmin, qmax = ctx.const(-128.0, f32), ctx.const(127.0, f32)
    from_min = ctx.op.Add(qmin, descaled_min)
    from_max = ctx.op.Add(qmax, descaled_max)
    zero_point = ctx.op.Where(
        ctx.op.Greater(ctx.op.Add(from_min, from_max), zero),
        ctx.op.Sub(qmin, descaled_min),
        ctx.op.Sub(qmax, descaled_max),
    )
    zero_point = ctx.op.Round(ctx.op.Clip(zero_point, qmin, qmax))
    return ctx.cast(scale, torch.float64), ctx.cast(zero_point, torch.int64)


@translates("quantized_decomposed::quantize_per_token.default")
def quantize_per_token(ctx, input, scales, zero_points, quant_min, quant_max, dtype):
    """torch: ``clamp(round(x * (1 / scales) + zero_points))`` in the promoted dtype (float64
    scales widen x), the scales shaped like the tokens (``[..., 1]``)."""
    wide = ctx.result_type(input, scales, zero_points)
    inverse = ctx.op.Div(ctx.const(1.0, wide), ctx.cast(scales, wide))
    scaled = ctx.op.Mul(ctx.cast(input, wide), inverse)
    codes = ctx.op.Round(ctx.op.Add(scaled, ctx.cast(zero_points, wide)))
    low, high = ctx.const(quant_min, wide), ctx.const(quant_max, wide)
    return ctx.cast(ctx.op.Clip(codes, low, high), dtype)


# ------------------------------------------------------ per channel group (int4 weights)
def _group_size(ctx, input, scales, group_size: int) -> int:
    """torch's group size, which becomes the whole row when it exceeds the row and there is
    one scale per row (GPTQ's single column)."""
    row = ctx.meta(input).shape[-1]
    if isinstance(row, int) and group_size > row and ctx.meta(scales).shape[-1] == 1:
        return row
    return group_size


@translates("quantized_decomposed::quantize_per_channel_group.default")
def quantize_per_channel_group(
    ctx, input, scales, zero_points, quant_min, quant_max, dtype, group_size=128
):
    """torch: each row's groups of ``group_size`` quantized with their own scale and zero
    point, ``clamp(round(x * (1 / scales) + zero_points))``."""
    group_size = _group_size(ctx, input, scales, group_size)
    wide = ctx.result_type(input, scales, zero_points)
    grouped = ctx.op.Reshape(ctx.cast(input, wide), ctx.const([-1, group_size], torch.int64))
    column = ctx.const([-1, 1], torch.int64)
    inverse = ctx.op.Div(ctx.const(1.0, wide), ctx.op.Reshape(ctx.cast(scales, wide), column))
    shift = ctx.op.Reshape(ctx.cast(zero_points, wide), column)
    codes = ctx.op.Round(ctx.op.Add(ctx.op.Mul(grouped, inverse), shift))
    codes = ctx.op.Clip(codes, ctx.const(quant_min, wide), ctx.const(quant_max, wide))
    return ctx.op.Reshape(ctx.cast(codes, dtype), ctx.op.Shape(input))


@translates("quantized_decomposed::dequantize_per_channel_group.default")
def dequantize_per_channel_group(
    ctx,
    w_int8,
    scales,
    zero_points,
    quant_min,
    quant_max,
    dtype,
    group_size=128,
    output_dtype=torch.float32,
):
    """torch: ``(w - zero_points) * scales`` per group of ``group_size`` in each row."""
    group_size = _group_size(ctx, w_int8, scales, group_size)
    grouped = ctx.op.Reshape(w_int8, ctx.const([-1, group_size], torch.int64))
    column = ctx.const([-1, 1], torch.int64)
    if zero_points is not None:
        grouped = _binary(ctx, "Sub", grouped, ctx.op.Reshape(zero_points, column))
    scaled = _binary(ctx, "Mul", grouped, ctx.op.Reshape(scales, column))
    return ctx.cast(ctx.op.Reshape(scaled, ctx.op.Shape(w_int8)), ctx.out_dtype)


# ------------------------------------------------------------ fake quantize (QAT)
def _like(self, *args, **kwargs):
    return torch.empty_like(self)


def _like_with_mask(self, *args, **kwargs):
    return torch.empty_like(self), torch.empty_like(self, dtype=torch.bool)


def _fused_observer_like(self, observer_on, fake_quant_on, running_min, running_max, scale, zp, *a):
    return (
        *_like_with_mask(self),
        *(torch.empty_like(t) for t in (running_min, running_max, scale, zp)),
    )


@fake_kernels
def _register_meta_kernels() -> torch.library.Library | None:
    """The fake-quantize family has CPU kernels only; fake tensors fall back to a real kernel
    for static shapes alone, so torch.export could not capture QAT graphs with dynamic shapes.
    Each output has its input's shape (the mask: bool)."""
    return meta_library(
        {
            "fake_quantize_per_tensor_affine_cachemask": _like_with_mask,
            "_fake_quantize_per_tensor_affine_cachemask_tensor_qparams": _like_with_mask,
            "fake_quantize_per_channel_affine_cachemask": _like_with_mask,
            "_fake_quantize_learnable_per_tensor_affine": _like,
            "_fake_quantize_learnable_per_channel_affine": _like,
            "_fused_moving_avg_obs_fq_helper_functional": _fused_observer_like,
        }
    )


def _fake_dtype(ctx, quant_min: int, quant_max: int) -> torch.dtype | None:
    """The narrowest integer dtype QuantizeLinear takes that holds ``quant_min..quant_max``."""
    for dtype in (torch.uint8, torch.int8, torch.uint16, torch.int16):
        lo, hi = _bounds(dtype)
        if lo <= quant_min and quant_max <= hi and _qdq_takes(ctx, dtype):
            return dtype
    return None


def _fake_quantize(ctx, x, scale, zero_point, quant_min, quant_max, axis=None):
    """``(clamp(round(x * (1/scale)) + zp, qmin, qmax) - zp) * scale``: a Q/DQ pair where a
    dtype holds the range and the zero points are integers, torch's formula otherwise; and
    the codes before clamping (for the mask), computed by torch's formula."""
    rank = ctx.rank(x)
    param = _per_tensor_param if axis is None else _per_channel_param
    dtype = _fake_dtype(ctx, quant_min, quant_max)
    integer_zp = not isinstance(zero_point, ir.Value) or _dtypes.is_int(ctx.dtype(zero_point))
    if axis is None:
        shape_like = lambda v: v  # noqa: E731
    else:
        shape_like = lambda v: _along(ctx, v, axis, rank)  # noqa: E731
    scale32 = param(ctx, scale, torch.float32)
    inv = ctx.op.Reciprocal(scale32)
    zp32 = param(ctx, zero_point, torch.float32)
    if dtype is not None and integer_zp:
        zp = param(ctx, zero_point, dtype)
        q = _quantize_linear(
            ctx, x, scale32, zp, quant_min, quant_max, dtype, axis=axis, raw_zero_point=zero_point
        )
        int4 = (dtype, quant_min, quant_max, zero_point)
        out = _dequantize_linear(ctx, q, scale32, zp, ctx.dtype(x), axis=axis, int4=int4)
        return out, lambda: _torch_codes(ctx, x, shape_like(inv), shape_like(zp32))
    if integer_zp:
        codes = _torch_codes(ctx, x, shape_like(inv), shape_like(zp32))
    else:
        # a float zero point is added before rounding
        scaled = ctx.op.Mul(ctx.cast(x, torch.float32), shape_like(inv))
        codes = ctx.op.Round(ctx.op.Add(scaled, shape_like(zp32)))
    clamped = _clamp_codes(ctx, codes, quant_min, quant_max)
    out = ctx.op.Mul(ctx.op.Sub(clamped, shape_like(zp32)), shape_like(scale32))
    return ctx.cast(out, ctx.dtype(x)), lambda: codes


def _mask(ctx, codes, quant_min, quant_max):
    low = ctx.op.GreaterOrEqual(codes, ctx.const(float(quant_min), torch.float32))
    return ctx.op.And(low, ctx.op.LessOrEqual(codes, ctx.const(float(quant_max), torch.float32)))


def _with_mask(ctx, result, quant_min, quant_max):
    out, codes = result
    mask = _mask(ctx, codes(), quant_min, quant_max) if 1 in ctx.used_outputs() else None
    if mask is None:
        mask = ctx.op.ConstantOfShape(ctx.op.Shape(out), value=ir.tensor([True]))
    return out, mask


@translates(
    torch.ops.aten.fake_quantize_per_tensor_affine.default,
    torch.ops.aten.fake_quantize_per_tensor_affine.tensor_qparams,
)
def fake_quantize_per_tensor_affine(ctx, self, scale, zero_point, quant_min, quant_max):
    return _fake_quantize(ctx, self, scale, zero_point, quant_min, quant_max)[0]


@translates(torch.ops.aten.fake_quantize_per_tensor_affine_cachemask.default)
def fake_quantize_per_tensor_affine_cachemask(ctx, self, scale, zero_point, quant_min, quant_max):
    result = _fake_quantize(ctx, self, scale, zero_point, quant_min, quant_max)
    return _with_mask(ctx, result, quant_min, quant_max)


@translates(torch.ops.aten._fake_quantize_per_tensor_affine_cachemask_tensor_qparams.default)
def fake_quantize_per_tensor_cachemask_tensor_qparams(
    ctx, self, scale, zero_point, fake_quant_enabled, quant_min, quant_max
):
    out, mask = _with_mask(
        ctx,
        _fake_quantize(ctx, self, scale, zero_point, quant_min, quant_max),
        quant_min,
        quant_max,
    )
    enabled = _constant(fake_quant_enabled)
    if enabled is not None:
        if int(enabled.reshape(-1)[0]) != 0:
            return out, mask
        all_true = ctx.op.ConstantOfShape(ctx.op.Shape(self), value=ir.tensor([True]))
        return ctx.op.Identity(self), all_true
    on = ctx.op.Not(
        ctx.op.Equal(
            ctx.op.Reshape(ctx.op.Slice(ctx.op.Reshape(fake_quant_enabled, [-1]), [0], [1]), []),
            ctx.const(0, ctx.dtype(fake_quant_enabled)),
        )
    )
    return ctx.op.Where(on, out, self), ctx.op.Or(mask, ctx.op.Not(on))


@translates(torch.ops.aten.fake_quantize_per_channel_affine.default)
def fake_quantize_per_channel_affine(ctx, self, scale, zero_point, axis, quant_min, quant_max):
    axis = S.axis(axis, ctx.rank(self))
    return _fake_quantize(ctx, self, scale, zero_point, quant_min, quant_max, axis=axis)[0]


@translates(torch.ops.aten.fake_quantize_per_channel_affine_cachemask.default)
def fake_quantize_per_channel_affine_cachemask(
    ctx, self, scale, zero_point, axis, quant_min, quant_max
):
    axis = S.axis(axis, ctx.rank(self))
    result = _fake_quantize(ctx, self, scale, zero_point, quant_min, quant_max, axis=axis)
    return _with_mask(ctx, result, quant_min, quant_max)


def _learned_zero_point(ctx, zero_point, quant_min, quant_max):
    """A learnable fake-quantize's float zero point as torch's kernel uses it: rounded half to
    even, clamped to the range, then an integer (int32)."""
    low, high = (ctx.const(float(v), torch.float32) for v in (quant_min, quant_max))
    rounded = ctx.op.Round(ctx.cast(zero_point, torch.float32))
    return ctx.cast(ctx.op.Clip(rounded, low, high), torch.int32)


def _first(ctx, value):
    """``value[0]`` of a 1-D tensor, 0-d (torch's per-tensor kernels read only the first)."""
    return ctx.op.Reshape(ctx.op.Slice(ctx.op.Reshape(value, [-1]), [0], [1]), [])


@translates(torch.ops.aten._fake_quantize_learnable_per_tensor_affine.default)
def fake_quantize_learnable_per_tensor_affine(
    ctx, self, scale, zero_point, quant_min, quant_max, grad_factor=1.0
):
    # grad_factor scales the gradients only
    zp = _learned_zero_point(ctx, _first(ctx, zero_point), quant_min, quant_max)
    scale = _first(ctx, scale)
    return _fake_quantize(ctx, self, scale, zp, quant_min, quant_max)[0]


@translates(torch.ops.aten._fake_quantize_learnable_per_channel_affine.default)
def fake_quantize_learnable_per_channel_affine(
    ctx, self, scale, zero_point, axis, quant_min, quant_max, grad_factor=1.0
):
    axis = S.axis(axis, ctx.rank(self))
    zp = _learned_zero_point(ctx, zero_point, quant_min, quant_max)
    return _fake_quantize(ctx, self, scale, zp, quant_min, quant_max, axis=axis)[0]


@translates(torch.ops.aten._fused_moving_avg_obs_fq_helper_functional.default)
def fused_moving_avg_obs_fake_quant(
    ctx,
    self,
    observer_on,
    fake_quant_on,
    running_min,
    running_max,
    scale,
    zero_point,
    averaging_const,
    quant_min,
    quant_max,
    ch_axis,
    per_row_fake_quant=False,
    symmetric_quant=False,
):
    """QAT's fused observer + fake quantize (PT2E's default QAT scheme), with the observer off:
    the scale and zero point follow from the constant running min/max alone, so torch's own
    kernel computes them here, once, and the op is a fake quantize with constant qparams (a
    Q/DQ pair). With the observer on, every call would move the running min/max by its input,
    state an inference graph does not keep: the translation refuses and says what to do."""
    observer, enabled = _constant(observer_on), _constant(fake_quant_on)
    stats = [_constant(v) for v in (running_min, running_max, scale, zero_point)]
    if observer is None or int(observer.reshape(-1)[0]) != 0 or any(s is None for s in stats):
        raise NotImplementedError(
            "fused_moving_avg_obs_fake_quant with its observer on (or its running min/max not "
            "constants) moves the running min/max with every input, which an inference graph "
            "cannot keep. Turn the observers off before export (model.apply(torchao.quantization"
            ".pt2e.disable_observer), or torch.ao.quantization.disable_observer), or export the "
            "model after convert_pt2e (Q/DQ)."
        )
    low, high, scales, zps = (torch.from_numpy(np.array(s)) for s in stats)
    probe = torch.zeros([max(int(low.numel()), 1)] + [1] * max(ctx.rank(self) - 1, 0))
    torch.fused_moving_avg_obs_fake_quant(
        probe.movedim(0, ch_axis) if per_row_fake_quant else probe,
        torch.tensor([0]),
        torch.tensor([1]),
        low,
        high,
        scales,
        zps,
        averaging_const,
        quant_min,
        quant_max,
        ch_axis,
        per_row_fake_quant,
        symmetric_quant,
    )
    scale_out = ctx.const(scales.numpy(), torch.float32)
    zp_out = ctx.const(zps.numpy(), torch.int32)
    axis = S.axis(ch_axis, ctx.rank(self)) if per_row_fake_quant else None
    if enabled is not None and int(enabled.reshape(-1)[0]) == 0:
        out = ctx.op.Identity(self)
        mask = ctx.op.ConstantOfShape(ctx.op.Shape(self), value=ir.tensor([True]))
    else:
        out, mask = _with_mask(
            ctx,
            _fake_quantize(ctx, self, scale_out, zp_out, quant_min, quant_max, axis=axis),
            quant_min,
            quant_max,
        )
    return out, mask, running_min, running_max, scale_out, zp_out
