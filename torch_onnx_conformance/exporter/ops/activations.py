"""Activation functions, kept whole as one ONNX op where ONNX has one.

softsign and tanhshrink have no ATen op of their own (torch writes them with abs/div/tanh).

An ONNX activation op (Gelu, HardSwish, Mish, ...) is used when onnxruntime has a kernel for
the input dtype (float32/float16); otherwise, and where the ONNX op's semantics differ from
torch's (nan handling of the shrink functions, elu's extra scales), the translation spells the
function out, computing float16 in float32 like torch does.
"""

from __future__ import annotations

import onnx_ir as ir
import torch

from torch_onnx_conformance.exporter.ops import _formulas as F
from torch_onnx_conformance.exporter.ops import _kernels, random
from torch_onnx_conformance.exporter.ops import _shape as S
from torch_onnx_conformance.exporter.ops._kernels import call
from torch_onnx_conformance.exporter.ops._registry import translates

aten = torch.ops.aten

# torch.nn.functional.selu's constants (onnx's Selu defaults are these rounded to float32).
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _has_kernel(ctx, op_type: str, x: ir.Value) -> bool:
    return ctx.dtype(x) in _kernels.SUPPORTED[op_type]


def _in_opmath(ctx, x: ir.Value, formula) -> ir.Value:
    """Apply ``formula(ctx, x)`` in torch's compute dtype for x and cast back."""
    dtype = ctx.dtype(x)
    inner = ctx.cast(x, _kernels.opmath_dtype(dtype))
    return ctx.cast(formula(ctx, inner), dtype)


@translates(aten.relu.default)
def relu(ctx, self):
    dtype = ctx.dtype(self)
    if dtype in _kernels.SUPPORTED["Relu"] or dtype.is_floating_point:
        return call(ctx, "Relu", self)
    return call(ctx, "Max", self, ctx.scalar_like(0, self))  # int64 and friends


@translates(aten.hardtanh.default)
def hardtanh(ctx, self, min_val=-1, max_val=1):
    return call(ctx, "Clip", self, ctx.scalar_like(min_val, self), ctx.scalar_like(max_val, self))


@translates(aten.relu6.default)
def relu6(ctx, self):
    return hardtanh(ctx, self, 0, 6)


@translates(aten.leaky_relu.default)
def leaky_relu(ctx, self, negative_slope=0.01):
    if _has_kernel(ctx, "LeakyRelu", self):
        return ctx.op.LeakyRelu(self, alpha=float(negative_slope))
    return _in_opmath(ctx, self, lambda ctx, x: _leaky(ctx, x, F.c(ctx, negative_slope, x)))


def _leaky(ctx, x: ir.Value, slope: ir.Value) -> ir.Value:
    return ctx.op.Where(ctx.op.Greater(x, F.c(ctx, 0, x)), x, ctx.op.Mul(x, slope))


@translates(aten.elu.default)
def elu(ctx, self, alpha=1, scale=1, input_scale=1):
    if scale == 1 and input_scale == 1 and _has_kernel(ctx, "Elu", self):
        return ctx.op.Elu(self, alpha=float(alpha))

    def formula(ctx, x):
        negative = ctx.op.Mul(
            F.expm1(ctx, ctx.op.Mul(x, F.c(ctx, input_scale, x))), F.c(ctx, alpha * scale, x)
        )
        positive = ctx.op.Mul(x, F.c(ctx, scale, x))
        return ctx.op.Where(ctx.op.Greater(x, F.c(ctx, 0, x)), positive, negative)

    return _in_opmath(ctx, self, formula)


@translates(aten.selu.default)
def selu(ctx, self):
    if _has_kernel(ctx, "Selu", self):
        return ctx.op.Selu(self, alpha=SELU_ALPHA, gamma=SELU_SCALE)
    return elu(ctx, self, SELU_ALPHA, SELU_SCALE, 1)


@translates(aten.celu.default)
def celu(ctx, self, alpha=1.0):
    if _has_kernel(ctx, "Celu", self):
        return ctx.op.Celu(self, alpha=float(alpha))
    return elu(ctx, self, alpha, 1, 1 / alpha)


