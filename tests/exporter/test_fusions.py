"""The rewrites into opset 23's fused ops (torch_onnx_conformance/exporter/_fusions.py): each fires on the decomposed
form transformers writes, the fused graph matches eager, a form the fused op cannot express is
left alone, and below opset 23 nothing is fused (RMSNorm takes the form onnxruntime fuses itself)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree
from torch import nn

from tests.op_check import check_op, op_types, tensor_maker
from torch_onnx_conformance import exporter, model_zoo

r = tensor_maker(seed_stride=5)
DYN = torch.export.Dim.DYNAMIC


class HFStyleRMSNorm(nn.Module):
    """transformers' LlamaRMSNorm: float32 statistics, the weight applied in the input dtype."""

    def __init__(self, size, dim=-1, square="pow"):
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, size))
        self.dim = dim
        self.square = square

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        squared = x.pow(2) if self.square == "pow" else x * x
        x = x * torch.rsqrt(squared.mean(self.dim, keepdim=True) + 1e-6)
        return self.weight.to(dtype) * x.to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class HFStyleRotary(nn.Module):
    """transformers' rotary embedding: cos/sin of position * inverse frequency, the frequencies
    repeated (cat(freqs, freqs)), applied with rotate_half to a (batch, heads, seq, size) x."""

    def __init__(self, size, repeat_halves=True):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, size, 2) / size))
        self.repeat_halves = repeat_halves

    def forward(self, x):
        positions = torch.arange(x.shape[2], dtype=torch.float32)
        freqs = positions[:, None] * self.inv_freq[None, :]
        # The counter-example shifts the second half's angle: not what RotaryEmbedding computes.
        emb = torch.cat((freqs, freqs if self.repeat_halves else freqs + 0.5), dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        return x * cos + rotate_half(x) * sin


def repeat_kv(x, groups):
    batch, heads, length, size = x.shape
    x = x[:, :, None, :, :].expand(batch, heads, groups, length, size)
    return x.reshape(batch, heads * groups, length, size)


class HFStyleGQA(nn.Module):
    def __init__(self, causal=False):
        super().__init__()
        self.causal = causal

    def forward(self, q, k, v):
        groups = q.shape[1] // k.shape[1]
        return F.scaled_dot_product_attention(
            q, repeat_kv(k, groups), repeat_kv(v, groups), is_causal=self.causal
        )


def fused(program, op_type):
    return op_types(program).count(op_type)


def onnxruntime_fused_ops(program, tmp_path) -> list[str]:
    """The op types of the graph onnxruntime runs after its own fusions (ORT_ENABLE_ALL)."""
    import onnx
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    options.log_severity_level = 3
    ort.InferenceSession(
        program.model_proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return [node.op_type for node in onnx.load(options.optimized_model_filepath).graph.node]


def export_rms_norm(square, dtype, opset):
    x = r(2, 5, 16, dtype=dtype)
    tol = 1e-5 if dtype == torch.float32 else 2e-3
    return check_op(
        HFStyleRMSNorm(16, square=square),
        (x,),
        opset=opset,
        optimize=True,
        dynamic_shapes=({0: DYN, 1: DYN},),
        second_args=(r(3, 2, 16, dtype=dtype, seed=1),),
        rtol=tol,
        atol=tol,
    )


@pytest.mark.parametrize("square", ["pow", "mul"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_rms_norm_written_out_becomes_rmsnormalization(square, dtype):
    program = export_rms_norm(square, dtype, opset=23)
    assert fused(program, "RMSNormalization") == 1
    assert "ReduceMean" not in op_types(program)


@pytest.mark.parametrize("square", ["pow", "mul"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_rms_norm_below_opset_23_takes_the_form_onnxruntime_fuses(square, dtype, tmp_path):
    program = export_rms_norm(square, dtype, opset=20)
    # transformers' rsqrt (Reciprocal, Mul) becomes the Div onnxruntime's fusion looks for.
    assert "Reciprocal" not in op_types(program)
    assert "Div" in op_types(program) and "Pow" in op_types(program)
    assert "SimplifiedLayerNormalization" in onnxruntime_fused_ops(program, tmp_path)


class PlainRMSNorm(nn.Module):
    def __init__(self, size):
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, size, dtype=torch.float64))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6))


def test_rms_norm_in_double_keeps_double_statistics():
    x = r(2, 5, 16, dtype=torch.float64)
    program = check_op(PlainRMSNorm(16), (x,), opset=23, optimize=True, rtol=1e-12, atol=1e-12)
    [node] = [n for n in program.model.graph if n.op_type == "RMSNormalization"]
    assert node.attributes["stash_type"].as_int() == 11  # DOUBLE


class BFloat16Inside(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner.to(torch.bfloat16)

    def forward(self, x):
        return self.inner(x.to(torch.bfloat16)).to(torch.float32)


def test_rms_norm_in_bfloat16_is_left_alone():
    # onnxruntime has no bfloat16 RMSNormalization kernel.
    program = check_op(
        BFloat16Inside(HFStyleRMSNorm(16)),
        (r(2, 5, 16),),
        opset=23,
        optimize=True,
        rtol=2e-2,
        atol=2e-2,
    )
    assert fused(program, "RMSNormalization") == 0


def test_rms_norm_over_another_axis_is_left_alone():
    program = check_op(HFStyleRMSNorm(5, dim=1), (r(2, 5, 5),), opset=23, optimize=True)
    assert fused(program, "RMSNormalization") == 0


def test_rms_norm_is_not_fused_below_opset_23():
    program = check_op(HFStyleRMSNorm(16), (r(2, 5, 16),), opset=20, optimize=True)
    assert fused(program, "RMSNormalization") == 0


def test_rms_norm_over_another_axis_keeps_its_form_below_opset_23():
    program = check_op(HFStyleRMSNorm(5, dim=1), (r(2, 5, 5),), opset=20, optimize=True)
    assert "Reciprocal" in op_types(program)


@pytest.mark.parametrize(
    "shapes, second",
    [(None, None), (({0: DYN, 2: DYN},), r(3, 4, 6, 8, seed=1))],
    ids=["static", "dynamic"],
)
def test_rotate_half_becomes_rotary_embedding(shapes, second):
    program = check_op(
        HFStyleRotary(8),
        (r(2, 4, 5, 8),),
        opset=23,
        optimize=True,
        dynamic_shapes=shapes,
        second_args=None if second is None else (second,),
    )
    assert fused(program, "RotaryEmbedding") == 1
    assert "Neg" not in op_types(program)


def test_rotate_half_with_tables_of_unequal_halves_is_left_alone():
    program = check_op(
        HFStyleRotary(8, repeat_halves=False), (r(2, 4, 5, 8),), opset=23, optimize=True
    )
    assert fused(program, "RotaryEmbedding") == 0


class HFStyleInterleavedRotary(nn.Module):
    """transformers' Cohere rotary embedding: each angle repeated in place
    (repeat_interleave(freqs, 2, -1)), each even/odd pair of x turned by it
    (stack((-x[..., 1::2], x[..., ::2]), -1).flatten(-2))."""

    def __init__(self, size, tables="interleaved"):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, size, 2) / size))
        self.tables = tables

    def forward(self, x):
        positions = torch.arange(x.shape[2], dtype=torch.float32)
        freqs = positions[:, None] * self.inv_freq[None, :]
        if self.tables == "interleaved":
            emb = torch.repeat_interleave(freqs, 2, dim=-1)
        else:  # the near-miss: rotate-half tables ([t, t]) under the pairwise rotation
            emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        rotated = torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)
        return x * cos + rotated * sin


