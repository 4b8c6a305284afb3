"""transformers KV caches as export inputs and outputs, flattened with stable names.

torch.export takes a container as an input or output only when it is a pytree node, and
transformers 5 does not register its cache classes. We register them (only once transformers'
cache module is loaded; it is never imported here) so that a ``DynamicCache`` flattens to its
tensors, layer by layer, key before value, and rebuilds from them. The graph's inputs and
outputs for those tensors take the names optimum and onnxruntime-genai use:
``past_key_values.<layer>.key`` / ``.value`` in, ``present.<layer>.key`` / ``.value`` out
(``.decoder`` / ``.encoder`` before the kind for an ``EncoderDecoderCache``). A mamba layer
(``LinearAttentionLayer``, in the DynamicCache mamba, mamba2 and falcon_mamba pass as
``cache_params``) holds its convolution window and SSM state instead: ``cache_params.<layer>.conv``
and ``.ssm`` in, ``present.<layer>.conv`` and ``.ssm`` out. Such a layer holding state takes
mamba's one-token decode path, so its graph is a decode step (sequence 1).

A ``StaticCache`` flattens to each layer's preallocated, full-length keys and values (same
names) and one write position, ``past_key_values.cache_position`` in and
``present.cache_position`` out: a 0-d int64 count of the tokens its layers hold, where the next
ones are written. The in-place write becomes a functional one (ScatterElements), so the present
tensors come out at full length. Its sliding-window layers (gemma2/gemma3-style hybrid caches)
work until their window fills: a full window rolls instead of writing at the position, which
the graph does not do, so such a cache is refused as an input (and a write past the window
fails in onnxruntime rather than computing something else).

A pytree registration is process-wide and the first one stands: where other code registered a
cache class first (transformers' ``register_cache_pytrees_for_model`` flattens a DynamicCache
to ``[k0, v0, k1, v1, ...]`` with a context of its own), that flattening is used, its tensors
still get the names above (found by rebuilding the cache around marker tensors), and
``dynamic_shapes`` for the cache follows its flat form. Leaves of any other node that is not a
tuple, list, dict or ModelOutput (a user's type) are named after their key path from the
registration's ``flatten_with_keys_fn``, or by position without one (``leaf_paths``).

A cache flattens to what fully describes it or not at all: a layer type whose state is more
than its keys and values (a dynamic sliding window that has already slid, quantized or
offloaded layers) is refused with an error, since a graph rebuilt from the tensors alone would
compute something else.
"""

from __future__ import annotations

import dataclasses
import sys
import warnings
from typing import Any

import torch
from torch.utils import _pytree as pytree

from torch_onnx_conformance.exporter._errors import InvalidExportArgumentsError

_CACHE_MODULE = "transformers.cache_utils"
KINDS = ("key", "value")
#: The two states of a linear-attention (mamba) layer: its convolution window and its SSM state.
LINEAR_KINDS = ("conv", "ssm")
#: cumulative_length of a sliding layer rebuilt with a full window, which may have slid.
_UNKNOWN_LENGTH = -1


@dataclasses.dataclass(frozen=True)
class LayerEntry(pytree.MappingKey):
    """A pytree key: the key or value tensor of one cache layer, ``"0.key"``.

    A MappingKey to torch.export (which knows only its own key kinds), told apart from a dict's
    key by its class when naming the graph's inputs and outputs.
    """

    @property
    def layer(self) -> int:
        return int(str(self.key).split(".")[0])

    @property
    def kind(self) -> str:
        return str(self.key).split(".")[1]

    def get(self, cache: Any) -> torch.Tensor:
        layer = cache.layers[self.layer]
        return {
            "key": lambda: layer.keys,
            "value": lambda: layer.values,
            "conv": lambda: layer.conv_states[0],
            "ssm": lambda: layer.recurrent_states[0],
        }[self.kind]()


def _layer_entry(layer: int, kind: str) -> LayerEntry:
    return LayerEntry(f"{layer}.{kind}")


