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

A node whose op has no translation is decomposed alone (``decompose_locally``): its
decomposition is traced with ``make_fx`` on the node's fake inputs and the graph it gives is
spliced in where the node was, keeping the node's metadata; the rest of the program stays as
captured. Only an observable in-place write that cannot be rewritten locally (or a node that
cannot be replaced alone) still re-traces the whole program with ``run_decompositions``.

A custom op (``torch.library``) with no translation is traced through its implementation
when it has one written in torch ops: its Python kernel (or its CompositeImplicitAutograd
kernel) is traced, and the ops it runs replace the node. A translation, built in or
registered by the user, always wins: ops with one are never traced.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.export import graph_signature as gs

from torch_onnx_conformance.exporter import _metadata
from torch_onnx_conformance.exporter._errors import DecompositionError
from torch_onnx_conformance.exporter._translate import (
    fx_targets,
    is_noop_target,
    lookup,
    lookup_for_node,
    qualified_name,
)
from torch_onnx_conformance.exporter.ops._registry import Registry

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
    ``signature`` names the new value. A write that reaches a buffer or a user input is carried
    back to it and returned as its mutation (``BUFFER_MUTATION``, ``USER_INPUT_MUTATION``), as
    ``run_decompositions`` would return it.

    Returns False (the graph untouched) where that is not sound: the write reaches a parameter
    or a constant, another alias of a written tensor is taken before the write, or the write
    must go back through a view other than slice/select."""
    mutated = _mutated_args(node)
    twin = _functional_twin(node.target)
    if twin is None or len(mutated) != 1 or not node.args or node.args[0] is not mutated[0]:
        return False
    order = {n: i for i, n in enumerate(graph.nodes)}
    here = order[node]
    chain = [mutated[0]]
    while _aliases_input(chain[-1]):
        chain.append(chain[-1].args[0])
    mutation = _input_mutation(chain[-1], signature)
    if chain[-1].op != "call_function" and mutation is None:
        return False  # the write reaches a constant or a parameter
    in_chain = set(chain) | {node}
    read_after = []
    for level in chain:
        later = []
        for user in level.users:
            if user in in_chain:
                continue
            if user.op == "output" and not _returned_as_output(level, signature):
                return False
            if user.op == "output" or order[user] > here:
                later.append(user)
            elif _aliases_input(user):
                return False  # an alias taken before the write could be read after it
        read_after.append(later)
    needed = max((i for i, later in enumerate(read_after) if later), default=-1)
    if mutation is not None:
        needed = len(chain) - 1  # the caller sees the input as written: carry it back there
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
    if mutation is not None:
        _return_mutation(graph, signature, values[-1], *mutation)
    return True


_OUTPUT_KINDS = frozenset(
    {
        gs.OutputKind.USER_OUTPUT,
        gs.OutputKind.BUFFER_MUTATION,
        gs.OutputKind.USER_INPUT_MUTATION,
    }
)

#: What a write into an input of each kind is returned as (as ``run_decompositions`` does).
_MUTATION_KINDS = {
    gs.InputKind.BUFFER: gs.OutputKind.BUFFER_MUTATION,
    gs.InputKind.USER_INPUT: gs.OutputKind.USER_INPUT_MUTATION,
}


def _returned_as_output(node: torch.fx.Node, signature: Any) -> bool:
    kinds = {
        spec.kind for spec in signature.output_specs if getattr(spec.arg, "name", None) == node.name
    }
    return bool(kinds) and kinds <= _OUTPUT_KINDS


def _input_mutation(root: torch.fx.Node, signature: Any) -> tuple[Any, str] | None:
    """For a placeholder that is a buffer or a user input: the kind of output its write is
    returned as and whom it names; else None."""
    if root.op != "placeholder":
        return None
    for spec in signature.input_specs:
        if getattr(spec.arg, "name", None) == root.name and spec.kind in _MUTATION_KINDS:
            target = spec.target if spec.kind == gs.InputKind.BUFFER else root.name
            return _MUTATION_KINDS[spec.kind], target
    return None


def _return_mutation(
    graph: torch.fx.Graph, signature: Any, value: torch.fx.Node, kind: Any, target: str
) -> None:
    """Returns ``value`` as the new value of the input ``target``: a mutation output, before
    the user outputs. (A later write into it finds ``value`` returned and moves the output on.)"""
    first_user = next(
        (i for i, s in enumerate(signature.output_specs) if s.kind == gs.OutputKind.USER_OUTPUT),
        len(signature.output_specs),
    )
    output = graph.output_node()
    returned = list(output.args[0])
    returned.insert(first_user, value)
    output.args = (tuple(returned),)
    signature.output_specs.insert(
        first_user, gs.OutputSpec(kind=kind, arg=gs.TensorArgument(name=value.name), target=target)
    )


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
    if not _has_observed_writes(program, registry):
        local = decompose_locally(program, registry, notes, untraceable)
        if local is not None:
            return local, reason
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
            _untraceable(failed, traced.pop(failed.op)[1], untraceable)
    for op, (_, how) in traced.items():
        _note_traced(op, how, notes)
    return decomposed, reason


def _untraceable(
    failed: _TracedImplementationFailed, how: str, untraceable: dict[str, str] | None
) -> None:
    why = (
        f"tracing it through {how} failed ({failed}): its implementation cannot be "
        f"captured as a graph (a Python branch or loop on tensor values, or a kernel "
        f"not written in torch ops)"
    )
    logging.getLogger("exporter").info(f"{_metadata.target_name(failed.op)}: {why}")
    if untraceable is not None:
        untraceable[_metadata.target_name(failed.op)] = why


def _note_traced(op: Any, how: str, notes: list[str] | None) -> None:
    note = f"traced custom op {_metadata.target_name(op)} through {how} (it has no translation)"
    logging.getLogger("exporter").info(note)
    if notes is not None:
        notes.append(note)


def _has_observed_writes(program: torch.export.ExportedProgram, registry: Registry) -> bool:
    return any(
        _observed_writes(node)
        for node, target in fx_targets(program.graph_module)
        if not is_noop_target(target) and lookup(registry, target) is not None
    )


# ------------------------------------------------------------------ local decomposition
#: How many nodes one program may have decomposed locally before the whole-program
#: re-trace takes over (a decomposition that keeps producing ops without a translation).
_LOCAL_LIMIT = 10_000

#: Node metadata a decomposed node's replacements take from the trace, not from the node.
_TRACED_META = frozenset({"val", "tensor_meta", "example_value", "unbacked_bindings"})


class _NotLocal(Exception):
    """A node the local decomposition cannot replace: the whole program is re-traced."""


def _untranslated(node: torch.fx.Node, registry: Registry) -> bool:
    target = node.target
    return (
        node.op == "call_function"
        and not is_noop_target(target)
        and getattr(target, "__name__", "") != "getitem"
        and lookup(registry, target) is None
    )


@functools.lru_cache(maxsize=8)
def _table_dict(targets: frozenset[Any]) -> dict[Any, Any]:
    return dict(_table_for(targets).items())


def _graph_modules(graph_module: torch.fx.GraphModule) -> Iterator[torch.fx.GraphModule]:
    """The graph module and, depth first, those of its control-flow subgraphs."""
    yield graph_module
    for node in graph_module.graph.nodes:
        if node.op == "get_attr":
            sub = getattr(graph_module, node.target, None)
            if isinstance(sub, torch.fx.GraphModule):
                yield from _graph_modules(sub)


def _fake_mode(graph: torch.fx.Graph) -> Any:
    from torch._guards import detect_fake_mode

    return detect_fake_mode([node.meta.get("val") for node in graph.find_nodes(op="placeholder")])


def _replace_node(
    graph: torch.fx.Graph,
    node: torch.fx.Node,
    decomposition: Callable[..., Any],
    table: dict[Any, Any],
    signature: Any,
    add_constant: Callable[[torch.Tensor], str],
) -> list[torch.fx.Node]:
    """Replaces one node by the graph its decomposition traces to on the node's fake inputs
    (``make_fx``), spliced in where the node was. The new nodes keep the node's metadata
    (source line, module stack) with the shapes the trace found. Returns the new call nodes."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.utils import _pytree as pytree

    target = node.target
    if not isinstance(target, torch._ops.OpOverload) or target._schema.is_mutable:
        raise _NotLocal(f"{node.name} is not a functional op")
    flat, spec = pytree.tree_flatten((node.args, node.kwargs))
    positions = [i for i, arg in enumerate(flat) if isinstance(arg, torch.fx.Node)]
    inputs = [flat[i] for i in positions]
    if any("val" not in arg.meta for arg in inputs):
        raise _NotLocal(f"an input of {node.name} has no example value")

    def run(*values: Any) -> Any:
        filled = list(flat)
        for i, value in zip(positions, values):
            filled[i] = value
        args, kwargs = pytree.tree_unflatten(filled, spec)
        return decomposition(*args, **kwargs)

    traced = make_fx(run, decomposition_table=table, tracing_mode="real")(
        *[arg.meta["val"] for arg in inputs]
    )
    placeholders = [n for n in traced.graph.nodes if n.op == "placeholder"]
    val_map = dict(zip(placeholders, inputs))
    for attr in [n for n in traced.graph.nodes if n.op == "get_attr"]:
        name = add_constant(getattr(traced, attr.target))
        with graph.inserting_before(node):
            val_map[attr] = graph.get_attr(name)
        val_map[attr].meta = dict(attr.meta)
    with graph.inserting_before(node):
        result = graph.graph_copy(traced.graph, val_map)
    kept = {k: v for k, v in node.meta.items() if k not in _TRACED_META}
    added = [val_map[n] for n in traced.graph.nodes if n.op == "call_function"]
    for original in traced.graph.nodes:
        if original.op in ("call_function", "get_attr"):
            val_map[original].meta = {**kept, **original.meta}
    multiple = len(target._schema.returns) != 1 or isinstance(result, (list, tuple))
    replaced = {}
    if multiple:
        for user in list(node.users):
            index = user.args[1] if getattr(user.target, "__name__", "") == "getitem" else None
            if not isinstance(index, int) or not isinstance(result[index], torch.fx.Node):
                raise _NotLocal(f"{node.name}'s outputs are read other than by index")
            replaced[user] = result[index]
    elif isinstance(result, torch.fx.Node):
        replaced[node] = result
    else:
        raise _NotLocal(f"{node.name}'s decomposition returns no tensor")
    for old, new in replaced.items():
        old.replace_all_uses_with(new)
        for output in getattr(signature, "output_specs", ()):
            if getattr(output.arg, "name", None) == old.name:
                output.arg = type(output.arg)(name=new.name)
        if old is not node:
            graph.erase_node(old)
    graph.erase_node(node)
    return _drop_unread(graph, added)