@translates(aten.gelu.default)
def gelu(ctx, self, *, approximate="none"):
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu approximate must be 'none' or 'tanh', got {approximate!r}")
    if ctx.has("Gelu") and _has_kernel(ctx, "Gelu", self):
        return ctx.op.Gelu(self, approximate=approximate)
    return _in_opmath(ctx, self, lambda ctx, x: F.gelu(ctx, x, approximate))


@translates(aten.silu.default)
def silu(ctx, self):
    return _in_opmath(ctx, self, lambda ctx, x: ctx.op.Mul(x, call(ctx, "Sigmoid", x)))


@translates(aten.hardswish.default)
def hardswish(ctx, self):
    if _has_kernel(ctx, "HardSwish", self):
        return ctx.op.HardSwish(self)
    return _in_opmath(ctx, self, lambda ctx, x: ctx.op.Mul(x, _hardsigmoid(ctx, x)))


@translates(aten.hardsigmoid.default)
def hardsigmoid(ctx, self):
    if _has_kernel(ctx, "HardSigmoid", self):
        return ctx.op.HardSigmoid(self, alpha=1 / 6, beta=0.5)
    return _in_opmath(ctx, self, _hardsigmoid)


def _hardsigmoid(ctx, x: ir.Value) -> ir.Value:
    shifted = ctx.op.Div(ctx.op.Add(x, F.c(ctx, 3, x)), F.c(ctx, 6, x))
    return ctx.op.Clip(shifted, F.c(ctx, 0, x), F.c(ctx, 1, x))


@translates(aten.mish.default)
def mish(ctx, self):
    if ctx.has("Mish") and _has_kernel(ctx, "Mish", self):
        return ctx.op.Mish(self)
    return _in_opmath(
        ctx, self, lambda ctx, x: ctx.op.Mul(x, call(ctx, "Tanh", F.softplus(ctx, x)))
    )


@translates(aten.softplus.default)
def softplus(ctx, self, beta=1, threshold=20):
    def formula(ctx, x):
        scaled = x if beta == 1 else ctx.op.Mul(x, F.c(ctx, beta, x))
        smooth = F.softplus(ctx, scaled)
        if beta != 1:
            smooth = ctx.op.Div(smooth, F.c(ctx, beta, x))
        # Above the threshold torch returns x itself (softplus(x) == x in float there).
        return ctx.op.Where(ctx.op.Greater(scaled, F.c(ctx, threshold, x)), x, smooth)

    return _in_opmath(ctx, self, formula)


@translates(aten.softshrink.default)
def softshrink(ctx, self, lambd=0.5):
    # x - clamp(x, -l, l) is softshrink and keeps nan (onnx Shrink maps nan to 0).
    def formula(ctx, x):
        clipped = ctx.op.Clip(x, F.c(ctx, -lambd, x), F.c(ctx, lambd, x))
        return ctx.op.Sub(x, clipped)

    return _in_opmath(ctx, self, formula)


@translates(aten.hardshrink.default)
def hardshrink(ctx, self, lambd=0.5):
    def formula(ctx, x):
        inside = ctx.op.LessOrEqual(ctx.op.Abs(x), F.c(ctx, lambd, x))
        return ctx.op.Where(inside, F.c(ctx, 0, x), x)

    return _in_opmath(ctx, self, formula)


@translates(aten.threshold.default)
def threshold(ctx, self, threshold, value):
    # torch replaces x <= threshold, so nan passes through.
    replaced = call(ctx, "LessOrEqual", self, ctx.scalar_like(threshold, self))
    return call(ctx, "Where", replaced, ctx.scalar_like(value, self), self, _dtype=ctx.dtype(self))


@translates(aten.prelu.default)
def prelu(ctx, self, weight):
    rank = ctx.rank(self)
    weight_shape = ctx.shape(weight)
    if rank is not None and rank >= 2 and weight_shape not in ((), (1,)):
        # One slope per channel (dim 1): [C] -> [C, 1, ..., 1] broadcasts against [N, C, ...].
        weight = ctx.op.Reshape(weight, [-1] + [1] * (rank - 2))
    elif rank == 0:
        weight = ctx.op.Reshape(weight, [])  # a 0-d input keeps its 0-d shape
    return _prelu(ctx, self, weight)


