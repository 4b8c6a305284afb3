"""The generic transformers builder: every AutoModel type classified once, a few types built."""

from __future__ import annotations

import pytest
import torch

from torch_onnx_conformance import model_zoo
from torch_onnx_conformance.model_zoo import transformers_auto

transformers = pytest.importorskip("transformers")


def test_model_types_reads_the_installed_mapping():
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    assert transformers_auto.model_types() == dict(MODEL_MAPPING_NAMES)


def test_every_mapping_type_is_classified_exactly_once():
    data = transformers_auto.load_data()
    classes = {
        "hand-written": set(transformers_auto.HAND_WRITTEN),
        "zoo": set(data["zoo"]),
        "not buildable": set(data["not_buildable"]),
    }
    mapping = set(transformers_auto.model_types())
    for name, members in classes.items():
        for other, other_members in classes.items():
            if name < other:
                assert not members & other_members, f"{name} and {other} share a type"
    classified = set().union(*classes.values())
    assert mapping - classified == set(), "classify these types: run the survey"
    assert classified - mapping == set(), "these types left transformers: drop them"
    assert all(reason.strip() for reason in data["not_buildable"].values())


def test_every_zoo_type_is_a_full_tier_case_of_the_family():
    registered = {case.name for case in model_zoo.cases("full", family="transformers-auto")}
    expected = {transformers_auto.case_name(t) for t in transformers_auto.load_data()["zoo"]}
    assert registered == expected
    assert not {case.name for case in model_zoo.cases("default")} & registered


def test_shrink_cuts_sizes_and_per_layer_lists_to_the_new_depth():
    default = {
        "hidden_size": 4096,
        "num_hidden_layers": 4,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 32000,
        "pad_token_id": 31999,
        "layer_types": ["full", "sliding", "full", "sliding"],
        "per_layer_config": {"1": {"a": 1}, "3": {"a": 2}},
        "out_features": ["stage4"],
        "vision_config": {"hidden_size": 1024, "image_size": 224, "patch_size": 14},
        "intermediate_size": 16,
    }
    small = transformers_auto.shrink(default)
    assert small["hidden_size"] == 32 and small["num_hidden_layers"] == 2
    assert small["num_attention_heads"] == 4 and small["num_key_value_heads"] == 2
    assert small["vocab_size"] == 512 and small["pad_token_id"] == 0
    assert small["layer_types"] == ["full", "sliding"]
    assert small["per_layer_config"] == {"1": {"a": 1}}
    assert "out_features" not in small
    assert small["vision_config"] == {"hidden_size": 32, "image_size": 32, "patch_size": 8}
    assert small["intermediate_size"] == 16  # never grown


def _built(model_type: str):
    kind = transformers_auto.load_data()["zoo"][model_type]
    case = model_zoo.get(transformers_auto.case_name(model_type))
    module, args, kwargs = case.build()
    second_args, second_kwargs = case.second_inputs(args, kwargs)
    with torch.no_grad():
        outputs = module(*args, **kwargs)
        second_outputs = module(*second_args, **second_kwargs)
    parameters = sum(parameter.numel() for parameter in module.parameters())
    return kind, kwargs, outputs, second_outputs, parameters


@pytest.mark.parametrize(
    "model_type, kind",
    [
        ("camembert", "text"),  # bert-like encoder
        ("deit", "image"),  # vit-like
        ("mbart", "text"),  # encoder-decoder that shifts input_ids into decoder inputs
        ("mixtral", "text"),  # decoder, mixture of experts
        ("qwen2_audio_encoder", "features"),  # speech encoder (log-mel features)
        ("marian", "seq2seq"),  # encoder-decoder with decoder_input_ids
    ],
)
def test_generic_builder_builds_and_runs_a_small_model(model_type, kind):
    built_kind, kwargs, outputs, second_outputs, parameters = _built(model_type)
    assert built_kind == kind
    assert parameters <= transformers_auto.MAX_PARAMETERS
    assert outputs and all(isinstance(output, torch.Tensor) for output in outputs)
    assert all(torch.isfinite(output).all() for output in outputs)
    batch = next(iter(kwargs.values())).shape[0]
    assert outputs[0].shape[0] == batch and second_outputs[0].shape[0] == batch + 1
    assert outputs[0].float().std() > 0


def test_unknown_input_kind_in_the_data_is_refused(tmp_path):
    path = tmp_path / "auto.toml"
    path.write_text('[zoo]\nbert = "telepathy"\n')
    with pytest.raises(ValueError, match="unknown input kind 'telepathy'"):
        transformers_auto.load_data.__wrapped__(path)
