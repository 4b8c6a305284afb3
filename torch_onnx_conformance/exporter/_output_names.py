"""Graph outputs named like the model names them, from the structure forward() returned.

Without ``output_names``, each graph output is named after its key path in what forward()
returned, as transformers' exporter names them: ``ModelOutput`` and dict keys and namedtuple
fields (``last_hidden_state``, ``pooler_output``, ``logits``), nested paths dotted
(``hidden_states.0``), a tuple or list returned at the top as ``output.<position>``
(``output.0``, and ``output.0.boxes`` for a detection model's list of dicts), a transformers
cache's tensors ``present.<layer>.<kind>`` as optimum names them. A bare tensor has no structure
and keeps torch.export's FX name (``add``, ``linear``), as with torch.onnx.

A name that is taken by a graph input or an initializer gets an ``output.`` prefix (diffusers'
``sample`` is both an input and an output field); when names still clash or a key gives none,
every output keeps its FX name. ``output_names`` given by the caller win; a partial list names
the first outputs and leaves the others their FX names, and ``output_names="fx"`` (or ``[]``)
keeps torch.onnx's FX names for all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree

from torch_onnx_conformance.exporter import _caches
from torch_onnx_conformance.exporter._errors import InvalidExportArgumentsError

#: ``output_names=FX`` keeps the FX names torch.onnx gives every output.
FX = "fx"

#: The prefix of a name whose path starts at a position, or that an input already takes.
PREFIX = "output"


def requested(output_names: Any) -> Any:
    """``output_names`` as the rest of the exporter takes it: ``"fx"`` is the empty list, which
    names no output, so every output keeps its FX name; anything else as given. Another
    string is refused by name (a single name is a list of one)."""
    if isinstance(output_names, str):
        if output_names == FX:
            return []
        raise InvalidExportArgumentsError(
            f"output_names={output_names!r}: give a list of names (output_names=[{output_names!r}] "
            f"for one output), or {FX!r} to keep torch.onnx's FX names"
        )
    return output_names


def leaf_names(out_spec: pytree.TreeSpec | None) -> list[str | None]:
    """Per output leaf of ``out_spec``, in flattening order: its name from its key path; None
    for a bare tensor (no path) or a path with an empty key."""
    if out_spec is None:
        return []
    names: list[str | None] = []
    for path in _caches.leaf_paths(out_spec):
        texts = [_caches.key_text(step.key) for step in path]
        if not texts or not all(texts):
            names.append(None)
            continue
        cached = _caches.leaf_name("present", path)
        if cached is not None and _caches.is_cache_class(_caches.first_named(path)):
            names.append(cached)  # present.0.key, wherever the cache lies in the outputs
            continue
        name = ".".join(texts)
        at_position = isinstance(path[0].key, pytree.SequenceKey)
        names.append(f"{PREFIX}.{name}" if at_position else name)
    return names


def structured_names(model: Any, program: torch.export.ExportedProgram) -> list[str] | None:
    """One name per graph output of ``model`` (an onnx_ir model whose inputs are named already)
    from the outputs' structure in ``program``, or None where they cannot all be named."""
    from torch.export import graph_signature as gs

    graph = model.graph
    user_outputs = [
        spec
        for spec in program.graph_signature.output_specs
        if spec.kind == gs.OutputKind.USER_OUTPUT
    ]
    names = leaf_names(_out_spec(program))
    if len(names) != len(user_outputs):
        return None
    # Python numbers and None returned by forward() get no graph output.
    names = [
        n for n, spec in zip(names, user_outputs) if not isinstance(spec.arg, gs.ConstantArgument)
    ]
    if len(names) != len(graph.outputs) or not any(names):
        return None
    outputs = list(graph.outputs)
    if any(value is other for i, value in enumerate(outputs) for other in outputs[:i]):
        return None  # one value twice: it can carry one name only
    taken = {value.name for value in graph.inputs} | set(graph.initializers)
    chosen = _unclashed(names, taken)
    fx_named = {value.name for value, name in zip(outputs, chosen) if name is None}
    final = [name or value.name for name, value in zip(chosen, outputs)]
    if len(set(final)) < len(final) or fx_named & {n for n in chosen if n is not None}:
        return None
    return final


def _out_spec(program: torch.export.ExportedProgram) -> pytree.TreeSpec | None:
    """``program.call_spec.out_spec`` without that property's cost: it defines a NamedTuple
    class on every access (a third of a millisecond, on every export)."""
    calls = program.module_call_graph
    if not calls or calls[0].fqn != "" or calls[0].signature is None:
        return None
    return calls[0].signature.out_spec


def _unclashed(names: Sequence[str | None], taken: set[str]) -> list[str | None]:
    """Each name, prefixed with ``output.`` when an input or initializer takes it; None where
    even that is taken."""
    chosen: list[str | None] = []
    for name in names:
        if name is not None and name in taken:
            name = f"{PREFIX}.{name}"
        chosen.append(None if name is None or name in taken else name)
    return chosen


def name_outputs(model: Any, program: torch.export.ExportedProgram) -> None:
    """Rename ``model``'s graph outputs after their structure (see the module's docstring);
    outputs that cannot all be named keep their FX names. ``_validate.apply_io_names`` renames
    them, as it does the caller's ``output_names``: a returned weight keeps its name, and
    bisection's FX-node-to-value map follows the new names."""
    from torch_onnx_conformance.exporter import _validate

    names = structured_names(model, program)
    if names is not None:
        _validate.apply_io_names(model, None, names, None)