#: EncoderDecoderCache parts, named as optimum names them in a cache tensor's name.
_PARTS = {"self_attention_cache": "decoder", "cross_attention_cache": "encoder"}


def register(*trees: Any, static: bool = False) -> None:
    """Register transformers' cache classes as pytree nodes, if transformers is loaded.

    StaticCache only when asked (``static``) or when one is among ``trees`` (inputs about to be
    flattened): transformers' own exporter flattens a StaticCache its own way (a pytree
    registration is process-wide, and the first one stands), and would misname its graphs'
    caches after ours. A class someone else registered already (transformers' exporter, a user)
    is left as it is; its tensors then get torch.export's default names.
    """
    module = sys.modules.get(_CACHE_MODULE)
    if module is None:
        return
    classes = [
        (module.DynamicCache, _flatten_dynamic, _unflatten_dynamic),
        (module.EncoderDecoderCache, _flatten_encoder_decoder, _unflatten_encoder_decoder),
    ]
    if static or any(map(is_static, pytree.tree_leaves(trees, is_leaf=is_static))):
        node = pytree.SUPPORTED_NODES.get(module.StaticCache)
        if node is not None and node.unflatten_fn is not _unflatten_static:
            raise InvalidExportArgumentsError(
                f"StaticCache is already registered as a pytree node in this process, by "
                f"{registration_name(module.StaticCache)} (transformers' own exporter "
                f"registers every cache class), which flattens it into other tensors than the "
                f"exporter's own registration (exporter._caches: each layer's keys and values "
                f"and one write position) needs. A pytree registration is process-wide and the "
                f"first one stands: export a StaticCache in a process that has not registered "
                f"it otherwise, or pass a DynamicCache."
            )
        classes.append((module.StaticCache, _flatten_static, _unflatten_static))
    for cls, flatten, unflatten in classes:
        if cls in pytree.SUPPORTED_NODES:
            continue
        pytree.register_pytree_node(
            cls,
            lambda cache, flatten=flatten: _drop_keys(flatten(cache)),
            unflatten,
            serialized_type_name=f"{cls.__module__}.{cls.__qualname__}",
            flatten_with_keys_fn=flatten,
        )


def _drop_keys(flat: tuple[list[tuple[Any, Any]], Any]) -> tuple[list[Any], Any]:
    children, context = flat
    return [child for _, child in children], context


# --- DynamicCache ------------------------------------------------------------------------------


def _layer_state(cache: Any, index: int, layer: Any) -> tuple[str, int | None]:
    """``(kind of layer, its sliding window)``, refusing a layer its tensors do not describe."""
    module = sys.modules[_CACHE_MODULE]
    kind = type(layer)
    if kind is module.DynamicLayer:
        return "full", None
    if kind is module.LinearAttentionLayer:
        if layer.number_of_states != 1 or layer.record_past:
            raise InvalidExportArgumentsError(
                f"{type(cache).__name__} layer {index} is a LinearAttentionLayer with "
                f"{layer.number_of_states} states"
                + (" recording its past" if layer.record_past else "")
                + "; the exporter flattens one conv state and one SSM state per layer (mamba's "
                "cache), not recorded pasts. Pass a cache a plain forward has filled."
            )
        return "linear", None
    if kind is module.DynamicSlidingWindowLayer:
        stored = 0 if layer.keys is None else layer.keys.shape[-2]
        seen = layer.cumulative_length
        if seen == _UNKNOWN_LENGTH:
            raise InvalidExportArgumentsError(
                f"{type(cache).__name__} layer {index} was rebuilt from graph outputs with a "
                f"full sliding window ({stored} tokens, window {layer.sliding_window}): how "
                f"many tokens it has seen, which sets the positions of the next ones, is not "
                f"among the graph's outputs. Through the exported graph a sequence can grow to "
                f"{layer.sliding_window - 2} tokens; run longer ones in eager."
            )
        if isinstance(seen, int) and isinstance(stored, int) and seen != stored:
            raise InvalidExportArgumentsError(
                f"{type(cache).__name__} layer {index} is a sliding-window layer that has seen "
                f"{seen} tokens but keeps {stored}: its window has slid, and a graph input of "
                f"its keys and values cannot carry how far. Pass a cache whose sliding layers "
                f"hold fewer tokens than their window ({layer.sliding_window})."
            )
        return "sliding", int(layer.sliding_window)
    raise InvalidExportArgumentsError(
        f"{type(cache).__name__} layer {index} is a {kind.__name__}, whose state is more than "
        f"its key and value tensors; the exporter flattens DynamicLayer, "
        f"DynamicSlidingWindowLayer and LinearAttentionLayer layers only. Use a DynamicCache "
        f"of those."
    )


