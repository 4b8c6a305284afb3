"""First divergent node: where the ONNX model stops agreeing with the exported program.

Both sides run once. The FX side runs the translated (decomposed) program node by node with
``torch.fx.Interpreter`` and keeps every intermediate; the ONNX side runs ONE onnxruntime session
in which every ONNX value that stands for an FX node (``graph.meta["exporter.fx_values"]``) is an
extra graph output. Comparing in the FX graph's topological order then finds the first node whose
ONNX value differs beyond tolerance, and names its ATen op, the translation that produced it and
the user's source line. (torch.onnx builds one session per node instead: ~30x slower.)
"""

from __future__ import annotations

import dataclasses
import operator
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir
import torch
from torch.export import graph_signature as gs
from torch.utils import _pytree as pytree

from torch_onnx_conformance.exporter import _dtypes, _errors, _metadata
from torch_onnx_conformance.exporter._translate import FX_VALUES_KEY, is_noop_target
from torch_onnx_conformance.exporter.diagnostics.compare import ArrayComparison, compare_arrays

#: How many divergent nodes after the first the result keeps, for context in the report.
KEEP_DIVERGENT = 10


@dataclasses.dataclass(kw_only=True)
class NodeComparison(ArrayComparison):
    """One FX node's value against its ONNX value: compare's result, and where it was taken."""

    fx_node: str
    target: str
    onnx_value: str


@dataclasses.dataclass
class DivergentNode:
    """The first FX node whose ONNX value differs from the exported program's value."""

    fx_node: str
    aten_op: str
    translation: str | None
    source: str | None
    onnx_value: str
    comparison: NodeComparison
    #: FX inputs of this node that could not be compared (no ONNX value): the divergence may
    #: have started in them instead.
    uncompared_inputs: list[str] = dataclasses.field(default_factory=list)

    def describe(self) -> str:
        where = self.source or "no user source line (library code)"
        lines = [
            f"first divergent FX node: {self.fx_node} ({self.aten_op})",
            f"  translated by: {self.translation or 'unknown'}",
            f"  source: {where}",
            f"  ONNX value {self.onnx_value}: {self.comparison.message}",
        ]
        if self.uncompared_inputs:
            lines.append(
                f"  its inputs {self.uncompared_inputs} have no ONNX value to compare; the "
                f"divergence may have started there"
            )
        return "\n".join(lines)


@dataclasses.dataclass
class BisectionResult:
    first: DivergentNode | None
    #: The compared nodes that diverged, in order (at most KEEP_DIVERGENT + 1 are kept).
    divergent: list[NodeComparison]
    compared: int
    candidates: int  # FX call_function nodes in the program
    uncompared: list[str]  # FX nodes with no ONNX value in the bisected model
    seconds: float
    #: Which ONNX model was bisected: "exported model" or "unoptimised re-translation".
    model_used: str
    #: How the exported program's own outputs compare with the reference (eager) outputs,
    #: when they were given: tells capture/decomposition problems apart from ONNX ones.
    program_vs_reference: str | None = None
    divergent_count: int = 0
    #: Which inputs were run, e.g. "example inputs: x[2, 4]" (set by the caller).
    inputs: str | None = None
    notes: list[str] = dataclasses.field(default_factory=list)

    def summary(self) -> str:
        lines = []
        if self.first is not None:
            lines.append(self.first.describe())
        else:
            lines.append(
                f"no divergent node: all {self.compared} compared ONNX values match the "
                f"exported program"
            )
        if self.program_vs_reference:
            lines.append(f"exported program vs reference outputs: {self.program_vs_reference}")
        lines.extend(self.notes)
        on = f", inputs: {self.inputs}" if self.inputs else ""
        lines.append(
            f"({self.compared}/{self.candidates} FX nodes compared on the {self.model_used}"
            f"{on}, {self.seconds:.2f} s)"
        )
        return "\n".join(lines)


# ------------------------------------------------------------------------------- comparing
def _compare_value(expected: Any, actual: Any, *, rtol: float, atol: float) -> ArrayComparison:
    """A program value (tensor, SymInt, Python number) against an ONNX value, by THE rule."""
    return compare_arrays(_as_numpy(expected), np.asarray(actual), rtol=rtol, atol=atol)


def _as_numpy(x: Any) -> np.ndarray:
    if isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        x = x.node.hint
    elif isinstance(x, torch.Tensor) and x.dtype == torch.bfloat16:
        x = x.float()  # bfloat16 is compared as float32 (exact), on both sides
    return _dtypes.graph_array(x)


