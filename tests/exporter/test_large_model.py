"""Models larger than RAM: export on the meta device, weights later from safetensors, streamed."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import safetensors
import safetensors.torch
import torch

from torch_onnx_conformance import exporter
from torch_onnx_conformance.exporter._errors import InvalidExportArgumentsError

transformers = pytest.importorskip("transformers")


def _llama_config():
    return transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=True,
    )


def _save_in_two_shards(model: torch.nn.Module, folder) -> None:
    # as checkpoints are sharded; save_model drops the tied duplicate and keeps one name
    folder.mkdir()
    safetensors.torch.save_model(model, str(folder / "whole.safetensors"))
    with safetensors.safe_open(str(folder / "whole.safetensors"), "pt") as handle:
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}
    (folder / "whole.safetensors").unlink()
    names = sorted(tensors)
    half = len(names) // 2
    for index, part in enumerate((names[:half], names[half:])):
        shard = {name: tensors[name] for name in part}
        safetensors.torch.save_file(shard, str(folder / f"model-{index + 1}-of-2.safetensors"))


def _export_meta_llama(**options):
    with torch.device("meta"):
        meta_model = transformers.LlamaForCausalLM(_llama_config()).eval()
    input_ids = torch.zeros(1, 8, dtype=torch.long, device="meta")
    with pytest.warns(UserWarning, match="weights are on the meta device"):
        return exporter.export(
            meta_model,
            (),
            kwargs={"input_ids": input_ids, "use_cache": False},
            dynamic_shapes={"input_ids": {1: "sequence"}, "use_cache": None},
            **options,
        )


def test_meta_llama_optimized_then_weights_from_safetensors_match_eager(tmp_path):
    torch.manual_seed(0)
    eager = transformers.LlamaForCausalLM(_llama_config()).eval()
    _save_in_two_shards(eager, tmp_path / "weights")

    program = _export_meta_llama()
    assert program.record.status["optimize"] == "ok"
    # the rotary inv_freq is computed, not left on meta: no checkpoint holds it
    assert "model.rotary_emb.inv_freq" not in program.meta_weights()
    assert any("model.rotary_emb.inv_freq" in note for note in program.record.notes)

    path = tmp_path / "out" / "llama.onnx"
    path.parent.mkdir()
    program.save(path, weights=tmp_path / "weights", external_data=True)
    assert sorted(p.name for p in path.parent.iterdir()) == ["llama.onnx", "llama.onnx.data"]
    onnx.checker.check_model(str(path), full_check=True)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for length in (8, 13):  # the exported length and another: the sequence dim is dynamic
        input_ids = torch.randint(0, 128, (1, length))
        (logits,) = session.run(None, {session.get_inputs()[0].name: input_ids.numpy()})
        with torch.no_grad():
            expected = eager(input_ids=input_ids, use_cache=False).logits
        np.testing.assert_allclose(logits, expected.numpy(), rtol=1e-4, atol=1e-4)


def test_weights_from_files_are_read_one_tensor_at_a_time_when_saved(tmp_path, monkeypatch):
    torch.manual_seed(0)
    _save_in_two_shards(transformers.LlamaForCausalLM(_llama_config()), tmp_path / "weights")
    program = _export_meta_llama()

    opened = {"now": 0, "most": 0}
    reads: list[str] = []
    real_safe_open = safetensors.safe_open

    class CountingHandle:
        def __init__(self, *args, **kwargs):
            self._handle = real_safe_open(*args, **kwargs)

        def __enter__(self):
            self._inner = self._handle.__enter__()
            opened["now"] += 1
            opened["most"] = max(opened["most"], opened["now"])
            return self

        def __exit__(self, *exc):
            opened["now"] -= 1
            return self._handle.__exit__(*exc)

        def get_tensor(self, name):
            reads.append(name)
            return self._inner.get_tensor(name)

        def __getattr__(self, name):
            return getattr(self._inner, name)

    monkeypatch.setattr(safetensors, "safe_open", CountingHandle)
    program.apply_weights(tmp_path / "weights")
    assert reads == []  # applying reads headers only
    program.save(tmp_path / "llama.onnx", external_data=True)
    assert opened["most"] == 1
    weight_names = {n for n in program.model.graph.initializers if "layers" in n}
    assert weight_names <= set(reads)


def test_model_built_under_fake_tensor_mode_exports_optimized_and_takes_weights(tmp_path):
    from torch._subclasses.fake_tensor import FakeTensorMode

    torch.manual_seed(0)
    eager = transformers.LlamaForCausalLM(_llama_config()).eval()
    safetensors.torch.save_model(eager, str(tmp_path / "llama.safetensors"))
    with FakeTensorMode(allow_non_fake_inputs=True):
        fake = transformers.LlamaForCausalLM(_llama_config()).eval()
        inputs = {"input_ids": torch.zeros(1, 8, dtype=torch.long), "use_cache": False}
    with pytest.warns(UserWarning, match="weights are on the meta device or fake"):
        program = exporter.export(fake, (), kwargs=inputs)
    assert program.record.status["optimize"] == "ok"
    assert "model.rotary_emb.inv_freq" not in program.meta_weights()
    program.apply_weights(tmp_path / "llama.safetensors")
    input_ids = torch.randint(0, 128, (1, 8))
    with torch.no_grad():
        expected = eager(input_ids=input_ids, use_cache=False).logits
    got = program(input_ids=input_ids, use_cache=False)[0]
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


class TwoLayers(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Linear(4, 3)
        self.second = torch.nn.Linear(3, 2)
        self.register_buffer("scale", torch.full((2,), 0.5), persistent=False)

    def forward(self, x):
        return self.second(self.first(x).relu()) * self.scale


def _meta_two_layers():
    with torch.device("meta"):
        model = TwoLayers().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return exporter.export(model, (torch.zeros(5, 4, device="meta"),))


def test_bad_weights_from_safetensors_name_the_weight(tmp_path):
    weights = TwoLayers().state_dict()  # the non-persistent scale is not in it
    program = _meta_two_layers()

    def file_with(tensors, name):
        path = tmp_path / name
        safetensors.torch.save_file(tensors, str(path))
        return path

    missing = file_with({k: v for k, v in weights.items() if k != "second.bias"}, "m.safetensors")
    with pytest.raises(InvalidExportArgumentsError, match=r"leave out 'second.bias', 'scale'"):
        program.apply_weights(missing)
    extra = file_with({**weights, "third.weight": torch.ones(2)}, "x.safetensors")
    with pytest.raises(InvalidExportArgumentsError, match=r"no weight named 'third.weight'"):
        program.apply_weights(extra)
    shape = file_with({**weights, "first.bias": torch.ones(4)}, "s.safetensors")
    with pytest.raises(InvalidExportArgumentsError, match=r"'first.bias' has shape \(4,\)"):
        program.apply_weights(shape)
    dtype = file_with({**weights, "first.bias": torch.ones(3).half()}, "d.safetensors")
    with pytest.raises(InvalidExportArgumentsError, match=r"'first.bias' has dtype torch.float16"):
        program.apply_weights(dtype)
    with pytest.raises(InvalidExportArgumentsError, match=r"nowhere.safetensors does not exist"):
        program.apply_weights(tmp_path / "nowhere.safetensors")
    assert len(program.meta_weights()) == 5  # every refused call changed nothing


def test_non_persistent_buffer_of_a_meta_model_is_named_then_taken_from_a_state_dict(tmp_path):
    eager = TwoLayers().eval()
    path = tmp_path / "w.safetensors"
    safetensors.torch.save_file(eager.state_dict(), str(path))
    program = _meta_two_layers()
    with pytest.raises(InvalidExportArgumentsError, match=r"'scale' are non-persistent buffers"):
        program.apply_weights(path)
    with pytest.warns(UserWarning, match=r"no weight named 'unused'; skipped"):
        program.apply_weights({**eager.state_dict(), "unused": torch.ones(1)}, strict=False)
    assert program.meta_weights() == ["scale"]
    program.apply_weights({"scale": eager.scale})
    x = torch.randn(5, 4)
    torch.testing.assert_close(program(x)[0], eager(x))


def test_optimize_runs_on_a_program_whose_weights_are_on_meta():
    with torch.device("meta"):
        model = TwoLayers().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = exporter.export(model, (torch.zeros(5, 4, device="meta"),), optimize=False)
    program.optimize()
    assert sorted(program.meta_weights()) == sorted(program.model.graph.initializers)
    eager = TwoLayers().eval()
    program.apply_weights({**eager.state_dict(), "scale": eager.scale})
    x = torch.randn(5, 4)
    torch.testing.assert_close(program(x)[0], eager(x))