def _flatten_dynamic(cache: Any) -> tuple[list[tuple[LayerEntry, torch.Tensor]], Any]:
    if getattr(cache, "offloading", False):
        raise InvalidExportArgumentsError(
            "an offloaded DynamicCache cannot be an export input or output: its tensors move "
            "between devices during the forward; pass one built with offloading=False"
        )
    children = []
    layout = []
    for index, layer in enumerate(cache.layers):
        kind, window = _layer_state(cache, index, layer)
        if kind == "linear":
            filled = bool(layer.has_previous_state[0] and layer.is_recurrent_states_initialized[0])
            tensors = (layer.conv_states[0], layer.recurrent_states[0])
        else:
            filled = layer.keys is not None and layer.is_initialized
            tensors = (layer.keys, layer.values)
        layout.append((kind, window, filled))
        if filled:
            for name, tensor in zip(_kinds_of(kind), tensors):
                children.append((_layer_entry(index, name), tensor))
    return children, tuple(layout)


def _kinds_of(layer_kind: str) -> tuple[str, str]:
    return LINEAR_KINDS if layer_kind == "linear" else KINDS


def _unflatten_dynamic(values: Any, layout: Any) -> Any:
    module = sys.modules[_CACHE_MODULE]
    values = list(values)
    layers = []
    for kind, window, filled in layout:
        if kind == "linear":
            layer = module.LinearAttentionLayer()
            if filled:
                _fill_linear(layer, values.pop(0), values.pop(0))
            layers.append(layer)
            continue
        if kind == "sliding":
            layer = module.DynamicSlidingWindowLayer(sliding_window=window)
        else:
            layer = module.DynamicLayer()
        if filled:
            _fill(layer, values.pop(0), values.pop(0))
        layers.append(layer)
    if not layers:
        return module.DynamicCache()
    cache = module.DynamicCache()
    cache.layers = layers
    return cache


def _fill(layer: Any, key: torch.Tensor, value: torch.Tensor) -> None:
    """Hold ``key`` and ``value`` themselves: ``update`` would store a concatenated (and, for a
    sliding layer, sliced) copy, whose sizes torch.export cannot trace back to the inputs'."""
    layer.lazy_initialization(key, value)
    layer.keys, layer.values = key, value
    if hasattr(layer, "cumulative_length"):
        stored = key.shape[-2]
        full = isinstance(stored, int) and stored >= layer.sliding_window - 1
        # A full window may have slid: how many tokens it saw (the next positions) is unknown.
        layer.cumulative_length = _UNKNOWN_LENGTH if full else stored


# --- StaticCache -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class WritePosition(pytree.MappingKey):
    """A pytree key: a static cache's write position, how many tokens its layers hold."""


_WRITE_POSITION = WritePosition("cache_position")


