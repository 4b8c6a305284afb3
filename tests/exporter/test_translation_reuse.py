"""exporter._translation_reuse: a translation kept at one opset serves another opset that makes
every opset-dependent choice the same way, and the model equals a fresh export byte for byte."""

from __future__ import annotations

import onnx
import pytest
import torch

from torch_onnx_conformance import exporter
from torch_onnx_conformance.exporter import CaptureCache
from torch_onnx_conformance.exporter import _translation_reuse as reuse

OPSETS = (18, 20, 23, 26)


class Mlp(torch.nn.Module):
    """Nothing in it is chosen by the opset: opsets 20, 23 and 26 reuse opset 18's work."""

    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = torch.nn.Linear(6, 8), torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.second(torch.relu(self.first(x))).to(torch.float16).sum(-1)


class TanhGelu(torch.nn.Module):
    """Fused into ONNX's Gelu from opset 20: opset 20 must not reuse opset 18's graph."""

    def forward(self, x):
        return torch.nn.functional.gelu(x, approximate="tanh") * 2


def _export(model, x, opset, cache=None, **options):
    kept = {} if cache is None else {"capture_cache": cache, "capture_key": "k"}
    return exporter.export(model, (x,), opset_version=opset, **kept, **options)


def _reused(program) -> bool:
    return any(note.startswith("translation reused") for note in program.record.notes)


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("model", [Mlp, TanhGelu])
def test_a_reused_translation_equals_a_fresh_export(model, dynamic):
    torch.manual_seed(0)
    module, x = model().eval(), torch.randn(3, 6)
    options = {"dynamic_shapes": ({0: "batch"},)} if dynamic else {}
    cache, reused = CaptureCache(), {}
    for opset in OPSETS:
        program = _export(module, x, opset, cache, **options)
        fresh = _export(module, x, opset, **options)
        assert program.model_proto.SerializeToString() == fresh.model_proto.SerializeToString()
        reused[opset] = _reused(program)
    if model is Mlp:
        assert reused == {18: False, 20: True, 23: True, 26: True}
        assert program.record.timings["translation"] == 0.0
        assert program.record.status["optimize"] == "ok"
    else:  # Gelu from 20: 18 alone translates the formula, 20 on reuse 20's Gelu
        assert reused == {18: False, 20: False, 23: True, 26: True}
        assert "Gelu" in {node.op_type for node in program.model_proto.graph.node}


def test_the_copy_is_the_callers_own():
    """A reused model is a copy: changing one export's model leaves the next export as it was."""
    module, x = Mlp().eval(), torch.randn(3, 6)
    cache = CaptureCache()
    first = _export(module, x, 18, cache)
    second = _export(module, x, 20, cache)
    assert _reused(second)
    second.model.graph.outputs[0].name = "changed"
    first.model.graph.outputs[0].name = "changed too"
    third = _export(module, x, 23, cache)
    assert _reused(third)
    assert third.model_proto == _export(module, x, 23).model_proto


def test_custom_translations_are_not_reused():
    module, x = TanhGelu().eval(), torch.randn(3, 6)
    table = {torch.ops.aten.mul.Tensor: lambda ctx, a, b: ctx.op.Mul(a, ctx.scalar_like(b, a))}
    cache = CaptureCache()
    for opset in (20, 23):
        program = _export(module, x, opset, cache, custom_translation_table=table)
        assert not _reused(program)


def test_tracked_opset_notes_comparisons_and_refuses_what_it_cannot_replay():
    choices = reuse.OpsetChoices()
    opset = reuse.TrackedOpset(20, choices)
    assert opset >= 18 and not opset >= 23 and reuse.plain(max(opset, 17)) == 20
    assert choices.holds_at(22) and not choices.holds_at(23) and not choices.holds_at(17)
    assert reuse.plain(opset) + 1 == 21 and choices.opaque is None
    _ = opset + 1
    assert choices.opaque == "__add__" and not choices.holds_at(20)
    hashed = reuse.OpsetChoices()
    _ = {reuse.TrackedOpset(20, hashed): 1}
    assert hashed.opaque == "__hash__"


def test_schema_lookups_are_noted_and_replayed():
    import onnx.defs

    reuse.note_schema_lookups()
    choices = reuse.OpsetChoices()
    onnx.defs.get_schema("Reshape", reuse.TrackedOpset(18, choices), "")
    assert choices.schemas == {("Reshape", ""): 14}
    assert choices.holds_at(20) and choices.holds_at(26)  # Reshape 19, 21, 23...: types only


@pytest.mark.parametrize(
    "op_type, since, opset, same",
    [
        ("Constant", 13, 20, True),  # 19 adds float8 types
        ("Cast", 13, 20, True),  # saturate applies to float8 targets only
        ("Cast", 19, 18, False),  # the older version allows fewer types
        ("Cast", 13, 26, True),  # 19, 21, 23, 24, 25: each step reviewed or types only
        ("ReduceMax", 18, 20, True),  # bool added, and a sentence on bool
        ("ReduceMax", 20, 18, False),
        ("GridSample", 16, 20, False),  # mode values renamed, default changed
        ("DFT", 17, 20, False),  # axis moved from an attribute to an input
        ("AveragePool", 19, 23, False),  # its documentation changed (ceil_mode's output size)
        ("NoSuchOp", None, 20, True),
    ],
)
def test_same_meaning(op_type, since, opset, same):
    assert reuse.same_meaning(op_type, "", since, opset) is same


def test_a_reused_program_reads_and_runs_as_a_fresh_one(tmp_path):
    """A reused export is kept serialized until its model is read: every way to read it gives
    what the fresh export gives, and changes to its model are what it saves."""
    from torch_onnx_conformance.exporter._translate import FX_VALUES_KEY

    torch.manual_seed(0)
    module, x = Mlp().eval(), torch.randn(3, 6)
    cache = CaptureCache()
    _export(module, x, 18, cache)
    reused, fresh = _export(module, x, 20, cache), _export(module, x, 20)
    assert _reused(reused)
    assert reused.model_proto == fresh.model_proto
    torch.testing.assert_close(reused(x), fresh(x), rtol=0, atol=0)
    assert reused.model.graph.meta[FX_VALUES_KEY] == fresh.model.graph.meta[FX_VALUES_KEY]
    assert [n.op_type for n in reused.model.graph] == [n.op_type for n in fresh.model.graph]
    reused.model.graph.outputs[0].name = "renamed"
    assert reused.model_proto.graph.output[0].name == "renamed"
    reused.save(tmp_path / "reused.onnx")
    saved = onnx.load(tmp_path / "reused.onnx")
    assert saved.graph.output[0].name == "renamed"
    assert saved.opset_import == fresh.model_proto.opset_import
