"""Decomposition: lower every op we cannot translate to ops we can; keep the rest whole.

The table is derived from the registry: an op with a translation is never decomposed. When the
captured program already holds only translated, safely functional ops, the (slow) re-trace of
``run_decompositions`` is skipped altogether. Control-flow subgraphs (``cond``, ``while_loop``,
``scan``) are judged node by node like the top graph: their presence alone forces nothing, since
the re-trace rejects some bodies torch.export captured (a ``scan`` body that returns its carry
as an output as well is refused as "aliasing").

An in-place write that other nodes observe (torchvision swin's mask filled slice by slice, a
cache updated with ``copy_``) is rewritten in the graph into its functional twin and the
``slice_scatter``/``select_scatter`` that carry it back (``functionalize_observed_writes``):
only those nodes change, where a re-trace of the whole program cost swin_t seconds. The
re-trace's cost does not follow its table: ``run_decompositions`` with an empty table costs
swin_t 5.5 s against 7.1 s with the full one (measured under load), so only ops that need a
decomposition reach it.

A custom op (``torch.library``) with no translation is traced through its implementation
when it has one written in torch ops: the table maps it to its Python kernel (or its
CompositeImplicitAutograd kernel), and the re-trace records the ops that kernel runs. A
translation, built in or registered by the user, always wins: ops with one are never traced.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from typing import Any

import torch

from exporter import _metadata
from exporter._errors import DecompositionError
from exporter._translate import (
    fx_targets,
    is_noop_target,
    lookup,
    lookup_for_node,
    qualified_name,
)
from exporter.ops._registry import Registry

_NO_TRANSLATION = " has no translation"


@functools.lru_cache(maxsize=8)
def _table_for(targets: frozenset[Any]) -> dict[Any, Any]:
    table = torch.export.default_decompositions()
    # ops of optional libraries (torchao) are registered by qualified name
    names = {target for target in targets if isinstance(target, str)}
    for op in list(table.keys()):
        if op in targets or (
            names and isinstance(op, torch._ops.OpOverload) and qualified_name(op) in names
        ):
            del table[op]
    return table


def decomposition_table(registry: Registry) -> Any:
    return _table_for(registry.targets())


def _grouped_mm_by_group_masks(
    input: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor
) -> torch.Tensor:
    """``out[r] = input[r] @ weight[g]`` for the rows ``offs[g-1] <= r < offs[g]`` of group g.

    The library's own kernel skips empty groups with a Python ``if`` on ``offs``' values,
    which no trace can follow. Here every group multiplies every row and keeps its own rows:
    G times the kernel's work, but no shape or branch depends on the data. A translation
    registered for the op gives a faster graph and wins over this one.
    """
    rows = torch.arange(input.shape[0], device=input.device).unsqueeze(-1)
    ends = offs.to(torch.int64)
    out = input.new_zeros(input.shape[0], weight.shape[2])
    start = torch.zeros((), dtype=torch.int64, device=input.device)
    for group in range(weight.shape[0]):
        end = ends[group]
        in_group = (rows >= start) & (rows < end)
        out = torch.where(in_group, input @ weight[group], out)
        start = end
    return out


#: Library ops whose implementation branches on tensor values (so tracing it fails), each
#: with an equivalent written without such branches, keyed by qualified name.
_BRANCH_FREE_IMPLEMENTATIONS: dict[str, Callable[..., Any]] = {
    "transformers::grouped_mm_fallback": _grouped_mm_by_group_masks,
}


def traceable_implementation(op: Any) -> tuple[Callable[..., Any], str] | None:
    """A custom op's implementation in torch ops and what it is, or None when it has none.

    Only ops outside aten and prims qualify: torch's own ops are decomposed by its table.
    """
    if not isinstance(op, torch._ops.OpOverload) or op.namespace in ("aten", "prims"):
        return None
    qualified = f"{op.namespace}::{op._opname}"
    branch_free = _BRANCH_FREE_IMPLEMENTATIONS.get(qualified)
    if branch_free is not None:
        return branch_free, "a branch-free equivalent of its implementation"
    from torch._library.custom_ops import OPDEFS

    opdef = OPDEFS.get(qualified)
    if opdef is not None:
        kernel = opdef._backend_fns.get("cpu") or opdef._backend_fns.get(None) or opdef._init_fn
        if kernel is not None:
            return kernel, "its Python implementation"
    if torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd"):
        return op.decompose, "its CompositeImplicitAutograd kernel"
    return None


class _TracedImplementationFailed(Exception):
    """Marks the error a custom op's implementation raised while being traced."""

    def __init__(self, op: Any, cause: BaseException) -> None:
        first_line = (str(cause).strip().splitlines() or [""])[0]
        super().__init__(f"{type(cause).__name__}: {first_line}")
        self.op = op


