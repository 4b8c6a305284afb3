"""scaled_dot_product_attention against eager torch: masks, causality, scale, GQA, at opsets
17 and 20 (MatMul-Softmax pattern) and 23 (one ONNX Attention node), with dynamic batch and
sequence lengths checked at a second shape, and the fused-kernel overloads decompositions
produce."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.op_check import check_op, dims, dynamic, op_types, tensor_maker

r = tensor_maker(seed_stride=3, seed_counts_rank=True)

aten = torch.ops.aten
DYN = torch.export.Dim.DYNAMIC


def qkv(batch=2, heads=4, kv_heads=4, q_len=3, kv_len=5, dim=8, seed=0):
    return (
        r(batch, heads, q_len, dim, seed=seed),
        r(batch, kv_heads, kv_len, dim, seed=seed + 1),
        r(batch, kv_heads, kv_len, dim, seed=seed + 2),
    )


def bool_mask(q_len=3, kv_len=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(q_len, kv_len, generator=g) > 0.4
    mask[:, 0] = True
    return mask


CASES = {
    "plain": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v), {}),
    "causal": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), {}),
    "scale": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.3), {}),
    "gqa": (
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
        {"kv_heads": 2},
    ),
    "gqa_causal": (
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
        {"kv_heads": 1},
    ),
    "bool_mask": (
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
        {"mask": "bool"},
    ),
    "float_mask": (
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
        {"mask": "float"},
    ),
    "float_mask_gqa_scale": (
        lambda q, k, v, m: F.scaled_dot_product_attention(
            q, k, v, attn_mask=m, scale=0.5, enable_gqa=True
        ),
        {"mask": "float", "kv_heads": 2},
    ),
}


def _inputs(options, seed=0, batch=2, q_len=3, kv_len=5):
    q, k, v = qkv(
        batch=batch, kv_heads=options.get("kv_heads", 4), q_len=q_len, kv_len=kv_len, seed=seed
    )
    mask = options.get("mask")
    if mask == "bool":
        return [q, k, v, bool_mask(q_len, kv_len, seed)]
    if mask == "float":
        return [q, k, v, r(batch, 1, q_len, kv_len, seed=seed + 9)]
    return [q, k, v]


@pytest.mark.parametrize("opset", [17, 20, 23])
@pytest.mark.parametrize("name", list(CASES))
def test_sdpa(name, opset):
    fn, options = CASES[name]
    program = check_op(fn, _inputs(options), opset=opset, rtol=1e-4, atol=1e-5)
    ops = op_types(program)
    assert ("Attention" in ops) == (opset >= 23)
    assert ("Softmax" in ops) == (opset < 23)


@pytest.mark.parametrize("opset", [20, 23])
@pytest.mark.parametrize("name", ["causal", "bool_mask", "float_mask_gqa_scale"])
def test_sdpa_dynamic_batch_and_sequence(name, opset):
    fn, options = CASES[name]
    batch, q_len, kv_len = DYN, DYN, DYN
    args = _inputs(options)
    specs = [{0: batch, 2: q_len}, {0: batch, 2: kv_len}, {0: batch, 2: kv_len}]
    if options.get("mask") == "bool":
        specs.append({0: q_len, 1: kv_len})
    elif options.get("mask") == "float":
        specs.append({0: batch, 2: q_len, 3: kv_len})
    check_op(
        fn,
        args,
        opset=opset,
        dynamic_shapes=dims(*specs),
        second_args=_inputs(options, seed=5, batch=3, q_len=6, kv_len=4),
        rtol=1e-4,
        atol=1e-5,
    )


@pytest.mark.parametrize("opset", [20, 23])
def test_sdpa_fully_masked_rows_give_zeros(opset):
    q, k, v = qkv()
    mask = bool_mask()
    mask[1] = False
    float_mask = torch.zeros(3, 5).masked_fill(~mask, float("-inf"))
    for m in (mask, float_mask):
        check_op(
            lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
            [q, k, v, m],
            opset=opset,
            rtol=1e-4,
            atol=1e-5,
        )


def test_sdpa_three_dim_and_half():
    q, k, v = r(4, 3, 8), r(4, 5, 8, seed=1), r(4, 5, 8, seed=2)
    check_op(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        [q, k, v],
        opset=23,
        rtol=1e-4,
        atol=1e-5,
    )
    q, k, v = (t.to(torch.float16) for t in qkv())
    check_op(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v), [q, k, v], rtol=1e-2, atol=1e-2
    )


def test_sdpa_dropout_keeps_shape():
    q, k, v = qkv()
    check_op(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, dropout_p=0.3),
        [q, k, v],
        compare_values=False,
    )


def test_fused_kernel_overloads():
    q, k, v = qkv()
    check_op(
        lambda q, k, v: aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, True),
        [q, k, v],
        rtol=1e-4,
        atol=1e-5,
    )
    mask = r(2, 4, 3, 5, seed=7)
    check_op(
        lambda q, k, v, m: aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, attn_mask=m, scale=0.2
        )[0],
        [q, k, v, mask],
        rtol=1e-4,
        atol=1e-5,
    )
    check_op(
        lambda q, k, v: aten._scaled_dot_product_attention_math(q, k, v, is_causal=True),
        [q, k, v],
        rtol=1e-4,
        atol=1e-5,
    )


class _TinyEncoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = torch.nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x, padding):
        return self.attention(x, x, x, key_padding_mask=padding, need_weights=False)[0]


def test_multihead_attention_module():
    model = _TinyEncoder()
    x = r(2, 5, 8)
    padding = torch.zeros(2, 5, dtype=torch.bool)
    padding[1, 3:] = True
    second = torch.zeros(3, 7, dtype=torch.bool)
    second[0, 5:] = True
    check_op(
        model,
        [x, padding],
        dynamic_shapes=({0: DYN, 1: DYN}, {0: DYN, 1: DYN}),
        second_args=[r(3, 7, 8, seed=1), second],
        rtol=1e-4,
        atol=1e-5,
    )


@pytest.mark.parametrize("dynamic_batch", [False, True])
def test_attention_op_takes_a_padding_mask_that_broadcasts_over_queries(dynamic_batch):
    # A [B, 1, 1, S] padding mask: onnxruntime's Attention kernel wants the q_len dim in full.
    q, k, v = qkv()
    keep = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    keep[1, ..., 3:] = False
    for mask in (keep, torch.zeros(2, 1, 1, 5).masked_fill(~keep, float("-inf"))):
        check_op(
            lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
            [q, k, v, mask],
            opset=23,
            rtol=1e-4,
            atol=1e-5,
            dynamic_shapes=dynamic(q, k, v, mask) if dynamic_batch else None,
        )
