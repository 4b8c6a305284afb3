"""transformers KV caches as inputs and outputs: stable names, one graph for prefill and decode."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from torch_onnx_conformance import exporter
from torch_onnx_conformance.exporter.diagnostics import generation
from torch_onnx_conformance.model_zoo.transformers_cases import MAMBA_CONFIG

transformers = pytest.importorskip("transformers")

_LLAMA = {
    "vocab_size": 128,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 64,
    "max_position_embeddings": 64,
}
_SHAPES = {
    "input_ids": {0: "batch", 1: "sequence"},
    "attention_mask": {0: "batch", 1: "total_sequence"},
    "past_key_values": {0: "batch", 2: "past_sequence"},
    "use_cache": None,
}


def _llama() -> nn.Module:
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**_LLAMA)).eval()


def _prefilled(model: nn.Module, batch: int, past: int) -> tuple[torch.Tensor, object]:
    prompt = torch.randint(3, 128, (batch, past), generator=torch.Generator().manual_seed(past))
    with torch.no_grad():
        return prompt, model(input_ids=prompt, use_cache=True).past_key_values


def _step_inputs(cache, batch: int, past: int, sequence: int) -> dict:
    ids = torch.randint(
        3, 128, (batch, sequence), generator=torch.Generator().manual_seed(sequence)
    )
    return {
        "input_ids": ids,
        "attention_mask": torch.ones(batch, past + sequence, dtype=torch.int64),
        "past_key_values": cache,
        "use_cache": True,
    }


def _export_step(model: nn.Module, cache, shapes: dict) -> exporter.ONNXProgram:
    """One graph for every step, exported at a 3-token step on a 5-token cache of 2 rows."""
    return exporter.export(model, (), kwargs=_step_inputs(cache, 2, 5, 3), dynamic_shapes=shapes)


def _assert_greedy_matches(model: nn.Module, program, prompt: torch.Tensor, example) -> None:
    """8 greedy tokens from ``prompt`` on an empty cache laid out like ``example``."""
    check = generation.check_greedy(
        model,
        program,
        prompt,
        torch.ones_like(prompt),
        generation.empty_cache_like(example),
        use_cache=True,
    )
    assert check.problem is None, check.problem
    assert check.onnx.shape == (prompt.shape[0], generation.NEW_TOKENS)
    assert check.onnx.shape == (prompt.shape[0], generation.NEW_TOKENS)


def _io_names(program: exporter.ONNXProgram) -> tuple[list[str], list[str]]:
    graph = program.model.graph
    return [v.name for v in graph.inputs], [v.name for v in graph.outputs]


@pytest.fixture(scope="module")
def llama_program():
    model = _llama()
    _, cache = _prefilled(model, 2, 5)
    return model, _export_step(model, cache, _SHAPES)


def test_cache_tensors_get_stable_names(llama_program):
    _, program = llama_program
    inputs, outputs = _io_names(program)
    assert inputs == [
        "input_ids",
        "attention_mask",
        "past_key_values.0.key",
        "past_key_values.0.value",
        "past_key_values.1.key",
        "past_key_values.1.value",
    ]
    assert outputs == [
        "logits",
        "present.0.key",
        "present.0.value",
        "present.1.key",
        "present.1.value",
    ]
    dims = [str(d) for d in program.model.graph.inputs[2].shape]
    assert dims[0] == "batch" and dims[2] == "past_sequence"


@pytest.mark.parametrize(
    ("batch", "past", "sequence"),
    [(3, 0, 4), (1, 6, 1), (2, 4, 2)],
    ids=["prefill-past-0", "decode-sequence-1", "chunk"],
)
def test_one_graph_serves_prefill_and_decode(llama_program, batch, past, sequence):
    model, program = llama_program
    if past:
        _, cache = _prefilled(model, batch, past)
    else:
        _, example = _prefilled(model, 1, 2)
        cache = generation.empty_cache_like(example, batch)
    assert_step_matches_eager(model, program, cache, _step_inputs(cache, batch, past, sequence))


def assert_step_matches_eager(model: nn.Module, program, cache, inputs: dict) -> None:
    """One step through the graph gives eager's logits and DynamicCache (a copy of ``cache``
    in eager: the forward updates it in place)."""
    with torch.no_grad():
        expected = model(**{**inputs, "past_key_values": copy.deepcopy(cache)})
    got = program.unflatten_outputs(program(**inputs))
    assert type(got.past_key_values) is transformers.DynamicCache
    torch.testing.assert_close(got.logits, expected.logits, rtol=1e-4, atol=1e-5)
    assert len(got.past_key_values.layers) == len(expected.past_key_values.layers)
    length = inputs["attention_mask"].shape[1]
    for ours, theirs in zip(got.past_key_values.layers, expected.past_key_values.layers):
        assert ours.keys.shape[2] == length
        torch.testing.assert_close(ours.keys, theirs.keys, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(ours.values, theirs.values, rtol=1e-4, atol=1e-5)


def test_greedy_generation_through_the_graph_matches_eager(llama_program):
    model, program = llama_program
    prompt, example = _prefilled(model, 2, 5)
    _assert_greedy_matches(model, program, prompt, example)


class _CacheUpdate(nn.Module):
    """Appends new keys/values to every layer and returns the cache with a sum of its keys."""

    def forward(self, key: torch.Tensor, cache):
        for index in range(len(cache.layers)):
            cache.update(key, key * 2, index)
        return key.sum(), cache


def _cache(layers: int, batch: int, past: int):
    data = [(torch.randn(batch, 2, past, 4), torch.randn(batch, 2, past, 4)) for _ in range(layers)]
    return transformers.DynamicCache(ddp_cache_data=data)


def test_dynamic_shapes_in_torch_export_form_per_flattened_tensor():
    axes = {0: torch.export.Dim("batch"), 2: torch.export.Dim("past")}
    program = exporter.export(
        _CacheUpdate().eval(),
        (torch.randn(2, 2, 3, 4), _cache(2, 2, 5)),
        dynamic_shapes=({0: torch.export.Dim("batch")}, [axes] * 4),
    )
    assert [v.name for v in program.model.graph.inputs][1:] == [
        "cache.0.key",
        "cache.0.value",
        "cache.1.key",
        "cache.1.value",
    ]
    key, cache = torch.randn(3, 2, 3, 4), _cache(2, 3, 7)
    total, present = program.unflatten_outputs(program(key, cache))
    expected_total, expected = _CacheUpdate()(key, copy.deepcopy(cache))
    torch.testing.assert_close(total, expected_total)
    torch.testing.assert_close(present.layers[1].values, expected.layers[1].values)


def test_cache_dynamic_shapes_of_wrong_length_is_a_clear_error():
    with pytest.raises(exporter.InvalidExportArgumentsError, match="one axes dict for all"):
        exporter.export(
            _CacheUpdate().eval(),
            (torch.randn(2, 2, 3, 4), _cache(2, 2, 5)),
            dynamic_shapes=(None, [None] * 3),
        )


def test_user_input_and_output_names_win_over_cache_names():
    names = ["k", "a0", "b0", "a1", "b1"]
    program = exporter.export(
        _CacheUpdate().eval(),
        (torch.randn(2, 2, 3, 4), _cache(2, 2, 5)),
        input_names=names,
        output_names=["total", "p0", "q0", "p1", "q1"],
    )
    assert [v.name for v in program.model.graph.inputs] == names
    assert [v.name for v in program.model.graph.outputs][0] == "total"


def test_a_sliding_layer_past_its_window_is_refused():
    cache = transformers.DynamicCache()
    layer = transformers.cache_utils.DynamicSlidingWindowLayer(sliding_window=4)
    layer.update(torch.randn(1, 2, 6, 4), torch.randn(1, 2, 6, 4))  # keeps 3 of 6 tokens
    cache.layers = [layer]
    with pytest.raises(exporter.OnnxExporterError, match="window has slid"):
        exporter.export(_CacheUpdate().eval(), (torch.randn(1, 2, 1, 4), cache))


class _EncoderDecoderUpdate(nn.Module):
    """Appends to the self-attention part and reads the cross-attention part, like a decoder."""

    def forward(self, key: torch.Tensor, past_key_values):
        past_key_values.self_attention_cache.update(key, key + 1, 0)
        cross = past_key_values.cross_attention_cache.layers[0].keys
        return cross.sum(dim=2), past_key_values


def test_encoder_decoder_cache_names_its_two_parts():
    cache = transformers.EncoderDecoderCache(_cache(1, 2, 5), _cache(1, 2, 7))
    program = exporter.export(
        _EncoderDecoderUpdate().eval(),
        (torch.randn(2, 2, 1, 4), cache),
        dynamic_shapes=(
            {0: "batch"},
            [[{0: "batch", 2: "past_sequence"}] * 2, [{0: "batch", 2: "encoder_sequence"}] * 2],
        ),
    )
    assert [v.name for v in program.model.graph.inputs][1:] == [
        "past_key_values.0.decoder.key",
        "past_key_values.0.decoder.value",
        "past_key_values.0.encoder.key",
        "past_key_values.0.encoder.value",
    ]
    assert [v.name for v in program.model.graph.outputs][1:] == [
        "present.0.decoder.key",
        "present.0.decoder.value",
        "present.0.encoder.key",
        "present.0.encoder.value",
    ]
    key = torch.randn(3, 2, 1, 4)
    cache = transformers.EncoderDecoderCache(_cache(1, 3, 4), _cache(1, 3, 9))
    _, present = program.unflatten_outputs(program(key, cache))
    _, expected = _EncoderDecoderUpdate()(key, copy.deepcopy(cache))
    assert type(present) is transformers.EncoderDecoderCache
    torch.testing.assert_close(
        present.self_attention_cache.layers[0].values,
        expected.self_attention_cache.layers[0].values,
    )


# --- mamba: conv and SSM states as cache_params -----------------------------------------------

_MAMBA_SHAPES = {
    "input_ids": {0: "batch"},
    "attention_mask": {0: "batch", 1: "total_sequence"},
    "cache_params": {0: "batch"},
    "use_cache": None,
}


def _mamba_states(model: nn.Module, batch: int, past: int):
    prompt = torch.randint(3, 128, (batch, past), generator=torch.Generator().manual_seed(past))
    with torch.no_grad():
        return prompt, model(input_ids=prompt, use_cache=True).cache_params


def _mamba_step(cache, batch: int, past: int) -> dict:
    return {
        "input_ids": torch.randint(3, 128, (batch, 1), generator=torch.Generator().manual_seed(1)),
        "attention_mask": torch.ones(batch, past + 1, dtype=torch.int64),
        "cache_params": cache,
        "use_cache": True,
    }


@pytest.fixture(scope="module")
def mamba_program():
    torch.manual_seed(0)
    model = transformers.MambaForCausalLM(transformers.MambaConfig(**MAMBA_CONFIG)).eval()
    _, cache = _mamba_states(model, 2, 5)
    program = exporter.export(
        model, (), kwargs=_mamba_step(cache, 2, 5), dynamic_shapes=_MAMBA_SHAPES
    )
    return model, program


def test_mamba_states_get_stable_names(mamba_program):
    _, program = mamba_program
    inputs, outputs = _io_names(program)
    states = [f"{layer}.{kind}" for layer in (0, 1) for kind in ("conv", "ssm")]
    assert inputs == ["input_ids", "attention_mask", *(f"cache_params.{s}" for s in states)]
    assert outputs == ["logits", *(f"present.{s}" for s in states)]


@pytest.mark.parametrize(("batch", "past"), [(3, 4), (1, 9)], ids=str)
def test_mamba_decode_steps_match_eager(mamba_program, batch, past):
    model, program = mamba_program
    _, cache = _mamba_states(model, batch, past)
    inputs = _mamba_step(cache, batch, past)
    with torch.no_grad():
        expected = model(**{**inputs, "cache_params": copy.deepcopy(cache)})
    got = program.unflatten_outputs(program(**inputs))
    torch.testing.assert_close(got.logits, expected.logits, rtol=1e-4, atol=1e-5)
    for ours, theirs in zip(got.cache_params.layers, expected.cache_params.layers):
        torch.testing.assert_close(ours.conv_states[0], theirs.conv_states[0])
        torch.testing.assert_close(ours.recurrent_states[0], theirs.recurrent_states[0])


def test_greedy_generation_through_the_mamba_graph_matches_eager(mamba_program):
    model, program = mamba_program
    prompt, _ = _mamba_states(model, 2, 6)
    with torch.no_grad():  # the graph decodes one token: eager reads all but the last
        cache = model(input_ids=prompt[:, :-1], use_cache=True).cache_params
    check = generation.check_greedy(
        model,
        program,
        prompt[:, -1:],
        torch.ones_like(prompt),
        cache,
        cache_argument="cache_params",
        use_cache=True,
    )
    assert check.problem is None, check.problem


def test_a_mamba_layer_recording_its_past_is_refused(mamba_program):
    model, program = mamba_program
    _, cache = _mamba_states(model, 1, 3)
    cache.layers[0].record_past = True
    with pytest.raises(exporter.InvalidExportArgumentsError, match="recording its past"):
        program(**_mamba_step(cache, 1, 3))


# --- StaticCache: full-length tensors written at a cache position -------------------------------

_MAX_CACHE = 16
_STATIC_SHAPES = {**_SHAPES, "past_key_values": {0: "batch"}}


def _static_prefilled(model: nn.Module, batch: int, past: int, config=None):
    """A StaticCache of ``_MAX_CACHE`` slots (its sliding layers: their window) holding a
    ``past``-token prompt (allocated but empty for 0), and the prompt."""
    config = config if config is not None else model.config
    cache = transformers.StaticCache(config=config, max_cache_len=_MAX_CACHE)
    prompt = torch.randint(3, 128, (batch, past), generator=torch.Generator().manual_seed(past))
    if past:
        with torch.no_grad():
            model(input_ids=prompt, past_key_values=cache, use_cache=True)
    else:
        head_dim = config.hidden_size // config.num_attention_heads
        cache.early_initialization(
            batch, config.num_key_value_heads, head_dim, torch.float32, torch.device("cpu")
        )
    return prompt, cache


@pytest.fixture(scope="module")
def static_llama_program():
    model = _llama()
    _, cache = _static_prefilled(model, 2, 5)
    return model, _export_step(model, cache, _STATIC_SHAPES)


def test_static_cache_tensors_and_write_position_get_stable_names(static_llama_program):
    _, program = static_llama_program
    inputs, outputs = _io_names(program)
    assert inputs[2:] == [
        "past_key_values.0.key",
        "past_key_values.0.value",
        "past_key_values.1.key",
        "past_key_values.1.value",
        "past_key_values.cache_position",
    ]
    assert outputs == [
        "logits",
        "present.0.key",
        "present.0.value",
        "present.1.key",
        "present.1.value",
        "present.cache_position",
    ]
    key = program.model.graph.inputs[2]
    assert [str(d) for d in key.shape] == ["batch", "2", str(_MAX_CACHE), "8"]
    assert program.model.graph.outputs[1].shape[2] == _MAX_CACHE


def _assert_static_step_matches(model, program, cache, inputs):
    with torch.no_grad():
        expected = model(**{**inputs, "past_key_values": copy.deepcopy(cache)})
    got = program.unflatten_outputs(program(**inputs))
    assert type(got.past_key_values) is transformers.StaticCache
    torch.testing.assert_close(got.logits, expected.logits, rtol=1e-4, atol=1e-5)
    for ours, theirs in zip(got.past_key_values.layers, expected.past_key_values.layers):
        assert type(ours) is type(theirs)
        assert ours.keys.shape == theirs.keys.shape
        torch.testing.assert_close(ours.keys, theirs.keys, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(ours.values, theirs.values, rtol=1e-4, atol=1e-5)
        assert int(ours.cumulative_length) == int(theirs.cumulative_length)
    assert got.past_key_values.get_seq_length() == expected.past_key_values.get_seq_length()


@pytest.mark.parametrize(
    ("batch", "past", "sequence"),
    [(3, 0, 4), (1, 6, 1), (2, 9, 2)],
    ids=["prefill-past-0", "decode-sequence-1", "chunk"],
)
def test_one_static_graph_serves_prefill_and_decode(static_llama_program, batch, past, sequence):
    model, program = static_llama_program
    _, cache = _static_prefilled(model, batch, past)
    inputs = _step_inputs(cache, batch, past, sequence)
    _assert_static_step_matches(model, program, cache, inputs)


def test_greedy_generation_through_a_static_cache_graph_matches_eager(static_llama_program):
    model, program = static_llama_program
    prompt, example = _static_prefilled(model, 3, 4)
    _assert_greedy_matches(model, program, prompt, example)


_GEMMA2 = {
    "vocab_size": 128,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "intermediate_size": 64,
    "max_position_embeddings": 64,
    "sliding_window": 12,
}


@pytest.fixture(scope="module")
def static_gemma2_program():
    torch.manual_seed(0)
    config = transformers.Gemma2Config(**_GEMMA2)
    model = transformers.Gemma2ForCausalLM(config).eval()
    _, cache = _static_prefilled(model, 2, 5)
    assert [type(layer).__name__ for layer in cache.layers] == [
        "StaticSlidingWindowLayer",
        "StaticLayer",
    ]
    return model, _export_step(model, cache, _STATIC_SHAPES)


@pytest.mark.parametrize(("batch", "past", "sequence"), [(3, 0, 4), (1, 6, 1), (2, 9, 3)], ids=str)
def test_hybrid_static_cache_steps_match_eager_within_the_window(
    static_gemma2_program, batch, past, sequence
):
    model, program = static_gemma2_program
    _, cache = _static_prefilled(model, batch, past)
    _assert_static_step_matches(model, program, cache, _step_inputs(cache, batch, past, sequence))


def test_greedy_generation_through_a_hybrid_static_cache_matches_eager(static_gemma2_program):
    model, program = static_gemma2_program
    prompt, example = _static_prefilled(model, 2, 3)  # 3 + 8 tokens fit the 12-token window
    _assert_greedy_matches(model, program, prompt, example)


def test_a_full_static_sliding_window_is_refused_and_a_write_past_it_fails(
    static_gemma2_program,
):
    model, program = static_gemma2_program
    _, full = _static_prefilled(model, 1, 12)
    with pytest.raises(exporter.InvalidExportArgumentsError, match="window .* is full"):
        program(**_step_inputs(full, 1, 12, 1))
    _, nearly = _static_prefilled(model, 1, 10)
    # eager would roll the window here; the graph's write lands past its end and onnxruntime
    # stops instead of returning something else
    with pytest.raises(Exception, match="out of data bounds"):
        program(**_step_inputs(nearly, 1, 10, 3))


def test_an_unallocated_static_cache_exports_as_a_prefill_from_an_empty_cache():
    # generate() hands a prefill a StaticCache it has not allocated: the graph takes no cache
    # tensors, allocates them zero-filled and returns them full-length, written from 0.
    config = transformers.LlamaConfig(**_LLAMA)
    key = torch.randn(1, 2, 3, 4)
    program = exporter.export(
        _CacheUpdate().eval(), (key, transformers.StaticCache(config=config, max_cache_len=8))
    )
    assert not any(
        name.startswith("past_key_values")
        for name in (value.name for value in program.model.graph.inputs)
    )
    _, present = program.unflatten_outputs(
        program(key, transformers.StaticCache(config=config, max_cache_len=8))
    )
    _, expected = _CacheUpdate()(key, transformers.StaticCache(config=config, max_cache_len=8))
    assert len(present.layers) == len(expected.layers) == config.num_hidden_layers
    for got, want in zip(present.layers, expected.layers):
        assert got.keys.shape[-2] == 8
        torch.testing.assert_close(got.keys, want.keys)
        torch.testing.assert_close(got.values, want.values)


def test_a_partly_allocated_static_cache_is_refused_with_what_to_do():
    config = transformers.LlamaConfig(**_LLAMA)
    cache = transformers.StaticCache(config=config, max_cache_len=8)
    cache.layers[0].lazy_initialization(torch.randn(1, 2, 1, 4), torch.randn(1, 2, 1, 4))
    with pytest.raises(exporter.OnnxExporterError, match="early_initialization"):
        exporter.export(_CacheUpdate().eval(), (torch.randn(1, 2, 1, 4), cache))


def _sliding_cache(batch: int, past: int, window: int = 8):
    cache = transformers.DynamicCache()
    cache.layers = [transformers.cache_utils.DynamicSlidingWindowLayer(sliding_window=window)]
    cache.layers[0].update(torch.randn(batch, 2, past, 4), torch.randn(batch, 2, past, 4))
    return cache


def test_a_sliding_window_cache_within_its_window_round_trips():
    program = exporter.export(
        _CacheUpdate().eval(),
        (torch.randn(2, 2, 3, 4), _sliding_cache(2, 3)),
        dynamic_shapes=({0: "batch"}, {0: "batch", 2: "past_sequence"}),
    )
    key, cache = torch.randn(3, 2, 3, 4), _sliding_cache(3, 2)
    _, present = program.unflatten_outputs(program(key, cache))
    _, expected = _CacheUpdate()(key, copy.deepcopy(cache))
    layer = present.layers[0]
    assert type(layer) is transformers.cache_utils.DynamicSlidingWindowLayer
    assert layer.sliding_window == 8 and layer.cumulative_length == 5
    torch.testing.assert_close(layer.keys, expected.layers[0].keys)


def test_a_sliding_window_filled_through_the_graph_is_not_fed_back_silently():
    program = exporter.export(
        _CacheUpdate().eval(),
        (torch.randn(2, 2, 3, 4), _sliding_cache(2, 3)),
        dynamic_shapes=({0: "batch"}, {0: "batch", 2: "past_sequence"}),
    )
    key = torch.randn(2, 2, 3, 4)
    _, present = program.unflatten_outputs(program(key, _sliding_cache(2, 4)))
    assert present.layers[0].keys.shape[2] == 7  # the window (8) minus one: it may have slid
    with pytest.raises(exporter.InvalidExportArgumentsError, match="full sliding window"):
        program(key, present)


def test_a_cache_class_the_exporter_cannot_flatten_is_refused_with_what_to_pass():
    class OwnCache(transformers.Cache):
        """A Cache subclass whose state the exporter does not know."""

    cache = OwnCache(layers=[transformers.cache_utils.DynamicLayer()])
    with pytest.raises(exporter.InvalidExportArgumentsError, match="Pass a DynamicCache, a Static"):
        exporter.export(_CacheUpdate().eval(), (torch.randn(1, 2, 1, 4), cache))