# ------------------------------------------------------------------------------ FX side
class _Collector(torch.fx.Interpreter):
    """Runs the graph and keeps a copy of each wanted node's (first) output."""

    def __init__(self, gm: torch.fx.GraphModule, wanted: set[str]) -> None:
        super().__init__(gm, garbage_collect_values=True)
        self.wanted = wanted
        self.values: dict[str, Any] = {}
        # Decomposition is skipped for programs whose in-place ops are unobservable from
        # outside, yet such an op still overwrites an intermediate we keep: copy values then.
        self.copy = any(
            isinstance(n.target, torch._ops.OpOverload) and n.target._schema.is_mutable
            for n in gm.graph.nodes
            if n.op == "call_function"
        )

    def run_node(self, n: torch.fx.Node) -> Any:
        out = super().run_node(n)
        if n.name in self.wanted:
            first = out[0] if isinstance(out, (list, tuple)) and out else out
            if isinstance(first, torch.Tensor):
                first = first.detach().clone() if self.copy else first.detach()
            self.values[n.name] = first
        return out


def program_inputs(
    program: torch.export.ExportedProgram, args: Sequence[Any], kwargs: dict[str, Any] | None
) -> list[Any]:
    """Flat inputs of ``program.graph_module``: lifted weights and constants, then user leaves."""
    kwargs = dict(kwargs or {})
    try:
        from torch.export._tree_utils import reorder_kwargs

        kwargs = reorder_kwargs(kwargs, program.call_spec.in_spec)
    except Exception:  # noqa: BLE001 - the user's order is a fine fallback
        pass
    user = iter(pytree.tree_leaves((tuple(args), kwargs)))
    state = program.state_dict
    constants = program.constants
    flat: list[Any] = []
    for spec in program.graph_signature.input_specs:
        if spec.kind == gs.InputKind.USER_INPUT:
            flat.append(next(user, None))
        elif spec.kind == gs.InputKind.TOKEN:
            flat.append(torch.tensor([]))
        elif spec.target in state:
            flat.append(state[spec.target])
        else:
            flat.append(constants.get(spec.target))
    return flat


def run_program(
    program: torch.export.ExportedProgram,
    args: Sequence[Any],
    kwargs: dict[str, Any] | None,
    wanted: set[str],
) -> tuple[dict[str, Any], Any]:
    """Every wanted node's value, and the program's user outputs."""
    collector = _Collector(program.graph_module, wanted)
    with torch.no_grad():
        outputs = collector.run(*program_inputs(program, args, kwargs))
    specs = program.graph_signature.output_specs
    outputs = outputs if isinstance(outputs, (list, tuple)) else (outputs,)
    user = [o for o, s in zip(outputs, specs) if s.kind == gs.OutputKind.USER_OUTPUT]
    return collector.values, user


# ---------------------------------------------------------------------------- ONNX side
def _node_outputs(graph: ir.Graph) -> dict[str, ir.Value]:
    return {v.name: v for node in graph for v in node.outputs if v.name}


def run_with_intermediates(
    model: ir.Model, names: Sequence[str], feeds: list[np.ndarray]
) -> dict[str, np.ndarray]:
    """One onnxruntime session whose outputs are exactly ``names`` (values of ``model``)."""
    import onnxruntime as ort

    from torch_onnx_conformance.exporter._program import default_providers

    graph = model.graph
    values = _node_outputs(graph)
    saved = list(graph.outputs)
    try:
        graph.outputs.clear()
        graph.outputs.extend(values[n] for n in names)
        proto = ir.serde.serialize_model(model)
    finally:
        graph.outputs.clear()
        graph.outputs.extend(saved)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(
        proto.SerializeToString(), options, providers=default_providers()
    )
    input_names = [i.name for i in session.get_inputs()]
    if len(input_names) != len(feeds):
        raise ValueError(
            f"the bisected model takes {len(input_names)} inputs ({input_names}) but "
            f"{len(feeds)} were given"
        )
    outs = session.run(list(names), dict(zip(input_names, feeds)))
    return dict(zip(names, outs))


