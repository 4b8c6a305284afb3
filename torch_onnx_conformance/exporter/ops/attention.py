"""scaled_dot_product_attention and the fused-kernel overloads decompositions produce.

From opset 23 a 4-D attention without dropout becomes one ONNX Attention node (which, like
torch, gives zeros for rows the mask closes completely). Below that (and
for the cases Attention cannot express) it is the MatMul-Softmax-MatMul pattern: the query is
scaled before the first product (as torch's math kernel does), masks are added or selected
before the softmax, and rows that every position is masked out of give zeros, as torch's safe
softmax does (a plain softmax would give NaN).
"""

from __future__ import annotations

import math

import torch

from torch_onnx_conformance.exporter.ops._reduce import reduce
from torch_onnx_conformance.exporter.ops._registry import translates
from torch_onnx_conformance.exporter.ops._shape import dim_value, same_size

aten = torch.ops.aten

_ATTENTION_DTYPES = frozenset({torch.float32, torch.float16})


def _work_dtype(dtype):
    """torch's CPU attention kernels accumulate half types in float32."""
    return dtype if dtype in (torch.float32, torch.float64) else torch.float32


def _swap_last(ctx, x, rank):
    perm = list(range(rank))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return ctx.op.Transpose(x, perm=perm)


def _repeat_heads(ctx, x, q):
    """GQA: repeat each key/value head so there are as many as query heads (repeat_interleave
    on dim -3), keeping symbolic sizes symbolic."""
    rank = ctx.rank(x)
    q_heads = ctx.shape(q)[-3]
    kv_heads = ctx.shape(x)[-3]
    if isinstance(q_heads, int) and isinstance(kv_heads, int) and q_heads == kv_heads:
        return x
    groups = ctx.op.Div(dim_value(ctx, q, -3), dim_value(ctx, x, -3))
    lead = ctx.op.Shape(x, start=0, end=rank - 3)
    heads = dim_value(ctx, x, -3)
    tail = ctx.op.Shape(x, start=rank - 2)
    expanded = ctx.op.Expand(
        ctx.op.Unsqueeze(x, [rank - 2]), ctx.op.Concat(lead, heads, groups, tail, axis=0)
    )
    merged = ctx.op.Concat(lead, ctx.op.Mul(heads, groups), tail, axis=0)
    return ctx.op.Reshape(expanded, merged)


def _causal_mask(ctx, query, key):
    """Top-left aligned lower-triangular (L, S) bool mask, as torch's is_causal."""
    one = ctx.scalar(1, torch.int64)
    zero = ctx.scalar(0, torch.int64)
    rows = ctx.op.Range(zero, ctx.op.Squeeze(dim_value(ctx, query, -2), [0]), one)
    cols = ctx.op.Range(zero, ctx.op.Squeeze(dim_value(ctx, key, -2), [0]), one)
    return ctx.op.GreaterOrEqual(ctx.op.Unsqueeze(rows, [1]), ctx.op.Unsqueeze(cols, [0]))


def _fully_masked(ctx, mask, work):
    """Rows (keepdims) in which the mask lets no key through."""
    if ctx.dtype(mask) == torch.bool:
        allowed = mask
    else:
        allowed = ctx.op.Not(ctx.op.Equal(ctx.cast(mask, work), ctx.scalar(float("-inf"), work)))
    any_allowed = reduce(ctx, "ReduceMax", ctx.cast(allowed, torch.int32), [-1], 1)
    return ctx.op.Equal(any_allowed, ctx.scalar(0, torch.int32))


def _scale_value(ctx, query, scale, work):
    if scale is not None:
        return ctx.scalar(float(scale), work)
    e = ctx.shape(query)[-1]
    if isinstance(e, int):
        return ctx.scalar(1.0 / math.sqrt(e) if e > 0 else float("inf"), work)
    size = ctx.cast(ctx.op.Squeeze(dim_value(ctx, query, -1), [0]), work)
    return ctx.op.Reciprocal(ctx.op.Sqrt(size))


