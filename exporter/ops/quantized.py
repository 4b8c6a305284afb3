"""Dequantization ops of torch's ``quantized_decomposed`` library (PT2E quantization, and
quantized checkpoints in transformers): integer values with a scale and zero point become
floats.

The ops are registered by qualified name: their library exists only once
``torch.ao.quantization.fx._decomposed`` is imported, which the exporter never does itself.
Each step computes in the dtype torch's reference kernel does, integer subtraction wrapping
as it does there, rather than in ``DequantizeLinear``, which neither wraps nor takes the
wider zero points and float64 scales these ops allow.
"""

from __future__ import annotations

import torch

from exporter.ops._kernels import call
from exporter.ops._registry import translates


def _binary(ctx, op_type, x, y):
    dtype = ctx.result_type(x, y)
    return call(ctx, op_type, *ctx.promote(x, y, dtype=dtype), _dtype=dtype)


def _along(ctx, values, axis, rank):
    """A 1-D per-channel ``values`` shaped to broadcast along ``axis`` of a rank-``rank``
    tensor."""
    shape = [1] * rank
    shape[axis] = -1
    return ctx.op.Reshape(values, shape)


@translates("quantized_decomposed::dequantize_per_channel.default")
def dequantize_per_channel(
    ctx, input, scales, zero_points, axis, quant_min, quant_max, dtype, *, out_dtype=None
):
    rank = ctx.rank(input)
    axis = axis % rank
    shifted = input
    if zero_points is not None:
        shifted = _binary(ctx, "Sub", input, _along(ctx, zero_points, axis, rank))
    scaled = _binary(ctx, "Mul", shifted, _along(ctx, scales, axis, rank))
    return ctx.cast(scaled, ctx.out_dtype)


@translates(
    "quantized_decomposed::dequantize_per_tensor.default",
    "quantized_decomposed::dequantize_per_tensor.tensor",
    "quantized_decomposed::dequantize_per_tensor.tensor2",
)
def dequantize_per_tensor(
    ctx, input, scale, zero_point, quant_min, quant_max, dtype, *, out_dtype=None
):
    # torch's kernel converts to the output dtype first, then shifts and scales there.
    converted = ctx.cast(input, out_dtype or torch.float32)
    return ctx.cast(
        _binary(ctx, "Mul", _binary(ctx, "Sub", converted, zero_point), scale), ctx.out_dtype
    )


@translates("quantized_decomposed::dequantize_per_token.default")
def dequantize_per_token(
    ctx, input, scales, zero_points, quant_min, quant_max, dtype, output_dtype
):
    shifted = _binary(ctx, "Sub", input, zero_points)
    return ctx.cast(_binary(ctx, "Mul", shifted, scales), ctx.out_dtype)
