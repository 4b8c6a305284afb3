"""Graph outputs named after what forward() returned (torch_onnx_conformance/exporter/_output_names.py).

ModelOutput and dict keys, namedtuple fields, ``output.<position>`` for a tuple or list at the
top, ``present.<layer>.<kind>`` for a transformers cache; a bare tensor keeps its FX name.
``output_names`` given by the caller win, and ``output_names="fx"`` keeps torch.onnx's names.
"""

from __future__ import annotations

import collections
import os

import numpy as np
import onnxruntime as ort
import pytest
import torch
from torch import nn

from torch_onnx_conformance import exporter
from torch_onnx_conformance.exporter import _output_names
from torch_onnx_conformance.exporter._translate import FX_VALUES_KEY

os.environ.setdefault("HF_HUB_OFFLINE", "1")

X = torch.randn(2, 3)


def _names(program: exporter.ONNXProgram) -> tuple[list[str], list[str]]:
    graph = program.model.graph
    return [v.name for v in graph.inputs], [v.name for v in graph.outputs]


def _run_by_name(program: exporter.ONNXProgram, feeds: dict[str, torch.Tensor]) -> dict:
    """onnxruntime's outputs by the graph's output names, fed by its input names."""
    session = ort.InferenceSession(
        program.model_proto.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    names = [o.name for o in session.get_outputs()]
    got = session.run(names, {k: v.numpy() for k, v in feeds.items()})
    return dict(zip(names, got))


class Nested(nn.Module):
    def forward(self, x):
        return {"scores": x + 1, "parts": [x * 2, (x - 1, x * 3)]}


Bounds = collections.namedtuple("Bounds", "low high")


class Named(nn.Module):
    def forward(self, x):
        return Bounds(x - 1, x + 1)


class Pair(nn.Module):
    def forward(self, x):
        return x + 1, [x - 1, x * 2]


class Detections(nn.Module):
    """A detector's output layout: one dict per image."""

    def forward(self, x):
        return [{"boxes": x * 2, "labels": x.argmax(1), "scores": x.sigmoid()} for _ in range(2)]


class Bare(nn.Module):
    def forward(self, x):
        return x + 1


def test_dict_keys_name_the_outputs_and_nested_paths_are_dotted():
    program = exporter.export(Nested().eval(), (X,))
    assert _names(program) == (["x"], ["scores", "parts.0", "parts.1.0", "parts.1.1"])
    got = _run_by_name(program, {"x": X})
    np.testing.assert_allclose(got["parts.1.1"], (X * 3).numpy(), rtol=1e-6)


def test_namedtuple_fields_name_the_outputs():
    program = exporter.export(Named().eval(), (X,))
    assert _names(program)[1] == ["low", "high"]
    np.testing.assert_allclose(_run_by_name(program, {"x": X})["high"], (X + 1).numpy())


def test_tuple_and_list_positions_name_the_outputs_under_output():
    program = exporter.export(Pair().eval(), (X,))
    assert _names(program)[1] == ["output.0", "output.1.0", "output.1.1"]
    np.testing.assert_allclose(_run_by_name(program, {"x": X})["output.1.1"], (X * 2).numpy())


def test_list_of_dicts_names_each_field_with_its_position():
    program = exporter.export(Detections().eval(), (X,))
    fields = ["boxes", "labels", "scores"]
    assert _names(program)[1] == [f"output.{i}.{f}" for i in range(2) for f in fields]


def test_a_bare_tensor_keeps_its_fx_name():
    assert _names(exporter.export(Bare().eval(), (X,)))[1] == ["add"]


def test_python_numbers_and_none_returned_take_no_name():
    class Mixed(nn.Module):
        def forward(self, x):
            return {"count": 3, "missing": None, "doubled": x * 2}

    with pytest.warns(UserWarning, match="ONNX cannot hold"):
        program = exporter.export(Mixed().eval(), (X,))
    assert _names(program)[1] == ["doubled"]


def test_a_name_an_input_takes_is_prefixed_with_output():
    class Echo(nn.Module):
        def forward(self, x):
            return {"x": x * 2, "y": x}

    program = exporter.export(Echo().eval(), (X,))
    assert _names(program) == (["x"], ["output.x", "y"])
    got = _run_by_name(program, {"x": X})
    np.testing.assert_allclose(got["y"], X.numpy())


def test_a_returned_weight_keeps_its_name_and_the_output_takes_the_structured_one():
    class Weighted(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(3))

        def forward(self, x):
            return {"out": x * self.w, "weight": self.w}

    model = Weighted().eval()
    program = exporter.export(model, (X,))
    assert _names(program)[1] == ["out", "weight"]
    assert "w" in program.model.graph.initializers
    np.testing.assert_allclose(_run_by_name(program, {"x": X})["weight"], model.w.detach())


def test_output_names_fx_keeps_torch_onnx_names():
    for fx in ("fx", []):
        assert _names(exporter.export(Nested().eval(), (X,), output_names=fx))[1] == [
            "add",
            "mul",
            "sub",
            "mul_1",
        ]


def test_output_names_as_another_string_is_refused_by_name():
    with pytest.raises(exporter.InvalidExportArgumentsError, match=r"output_names=\['low'\]"):
        exporter.export(Named().eval(), (X,), output_names="low")


def test_output_names_given_win_and_a_partial_list_leaves_the_rest_fx_names():
    program = exporter.export(Named().eval(), (X,), output_names=["lo", "hi"])
    assert _names(program)[1] == ["lo", "hi"]
    program = exporter.export(Named().eval(), (X,), output_names=["lo"])
    assert _names(program)[1] == ["lo", "add"]


def test_an_exported_program_is_named_from_its_output_structure():
    captured = torch.export.export(Named().eval(), (X,))
    assert _names(exporter.export(captured, ()))[1] == ["low", "high"]


def test_dynamic_shapes_verify_and_report_go_with_the_names(tmp_path):
    program = exporter.export(
        Nested().eval(),
        (X,),
        dynamic_shapes=({0: "batch"},),
        verify="strict",
        report=True,
        artifacts_dir=tmp_path,
    )
    assert _names(program)[1][0] == "scores"
    assert [str(d) for d in program.model.graph.outputs[0].shape] == ["batch", "3"]
    x5 = torch.randn(5, 3)
    np.testing.assert_allclose(_run_by_name(program, {"x": x5})["scores"], (x5 + 1).numpy())
    (report,) = tmp_path.glob("*.md")
    assert "parts.1.0" in report.read_text()


def test_bisection_map_follows_the_renamed_outputs():
    program = exporter.export(Pair().eval(), (X,))
    graph = program.model.graph
    present = {v.name for node in graph for v in node.outputs}
    mapping = graph.meta[FX_VALUES_KEY]
    assert {"output.0", "output.1.0", "output.1.1"} <= set(mapping.values())
    assert set(mapping.values()) <= present | {v.name for v in graph.inputs}


def test_output_names_given_keep_a_returned_weight_its_name_and_the_bisection_map():
    """The caller's names go through the same renaming as the structured ones: the weight
    stays ``w`` (apply_weights finds it by its state-dict name), the output is ``weight``
    through an Identity, and the FX-node-to-value map names the renamed outputs."""

    class Weighted(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(3))

        def forward(self, x):
            return x * self.w + 1, self.w

    program = exporter.export(Weighted().eval(), (X,), output_names=["y", "weight"])
    graph = program.model.graph
    assert _names(program)[1] == ["y", "weight"]
    assert "w" in graph.initializers and "weight" not in graph.initializers
    new_w = torch.tensor([1.0, 2.0, 3.0])
    program.apply_weights({"w": new_w})
    got = _run_by_name(program, {"x": X})
    np.testing.assert_allclose(got["weight"], new_w.numpy())
    np.testing.assert_allclose(got["y"], (X * new_w + 1).numpy(), rtol=1e-6)
    present = {v.name for node in graph for v in node.outputs}
    mapping = graph.meta[FX_VALUES_KEY]
    assert "y" in mapping.values()
    assert set(mapping.values()) <= present | {v.name for v in graph.inputs}


def test_leaf_names_of_a_spec_without_outputs():
    assert _output_names.leaf_names(None) == []


# ----------------------------------------------------------------------------- transformers
def test_bert_model_output_fields_name_the_outputs():
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        vocab_size=64,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
    )
    torch.manual_seed(0)
    model = transformers.BertModel(config).eval()
    ids = torch.randint(0, 64, (2, 5), generator=torch.Generator().manual_seed(0))
    program = exporter.export(model, (ids,))
    assert _names(program) == (["input_ids"], ["last_hidden_state", "pooler_output"])
    with torch.no_grad():
        expected = model(ids)
    got = _run_by_name(program, {"input_ids": ids})
    for name in ("last_hidden_state", "pooler_output"):
        np.testing.assert_allclose(got[name], expected[name].numpy(), rtol=1e-4, atol=1e-5)


def test_gpt2_cache_outputs_are_named_present_layer_kind():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        vocab_size=64,
        n_embd=16,
        n_layer=2,
        n_head=2,
        n_positions=16,
        bos_token_id=0,
        eos_token_id=0,
    )
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, 64, (1, 5), generator=torch.Generator().manual_seed(0))
    program = exporter.export(model, (), kwargs={"input_ids": ids, "use_cache": True})
    kinds = [f"present.{layer}.{kind}" for layer in range(2) for kind in ("key", "value")]
    assert _names(program) == (["input_ids"], ["logits", *kinds])
    with torch.no_grad():
        expected = model(input_ids=ids, use_cache=True)
    got = _run_by_name(program, {"input_ids": ids})
    np.testing.assert_allclose(got["logits"], expected.logits.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(
        got["present.1.value"],
        expected.past_key_values.layers[1].values.numpy(),
        rtol=1e-4,
        atol=1e-5,
    )
