"""Random sampling: rand/randn/randint(_like), randperm, bernoulli, multinomial, normal,
uniform, exponential, log_normal, cauchy, geometric and random_.

ONNX's random generators (RandomUniform(Like), RandomNormal(Like), Multinomial) draw floats;
other distributions are inverse-CDF transforms of uniform draws. Values cannot match torch's
generator, only the distribution, shape and dtype: ``generator`` arguments are accepted and
ignored. Dropout lives with the other layers in nn.py.

Which generator: onnxruntime's CPU provider has kernels for the generators' opset-1 (Multinomial:
opset-7) revisions only; their opset-22 revisions (which added bfloat16) have none, and a model
has one opset, so from opset 22 on (``_kernels.NO_KERNEL_FROM``) the draws come from a
counter-based generator built of integer ops it does run:

- the seed: 63 random bits, the mask of one training-mode ``Dropout`` (ratio 0.5) over 63 ones.
  onnxruntime's Dropout draws from its process-wide generator, so, like RandomUniform without a
  ``seed`` attribute, every run of the model (and every random op in it) gets fresh numbers;
- the stream: SplitMix64 over the element index, ``mix(seed + (index * streams + k) * gamma)``
  (uint64 Mul/Add/BitShift/BitwiseXor, which wrap modulo 2**64), the top 24 (float32) or 53
  (float64) bits of each word scaled into [0, 1);
- normal draws: Box-Muller over two streams; the rest are the same transforms as below.

``COUNTER_KERNELS`` lists every op and dtype the generator uses, so a test can check each against
onnxruntime's kernel list at every opset.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx_ir as ir
import torch

from torch_onnx_conformance.exporter import _dtypes
from torch_onnx_conformance.exporter.ops import _kernels
from torch_onnx_conformance.exporter.ops import _shape as S
from torch_onnx_conformance.exporter.ops._registry import translates

aten = torch.ops.aten
i64 = torch.int64


def _draw_dtype(dtype: torch.dtype) -> torch.dtype:
    """The float dtype ONNX random ops draw in (they have float16/float/double only)."""
    return torch.float64 if dtype is torch.float64 else torch.float32


def _shape_value(ctx, size: Any) -> ir.Value:
    return ctx.ints(size)


def _native(ctx, op_type: str) -> bool:
    """Whether onnxruntime runs ONNX's own ``op_type`` generator at the target opset."""
    return _kernels.has_kernel(op_type, opset=ctx.opset)


def _like(ctx, op_type: str, like: ir.Value, dtype: torch.dtype, **attributes) -> ir.Value:
    """RandomUniformLike/RandomNormalLike shaped like ``like``, drawn in ``dtype``."""
    if not _native(ctx, op_type):
        return _counter_draw(ctx, op_type, ctx.op.Shape(like), dtype, **attributes)
    out = getattr(ctx.op, op_type)(like, dtype=_dtypes.to_ir(dtype), **attributes)
    out.dtype = _dtypes.to_ir(dtype)
    return out


def _sized(ctx, op_type: str, size: Any, dtype: torch.dtype, **attributes) -> ir.Value:
    """A draw of a given size: one RandomUniform/RandomNormal when static, else via a shape."""
    if not _native(ctx, op_type):
        return _counter_draw(ctx, op_type, _shape_value(ctx, size), dtype, **attributes)
    if isinstance(size, ir.Value) or not all(isinstance(d, int) for d in size):
        zeros = S.constant_of_shape(ctx, _shape_value(ctx, size), 0, dtype)
        return _like(ctx, op_type + "Like", zeros, dtype, **attributes)
    out = getattr(ctx.op, op_type)(
        dtype=_dtypes.to_ir(dtype), shape=[int(d) for d in size], **attributes
    )
    out.dtype = _dtypes.to_ir(dtype)
    return out


# ------------------------------------------------------------- the counter-based generator
u64 = torch.uint64
#: SplitMix64's increment (2**64 / golden ratio) and its two finaliser multipliers.
_GAMMA = 0x9E3779B97F4A7C15
_MIX = ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB), (31, None))
#: Random bits in a seed: one Dropout mask bit each, summed as int64 powers of two.
_SEED_BITS = 63
#: (op, dtypes) of every node the counter-based generator and its transforms add.
COUNTER_KERNELS: dict[str, tuple[torch.dtype, ...]] = {
    "Dropout": (torch.float32,),
    "ConstantOfShape": (torch.float32,),
    "ReduceSum": (i64,),
    "ReduceProd": (i64,),
    "Range": (i64,),
    "Reshape": (i64,),
    "Shape": (torch.float32, torch.float64, i64),
    "Cast": (torch.bool, i64, u64),
    "Mul": (u64, torch.float32, torch.float64, i64),
    "Add": (u64, torch.float32, torch.float64),
    "BitShift": (u64,),
    "BitwiseXor": (u64,),
    "Log": (torch.float32, torch.float64),
    "Sqrt": (torch.float32, torch.float64),
    "Cos": (torch.float32, torch.float64),
    # multinomial with replacement (inverse CDF)
    "CumSum": (torch.float32,),
    "Gather": (torch.float32,),
    "Concat": (i64,),
    "Unsqueeze": (torch.float32,),
    "LessOrEqual": (torch.float32,),
    "Min": (i64,),
    "Sub": (i64,),
}


