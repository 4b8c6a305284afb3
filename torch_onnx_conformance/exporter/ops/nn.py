"""Neural-network layers kept whole: normalisations, softmax, dropout, embedding, shuffles.

Opset choices (see _opsets.py): LayerNormalization from 17, GroupNormalization from 21 (its
opset-21 form with per-channel scale and bias), RMSNormalization from 23. Below those, groups
and RMS use short patterns (InstanceNormalization over a (N, groups, -1) view; a mean of squares).
"""

from __future__ import annotations

import math

import onnx_ir as ir
import torch

from torch_onnx_conformance.exporter import _dtypes
from torch_onnx_conformance.exporter.ops._nn_helpers import FLOAT32_ONLY, FLOATS, compute_dtype
from torch_onnx_conformance.exporter.ops._reduce import reduce
from torch_onnx_conformance.exporter.ops._registry import translates
from torch_onnx_conformance.exporter.ops._shape import dim_value, prod_of_dims, reshape, shape_value

aten = torch.ops.aten


# ----------------------------------------------------------------------------------- helpers
def _float_input(ctx, x, supported=FLOATS):
    """x in a dtype onnxruntime computes in, and the dtype it came in (bfloat16 → float32)."""
    dtype = ctx.dtype(x)
    work = compute_dtype(dtype, supported)
    return ctx.cast(x, work), work


def _ones(ctx, sizes, dtype):
    """A tensor of ones with shape ``sizes`` (ints or SymInt values)."""
    if all(isinstance(s, int) for s in sizes):
        return ctx.const(torch.ones(list(sizes), dtype=torch.float32), dtype)
    return ctx.op.Expand(ctx.scalar(1, dtype), ctx.ints(sizes))


def _channel_ones(ctx, x, dtype, value=1, axis=1):
    """A (C,) tensor of ``value``, C being dim ``axis`` of x."""
    c = ctx.shape(x)[axis]
    if isinstance(c, int):
        return ctx.const([value] * c, dtype)
    return ctx.op.Expand(ctx.scalar(value, dtype), dim_value(ctx, x, axis))


def _per_channel(ctx, v, rank):
    """Reshape a (C,) parameter so it broadcasts against an (N, C, *spatial) tensor."""
    return ctx.op.Reshape(v, [-1] + [1] * (rank - 2)) if rank > 2 else v


def _moments(ctx, x, axes):
    """Biased mean and variance over ``axes`` (kept as size-1 dims)."""
    mean = reduce(ctx, "ReduceMean", x, axes, 1)
    centered = ctx.op.Sub(x, mean)
    var = reduce(ctx, "ReduceMean", ctx.op.Mul(centered, centered), axes, 1)
    return mean, var, centered


def _rsqrt(ctx, var, eps, dtype):
    return ctx.op.Reciprocal(ctx.op.Sqrt(ctx.op.Add(var, ctx.scalar(float(eps), dtype))))


def _empty(ctx, index, dtype=None):
    """An empty tensor for an output that torch leaves empty (saved stats in eval mode)."""
    meta = ctx.out[index] if isinstance(ctx.out, (list, tuple)) else None
    if dtype is None:
        dtype = meta.dtype if isinstance(meta, torch.Tensor) else torch.float32
    shape = list(meta.shape) if isinstance(meta, torch.Tensor) else [0]
    return ctx.const(torch.zeros(shape, dtype=torch.float32), dtype)


# ------------------------------------------------------------------------------- layer norm
def _layer_norm(ctx, input, normalized_shape, weight, bias, eps, want_stats):
    x, work = _float_input(ctx, input)
    rank = ctx.rank(input)
    axis = rank - len(normalized_shape)
    scale = ctx.cast(weight, work) if weight is not None else _ones(ctx, normalized_shape, work)
    b = None if bias is None else ctx.cast(bias, work)
    metas = ctx.out if isinstance(ctx.out, (list, tuple)) else (None, None, None)
    if work == torch.float64 or not ctx.has("LayerNormalization"):
        # LayerNormalization keeps its statistics in float32 at best; double stays double.
        # Below opset 17 (reached by version conversion) the op does not exist.
        mean, var, centered = _moments(ctx, x, list(range(axis, rank)))
        rstd = _rsqrt(ctx, var, eps, work)
        out = ctx.op.Mul(ctx.op.Mul(centered, rstd), scale)
        out = out if b is None else ctx.op.Add(out, b)
        return (out, mean, rstd) if want_stats else out
    if not want_stats:
        return ctx.op.LayerNormalization(x, scale, b, axis=axis, epsilon=float(eps))
    out, mean, rstd = ctx.op.LayerNormalization(
        x, scale, b, axis=axis, epsilon=float(eps), _outputs=3
    )
    # Mean and InvStdDev come in the stash type (float32), not the input's.
    mean.dtype = rstd.dtype = _dtypes.to_ir(torch.float32)
    return (
        ctx.cast(out, ctx.dtype(input)),
        *(
            ctx.cast(v, m.dtype) if isinstance(m, torch.Tensor) else v
            for v, m in zip((mean, rstd), metas[1:])
        ),
    )


@translates(aten.layer_norm.default)
def layer_norm(ctx, input, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True):
    return ctx.cast(
        _layer_norm(ctx, input, normalized_shape, weight, bias, eps, False), ctx.out_dtype
    )


@translates(aten.native_layer_norm.default)
def native_layer_norm(ctx, input, normalized_shape, weight, bias, eps):
    if not ({1, 2} & ctx.used_outputs()):
        out = _layer_norm(ctx, input, normalized_shape, weight, bias, eps, False)
        return ctx.cast(out, ctx.dtype(input)), None, None
    return _layer_norm(ctx, input, normalized_shape, weight, bias, eps, True)


