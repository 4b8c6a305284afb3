"""One capture, several exports: what capture and decomposition made of a model, kept under a
key the caller chooses, so that exporting the same model and inputs again (at another opset)
translates it instead of capturing it again, or copies an earlier opset's translation where
the opset changes none of its choices (``exporter._translation_reuse``).

``export(..., capture_cache=cache, capture_key=key)``: the key is the caller's promise that
every export under it captures the same thing (model, example inputs, dynamic shapes, capture
patches); the cache also checks what it can cheaply (the inputs' shapes and dtypes, the
dynamic shapes, the patches, the ops with a translation) and captures again where they differ.

A kept program is handed out again only while it is as it was kept: its ``fingerprint``
(graph nodes, signature, weights' identity and in-place versions, and the bytes of the small
ones) is taken when kept and checked on each hit; an entry whose programs changed since is
dropped and the export captures afresh. Translation reads the programs and does not write
them: exports from one kept capture equal, byte for byte, exports that capture each time
(``tests/exporter/test_capture_cache.py``).

A capture that fails is kept too (``CaptureFailure``): the same model and inputs fail the same
way at every opset, so a later export under the key raises a copy of the error (same type,
message, cause and fields) instead of capturing again. Only the exporter's own stage errors
(``OnnxExporterError``) are kept, and none that ran out of memory or recursion depth, which a
second try may not repeat.

A small LRU (``maxsize`` entries) bounds the memory: a conformance case process keeps the
captures of the cases just before (the other opsets of the same case come next).
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import hashlib
from collections.abc import Hashable
from typing import Any

import torch
from torch.utils import _pytree as pytree

#: Weights up to this many bytes have their data in the fingerprint; larger ones their
#: identity and version counter (an in-place write through torch bumps it).
FINGERPRINT_DATA_BYTES = 1 << 20


@dataclasses.dataclass(frozen=True)
class Captured:
    """What the capture and decomposition stages of one export made: the pipeline's state
    after them and what they put into the export record."""

    captured: torch.export.ExportedProgram
    decomposed: torch.export.ExportedProgram
    narrowed: bool
    untraceable: dict[str, str]
    #: the record's fields the two stages set (``exporter._record.ExportRecord``)
    record: dict[str, Any]
    #: what the capture depended on (``signature``): a hit must match it
    signature: tuple
    #: ``fingerprint`` of the programs when kept: a hit must still match it
    fingerprint: tuple
    #: what translation made of them at each opset whose choices differ
    #: (``exporter._translation_reuse``), filled by the exports that use the capture
    translations: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class CaptureFailure:
    """A capture or decomposition that raised: its error (a copy taken when kept, so that what
    a caller later adds to the raised one stays out) and what the stages put into the record."""

    error: BaseException
    record: dict[str, Any]
    signature: tuple

    def replay(self) -> BaseException:
        """A fresh copy of the error to raise, with the original traceback."""
        return copy_error(self.error)


def keeps_failure(error: BaseException) -> bool:
    """Whether a capture stage's error may be replayed: the exporter's own stage error, not one
    caused by running out of memory or recursion depth (anywhere in its causes or attempts)."""
    from torch_onnx_conformance.exporter._errors import OnnxExporterError

    if not isinstance(error, OnnxExporterError):
        return False
    pending, seen = [error], set()
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, (MemoryError, RecursionError)):
            return False
        pending += [current.__cause__, current.__context__]
        pending += [attempt[1] for attempt in getattr(current, "attempts", None) or ()]
    return True


def copy_error(error: BaseException) -> BaseException:
    """A new exception of the same type with the same arguments, attributes (notes included),
    cause, context and traceback: raising it leaves ``error`` itself as it is. For the
    exporter's errors, whose fields are plain attributes (not the C fields of an OSError)."""
    kind = type(error)
    fresh = kind.__new__(kind, *error.args)
    fresh.args = error.args
    fresh.__dict__.update(copy.copy(error.__dict__))
    if hasattr(error, "__notes__"):
        fresh.__notes__ = list(error.__notes__)
    fresh.__cause__ = error.__cause__
    fresh.__context__ = error.__context__
    fresh.__suppress_context__ = error.__suppress_context__
    return fresh.with_traceback(error.__traceback__)


@dataclasses.dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    #: hits refused: the request's signature differed from the kept capture's
    mismatched: int = 0
    #: hits refused: the kept programs had changed since
    changed: int = 0
    #: hits that were a kept failure, raised again
    failures: int = 0
    evicted: int = 0