@pytest.mark.parametrize(
    "shapes, second",
    [(None, None), (({0: DYN, 2: DYN},), r(3, 4, 6, 8, seed=1))],
    ids=["static", "dynamic"],
)
def test_interleaved_rotation_becomes_interleaved_rotary_embedding(shapes, second):
    program = check_op(
        HFStyleInterleavedRotary(8),
        (r(2, 4, 5, 8),),
        opset=23,
        optimize=True,
        dynamic_shapes=shapes,
        second_args=None if second is None else (second,),
    )
    [node] = [n for n in program.model.graph if n.op_type == "RotaryEmbedding"]
    assert node.attributes["interleaved"].as_int() == 1
    assert "Neg" not in op_types(program)


@pytest.mark.parametrize("shapes", [None, ({0: DYN, 2: DYN},)], ids=["static", "dynamic"])
def test_interleaved_rotation_with_rotate_half_tables_is_left_alone(shapes):
    # Same rotation, but the angles repeat as two halves: pair i would need angle i for both
    # of its elements, and RotaryEmbedding cannot express what this computes.
    program = check_op(
        HFStyleInterleavedRotary(8, tables="halves"),
        (r(2, 4, 5, 8),),
        opset=23,
        optimize=True,
        dynamic_shapes=shapes,
        second_args=None if shapes is None else (r(3, 4, 6, 8, seed=1),),
    )
    assert fused(program, "RotaryEmbedding") == 0


def test_interleaved_rotation_is_not_fused_below_opset_23():
    program = check_op(HFStyleInterleavedRotary(8), (r(2, 4, 5, 8),), opset=20, optimize=True)
    assert fused(program, "RotaryEmbedding") == 0


@pytest.mark.parametrize("causal", [False, True])
def test_repeated_kv_heads_feed_attention_directly(causal):
    q, k, v = r(2, 4, 5, 8), r(2, 2, 5, 8, seed=1), r(2, 2, 5, 8, seed=2)
    program = check_op(
        HFStyleGQA(causal),
        (q, k, v),
        opset=23,
        optimize=True,
        dynamic_shapes=({0: DYN, 2: DYN}, {0: DYN, 2: DYN}, {0: DYN, 2: DYN}),
        second_args=(r(3, 4, 6, 8, seed=3), r(3, 2, 6, 8, seed=4), r(3, 2, 6, 8, seed=5)),
    )
    assert fused(program, "Attention") == 1
    assert "Expand" not in op_types(program)
    attention = next(n for n in program.model.graph if n.op_type == "Attention")
    assert attention.inputs[1].shape[1] == 2  # the two key heads, not four copies


