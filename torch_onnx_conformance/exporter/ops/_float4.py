"""float4 pairs and their bytes: ``tensor.view(torch.uint8)`` of a float4_e2m1fn_x2 tensor
and back, in ONNX (opset 23 on), where a float4 tensor is FLOAT4E2M1 of the unpacked shape.

ONNX's BitCast needs equal bit widths, so the bytes are computed: a value's 4-bit code is
its sign (bit 3) and the index of its magnitude among the eight E2M1 magnitudes (bits 0-2);
the first value of a pair is the byte's low nibble, as in torch and ONNX. Every float4 value
is exact in float32, so the round trip is exact.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import onnx_ir as ir
import torch

if TYPE_CHECKING:
    from torch_onnx_conformance.exporter.ops._context import TranslationContext

#: The E2M1 value of each 4-bit code (codes 8-15 are 0-7 negated; -0.0 included).
_VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
_TABLE = _VALUES + [-v for v in _VALUES]


def from_bytes(ctx: TranslationContext, data: ir.Value) -> ir.Value:
    """uint8 ``[..., n]`` -> FLOAT4E2M1 ``[..., 2n]``: each byte's low nibble, then its high."""
    rank = ctx.rank(data)
    last = ctx.const([-1], torch.int64)
    low = ctx.op.BitwiseAnd(data, ctx.const(15, torch.uint8))
    high = ctx.op.BitShift(data, ctx.const(4, torch.uint8), direction="RIGHT")
    pairs = ctx.op.Concat(ctx.op.Unsqueeze(low, last), ctx.op.Unsqueeze(high, last), axis=-1)
    codes = ctx.op.Reshape(pairs, ctx.const([0] * (rank - 1) + [-1], torch.int64))
    values = ctx.op.Gather(
        ctx.const(_TABLE, torch.float32), ctx.op.Cast(codes, to=ir.DataType.INT64)
    )
    return ctx.op.Cast(values, to=ir.DataType.FLOAT4E2M1)


def to_bytes(ctx: TranslationContext, value: ir.Value) -> ir.Value:
    """FLOAT4E2M1 ``[..., 2n]`` -> uint8 ``[..., n]``: pairs of codes, the first low."""
    rank = ctx.rank(value)
    last = ctx.const([-1], torch.int64)
    real = ctx.op.Cast(value, to=ir.DataType.FLOAT)
    # 1/x keeps the sign of -0.0, which compares equal to 0.0
    negative = ctx.op.Less(ctx.op.Reciprocal(real), ctx.const(0.0, torch.float32))
    magnitude = ctx.op.Unsqueeze(ctx.op.Abs(real), last)
    above = ctx.op.GreaterOrEqual(magnitude, ctx.const(_VALUES[1:], torch.float32))
    index = ctx.op.ReduceSum(ctx.op.Cast(above, to=ir.DataType.INT64), last, keepdims=0)
    sign = ctx.op.Mul(ctx.op.Cast(negative, to=ir.DataType.INT64), ctx.const(8, torch.int64))
    codes = ctx.op.Add(index, sign)
    pairs = ctx.op.Reshape(codes, ctx.const([0] * (rank - 1) + [-1, 2], torch.int64))
    low = ctx.op.Gather(pairs, ctx.const(0, torch.int64), axis=-1)
    high = ctx.op.Gather(pairs, ctx.const(1, torch.int64), axis=-1)
    packed = ctx.op.Add(low, ctx.op.Mul(high, ctx.const(16, torch.int64)))
    return ctx.op.Cast(packed, to=ir.DataType.UINT8)