class CaptureCache:
    """Captures kept for reuse under the caller's keys: a least-recently-used table of
    ``maxsize`` entries (0 keeps nothing). Pass it with a key to ``exporter.export``."""

    def __init__(self, maxsize: int = 4) -> None:
        if not isinstance(maxsize, int) or maxsize < 0:
            raise ValueError(f"CaptureCache(maxsize=...) takes a count >= 0, got {maxsize!r}")
        self.maxsize = maxsize
        self.stats = CacheStats()
        self._entries: collections.OrderedDict[Hashable, Captured | CaptureFailure] = (
            collections.OrderedDict()
        )

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def clear(self) -> None:
        self._entries.clear()

    def get(self, key: Hashable, signature: tuple) -> Captured | CaptureFailure | None:
        """The capture (or failure) kept under ``key`` if it was made for ``signature`` and
        its programs are unchanged; None otherwise (an entry that fails either check is
        dropped)."""
        entry = self._entries.get(key)
        if entry is None:
            self.stats.misses += 1
            return None
        if entry.signature != signature:
            self.stats.mismatched += 1
        elif isinstance(entry, Captured) and (
            fingerprint(entry.captured, entry.decomposed) != entry.fingerprint
        ):
            self.stats.changed += 1
        else:
            self._entries.move_to_end(key)
            self.stats.hits += 1
            self.stats.failures += isinstance(entry, CaptureFailure)
            return entry
        del self._entries[key]
        self.stats.misses += 1
        return None

    def put(self, key: Hashable, entry: Captured | CaptureFailure) -> None:
        if self.maxsize == 0:
            return
        self._entries[key] = entry
        self._entries.move_to_end(key)
        while len(self._entries) > self.maxsize:
            self._entries.popitem(last=False)
            self.stats.evicted += 1


def check_arguments(cache: Any, key: Any, model: Any) -> None:
    """``export``'s ``capture_cache`` and ``capture_key``: both or neither, a ``CaptureCache``,
    a hashable key, and a model that is captured (not an ExportedProgram)."""
    from torch_onnx_conformance.exporter._errors import InvalidExportArgumentsError

    if cache is None and key is None:
        return
    if cache is None or key is None:
        given, missing = (
            ("capture_cache", "capture_key") if key is None else ("capture_key", "capture_cache")
        )
        raise InvalidExportArgumentsError(
            f"{given} was given without {missing}: pass both (capture_cache=CaptureCache(), "
            "capture_key=a name for the model and inputs) or neither"
        )
    if not isinstance(cache, CaptureCache):
        raise InvalidExportArgumentsError(
            f"capture_cache must be an exporter.CaptureCache, got {type(cache).__name__}"
        )
    if not isinstance(key, Hashable):
        raise InvalidExportArgumentsError(
            f"capture_key must be hashable (a string or tuple), got {type(key).__name__}"
        )
    if isinstance(model, torch.export.ExportedProgram):
        raise InvalidExportArgumentsError(
            "capture_cache applies to a model that is captured; an ExportedProgram is not: "
            "drop capture_cache and capture_key"
        )


def signature(request: Any) -> tuple:
    """What capture and decomposition depend on that can be compared cheaply: the model's
    class, the inputs' structure, shapes and dtypes (other values as their repr), the dynamic
    shapes, the capture patches and the ops that have a translation."""
    leaves, spec = pytree.tree_flatten((request.args, request.kwargs))
    return (
        type(request.model).__qualname__,
        str(spec),
        tuple(_leaf_signature(leaf) for leaf in leaves),
        repr(request.capture_shapes),
        request.capture_patches,
        request.registry.targets(),
    )


def _leaf_signature(leaf: Any) -> Any:
    if isinstance(leaf, torch.Tensor):
        return ("tensor", tuple(leaf.shape), leaf.dtype, str(leaf.device), leaf.requires_grad)
    return (type(leaf).__qualname__, repr(leaf)[:200])


def fingerprint(*programs: torch.export.ExportedProgram) -> tuple:
    """What must not change in a kept program for it to be handed out again: each graph's
    nodes (op, name, target, arguments), the graph signature, and each weight's identity,
    shape, dtype and version counter, with a digest of its bytes when it is small."""
    parts = []
    seen = set()
    for program in programs:
        if id(program) in seen:
            continue
        seen.add(id(program))
        for module in program.graph_module.modules():
            graph = getattr(module, "graph", None)
            if isinstance(graph, torch.fx.Graph):
                parts.append(
                    hash(
                        tuple(
                            (n.op, n.name, str(n.target), repr(n.args), repr(n.kwargs))
                            for n in graph.nodes
                        )
                    )
                )
        parts.append(str(program.graph_signature))
        for name, value in (*program.state_dict.items(), *program.constants.items()):
            parts.append((name, _tensor_fingerprint(value)))
    return tuple(parts)


def _tensor_fingerprint(value: Any) -> Any:
    if not isinstance(value, torch.Tensor):
        return (type(value).__qualname__, id(value))
    facts = (id(value), tuple(value.shape), value.dtype, value._version)
    if value.is_meta or value.device.type != "cpu" or _is_fake(value):
        return facts
    if value.numel() * value.element_size() > FINGERPRINT_DATA_BYTES:
        return (*facts, value.data_ptr())
    try:
        raw = value.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    except (TypeError, RuntimeError):  # a layout without plain bytes (quantized, sparse)
        return (*facts, value.data_ptr())
    return (*facts, hashlib.blake2b(raw, digest_size=16).digest())


def _is_fake(value: torch.Tensor) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(value, FakeTensor)
