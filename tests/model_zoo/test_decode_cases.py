"""The zoo's decoder cases with a KV cache: a DynamicCache in and out, a greedy prompt."""

from __future__ import annotations

import pytest
import torch

from torch_onnx_conformance import model_zoo
from torch_onnx_conformance.exporter.diagnostics import generation

transformers = pytest.importorskip("transformers")

DECODE_CASES = [
    case.name
    for case in model_zoo.cases("full", family="transformers-decoder")
    if case.name.endswith("-kv")
]
#: Decode cases whose cache holds state-space (mamba) layers, passed as ``cache_params``.
STATE_SPACE_CASES = [
    "transformers/mamba-kv",
    "transformers/mamba2-kv",
    "transformers/falcon_mamba-kv",
]
ATTENTION_CASES = [name for name in DECODE_CASES if name not in STATE_SPACE_CASES]


def test_every_decoder_family_has_a_decode_case():
    families = {name.split("/", 1)[1].removesuffix("-kv") for name in DECODE_CASES}
    assert {
        "gpt2",
        "gpt-neox",
        "llama",
        "mistral",
        "qwen2",
        "qwen3",
        "phi3",
        "gemma2",
        "gemma3",
    } | {"falcon", "opt", "mamba", "mamba2", "falcon_mamba"} <= families
    assert all(model_zoo.get(name).greedy_prompt is not None for name in DECODE_CASES)


@pytest.mark.parametrize("name", ATTENTION_CASES)
def test_decode_case_takes_and_returns_the_cache_object(name):
    case = model_zoo.get(name)
    module, args, kwargs = case.build()
    cache = kwargs["past_key_values"]
    expected_class = transformers.StaticCache if "-static-" in name else transformers.DynamicCache
    assert type(cache) is expected_class
    past, sequence = case.sizes["past_sequence"], case.sizes["sequence"]
    assert cache.get_seq_length() == past
    _, second = case.second_inputs(args, kwargs)  # before eager grows the cache in place
    with torch.no_grad():
        logits, present = module(*args, **kwargs)
    assert logits.shape[:2] == (case.sizes["batch"], sequence)
    assert present.get_seq_length() == past + sequence
    assert second["past_key_values"].get_seq_length() == case.second_sizes["past_sequence"]
    assert second["input_ids"].shape == (case.second_sizes["batch"], case.second_sizes["sequence"])


def test_greedy_prompt_starts_from_an_empty_cache_of_the_model_layout():
    case = model_zoo.get("transformers/gemma2-kv")  # hybrid: sliding and full layers
    prompt = case.greedy_prompt()
    empty = prompt["past_key_values"]
    assert empty.get_seq_length() == 0
    kinds = {type(layer).__name__ for layer in empty.layers}
    assert kinds == {"DynamicSlidingWindowLayer", "DynamicLayer"}
    module = case.make_module()
    tokens = generation.greedy_tokens(module, **prompt)
    assert tokens.shape == (2, generation.NEW_TOKENS)


@pytest.mark.slow
def test_greedy_generation_of_a_zoo_case_through_its_export():
    from torch_onnx_conformance import exporter

    case = model_zoo.get("transformers/gpt2-kv")
    module, args, kwargs = case.build()
    program = exporter.export(module, args, kwargs=kwargs, dynamic_shapes=case.dynamic_shapes)
    check = generation.check_greedy(module, program, **case.greedy_prompt())
    assert check.problem is None, check.problem


@pytest.mark.parametrize("name", STATE_SPACE_CASES)
def test_state_space_decode_case_steps_one_token_on_its_conv_and_ssm_states(name):
    case = model_zoo.get(name)
    module, args, kwargs = case.build()
    cache = kwargs["cache_params"]
    layers = {type(layer).__name__ for layer in cache.layers}
    assert layers == {"LinearAttentionLayer"}
    assert kwargs["input_ids"].shape == (case.sizes["batch"], 1)
    before = cache.layers[0].recurrent_states[0].clone()
    with torch.no_grad():
        logits, present = module(*args, **kwargs)
    assert logits.shape[:2] == (case.sizes["batch"], 1)
    assert not torch.equal(present.layers[0].recurrent_states[0], before)
    prompt = case.greedy_prompt()
    assert prompt["cache_argument"] == "cache_params"
    tokens = generation.greedy_tokens(module, **prompt)
    assert tokens.shape == (2, generation.NEW_TOKENS)
