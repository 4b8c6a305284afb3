"""Inputs and outputs whose pytree registration is not the exporter's: flattened and named.

A transformers ``DynamicCache`` registered the way transformers' documentation tells users
(``transformers.exporters.exporter_dynamo.register_cache_pytrees_for_model``: the cache's
tensors flatten to ``[k0, v0, k1, v1, ...]`` with ``SequenceKey`` keys and a context of its
own), ``dynamic_shapes`` for it in that flat form, and a user's own type registered with
``torch.utils._pytree.register_pytree_node``, with and without ``flatten_with_keys_fn``.

A pytree registration is process-wide and tests run in xdist workers: each test that
registers restores the registrations it found.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn
from torch.utils import _pytree as pytree

from tests.exporter.test_kv_cache import (
    _SHAPES,
    _llama,
    _prefilled,
    _step_inputs,
    assert_step_matches_eager,
)
from torch_onnx_conformance import exporter
from torch_onnx_conformance.exporter import _caches

transformers = pytest.importorskip("transformers")
exporter_dynamo = pytest.importorskip("transformers.exporters.exporter_dynamo")

_KV = {0: "batch", 2: "past_sequence"}


@pytest.fixture
def transformers_registration():
    """transformers' own cache registrations in place of the exporter's, for one test."""
    cache_classes = [transformers.DynamicCache, transformers.EncoderDecoderCache]
    ours = [
        cls for cls in (*cache_classes, transformers.StaticCache) if _caches._registered_by_us(cls)
    ]
    for cls in ours:
        pytree._deregister_pytree_node(cls)
    before = set(pytree.SUPPORTED_NODES)
    exporter_dynamo.register_cache_pytrees_for_model(_llama())
    assert not _caches._registered_by_us(transformers.DynamicCache)
    yield
    for cls in set(pytree.SUPPORTED_NODES) - before:
        pytree._deregister_pytree_node(cls)
    _caches.register(static=transformers.StaticCache in ours)


def _assert_cache_close(got, expected) -> None:
    assert len(got.layers) == len(expected.layers)
    for ours, theirs in zip(got.layers, expected.layers):
        torch.testing.assert_close(ours.keys, theirs.keys, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(ours.values, theirs.values, rtol=1e-4, atol=1e-5)


def _names(program) -> tuple[list[str], list[str]]:
    graph = program.model.graph
    return [v.name for v in graph.inputs], [v.name for v in graph.outputs]


_CACHE_IN = [f"past_key_values.{i}.{k}" for i in range(2) for k in ("key", "value")]
_CACHE_OUT = [f"present.{i}.{k}" for i in range(2) for k in ("key", "value")]


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_decode_with_a_cache_registered_by_transformers(transformers_registration, dynamic):
    model = _llama()
    _, cache = _prefilled(model, 2, 5)
    assert len(pytree.tree_leaves(cache)) == 4  # transformers' flattening: k0, v0, k1, v1
    shapes = {**_SHAPES, "past_key_values": [_KV] * 4} if dynamic else None
    program = exporter.export(model, (), kwargs=_step_inputs(cache, 2, 5, 3), dynamic_shapes=shapes)
    assert _names(program) == (["input_ids", "attention_mask", *_CACHE_IN], ["logits", *_CACHE_OUT])
    key = program.model.graph.inputs[2]
    assert [str(d) for d in key.shape][0::2] == (
        ["batch", "past_sequence"] if dynamic else ["2", "5"]
    )
    batch, past, sequence = (3, 6, 1) if dynamic else (2, 5, 3)
    _, cache = _prefilled(model, batch, past)
    assert_step_matches_eager(model, program, cache, _step_inputs(cache, batch, past, sequence))


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_prefill_returning_a_cache_registered_by_transformers(transformers_registration, dynamic):
    model = _llama()
    ids = torch.randint(3, 128, (2, 6), generator=torch.Generator().manual_seed(1))
    shapes = {"input_ids": {0: "batch", 1: "sequence"}, "use_cache": None} if dynamic else None
    program = exporter.export(
        model, (), kwargs={"input_ids": ids, "use_cache": True}, dynamic_shapes=shapes
    )
    assert _names(program) == (["input_ids"], ["logits", *_CACHE_OUT])
    if dynamic:
        ids = torch.randint(3, 128, (3, 4), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = model(input_ids=ids, use_cache=True)
    got = program.unflatten_outputs(program(input_ids=ids, use_cache=True))
    torch.testing.assert_close(got.logits, expected.logits, rtol=1e-4, atol=1e-5)
    _assert_cache_close(got.past_key_values, expected.past_key_values)


def test_one_axes_dict_applies_to_the_cache_tensors_of_a_foreign_registration(
    transformers_registration,
):
    model = _llama()
    _, cache = _prefilled(model, 2, 5)
    program = exporter.export(
        model, (), kwargs=_step_inputs(cache, 2, 5, 3), dynamic_shapes=_SHAPES
    )
    for value in program.model.graph.inputs[2:]:
        assert [str(d) for d in value.shape][0::2] == ["batch", "past_sequence"]


def test_flat_dynamic_shapes_of_the_wrong_length_name_the_registration(transformers_registration):
    model = _llama()
    _, cache = _prefilled(model, 2, 5)
    with pytest.raises(
        exporter.InvalidExportArgumentsError,
        match=r"by other code \(flatten function transformers\.exporters\.exporter_dynamo\."
        r"_pytree_flatten\) flattens into 4 parts.*list of 4 entries",
    ):
        exporter.export(
            model,
            (),
            kwargs=_step_inputs(cache, 2, 5, 3),
            dynamic_shapes={**_SHAPES, "past_key_values": [_KV] * 3},
        )


def test_an_encoder_decoder_cache_registered_by_transformers_names_its_parts(
    transformers_registration,
):
    from tests.exporter.test_transformers_exporter import _t5, _t5_inputs

    torch.manual_seed(0)
    model = _t5().eval()
    inputs = {**_t5_inputs(), "use_cache": True}
    program = exporter.export(model, (), kwargs=inputs)
    parts = [
        f"present.{i}.{part}.{k}"
        for part in ("decoder", "encoder")
        for i in range(2)
        for k in ("key", "value")
    ]
    assert _names(program)[1] == ["logits", *parts, "encoder_last_hidden_state"]
    with torch.no_grad():
        expected = model(**inputs)
    got = program.unflatten_outputs(program(**inputs))
    torch.testing.assert_close(got.logits, expected.logits, rtol=1e-4, atol=1e-5)
    _assert_cache_close(
        got.past_key_values.cross_attention_cache, expected.past_key_values.cross_attention_cache
    )


def test_transformers_helper_after_the_exporter_registered_keeps_one_flattening():
    """The exporter registered first (any earlier export in the process): transformers' helper
    keeps the registration it finds, and the flat form of dynamic_shapes is the same."""
    _caches.register()
    before = set(pytree.SUPPORTED_NODES)
    try:
        exporter_dynamo.register_cache_pytrees_for_model(_llama())
        assert _caches._registered_by_us(transformers.DynamicCache)
        model = _llama()
        _, cache = _prefilled(model, 2, 5)
        shapes = {**_SHAPES, "past_key_values": [_KV] * 4}
        program = exporter.export(
            model, (), kwargs=_step_inputs(cache, 2, 5, 3), dynamic_shapes=shapes
        )
        assert _names(program)[0][2:] == _CACHE_IN
    finally:
        for cls in set(pytree.SUPPORTED_NODES) - before:
            pytree._deregister_pytree_node(cls)


# --- a user's own type ----------------------------------------------------------------------


class Pair:
    def __init__(self, first: torch.Tensor, second: torch.Tensor) -> None:
        self.first, self.second = first, second


@dataclasses.dataclass
class KeylessPair:
    first: torch.Tensor
    second: torch.Tensor


@pytest.fixture
def pair_types():
    pytree.register_pytree_node(
        Pair,
        lambda p: ([p.first, p.second], None),
        lambda values, _: Pair(*values),
        flatten_with_keys_fn=lambda p: (
            [(pytree.GetAttrKey("first"), p.first), (pytree.GetAttrKey("second"), p.second)],
            None,
        ),
        serialized_type_name=f"{__name__}.Pair",  # deregistration needs one
    )
    pytree.register_pytree_node(
        KeylessPair,
        lambda p: ([p.first, p.second], None),
        lambda values, _: KeylessPair(*values),
        serialized_type_name=f"{__name__}.KeylessPair",
    )
    yield
    pytree._deregister_pytree_node(Pair)
    pytree._deregister_pytree_node(KeylessPair)


class Swap(nn.Module):
    def forward(self, pair: Pair, scale: torch.Tensor) -> Pair:
        return Pair(pair.second * scale, pair.first + 1)


class Split(nn.Module):
    def forward(self, x: torch.Tensor):
        return x.sum(), KeylessPair(x * 2, x - 1)


def test_a_user_type_with_keys_as_input_and_output(pair_types):
    pair = Pair(torch.randn(2, 3), torch.randn(2, 3))
    program = exporter.export(Swap().eval(), (pair, torch.randn(3)))
    assert _names(program) == (["pair.first", "pair.second", "scale"], ["first", "second"])
    pair, scale = Pair(torch.randn(2, 3), torch.randn(2, 3)), torch.randn(3)
    got = program.unflatten_outputs(program(pair, scale))
    expected = Swap()(pair, scale)
    assert type(got) is Pair
    torch.testing.assert_close(got.first, expected.first)
    torch.testing.assert_close(got.second, expected.second)


def test_a_user_type_without_keys_as_output_is_named_by_position(pair_types):
    x = torch.randn(2, 3)
    program = exporter.export(Split().eval(), (x,))
    assert _names(program)[1][1:] == ["output.1.0", "output.1.1"]
    total, got = program.unflatten_outputs(program(x))
    assert type(got) is KeylessPair
    torch.testing.assert_close(got.first, x * 2)
    torch.testing.assert_close(got.second, x - 1)
    torch.testing.assert_close(total, x.sum())


def test_a_user_type_without_keys_as_input_is_refused_by_name(pair_types):
    # torch.export (and so torch.onnx) refuses it too: it names every input by its key path
    with pytest.raises(
        exporter.InvalidExportArgumentsError, match=r"KeylessPair.*without flatten_with_keys_fn"
    ):
        exporter.export(Swap().eval(), (KeylessPair(torch.randn(2), torch.randn(2)), torch.ones(2)))


class Echo(nn.Module):
    def forward(self, first: torch.Tensor) -> Pair:
        return Pair(first + 1, first * 2)


def test_a_user_type_field_named_like_an_input_is_prefixed_with_output(pair_types):
    program = exporter.export(Echo().eval(), (torch.randn(2),))
    assert _names(program) == (["first"], ["output.first", "second"])
