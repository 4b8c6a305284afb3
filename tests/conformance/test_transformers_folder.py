"""A local transformers folder as a user case (``torch_onnx_conformance/conformance/transformers_folder.py``): the
class and inputs chosen from the config, the folder's weights used when present, clear errors,
and one run through the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers

from torch_onnx_conformance.conformance import model_cases, user_cases
from torch_onnx_conformance.conformance.__main__ import project_args

ROOT = Path(__file__).resolve().parents[2]
TEXT = {"input_ids", "attention_mask"}


#: The sizes every tiny encoder config below shares.
SMALL = {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2}
TEXT_SIZES = {**SMALL, "vocab_size": 64, "intermediate_size": 32, "max_position_embeddings": 32}


def _bert():
    return transformers.BertConfig(**TEXT_SIZES)


def _gpt2():
    return transformers.GPT2Config(
        vocab_size=64,
        n_embd=16,
        n_layer=1,
        n_head=2,
        n_positions=32,
        bos_token_id=1,
        eos_token_id=2,
    )


def _llama():
    return transformers.LlamaConfig(**TEXT_SIZES, num_key_value_heads=1)


def _vit():
    return transformers.ViTConfig(**SMALL, intermediate_size=32, image_size=16, patch_size=8)


def _t5():
    return transformers.T5Config(
        vocab_size=64, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2
    )


#: config, the class a config.json without "architectures" builds, its inputs at the first and
#: second sizes, and the output the model names its result by.
KINDS = {
    "bert": (
        _bert,
        "BertForMaskedLM",
        {name: (2, 7) for name in (*TEXT, "token_type_ids")},
        {name: (3, 10) for name in (*TEXT, "token_type_ids")},
    ),
    "gpt2": (_gpt2, "GPT2LMHeadModel", dict.fromkeys(TEXT, (2, 7)), dict.fromkeys(TEXT, (3, 10))),
    "llama": (
        _llama,
        "LlamaForCausalLM",
        dict.fromkeys(TEXT, (2, 7)),
        dict.fromkeys(TEXT, (3, 10)),
    ),
    "vit": (
        _vit,
        "ViTForImageClassification",
        {"pixel_values": (2, 3, 16, 16)},
        {"pixel_values": (3, 3, 16, 16)},
    ),
    "t5": (
        _t5,
        "T5ForConditionalGeneration",
        {**dict.fromkeys(TEXT, (2, 7)), "decoder_input_ids": (2, 4)},
        {**dict.fromkeys(TEXT, (3, 10)), "decoder_input_ids": (3, 6)},
    ),
}


def _shapes(inputs: dict) -> dict:
    return {name: tuple(value.shape) for name, value in inputs.items()}


def _run(module, kwargs):
    with torch.no_grad():
        return module(**kwargs)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_config_only_folder_builds_its_models_kind_with_seeded_random_weights(tmp_path, kind):
    make_config, class_name, first, second = KINDS[kind]
    make_config().save_pretrained(tmp_path / f"tiny-{kind}")  # no "architectures", no weights
    case = user_cases.ModelCase.from_transformers_folder(tmp_path / f"tiny-{kind}")
    assert case.name == f"local/tiny-{kind}" and case.family == "transformers-folder"
    assert f"{class_name} from " in case.notes and "for model type" in case.notes
    assert "no weights in the folder: seeded random weights" in case.notes
    runner = case.runner_case()
    module, args, kwargs = runner.build()
    assert type(module).__name__ == class_name and not module.training
    assert args == () and _shapes(kwargs) == first
    assert set(case.dynamic_shapes) == set(first)
    assert all(axes[0] == "batch" for axes in case.dynamic_shapes.values())
    if "input_ids" in first:
        assert case.dynamic_shapes["input_ids"] == {0: "batch", 1: "sequence"}
        assert 0 <= int(kwargs["input_ids"].min()) <= int(kwargs["input_ids"].max()) < 64
    new_args, new_kwargs = runner.second_inputs(args, kwargs)
    assert new_args == () and _shapes(new_kwargs) == second
    outputs = _run(module, kwargs)
    assert outputs.logits.shape[0] == 2 and outputs.logits.abs().max() > 0
    assert getattr(outputs, "past_key_values", None) is None  # no cache among the outputs
    again, _, _ = runner.build()  # the same weights in every process
    torch.testing.assert_close(_run(again, kwargs).logits, outputs.logits, rtol=0, atol=0)


@pytest.mark.parametrize("kind", ["bert", "gpt2", "vit"])
def test_the_folders_weights_are_the_models_weights(tmp_path, kind):
    make_config, class_name, _, _ = KINDS[kind]
    torch.manual_seed(0)
    saved = getattr(transformers, class_name)(make_config()).eval()
    saved.save_pretrained(tmp_path / "with")
    saved.config.save_pretrained(tmp_path / "without")
    case = user_cases.ModelCase.from_transformers_folder(tmp_path / "with", name="mine/model")
    assert case.name == "mine/model"
    assert f"(config.json architectures {class_name}); weights from model.safetensors" in case.notes
    runner = case.runner_case()
    module, _, kwargs = runner.build()
    assert runner.row_notes == case.notes  # every weight loaded: nothing more to say
    expected = _run(saved, kwargs).logits
    torch.testing.assert_close(_run(module, kwargs).logits, expected, rtol=0, atol=0)
    random = user_cases.ModelCase.from_transformers_folder(tmp_path / "without").runner_case()
    module, _, _ = random.build()
    assert type(module).__name__ == class_name  # named by the saved config's architectures
    assert not torch.equal(_run(module, kwargs).logits, expected)


def _saved_as(folder: Path, saved_class: str, architecture: str) -> Path:
    """A folder holding ``saved_class``'s weights under a config naming ``architecture``."""
    getattr(transformers, saved_class)(_bert()).save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config["architectures"] = [architecture]
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