def _retranslate(
    program: torch.export.ExportedProgram, registry: Any, opset: int, root_class: str
) -> ir.Model:
    from torch_onnx_conformance.exporter import _passes, _translate

    model = _translate.translate_program(
        program,
        registry,
        opset=opset,
        metadata=False,
        names=_translate.SymbolNames(),
        root_class=root_class,
    )
    _passes.finalize(model)
    return model


# ---------------------------------------------------------------------------------- main
def bisect(
    onnx_program: Any,
    args: Sequence[Any],
    kwargs: dict[str, Any] | None = None,
    *,
    rtol: float,
    atol: float,
    registry: Any = None,
    reference_outputs: Sequence[Any] | None = None,
) -> BisectionResult:
    """Find the first FX node of ``onnx_program.exported_program`` whose ONNX value diverges.

    ``registry`` is the one the export translated with (custom translations included); without
    it the default registry names the translations and the exported (maybe optimised) model is
    bisected as it is. When the exported model lost FX value names to optimisation, an
    unoptimised re-translation is bisected instead, and if that one agrees everywhere, the
    optimised model is bisected too: the optimiser then changed the result.
    ``reference_outputs`` (the eager outputs) lets the result say whether the exported program
    itself already differs from the reference, i.e. capture or decomposition is at fault.
    """
    from torch_onnx_conformance.exporter._dtypes import to_numpy
    from torch_onnx_conformance.exporter._program import flatten_inputs

    start = time.perf_counter()
    program = onnx_program.exported_program
    if program is None:
        raise ValueError("bisection needs the ONNXProgram's exported_program; it is None")
    record = getattr(onnx_program, "record", None)
    known_registry = registry if registry is not None else getattr(record, "registry", None)
    if known_registry is None:
        from torch_onnx_conformance.exporter.ops._registry import DEFAULT_REGISTRY

        lookup_registry = DEFAULT_REGISTRY
    else:
        lookup_registry = known_registry

    fx_nodes = [
        n
        for n in program.graph.nodes
        if n.op == "call_function"
        and n.target is not operator.getitem
        and not is_noop_target(n.target)
    ]
    feeds = [to_numpy(t) for t in flatten_inputs(args, kwargs)]
    notes: list[str] = []
    if known_registry is None:
        notes.append(
            "the export's registry was not recorded: translations are named from the default "
            "registry, and custom ones would not show"
        )
    models = _models_to_bisect(onnx_program, fx_nodes, known_registry)
    fx_values, program_outputs = run_program(program, args, kwargs, {n.name for n in fx_nodes})
    program_vs_reference = None
    if reference_outputs is not None:
        program_vs_reference = _compare_outputs(
            program_outputs, reference_outputs, rtol=rtol, atol=atol
        )

    def bisect_entry(entry) -> Any:
        label, model = entry
        return _bisect_model(
            model, label, fx_nodes, fx_values, feeds, lookup_registry, rtol=rtol, atol=atol
        )

    results = [bisect_entry(models[0])]
    if results[0].first is None and len(models) > 1:
        if program_vs_reference == "match":
            # The exported model diverges from a reference the program matches, and the
            # unoptimised translation is clean: only optimisation is left; look there.
            results.append(bisect_entry(models[1]))
        elif program_vs_reference is None:
            notes.append(
                "the unoptimised translation matches the exported program everywhere; if the "
                "exported model's outputs differ, optimisation changed them"
            )
    result = _conclude(results, program_vs_reference, notes)
    result.seconds = time.perf_counter() - start
    return result


def _models_to_bisect(
    onnx_program: Any, fx_nodes: list[torch.fx.Node], known_registry: Any
) -> list[tuple[str, ir.Model]]:
    """The exported model, preceded by an unoptimised re-translation when optimisation lost
    some FX nodes' values and the export's registry is known."""
    record = getattr(onnx_program, "record", None)
    exported = onnx_program.model
    mapping = exported.graph.meta.get(FX_VALUES_KEY, {})
    present = _node_outputs(exported.graph)
    missing = [n.name for n in fx_nodes if mapping.get(n.name) not in present]
    models: list[tuple[str, ir.Model]] = []
    if missing and known_registry is not None:
        opset = (
            record.opset
            if record is not None and record.opset
            else exported.graph.opset_imports.get("", 20)
        )
        root = record.model_class if record is not None else ""
        program = onnx_program.exported_program
        models.append(
            ("unoptimised re-translation", _retranslate(program, known_registry, opset, root))
        )
    models.append(("exported model", exported))
    return models


