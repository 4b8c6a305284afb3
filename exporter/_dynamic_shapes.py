"""dynamic_shapes in the tree form of the inputs: user axis names, Dims, and legacy dynamic_axes."""

from __future__ import annotations

import dataclasses
import inspect
import re
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from torch.export import Dim
from torch.utils import _pytree as pytree

from exporter._errors import InvalidExportArgumentsError


def user_input_nodes(program: torch.export.ExportedProgram) -> list[torch.fx.Node]:
    """The placeholders of the user's inputs (not parameters, buffers or constants), in order."""
    placeholders = (n for n in program.graph.nodes if n.op == "placeholder")
    return [
        node
        for node, spec in zip(placeholders, program.graph_signature.input_specs)
        if spec.kind == torch.export.graph_signature.InputKind.USER_INPUT
    ]


#: The states a dim the user declared dynamic can end in (``DimAudit.status``).
DYNAMIC, HELD, STATIC = "dynamic", "held", "static"

_ASSERT_EXPRESSION = re.compile(r"expression (.*) on node")
_MAX_GUARD_CHARS = 160


@dataclasses.dataclass(frozen=True)
class DimAudit:
    """What capture did to one dim of a user input.

    ``status``: ``dynamic`` (symbolic, any size), ``held`` (symbolic in the graph, but a guard
    narrowed its range to the example size: the graph may or may not be right at other sizes)
    or ``static`` (torch.export replaced it by its example size). ``guard`` is the guard in
    short form (dims written ``x.shape[0]``), ``source`` the user's line that raised it and
    ``stack`` the trace it came from, where torch kept them.
    """

    input: str
    axis: int
    size: int
    status: str
    declared: bool = True
    guard: str | None = None
    source: str | None = None
    stack: str | None = None

    @property
    def dim(self) -> str:
        return f"{self.input} dim {self.axis} (size {self.size})"

    def __str__(self) -> str:
        text = self.dim
        if self.status == STATIC:
            text += " became a constant"
        if self.guard:
            text += f", by the guard {self.guard}"
        if self.source:
            text += f" at {self.source}"
        return text


def _is_library(filename: str) -> bool:
    from exporter._errors import _LIBRARY_PARTS

    return any(part in filename for part in _LIBRARY_PARTS)


def _range_source(
    program: torch.export.ExportedProgram, shape_env: Any, symbol: Any
) -> tuple[str | None, str | None, bool]:
    """Where torch narrowed ``symbol``'s range: (the user's line, its stack trace, whether torch's
    own frame was the user's code).

    torch records one frame; when that frame is inside torch (an op's meta function), the
    graph node of the op that frame calls carries the user's line."""
    from exporter._errors import user_source_line

    slocs = getattr(shape_env, "var_to_range_sloc", {}).get(symbol)
    for sloc in (getattr(slocs, "lower", None), getattr(slocs, "upper", None)):
        frame = getattr(sloc, "framework_loc", None)
        filename = getattr(frame, "filename", None)
        if filename is None:
            continue
        here = f'File "{filename}", line {frame.lineno}, in {frame.name}\n    {frame.line or ""}\n'
        if not _is_library(filename):
            return user_source_line(here), here, True
        # FX keeps only user frames in a node's stack, so match the op torch's frame called.
        called = f"{frame.name} {frame.line or ''}"
        for node in program.graph.nodes:
            op = getattr(node.target, "_opname", None)
            trace = node.meta.get("stack_trace")
            if op and trace and re.search(rf"\b{re.escape(op)}\b", called):
                return user_source_line(trace), trace + "\n" + here, False
        inside = user_source_line(here)
        return f"{inside} (inside torch; it did not record the user's line)", here, False
    return None, None, False


_RELATIONS = {"Eq": "==", "Ne": "!=", "Ge": ">=", "Gt": ">", "Le": "<=", "Lt": "<"}
_RELATION = re.compile(r"(Eq|Ne|Ge|Gt|Le|Lt)\(([\w*+ -]+), ([\w*+ -]+)\)")


def _short(expr: str, names: dict[str, str]) -> str:
    relation = _RELATION.fullmatch(expr)
    if relation:
        op, left, right = relation.groups()
        expr = f"{left} {_RELATIONS[op]} {right}"
    for symbol, name in sorted(names.items(), key=lambda item: -len(item[0])):
        expr = re.sub(rf"\b{re.escape(symbol)}\b", name, expr)
    if len(expr) > _MAX_GUARD_CHARS:
        expr = expr[: _MAX_GUARD_CHARS - 1] + "\u2026"
    return expr