def test_the_rows_name_weights_the_folder_lacks_or_the_class_does_not_use(tmp_path):
    # base-model weights under a classifier's config: transformers draws the head at random
    # and only logs a warning; the rows say so
    case = user_cases.ModelCase.from_transformers_folder(
        _saved_as(tmp_path / "base", "BertModel", "BertForSequenceClassification")
    )
    runner = case.runner_case()
    assert runner.row_notes == case.notes  # known only once built
    module, _, _ = runner.build()
    assert type(module).__name__ == "BertForSequenceClassification"
    assert runner.row_notes == (
        f"{case.notes}; 2 weights of BertForSequenceClassification not in model.safetensors, "
        "newly initialised at random: classifier.bias, classifier.weight"
    )
    # pretraining weights under a base model's config: the heads' weights go unused
    unused = user_cases.ModelCase.from_transformers_folder(
        _saved_as(tmp_path / "pretraining", "BertForPreTraining", "BertModel")
    ).runner_case()
    unused.build()
    found = unused.row_notes.split("; ")[-1]
    assert found.startswith("7 weights in model.safetensors not used by BertModel: cls.")
    assert found.endswith(", cls.seq_relationship.weight")  # all 7 named, sorted
    assert "newly initialised" not in unused.row_notes


def test_the_notes_list_a_few_weight_names_and_count_the_rest(tmp_path, monkeypatch):
    from torch_onnx_conformance.conformance import transformers_folder

    monkeypatch.setattr(transformers_folder, "LISTED_WEIGHTS", 2)
    unused = user_cases.ModelCase.from_transformers_folder(
        _saved_as(tmp_path / "pretraining", "BertForPreTraining", "BertModel")
    ).runner_case()
    unused.build()
    assert unused.row_notes.endswith(
        "7 weights in model.safetensors not used by BertModel: cls.predictions.bias, "
        "cls.predictions.transform.LayerNorm.bias, ... (5 more)"
    )


def test_options_pass_through_to_the_case(tmp_path):
    _gpt2().save_pretrained(tmp_path / "gpt")
    case = user_cases.ModelCase.from_transformers_folder(
        tmp_path / "gpt", rtol=1e-3, atol=1e-4, tier="full", family="mine", notes="my gpt"
    )
    assert (case.rtol, case.atol, case.tier, case.family) == (1e-3, 1e-4, "full", "mine")
    assert case.notes.startswith("my gpt; GPT2LMHeadModel from ")