def _static_layer_kind(cache: Any, index: int, layer: Any, traced: bool) -> tuple[str, int]:
    """``(kind of layer, its preallocated length)``, refusing a layer the flattened tensors do
    not describe or whose update the graph cannot follow from here on."""
    module = sys.modules[_CACHE_MODULE]
    kind = type(layer)
    if kind not in (module.StaticLayer, module.StaticSlidingWindowLayer):
        raise InvalidExportArgumentsError(
            f"{type(cache).__name__} layer {index} is a {kind.__name__}; the exporter flattens "
            f"StaticLayer and StaticSlidingWindowLayer layers only. Use a StaticCache of those "
            f"(or a DynamicCache)."
        )
    if not layer.is_initialized or layer.keys is None:
        raise InvalidExportArgumentsError(
            f"{type(cache).__name__} layer {index} is not allocated yet while others are: "
            f"call cache.early_initialization(batch_size, num_heads, head_dim, dtype, device) "
            f"before exporting, or pass a cache a prefill has filled"
        )
    if kind is module.StaticSlidingWindowLayer:
        seen = layer.cumulative_length_int
        if traced and bool(seen > layer.max_cache_len):
            raise InvalidExportArgumentsError(
                f"{type(cache).__name__} layer {index} is a sliding-window layer of "
                f"{layer.max_cache_len} tokens that the example inputs fill past its window: "
                f"the traced update would hold only for that exact position. Export with fewer "
                f"new tokens than the window."
            )
        if not traced and seen >= layer.max_cache_len:
            raise InvalidExportArgumentsError(
                f"{type(cache).__name__} layer {index} is a sliding-window layer whose window "
                f"({layer.max_cache_len} tokens) is full ({seen} seen): from here on it rolls "
                f"its tensors instead of writing at the cache position, which the exported "
                f"graph does not do. Through the graph a sequence can grow to "
                f"{layer.max_cache_len} tokens; run longer ones in eager, or use a cache with a "
                f"larger window."
            )
    return _static_shape(layer)


def _flatten_static(cache: Any) -> tuple[list[tuple[Any, torch.Tensor]], Any]:
    """Each layer's full-length keys and values, then one write position (every layer's
    ``cumulative_length``, which a forward advances alike in all of them)."""
    if getattr(cache, "offloading", False):
        raise InvalidExportArgumentsError(
            "an offloaded StaticCache cannot be an export input or output: its tensors move "
            "between devices during the forward; pass one built with offloading=False"
        )
    if not cache.layers:
        raise InvalidExportArgumentsError("a StaticCache without layers cannot be flattened")
    if not any(layer.is_initialized for layer in cache.layers):
        # Nothing allocated yet (as generate() hands a prefill its cache): no tensors to pass;
        # the forward allocates them, zero-filled, and writes from position 0.
        return [], tuple((_UNALLOCATED, *_static_shape(layer)) for layer in cache.layers)
    children: list[tuple[Any, torch.Tensor]] = []
    layout = []
    traced = _is_traced(getattr(cache.layers[0], "cumulative_length", None))
    for index, layer in enumerate(cache.layers):
        layout.append(_static_layer_kind(cache, index, layer, traced))
        children.append((_layer_entry(index, "key"), layer.keys))
        children.append((_layer_entry(index, "value"), layer.values))
    position = cache.layers[0].cumulative_length
    if not traced:
        lengths = {int(layer.cumulative_length) for layer in cache.layers}
        if len(lengths) > 1:
            raise InvalidExportArgumentsError(
                f"{type(cache).__name__} layers hold different numbers of tokens "
                f"({sorted(lengths)}); the graph takes one cache position for all of them. "
                f"Pass a cache every layer of which one forward has filled alike."
            )
    children.append((_WRITE_POSITION, position))
    return children, tuple(layout)