def _seed(ctx) -> ir.Value:
    """A fresh uint64 seed per run: the mask of a training-mode Dropout over ones."""
    ones = ctx.op.ConstantOfShape(
        ctx.const([_SEED_BITS], i64), value=ir.tensor(np.ones(1, np.float32))
    )
    ones.dtype = ir.DataType.FLOAT
    _, mask = ctx.op.Dropout(
        ones, ctx.const(0.5, torch.float32), ctx.const(True, torch.bool), _outputs=2
    )
    mask.dtype = ir.DataType.BOOL
    weights = ctx.const([1 << k for k in range(_SEED_BITS)], i64)
    bits = ctx.op.ReduceSum(ctx.op.Mul(ctx.cast(mask, i64), weights), keepdims=0)
    bits.dtype = ir.DataType.INT64
    return ctx.cast(bits, u64)


def _random_words(ctx, shape: ir.Value, streams: int = 1) -> list[ir.Value]:
    """``streams`` tensors of independent uniformly random uint64 words shaped ``shape``."""
    count = ctx.op.ReduceProd(shape, keepdims=0)
    count.dtype = ir.DataType.INT64
    index = ctx.op.Range(ctx.const(0, i64), count, ctx.const(1, i64))
    index.dtype = ir.DataType.INT64
    # allowzero: a 0 in the shape is an empty dimension, not "copy the input's".
    index = ctx.cast(S.reshape(ctx, index, shape, allowzero=True), u64)
    seed = _seed(ctx)
    words = []
    for k in range(streams):
        # index * streams + k, without the multiplication by 1 or the addition of 0 that
        # the optimizer would remove (a removal costs it a second round over the graph)
        counter = ctx.op.Mul(index, ctx.const(streams, u64)) if streams > 1 else index
        if k:
            counter = ctx.op.Add(counter, ctx.const(k, u64))
        z = ctx.op.Add(seed, ctx.op.Mul(counter, ctx.const(_GAMMA, u64)))
        for shift, multiplier in _MIX:
            z = ctx.op.BitwiseXor(z, ctx.op.BitShift(z, ctx.const(shift, u64), direction="RIGHT"))
            if multiplier is not None:
                z = ctx.op.Mul(z, ctx.const(multiplier, u64))
        z.dtype = ir.DataType.UINT64
        words.append(z)
    return words


def _unit(ctx, word: ir.Value, dtype: torch.dtype, *, open_low: bool = False) -> ir.Value:
    """A uniform float in [0, 1) from a random word's top bits (its mantissa's worth); in
    (0, 1) with ``open_low`` (half a step up, so logarithms stay finite)."""
    bits = 53 if dtype is torch.float64 else 24
    top = ctx.cast(ctx.op.BitShift(word, ctx.const(64 - bits, u64), direction="RIGHT"), dtype)
    if open_low:
        top = ctx.op.Add(top, ctx.const(0.5, dtype))
    return ctx.op.Mul(top, ctx.const(2.0**-bits, dtype))


def _counter_draw(ctx, op_type: str, shape: ir.Value, dtype: torch.dtype, **attributes):
    """RandomUniform(Like)/RandomNormal(Like) with the same attributes, from the counter-based
    generator."""
    if op_type.startswith("RandomUniform"):
        low, high = float(attributes.get("low", 0.0)), float(attributes.get("high", 1.0))
        (word,) = _random_words(ctx, shape)
        u = _unit(ctx, word, dtype)
        if (low, high) == (0.0, 1.0):
            return u
        return ctx.op.Add(ctx.const(low, dtype), ctx.op.Mul(u, ctx.const(high - low, dtype)))
    mean, scale = float(attributes.get("mean", 0.0)), float(attributes.get("scale", 1.0))
    first, second = _random_words(ctx, shape, streams=2)
    # Box-Muller: sqrt(-2 log u1) cos(2 pi u2) is standard normal for independent uniforms.
    radius = ctx.op.Sqrt(
        ctx.op.Mul(ctx.const(-2.0, dtype), ctx.op.Log(_unit(ctx, first, dtype, open_low=True)))
    )
    angle = ctx.op.Mul(_unit(ctx, second, dtype), ctx.const(2 * math.pi, dtype))
    noise = ctx.op.Mul(radius, ctx.op.Cos(angle))
    if (mean, scale) == (0.0, 1.0):
        return noise
    return ctx.op.Add(ctx.const(mean, dtype), ctx.op.Mul(noise, ctx.const(scale, dtype)))


