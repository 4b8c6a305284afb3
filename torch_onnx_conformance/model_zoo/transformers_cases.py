"""transformers models built from small configs with random weights (never downloaded).

Every model is wrapped in a small module with an explicit signature that returns a flat tuple
of tensors: torch.export matches ``dynamic_shapes`` against the wrapper's parameters, and the
conformance harness compares plain tensors. Decoders come twice: ``<name>`` (no cache) and
``<name>-kv`` (one decoding step on top of a cache from a prefill).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from torch_onnx_conformance.model_zoo._common import generator_for, randint, seed_for
from torch_onnx_conformance.model_zoo.init import reinit_
from torch_onnx_conformance.model_zoo.registry import Inputs, ModelCase, register

os.environ.setdefault("HF_HUB_OFFLINE", "1")

_VOCAB = 512
_TEXT = {
    "vocab_size": _VOCAB,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "max_position_embeddings": 128,
}
_TOKEN_IDS = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
_SMOKE = {"bert", "gpt2"}
_DEFAULT = {"llama", "llama-kv", "t5", "vit", "distilbert"}


def _tier(short_name: str) -> str:
    if short_name in _SMOKE:
        return "smoke"
    if short_name in _DEFAULT:
        return "default"
    return "full"


def _tensors(output: Any) -> tuple[torch.Tensor, ...]:
    """The tensor fields of a transformers ModelOutput (or tuple), in field order."""
    values = output.to_tuple() if hasattr(output, "to_tuple") else tuple(output)
    return tuple(value for value in values if isinstance(value, torch.Tensor))


def _build_hf(config_class: str, model_class: str, config_kwargs: Mapping[str, Any], name: str):
    import transformers

    config = getattr(transformers, config_class)(**config_kwargs)
    model = getattr(transformers, model_class)(config)
    reinit_(model, seed_for(name))
    return model.eval()


# --- wrappers with explicit signatures -------------------------------------------------------


class TextModel(nn.Module):
    """Encoder or decoder without a cache: (input_ids, attention_mask) -> tensors."""

    def __init__(self, model: nn.Module, causal: bool) -> None:
        super().__init__()
        self.model = model
        self.extra = {"use_cache": False} if causal else {}

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        output = self.model(
            input_ids=input_ids, attention_mask=attention_mask, return_dict=True, **self.extra
        )
        return _tensors(output)


class CausalLMWithCache(nn.Module):
    """One step of a decoder on a transformers ``DynamicCache``: (logits, present cache).

    The cache goes in and comes out as the object itself; the exporter flattens it to
    ``past_key_values.<layer>.key`` / ``.value`` inputs and ``present.*`` outputs. The same graph
    serves a prefill (a cache of past length 0) and a decode (one new token).
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, past_key_values: Any
    ) -> tuple[torch.Tensor, Any]:
        return self._step(input_ids, attention_mask, "past_key_values", past_key_values)

    def _step(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, argument: str, cache: Any
    ) -> tuple[torch.Tensor, Any]:
        output = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            **{argument: cache},
            use_cache=True,
            return_dict=True,
        )
        return output.logits, getattr(output, argument)


class StateSpaceLMWithCache(CausalLMWithCache):
    """One decoding step of a mamba-style model on its ``cache_params``: (logits, present).

    The cache (a DynamicCache of linear-attention layers) goes in and comes out as the object;
    the exporter flattens each layer to ``cache_params.<layer>.conv`` / ``.ssm`` inputs and
    ``present.<layer>.conv`` / ``.ssm`` outputs. A cache holding state takes the model's
    one-token decode path, so the step's sequence length is 1.
    """

    def forward(  # the cache's parameter name names the graph's inputs
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, cache_params: Any
    ) -> tuple[torch.Tensor, Any]:
        return self._step(input_ids, attention_mask, "cache_params", cache_params)


class Seq2Seq(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        decoder_input_ids: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        output = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            use_cache=False,
            return_dict=True,
        )
        return output.logits, output.encoder_last_hidden_state