def _traced(op: Any, kernel: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return kernel(*args, **kwargs)
        except Exception as exc:
            raise _TracedImplementationFailed(op, exc) from exc

    return run


def traced_custom_ops(
    program: torch.export.ExportedProgram, registry: Registry
) -> dict[Any, tuple[Callable[..., Any], str]]:
    """The untranslated custom ops of the program that can be traced through, with how."""
    found = {}
    for node, target in fx_targets(program.graph_module):
        if target in found or lookup_for_node(registry, node, target) is not None:
            continue
        implementation = traceable_implementation(target)
        if implementation is not None:
            found[target] = implementation
    return found


def _failed_trace(exc: BaseException) -> _TracedImplementationFailed | None:
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, _TracedImplementationFailed):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


#: In-place dropouts, ``(input, p, train)``: they write nothing in eval mode or at p == 0.
_INPLACE_DROPOUTS = frozenset(
    f"aten::{name}_"
    for name in ("dropout", "feature_dropout", "alpha_dropout", "feature_alpha_dropout")
)


def _writes_nothing(node: torch.fx.Node) -> bool:
    """An in-place dropout of an eval-mode model (torchvision's ``Dropout(inplace=True)``
    heads) leaves its input as it was, so it forces no re-trace."""
    if node.target.name() not in _INPLACE_DROPOUTS:
        return False
    p, train = (list(node.args[1:3]) + [None, None])[:2]
    return train is False or (isinstance(p, (int, float)) and p == 0)