# ------------------------------------------------------------------------------- group norm
def _grouped(ctx, x, groups):
    """x viewed as (N, groups, everything else / groups); explicit sizes keep N == 0 working."""
    rest = prod_of_dims(ctx, x, 1)
    rest = ctx.op.Div(rest, ctx.const([groups], torch.int64))
    return reshape(ctx, x, dim_value(ctx, x, 0), [groups], rest, allowzero=True)


def _group_stats(ctx, x, groups, eps, work):
    """Mean and rstd of each (sample, group), shaped (N, groups)."""
    grouped = _grouped(ctx, x, groups)
    mean, var, _ = _moments(ctx, grouped, [2])
    rstd = _rsqrt(ctx, var, eps, work)
    return ctx.op.Squeeze(mean, [2]), ctx.op.Squeeze(rstd, [2])


def _instance_normalize(ctx, x, eps, work, channels=None):
    """Normalise each (sample, channel) of an (N, C, *) tensor over the remaining axes.

    InstanceNormalization where onnxruntime has a kernel (float32, float16); float64 keeps its
    precision with the explicit moments instead."""
    if work != torch.float64:
        if isinstance(channels, int):
            ones, zeros = ctx.const([1.0] * channels, work), ctx.const([0.0] * channels, work)
        else:
            ones = ctx.op.Expand(ctx.scalar(1.0, work), dim_value(ctx, x, 1))
            zeros = ctx.op.Expand(ctx.scalar(0.0, work), dim_value(ctx, x, 1))
        return ctx.op.InstanceNormalization(x, ones, zeros, epsilon=float(eps))
    rank = ctx.rank(x)
    mean, var, centered = _moments(ctx, x, list(range(2, rank)) if rank else [2])
    return ctx.op.Mul(centered, _rsqrt(ctx, var, eps, work))


def _group_norm(ctx, input, groups, weight, bias, eps):
    rank = ctx.rank(input)
    shape = ctx.shape(input)
    # onnxruntime runs GroupNormalization by expanding its function body, whose Reshape to
    # (N, groups, -1) fails on an empty tensor; the InstanceNormalization view below does not.
    empty = shape is None or any(dim == 0 for dim in shape)
    if ctx.has("GroupNormalization") and not empty:
        x, work = _float_input(ctx, input)
        scale = ctx.cast(weight, work) if weight is not None else _channel_ones(ctx, input, work)
        shift = ctx.cast(bias, work) if bias is not None else _channel_ones(ctx, input, work, 0)
        return ctx.op.GroupNormalization(
            x,
            scale,
            shift,
            epsilon=float(eps),
            num_groups=int(groups),
            stash_type=11 if work == torch.float64 else 1,
        )
    # InstanceNormalization over a (N, groups, -1) view normalises each group; the affine
    # parameters are per channel, so they apply after the view is undone.
    x, work = _float_input(ctx, input, FLOAT32_ONLY | {torch.float64})
    grouped = _grouped(ctx, x, groups)
    normed = _instance_normalize(ctx, grouped, eps, work, channels=groups)
    out = reshape(ctx, normed, ctx.op.Shape(x), allowzero=True)
    if weight is not None:
        out = ctx.op.Mul(out, _per_channel(ctx, ctx.cast(weight, work), rank))
    if bias is not None:
        out = ctx.op.Add(out, _per_channel(ctx, ctx.cast(bias, work), rank))
    return out


@translates(aten.group_norm.default)
def group_norm(ctx, input, num_groups, weight=None, bias=None, eps=1e-5, cudnn_enabled=True):
    return ctx.cast(_group_norm(ctx, input, num_groups, weight, bias, eps), ctx.out_dtype)


@translates(aten.native_group_norm.default)
def native_group_norm(ctx, input, weight, bias, N, C, HxW, group, eps):
    out = ctx.cast(_group_norm(ctx, input, group, weight, bias, eps), ctx.out_dtype)
    if not ({1, 2} & ctx.used_outputs()):
        return out, None, None
    x, work = _float_input(ctx, input)
    mean, rstd = _group_stats(ctx, x, group, eps, work)
    return out, mean, rstd


# --------------------------------------------------------------------------------- RMS norm
def _rms_norm(ctx, input, normalized_shape, weight, eps):
    dtype = ctx.dtype(input)
    # torch computes in the "opmath" type: float32 for the half types.
    work = torch.float64 if dtype == torch.float64 else torch.float32
    if eps is None:
        eps = torch.finfo(work).eps
    axes = list(range(ctx.rank(input) - len(normalized_shape), ctx.rank(input)))
    x = ctx.cast(input, work)
    if ctx.has("RMSNormalization") and weight is None:
        scale = _ones(ctx, normalized_shape, work)
        stash = 11 if work == torch.float64 else 1
        out = ctx.op.RMSNormalization(
            x, scale, axis=axes[0] if axes else -1, epsilon=float(eps), stash_type=stash
        )
        rstd = None
    else:
        mean_square = reduce(ctx, "ReduceMean", ctx.op.Mul(x, x), axes, 1)
        rstd = _rsqrt(ctx, mean_square, eps, work)
        out = ctx.op.Mul(x, rstd)
    out = ctx.cast(out, dtype)
    if weight is not None:
        out = ctx.op.Mul(out, ctx.cast(weight, dtype))
    return out, rstd