def _unflatten_static(values: Any, layout: Any) -> Any:
    """A StaticCache holding copies of ``values``: its layers write into their tensors in
    place, which must not write into the graph's inputs (nor, eagerly, a caller's tensors)."""
    module = sys.modules[_CACHE_MODULE]
    if layout and layout[0][0] == _UNALLOCATED:
        layers = [_static_layer(module, kind, length) for _, kind, length in layout]
        cache = module.StaticCache.__new__(module.StaticCache)
        module.Cache.__init__(cache, layers=layers)
        return cache
    *tensors, position = values
    layers = []
    for index, (kind, length) in enumerate(layout):
        key, value = tensors[2 * index], tensors[2 * index + 1]
        layer = _static_layer(module, kind, length)
        if kind == "sliding":
            if _is_traced(position):
                # The window's Python-int length picks update's branch and the mask sizes:
                # 0 picks the write at the (tensor) cache position and the sizes every
                # position before the window fills shares. The sequence length it also
                # reports comes from the tensor instead, equal to it on that branch.
                layer.cumulative_length_int = 0
                layer.get_seq_length = lambda layer=layer: layer.cumulative_length
            else:
                layer.cumulative_length_int = int(position)
        layer.dtype, layer.device = key.dtype, key.device
        layer.batch_size, layer.num_heads = key.shape[:2]
        layer.k_head_dim, layer.v_head_dim = key.shape[-1], value.shape[-1]
        layer.keys, layer.values = key.clone(), value.clone()
        layer.cumulative_length = position.clone()
        layer.is_initialized = True
        layers.append(layer)
    cache = module.StaticCache.__new__(module.StaticCache)
    module.Cache.__init__(cache, layers=layers)
    return cache


#: The layout mark of a StaticCache none of whose layers is allocated yet.
_UNALLOCATED = "unallocated"


def _static_shape(layer: Any) -> tuple[str, int]:
    """``(kind, preallocated length)`` of a static layer, allocated or not."""
    module = sys.modules[_CACHE_MODULE]
    kind = "sliding" if isinstance(layer, module.StaticSlidingWindowLayer) else "full"
    return kind, int(layer.max_cache_len)


def _static_layer(module: Any, kind: str, length: int) -> Any:
    """An unallocated static layer of ``kind`` holding ``length`` tokens."""
    if kind == "sliding":
        return module.StaticSlidingWindowLayer(max_cache_len=length, sliding_window=length)
    return module.StaticLayer(max_cache_len=length)


def _is_traced(value: Any) -> bool:
    """Whether ``value`` is one torch.export is tracing (no data to read)."""
    return (
        not isinstance(value, torch.Tensor) or torch._guards.detect_fake_mode((value,)) is not None
    )


def _fill_linear(layer: Any, conv: torch.Tensor, ssm: torch.Tensor) -> None:
    """Hold copies of the states: a linear-attention layer overwrites them in place, which must
    not write into the graph's inputs (nor, eagerly, a caller's tensors). A layer holding state
    takes mamba's one-token decode path."""
    layer.dtype, layer.device = conv.dtype, conv.device
    layer.conv_states[0], layer.recurrent_states[0] = conv.clone(), ssm.clone()
    layer.conv_kernel_size[0] = conv.shape[-1]
    layer.is_conv_states_initialized[0] = layer.is_recurrent_states_initialized[0] = True
    layer.has_previous_state[0] = True


# --- EncoderDecoderCache -----------------------------------------------------------------------


def _flatten_encoder_decoder(cache: Any) -> tuple[list[tuple[Any, Any]], Any]:
    return [(pytree.GetAttrKey(attr), getattr(cache, attr)) for attr in _PARTS], None


def _unflatten_encoder_decoder(values: Any, _context: Any) -> Any:
    module = sys.modules[_CACHE_MODULE]
    self_attention, cross_attention = values
    return module.EncoderDecoderCache(self_attention, cross_attention)


# --- names and dynamic shapes ------------------------------------------------------------------


def is_cache(value: Any) -> bool:
    """A transformers cache object (by its class's module: transformers is never imported)."""
    return is_cache_class(type(value))


def is_cache_class(cls: Any) -> bool:
    return isinstance(cls, type) and any(
        klass.__module__ == _CACHE_MODULE and klass.__name__ == "Cache" for klass in cls.__mro__
    )