def _mutated_args(node: torch.fx.Node) -> list[torch.fx.Node]:
    target = node.target
    if not isinstance(target, torch._ops.OpOverload) or not target._schema.is_mutable:
        return []
    if _writes_nothing(node):
        return []
    mutated = []
    for i, arg in enumerate(target._schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            value = node.args[i] if i < len(node.args) else node.kwargs.get(arg.name)
            if isinstance(value, torch.fx.Node):
                mutated.append(value)
    return mutated


def _observed_writes(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The tensors the node writes in place that something else could read.

    An in-place op is the same as its functional twin only when nobody else can observe the
    old value: the mutated tensor is an intermediate (not an input, nor a view or alias of
    something) and the in-place op is its only user."""
    return [
        arg
        for arg in _mutated_args(node)
        if arg.op != "call_function" or _aliases_input(arg) or len(arg.users) != 1
    ]


def needs_decomposition(program: torch.export.ExportedProgram, registry: Registry) -> str | None:
    """Why the program must go through run_decompositions, or None when it can skip it.

    Looks into every control-flow subgraph, so a body needs the re-trace only for what it
    holds."""
    return next(decomposition_reasons(program, registry), None)


def decomposition_reasons(
    program: torch.export.ExportedProgram, registry: Registry
) -> Iterator[str]:
    """Every reason the program needs run_decompositions: each op without a translation (once)
    and each in-place op whose write another node could observe."""
    seen = set()
    for node, target in fx_targets(program.graph_module):
        if is_noop_target(target) or getattr(target, "__name__", "") == "getitem":
            continue
        if lookup(registry, target) is None:
            if target not in seen:
                seen.add(target)
                yield f"{target}{_NO_TRANSLATION}"
            continue
        for arg in _observed_writes(node):
            yield f"{node.name} mutates {arg.name}, which is observable elsewhere"


#: Views an in-place write can be carried back through: view -> its scatter (same arguments).
_SCATTERS = {
    torch.ops.aten.slice.Tensor: torch.ops.aten.slice_scatter.default,
    torch.ops.aten.select.int: torch.ops.aten.select_scatter.default,
}


def _aliases_input(node: torch.fx.Node) -> bool:
    """The node's result may share memory with its first input (a view, or ``aten.to``)."""
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return False
    returns = target._schema.returns
    return bool(returns) and returns[0].alias_info is not None and not target._schema.is_mutable


def _functional_twin(target: Any) -> Any:
    packet = target.overloadpacket.__name__
    if target.namespace != "aten" or not packet.endswith("_") or packet.endswith("__"):
        return None
    functional = getattr(torch.ops.aten, packet[:-1], None)
    twin = getattr(functional, target._overloadname, None) if functional is not None else None
    if twin is None or twin._schema.is_mutable:
        return None
    names = [arg.name for arg in target._schema.arguments]
    return twin if [arg.name for arg in twin._schema.arguments] == names else None


def _functionalize_write(
    graph: torch.fx.Graph, node: torch.fx.Node, signature: torch.export.ExportGraphSignature
) -> bool:
    """Rewrites one in-place op whose write others observe into its functional twin, carrying
    the new value back through the slices and selects it wrote into (``slice_scatter``,
    ``select_scatter``) up to the last tensor read after it, and points those later reads at
    the new values. Only that op's few nodes change: no re-trace of the program.

    A written tensor the program returns is returned with the write: the output's entry in
    ``signature`` names the new value.

    Returns False (the graph untouched) where that is not sound: the write reaches a graph
    input or a buffer, a written tensor is returned other than as a user output, another alias of a written tensor is taken before the write,
    or the write must go back through a view other than slice/select."""
    mutated = _mutated_args(node)
    twin = _functional_twin(node.target)
    if twin is None or len(mutated) != 1 or not node.args or node.args[0] is not mutated[0]:
        return False
    order = {n: i for i, n in enumerate(graph.nodes)}
    here = order[node]
    chain = [mutated[0]]
    while _aliases_input(chain[-1]):
        chain.append(chain[-1].args[0])
    if chain[-1].op != "call_function":
        return False  # the write reaches a graph input or a constant: the caller sees it
    in_chain = set(chain) | {node}
    read_after = []
    for level in chain:
        later = []
        for user in level.users:
            if user in in_chain:
                continue
            if user.op == "output" and not _returned_as_user_output(level, signature):
                return False
            if user.op == "output" or order[user] > here:
                later.append(user)
            elif _aliases_input(user):
                return False  # an alias taken before the write could be read after it
        read_after.append(later)
    needed = max((i for i, later in enumerate(read_after) if later), default=-1)
    if any(chain[i].target not in _SCATTERS for i in range(needed)):
        return False
    with graph.inserting_after(node):
        new = graph.call_function(twin, node.args, node.kwargs)
    new.meta = dict(node.meta)
    node.replace_all_uses_with(new)
    graph.erase_node(node)
    values = [new]
    for i in range(needed):
        view = chain[i]
        with graph.inserting_after(values[-1]):
            scattered = graph.call_function(
                _SCATTERS[view.target], (view.args[0], values[-1], *view.args[1:]), view.kwargs
            )
        scattered.meta = dict(view.args[0].meta)
        values.append(scattered)
    for level, value, later in zip(chain, values, read_after):
        for user in later:
            user.replace_input_with(level, value)
            if user.op == "output":
                for spec in signature.output_specs:
                    if getattr(spec.arg, "name", None) == level.name:
                        spec.arg = type(spec.arg)(name=value.name)
    return True


def _returned_as_user_output(node: torch.fx.Node, signature: Any) -> bool:
    kinds = {
        spec.kind for spec in signature.output_specs if getattr(spec.arg, "name", None) == node.name
    }
    return kinds == {torch.export.graph_signature.OutputKind.USER_OUTPUT}


def functionalize_observed_writes(program: torch.export.ExportedProgram) -> int:
    """Rewrites, in the top graph, each in-place op whose write is observable elsewhere
    (``needs_decomposition`` would re-trace the whole program for it) into functional ops where
    that is sound (``_functionalize_write``). Returns how many it rewrote."""
    graph_module = program.graph_module
    rewritten = 0
    for node in list(graph_module.graph.nodes):
        if node.op != "call_function":
            continue
        if _observed_writes(node) and _functionalize_write(
            graph_module.graph, node, program.graph_signature
        ):
            rewritten += 1
    if rewritten:
        graph_module.recompile()
    return rewritten


def decompose(
    program: torch.export.ExportedProgram,
    registry: Registry,
    notes: list[str] | None = None,
    untraceable: dict[str, str] | None = None,
) -> tuple[torch.export.ExportedProgram, str | None]:
    """Returns the program to translate and the reason decomposition ran (None: skipped).

    Each custom op traced through its implementation gets a line in ``notes`` and the log. One
    whose implementation cannot be traced stays in the program, so the translation step lists
    it with every other op that has no translation; ``untraceable`` gets its name and why."""
    functionalize_observed_writes(program)
    reason = needs_decomposition(program, registry)
    if reason is None:
        return program, None
    traced = traced_custom_ops(program, registry)
    while True:
        table = decomposition_table(registry)
        if traced:
            table = {**table, **{op: _traced(op, kernel) for op, (kernel, _) in traced.items()}}
        try:
            decomposed = _run_decompositions(program, table)
            break
        except Exception as exc:
            failed = _failed_trace(exc)
            if failed is None:
                raise _decomposition_error(exc, reason) from exc
            how = traced.pop(failed.op)[1]
            why = (
                f"tracing it through {how} failed ({failed}): its implementation cannot be "
                f"captured as a graph (a Python branch or loop on tensor values, or a kernel "
                f"not written in torch ops)"
            )
            logging.getLogger("exporter").info(f"{_metadata.target_name(failed.op)}: {why}")
            if untraceable is not None:
                untraceable[_metadata.target_name(failed.op)] = why
    for op, (_, how) in traced.items():
        note = f"traced custom op {_metadata.target_name(op)} through {how} (it has no translation)"
        logging.getLogger("exporter").info(note)
        if notes is not None:
            notes.append(note)
    return decomposed, reason


def _run_decompositions(
    program: torch.export.ExportedProgram, table: dict[Any, Any]
) -> torch.export.ExportedProgram:
    from exporter._capture import _size_oblivious
    from exporter._flags import onnx_export_flag
    from exporter.ops._fake_kernels import installed as fake_kernels_installed

    # The re-trace runs op kernels on fake tensors again: the kernels torch lacks
    # (ops/_fake_kernels.py) and those that behave differently while we export (the
    # recurrent ops' shape kernels, ops/recurrent.py) must be there as during capture.
    with _size_oblivious(), onnx_export_flag(), fake_kernels_installed():
        return program.run_decompositions(table)


def _decomposition_error(exc: BaseException, reason: str) -> DecompositionError:
    remedy = (
        "; a program whose ops all have translations skips this step, so registering one "
        "with export(..., custom_translation_table={op_overload: fn}) avoids it"
        if reason.endswith(_NO_TRANSLATION)
        else "; write the in-place op out of place in the model to avoid this step"
    )
    return DecompositionError(
        f"run_decompositions failed ({type(exc).__name__}: {exc}). It ran because {reason}{remedy}."
    )