def uniform_like(ctx, like: ir.Value, dtype: torch.dtype, low=0.0, high=1.0) -> ir.Value:
    """Uniform draws in [low, high) shaped like ``like``, in ``dtype`` (float32 or float64),
    from whichever generator onnxruntime runs at the target opset."""
    return _like(ctx, "RandomUniformLike", like, dtype, low=float(low), high=float(high))


# ------------------------------------------------------------------------ rand / randn
@translates(aten.rand.default, aten.rand.generator)
def rand(ctx, size, *, generator=None, dtype=None, layout=None, device=None, pin_memory=None):
    out = ctx.out_dtype
    return ctx.cast(_sized(ctx, "RandomUniform", size, _draw_dtype(out)), out)


@translates(aten.randn.default, aten.randn.generator)
def randn(ctx, size, *, generator=None, dtype=None, layout=None, device=None, pin_memory=None):
    out = ctx.out_dtype
    return ctx.cast(_sized(ctx, "RandomNormal", size, _draw_dtype(out)), out)


@translates(aten.rand_like.default, aten.rand_like.generator)
def rand_like(
    ctx,
    self,
    *,
    generator=None,
    dtype=None,
    layout=None,
    device=None,
    pin_memory=None,
    memory_format=None,
):
    out = ctx.out_dtype
    return ctx.cast(uniform_like(ctx, self, _draw_dtype(out)), out)


@translates(aten.randn_like.default, aten.randn_like.generator)
def randn_like(
    ctx,
    self,
    *,
    generator=None,
    dtype=None,
    layout=None,
    device=None,
    pin_memory=None,
    memory_format=None,
):
    out = ctx.out_dtype
    return ctx.cast(_like(ctx, "RandomNormalLike", self, _draw_dtype(out)), out)


# ------------------------------------------------------------------------------ integers
def _integers(ctx, uniform: ir.Value, low: Any, high: Any) -> ir.Value:
    """floor(low + u * (high - low)) from float64 uniforms, kept below ``high``."""
    low_v = ctx.scalar(low, torch.float64)
    high_v = ctx.scalar(high, torch.float64)
    spread = ctx.op.Sub(high_v, low_v)
    values = ctx.op.Floor(ctx.op.Add(low_v, ctx.op.Mul(uniform, spread)))
    # A uniform draw of exactly 1.0 must not produce ``high``.
    values = ctx.op.Min(values, ctx.op.Sub(high_v, ctx.const(1.0, torch.float64)))
    return ctx.cast(values, ctx.out_dtype)


@translates(aten.randint.default, aten.randint.generator)
def randint(
    ctx, high, size, *, generator=None, dtype=None, layout=None, device=None, pin_memory=None
):
    return _integers(ctx, _sized(ctx, "RandomUniform", size, torch.float64), 0, high)


@translates(aten.randint.low, aten.randint.low_generator)
def randint_low(
    ctx, low, high, size, *, generator=None, dtype=None, layout=None, device=None, pin_memory=None
):
    return _integers(ctx, _sized(ctx, "RandomUniform", size, torch.float64), low, high)


@translates(
    aten.randint_like.default,
    aten.randint_like.generator,
    aten.randint_like.Tensor,
    aten.randint_like.Tensor_generator,
)
def randint_like(
    ctx,
    self,
    high,
    *,
    generator=None,
    dtype=None,
    layout=None,
    device=None,
    pin_memory=None,
    memory_format=None,
):
    return _integers(ctx, uniform_like(ctx, self, torch.float64), 0, high)


@translates(aten.randint_like.low_dtype, aten.randint_like.low_generator_dtype)
def randint_like_low(
    ctx,
    self,
    low,
    high,
    *,
    generator=None,
    dtype=None,
    layout=None,
    device=None,
    pin_memory=None,
    memory_format=None,
):
    return _integers(ctx, uniform_like(ctx, self, torch.float64), low, high)


