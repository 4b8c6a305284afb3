"""torchao's quantization (``torchao.quantization.quantize_``) as ONNX.

- ``torchao::dequantize_affine`` (weight-only configs such as ``IntxWeightOnlyConfig``) becomes
  DequantizeLinear: per tensor, per channel, or blocked (opset 21+). A constant int4 weight
  (``quant_min``/``quant_max`` within -8..7 or 0..15) is stored as an int4 initializer; a
  blocked one feeding a ``linear`` is stored transposed, ``[K, N]`` blocked on axis 0, the form
  onnxruntime turns into MatMulNBits, then transposed back. Where DequantizeLinear would
  compute something else (a float zero point, a float16/bfloat16 result computed there by
  torchao, blocks on several axes) torch's formula is written out instead.
- ``aten._int_mm`` (``Int8DynamicActivationInt8WeightConfig``'s integer matmul) becomes
  MatMulInteger; torchao's ``choose_qparams_affine``/``quantize_affine`` around it have no
  translation and are traced through their implementations (plain torch ops).

torchao's ops are registered by qualified name: the exporter never imports torchao.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir
import torch

from torch_onnx_conformance.exporter.ops._registry import translates
from torch_onnx_conformance.exporter.ops.quantized import _bounds, _constant, _typed

#: int4 ranges torchao stores in int8/uint8 tensors -> the ONNX type that holds them.
_NARROW = {(-8, 7): ir.DataType.INT4, (0, 15): ir.DataType.UINT4}
_WIDE = {torch.int8: ir.DataType.INT8, torch.uint8: ir.DataType.UINT8}

#: Ops torchao configs leave that have no translation -> which config leaves them, and what
#: exports instead. Read by the exporter's "no ONNX translation" error.
TORCHAO_HINTS = {
    "aten._weight_int4pack_mm.default": (
        "torchao Int4WeightOnlyConfig with int4_packing_format='tile_packed_to_4d' (tinygemm, "
        "CUDA only); for an exportable int4 weight-only model use IntxWeightOnlyConfig("
        "weight_dtype=torch.int4, granularity=PerGroup(32|64|128))"
    ),
    "aten._weight_int4pack_mm_for_cpu.default": (
        "torchao Int4WeightOnlyConfig's CPU packing; use IntxWeightOnlyConfig(weight_dtype="
        "torch.int4, granularity=PerGroup(32|64|128)), which exports as blocked "
        "DequantizeLinear (MatMulNBits in onnxruntime)"
    ),
    "aten._weight_int8pack_mm.default": (
        "torchao Int8WeightOnlyConfig's packed kernel; IntxWeightOnlyConfig(weight_dtype="
        "torch.int8) exports as DequantizeLinear"
    ),
    "mslk.": "torchao's mslk kernels (Int4WeightOnlyConfig packing 'plain'/'preshuffled')",
}


def torchao_hint(target: str) -> str | None:
    for prefix, hint in TORCHAO_HINTS.items():
        if target.startswith(prefix):
            return hint
    return None


def _layout(block_size, shape):
    """How ``block_size`` groups a tensor of ``shape``: ("tensor", None), ("channel", axis),
    ("block", axis) as ONNX's DequantizeLinear takes them, else None."""
    whole = [b == d or d == 1 for b, d in zip(block_size, shape)]
    single = [b == 1 and d > 1 for b, d in zip(block_size, shape)]
    if all(whole):
        return "tensor", None
    if sum(single) == 1 and all(w or s for w, s in zip(whole, single)):
        return "channel", single.index(True)
    partial = [1 < b < d for b, d in zip(block_size, shape)]
    if sum(partial) == 1 and all(
        p or b == 1 or d == 1 for p, b, d in zip(partial, block_size, shape)
    ):
        axis = partial.index(True)
        if shape[axis] % block_size[axis] == 0:
            return "block", axis
    return None


def _int_tensor(ctx, array: np.ndarray, dtype: ir.DataType) -> ir.Value:
    """A constant of ``dtype`` (int4/uint4 too) holding the integers of ``array``, of its shape
    (a 0-d per-tensor zero point stays 0-d like its scale: ``np.ascontiguousarray`` made it
    ``[1]``)."""
    value = ctx.op.Constant(value=ir.tensor(np.asarray(array, order="C"), dtype=dtype))
    value.dtype = dtype
    return value