@translates(aten.rms_norm.default)
def rms_norm(ctx, input, normalized_shape, weight=None, eps=None):
    if (
        ctx.has("RMSNormalization")
        and weight is not None
        and (
            ctx.dtype(input) in (torch.float32, torch.float64)
            and ctx.dtype(weight) == ctx.dtype(input)
        )
    ):
        # One op when the weight multiply happens in the input's own dtype anyway.
        work = ctx.dtype(input)
        eps = torch.finfo(work).eps if eps is None else eps
        return ctx.op.RMSNormalization(
            input,
            weight,
            axis=ctx.rank(input) - len(normalized_shape),
            epsilon=float(eps),
            stash_type=11 if work == torch.float64 else 1,
        )
    return ctx.cast(_rms_norm(ctx, input, normalized_shape, weight, eps)[0], ctx.out_dtype)


@translates(aten._fused_rms_norm.default)
def fused_rms_norm(ctx, input, normalized_shape, weight=None, eps=None):
    out, rstd = _rms_norm(ctx, input, normalized_shape, weight, eps)
    if rstd is None and 1 in ctx.used_outputs():
        work = torch.float64 if ctx.dtype(input) == torch.float64 else torch.float32
        x = ctx.cast(input, work)
        axes = list(range(ctx.rank(input) - len(normalized_shape), ctx.rank(input)))
        eps = torch.finfo(work).eps if eps is None else eps
        rstd = _rsqrt(ctx, reduce(ctx, "ReduceMean", ctx.op.Mul(x, x), axes, 1), eps, work)
    return ctx.cast(out, ctx.out_dtype), rstd


# ------------------------------------------------------------------------------- batch norm
def _bn_params(ctx, x, weight, bias, work):
    scale = ctx.cast(weight, work) if weight is not None else _channel_ones(ctx, x, work)
    shift = ctx.cast(bias, work) if bias is not None else _channel_ones(ctx, x, work, 0)
    return scale, shift


def _bn_eval(ctx, input, weight, bias, running_mean, running_var, eps):
    x, work = _float_input(ctx, input)
    # Missing affine parameters are ones/zeros shaped like the running stats (always (C,)).
    scale = (
        ctx.cast(weight, work)
        if weight is not None
        else _channel_ones(ctx, running_mean, work, axis=0)
    )
    shift = (
        ctx.cast(bias, work)
        if bias is not None
        else _channel_ones(ctx, running_mean, work, 0, axis=0)
    )
    unbatched = ctx.rank(input) < 2  # a 1-D input is one sample of C channels
    if unbatched:
        x = ctx.op.Unsqueeze(x, [0])
    out = ctx.op.BatchNormalization(
        x,
        scale,
        shift,
        ctx.cast(running_mean, work),
        ctx.cast(running_var, work),
        epsilon=float(eps),
    )
    if unbatched:
        out = ctx.op.Squeeze(out, [0])
    return ctx.cast(out, ctx.dtype(input))


def _bn_train(ctx, input, weight, bias, eps):
    """Normalise with the batch's own statistics; returns out, mean (C,), biased var (C,), rstd."""
    rank = ctx.rank(input)
    x, work = _float_input(ctx, input)
    axes = [0] + list(range(2, rank))
    mean, var, centered = _moments(ctx, x, axes)
    rstd = _rsqrt(ctx, var, eps, work)
    out = ctx.op.Mul(centered, rstd)
    if weight is not None:
        out = ctx.op.Mul(out, _per_channel(ctx, ctx.cast(weight, work), rank))
    if bias is not None:
        out = ctx.op.Add(out, _per_channel(ctx, ctx.cast(bias, work), rank))
    flat = [-1]
    return (
        ctx.cast(out, ctx.dtype(input)),
        ctx.op.Reshape(mean, flat),
        ctx.op.Reshape(var, flat),
        ctx.op.Reshape(rstd, flat),
        work,
    )


def _updated_running_stats(ctx, input, running_mean, running_var, mean, var, momentum, work):
    """What torch writes back into running_mean/var in training mode (var made unbiased)."""
    count = ctx.op.Div(
        ctx.op.Cast(ctx.op.Size(input), to=_dtypes.to_ir(work)),
        ctx.op.Cast(dim_value(ctx, input, 1), to=_dtypes.to_ir(work)),
    )
    unbiased = ctx.op.Mul(var, ctx.op.Div(count, ctx.op.Sub(count, ctx.scalar(1, work))))
    m = ctx.scalar(float(momentum), work)
    keep = ctx.scalar(1.0 - float(momentum), work)
    rm_dtype, rv_dtype = ctx.dtype(running_mean), ctx.dtype(running_var)
    new_mean = ctx.op.Add(ctx.op.Mul(ctx.cast(running_mean, work), keep), ctx.op.Mul(mean, m))
    new_var = ctx.op.Add(ctx.op.Mul(ctx.cast(running_var, work), keep), ctx.op.Mul(unbiased, m))
    return ctx.cast(new_mean, rm_dtype), ctx.cast(new_var, rv_dtype)


@translates(aten.batch_norm.default)
def batch_norm(
    ctx, input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled=True
):
    if training or running_mean is None:
        return _bn_train(ctx, input, weight, bias, eps)[0]
    return _bn_eval(ctx, input, weight, bias, running_mean, running_var, eps)


@translates(aten._native_batch_norm_legit_no_training.default)
def batch_norm_no_training(ctx, input, weight, bias, running_mean, running_var, momentum, eps):
    out = _bn_eval(ctx, input, weight, bias, running_mean, running_var, eps)
    return out, _empty(ctx, 1), _empty(ctx, 2)