def is_static(cache: Any) -> bool:
    """A transformers StaticCache (flattened with its write position last)."""
    return type(cache) is _static_class() and _static_class() is not None


def _registered_by_us(cls: Any) -> bool:
    """Whether ``cls`` flattens with the exporter's own registration (not another library's)."""
    node = pytree.SUPPORTED_NODES.get(cls)
    return node is not None and node.unflatten_fn in (
        _unflatten_dynamic,
        _unflatten_static,
        _unflatten_encoder_decoder,
    )


def registration_name(cls: type) -> str:
    """Who flattens ``cls``: the module and name of its registered flatten function."""
    node = pytree.SUPPORTED_NODES.get(cls)
    if node is None:
        return "no pytree registration"
    if _registered_by_us(cls):
        return "the exporter's own registration (exporter._caches)"
    flatten = node.flatten_fn
    where = f"{getattr(flatten, '__module__', '?')}.{getattr(flatten, '__qualname__', flatten)}"
    return f"a registration by other code (flatten function {where})"


#: Container types whose leaves keep torch.export's default names (no field or key path).
_PLAIN_CONTAINERS = (tuple, list, dict)


def _is_named_node(cls: Any) -> bool:
    """A node whose leaves are named after their key path: a cache or a user's own type
    (not a tuple, list, dict, namedtuple or transformers ModelOutput)."""
    if cls is None or not isinstance(cls, type):
        return False
    if is_cache_class(cls):
        return True
    if issubclass(cls, _PLAIN_CONTAINERS):
        return False
    return not any(klass.__name__ == "ModelOutput" for klass in cls.__mro__)


@dataclasses.dataclass(frozen=True)
class Step:
    """One step of a leaf's path: the key into a node of type ``node``."""

    node: Any
    key: Any


def leaf_paths(spec: pytree.TreeSpec) -> list[tuple[Step, ...]]:
    """Per leaf of ``spec``, in flattening order, its path of keys from the root.

    Each node's keys come from its registration: the exporter's cache layouts, else the keys
    of the registration's ``flatten_with_keys_fn`` (``MappingKey``, ``GetAttrKey``,
    ``SequenceKey``...), found by rebuilding the node around marker leaves. A transformers cache
    whose registration is another library's is named by layer and kind where its rebuilt
    layers hold the markers. A node whose keys cannot be found gets its children's positions.
    """
    paths: list[tuple[Step, ...]] = []

    def visit(node: pytree.TreeSpec, path: tuple[Step, ...]) -> None:
        if node.is_leaf():
            paths.append(path)
            return
        for keys, child in zip(_child_keys(node), node.children()):
            visit(child, (*path, *(Step(node.type, key) for key in keys)))

    visit(spec, ())
    return paths


def _child_keys(spec: pytree.TreeSpec) -> list[tuple[Any, ...]]:
    """The keys of a spec node's children (each a tuple: a cache part adds its own key)."""
    count = spec.num_children
    positions = [(pytree.SequenceKey(i),) for i in range(count)]
    if _registered_by_us(spec.type):
        return [(key,) for key in _our_child_keys(spec)]
    node = pytree.SUPPORTED_NODES.get(spec.type)
    if node is None:
        return positions
    markers = [torch.empty(1, 1, 1, 1) for _ in range(count)]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rebuilt = node.unflatten_fn(markers, spec.context)
            if is_cache(rebuilt):
                entries = _cache_entries(rebuilt)
                keys = [entries.get(id(marker)) for marker in markers]
                if all(keys):
                    return keys
            if node.flatten_with_keys_fn is None:
                return positions
            pairs, _ = node.flatten_with_keys_fn(rebuilt)
    except Exception:  # noqa: BLE001 - a registration that cannot rebuild from markers
        return positions
    index = {id(marker): i for i, marker in enumerate(markers)}
    keys: list[tuple[Any, ...] | None] = [None] * count
    for key, child in pairs:
        i = index.get(id(child))
        if i is not None and keys[i] is None:
            keys[i] = (key,)
    return keys if all(keys) else positions