def _conclude(
    results: list[BisectionResult], program_vs_reference: str | None, notes: list[str]
) -> BisectionResult:
    """The first result that found a divergent node (else the first), with the notes that
    say where the divergence comes from."""
    result = next((r for r in results if r.first is not None), results[0])
    if result is not results[0]:
        notes.append(
            "the unoptimised translation matches the exported program everywhere, the "
            "optimised model does not: the divergence comes from optimisation (onnxscript "
            "optimizer)"
        )
    result.program_vs_reference = program_vs_reference
    result.notes = notes + result.notes
    if (
        result.first is None
        and program_vs_reference
        and not program_vs_reference.startswith("match")
    ):
        result.notes.append(
            "the ONNX values agree with the exported program, but the exported program differs "
            "from the reference: the cause is in capture or decomposition, not translation"
        )
    return result


def _compare_outputs(
    actual: Sequence[Any], expected: Sequence[Any], *, rtol: float, atol: float
) -> str:
    tensors = [a for a in actual if isinstance(a, torch.Tensor)]
    if len(tensors) != len(expected):
        return f"output count differs: program {len(tensors)}, reference {len(expected)}"
    problems = []
    for i, (a, e) in enumerate(zip(tensors, expected)):
        found = _compare_value(e, _as_numpy(a), rtol=rtol, atol=atol)
        if not found.ok:
            problems.append(f"output {i}: {found.message}")
    return "; ".join(problems) if problems else "match"


def _bisect_model(
    model: ir.Model,
    label: str,
    fx_nodes: list[torch.fx.Node],
    fx_values: dict[str, Any],
    feeds: list[np.ndarray],
    registry: Any,
    *,
    rtol: float,
    atol: float,
) -> BisectionResult:
    from torch_onnx_conformance.exporter._translate import lookup_for_node

    mapping = model.graph.meta.get(FX_VALUES_KEY, {})
    present = _node_outputs(model.graph)
    candidates = []
    seen_values: set[str] = set()
    for node in fx_nodes:
        value_name = mapping.get(node.name)
        if value_name in present and node.name in fx_values and value_name not in seen_values:
            candidates.append((node, value_name))
            seen_values.add(value_name)
    onnx_values = run_with_intermediates(model, [v for _, v in candidates], feeds)

    compared: dict[str, bool] = {}
    divergent: list[NodeComparison] = []
    divergent_count = 0
    first: DivergentNode | None = None
    for node, value_name in candidates:
        expected = fx_values[node.name]
        if not isinstance(expected, (torch.Tensor, int, float, bool, torch.SymInt)):
            continue
        found = _compare_value(expected, onnx_values[value_name], rtol=rtol, atol=atol)
        compared[node.name] = found.ok
        if found.ok:
            continue
        divergent_count += 1
        if divergent_count > KEEP_DIVERGENT + 1:
            continue
        found.expected_shape = tuple(_as_numpy(expected).shape)
        found.actual_shape = tuple(np.asarray(onnx_values[value_name]).shape)
        comparison = NodeComparison(
            **dataclasses.asdict(found),
            fx_node=node.name,
            target=_metadata.target_name(node.target),
            onnx_value=value_name,
        )
        divergent.append(comparison)
        if first is None:
            translation = lookup_for_node(registry, node, node.target)
            inputs = [
                a.name
                for a in map(_through_getitem, node.all_input_nodes)
                if a.op == "call_function" and a.name not in compared
            ]
            first = DivergentNode(
                fx_node=node.name,
                aten_op=_metadata.target_name(node.target),
                translation=translation.name if translation is not None else None,
                source=_errors.user_source_line(node.meta.get("stack_trace")),
                onnx_value=value_name,
                comparison=comparison,
                uncompared_inputs=inputs,
            )
    uncompared = [n.name for n in fx_nodes if n.name not in {c.name for c, _ in candidates}]
    return BisectionResult(
        first=first,
        divergent=divergent,
        compared=len(compared),
        candidates=len(fx_nodes),
        uncompared=uncompared,
        seconds=0.0,
        model_used=label,
        divergent_count=divergent_count,
    )


def _through_getitem(node: torch.fx.Node) -> torch.fx.Node:
    """``getitem(x, 0)`` has no ONNX value of its own; it stands for x's first output."""
    if (
        node.target is operator.getitem
        and node.args[1] == 0
        and isinstance(node.args[0], torch.fx.Node)
    ):
        return node.args[0]
    return node