@translates(aten.random.default, aten.random.to, getattr(aten.random, "from"))
def random_(ctx, self, from_or_to=None, to=None, *, generator=None):
    dtype = ctx.out_dtype
    if from_or_to is None:
        # random_() covers [0, 2**mantissa] for floats and the whole non-negative range of ints.
        if dtype.is_floating_point:
            high = 2 ** (torch.finfo(dtype).nmant + 1) + 1
        elif dtype is torch.bool:
            high = 2
        else:
            high = torch.iinfo(dtype).max
        low = 0
    elif ctx.node is not None and ctx.node.target._overloadname == "to":
        # By overload name: random_.to reaches this translation with its in-place target.
        low, high = 0, from_or_to
    else:
        low = from_or_to
        high = (
            to
            if to is not None
            else (
                2 ** (torch.finfo(dtype).nmant + 1) + 1
                if dtype.is_floating_point
                else torch.iinfo(dtype).max
            )
        )
    return _integers(ctx, uniform_like(ctx, self, torch.float64), low, high)


@translates(aten.randperm.default, aten.randperm.generator)
def randperm(ctx, n, *, generator=None, dtype=None, layout=None, device=None, pin_memory=None):
    # The order of n uniform keys is a uniformly random permutation.
    keys = _sized(ctx, "RandomUniform", [n], torch.float32)
    _, order = ctx.op.TopK(keys, ctx.ints([n]), axis=0, largest=1, sorted=1, _outputs=2)
    order.dtype = ir.DataType.INT64
    return ctx.cast(order, ctx.out_dtype)


# -------------------------------------------------------------------- bernoulli / multinomial
@translates(aten.bernoulli.default)
def bernoulli(ctx, self, *, generator=None):
    # Not ONNX Bernoulli: onnxruntime 1.31's kernel draws 1 with probability 1 - p.
    return bernoulli_p(ctx, self, self)


@translates(aten.bernoulli.p, aten.bernoulli.Tensor)
def bernoulli_p(ctx, self, p, *, generator=None):
    out = ctx.out_dtype
    work = _draw_dtype(ctx.dtype(p)) if isinstance(p, ir.Value) else torch.float32
    uniform = uniform_like(ctx, self, work)
    probability = ctx.cast(p, work) if isinstance(p, ir.Value) else ctx.const(float(p), work)
    return ctx.cast(ctx.op.Less(uniform, probability), out)


@translates(aten.multinomial.default)
def multinomial(ctx, self, num_samples, replacement=False, *, generator=None):
    rank = ctx.rank(self)
    probabilities = ctx.cast(self, torch.float32)
    if rank == 1:
        probabilities = ctx.op.Unsqueeze(probabilities, ctx.const([0], i64))
    log_p = ctx.op.Log(probabilities)
    if replacement and not _native(ctx, "Multinomial"):
        samples = _inverse_cdf_samples(ctx, probabilities, num_samples)
    elif replacement:
        if not isinstance(num_samples, int):
            raise NotImplementedError(
                "multinomial with replacement needs a static num_samples (ONNX Multinomial "
                "takes it as an attribute)"
            )
        samples = ctx.op.Multinomial(log_p, sample_size=num_samples, dtype=ir.DataType.INT64)
        samples.dtype = ir.DataType.INT64
    else:
        # Gumbel-top-k: the k largest of log p + Gumbel noise are a draw without replacement.
        uniform = uniform_like(ctx, log_p, torch.float32, low=1e-20, high=1.0)
        gumbel = ctx.op.Neg(ctx.op.Log(ctx.op.Neg(ctx.op.Log(uniform))))
        _, samples = ctx.op.TopK(
            ctx.op.Add(log_p, gumbel),
            ctx.ints([num_samples]),
            axis=1,
            largest=1,
            sorted=1,
            _outputs=2,
        )
        samples.dtype = ir.DataType.INT64
    if rank == 1:
        samples = ctx.op.Squeeze(samples, ctx.const([0], i64))
    return samples


def _inverse_cdf_samples(ctx, probabilities: ir.Value, num_samples) -> ir.Value:
    """``num_samples`` draws with replacement per row of ``[rows, categories]`` weights: the
    number of cumulative weights at or below ``u * total`` is category j with probability
    ``p_j / total`` (a zero weight is never drawn)."""
    cdf = ctx.op.CumSum(probabilities, ctx.const(1, i64))
    total = ctx.op.Gather(cdf, ctx.const([-1], i64), axis=1)
    rows = ctx.op.Shape(probabilities, start=0, end=1)
    shape = ctx.op.Concat(rows, ctx.ints([num_samples]), axis=0)
    uniform = _sized(ctx, "RandomUniform", shape, torch.float32)
    target = ctx.op.Unsqueeze(ctx.op.Mul(uniform, total), ctx.const([2], i64))
    below = ctx.op.LessOrEqual(ctx.op.Unsqueeze(cdf, ctx.const([1], i64)), target)
    index = ctx.op.ReduceSum(ctx.cast(below, i64), ctx.const([2], i64), keepdims=0)
    index.dtype = ir.DataType.INT64
    # A product rounded up to the total counts every category; the last one is meant.
    last = ctx.op.Sub(ctx.op.Shape(probabilities, start=1, end=2), ctx.const([1], i64))
    return ctx.op.Min(index, last)