def _assertions(program: torch.export.ExportedProgram) -> list[tuple[str, str | None]]:
    """(expression, stack trace) of each deferred runtime assertion left in the graph."""
    found = []
    for node in program.graph.nodes:
        if node.op != "call_function" or "_assert_scalar" not in str(node.target):
            continue
        message = node.args[1] if len(node.args) > 1 else node.kwargs.get("assert_msg", "")
        match = _ASSERT_EXPRESSION.search(str(message))
        if match:
            found.append((match.group(1), node.meta.get("stack_trace")))
    return found


def _held_size(symbol: str, vr: Any, assertions: list[tuple[str, str | None]]) -> int | None:
    """The one size a guard allows ``symbol``: a singleton range, or an ``Eq(symbol, n)``
    assertion (size-oblivious capture can leave the range wider than the assertion)."""
    if vr is not None and vr.is_singleton():
        return int(vr.lower)
    for text, _ in assertions:
        match = re.fullmatch(
            rf"Eq\({re.escape(symbol)}, (-?\d+)\)|Eq\((-?\d+), {re.escape(symbol)}\)", text
        )
        if match:
            return int(match.group(1) or match.group(2))
    return None


def audit_dims(
    program: torch.export.ExportedProgram, declared: set[tuple[int, int]] | None = None
) -> list[DimAudit]:
    """Every dim the user declared dynamic (``declared``: (input index, axis) pairs), and every
    other dim a guard held, with where it ended and the guard that put it there.

    Capture turns guards into deferred runtime assertions (so a meta function's check does not
    freeze a dim the graph handles); a guard that compares a dim with a number still narrows its
    range to one size, and that is the dim this names together with the user's line.
    """
    from exporter._errors import user_source_line

    declared = declared or set()
    inputs = user_input_nodes(program)
    ranges = {str(sym): vr for sym, vr in program.range_constraints.items()}
    names: dict[str, str] = {}
    for node in inputs:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            for axis, size in enumerate(val.shape):
                if isinstance(size, torch.SymInt) and size.node.expr.is_Symbol:
                    names.setdefault(str(size.node.expr), f"{node.name}.shape[{axis}]")
    assertions = _assertions(program)
    audits = []
    for index, node in enumerate(inputs):
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        shape_env = getattr(getattr(val, "fake_mode", None), "shape_env", None)
        for axis, size in enumerate(val.shape):
            is_declared = (index, axis) in declared
            if not isinstance(size, torch.SymInt):
                if is_declared:
                    audits.append(DimAudit(node.name, axis, int(size), STATIC))
                continue
            expr = size.node.expr
            vr = ranges.get(str(expr))
            held_at = _held_size(str(expr), vr, assertions)
            if not expr.is_Symbol or held_at is None:
                if is_declared:
                    audits.append(DimAudit(node.name, axis, int(size.node.hint or 0), DYNAMIC))
                continue
            guard = source = stack = None
            for text, trace in assertions:
                if re.search(rf"\b{re.escape(str(expr))}\b", text):
                    guard, source, stack = _short(text, names), user_source_line(trace), trace
                    break
            # The frame that narrowed the range is the guard itself when it is the user's; an
            # assertion node only carries the stack of the node it was placed before.
            narrowed_at, narrowed_stack, in_user_code = _range_source(program, shape_env, expr)
            if in_user_code or source is None:
                source, stack = narrowed_at, narrowed_stack
            audits.append(
                DimAudit(
                    node.name,
                    axis,
                    held_at,
                    HELD,
                    declared=is_declared,
                    guard=guard or f"{names.get(str(expr), expr)} == {held_at}",
                    source=source,
                    stack=stack,
                )
            )
    return audits


def specialized(audits: list[DimAudit]) -> list[DimAudit]:
    """The audited dims that did not stay free: held at one size or made constants."""
    return [a for a in audits if a.status != DYNAMIC]


def specialized_dims_warning(audits: list[DimAudit]) -> str | None:
    """The warning for dims a guard held or froze, each with its guard and user line."""
    fixed = specialized(audits)
    if not fixed:
        return None
    lines = [
        "torch.export held dynamic dims at their example size while tracing: "
        + ", ".join(a.dim for a in fixed)
        + "."
    ]
    lines += [f"  - {a}" for a in fixed]
    if any(a.status == HELD for a in fixed):
        lines.append(
            "Held dims stay dynamic in the ONNX graph, but the guard assumed that size; check "
            "other sizes with export(..., verify=True), which runs a second shape."
        )
    if any(a.status == STATIC for a in fixed):
        lines.append(
            "Constant dims accept only their example size: rewrite the guarded line, or give "
            "the dim a Dim range it satisfies."
        )
    return "\n".join(lines)