def _attention_pattern(
    ctx,
    query,
    key,
    value,
    attn_mask,
    dropout_p,
    is_causal,
    scale,
    enable_gqa,
    want_lse=False,
    want_weights=False,
):
    """Returns (output, logsumexp or None, attention weights or None)."""
    dtype = ctx.dtype(query)
    work = _work_dtype(dtype)
    rank = ctx.rank(query)
    q, k, v = (ctx.cast(t, work) for t in (query, key, value))
    if enable_gqa:
        k, v = _repeat_heads(ctx, key, query), _repeat_heads(ctx, value, query)
        k, v = ctx.cast(k, work), ctx.cast(v, work)
    q = ctx.op.Mul(q, _scale_value(ctx, query, scale, work))
    scores = ctx.op.MatMul(q, _swap_last(ctx, k, ctx.rank(key)))
    low = ctx.scalar(float("-inf"), work)
    fully_masked = None
    if is_causal:
        scores = ctx.op.Where(_causal_mask(ctx, query, key), scores, low)
    if attn_mask is not None:
        if ctx.dtype(attn_mask) == torch.bool:
            scores = ctx.op.Where(attn_mask, scores, low)
        else:
            scores = ctx.op.Add(scores, ctx.cast(attn_mask, work))
        fully_masked = _fully_masked(ctx, attn_mask, work)
    weights = ctx.op.Softmax(scores, axis=-1)
    if fully_masked is not None:
        weights = ctx.op.Where(fully_masked, ctx.scalar(0.0, work), weights)
    if dropout_p and dropout_p > 0:
        weights = ctx.op.Dropout(
            weights, ctx.scalar(float(dropout_p), torch.float32), ctx.const(True, torch.bool)
        )
    out = ctx.op.MatMul(weights, v)
    lse = reduce(ctx, "ReduceLogSumExp", scores, [-1], 0) if want_lse else None
    del rank
    return ctx.cast(out, dtype), lse, (ctx.cast(weights, dtype) if want_weights else None)


def _can_use_attention_op(ctx, query, key, value, attn_mask, dropout_p, scale):
    if not ctx.has("Attention"):
        return False
    if any(ctx.rank(t) != 4 for t in (query, key, value)):
        return False
    if ctx.dtype(query) not in _ATTENTION_DTYPES or dropout_p:
        return False
    if attn_mask is not None and (
        ctx.rank(attn_mask) > 4 or ctx.dtype(attn_mask) not in (torch.bool, ctx.dtype(query))
    ):
        return False
    return scale is None or isinstance(scale, (int, float))


def _full_mask(ctx, attn_mask, query, key):
    """The mask expanded to [..., q_len, kv_len] where its last two dims may broadcast: the
    Attention spec takes any broadcastable mask, but onnxruntime 1.31's kernel requires the
    mask's q_len dim to equal the query's (a [B, 1, 1, S] padding mask fails at run). A dim
    the mask already has in full is left to Expand's broadcasting (a 1 in the target), so the
    graph reads the query's or the key's shape only where it must: a Shape of a key repeated
    for grouped-query attention would keep the repeat alive and stop its fusion."""
    mask_shape, q_shape, k_shape = ctx.shape(attn_mask), ctx.shape(query), ctx.shape(key)
    known = mask_shape is not None and q_shape is not None and k_shape is not None
    q_full = known and same_size(mask_shape[-2], q_shape[-2])
    kv_full = known and same_size(mask_shape[-1], k_shape[-2])
    if q_full and kv_full:
        return attn_mask
    one = ctx.const([1], torch.int64)
    target = ctx.op.Concat(
        ctx.const([1] * (ctx.rank(attn_mask) - 2), torch.int64),
        one if q_full else dim_value(ctx, query, 2),
        one if kv_full else dim_value(ctx, key, 2),
        axis=0,
    )
    return ctx.op.Expand(attn_mask, target)


def _attention_op(ctx, query, key, value, attn_mask, is_causal, scale):
    # Rows the mask closes completely come out as zeros, as in torch: the Attention spec says
    # so (an erratum to opset 23 in the onnx 1.23 spec), and onnxruntime 1.31's kernel does it.
    if attn_mask is not None:
        attn_mask = _full_mask(ctx, attn_mask, query, key)
    return ctx.op.Attention(
        query,
        key,
        value,
        attn_mask,
        is_causal=int(bool(is_causal)),
        scale=None if scale is None else float(scale),
    )


