"""The op registry: which translation handles which ATen overload (or other FX target).

A translation is a plain function ``fn(ctx, *args, **kwargs)`` registered with ``@translates``
naming the overloads it handles. ``ctx`` is a :class:`~exporter.ops._context.TranslationContext`;
``args``/``kwargs`` are the FX node's arguments with every FX value replaced by an
``onnx_ir.Value``. It returns an ``ir.Value``, a tuple of them for multi-output ops, or None for
ops that produce nothing (assertions).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import torch

Target = Any  # torch._ops.OpOverload, HigherOrderOperator, or a Python callable (operator.add)


@dataclasses.dataclass(frozen=True)
class Translation:
    fn: Callable[..., Any]
    target: Target
    #: Custom translations come from ``custom_translation_table`` or ``register``; they win.
    custom: bool = False
    #: ``onnxscript``: called with onnxscript values under our evaluator instead of with ``ctx``.
    style: str = "ctx"

    @property
    def name(self) -> str:
        fn = self.fn
        module = getattr(fn, "__module__", None) or ""
        qual = getattr(fn, "__qualname__", None) or getattr(fn, "name", None) or repr(fn)
        return f"{module}.{qual}" if module else str(qual)


class Registry:
    """Maps FX targets to translations. Copy it before adding per-export custom entries."""

    def __init__(self) -> None:
        self._table: dict[Target, Translation] = {}

    def add(self, target: Target, translation: Translation) -> None:
        existing = self._table.get(target)
        if existing is not None and not translation.custom and not existing.custom:
            raise ValueError(
                f"{target} already has a translation ({existing.name}); "
                f"cannot register {translation.name} too"
            )
        self._table[target] = translation

    def get(self, target: Target) -> Translation | None:
        return self._table.get(target)

    def __contains__(self, target: Target) -> bool:
        return target in self._table

    def targets(self) -> frozenset[Target]:
        return frozenset(self._table)

    def has_custom(self) -> bool:
        """Whether any translation came from ``custom_translation_table`` or ``register``."""
        return any(translation.custom for translation in self._table.values())

    def copy(self) -> Registry:
        new = Registry()
        new._table = dict(self._table)
        return new

    def __len__(self) -> int:
        return len(self._table)


#: The registry our op library fills at import time.
DEFAULT_REGISTRY = Registry()

#: Translations for nodes that read or produce complex tensors (carried as real pairs with a
#: trailing axis of 2). A node touching a complex tensor uses only this table (or a custom
#: translation): a real-only translation would treat the pair axis as data and compute
#: something else, so it is never used for it.
COMPLEX_REGISTRY = Registry()


def _overloads(target: Any) -> Iterable[Target]:
    """An OpOverloadPacket stands for all of its overloads; anything else for itself.

    A string ``"namespace::op.overload"`` names an op of a library that may not be imported
    yet (torchvision); it is matched by name at lookup time.
    """
    if isinstance(target, torch._ops.OpOverloadPacket):
        for name in target.overloads():
            yield getattr(target, name)
    else:
        yield target


def _registering(registry: Registry, targets: tuple[Target, ...]) -> Callable[..., Any]:
    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        for target in targets:
            for overload in _overloads(target):
                registry.add(overload, Translation(fn=fn, target=overload))
        return fn

    return decorator


def translates(*targets: Target) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register ``fn`` as the translation of each target (overload or packet)."""
    return _registering(DEFAULT_REGISTRY, targets)


def translates_complex(*targets: Target) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register ``fn`` as the translation of each target when complex tensors meet."""
    return _registering(COMPLEX_REGISTRY, targets)


def register(target: Target, fn: Callable[..., Any], registry: Registry | None = None) -> None:
    """Public registration API for libraries that ship translations.

    ``fn`` may be a ``ctx``-style translation (first parameter named ``ctx``), a plain Python
    function building nodes with onnxscript's opset builders, or an ``onnxscript`` function.
    Custom entries override built-in translations.
    """
    registry = DEFAULT_REGISTRY if registry is None else registry
    for overload in _overloads(target):
        registry.add(overload, custom_translation(overload, fn))


def custom_translation(target: Target, fn: Callable[..., Any]) -> Translation:
    if isinstance(target, torch._ops.OpOverloadPacket):
        raise TypeError(
            f"custom_translation_table key {target} is an OpOverloadPacket; use one overload, "
            f"for example {target}.default"
        )
    if isinstance(fn, (list, tuple)):
        raise TypeError(
            f"custom_translation_table[{target}] must be a single callable, not a {type(fn).__name__}"
        )
    if not callable(fn):
        raise TypeError(
            f"custom_translation_table[{target}] must be callable, got {type(fn).__name__}"
        )
    style = "ctx" if _first_param(fn) == "ctx" else "onnxscript"
    return Translation(fn=fn, target=target, custom=True, style=style)


def _first_param(fn: Callable[..., Any]) -> str | None:
    import inspect

    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return None
    return params[0] if params else None