def specialized_dims_table(audits: list[DimAudit]) -> str:
    """Markdown table of every audited dim for the report; empty when nothing was declared."""
    if not audits:
        return ""
    rows = [
        "| input | axis | example size | ended | guard | user line |",
        "|---|---|---|---|---|---|",
    ]
    for a in audits:
        cells = [a.input, str(a.axis), str(a.size), a.status, a.guard or "", a.source or ""]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows)


class AxisNames:
    """Which (flat input index, axis) the user named, and with what."""

    def __init__(self) -> None:
        self.by_leaf: dict[int, dict[int, str]] = {}
        #: (flat input index, axis) of every dim the user declared dynamic, named or not.
        self.declared: set[tuple[int, int]] = set()

    def add(self, leaf_index: int, axis: int, name: str) -> None:
        self.by_leaf.setdefault(leaf_index, {}).setdefault(axis, name)

    def symbol_renames(self, program: torch.export.ExportedProgram) -> dict[str, str]:
        """torch symbol (``s17``) -> user axis name, from the program's user input metadata."""
        user_inputs = user_input_nodes(program)
        renames: dict[str, str] = {}
        for leaf_index, axes in self.by_leaf.items():
            if leaf_index >= len(user_inputs):
                continue
            val = user_inputs[leaf_index].meta.get("val")
            if not isinstance(val, torch.Tensor):
                continue
            for axis, name in axes.items():
                if axis >= val.dim():
                    continue
                size = val.shape[axis]
                if isinstance(size, torch.SymInt) and size.node.expr.is_Symbol:
                    renames.setdefault(str(size.node.expr), name)
        return renames


def _is_tensor_spec(spec: Any, value: Any) -> bool:
    return isinstance(value, torch.Tensor) and (
        spec is None
        or isinstance(spec, dict)
        or (
            isinstance(spec, (list, tuple))
            and not any(isinstance(s, (list, tuple, dict)) for s in spec)
        )
    )