# -------------------------------------------------------------------------- distributions
def _normal(ctx, mean, std, shape_source):
    out = ctx.out_dtype
    work = _draw_dtype(out)
    noise = _like(ctx, "RandomNormalLike", shape_source, work)
    mean = ctx.cast(mean, work) if isinstance(mean, ir.Value) else ctx.const(float(mean), work)
    std = ctx.cast(std, work) if isinstance(std, ir.Value) else ctx.const(float(std), work)
    return ctx.cast(ctx.op.Add(mean, ctx.op.Mul(std, noise)), out)


@translates(aten.normal.Tensor_float)
def normal_tensor_float(ctx, mean, std=1.0, *, generator=None):
    return _normal(ctx, mean, std, mean)


@translates(aten.normal.float_Tensor)
def normal_float_tensor(ctx, mean, std, *, generator=None):
    return _normal(ctx, mean, std, std)


@translates(aten.normal.Tensor_Tensor)
def normal_tensor_tensor(ctx, mean, std, *, generator=None):
    # Only the broadcast shape of the two matters to the noise.
    return _normal(ctx, mean, std, ctx.op.Add(mean, ctx.cast(std, ctx.dtype(mean))))


@translates(aten.normal.float_float)
def normal_float_float(
    ctx, mean, std, size, *, generator=None, dtype=None, layout=None, device=None, pin_memory=None
):
    out = ctx.out_dtype
    work = _draw_dtype(out)
    noise = _sized(ctx, "RandomNormal", size, work, mean=float(mean), scale=float(std))
    return ctx.cast(noise, out)


@translates(aten.normal_functional.default)
def normal_functional(ctx, self, mean=0.0, std=1.0, *, generator=None):
    return _normal(ctx, mean, std, self)


@translates(aten.uniform.default)
def uniform(ctx, self, from_=0.0, to=1.0, *, generator=None):
    out = ctx.out_dtype
    return ctx.cast(uniform_like(ctx, self, _draw_dtype(out), low=from_, high=to), out)


def _open_uniform(ctx, self, work):
    """Uniform draws in (0, 1): logarithms of them stay finite."""
    return uniform_like(ctx, self, work, low=torch.finfo(work).tiny, high=1.0)


@translates(aten.exponential.default)
def exponential(ctx, self, lambd=1.0, *, generator=None):
    out = ctx.out_dtype
    work = _draw_dtype(out)
    u = _open_uniform(ctx, self, work)
    samples = ctx.op.Div(ctx.op.Neg(ctx.op.Log(u)), ctx.const(float(lambd), work))
    return ctx.cast(samples, out)


@translates(aten.log_normal.default)
def log_normal(ctx, self, mean=1.0, std=2.0, *, generator=None):
    out = ctx.out_dtype
    work = _draw_dtype(out)
    noise = _like(ctx, "RandomNormalLike", self, work, mean=float(mean), scale=float(std))
    return ctx.cast(ctx.op.Exp(noise), out)


@translates(aten.cauchy.default)
def cauchy(ctx, self, median=0.0, sigma=1.0, *, generator=None):
    out = ctx.out_dtype
    work = _draw_dtype(out)
    u = _open_uniform(ctx, self, work)
    angle = ctx.op.Mul(ctx.op.Sub(u, ctx.const(0.5, work)), ctx.const(math.pi, work))
    samples = ctx.op.Add(
        ctx.const(float(median), work), ctx.op.Mul(ctx.const(float(sigma), work), ctx.op.Tan(angle))
    )
    return ctx.cast(samples, out)


@translates(aten.geometric.default)
def geometric(ctx, self, p, *, generator=None):
    out = ctx.out_dtype
    work = _draw_dtype(out)
    u = _open_uniform(ctx, self, work)
    # Number of Bernoulli(p) trials up to the first success: ceil(log(u) / log(1 - p)).
    trials = ctx.op.Ceil(ctx.op.Div(ctx.op.Log(u), ctx.const(math.log1p(-p), work)))
    return ctx.cast(ctx.op.Max(trials, ctx.const(1.0, work)), out)
