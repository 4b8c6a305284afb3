"""exporter._capture_cache: one capture translated at several opsets, as if captured each time."""

from __future__ import annotations

import warnings

import pytest
import torch

from torch_onnx_conformance import exporter
from torch_onnx_conformance.exporter import CaptureCache
from torch_onnx_conformance.exporter._capture_cache import Captured, copy_error, fingerprint
from torch_onnx_conformance.exporter._errors import (
    CaptureError,
    InvalidExportArgumentsError,
    OnnxExporterError,
    TranslationError,
)


class Net(torch.nn.Module):
    """Weights, a buffer, and an op whose translation differs by opset (GELU from 20)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(6, 4)
        self.norm = torch.nn.LayerNorm(4)
        self.register_buffer("shift", torch.arange(4, dtype=torch.float32))

    def forward(self, x):
        return torch.nn.functional.gelu(self.norm(self.linear(x))) + self.shift


class HoldsBatch(torch.nn.Module):
    """Declared dynamic, the batch is held at its example size by ``view(2, ...)``."""

    def forward(self, x):
        return x.view(2, -1) * 2


def _proto(model, args, opset, **options) -> bytes:
    program = exporter.export(model, args, opset_version=opset, **options)
    return program.model_proto.SerializeToString()


def _entry(key: str) -> Captured:
    return Captured(None, None, False, {}, {}, (key,), ())  # type: ignore[arg-type]


def test_lru_keeps_the_most_recently_used_entries():
    cache = CaptureCache(maxsize=2)
    cache._entries["a"], cache._entries["b"] = _entry("a"), _entry("b")
    cache.put("c", _entry("c"))
    assert list(cache._entries) == ["b", "c"] and cache.stats.evicted == 1
    cache._entries.move_to_end("b")  # as a hit does
    cache.put("d", _entry("d"))
    assert list(cache._entries) == ["b", "d"]
    nothing = CaptureCache(maxsize=0)
    nothing.put("a", _entry("a"))
    assert len(nothing) == 0
    with pytest.raises(ValueError, match="count >= 0"):
        CaptureCache(maxsize=-1)


def test_exports_from_one_capture_equal_exports_that_capture_each_time():
    torch.manual_seed(0)
    model, x = Net().eval(), torch.randn(3, 6)
    cache = CaptureCache()
    options = dict(dynamic_shapes=({0: "batch"},), input_names=["x"])
    for opset in (18, 20, 23):
        kept = _proto(model, (x,), opset, capture_cache=cache, capture_key="net", **options)
        assert kept == _proto(model, (x,), opset, **options), f"opset {opset}"
    assert (cache.stats.hits, cache.stats.misses, cache.stats.changed) == (2, 1, 0)
    program = exporter.export(
        model, (x,), opset_version=20, capture_cache=cache, capture_key="net", **options
    )
    assert program.record.timings["capture"] == program.record.timings["decomposition"] == 0.0
    assert program.record.capture_strategy is not None
    assert any(
        "capture and decomposition reused from an earlier" in n for n in program.record.notes
    )


def test_a_held_dim_is_forgotten_and_warned_about_on_every_export():
    cache, x = CaptureCache(), torch.randn(2, 6)
    options = dict(dynamic_shapes=({0: "batch"},), capture_cache=cache, capture_key="held")
    protos = []
    for opset in (18, 23):
        with pytest.warns(UserWarning, match="batch|held"):
            protos.append(_proto(HoldsBatch(), (x,), opset, **options))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert protos[-1] == _proto(HoldsBatch(), (x,), opset, dynamic_shapes=({0: "batch"},))
    assert cache.stats.hits == 1


def test_other_inputs_under_the_same_key_are_captured_afresh():
    cache, model = CaptureCache(), Net().eval()
    _proto(model, (torch.randn(3, 6),), 20, capture_cache=cache, capture_key="k")
    other = (torch.randn(5, 6),)
    assert _proto(model, other, 23, capture_cache=cache, capture_key="k") == _proto(
        model, other, 23
    )
    assert cache.stats.mismatched == 1 and cache.stats.hits == 0


def test_a_kept_program_that_changed_is_not_handed_out():
    model, x = Net().eval(), torch.randn(3, 6)
    cache = CaptureCache()
    _proto(model, (x,), 20, capture_cache=cache, capture_key="k")
    kept = cache._entries["k"]
    assert fingerprint(kept.captured, kept.decomposed) == kept.fingerprint
    weight = next(t for name, t in kept.decomposed.state_dict.items() if "weight" in name)
    with torch.no_grad():
        weight.add_(1.0)  # as a translation writing into a weight would
    assert fingerprint(kept.captured, kept.decomposed) != kept.fingerprint
    _proto(model, (x,), 23, capture_cache=cache, capture_key="k")
    assert cache.stats.changed == 1 and cache.stats.hits == 0
    assert fingerprint(cache._entries["k"].decomposed) == cache._entries["k"].fingerprint


def test_a_graph_edit_changes_the_fingerprint():
    program = torch.export.export(Net().eval(), (torch.randn(3, 6),))
    before = fingerprint(program)
    node = next(n for n in program.graph.nodes if n.op == "call_function")
    node.name = node.name + "_renamed"
    assert fingerprint(program) != before


@pytest.mark.parametrize(
    ("options", "complaint"),
    [
        ({"capture_key": "k"}, "capture_key was given without capture_cache"),
        ({"capture_cache": CaptureCache()}, "capture_cache was given without capture_key"),
        ({"capture_cache": {}, "capture_key": "k"}, "must be an exporter.CaptureCache"),
        ({"capture_cache": CaptureCache(), "capture_key": ["k"]}, "must be hashable"),
    ],
)
def test_capture_cache_arguments_are_checked(options, complaint):
    with pytest.raises(InvalidExportArgumentsError, match=complaint):
        exporter.export(Net().eval(), (torch.randn(3, 6),), **options)


def test_an_exported_program_is_not_captured_so_takes_no_cache():
    program = torch.export.export(Net().eval(), (torch.randn(3, 6),))
    with pytest.raises(InvalidExportArgumentsError, match="ExportedProgram is not"):
        exporter.export(program, capture_cache=CaptureCache(), capture_key="k")


def test_a_reused_export_records_the_kept_programs_themselves():
    model, x, cache = Net().eval(), torch.randn(3, 6), CaptureCache()
    first = exporter.export(model, (x,), opset_version=20, capture_cache=cache, capture_key="k")
    second = exporter.export(model, (x,), opset_version=23, capture_cache=cache, capture_key="k")
    assert second.record.exported_program is first.record.exported_program
    assert second.record.captured_program is first.record.captured_program
    assert second.record.capture_attempts == first.record.capture_attempts
    assert second.record.capture_attempts is not first.record.capture_attempts


_FORWARD_CALLS: dict[int, int] = {}


class FailsToCapture(torch.nn.Module):
    """Raises ``error`` from forward, counting the calls (each capture strategy makes one) in
    a table outside the module, which capture may copy."""

    def __init__(self, error: BaseException) -> None:
        super().__init__()
        self.error = error
        _FORWARD_CALLS[id(error)] = 0
        self.eval()

    @property
    def calls(self) -> int:
        return _FORWARD_CALLS[id(self.error)]

    def forward(self, x):
        _FORWARD_CALLS[id(self.error)] += 1
        raise self.error


def _failure(model, x, opset, cache, **options) -> BaseException:
    with pytest.raises(OnnxExporterError) as caught:
        exporter.export(
            model, (x,), opset_version=opset, capture_cache=cache, capture_key="k", **options
        )
    return caught.value


def test_a_failed_capture_is_raised_again_for_later_opsets_without_capturing_again(tmp_path):
    model, x, cache = (
        FailsToCapture(ValueError("no capture for this")),
        torch.randn(2),
        CaptureCache(),
    )
    first = _failure(model, x, 20, cache)
    calls = model.calls
    assert calls >= 1 and isinstance(first, CaptureError)
    first.add_note("a note the caller added")  # stays on the caller's error
    for opset in (18, 23):
        again = _failure(model, x, opset, cache, report=True, artifacts_dir=tmp_path / str(opset))
        assert model.calls == calls, "captured again"
        assert again is not first and type(again) is type(first)
        assert str(again) == str(first) and again.__cause__ is first.__cause__
        assert again.attempts == first.attempts
        assert "a note the caller added" not in getattr(again, "__notes__", [])
    assert (cache.stats.hits, cache.stats.failures, cache.stats.misses) == (2, 2, 1)
    report = (tmp_path / "23").glob("*.md")
    text = "\n".join(path.read_text() for path in report)
    assert "capture failure reused from an earlier export" in text
    assert "no capture for this" in text


def test_a_failed_capture_is_tried_again_for_other_inputs_or_after_running_out_of_memory():
    model, cache = FailsToCapture(ValueError("shape-dependent")), CaptureCache()
    _failure(model, torch.randn(2), 20, cache)
    calls = model.calls
    _failure(model, torch.randn(3), 23, cache)  # another signature under the same key
    assert model.calls == 2 * calls and cache.stats.mismatched == 1
    starved, cache = FailsToCapture(MemoryError()), CaptureCache()
    _failure(starved, torch.randn(2), 20, cache)
    calls = starved.calls
    _failure(starved, torch.randn(2), 23, cache)
    assert starved.calls == 2 * calls and "k" not in cache


def test_copy_error_keeps_type_arguments_fields_cause_and_leaves_the_original_alone():
    try:
        try:
            raise KeyError("inner")
        except KeyError as inner:
            raise CaptureError("outer", [("non-strict", inner)]) from inner
    except CaptureError as caught:
        original = caught
    original.add_note("first")
    copied = copy_error(original)
    copied.add_note("second")
    assert type(copied) is CaptureError and copied.args == ("outer",)
    assert copied.attempts == original.attempts and copied.__cause__ is original.__cause__
    assert copied.__traceback__ is original.__traceback__
    assert original.__notes__ == ["first"] and copied.__notes__ == ["first", "second"]
    translation = copy_error(TranslationError("no", target="aten.x", fx_node="x_1"))
    assert (translation.target, translation.fx_node, str(translation)) == ("aten.x", "x_1", "no")