@translates(aten._prelu_kernel.default)
def prelu_kernel(ctx, self, weight):
    return _prelu(ctx, self, weight)


def _prelu(ctx, x: ir.Value, weight: ir.Value) -> ir.Value:
    if _has_kernel(ctx, "PRelu", x) and ctx.dtype(weight) == ctx.dtype(x):
        return ctx.op.PRelu(x, weight)
    dtype = ctx.out_dtype
    x, w = ctx.promote(x, weight, dtype=_kernels.opmath_dtype(dtype))
    return ctx.cast(_leaky(ctx, x, w), dtype)


@translates(aten.rrelu.default)
def rrelu(ctx, self, lower=0.125, upper=1 / 3, training=False, generator=None):
    return _rrelu(ctx, self, lower, upper, training)


@translates(aten.rrelu_with_noise.default)
def rrelu_with_noise(ctx, self, noise, lower=0.125, upper=1 / 3, training=False, generator=None):
    return _rrelu(ctx, self, lower, upper, training)


@translates(aten.rrelu_with_noise_functional.default)
def rrelu_with_noise_functional(
    ctx, self, noise, lower=0.125, upper=1 / 3, training=False, generator=None
):
    out, slope = _rrelu(ctx, self, lower, upper, training, with_slope=True)
    # The noise output records the slope used per element (1 where x >= 0), like torch.
    return out, slope


def _rrelu(ctx, x: ir.Value, lower, upper, training: bool, with_slope: bool = False):
    dtype = ctx.dtype(x)
    compute = _kernels.opmath_dtype(dtype)
    inner = ctx.cast(x, compute)
    if training:
        # A fresh slope per element, uniform in [lower, upper), for negative inputs.
        slope = random.uniform_like(ctx, inner, compute, low=lower, high=upper)
    else:
        slope = F.c(ctx, (lower + upper) / 2, inner)
    out = ctx.cast(_leaky(ctx, inner, slope), dtype)
    if not with_slope:
        return out
    one = F.c(ctx, 1, inner)
    slope = ctx.op.Expand(slope, ctx.op.Shape(inner))
    used = ctx.op.Where(ctx.op.Greater(inner, F.c(ctx, 0, inner)), one, slope)
    return out, ctx.cast(used, dtype)


@translates(aten.glu.default)
def glu(ctx, self, dim=-1):
    rank = ctx.rank(self)
    axis = S.axis(dim, rank)
    size = ctx.shape(self)[axis]
    if isinstance(size, int):
        half = ctx.const([size // 2], torch.int64)
    else:
        half = ctx.op.Div(ctx.op.Shape(self, start=axis, end=axis + 1), ctx.const(2, torch.int64))
    dtype = ctx.dtype(self)
    compute = _kernels.opmath_dtype(dtype)
    first = ctx.cast(ctx.op.Slice(self, [0], half, [axis]), compute)
    second = ctx.cast(ctx.op.Slice(self, half, [torch.iinfo(torch.int64).max], [axis]), compute)
    return ctx.cast(ctx.op.Mul(first, call(ctx, "Sigmoid", second)), dtype)


@translates(aten.log_sigmoid.default)
def log_sigmoid(ctx, self):
    return _in_opmath(ctx, self, lambda ctx, x: _log_sigmoid(ctx, x)[0])


@translates(aten.log_sigmoid_forward.default)
def log_sigmoid_forward(ctx, self):
    dtype = ctx.dtype(self)
    x = ctx.cast(self, _kernels.opmath_dtype(dtype))
    out, buffer = _log_sigmoid(ctx, x)
    return ctx.cast(out, dtype), ctx.cast(buffer, dtype)


def _log_sigmoid(ctx, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    # log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)); torch's buffer is exp(-|x|).
    buffer = ctx.op.Exp(ctx.op.Neg(ctx.op.Abs(x)))
    out = ctx.op.Sub(ctx.op.Min(x, F.c(ctx, 0, x)), F.log1p(ctx, buffer))
    return out, buffer
