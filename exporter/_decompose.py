"""Decomposition: lower every op we cannot translate to ops we can; keep the rest whole.

The table is derived from the registry: an op with a translation is never decomposed. When the
captured program already holds only translated, safely functional ops, the (slow) re-trace of
``run_decompositions`` is skipped altogether. Control-flow subgraphs (``cond``, ``while_loop``,
``scan``) are judged node by node like the top graph: their presence alone forces nothing, since
the re-trace rejects some bodies torch.export captured (a ``scan`` body that returns its carry
as an output as well is refused as "aliasing").
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from exporter._errors import DecompositionError
from exporter._translate import fx_targets, is_noop_target, lookup
from exporter.ops._registry import Registry

_NO_TRANSLATION = " has no translation"


@functools.lru_cache(maxsize=8)
def _table_for(targets: frozenset[Any]) -> dict[Any, Any]:
    table = torch.export.default_decompositions()
    for op in list(table.keys()):
        if op in targets:
            del table[op]
    return table


def decomposition_table(registry: Registry) -> Any:
    return _table_for(registry.targets())


def _mutated_args(node: torch.fx.Node) -> list[torch.fx.Node]:
    target = node.target
    if not isinstance(target, torch._ops.OpOverload) or not target._schema.is_mutable:
        return []
    mutated = []
    for i, arg in enumerate(target._schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            value = node.args[i] if i < len(node.args) else node.kwargs.get(arg.name)
            if isinstance(value, torch.fx.Node):
                mutated.append(value)
    return mutated


def _is_view(node: torch.fx.Node) -> bool:
    target = node.target
    return isinstance(target, torch._ops.OpOverload) and target.is_view


def needs_decomposition(program: torch.export.ExportedProgram, registry: Registry) -> str | None:
    """Why the program must go through run_decompositions, or None when it can skip it.

    Looks into every control-flow subgraph, so a body needs the re-trace only for what it
    holds."""
    for node, target in fx_targets(program.graph_module):
        if is_noop_target(target) or getattr(target, "__name__", "") == "getitem":
            continue
        if lookup(registry, target) is None:
            return f"{target}{_NO_TRANSLATION}"
        for arg in _mutated_args(node):
            # An in-place op is the same as its functional twin only when nobody else can
            # observe the old value: the mutated tensor is an intermediate (not an input or a
            # view of something) and the in-place op is its only user.
            if arg.op != "call_function" or _is_view(arg) or len(arg.users) != 1:
                return f"{node.name} mutates {arg.name}, which is observable elsewhere"
    return None


def decompose(
    program: torch.export.ExportedProgram, registry: Registry
) -> tuple[torch.export.ExportedProgram, str | None]:
    """Returns the program to translate and the reason decomposition ran (None: skipped)."""
    reason = needs_decomposition(program, registry)
    if reason is None:
        return program, None
    try:
        from exporter._capture import _size_oblivious
        from exporter._flags import onnx_export_flag
        from exporter.ops._fake_kernels import installed as fake_kernels_installed

        # The re-trace runs op kernels on fake tensors again: the kernels torch lacks
        # (ops/_fake_kernels.py) and those that behave differently while we export (the
        # recurrent ops' shape kernels, ops/recurrent.py) must be there as during capture.
        with _size_oblivious(), onnx_export_flag(), fake_kernels_installed():
            return program.run_decompositions(decomposition_table(registry)), reason
    except Exception as exc:
        remedy = (
            "; a program whose ops all have translations skips this step, so registering one "
            "with export(..., custom_translation_table={op_overload: fn}) avoids it"
            if reason.endswith(_NO_TRANSLATION)
            else "; write the in-place op out of place in the model to avoid this step"
        )
        raise DecompositionError(
            f"run_decompositions failed ({type(exc).__name__}: {exc}). It ran because "
            f"{reason}{remedy}."
        ) from exc