def _drop_unread(graph: torch.fx.Graph, added: list[torch.fx.Node]) -> list[torch.fx.Node]:
    """``added`` less the nodes whose values nothing reads (a decomposition's extra outputs
    the program never used: ``_linalg_solve_ex``'s LU factors under ``tensorsolve``, and the
    checks ONNX has no equivalent for, such as ``_linalg_check_errors`` on its info output),
    erased last first; the rest in order."""
    kept = []
    for new in reversed(added):
        if not new.users and (is_noop_target(new.target) or not new.is_impure()):
            graph.erase_node(new)
        else:
            kept.append(new)
    return kept[::-1]


def _constant_adder(
    taken: Callable[[str], bool], store: Callable[[str, torch.Tensor], None]
) -> Callable[[torch.Tensor], str]:
    """Gives each tensor constant a decomposition makes a fresh attribute name, stored."""

    def add(tensor: torch.Tensor) -> str:
        i = 0
        while taken(f"_decomposed_constant{i}"):
            i += 1
        store(f"_decomposed_constant{i}", tensor)
        return f"_decomposed_constant{i}"

    return add


def _attribute(module: torch.nn.Module, target: str) -> Any:
    for part in target.split("."):
        module = getattr(module, part)
    return module


def decompose_locally(
    program: torch.export.ExportedProgram,
    registry: Registry,
    notes: list[str] | None = None,
    untraceable: dict[str, str] | None = None,
) -> torch.export.ExportedProgram | None:
    """A copy of the program with each node that has no translation replaced by the graph its
    decomposition traces to, alone, on that node's fake inputs: the cost follows the nodes that
    need it, where ``run_decompositions`` re-traces the whole program (swin_t: seconds) for one
    op. The ops a decomposition yields are judged the same way, so a decomposition into other
    untranslated ops is followed to ops with translations.

    A custom op is traced through its implementation (``traceable_implementation``); one whose
    implementation cannot be traced stays, and ``untraceable`` says why. Returns None where a
    node cannot be replaced alone (an in-place op, outputs read other than by index) or the
    table has no decomposition for it (``run_decompositions`` also decomposes
    CompositeImplicitAutograd ops such as ``cartesian_prod``, functionalizes in-place ops such
    as ``normal_`` and unwraps tensor subclasses' inner tensors): the caller re-traces the whole
    program then, and translation lists what is still left.
    """
    from torch_onnx_conformance.exporter._capture import _size_oblivious
    from torch_onnx_conformance.exporter._flags import onnx_export_flag
    from torch_onnx_conformance.exporter.ops._fake_kernels import (
        installed as fake_kernels_installed,
    )

    original = program.graph_module
    graph = copy.deepcopy(program.graph)
    signature = gs.ExportGraphSignature(  # only output specs change
        input_specs=list(program.graph_signature.input_specs),
        output_specs=[copy.copy(spec) for spec in program.graph_signature.output_specs],
    )
    constants: dict[str, torch.Tensor] = {}
    private, graphs = _graphs_to_change(original, graph, signature, registry, constants)
    table = _table_dict(registry.targets())
    custom = traced_custom_ops(program, registry)
    used, failed = set(), {}
    budget = [_LOCAL_LIMIT]
    with _size_oblivious(), onnx_export_flag(), fake_kernels_installed():
        for each_graph, each_signature, owner, add_constant in graphs:
            try:
                changed = _decompose_graph(
                    each_graph, each_signature, add_constant, registry, table, custom, used,
                    failed, budget,
                )  # fmt: skip
            except _NotLocal:
                return None
            if changed and owner is not None:
                owner.recompile()
    root = {
        node.target: constants.get(node.target)
        if node.target in constants
        else private.get(node.target) or _attribute(original, node.target)
        for node in graph.find_nodes(op="get_attr")
    }
    graph_module = torch.fx.GraphModule(root, graph)
    graph_module.meta.update(original.meta)
    copied = copy.copy(program)  # weights and constants shared; no re-verification
    copied._graph_module = graph_module
    copied._graph_signature = signature
    for failure, how in failed.values():
        _untraceable(failure, how, untraceable)
    for op in used:
        _note_traced(op, custom[op][1], notes)
    return copied


