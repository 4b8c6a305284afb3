"""transformers' own ONNX exporter, routed to ours, with its torch.onnx workarounds switched off.

transformers 5.23's ``OnnxExporter`` captures the model with torch.export itself and hands the
ExportedProgram to ``torch.onnx.export(exported_program, args=(), kwargs=..., input_names=...,
custom_translation_table=..., opset_version=..., optimize=...)``, then reads
``onnx_program.model``. Around that call it installs its workarounds for torch.onnx: patched
torch functions, FX-graph fixes, its own translations, and fixes to the ONNX IR. Here the call
goes to ``exporter.export`` and all four are switched off, so what passes shows that the drop-in
takes transformers' calls as they are and needs none of them. Outputs, caches included, are
checked against eager through transformers' own onnxruntime runner.
"""

from __future__ import annotations

import contextlib
import copy
import os
from typing import Any

import pytest
import torch

from tests.exporter.test_kv_cache import _LLAMA, _llama
from torch_onnx_conformance import exporter
from torch_onnx_conformance.exporter import _caches

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
exporter_onnx = pytest.importorskip("transformers.exporters.exporter_onnx")


def _text(batch: int = 2, length: int = 7, seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {
        "input_ids": torch.randint(3, _LLAMA["vocab_size"], (batch, length), generator=generator),
        "attention_mask": torch.ones(batch, length, dtype=torch.int64),
    }


def _qwen2_moe():
    config = transformers.Qwen2MoeConfig(
        **_LLAMA,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=16,
        shared_expert_intermediate_size=16,
    )
    return transformers.Qwen2MoeForCausalLM(config)


def _t5():
    config = transformers.T5Config(
        vocab_size=_LLAMA["vocab_size"], d_model=32, d_kv=8, d_ff=48, num_layers=2, num_heads=4
    )
    config.decoder_start_token_id = 0
    return transformers.T5ForConditionalGeneration(config)


def _t5_inputs() -> dict[str, torch.Tensor]:
    return {**_text(), "decoder_input_ids": _text(length=5, seed=1)["input_ids"]}


def _swin():
    config = transformers.SwinConfig(
        image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4
    )
    return transformers.SwinModel(config)


def _pixels() -> dict[str, torch.Tensor]:
    return {"pixel_values": torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))}


@pytest.fixture
def routed(monkeypatch):
    """transformers' OnnxExporter with torch.onnx.export replaced by ours, no workarounds."""
    calls: list[dict[str, Any]] = []

    def ours(model, args=(), kwargs=None, **options):
        calls.append(options)
        return exporter.export(model, args, kwargs=kwargs, **options)

    original_patches = exporter_onnx.apply_patches

    def patches(backend):
        # The "dynamo" patches shape torch.export's capture, which is transformers' own step.
        return contextlib.nullcontext() if backend == "onnx" else original_patches(backend)

    # As after any earlier export in the process: the exporter's cache flattening registered
    # first (transformers keeps a registration it finds), which its exporter must survive.
    _caches.register()
    # The exporter's StaticCache flattening is registered only once a StaticCache was exported
    # through it (other tests in this process may have); transformers' exporter needs its own.
    static_cache = transformers.StaticCache
    ours_static = static_cache in torch.utils._pytree.SUPPORTED_NODES
    if ours_static:
        torch.utils._pytree._deregister_pytree_node(static_cache)
    registered = set(torch.utils._pytree.SUPPORTED_NODES)
    monkeypatch.setattr(torch.onnx, "export", ours)
    monkeypatch.setattr(exporter_onnx, "apply_patches", patches)
    monkeypatch.setattr(exporter_onnx, "apply_fx_node_fixes", lambda backend, module: None)
    monkeypatch.setattr(exporter_onnx, "_ONNX_TRANSLATION_TABLE", {})
    monkeypatch.setattr(exporter_onnx, "apply_onnx_ir_fixes", lambda program: None)
    yield calls
    # transformers registers every cache class process-wide; the other tests in this process
    # flatten caches the exporter's way.
    for cls in set(torch.utils._pytree.SUPPORTED_NODES) - registered:
        torch.utils._pytree._deregister_pytree_node(cls)
    if ours_static:
        _caches.register(static=True)


def test_a_static_cache_registered_by_transformers_is_refused_by_name(routed):
    from transformers.exporters.exporter_dynamo import register_cache_pytrees_for_model

    model = _llama().eval()
    register_cache_pytrees_for_model(model)
    cache = transformers.StaticCache(config=model.config, max_cache_len=8)
    with pytest.raises(exporter.InvalidExportArgumentsError, match="already registered"):
        exporter.export(model, (), kwargs={**_text(), "past_key_values": cache})


def _leaves(value: Any) -> list[torch.Tensor]:
    """Every tensor of a model output, cache keys and values included, in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if hasattr(value, "to_tuple"):
        value = value.to_tuple()
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in _leaves(item)]
    if hasattr(value, "layers"):  # a transformers Cache
        return [
            tensor
            for layer in value.layers
            for tensor in (getattr(layer, "keys", None), getattr(layer, "values", None))
            if isinstance(tensor, torch.Tensor)
        ]
    return []


def _assert_matches(got: Any, expected: Any) -> None:
    got, expected = _leaves(got), _leaves(expected)
    assert len(got) == len(expected) > 0
    for actual, wanted in zip(got, expected):
        torch.testing.assert_close(
            torch.as_tensor(actual).to(wanted.dtype), wanted, atol=1e-4, rtol=1e-4
        )


CASES = {
    "llama": (_llama, _text),
    "qwen2_moe": (_qwen2_moe, _text),
    "t5": (_t5, _t5_inputs),
    "swin": (_swin, _pixels),
}


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("name", list(CASES))
def test_transformers_exporter_without_workarounds(routed, name, dynamic):
    if name == "swin" and dynamic:
        # transformers marks every axis Dim.AUTO; torch.export's symbolic reasoning over Swin's
        # window partitioning then takes minutes (its capture, before ours is called).
        pytest.skip("transformers' own Dim.AUTO capture of Swin takes minutes")
    build, make_inputs = CASES[name]
    torch.manual_seed(0)
    model = build().eval()
    inputs = make_inputs()
    exported = exporter_onnx.OnnxExporter().export(
        model, dict(inputs), config=exporter_onnx.OnnxConfig(dynamic=dynamic)
    )
    assert len(routed) == 1 and routed[0]["custom_translation_table"] == {}
    with torch.no_grad():
        expected = model(**inputs)
    _assert_matches(exported(**inputs), expected)


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_generation_components_with_a_cache(routed, cache):
    from transformers.exporters.utils import decompose_for_generation

    torch.manual_seed(0)
    model = _llama().eval()
    inputs = _text()
    generation_config = (
        transformers.GenerationConfig(cache_implementation="static", max_cache_len=16)
        if cache == "static"
        else None
    )
    exported = exporter_onnx.OnnxExporter().export_for_generation(
        model,
        dict(inputs),
        config=exporter_onnx.OnnxConfig(dynamic=True),
        generation_config=generation_config,
    )
    components = decompose_for_generation(model, dict(inputs), generation_config=generation_config)
    assert set(components) == {"prefill", "decode"} and len(routed) == 2
    for name, (submodel, forward_inputs) in components.items():
        with torch.no_grad():
            expected = submodel(**copy.deepcopy(forward_inputs))
        _assert_matches(exported.runners[name](**copy.deepcopy(forward_inputs)), expected)