def _sdpa(
    ctx,
    query,
    key,
    value,
    attn_mask=None,
    dropout_p=0.0,
    is_causal=False,
    scale=None,
    enable_gqa=False,
):
    if is_causal and attn_mask is not None:
        raise ValueError("scaled_dot_product_attention: is_causal and attn_mask are exclusive")
    if _can_use_attention_op(ctx, query, key, value, attn_mask, dropout_p, scale):
        return _attention_op(ctx, query, key, value, attn_mask, is_causal, scale)
    return _attention_pattern(
        ctx, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa
    )[0]


@translates(aten.scaled_dot_product_attention.default)
def scaled_dot_product_attention(
    ctx,
    query,
    key,
    value,
    attn_mask=None,
    dropout_p=0.0,
    is_causal=False,
    *,
    scale=None,
    enable_gqa=False,
):
    return _sdpa(ctx, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)


def _placeholders(ctx, first: int):
    """Outputs past ``first`` that the kernels return for backward (seeds, offsets, debug
    masks): constants of their recorded shape when used, else None."""
    metas = ctx.out if isinstance(ctx.out, (list, tuple)) else ()
    used = ctx.used_outputs()
    rest = []
    for i in range(first, len(metas)):
        meta = metas[i]
        if (
            i not in used
            or not isinstance(meta, torch.Tensor)
            or not all(isinstance(d, int) for d in meta.shape)
        ):
            rest.append(None)
        else:
            rest.append(ctx.const(torch.zeros(list(meta.shape), dtype=torch.float32), meta.dtype))
    return rest


def _kernel_outputs(ctx, query, key, value, attn_mask, dropout_p, is_causal, scale):
    used = ctx.used_outputs()
    if 1 not in used:
        return _sdpa(ctx, query, key, value, attn_mask, dropout_p, is_causal, scale), None
    out, lse, _ = _attention_pattern(
        ctx, query, key, value, attn_mask, dropout_p, is_causal, scale, False, want_lse=True
    )
    return out, lse


@translates(aten._scaled_dot_product_flash_attention_for_cpu.default)
def sdpa_flash_cpu(
    ctx, query, key, value, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None
):
    return _kernel_outputs(ctx, query, key, value, attn_mask, dropout_p, is_causal, scale)


@translates(
    aten._scaled_dot_product_efficient_attention.default,
    aten._scaled_dot_product_cudnn_attention.default,
)
def sdpa_efficient(
    ctx,
    query,
    key,
    value,
    attn_bias,
    compute_log_sumexp,
    dropout_p=0.0,
    is_causal=False,
    *args,
    scale=None,
):
    out, lse = _kernel_outputs(ctx, query, key, value, attn_bias, dropout_p, is_causal, scale)
    return (out, lse, *_placeholders(ctx, 2))


@translates(aten._scaled_dot_product_flash_attention.default)
def sdpa_flash(
    ctx, query, key, value, dropout_p=0.0, is_causal=False, return_debug_mask=False, *, scale=None
):
    out, lse = _kernel_outputs(ctx, query, key, value, None, dropout_p, is_causal, scale)
    return (out, lse, *_placeholders(ctx, 2))


@translates(aten._scaled_dot_product_fused_attention_overrideable.default)
def sdpa_overrideable(
    ctx,
    query,
    key,
    value,
    attn_bias=None,
    dropout_p=0.0,
    is_causal=False,
    return_debug_mask=False,
    *,
    scale=None,
):
    out, lse = _kernel_outputs(ctx, query, key, value, attn_bias, dropout_p, is_causal, scale)
    return (out, lse, *_placeholders(ctx, 2))


@translates(aten._scaled_dot_product_attention_math.default)
def sdpa_math(
    ctx,
    query,
    key,
    value,
    attn_mask=None,
    dropout_p=0.0,
    is_causal=False,
    dropout_mask=None,
    *,
    scale=None,
    enable_gqa=False,
):
    want_weights = 1 in ctx.used_outputs()
    out, _, weights = _attention_pattern(
        ctx,
        query,
        key,
        value,
        attn_mask,
        dropout_p,
        is_causal,
        scale,
        enable_gqa,
        want_weights=want_weights,
    )
    return out, weights