@translates("torchao::dequantize_affine.default")
def dequantize_affine(
    ctx,
    input,
    block_size,
    scale,
    zero_point,
    input_dtype,
    quant_min=None,
    quant_max=None,
    output_dtype=torch.float32,
):
    shape = ctx.static_shape(input)
    lo, hi = (quant_min, quant_max) if quant_min is not None else _bounds(input_dtype)
    layout = None if shape is None else _layout(list(block_size), list(shape))
    zp_float = zero_point is not None and not _is_int(ctx, zero_point)
    exact = (
        layout is not None
        and output_dtype == torch.float32
        and ctx.dtype(scale) == torch.float32
        and not zp_float
        and ctx.dtype(input) in _WIDE
        and (layout[0] != "block" or ctx.has("QuantizeLinear-16bit"))
    )
    if not exact:
        return _dequantize_affine_formula(ctx, input, block_size, scale, zero_point, shape)
    kind, axis = layout
    weight, scales, zps = _constant(input), _constant(scale), _constant(zero_point)
    narrow = _NARROW.get((int(lo), int(hi))) if ctx.has("Cast-int4") else None
    constant = weight is not None and scales is not None and (zero_point is None or zps is not None)
    if kind == "block" and constant and len(shape) == 2 and axis == 1 and _feeds_linear(ctx):
        # [N, K] blocked along K, read by linear as x @ W^T: store W^T [K, N] blocked on axis 0
        # (MatMulNBits' form) and transpose the dequantized result back.
        dq = _blocked_dq(ctx, weight.T, scales.reshape(shape[0], -1).T, zps, narrow, block_size[1])
        return ctx.op.Transpose(dq, perm=[1, 0])
    if kind == "channel" and constant and len(shape) == 2 and axis == 0 and _feeds_linear(ctx):
        # per output row: W^T [K, N] per channel on axis 1, MatMulNBits' per-channel form
        zp_type = narrow or _WIDE[ctx.dtype(input)]
        z = None if zero_point is None else _int_tensor(ctx, zps.reshape(-1), zp_type)
        s = ctx.op.Reshape(scale, ctx.const([-1], torch.int64))
        dq = ctx.op.DequantizeLinear(*_present(_int_tensor(ctx, weight.T, zp_type), s, z), axis=1)
        return ctx.op.Transpose(_typed(dq, torch.float32), perm=[1, 0])
    if constant:
        q = _int_tensor(ctx, weight, narrow or _WIDE[ctx.dtype(input)])
    else:
        q = input
    zp_type = narrow if constant and narrow else _WIDE[ctx.dtype(input)]
    if kind == "tensor":
        s = ctx.op.Reshape(scale, ctx.const([], torch.int64))
        z = None if zero_point is None else _zp(ctx, zero_point, zps, zp_type, [])
        return _typed(ctx.op.DequantizeLinear(*_present(q, s, z)), torch.float32)
    if kind == "channel":
        s = ctx.op.Reshape(scale, ctx.const([-1], torch.int64))
        z = None if zero_point is None else _zp(ctx, zero_point, zps, zp_type, [-1])
        return _typed(ctx.op.DequantizeLinear(*_present(q, s, z), axis=axis), torch.float32)
    blocked = [d // b if i == axis else d for i, (d, b) in enumerate(zip(shape, block_size))]
    s = ctx.op.Reshape(scale, ctx.const(blocked, torch.int64))
    z = None if zero_point is None else _zp(ctx, zero_point, zps, zp_type, blocked)
    return _typed(
        ctx.op.DequantizeLinear(*_present(q, s, z), axis=axis, block_size=block_size[axis]),
        torch.float32,
    )


def _present(*values):
    return [v for v in values if v is not None]


def _is_int(ctx, value) -> bool:
    dtype = ctx.dtype(value)
    return dtype is not None and not dtype.is_floating_point


def _zp(ctx, zero_point, constant, dtype: ir.DataType, shape):
    if constant is not None:
        return _int_tensor(ctx, np.asarray(constant).reshape(shape or ()), dtype)
    return ctx.op.Cast(ctx.op.Reshape(zero_point, ctx.const(shape, torch.int64)), to=dtype)


def _blocked_dq(ctx, weight_kn, scales_kn, zps, narrow, block):
    k, n = weight_kn.shape
    dtype = narrow or ir.DataType.INT8
    inputs = [
        _int_tensor(ctx, weight_kn, dtype),
        ctx.const(np.ascontiguousarray(scales_kn, dtype=np.float32), torch.float32),
    ]
    if zps is not None:
        zp_kn = np.ascontiguousarray(np.asarray(zps).reshape(n, -1).T)
        inputs.append(_int_tensor(ctx, zp_kn, dtype))
    assert scales_kn.shape == (math.ceil(k / block), n)
    return _typed(ctx.op.DequantizeLinear(*inputs, axis=0, block_size=block), torch.float32)


def _feeds_linear(ctx) -> bool:
    users = list(ctx.node.users) if ctx.node is not None else []
    return bool(users) and all(
        u.target is torch.ops.aten.linear.default
        and u.args[1] is ctx.node
        and u.args[0] is not ctx.node
        for u in users
    )


def _dequantize_affine_formula(ctx, input, block_size, scale, zero_point, shape):
    """torchao's ``_dequantize_affine_no_dtype_check``: blocks as their own axes, ``(q - zp) *
    scale`` in the output dtype."""
    if shape is None:
        raise NotImplementedError(
            "torchao::dequantize_affine needs the quantized tensor's static shape"
        )
    out_dtype = ctx.out_dtype
    grouped, reduced = [], []
    for b, d in zip(block_size, shape):
        if b != d and b > 1:
            grouped += [d // b, b]
            reduced += [d // b, 1]
        else:
            grouped.append(d)
            reduced.append(1 if b == d or b > 1 else d)
    q = ctx.op.Reshape(ctx.cast(input, out_dtype), ctx.const(grouped, torch.int64))
    if zero_point is not None:
        zp = ctx.op.Reshape(ctx.cast(zero_point, out_dtype), ctx.const(reduced, torch.int64))
        q = ctx.op.Sub(q, zp)
    s = ctx.op.Reshape(scale, ctx.const(reduced, torch.int64))
    work = torch.promote_types(out_dtype, ctx.dtype(scale))
    product = ctx.op.Mul(ctx.cast(q, work), ctx.cast(s, work))
    return ctx.cast(ctx.op.Reshape(product, ctx.const(list(shape), torch.int64)), out_dtype)


@translates(torch.ops.aten._int_mm.default)
def int_mm(ctx, self, mat2):
    """An integer matmul with int32 accumulation: MatMulInteger (uint8/int8 operands)."""
    return _typed(ctx.op.MatMulInteger(self, mat2), torch.int32)