def _cache_entries(cache: Any, parts: tuple[Any, ...] = ()) -> dict[int, tuple[Any, ...]]:
    """``id(tensor) -> key path`` of each layer's key and value (conv and SSM state) tensors in
    a cache, whoever flattened it; an EncoderDecoderCache's parts first."""
    subcaches = [(attr, getattr(cache, attr, None)) for attr in _PARTS]
    if all(is_cache(sub) for _, sub in subcaches):
        found: dict[int, tuple[Any, ...]] = {}
        for attr, sub in subcaches:
            found.update(_cache_entries(sub, (*parts, pytree.GetAttrKey(attr))))
        return found
    found = {}
    for index, _layer in enumerate(getattr(cache, "layers", None) or []):
        for kind in (*KINDS, *LINEAR_KINDS):
            entry = _layer_entry(index, kind)
            try:
                tensor = entry.get(cache)
            except (AttributeError, IndexError, KeyError, TypeError):
                continue
            if isinstance(tensor, torch.Tensor):
                found.setdefault(id(tensor), (*parts, entry))
    return found


def leaf_name(prefix: str, path: tuple[Step, ...]) -> str | None:
    """The name of a leaf at ``path`` under ``prefix``: ``prefix.<layer>[.decoder|.encoder].
    <kind>`` in a cache (``prefix.cache_position`` a static cache's position), the dotted key
    path under a cache or user type whose layout is not the exporter's, else None."""
    keys = [step.key for step in path]
    if any(isinstance(key, WritePosition) for key in keys):
        return f"{prefix}.{_WRITE_POSITION.key}"
    entries = [key for key in keys if isinstance(key, LayerEntry)]
    if entries:
        parts = [
            _PARTS[key.name]
            for key in keys
            if isinstance(key, pytree.GetAttrKey) and key.name in _PARTS
        ]
        entry = entries[-1]
        return ".".join([prefix, str(entry.layer), *parts, entry.kind])
    named = [i for i, step in enumerate(path) if _is_named_node(step.node)]
    if not named:
        return None
    if is_cache_class(path[named[0]].node):
        keys = keys[named[0] :]  # a cache's tensors under its name, whatever holds the cache
    return ".".join([prefix, *map(key_text, keys)])


def key_text(key: Any) -> str:
    if isinstance(key, pytree.SequenceKey):
        return str(key.idx)
    if isinstance(key, pytree.MappingKey):
        return str(key.key)
    if isinstance(key, pytree.GetAttrKey):
        return key.name
    return str(key)


def input_names(
    args: tuple[Any, ...], kwargs: dict[str, Any], parameters: list[str]
) -> list[str | None]:
    """Per flattened input leaf: its name when it lies in a cache or a user type, else None.

    A cache passed as keyword ``past_key_values`` names its tensors ``past_key_values.0.key``;
    a positional one the same way after the forward() parameter it binds to (``parameters``);
    a user type's leaves ``<parameter>.<key path>``.
    """
    names: list[str | None] = []
    for path in leaf_paths(pytree.tree_structure((tuple(args), kwargs))):
        top = path[1].key
        if isinstance(top, pytree.MappingKey):
            prefix = str(top.key)
        else:
            prefix = parameters[top.idx] if top.idx < len(parameters) else f"input_{top.idx}"
        names.append(leaf_name(prefix, path[2:]))
    return names


def first_named(path: tuple[Step, ...]) -> Any:
    return next((step.node for step in path if _is_named_node(step.node)), None)


def _dynamic_class() -> Any:
    module = sys.modules.get(_CACHE_MODULE)
    return None if module is None else module.DynamicCache


def _static_class() -> Any:
    module = sys.modules.get(_CACHE_MODULE)
    return None if module is None else module.StaticCache