def _config_json(folder: Path, values: dict) -> Path:
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(values), encoding="utf-8")
    return folder


def test_folders_that_cannot_be_cases_are_usage_errors_naming_the_path(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    unknown = _config_json(tmp_path / "unknown", {"model_type": "no-such-model-type"})
    custom = _config_json(
        tmp_path / "custom", {**_bert().to_dict(), "architectures": ["MyOwnBertForThings"]}
    )
    expected = {
        empty: "no config.json in this folder; give a transformers model folder",
        unknown: "config.json: transformers .* cannot read it: .*no-such-model-type",
        custom: "architecture 'MyOwnBertForThings' is not a class of transformers",
    }
    try:
        for folder, message in expected.items():
            with pytest.raises(ValueError, match=rf"^--cases: {folder}.*{message}.*case file"):
                model_cases.use_extra_case_files([str(folder)])
    finally:
        model_cases.use_extra_case_files([])


def test_a_package_folder_is_still_a_module_and_pyproject_folders_are_paths(tmp_path, monkeypatch):
    package = tmp_path / "my_pkg_cases"
    package.mkdir()
    (package / "__init__.py").write_text(
        "import torch\nfrom torch_onnx_conformance.conformance.user_cases import ModelCase\n\n"
        "def model_cases():\n"
        "    return [ModelCase('pkg/id', lambda: (torch.nn.Identity(), (torch.ones(2),), {}))]\n"
    )
    _bert().save_pretrained(tmp_path / "models" / "tiny-bert")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    try:
        model_cases.use_extra_case_files(["my_pkg_cases", "models/tiny-bert"])
        assert model_cases.extra_case_files() == (
            "my_pkg_cases",
            str(tmp_path / "models" / "tiny-bert"),
        )
        assert [case.name for case in model_cases.all_cases("smoke")] == [
            "pkg/id",
            "local/tiny-bert",
        ]
    finally:
        model_cases.use_extra_case_files([])
        sys.modules.pop("my_pkg_cases", None)
    pyproject = tmp_path / "sub" / "pyproject.toml"
    pyproject.parent.mkdir()
    _bert().save_pretrained(tmp_path / "sub" / "bert")
    pyproject.write_text('[tool.onnx-conformance]\ncases = ["bert", "my_pkg_cases"]\n')
    assert project_args([], pyproject)[:2] == [
        f"--cases={tmp_path / 'sub' / 'bert'}",
        "--cases=my_pkg_cases",
    ]


@pytest.mark.slow
def test_a_folder_runs_through_the_command_line(tmp_path):
    torch.manual_seed(0)
    transformers.BertForMaskedLM(_bert()).save_pretrained(tmp_path / "tiny-bert")
    (tmp_path / "no-config").mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "HF_HUB_OFFLINE": "1",
    }

    def conformance(*args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-P", "-m", "torch_onnx_conformance", "run", *args, "-n", "0"]
        return subprocess.run(
            command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
        )

    done = conformance(
        "--cases", "tiny-bert", "--opset", "20", "--results", "out/results",
        "--reports-out", "out/reports",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "2 cases, 2 passed" in done.stdout
    rows = [
        json.loads(line)
        for path in (tmp_path / "out/results").glob("*.jsonl")
        for line in path.read_text().splitlines()
    ]
    assert sorted(row["id"] for row in rows) == [
        f"model::local/tiny-bert::f32::{shapes}::opset20::cpu::ours::opt"
        for shapes in ("dynamic", "static")
    ]
    for row in rows:
        assert row["status"] == "pass" and row["family"] == "transformers-folder"
        assert "weights from model.safetensors" in row["extra"]["case_notes"]
    assert "local/tiny-bert" in (tmp_path / "out/reports/models.md").read_text()

    done = conformance("--cases", "no-config", "--results", "out/bad")
    assert done.returncode == 4, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"{tmp_path / 'no-config'}: no config.json in this folder" in done.stderr + done.stdout
    assert not (tmp_path / "out/bad").exists()