@translates(aten._native_batch_norm_legit.default, aten.native_batch_norm.default)
def native_batch_norm(ctx, input, weight, bias, running_mean, running_var, training, momentum, eps):
    if not training and running_mean is not None:
        return batch_norm_no_training(
            ctx, input, weight, bias, running_mean, running_var, momentum, eps
        )
    out, mean, _, rstd, _ = _bn_train(ctx, input, weight, bias, eps)
    return out, mean, rstd


@translates(aten._native_batch_norm_legit.no_stats)
def native_batch_norm_no_stats(ctx, input, weight, bias, training, momentum, eps):
    out, mean, _, rstd, _ = _bn_train(ctx, input, weight, bias, eps)
    return out, mean, rstd


@translates(aten._native_batch_norm_legit_functional.default)
def native_batch_norm_functional(
    ctx, input, weight, bias, running_mean, running_var, training, momentum, eps
):
    if not training:
        out = _bn_eval(ctx, input, weight, bias, running_mean, running_var, eps)
        return out, _empty(ctx, 1), _empty(ctx, 2), running_mean, running_var
    out, mean, var, rstd, work = _bn_train(ctx, input, weight, bias, eps)
    new_mean, new_var = _updated_running_stats(
        ctx, input, running_mean, running_var, mean, var, momentum, work
    )
    return out, mean, rstd, new_mean, new_var


@translates(aten._batch_norm_with_update.default)
def batch_norm_with_update(ctx, input, weight, bias, running_mean, running_var, momentum, eps):
    # The running-stat update is a buffer mutation, which an inference graph does not carry.
    out, mean, _, rstd, _ = _bn_train(ctx, input, weight, bias, eps)
    return out, mean, rstd, _empty(ctx, 3, torch.uint8)


@translates(aten._batch_norm_with_update_functional.default)
def batch_norm_with_update_functional(
    ctx, input, weight, bias, running_mean, running_var, momentum, eps
):
    out, mean, var, rstd, work = _bn_train(ctx, input, weight, bias, eps)
    new_mean, new_var = _updated_running_stats(
        ctx, input, running_mean, running_var, mean, var, momentum, work
    )
    return out, mean, rstd, _empty(ctx, 3, torch.uint8), new_mean, new_var


@translates(aten._batch_norm_no_update.default)
def batch_norm_no_update(ctx, input, weight, bias, running_mean, running_var, momentum, eps):
    if running_mean is None:
        out, mean, _, rstd, _ = _bn_train(ctx, input, weight, bias, eps)
        return out, mean, rstd, _empty(ctx, 3, torch.uint8)
    out = _bn_eval(ctx, input, weight, bias, running_mean, running_var, eps)
    return out, _empty(ctx, 1), _empty(ctx, 2), _empty(ctx, 3, torch.uint8)


@translates(aten.instance_norm.default)
def instance_norm(
    ctx,
    input,
    weight,
    bias,
    running_mean,
    running_var,
    use_input_stats,
    momentum,
    eps,
    cudnn_enabled=True,
):
    if not use_input_stats:
        return _bn_eval(ctx, input, weight, bias, running_mean, running_var, eps)
    x, work = _float_input(ctx, input, FLOAT32_ONLY | {torch.float64})
    if work == torch.float64:
        out = _instance_normalize(ctx, x, eps, work)
        rank = ctx.rank(input)
        if weight is not None:
            out = ctx.op.Mul(out, _per_channel(ctx, ctx.cast(weight, work), rank))
        if bias is not None:
            out = ctx.op.Add(out, _per_channel(ctx, ctx.cast(bias, work), rank))
        return ctx.cast(out, ctx.out_dtype)
    scale, shift = _bn_params(ctx, input, weight, bias, work)
    out = ctx.op.InstanceNormalization(x, scale, shift, epsilon=float(eps))
    return ctx.cast(out, ctx.out_dtype)


# ---------------------------------------------------------------------------------- softmax
def _softmax(ctx, op_type, self, dim, dtype):
    x = ctx.cast(self, dtype) if dtype is not None else self
    out_dtype = ctx.out_dtype
    x, work = _float_input(ctx, ctx.cast(x, out_dtype))
    if ctx.rank(self) == 0:
        flat = ctx.op.Reshape(x, [1])
        out = ctx.op.Reshape(getattr(ctx.op, op_type)(flat, axis=0), [])
    else:
        out = getattr(ctx.op, op_type)(x, axis=dim)
    return ctx.cast(out, out_dtype)


@translates(aten.softmax.int, aten.special_softmax.default)
def softmax(ctx, self, dim, dtype=None):
    return _softmax(ctx, "Softmax", self, dim, dtype)


@translates(aten.log_softmax.int, aten.special_log_softmax.default)
def log_softmax(ctx, self, dim, dtype=None):
    return _softmax(ctx, "LogSoftmax", self, dim, dtype)


@translates(aten._softmax.default)
def softmax_core(ctx, self, dim, half_to_float):
    return _softmax(ctx, "Softmax", self, dim, None)


@translates(aten._log_softmax.default)
def log_softmax_core(ctx, self, dim, half_to_float):
    return _softmax(ctx, "LogSoftmax", self, dim, None)


