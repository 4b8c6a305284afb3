"""``aten.hash_tensor``: the XOR of the 64-bit patterns of the values, as uint64.

ATen widens each value to 64 bits first (floats to float64, integers and bool to int64) and
XORs the bit patterns. ONNX has no XOR reduction, and below opset 26 no bit reinterpretation
(BitCast) either, so the patterns there are built from exact arithmetic too:

* a float64's pattern is rebuilt from its sign, exponent and significand, each computed
  exactly (scaling by a power of two and subtracting 1 lose nothing); zeros keep their sign,
  subnormals and infinities get their IEEE encoding. NaN is the one value whose pattern is
  not observable with arithmetic: every NaN hashes as the positive quiet NaN (0x7FF8...), which
  is what ``float("nan")`` and torch's NaN constants are, but not a NaN of another sign or
  payload (such as the negative NaN that x86 produces for ``0 / 0``).
* the XOR reduction is a parity per bit: the 64 bits of every value are split into planes,
  summed over the reduced dimensions, taken modulo 2 and put back together.
"""

from __future__ import annotations

import math

import onnx_ir as ir
import torch

from torch_onnx_conformance.exporter.ops import _reduce as R
from torch_onnx_conformance.exporter.ops._registry import translates

aten = torch.ops.aten
i64 = torch.int64
f64 = torch.float64

#: The bit pattern of the positive quiet NaN, as an int64.
_QUIET_NAN = 0x7FF8 << 48
_EXPONENT_BIAS = 1023
_SIGNIFICAND_BITS = 52
_SMALLEST_NORMAL_EXPONENT = -1022


def _float64_bits(ctx, x: ir.Value) -> ir.Value:
    """The IEEE-754 bit pattern of float64 ``x`` as int64 (two's complement)."""
    if ctx.has("BitCast"):
        return ctx.op.BitCast(x, to=ir.DataType.INT64)
    zero = ctx.const(0.0, f64)
    one = ctx.const(1.0, f64)
    magnitude = ctx.op.Abs(x)
    is_nan = ctx.op.IsNaN(x)
    is_inf = ctx.op.IsInf(x)
    is_zero = ctx.op.Equal(magnitude, zero)
    # -0.0 compares equal to 0.0; its reciprocal is -inf.
    negative = ctx.op.Or(
        ctx.op.Less(x, zero), ctx.op.And(is_zero, ctx.op.Less(ctx.op.Div(one, x), zero))
    )
    special = ctx.op.Or(ctx.op.Or(is_nan, is_inf), is_zero)
    finite = ctx.op.Where(special, one, magnitude)

    # log2 is only a first guess; the exact power of two is then checked on both sides.
    two = ctx.const(2.0, f64)
    exponent = ctx.op.Floor(ctx.op.Div(ctx.op.Log(finite), ctx.const(math.log(2.0), f64)))
    exponent = ctx.op.Clip(exponent, ctx.const(-1074.0, f64), ctx.const(1023.0, f64))
    power = ctx.op.Pow(two, exponent)
    exponent = ctx.op.Sub(exponent, ctx.cast(ctx.op.Less(finite, power), f64))
    power = ctx.op.Pow(two, exponent)
    exponent = ctx.op.Add(
        exponent, ctx.cast(ctx.op.GreaterOrEqual(finite, ctx.op.Mul(power, two)), f64)
    )
    power = ctx.op.Pow(two, exponent)

    normal = ctx.op.GreaterOrEqual(exponent, ctx.const(float(_SMALLEST_NORMAL_EXPONENT), f64))
    scale = ctx.const(float(2**_SIGNIFICAND_BITS), f64)
    normal_fraction = ctx.op.Mul(ctx.op.Sub(ctx.op.Div(finite, power), one), scale)
    # A subnormal's significand is the value in units of 2**-1074, applied in two exact steps
    # because 2**1074 itself overflows float64.
    half_scale = ctx.const(float(2**537), f64)
    subnormal_fraction = ctx.op.Mul(ctx.op.Mul(finite, half_scale), half_scale)
    fraction = ctx.cast(ctx.op.Where(normal, normal_fraction, subnormal_fraction), i64)
    biased = ctx.op.Where(
        normal,
        ctx.op.Add(ctx.cast(exponent, i64), ctx.const(_EXPONENT_BIAS, i64)),
        ctx.const(0, i64),
    )
    bits = ctx.op.Add(ctx.op.Mul(biased, ctx.const(2**_SIGNIFICAND_BITS, i64)), fraction)
    bits = ctx.op.Where(is_zero, ctx.const(0, i64), bits)
    bits = ctx.op.Where(is_inf, ctx.const(0x7FF << _SIGNIFICAND_BITS, i64), bits)
    sign = ctx.op.Where(negative, ctx.const(-(2**63), i64), ctx.const(0, i64))
    bits = ctx.op.Add(bits, sign)
    return ctx.op.Where(is_nan, ctx.const(_QUIET_NAN, i64), bits)


def _xor_reduce(ctx, bits: ir.Value, axes: list[int] | None, keepdim: bool, rank: int):
    """XOR of int64 ``bits`` over ``axes`` (None: all), as int64 with the same bit pattern."""
    planes = ctx.cast(ctx.op.Unsqueeze(bits, ctx.const([rank], i64)), torch.uint64)
    # Plane k: shift bit k to the top, then down to the bottom (BitShift is uint-only).
    up = ctx.const([63 - k for k in range(64)], torch.uint64)
    planes = ctx.op.BitShift(
        ctx.op.BitShift(planes, up, direction="LEFT"),
        ctx.const(63, torch.uint64),
        direction="RIGHT",
    )
    planes = ctx.cast(planes, i64)
    plane_axis = 0
    if rank > 0:
        reduced = list(range(rank)) if axes is None else axes
        planes = R.reduce(ctx, "ReduceSum", planes, reduced, keepdim)
        plane_axis = rank if keepdim else rank - len(reduced)
    parity = ctx.op.Mod(planes, ctx.const(2, i64))
    # Reassemble 32 bits at a time: onnxruntime's int64 ReduceSum is only exact below 2**53.
    halves = []
    for start in (0, 32):
        bits = ctx.op.Slice(
            parity, ctx.const([start], i64), ctx.const([start + 32], i64), ctx.const([-1], i64)
        )
        weights = ctx.const([2**k for k in range(32)], i64)
        halves.append(R.reduce(ctx, "ReduceSum", ctx.op.Mul(bits, weights), [plane_axis], False))
    low, high = halves
    high = ctx.op.BitShift(
        ctx.cast(high, torch.uint64), ctx.const(32, torch.uint64), direction="LEFT"
    )
    # The halves share no bits, so adding them (after a wrapping cast) cannot carry.
    return ctx.op.Add(ctx.cast(high, i64), low)


@translates(aten.hash_tensor.default)
def hash_tensor(ctx, self, dim=(), *, keepdim=False, mode=0):
    if mode != 0:
        raise NotImplementedError(
            f"hash_tensor mode {mode} is not supported: only mode 0 (XOR of the bit patterns)"
        )
    dtype = ctx.dtype(self)
    if dtype.is_complex:
        raise NotImplementedError("hash_tensor of complex tensors is not supported")
    if dtype.is_floating_point:
        bits = _float64_bits(ctx, ctx.cast(self, f64))
    else:
        bits = ctx.cast(self, i64)
    rank = ctx.rank(self)
    return ctx.cast(_xor_reduce(ctx, bits, R.reduce_axes(dim, rank), keepdim, rank), torch.uint64)