def normalize(
    model: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    dynamic_shapes: Any,
) -> tuple[Any, AxisNames]:
    """Replace string axis names by Dim.DYNAMIC and remember them for renaming afterwards.

    Validates that the tree matches the inputs and raises a clear error otherwise.
    """
    names = AxisNames()
    if dynamic_shapes is None:
        return None, names
    leaves = pytree.tree_leaves((args, kwargs))
    leaf_ids = {id(leaf): i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)}

    def convert(spec: Any, value: Any, path: str) -> Any:
        if isinstance(value, torch.Tensor):
            if spec is None:
                return None
            if isinstance(spec, dict):
                items = spec.items()
            elif isinstance(spec, (list, tuple)):
                if len(spec) != value.dim():
                    raise InvalidExportArgumentsError(
                        f"dynamic_shapes{path} lists {len(spec)} axes but the input tensor has "
                        f"{value.dim()} dimensions {tuple(value.shape)}; give one entry per "
                        f"axis (None for static) or a dict {{axis: name}}"
                    )
                items = enumerate(spec)
            else:
                raise InvalidExportArgumentsError(
                    f"dynamic_shapes{path} is a {type(spec).__name__} but the input is a tensor; "
                    f"use a dict {{axis: name_or_Dim}} or a list with one entry per axis"
                )
            out = {}
            for axis, s in items:
                if not isinstance(axis, int) or not -value.dim() <= axis < value.dim():
                    raise InvalidExportArgumentsError(
                        f"dynamic_shapes{path} names axis {axis!r} but the input tensor has "
                        f"shape {tuple(value.shape)}"
                    )
                axis = axis % value.dim()
                if s is not None:
                    names.declared.add((leaf_ids[id(value)], axis))
                if isinstance(s, str):
                    names.add(leaf_ids[id(value)], axis, s)
                    out[axis] = Dim.DYNAMIC
                elif s is None:
                    continue
                else:
                    dim_name = getattr(s, "__name__", None)
                    if isinstance(dim_name, str) and type(s).__name__ != "_DimHint":
                        names.add(leaf_ids[id(value)], axis, dim_name)
                    out[axis] = s
            return out if isinstance(spec, dict) else [out.get(i) for i in range(value.dim())]
        if isinstance(value, dict):
            if spec is None:
                return None
            if not isinstance(spec, dict) or set(spec) - set(value):
                raise InvalidExportArgumentsError(
                    f"dynamic_shapes{path} must be a dict with keys among {sorted(value)}; "
                    f"got {spec!r}"
                )
            return {k: convert(spec.get(k), v, f"{path}[{k!r}]") for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            if spec is None:
                return None
            if not isinstance(spec, (list, tuple)) or len(spec) != len(value):
                raise InvalidExportArgumentsError(
                    f"dynamic_shapes{path} must be a list/tuple of {len(value)} entries matching "
                    f"the input; got {spec!r}"
                )
            return type(spec)(
                convert(s, v, f"{path}[{i}]") for i, (s, v) in enumerate(zip(spec, value))
            )
        if spec is not None and not (isinstance(spec, dict) and not spec):
            if isinstance(value, (int, float, bool, str)) or value is None:
                raise InvalidExportArgumentsError(
                    f"dynamic_shapes{path} gives {spec!r} for a non-tensor input "
                    f"({type(value).__name__}); use None there"
                )
        return spec

    params = _bind(model, args, kwargs)
    if isinstance(dynamic_shapes, dict):
        unknown = set(dynamic_shapes) - set(params)
        if unknown:
            raise InvalidExportArgumentsError(
                f"dynamic_shapes has keys {sorted(unknown)} that are not inputs of forward(); "
                f"the inputs are {list(params)}"
            )
        converted = {k: convert(v, params[k], f"[{k!r}]") for k, v in dynamic_shapes.items()}
        return converted, names
    if isinstance(dynamic_shapes, (list, tuple)):
        values = list(params.values())
        if len(dynamic_shapes) != len(values):
            raise InvalidExportArgumentsError(
                f"dynamic_shapes has {len(dynamic_shapes)} entries but forward() receives "
                f"{len(values)} inputs ({list(params)}); give one entry per input, in order "
                f"(None for inputs without dynamic axes)"
            )
        converted = type(dynamic_shapes)(
            convert(s, v, f"[{i}]") for i, (s, v) in enumerate(zip(dynamic_shapes, values))
        )
        return converted, names
    raise InvalidExportArgumentsError(
        f"dynamic_shapes must be a dict keyed by forward() parameter names or a tuple aligned "
        f"with the inputs, got {type(dynamic_shapes).__name__}"
    )


def _bind(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    forward = model.forward if isinstance(model, torch.nn.Module) else model
    try:
        bound = inspect.signature(forward).bind(*args, **kwargs)
    except TypeError as exc:
        raise InvalidExportArgumentsError(
            f"the example inputs do not fit forward{inspect.signature(forward)}: {exc}"
        ) from None
    result: dict[str, Any] = {}
    for name, param in inspect.signature(forward).parameters.items():
        if param.kind == inspect.Parameter.VAR_KEYWORD:
            result.update(bound.arguments.get(name, {}))
        elif param.kind == inspect.Parameter.VAR_POSITIONAL:
            # torch.export gives *args one entry (a tuple), even when it is empty.
            result[name] = bound.arguments.get(name, ())
        elif name in bound.arguments:
            result[name] = bound.arguments[name]
    return result


def from_dynamic_axes(
    model: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    dynamic_axes: dict[str, Any],
    input_names: Sequence[str] | None,
    output_names: Sequence[str] | None,
) -> Any:
    """Legacy ``dynamic_axes`` ({input name: {axis: name} or [axes]}) -> tree-form dynamic_shapes."""
    warnings.warn(
        "dynamic_axes is deprecated; pass dynamic_shapes in the tree form of the inputs, e.g. "
        "dynamic_shapes=({0: 'batch'},). It was converted for you.",
        DeprecationWarning,
        stacklevel=3,
    )
    params = _bind(model, args, kwargs)
    names = list(input_names or [])
    spec: dict[str, Any] = {}
    used = set()
    for i, (param, value) in enumerate(params.items()):
        key = names[i] if i < len(names) else param
        axes = dynamic_axes.get(key, dynamic_axes.get(param))
        if axes is None or not isinstance(value, torch.Tensor):
            spec[param] = None
            continue
        used.add(key if key in dynamic_axes else param)
        if isinstance(axes, dict):
            spec[param] = {int(a): str(n) for a, n in axes.items()}
        else:
            spec[param] = {int(a): f"{key}_dim_{a}" for a in axes}
    unknown = set(dynamic_axes) - used - set(output_names or [])
    if unknown:
        raise InvalidExportArgumentsError(
            f"dynamic_axes names {sorted(unknown)}, which are neither input names "
            f"({names or list(params)}) nor output names"
        )
    return spec