@translates(aten._safe_softmax.default)
def safe_softmax(ctx, self, dim, dtype=None):
    """Softmax whose rows that are entirely -inf give zeros instead of NaN."""
    out = _softmax(ctx, "Softmax", self, dim, dtype)
    if ctx.rank(self) == 0:
        masked = ctx.op.Equal(self, ctx.scalar(float("-inf"), ctx.dtype(self)))
    else:
        is_masked = ctx.op.Equal(self, ctx.scalar(float("-inf"), ctx.dtype(self)))
        masked = ctx.op.Cast(
            reduce(
                ctx, "ReduceMin", ctx.op.Cast(is_masked, to=_dtypes.to_ir(torch.int32)), [dim], 1
            ),
            to=_dtypes.to_ir(torch.bool),
        )
    return ctx.op.Where(masked, ctx.scalar(0, ctx.out_dtype), out)


# ---------------------------------------------------------------------------------- dropout
def _keep_mask(ctx, shape_of, p):
    """A random bool mask (True = keep with probability 1 - p) shaped like ``shape_of``."""
    ones = ctx.op.Expand(ctx.scalar(1.0, torch.float32), shape_of)
    _, mask = ctx.op.Dropout(
        ones, ctx.scalar(float(p), torch.float32), ctx.const(True, torch.bool), _outputs=2
    )
    mask.dtype = ir.DataType.BOOL  # the builder gives every output the input's dtype
    return mask


def _drop(ctx, input, p, mask_shape):
    """input * mask / (1 - p); p == 1 drops everything (no division by zero)."""
    dtype = ctx.dtype(input)
    if p >= 1:
        mask = ctx.op.Expand(ctx.const(False, torch.bool), mask_shape)
        return ctx.op.Where(mask, input, ctx.scalar(0, dtype)), mask
    mask = _keep_mask(ctx, mask_shape, p)
    scaled = ctx.op.Mul(input, ctx.scalar(1.0 / (1.0 - p), dtype))
    return ctx.op.Where(mask, scaled, ctx.scalar(0, dtype)), mask


@translates(aten.dropout.default)
def dropout(ctx, input, p, train):
    if not train or p == 0:
        return ctx.op.Identity(input)
    return _drop(ctx, input, p, ctx.op.Shape(input))[0]


@translates(aten.native_dropout.default)
def native_dropout(ctx, input, p, train):
    if train is False or p == 0:
        return ctx.op.Identity(input), ctx.op.Expand(
            ctx.const(True, torch.bool), ctx.op.Shape(input)
        )
    out, mask = _drop(ctx, input, p, ctx.op.Shape(input))
    return out, mask


def _feature_shape(ctx, input):
    """(N, C, 1, ...) for batched inputs, (C, 1, ...) for unbatched ones (channel masks)."""
    rank = ctx.rank(input)
    lead = 2 if rank > 2 else 1
    return ctx.op.Concat(
        shape_value(ctx, input, 0, lead), ctx.const([1] * (rank - lead), torch.int64), axis=0
    )


@translates(aten.feature_dropout.default)
def feature_dropout(ctx, input, p, train):
    if not train or p == 0:
        return ctx.op.Identity(input)
    return _drop(ctx, input, p, _feature_shape(ctx, input))[0]


def _alpha_drop(ctx, input, p, mask_shape):
    # SELU-preserving dropout: dropped units take the negative saturation value, then an
    # affine map restores zero mean and unit variance.
    alpha = 1.7580993408473766
    dtype = ctx.dtype(input)
    if p >= 1:
        return ctx.op.Mul(input, ctx.scalar(0, dtype))
    a = 1.0 / math.sqrt((alpha * alpha * p + 1) * (1 - p))
    keep = ctx.cast(_keep_mask(ctx, mask_shape, p), dtype)
    b = ctx.op.Add(
        ctx.op.Mul(ctx.op.Sub(keep, ctx.scalar(1, dtype)), ctx.scalar(alpha * a, dtype)),
        ctx.scalar(alpha * a * p, dtype),
    )
    return ctx.op.Add(ctx.op.Mul(input, ctx.op.Mul(keep, ctx.scalar(a, dtype))), b)


@translates(aten.alpha_dropout.default)
def alpha_dropout(ctx, input, p, train):
    if not train or p == 0:
        return ctx.op.Identity(input)
    return _alpha_drop(ctx, input, p, ctx.op.Shape(input))


@translates(aten.feature_alpha_dropout.default)
def feature_alpha_dropout(ctx, input, p, train):
    if not train or p == 0:
        return ctx.op.Identity(input)
    return _alpha_drop(ctx, input, p, _feature_shape(ctx, input))