def _our_child_keys(spec: pytree.TreeSpec) -> list[Any]:
    """The keys of the children of a cache node flattened by the exporter's registration."""
    if spec.type is _dynamic_class():
        keys = []
        for index, (layer_kind, _window, filled) in enumerate(spec.context):
            if filled:
                keys += [_layer_entry(index, kind) for kind in _kinds_of(layer_kind)]
        return keys
    if spec.type is _static_class():
        layers = len(spec.context)
        return [_layer_entry(i, kind) for i in range(layers) for kind in KINDS] + [_WRITE_POSITION]
    return [pytree.GetAttrKey(attr) for attr in _PARTS]  # EncoderDecoderCache


def expand_cache_spec(spec: Any, cache: Any, path: str) -> list[Any]:
    """A cache's dynamic-shapes entry as torch.export wants it: one per flattened child.

    An axes spec (``{0: "batch", 2: "past_sequence"}``) applies to every key and value tensor
    (under another library's registration, to those its flattening holds; its other parts stay
    static); a list gives one entry per child, in the order of the registration's flattening.
    """
    children = cache_children(cache)
    if isinstance(spec, dict) and all(isinstance(k, int) for k in spec):
        if type(cache) is _static_class():  # the write position is a 0-d tensor
            return [spec] * (len(children) - 1) + [None]
        if _registered_by_us(type(cache)):
            return [spec] * len(children)
        entries = _cache_entries(cache)
        return [spec if id(child) in entries else None for child in children]
    if isinstance(spec, (list, tuple)) and len(spec) == len(children):
        return list(spec)
    raise InvalidExportArgumentsError(
        f"dynamic_shapes{path} is {spec!r} for a {type(cache).__name__} that "
        f"{registration_name(type(cache))} flattens into {len(children)} parts; give one axes "
        f"dict for all its tensors (e.g. {{0: 'batch', 2: 'past_sequence'}}) or a list of "
        f"{len(children)} entries, one per part in that registration's order (a pytree "
        f"registration is process-wide: the first one made in the process stands)"
    )


def cache_children(cache: Any) -> list[Any]:
    return pytree.SUPPORTED_NODES[type(cache)].flatten_fn(cache)[0]


def graph_input_names(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    graph: Any,
    plan: list[Any],
) -> list[str] | None:
    """Names for the graph's inputs where caches and user types give them, the others
    unchanged; None when no input lies in one. (Outputs: ``exporter._output_names``.)"""
    import inspect

    try:
        parameters = list(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):  # a forward without a signature Python can read
        parameters = []
    leaf_names = input_names(args, kwargs, parameters)
    if any(leaf_names) and len(leaf_names) == len(plan):
        chosen = [name for name, entry in zip(leaf_names, plan) if not entry.baked]
        if len(chosen) == len(graph.inputs):
            return [name or value.name for name, value in zip(chosen, graph.inputs, strict=True)]
    return None


def check_keyed_inputs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Refuse, by name, an input of a type registered as a pytree node without
    ``flatten_with_keys_fn``: torch.export names its inputs by key path and cannot take it."""
    for leaf in pytree.tree_leaves((tuple(args), kwargs), is_leaf=_lacks_keys):
        if _lacks_keys(leaf):
            cls = type(leaf)
            raise InvalidExportArgumentsError(
                f"an input is a {cls.__module__}.{cls.__qualname__}, which is registered as a "
                f"pytree node without flatten_with_keys_fn ({registration_name(cls)}): "
                f"torch.export names every input by its key path and cannot take it. Register "
                f"it with torch.utils._pytree.register_pytree_node(..., flatten_with_keys_fn=...) "
                f"returning (key, child) pairs (MappingKey, GetAttrKey or SequenceKey), or pass "
                f"its tensors as separate inputs."
            )


def _lacks_keys(node: Any) -> bool:
    entry = pytree.SUPPORTED_NODES.get(type(node))
    return entry is not None and entry.flatten_with_keys_fn is None