class NewGELU(nn.Module):
    """GPT-2's gelu_new, as transformers writes it."""

    def __init__(self, cubic=0.044715):
        super().__init__()
        self.cubic = cubic

    def forward(self, x):
        inner = math.sqrt(2.0 / math.pi) * (x + self.cubic * torch.pow(x, 3.0))
        return 0.5 * x * (1.0 + torch.tanh(inner))


@pytest.mark.parametrize("opset", [18, 20, 23])
def test_tanh_gelu_written_out_becomes_gelu_from_opset_20(opset):
    program = check_op(NewGELU(), (r(2, 5, 16),), opset=opset, optimize=True)
    assert fused(program, "Gelu") == (1 if opset >= 20 else 0)


def test_a_different_cubic_coefficient_is_not_gelu():
    program = check_op(NewGELU(cubic=0.05), (r(2, 5, 16),), opset=23, optimize=True)
    assert fused(program, "Gelu") == 0


class ConstantMaskAttention(nn.Module):
    def __init__(self, mask):
        super().__init__()
        self.register_buffer("mask", mask)

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask)


@pytest.mark.parametrize("opset", [20, 23])
def test_a_constant_mask_that_masks_nothing_is_dropped(opset):
    q, k, v = r(2, 4, 5, 8), r(2, 4, 5, 8, seed=1), r(2, 4, 5, 8, seed=2)
    program = check_op(
        ConstantMaskAttention(torch.ones(5, 5, dtype=torch.bool)),
        (q, k, v),
        opset=opset,
        optimize=True,
    )
    # Neither the mask nor the guard for fully masked rows is left.
    assert "Where" not in op_types(program)
    if opset == 23:
        attention = next(n for n in program.model.graph if n.op_type == "Attention")
        assert len(attention.inputs) == 3


@pytest.mark.parametrize("opset", [20, 23])
def test_a_constant_mask_with_a_closed_row_keeps_masking(opset):
    mask = torch.ones(5, 5, dtype=torch.bool)
    mask[2] = False  # torch gives zeros for that row
    q, k, v = r(2, 4, 5, 8), r(2, 4, 5, 8, seed=1), r(2, 4, 5, 8, seed=2)
    program = check_op(ConstantMaskAttention(mask), (q, k, v), opset=opset, optimize=True)
    if opset == 23:  # Attention itself gives zeros for the closed row
        attention = next(n for n in program.model.graph if n.op_type == "Attention")
        assert len(attention.inputs) == 4
    else:  # the guard that zeroes the row after the softmax
        assert "Where" in op_types(program)


def _export_case(name, opset):
    case = model_zoo.get(name)
    module, args, kwargs = case.build()
    program = exporter.export(
        module, args, kwargs=kwargs, dynamic_shapes=case.dynamic_shapes, opset_version=opset
    )
    for inputs, extra in ((args, kwargs), case.second_inputs(args, kwargs)):
        # The program flattens inputs (a KV cache too) the way the export did; it runs first
        # because eager appends to a DynamicCache in place.
        got = program(*inputs, **extra)
        with torch.no_grad():
            expected = pytree.tree_leaves(module(*inputs, **extra))
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)
    return program


@pytest.mark.parametrize("name", ["transformers/llama", "transformers/llama-kv"])
def test_llama_at_opset_23_uses_the_fused_ops_and_matches_eager(name):
    program = _export_case(name, 23)
    layers = 2
    assert fused(program, "RMSNormalization") == 2 * layers + 1
    assert fused(program, "RotaryEmbedding") == 2 * layers
    assert fused(program, "Attention") == layers
    # Grouped-query attention takes the two key/value heads as they are, not repeated to four.
    for node in program.model.graph:
        if node.op_type == "Attention":
            assert [node.inputs[i].shape[1] for i in range(3)] == [4, 2, 2]


def test_llama_below_opset_23_is_not_fused():
    program = _export_case("transformers/llama", 20)
    assert not {"RMSNormalization", "RotaryEmbedding", "Attention"} & set(op_types(program))


def test_cohere_interleaved_rotary_becomes_rotary_embedding_and_matches_eager():
    transformers = pytest.importorskip("transformers")
    config = transformers.CohereConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        eos_token_id=None,
    )
    torch.manual_seed(0)
    model = transformers.CohereModel(config).eval()
    ids = torch.randint(0, 64, (2, 7))
    program = exporter.export(
        model,
        (ids,),
        kwargs={"use_cache": False},
        dynamic_shapes={"input_ids": {0: DYN, 1: DYN}, "use_cache": None},
        opset_version=23,
    )
    rotaries = [n for n in program.model.graph if n.op_type == "RotaryEmbedding"]
    assert len(rotaries) == 2 * config.num_hidden_layers  # query and key of each layer
    assert all(n.attributes["interleaved"].as_int() == 1 for n in rotaries)
    for inputs in (ids, torch.randint(0, 64, (3, 9), generator=torch.Generator().manual_seed(1))):
        with torch.no_grad():
            expected = model(inputs, use_cache=False).last_hidden_state
        [got] = program(inputs, use_cache=False)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
