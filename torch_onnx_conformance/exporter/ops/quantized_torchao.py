"""torchao's quantization (``torchao.quantization.quantize_``) as ONNX.

- ``torchao::dequantize_affine`` (weight-only configs such as ``IntxWeightOnlyConfig``) becomes
  DequantizeLinear: per tensor, per channel, or blocked (opset 21+). A constant int4 weight
  (``quant_min``/``quant_max`` within -8..7 or 0..15) is stored as an int4 initializer; a
  blocked one feeding a ``linear`` is stored transposed, ``[K, N]`` blocked on axis 0, the form
  onnxruntime turns into MatMulNBits, then transposed back. Where DequantizeLinear would
  compute something else (a float zero point, a float16/bfloat16 result computed there by
  torchao, blocks on several axes) torch's formula is written out instead.
- ``torchao::choose_qparams_affine`` (dynamic quantization: ``Int8DynamicActivation...``
  configs choose one scale per row of the activation at run time) is torchao's formula as
  ONNX ops (ReduceMin/ReduceMax, Div by the range, Max with ``eps``; an asymmetric zero point
  ``qmin - Round(min / scale)`` clipped), computed where torch rounds; a symmetric zero point
  is the constant ``(qmin + qmax + 1) // 2`` (ConstantOfShape), which QuantizeLinear reads as
  such.
- ``torchao::quantize_affine`` becomes QuantizeLinear where ``block_size`` is a granularity
  ONNX has: per tensor, per axis, blocked on one axis (opset 21+), or one scale per row of
  the leading axes (the activation ``[batch, sequence, hidden]`` with ``block_size [1, 1,
  hidden]``: flattened to ``[rows, hidden]``, QuantizeLinear per axis 0, shaped back); a
  ``quant_min``/``quant_max`` of -8..7 or 0..15 quantizes to int4/uint4 at opset 21+ (cast
  back to torchao's int8/uint8 storage), another range narrower than the dtype is a Clip
  after it. torch quantizes ``round(x * (1/scale))``, ONNX ``round(x / scale)``: a value on a
  tie between two codes can land one code apart (as for PT2E, ``torch_onnx_conformance/exporter/ops/quantized.py``).
  A symmetric scale puts each row's largest magnitude on such a tie (``max|x| / scale`` is
  ``(qmax - qmin) / 2``, 127.5): where that element is negative, about one row in ten of
  random data has it one code apart (-127 against -128), the rest of the row equal.
  A float16/bfloat16 scale (torch rounds ``1/scale`` there), a float zero point (added before
  the Clip and truncated by torch's cast) or a block layout ONNX lacks takes torch's formula.
- ``aten._int_mm`` (``Int8DynamicActivationInt8WeightConfig``'s integer matmul) becomes
  MatMulInteger.

torchao's ops are registered by qualified name: the exporter never imports torchao.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir
import torch

from torch_onnx_conformance.exporter import _dtypes
from torch_onnx_conformance.exporter.ops import _reduce as R
from torch_onnx_conformance.exporter.ops import _shape as S
from torch_onnx_conformance.exporter.ops._registry import translates
from torch_onnx_conformance.exporter.ops.quantized import (
    CODE_RANGES,
    _bounds,
    _constant,
    _int_tensor,
    _typed,
)

#: int4 ranges torchao stores in int8/uint8 tensors -> the ONNX type that holds them.
_NARROW = {CODE_RANGES[t]: t for t in (ir.DataType.INT4, ir.DataType.UINT4)}
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
    lo, hi = _range(input_dtype, quant_min, quant_max)
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


# ------------------------------------------------ dynamic quantization: choose qparams, quantize
def _qbounds(dtype: torch.dtype) -> tuple[int, int]:
    """torchao's range of a target dtype: torch's integer types and the sub-byte ones
    (``torch.int4``: -8..7, ``torch.uint4``: 0..15)."""
    name = str(dtype).removeprefix("torch.")
    for prefix, signed in (("uint", False), ("int", True)):
        bits = name.removeprefix(prefix)
        if name.startswith(prefix) and bits.isdigit() and int(bits) < 8:
            width = int(bits)
            return (-(2 ** (width - 1)), 2 ** (width - 1) - 1) if signed else (0, 2**width - 1)
    if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
        raise NotImplementedError(
            f"torchao quantization to {dtype} has no integer range; only integer targets "
            "(int8, uint8, int4, ...) export"
        )
    return _bounds(dtype)


def _range(dtype, quant_min, quant_max) -> tuple[int, int]:
    lo, hi = _qbounds(dtype)
    return (
        lo if quant_min is None else int(quant_min),
        hi if quant_max is None else int(quant_max),
    )


def _grouping(ctx, input, block_size):
    """torchao's ``_get_reduction_params`` on ``input``: the sizes it is viewed as (each block
    axis split into ``[size // block, block]``), the axes reduced there, and the sizes of one
    scale per block with and without the split (``keepdim``). Sizes are ints or 1-D values
    (dynamic axes, which must have block 1)."""
    shape = ctx.shape(input)
    if shape is None or len(shape) != len(block_size):
        raise NotImplementedError(
            f"torchao's block_size {list(block_size)} does not match the input's rank "
            f"({None if shape is None else len(shape)})"
        )
    grouped, axes, per_block = [], [], []
    for i, (b, d) in enumerate(zip(block_size, shape)):
        if b == 1:
            grouped.append(S.dim_size(ctx, input, i))
            per_block.append(grouped[-1])
        elif not S.is_static(d):
            raise NotImplementedError(
                f"torchao's block_size {list(block_size)} groups dynamic axis {i} by {b}: "
                "export that axis static, or quantize with block 1 along it"
            )
        elif b == d:
            axes.append(len(grouped))
            grouped.append(d)
            per_block.append(1)
        else:
            if d % b:
                raise NotImplementedError(f"block {b} does not divide axis {i} of size {d}")
            grouped += [d // b, b]
            axes.append(len(grouped) - 1)
            per_block.append(d // b)
    return grouped, axes, per_block


def _rounded(ctx, dtype: torch.dtype):
    """A function rounding a float32 result to ``dtype`` where torch computes in ``dtype``
    (float16/bfloat16; a single operation computed in float32 and rounded once is exact), and
    the dtype to compute in."""
    work = torch.float64 if dtype == torch.float64 else torch.float32
    if dtype == work:
        return work, lambda value: value
    return work, lambda value: ctx.cast(ctx.cast(value, dtype), work)


@translates("torchao::choose_qparams_affine.default")
def choose_qparams_affine(
    ctx,
    input,
    mapping_type,
    block_size,
    target_dtype,
    quant_min=None,
    quant_max=None,
    eps=None,
    scale_dtype=None,
    zero_point_dtype=None,
    keepdim=False,
):
    """torchao's ``_choose_qparams_affine``: each block's min and max widened to hold 0; a
    symmetric scale ``max(-min, max) / ((qmax - qmin) / 2)`` (or ``SYMMETRIC_NO_CLIPPING_ERR``'s
    larger of ``min / qmin`` and ``max / qmax``) with a constant zero point, an asymmetric one
    ``(max - min) / (qmax - qmin)`` with ``clamp(qmin - round(min / scale))``; scales at least
    ``eps``. Computed in the input's dtype as torch does."""
    mapping = str(getattr(mapping_type, "name", mapping_type))
    if mapping not in ("SYMMETRIC", "SYMMETRIC_NO_CLIPPING_ERR", "ASYMMETRIC"):
        raise NotImplementedError(f"torchao choose_qparams_affine with mapping {mapping}")
    qmin, qmax = _range(target_dtype, quant_min, quant_max)
    dtype = ctx.dtype(input)
    work, rnd = _rounded(ctx, dtype)
    eps = torch.finfo(dtype).smallest_normal if eps is None else eps
    grouped, axes, per_block = _grouping(ctx, input, list(block_size))
    x = ctx.cast(input, work)
    if len(grouped) != ctx.rank(input):
        x = ctx.op.Reshape(x, S.concat_sizes(ctx, grouped))
    low, high = x, x
    if axes:
        low = R.reduce(ctx, "ReduceMin", x, axes, keepdim)
        high = R.reduce(ctx, "ReduceMax", x, axes, keepdim)
    number = lambda v: ctx.const(float(v), work)  # noqa: E731
    low, high = ctx.op.Min(low, number(0.0)), ctx.op.Max(high, number(0.0))
    zero_point = None
    if mapping == "SYMMETRIC":
        high = ctx.op.Max(ctx.op.Neg(low), high)
        scale = rnd(ctx.op.Div(high, number(float(qmax - qmin) / 2)))
    elif mapping == "SYMMETRIC_NO_CLIPPING_ERR":
        smin = rnd(ctx.op.Div(low, number(float(qmin))))
        smax = rnd(ctx.op.Div(high, number(float(qmax))))
        scale = ctx.op.Where(ctx.op.Greater(smin, smax), smin, smax)
    else:
        scale = rnd(ctx.op.Div(rnd(ctx.op.Sub(high, low)), number(float(qmax - qmin))))
    scale = rnd(ctx.op.Max(scale, number(eps)))
    if mapping == "ASYMMETRIC":
        offset = ctx.op.Round(rnd(ctx.op.Div(low, scale)))
        zero_point = rnd(ctx.op.Sub(number(float(qmin)), offset))
        zero_point = ctx.op.Clip(zero_point, number(float(qmin)), number(float(qmax)))
    if keepdim and len(grouped) != ctx.rank(input):
        per_block = S.concat_sizes(ctx, per_block)
        scale = ctx.op.Reshape(scale, per_block)
        zero_point = None if zero_point is None else ctx.op.Reshape(zero_point, per_block)
    scale_out, zp_out = (t.dtype for t in ctx.out)
    if zero_point is None:
        # torch: full_like(scale, (qmin + qmax + 1) // 2), a constant QuantizeLinear can read
        middle = ir.tensor(np.asarray([int((qmax + qmin + 1) / 2)], _dtypes.to_ir(zp_out).numpy()))
        zero_point = _typed(ctx.op.ConstantOfShape(ctx.op.Shape(scale), value=middle), zp_out)
    return ctx.cast(scale, scale_out), ctx.cast(zero_point, zp_out)


def _quantize_layout(block_size, shape, blocked: bool):
    """How QuantizeLinear takes ``block_size`` over ``shape`` (sizes may be symbolic, with
    block 1): ("tensor", None), ("channel", axis), ("block", axis) (opset 21+), ("rows",
    elements per row) where the leading axes have one scale per index and the others are
    whole, else None."""
    static = [isinstance(d, int) for d in shape]
    single = [b == 1 and not (s and d == 1) for b, d, s in zip(block_size, shape, static)]
    whole = [s and (b == d or d == 1) for b, d, s in zip(block_size, shape, static)]
    partial = [s and 1 < b < d for b, d, s in zip(block_size, shape, static)]
    if not all(w or o or p for w, o, p in zip(whole, single, partial)):
        return None
    if not any(single) and not any(partial):
        return "tensor", None
    if sum(single) == 1 and not any(partial):
        return "channel", single.index(True)
    if (
        blocked
        and sum(partial) == 1
        and all(o or p or (s and d == 1) for o, p, s, d in zip(single, partial, static, shape))
    ):
        return "block", partial.index(True)
    # rows: the leading axes one scale per index, the trailing axes whole (blocks, even of
    # consecutive elements, wait for opset 21's block_size, as the structure rule has it)
    kinds = "".join(
        "s" if o else "w" for o, w, s, d in zip(single, whole, static, shape) if not (s and d == 1)
    )
    if not any(partial) and kinds.rstrip("w").strip("s") == "":
        return "rows", math.prod(b for b in block_size if b != 1)
    return None


def _uniform(value):
    """The one value every element of ``value`` holds when the graph states it (a constant, or
    a ConstantOfShape seen through Reshape/Cast/Identity), else None."""
    array = _constant(value)
    if array is not None:
        flat = np.unique(np.asarray(array).reshape(-1))
        return flat[0].item() if flat.size == 1 else None
    while isinstance(value, ir.Value) and value.producer() is not None:
        node = value.producer()
        if node.op_type == "ConstantOfShape":
            attr = node.attributes.get("value")
            return 0 if attr is None else attr.as_tensor().numpy().reshape(-1)[0].item()
        if node.op_type not in ("Reshape", "Cast", "Identity"):
            return None
        value = node.inputs[0]
    return None


@translates("torchao::quantize_affine.default")
def quantize_affine(
    ctx, input, block_size, scale, zero_point, output_dtype, quant_min=None, quant_max=None
):
    """torchao's ``_quantize_affine``: ``clamp(round(x * (1 / scale)) + zero_point, qmin,
    qmax)`` per block, in torchao's integer storage (int8/uint8 for sub-byte types)."""
    lo, hi = _range(output_dtype, quant_min, quant_max)
    stored = ctx.out_dtype
    shape = ctx.shape(input)
    # blocked QuantizeLinear comes with opset 21
    blocked = ctx.has("QuantizeLinear-16bit")
    layout = None if shape is None else _quantize_layout(list(block_size), list(shape), blocked)
    if zero_point is not None and 0 in (ctx.static_shape(zero_point) or (1,)):
        zero_point = None  # torchao: an empty zero point is none
    zp_value = 0 if zero_point is None else _uniform(zero_point)
    narrow = _NARROW.get((lo, hi)) if ctx.has("Cast-int4") else None
    qtype = narrow or _WIDE.get(stored)
    exact = (
        layout is not None
        and qtype is not None
        and ctx.dtype(scale) == torch.float32
        and (zero_point is None or _is_int(ctx, zero_point))
        and (zp_value is None or _fits_type(zp_value, qtype))
    )
    if not exact:
        return _quantize_affine_formula(ctx, input, list(block_size), scale, zero_point, lo, hi)
    kind, where = layout
    x = ctx.cast(input, torch.float32)
    if kind == "tensor":
        scales, zp_shape = ctx.op.Reshape(scale, ctx.const([], torch.int64)), []
    elif kind in ("channel", "rows"):
        scales, zp_shape = ctx.op.Reshape(scale, ctx.const([-1], torch.int64)), [-1]
    else:
        blocks = [
            S.dim_size(ctx, input, i) if b == 1 else shape[i] // b for i, b in enumerate(block_size)
        ]
        zp_shape = S.concat_sizes(ctx, blocks)
        scales = ctx.op.Reshape(scale, zp_shape)
    if kind == "rows":
        x = ctx.op.Reshape(x, ctx.const([-1, where], torch.int64))
    attrs = {"axis": where} if kind == "channel" else {"axis": 0} if kind == "rows" else {}
    if kind == "block":
        attrs = {"axis": where, "block_size": int(block_size[where])}
    zp = _quantize_zero_point(ctx, zero_point, zp_value, scales, zp_shape, qtype, attrs)
    q = ctx.op.QuantizeLinear(*_present(x, scales, zp), **attrs)
    q.dtype = qtype
    if qtype != _WIDE[stored]:  # int4 back to torchao's storage (onnxruntime reshapes that)
        q = ctx.op.Cast(q, to=_WIDE[stored])
    if kind == "rows":
        q = ctx.op.Reshape(q, ctx.op.Shape(input))
    q = _typed(q, stored)
    wide_lo, wide_hi = _bounds(stored) if narrow is None else CODE_RANGES[narrow]
    if (lo, hi) != (wide_lo, wide_hi):
        q = _typed(ctx.op.Clip(q, ctx.const(lo, stored), ctx.const(hi, stored)), stored)
    return q


def _fits_type(value, dtype: ir.DataType) -> bool:
    lo, hi = CODE_RANGES[dtype]
    return float(value).is_integer() and lo <= value <= hi


def _quantize_zero_point(ctx, zero_point, zp_value, scales, zp_shape, qtype, attrs):
    """QuantizeLinear's zero point, of its output type: absent where it is 0 from opset 21
    (``output_dtype`` names the type), a constant or a ConstantOfShape like the scales where
    it is one number, else the values cast."""
    if zp_value is not None:
        if zp_value == 0 and ctx.has("QuantizeLinear-16bit"):
            attrs["output_dtype"] = int(qtype)
            return None
        if not zp_shape:
            signed = qtype in (ir.DataType.INT4, ir.DataType.INT8)
            return _int_tensor(
                ctx, np.asarray(int(zp_value), np.int8 if signed else np.uint8), qtype
            )
        wide = (
            ir.DataType.INT8 if qtype in (ir.DataType.INT4, ir.DataType.INT8) else ir.DataType.UINT8
        )
        fill = ir.tensor(np.asarray([int(zp_value)], wide.numpy()))
        zp = ctx.op.ConstantOfShape(ctx.op.Shape(scales), value=fill)
        zp.dtype = wide
        if wide != qtype:
            zp = ctx.op.Cast(zp, to=qtype)
            zp.dtype = qtype
        return zp
    shape = ctx.const(zp_shape, torch.int64) if isinstance(zp_shape, list) else zp_shape
    zp = ctx.op.Cast(ctx.op.Reshape(zero_point, shape), to=qtype)
    zp.dtype = qtype
    return zp


def _quantize_affine_formula(ctx, input, block_size, scale, zero_point, lo, hi):
    """torchao's ``_quantize_affine_no_dtype_cast`` as written: ``x * (1.0 / scale)`` in the
    promoted float dtype, rounded, the zero point added, clamped, then cast to the storage."""
    grouped, _, _ = _grouping(ctx, input, block_size)
    after = []
    for i, (b, d) in enumerate(zip(block_size, ctx.shape(input))):
        if b == 1:
            after.append(S.dim_size(ctx, input, i))
        elif b == d:
            after.append(1)
        else:
            after += [d // b, 1]
    after = S.concat_sizes(ctx, after)
    scale_dtype = ctx.dtype(scale)
    work_dtype = torch.promote_types(ctx.dtype(input), scale_dtype)
    if zero_point is not None and ctx.dtype(zero_point).is_floating_point:
        work_dtype = torch.promote_types(work_dtype, ctx.dtype(zero_point))
    _, rnd_scale = _rounded(ctx, scale_dtype)
    work, rnd = _rounded(ctx, work_dtype)
    x = ctx.op.Reshape(ctx.cast(input, work), S.concat_sizes(ctx, grouped))
    inverse = rnd_scale(ctx.op.Div(ctx.const(1.0, work), ctx.cast(scale, work)))
    codes = ctx.op.Round(rnd(ctx.op.Mul(x, ctx.op.Reshape(inverse, after))))
    if zero_point is not None:
        codes = rnd(ctx.op.Add(codes, ctx.op.Reshape(ctx.cast(zero_point, work), after)))
    codes = ctx.op.Clip(codes, ctx.const(float(lo), work), ctx.const(float(hi), work))
    codes = ctx.op.Reshape(codes, ctx.op.Shape(input))
    return ctx.cast(codes, ctx.out_dtype)


@translates(torch.ops.aten._int_mm.default)
def int_mm(ctx, self, mat2):
    """An integer matmul with int32 accumulation: MatMulInteger (uint8/int8 operands)."""
    return _typed(ctx.op.MatMulInteger(self, mat2), torch.int32)