class SpeechSeq2Seq(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(
        self, input_features: torch.Tensor, decoder_input_ids: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        output = self.model(
            input_features=input_features,
            decoder_input_ids=decoder_input_ids,
            use_cache=False,
            return_dict=True,
        )
        return output.logits, output.encoder_last_hidden_state


class ImageModel(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return _tensors(self.model(pixel_values=pixel_values, return_dict=True))


class TextImageModel(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, pixel_values: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        output = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            pixel_values=pixel_values,
            return_dict=True,
        )
        return output.logits_per_image, output.text_embeds, output.image_embeds


class AudioModel(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_values: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return _tensors(self.model(input_values=input_values, return_dict=True))


# --- inputs ----------------------------------------------------------------------------------


def _attention_mask(batch: int, length: int, pad_last_of_last_row: bool) -> torch.Tensor:
    # One padded position makes the mask matter without masking out a whole row.
    mask = torch.ones((batch, length), dtype=torch.int64)
    if pad_last_of_last_row:
        mask[-1, -1] = 0
    return mask


def _token_ids(generator: torch.Generator, batch: int, length: int) -> torch.Tensor:
    # Ids from 3 upwards keep clear of pad/bos/eos, which some models treat specially.
    return randint(generator, _VOCAB - 3, batch, length) + 3


def _text_inputs(name: str) -> Callable[[Mapping[str, int]], Inputs]:
    def make_inputs(sizes: Mapping[str, int]) -> Inputs:
        generator = generator_for(name, sizes)
        batch, sequence = sizes["batch"], sizes["sequence"]
        return (), {
            "input_ids": _token_ids(generator, batch, sequence),
            "attention_mask": _attention_mask(batch, sequence, pad_last_of_last_row=True),
        }

    return make_inputs


_TEXT_SHAPES = {
    "input_ids": {0: "batch", 1: "sequence"},
    "attention_mask": {0: "batch", 1: "sequence"},
}


def _register(
    short_name: str,
    family: str,
    module: Callable[[], nn.Module],
    make_inputs: Callable[[Mapping[str, int]], Inputs],
    sizes: Mapping[str, int],
    second_sizes: Mapping[str, int],
    dynamic_shapes: Any,
    notes: str,
    greedy_prompt: Callable[[], dict[str, Any]] | None = None,
) -> ModelCase:
    return register(
        ModelCase(
            name=f"transformers/{short_name}",
            family=family,
            tier=_tier(short_name),
            make_module=module,
            make_inputs=make_inputs,
            sizes=dict(sizes),
            second_sizes=dict(second_sizes),
            dynamic_shapes=dynamic_shapes,
            notes=notes,
            greedy_prompt=greedy_prompt,
        )
    )


# --- encoders --------------------------------------------------------------------------------

_ENCODERS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "bert": ("BertConfig", "BertModel", {**_TEXT, **_TOKEN_IDS}),
    "roberta": ("RobertaConfig", "RobertaModel", {**_TEXT, **_TOKEN_IDS, "pad_token_id": 1}),
    "distilbert": (
        "DistilBertConfig",
        "DistilBertModel",
        {
            "vocab_size": _VOCAB,
            "dim": 32,
            "n_layers": 2,
            "n_heads": 4,
            "hidden_dim": 64,
            "max_position_embeddings": 128,
            "pad_token_id": 0,
        },
    ),
    "albert": ("AlbertConfig", "AlbertModel", {**_TEXT, **_TOKEN_IDS, "embedding_size": 16}),
    "electra": ("ElectraConfig", "ElectraModel", {**_TEXT, **_TOKEN_IDS, "embedding_size": 16}),
    "deberta-v2": (
        "DebertaV2Config",
        "DebertaV2Model",
        {
            **_TEXT,
            **_TOKEN_IDS,
            "relative_attention": True,
            "position_buckets": 16,
            "max_relative_positions": 64,
            "pos_att_type": ["p2c", "c2p"],
        },
    ),
    "xlm-roberta": (
        "XLMRobertaConfig",
        "XLMRobertaModel",
        {**_TEXT, **_TOKEN_IDS, "pad_token_id": 1},
    ),
    "mobilebert": (
        "MobileBertConfig",
        "MobileBertModel",
        {
            **_TEXT,
            **_TOKEN_IDS,
            "embedding_size": 16,
            "intra_bottleneck_size": 16,
            "true_hidden_size": 16,
            "num_feedforward_networks": 2,
        },
    ),
}

_SEQUENCE_SIZES = {"batch": 2, "sequence": 7}
_SEQUENCE_SECOND_SIZES = {"batch": 3, "sequence": 10}


def _register_encoders() -> None:
    for short_name, (config_class, model_class, config) in _ENCODERS.items():
        name = f"transformers/{short_name}"
        _register(
            short_name,
            "transformers-encoder",
            functools.partial(_encoder, config_class, model_class, config, name),
            _text_inputs(name),
            _SEQUENCE_SIZES,
            _SEQUENCE_SECOND_SIZES,
            _TEXT_SHAPES,
            notes=f"{model_class}, 2 layers, hidden 32; returns its tensor outputs as a tuple.",
        )


def _encoder(config_class: str, model_class: str, config: Mapping[str, Any], name: str):
    return TextModel(_build_hf(config_class, model_class, config, name), causal=False).eval()


# --- decoders --------------------------------------------------------------------------------

_DECODER_TEXT = {**_TEXT, **_TOKEN_IDS, "num_key_value_heads": 2}
_DECODERS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "gpt2": (
        "GPT2Config",
        "GPT2LMHeadModel",
        {"vocab_size": _VOCAB, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 128}
        | _TOKEN_IDS,
    ),
    "gpt-neox": (
        "GPTNeoXConfig",
        "GPTNeoXForCausalLM",
        {**_TEXT, **_TOKEN_IDS, "rotary_pct": 0.5},
    ),
    "llama": ("LlamaConfig", "LlamaForCausalLM", _DECODER_TEXT),
    "mistral": ("MistralConfig", "MistralForCausalLM", {**_DECODER_TEXT, "sliding_window": 64}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {**_DECODER_TEXT, "use_sliding_window": False}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {**_DECODER_TEXT, "head_dim": 8}),
    "phi3": (
        "Phi3Config",
        "Phi3ForCausalLM",
        {**_DECODER_TEXT, "original_max_position_embeddings": 128},
    ),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", {**_DECODER_TEXT, "head_dim": 8}),
    "gemma2": (
        "Gemma2Config",
        "Gemma2ForCausalLM",
        {**_DECODER_TEXT, "head_dim": 8, "sliding_window": 64, "query_pre_attn_scalar": 8},
    ),
    "gemma3": (
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        {**_DECODER_TEXT, "head_dim": 8, "sliding_window": 64, "query_pre_attn_scalar": 8},
    ),
    "falcon": (
        "FalconConfig",
        "FalconForCausalLM",
        {k: v for k, v in {**_TEXT, **_TOKEN_IDS}.items() if k != "intermediate_size"},
    ),
    "opt": (
        "OPTConfig",
        "OPTForCausalLM",
        {
            **{k: v for k, v in {**_TEXT, **_TOKEN_IDS}.items() if k != "intermediate_size"},
            "ffn_dim": 64,
            "word_embed_proj_dim": 32,
        },
    ),
}

_KV_SIZES = {"batch": 2, "sequence": 2, "past_sequence": 5}
_KV_SECOND_SIZES = {"batch": 3, "sequence": 3, "past_sequence": 8}


def _register_decoders() -> None:
    for short_name, (config_class, model_class, config) in _DECODERS.items():
        name = f"transformers/{short_name}"
        _register(
            short_name,
            "transformers-decoder",
            functools.partial(_decoder, config_class, model_class, config, name),
            _text_inputs(name),
            _SEQUENCE_SIZES,
            _SEQUENCE_SECOND_SIZES,
            _TEXT_SHAPES,
            notes=f"{model_class}, 2 layers, hidden 32, use_cache=False; returns (logits,).",
        )
        kv_name = f"{name}-kv"
        build_language_model = functools.partial(
            _build_hf, config_class, model_class, config, kv_name
        )
        _register(
            f"{short_name}-kv",
            "transformers-decoder",
            lambda build=build_language_model: CausalLMWithCache(build()).eval(),
            _kv_inputs(kv_name, build_language_model),
            _KV_SIZES,
            _KV_SECOND_SIZES,
            _kv_shapes(config_kwargs=config),
            notes=f"{model_class}: one decoding step of `sequence` new tokens on a DynamicCache "
            "of `past_sequence` tokens filled by a prefill, passed and returned as the cache "
            "object (attention_mask spans past + new tokens, axis total_sequence); returns "
            "(logits, present cache). The suite also generates 8 greedy tokens through the "
            "graph (a prefill on an empty cache, then one-token decodes) and compares them "
            "with eager's.",
            greedy_prompt=_greedy_prompt(kv_name, build_language_model),
        )


MAMBA_CONFIG = {
    "vocab_size": _VOCAB,
    "hidden_size": 32,
    "state_size": 8,
    "num_hidden_layers": 2,
    "expand": 2,
    "conv_kernel": 4,
    "time_step_rank": 4,
    **_TOKEN_IDS,
}
#: Mamba-style decoders: config and model class, their cache passed as ``cache_params``.
_STATE_SPACE_DECODERS = {
    "mamba": ("MambaConfig", "MambaForCausalLM", MAMBA_CONFIG),
    "falcon_mamba": ("FalconMambaConfig", "FalconMambaForCausalLM", MAMBA_CONFIG),
    "mamba2": (
        "Mamba2Config",
        "Mamba2ForCausalLM",
        {**MAMBA_CONFIG, "n_groups": 1, "num_heads": 8, "head_dim": 8},
    ),
}
# no sequence size: a step is always one token
_MAMBA_SIZES = {"batch": 2, "past_sequence": 5}
_MAMBA_SECOND_SIZES = {"batch": 3, "past_sequence": 8}


def _register_state_space_decoders() -> None:
    for short_name, (config_class, model_class, config) in _STATE_SPACE_DECODERS.items():
        _register_state_space_decoder(short_name, config_class, model_class, config)


def _register_state_space_decoder(
    short_name: str, config_class: str, model_class: str, config: Mapping[str, Any]
) -> None:
    name = f"transformers/{short_name}-kv"
    build = functools.partial(_build_hf, config_class, model_class, config, name)
    language_model = functools.cache(build)

    def make_inputs(sizes: Mapping[str, int]) -> Inputs:
        generator = generator_for(name, sizes)
        batch, past = sizes["batch"], sizes["past_sequence"]
        prompt = _token_ids(generator, batch, past)
        return (), {
            "input_ids": _token_ids(generator, batch, 1),
            "attention_mask": torch.ones((batch, past + 1), dtype=torch.int64),
            "cache_params": _prefilled_states(language_model(), prompt),
        }

    def greedy_prompt() -> dict[str, Any]:
        sizes = {"batch": 2, "sequence": 6}
        prompt = _token_ids(generator_for(f"{name}-greedy", sizes), 2, sizes["sequence"])
        # the graph decodes one token at a time: eager reads all but the prompt's last token
        return {
            "input_ids": prompt[:, -1:],
            "attention_mask": torch.ones_like(prompt),
            "past_key_values": _prefilled_states(language_model(), prompt[:, :-1]),
            "cache_argument": "cache_params",
        }

    _register(
        f"{short_name}-kv",
        "transformers-decoder",
        lambda: StateSpaceLMWithCache(build()).eval(),
        make_inputs,
        _MAMBA_SIZES,
        _MAMBA_SECOND_SIZES,
        {
            "input_ids": {0: "batch"},
            "attention_mask": {0: "batch", 1: "total_sequence"},
            "cache_params": [{0: "batch"}] * (2 * config["num_hidden_layers"]),
        },
        notes=f"{model_class}: one decoding step of 1 new token on its cache_params (a "
        "DynamicCache of LinearAttentionLayer, conv and SSM state per layer) filled by a prefill "
        "of `past_sequence` tokens, passed and returned as the cache object; returns (logits, "
        "present cache). A cache holding state takes the one-token path, so the sequence is "
        "1. The suite also generates 8 greedy tokens through the graph from a cache an eager "
        "prefill filled and compares them with eager's.",
        greedy_prompt=greedy_prompt,
    )


#: Decoders also given a StaticCache case: a plain one, and a hybrid of sliding and full layers.
_STATIC_DECODERS = ("llama", "gemma2")
#: Slots of the static cases' caches (and of their sliding layers: below gemma2's window of 64).
_STATIC_CACHE_LENGTH = 32


def _register_static_cache_decoders() -> None:
    for short_name in _STATIC_DECODERS:
        config_class, model_class, config = _DECODERS[short_name]
        name = f"transformers/{short_name}-static-kv"
        build = functools.partial(_build_hf, config_class, model_class, config, name)
        _register(
            f"{short_name}-static-kv",
            "transformers-decoder",
            lambda build=build: CausalLMWithCache(build()).eval(),
            _kv_inputs(name, build, static=True),
            _KV_SIZES,
            _KV_SECOND_SIZES,
            {
                "input_ids": {0: "batch", 1: "sequence"},
                "attention_mask": {0: "batch", 1: "total_sequence"},
                # keys and values at full length; the write position is a 0-d tensor
                "past_key_values": [{0: "batch"}] * (2 * _kv_layers(config)) + [None],
            },
            notes=f"{model_class}: one decoding step of `sequence` new tokens on a StaticCache "
            f"of {_STATIC_CACHE_LENGTH} slots holding `past_sequence` tokens from a prefill, "
            "passed and returned as the cache object (full-length keys/values and "
            "past_key_values.cache_position, the write position); returns (logits, present "
            "cache). The suite also generates 8 greedy tokens through the graph (a prefill on "
            "an empty static cache, then one-token decodes) and compares them with eager's.",
            greedy_prompt=_greedy_prompt(name, build, static=True),
        )


def _static_cache(language_model: nn.Module, batch: int) -> Any:
    """An allocated, empty StaticCache for ``language_model``."""
    import transformers

    from torch_onnx_conformance.exporter import _caches

    _caches.register(static=True)
    config = language_model.config
    cache = transformers.StaticCache(config=config, max_cache_len=_STATIC_CACHE_LENGTH)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    cache.early_initialization(
        batch, config.num_key_value_heads, head_dim, torch.float32, torch.device("cpu")
    )
    return cache


def _prefilled_states(language_model: nn.Module, prompt: torch.Tensor) -> Any:
    from torch_onnx_conformance.exporter import _caches

    _caches.register()
    with torch.no_grad():
        return language_model(input_ids=prompt, use_cache=True, return_dict=True).cache_params


def _decoder(config_class: str, model_class: str, config: Mapping[str, Any], name: str):
    return TextModel(_build_hf(config_class, model_class, config, name), causal=True).eval()


def _kv_layers(config_kwargs: Mapping[str, Any]) -> int:
    return config_kwargs.get("num_hidden_layers", config_kwargs.get("n_layer", 2))


def _kv_shapes(config_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    # One entry per flattened cache tensor (key, value per layer), the form torch.export and
    # torch.onnx take; ours also takes the one axes dict for all of them.
    past_axes = {0: "batch", 2: "past_sequence"}
    return {
        "input_ids": {0: "batch", 1: "sequence"},
        "attention_mask": {0: "batch", 1: "total_sequence"},
        "past_key_values": [past_axes] * (2 * _kv_layers(config_kwargs)),
    }


def _prefilled_cache(language_model: nn.Module, prompt: torch.Tensor, static: bool = False) -> Any:
    from torch_onnx_conformance.exporter import _caches

    _caches.register()  # flattening the case's outputs and inputs needs the cache as a node
    cache = _static_cache(language_model, prompt.shape[0]) if static else None
    with torch.no_grad():
        prefill = language_model(
            input_ids=prompt, past_key_values=cache, use_cache=True, return_dict=True
        )
    return prefill.past_key_values


def _kv_inputs(
    name: str, build_language_model: Callable[[], nn.Module], static: bool = False
) -> Callable[[Mapping[str, int]], Inputs]:
    language_model = functools.cache(build_language_model)

    def make_inputs(sizes: Mapping[str, int]) -> Inputs:
        generator = generator_for(name, sizes)
        batch, sequence, past = sizes["batch"], sizes["sequence"], sizes["past_sequence"]
        cache = _prefilled_cache(language_model(), _token_ids(generator, batch, past), static)
        return (), {
            "input_ids": _token_ids(generator, batch, sequence),
            "attention_mask": torch.ones((batch, past + sequence), dtype=torch.int64),
            "past_key_values": cache,
        }

    return make_inputs


def _greedy_prompt(
    name: str, build_language_model: Callable[[], nn.Module], static: bool = False
) -> Callable[[], dict[str, Any]]:
    """A prompt of 2 rows, its mask and an empty cache of the model's layout, for
    ``exporter.diagnostics.generation.check_greedy``."""
    language_model = functools.cache(build_language_model)

    def prompt() -> dict[str, Any]:
        from torch_onnx_conformance.exporter.diagnostics.generation import empty_cache_like

        sizes = {"batch": 2, "sequence": 6}
        generator = generator_for(f"{name}-greedy", sizes)
        prompt_ids = _token_ids(generator, sizes["batch"], sizes["sequence"])
        return {
            "input_ids": prompt_ids,
            "attention_mask": torch.ones_like(prompt_ids),
            "past_key_values": empty_cache_like(
                _prefilled_cache(language_model(), prompt_ids, static)
            ),
        }

    return prompt


# --- encoder-decoders ------------------------------------------------------------------------


def _register_seq2seq() -> None:
    t5 = {
        "vocab_size": _VOCAB,
        "d_model": 32,
        "d_kv": 8,
        "d_ff": 64,
        "num_layers": 2,
        "num_decoder_layers": 2,
        "num_heads": 4,
        "relative_attention_num_buckets": 8,
        "decoder_start_token_id": 0,
        **_TOKEN_IDS,
    }
    bart = {
        "vocab_size": _VOCAB,
        "d_model": 32,
        "encoder_layers": 2,
        "decoder_layers": 2,
        "encoder_attention_heads": 4,
        "decoder_attention_heads": 4,
        "encoder_ffn_dim": 64,
        "decoder_ffn_dim": 64,
        "max_position_embeddings": 128,
        "pad_token_id": 1,
        "bos_token_id": 0,
        "eos_token_id": 2,
        "decoder_start_token_id": 2,
    }
    shapes = {
        "input_ids": {0: "batch", 1: "sequence"},
        "attention_mask": {0: "batch", 1: "sequence"},
        "decoder_input_ids": {0: "batch", 1: "decoder_sequence"},
    }
    for short_name, config_class, model_class, config in (
        ("t5", "T5Config", "T5ForConditionalGeneration", t5),
        ("bart", "BartConfig", "BartForConditionalGeneration", bart),
    ):
        name = f"transformers/{short_name}"
        _register(
            short_name,
            "transformers-seq2seq",
            functools.partial(_seq2seq, config_class, model_class, config, name),
            _seq2seq_inputs(name),
            {**_SEQUENCE_SIZES, "decoder_sequence": 4},
            {**_SEQUENCE_SECOND_SIZES, "decoder_sequence": 6},
            shapes,
            notes=f"{model_class}, 2+2 layers, d_model 32, use_cache=False; returns "
            "(logits, encoder_last_hidden_state).",
        )
    _register_whisper()


def _seq2seq(config_class: str, model_class: str, config: Mapping[str, Any], name: str):
    return Seq2Seq(_build_hf(config_class, model_class, config, name)).eval()


def _seq2seq_inputs(name: str) -> Callable[[Mapping[str, int]], Inputs]:
    def make_inputs(sizes: Mapping[str, int]) -> Inputs:
        generator = generator_for(name, sizes)
        batch = sizes["batch"]
        return (), {
            "input_ids": _token_ids(generator, batch, sizes["sequence"]),
            "attention_mask": _attention_mask(batch, sizes["sequence"], pad_last_of_last_row=True),
            "decoder_input_ids": _token_ids(generator, batch, sizes["decoder_sequence"]),
        }

    return make_inputs


_WHISPER_SOURCE_POSITIONS = 16
_WHISPER_MEL_BINS = 16


def _register_whisper() -> None:
    name = "transformers/whisper"
    config = {
        "vocab_size": _VOCAB,
        "num_mel_bins": _WHISPER_MEL_BINS,
        "d_model": 32,
        "encoder_layers": 2,
        "decoder_layers": 2,
        "encoder_attention_heads": 4,
        "decoder_attention_heads": 4,
        "encoder_ffn_dim": 64,
        "decoder_ffn_dim": 64,
        "max_source_positions": _WHISPER_SOURCE_POSITIONS,
        "max_target_positions": 64,
        "pad_token_id": 0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "decoder_start_token_id": 1,
    }

    def make_module() -> nn.Module:
        model = _build_hf("WhisperConfig", "WhisperForConditionalGeneration", config, name)
        return SpeechSeq2Seq(model).eval()

    def make_inputs(sizes: Mapping[str, int]) -> Inputs:
        generator = generator_for(name, sizes)
        batch = sizes["batch"]
        frames = 2 * _WHISPER_SOURCE_POSITIONS
        features = torch.randn((batch, _WHISPER_MEL_BINS, frames), generator=generator)
        return (), {
            "input_features": features,
            "decoder_input_ids": _token_ids(generator, batch, sizes["decoder_sequence"]),
        }

    _register(
        "whisper",
        "transformers-seq2seq",
        make_module,
        make_inputs,
        {"batch": 2, "decoder_sequence": 4},
        {"batch": 3, "decoder_sequence": 6},
        {
            "input_features": {0: "batch"},
            "decoder_input_ids": {0: "batch", 1: "decoder_sequence"},
        },
        notes="WhisperForConditionalGeneration, 16 mel bins; the encoder requires exactly "
        f"{2 * _WHISPER_SOURCE_POSITIONS} frames, so only batch and decoder length are dynamic.",
    )


# --- vision and audio ------------------------------------------------------------------------


def _register_vision() -> None:
    image = {"image_size": 32, "num_channels": 3}
    vit = {**_TEXT, **image, "patch_size": 8}
    del vit["vocab_size"], vit["max_position_embeddings"]
    swin = {**image, "patch_size": 4, "embed_dim": 16, "depths": [1, 1], "num_heads": [2, 2]}
    swin["window_size"] = 4
    convnext = {"num_channels": 3, "num_stages": 2, "hidden_sizes": [16, 32], "depths": [1, 1]}
    for short_name, config_class, model_class, config, spatial, notes in (
        ("vit", "ViTConfig", "ViTModel", vit, False, "ViTModel, 32x32 images, patch 8."),
        ("swin", "SwinConfig", "SwinModel", swin, False, "SwinModel, 32x32, window 4."),
        (
            "convnext",
            "ConvNextConfig",
            "ConvNextModel",
            convnext,
            True,
            "ConvNextModel, 2 stages; height and width dynamic (fully convolutional).",
        ),
    ):
        _image_case(short_name, config_class, model_class, config, spatial, notes)
    _register_clip()


def _image_case(
    short_name: str,
    config_class: str,
    model_class: str,
    config: Mapping[str, Any],
    spatial_dynamic: bool,
    notes: str,
) -> ModelCase:
    name = f"transformers/{short_name}"
    axes = {0: "batch", 2: "height", 3: "width"} if spatial_dynamic else {0: "batch"}
    sizes = {"batch": 2, "height": 32, "width": 40} if spatial_dynamic else {"batch": 2}
    second = {"batch": 3, "height": 48, "width": 64} if spatial_dynamic else {"batch": 3}

    def make_module() -> nn.Module:
        return ImageModel(_build_hf(config_class, model_class, config, name)).eval()

    def make_inputs(axis_sizes: Mapping[str, int]) -> Inputs:
        generator = generator_for(name, axis_sizes)
        shape = (axis_sizes["batch"], 3, axis_sizes.get("height", 32), axis_sizes.get("width", 32))
        return (), {"pixel_values": torch.randn(shape, generator=generator)}

    return _register(
        short_name,
        "transformers-vision",
        make_module,
        make_inputs,
        sizes,
        second,
        {"pixel_values": axes},
        notes,
    )


def _register_clip() -> None:
    name = "transformers/clip"
    config = {
        "text_config": {**_TEXT, **_TOKEN_IDS, "max_position_embeddings": 32},
        "vision_config": {
            "image_size": 32,
            "patch_size": 8,
            "hidden_size": 32,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "intermediate_size": 64,
        },
        "projection_dim": 16,
    }

    def make_module() -> nn.Module:
        return TextImageModel(_build_hf("CLIPConfig", "CLIPModel", config, name)).eval()

    def make_inputs(sizes: Mapping[str, int]) -> Inputs:
        generator = generator_for(name, sizes)
        texts, sequence = sizes["texts"], sizes["sequence"]
        input_ids = _token_ids(generator, texts, sequence)
        input_ids[:, -1] = _TOKEN_IDS["eos_token_id"]
        pixels = torch.randn((sizes["images"], 3, 32, 32), generator=generator)
        return (), {
            "input_ids": input_ids,
            "attention_mask": torch.ones((texts, sequence), dtype=torch.int64),
            "pixel_values": pixels,
        }

    _register(
        "clip",
        "transformers-vision",
        make_module,
        make_inputs,
        {"texts": 2, "sequence": 7, "images": 3},
        {"texts": 3, "sequence": 9, "images": 2},
        {
            "input_ids": {0: "texts", 1: "sequence"},
            "attention_mask": {0: "texts", 1: "sequence"},
            "pixel_values": {0: "images"},
        },
        notes="Full CLIPModel (text and vision towers): returns (logits_per_image, text_embeds, "
        "image_embeds); the text batch and the image batch are independent dynamic axes.",
    )


def _register_audio() -> None:
    name = "transformers/wav2vec2"
    config = {
        **_TEXT,
        "vocab_size": 32,
        "conv_dim": (16, 16, 16),
        "conv_stride": (5, 2, 2),
        "conv_kernel": (10, 3, 3),
        "num_conv_pos_embeddings": 16,
        "num_conv_pos_embedding_groups": 4,
    }

    def make_module() -> nn.Module:
        return AudioModel(_build_hf("Wav2Vec2Config", "Wav2Vec2Model", config, name)).eval()

    def make_inputs(sizes: Mapping[str, int]) -> Inputs:
        generator = generator_for(name, sizes)
        waveform = torch.randn((sizes["batch"], sizes["samples"]), generator=generator)
        return (), {"input_values": waveform}

    _register(
        "wav2vec2",
        "transformers-audio",
        make_module,
        make_inputs,
        {"batch": 2, "samples": 400},
        {"batch": 3, "samples": 560},
        {"input_values": {0: "batch", 1: "samples"}},
        notes="Wav2Vec2Model with a 3-layer conv feature extractor; raw waveform input with "
        "dynamic batch and length; returns (last_hidden_state, extract_features).",
    )


_register_encoders()
_register_decoders()
_register_state_space_decoders()
_register_static_cache_decoders()
_register_seq2seq()
_register_vision()
_register_audio()