def _graphs_to_change(original, graph, signature, registry: Registry, constants: dict) -> tuple:
    """The top graph (a copy) and copies of the control-flow subgraphs that hold an
    untranslated op (the others stay shared), each with how a new constant is added to it."""
    private = {}
    for node in graph.find_nodes(op="get_attr"):
        sub = _attribute(original, node.target)
        if isinstance(sub, torch.fx.GraphModule) and any(
            _untranslated(n, registry) for gm in _graph_modules(sub) for n in gm.graph.nodes
        ):
            private[node.target] = copy.deepcopy(sub)
    graphs = [
        (
            graph,
            signature,
            None,
            _constant_adder(
                lambda name: name in constants or hasattr(original, name), constants.__setitem__
            ),
        )
    ]
    for sub in private.values():
        for gm in _graph_modules(sub):
            add = _constant_adder(
                functools.partial(hasattr, gm),
                functools.partial(gm.register_buffer, persistent=False),
            )
            graphs.append((gm.graph, None, gm, add))
    return private, graphs


def _decompose_graph(
    graph, signature, add_constant, registry, table, custom, used, failed, budget
) -> bool:
    """Replaces each untranslated node of one graph by its decomposition, and the untranslated
    nodes those yield in turn; whether anything changed. Raises ``_NotLocal`` where the program
    must be re-traced whole (a node that cannot be replaced alone, or ``budget[0]`` spent)."""
    fake_mode = _fake_mode(graph)
    work = [n for n in graph.nodes if _untranslated(n, registry)]
    changed = False
    while work:
        node = work.pop()
        target = node.target
        if target in custom:
            decomposition = _traced(target, custom[target][0])
        elif target in table:
            decomposition = table[target]
        else:  # no decomposition here: the re-trace's own table (CompositeImplicitAutograd
            # kernels, functionalization of in-place ops, tensor subclasses) may still have one
            raise _NotLocal(f"{node.name}: no decomposition in the table")
        budget[0] -= 1
        try:
            with fake_mode if fake_mode is not None else contextlib.nullcontext():
                added = _replace_node(graph, node, decomposition, table, signature, add_constant)
        except _NotLocal:
            raise
        except Exception as exc:
            traced_failure = _failed_trace(exc)
            if traced_failure is None or budget[0] < 0:
                raise _NotLocal(f"{node.name}: {type(exc).__name__}") from exc
            failed[target] = (traced_failure, custom.pop(target)[1])
            continue
        changed = True
        if target in custom:
            used.add(target)
        work.extend(n for n in added if _untranslated(n, registry))
        if budget[0] < 0:
            raise _NotLocal("the local decomposition's node budget is spent")
    return changed


def _run_decompositions(
    program: torch.export.ExportedProgram, table: dict[Any, Any]
) -> torch.export.ExportedProgram:
    from torch_onnx_conformance.exporter._capture import _size_oblivious
    from torch_onnx_conformance.exporter._flags import onnx_export_flag
    from torch_onnx_conformance.exporter.ops._fake_kernels import (
        installed as fake_kernels_installed,
    )

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