# -------------------------------------------------------------------------------- embedding
@translates(aten.embedding.default)
def embedding(ctx, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    # padding_idx and scale_grad_by_freq only change gradients.
    return ctx.op.Gather(weight, indices, axis=0)


@translates(aten.embedding_renorm.default)
def embedding_renorm(ctx, self, indices, max_norm, norm_type):
    """Rows that ``indices`` touch and whose p-norm exceeds max_norm are scaled down to it."""
    w, work = _float_input(ctx, self)
    p = float(norm_type)
    if p == 2:
        norms = reduce(ctx, "ReduceL2", w, [1], 1)
    elif p == 1:
        norms = reduce(ctx, "ReduceL1", w, [1], 1)
    elif math.isinf(p):
        norms = reduce(ctx, "ReduceMax", ctx.op.Abs(w), [1], 1)
    else:
        powered = reduce(ctx, "ReduceSum", ctx.op.Pow(ctx.op.Abs(w), ctx.scalar(p, work)), [1], 1)
        norms = ctx.op.Pow(powered, ctx.scalar(1.0 / p, work))
    # torch's own constant: scale = max_norm / (norm + 1e-7).
    scale = ctx.op.Div(ctx.scalar(float(max_norm), work), ctx.op.Add(norms, ctx.scalar(1e-7, work)))
    too_big = ctx.op.Greater(norms, ctx.scalar(float(max_norm), work))
    flat = ctx.op.Reshape(ctx.cast(indices, torch.int64), [-1])
    touched = ctx.op.ScatterElements(
        ctx.op.Expand(ctx.scalar(0, torch.int64), dim_value(ctx, self, 0)),
        flat,
        ctx.op.Expand(ctx.scalar(1, torch.int64), ctx.op.Shape(flat)),
        axis=0,
        reduction="max",
    )
    touched = ctx.op.Unsqueeze(ctx.cast(touched, torch.bool), [1])
    factor = ctx.op.Where(ctx.op.And(touched, too_big), scale, ctx.scalar(1, work))
    return ctx.cast(ctx.op.Mul(w, factor), ctx.dtype(self))


def _embedding_bag(
    ctx, weight, indices, offsets, mode, per_sample_weights, include_last_offset, padding_idx
):
    used = ctx.used_outputs()
    w_dtype = ctx.dtype(weight)
    work = compute_dtype(w_dtype, {torch.float32, torch.float64})
    w = ctx.cast(weight, work)
    idx = ctx.cast(indices, torch.int64)
    offs = ctx.cast(offsets, torch.int64)
    if include_last_offset:
        offs = ctx.op.Slice(offs, [0], [-1], [0])
    n = ctx.op.Shape(idx)
    bags = ctx.op.Shape(offs)
    # Bag id of every index: count the bag starts at or before its position (CumSum over a
    # start-marker vector; the extra trailing slot absorbs offsets == len(indices)).
    markers = ctx.op.ScatterElements(
        ctx.op.Expand(ctx.scalar(0, torch.int64), ctx.op.Add(n, ctx.const([1], torch.int64))),
        offs,
        ctx.op.Expand(ctx.scalar(1, torch.int64), bags),
        axis=0,
        reduction="add",
    )
    bag = ctx.op.Sub(
        ctx.op.Slice(ctx.op.CumSum(markers, ctx.scalar(0, torch.int64)), [0], n, [0]),
        ctx.scalar(1, torch.int64),
    )
    rows = ctx.op.Gather(w, idx, axis=0)
    if per_sample_weights is not None:
        rows = ctx.op.Mul(rows, ctx.op.Unsqueeze(ctx.cast(per_sample_weights, work), [1]))
    valid = None
    if isinstance(padding_idx, int) and padding_idx >= 0:
        padding_idx = ctx.scalar(padding_idx, torch.int64)
    if padding_idx is not None and not isinstance(padding_idx, int):
        valid = ctx.op.Not(ctx.op.Equal(idx, padding_idx))
    counts = (
        ctx.cast(valid, torch.int64)
        if valid is not None
        else ctx.op.Expand(ctx.scalar(1, torch.int64), n)
    )
    bag_size = ctx.op.ScatterElements(
        ctx.op.Expand(ctx.scalar(0, torch.int64), bags), bag, counts, axis=0, reduction="add"
    )
    out_shape = ctx.op.Concat(bags, dim_value(ctx, weight, 1), axis=0)
    target = ctx.op.Unsqueeze(bag, [1])
    max_indices = None
    if mode == 2:
        low = ctx.scalar(float("-inf"), work)
        if valid is not None:
            rows = ctx.op.Where(ctx.op.Unsqueeze(valid, [1]), rows, low)
        if 3 in used or not ctx.has("ScatterND-reduction-max"):
            # Dense (bags, n, D) comparison: what ArgMax needs for the indices output.
            member = ctx.op.Equal(
                ctx.op.Unsqueeze(bag, [0]),
                ctx.op.Unsqueeze(
                    ctx.op.Range(
                        ctx.scalar(0, torch.int64),
                        ctx.op.Squeeze(bags, [0]),
                        ctx.scalar(1, torch.int64),
                    ),
                    [1],
                ),
            )
            spread = ctx.op.Where(ctx.op.Unsqueeze(member, [2]), ctx.op.Unsqueeze(rows, [0]), low)
            out = reduce(ctx, "ReduceMax", spread, [1], 0)
            if 3 in used:
                pos = ctx.op.ArgMax(spread, axis=1, keepdims=0)
                max_indices = ctx.op.Gather(idx, pos, axis=0)
        else:
            out = ctx.op.ScatterND(ctx.op.Expand(low, out_shape), target, rows, reduction="max")
        empty = ctx.op.Unsqueeze(ctx.op.Equal(bag_size, ctx.scalar(0, torch.int64)), [1])
        out = ctx.op.Where(empty, ctx.scalar(0, work), out)
        if max_indices is not None:
            max_indices = ctx.op.Where(empty, ctx.scalar(-1, torch.int64), max_indices)
    else:
        if valid is not None:
            rows = ctx.op.Where(ctx.op.Unsqueeze(valid, [1]), rows, ctx.scalar(0, work))
        out = ctx.op.ScatterND(
            ctx.op.Expand(ctx.scalar(0, work), out_shape), target, rows, reduction="add"
        )
        if mode == 1:
            denom = ctx.op.Max(ctx.cast(bag_size, work), ctx.scalar(1, work))
            out = ctx.op.Div(out, ctx.op.Unsqueeze(denom, [1]))
    out = ctx.cast(out, w_dtype)
    return (
        out,
        bag if 1 in used else None,
        bag_size if 2 in used else None,
        max_indices if 3 in used else None,
    )


@translates(aten._embedding_bag.default, aten._embedding_bag_forward_only.default)
def embedding_bag_core(
    ctx,
    weight,
    indices,
    offsets,
    scale_grad_by_freq=False,
    mode=0,
    sparse=False,
    per_sample_weights=None,
    include_last_offset=False,
    padding_idx=-1,
):
    return _embedding_bag(
        ctx, weight, indices, offsets, mode, per_sample_weights, include_last_offset, padding_idx
    )


@translates(aten.embedding_bag.default)
def embedding_bag(
    ctx,
    weight,
    indices,
    offsets,
    scale_grad_by_freq=False,
    mode=0,
    sparse=False,
    per_sample_weights=None,
    include_last_offset=False,
):
    return _embedding_bag(
        ctx, weight, indices, offsets, mode, per_sample_weights, include_last_offset, None
    )


@translates(aten.embedding_bag.padding_idx)
def embedding_bag_padding_idx(
    ctx,
    weight,
    indices,
    offsets,
    scale_grad_by_freq,
    mode,
    sparse,
    per_sample_weights,
    include_last_offset,
    padding_idx,
):
    if padding_idx is not None and padding_idx < 0:
        # This overload counts a negative padding_idx from the end (the core op does not).
        rows = ctx.shape(weight)[0]
        padding_idx = (
            rows + padding_idx
            if isinstance(rows, int)
            else ctx.op.Add(
                ctx.op.Squeeze(dim_value(ctx, weight, 0), [0]), ctx.scalar(padding_idx, torch.int64)
            )
        )
    return _embedding_bag(
        ctx, weight, indices, offsets, mode, per_sample_weights, include_last_offset, padding_idx
    )


@translates(aten.one_hot.default)
def one_hot(ctx, self, num_classes=-1):
    idx = ctx.cast(self, torch.int64)
    if num_classes is None or (isinstance(num_classes, int) and num_classes < 0):
        depth = ctx.op.Add(ctx.op.ReduceMax(idx, keepdims=0), ctx.scalar(1, torch.int64))
    else:
        depth = ctx.scalar(num_classes, torch.int64)
    scalar = ctx.rank(self) == 0  # OneHot wants indices of rank >= 1
    if scalar:
        idx = ctx.op.Reshape(idx, [1])
    out = ctx.op.OneHot(idx, depth, ctx.const([0, 1], torch.int64), axis=-1)
    return ctx.op.Squeeze(out, [0]) if scalar else out


# --------------------------------------------------------------------------------- shuffles
def _div_dim(ctx, x, axis, factor):
    size = ctx.shape(x)[axis]
    if isinstance(size, int):
        return ctx.const([size // factor], torch.int64)
    return ctx.op.Div(dim_value(ctx, x, axis), ctx.const([factor], torch.int64))


def _mul_dim(ctx, x, axis, factor):
    size = ctx.shape(x)[axis]
    if isinstance(size, int):
        return ctx.const([size * factor], torch.int64)
    return ctx.op.Mul(dim_value(ctx, x, axis), ctx.const([factor], torch.int64))


@translates(aten.pixel_shuffle.default)
def pixel_shuffle(ctx, self, upscale_factor):
    r = int(upscale_factor)
    if ctx.rank(self) == 4 and ctx.dtype(self) in FLOATS:
        return ctx.op.DepthToSpace(self, blocksize=r, mode="CRD")
    lead = shape_value(ctx, self, 0, -3)
    c = _div_dim(ctx, self, -3, r * r)
    h, w = dim_value(ctx, self, -2), dim_value(ctx, self, -1)
    blocks = reshape(ctx, self, prod_of_dims(ctx, self, 0, -3), c, [r, r], h, w, allowzero=True)
    moved = ctx.op.Transpose(blocks, perm=[0, 1, 4, 2, 5, 3])
    return reshape(
        ctx, moved, lead, c, _mul_dim(ctx, self, -2, r), _mul_dim(ctx, self, -1, r), allowzero=True
    )


@translates(aten.pixel_unshuffle.default)
def pixel_unshuffle(ctx, self, downscale_factor):
    r = int(downscale_factor)
    lead = shape_value(ctx, self, 0, -3)
    c = dim_value(ctx, self, -3)
    h, w = _div_dim(ctx, self, -2, r), _div_dim(ctx, self, -1, r)
    blocks = reshape(ctx, self, prod_of_dims(ctx, self, 0, -3), c, h, [r], w, [r], allowzero=True)
    moved = ctx.op.Transpose(blocks, perm=[0, 1, 3, 5, 2, 4])
    return reshape(ctx, moved, lead, _mul_dim(ctx, self, -3, r * r), h, w, allowzero=True)


@translates(aten.channel_shuffle.default, aten.native_channel_shuffle.default)
def channel_shuffle(ctx, self, groups):
    g = ctx.ints([groups])
    per_group = ctx.op.Div(dim_value(ctx, self, 1), g)
    split = reshape(
        ctx, self, dim_value(ctx, self, 0), g, per_group, prod_of_dims(ctx, self, 2), allowzero=True
    )
    swapped = ctx.op.Transpose(split, perm=[0, 2, 1, 3])
    return reshape(ctx, swapped, ctx.op.Shape(self), allowzero=True)


# ------------------------------------------------------------------------ backward (core ATen)
# Training graphs carry these; inference exports never do. They follow the closed-form
# gradients of the forward translations above.
@translates(aten.native_layer_norm_backward.default)
def native_layer_norm_backward(
    ctx, grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask
):
    dtype = ctx.dtype(input)
    work = compute_dtype(dtype, FLOATS)
    rank = ctx.rank(input)
    inner = list(range(rank - len(normalized_shape), rank))
    outer = list(range(rank - len(normalized_shape)))
    x, g = ctx.cast(input, work), ctx.cast(grad_out, work)
    mean, rstd = ctx.cast(mean, work), ctx.cast(rstd, work)
    x_hat = ctx.op.Mul(ctx.op.Sub(x, mean), rstd)
    grads = [None, None, None]
    if output_mask[0]:
        gw = ctx.op.Mul(g, ctx.cast(weight, work)) if weight is not None else g
        count = ctx.cast(prod_of_dims(ctx, input, rank - len(normalized_shape)), work)
        sum_g = reduce(ctx, "ReduceSum", gw, inner, 1)
        sum_gx = reduce(ctx, "ReduceSum", ctx.op.Mul(gw, x_hat), inner, 1)
        inner_term = ctx.op.Sub(ctx.op.Sub(ctx.op.Mul(gw, count), sum_g), ctx.op.Mul(x_hat, sum_gx))
        grads[0] = ctx.cast(ctx.op.Mul(ctx.op.Div(rstd, count), inner_term), dtype)
    if output_mask[1] and weight is not None:
        grads[1] = ctx.cast(_sum_over(ctx, ctx.op.Mul(g, x_hat), outer), ctx.dtype(weight))
    if output_mask[2] and bias is not None:
        grads[2] = ctx.cast(_sum_over(ctx, g, outer), ctx.dtype(bias))
    return tuple(grads)


def _sum_over(ctx, x, axes):
    return reduce(ctx, "ReduceSum", x, axes, 0) if axes else x


@translates(aten.native_group_norm_backward.default)
def native_group_norm_backward(
    ctx, grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask
):
    dtype = ctx.dtype(input)
    work = compute_dtype(dtype, FLOATS)
    rank = ctx.rank(input)
    x, g = ctx.cast(input, work), ctx.cast(grad_out, work)
    # Per-group statistics broadcast over (N, groups, C/groups * spatial).
    mean3 = ctx.op.Unsqueeze(ctx.cast(mean, work), [2])
    rstd3 = ctx.op.Unsqueeze(ctx.cast(rstd, work), [2])
    x_hat = reshape(
        ctx,
        ctx.op.Mul(ctx.op.Sub(_grouped(ctx, x, group), mean3), rstd3),
        ctx.op.Shape(x),
        allowzero=True,
    )
    grads = [None, None, None]
    spatial = list(range(2, rank))
    if output_mask[0]:
        gw = (
            ctx.op.Mul(g, _per_channel(ctx, ctx.cast(weight, work), rank))
            if (weight is not None)
            else g
        )
        gg, xg = _grouped(ctx, gw, group), _grouped(ctx, x_hat, group)
        count = ctx.cast(
            ctx.op.Div(prod_of_dims(ctx, input, 1), ctx.const([group], torch.int64)), work
        )
        sum_g = reduce(ctx, "ReduceSum", gg, [2], 1)
        sum_gx = reduce(ctx, "ReduceSum", ctx.op.Mul(gg, xg), [2], 1)
        inner = ctx.op.Sub(ctx.op.Sub(ctx.op.Mul(gg, count), sum_g), ctx.op.Mul(xg, sum_gx))
        grad = ctx.op.Mul(ctx.op.Div(rstd3, count), inner)
        grads[0] = ctx.cast(reshape(ctx, grad, ctx.op.Shape(x), allowzero=True), dtype)
    if output_mask[1]:
        grads[1] = ctx.cast(_sum_over(ctx, ctx.op.Mul(g, x_hat), [0] + spatial), dtype)
    if output_mask[2]:
        grads[2] = ctx.cast(_sum_over(ctx, g, [0] + spatial), dtype)
    return tuple(grads)


@translates(aten.embedding_dense_backward.default)
def embedding_dense_backward(
    ctx, grad_output, indices, num_weights, padding_idx, scale_grad_by_freq
):
    dtype = ctx.dtype(grad_output)
    work = compute_dtype(dtype, {torch.float32, torch.float64})
    width = dim_value(ctx, grad_output, -1)
    rows = ctx.op.Reshape(
        ctx.cast(grad_output, work), ctx.op.Concat(ctx.const([-1], torch.int64), width, axis=0)
    )
    flat = ctx.op.Reshape(ctx.cast(indices, torch.int64), [-1])
    count = ctx.ints([num_weights])
    if scale_grad_by_freq:
        freq = ctx.op.ScatterElements(
            ctx.op.Expand(ctx.scalar(0, torch.int64), count),
            flat,
            ctx.op.Expand(ctx.scalar(1, torch.int64), ctx.op.Shape(flat)),
            axis=0,
            reduction="add",
        )
        rows = ctx.op.Div(
            rows, ctx.op.Unsqueeze(ctx.cast(ctx.op.Gather(freq, flat, axis=0), work), [1])
        )
    if isinstance(padding_idx, int) and padding_idx < 0:
        padding_idx = None
    if padding_idx is not None:
        keep = ctx.op.Not(ctx.op.Equal(flat, ctx.scalar(padding_idx, torch.int64)))
        rows = ctx.op.Where(ctx.op.Unsqueeze(keep, [1]), rows, ctx.scalar(0, work))
    zeros = ctx.op.Expand(ctx.scalar(0, work), ctx.op.Concat(count, width, axis=0))
    out = ctx.op.ScatterND(zeros, ctx.op.Unsqueeze(flat, [1]), rows, reduction="add")
    return ctx.cast(out, dtype)
