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
from torch.export.dynamic_shapes import _DimHint, _DimHintType
from torch.utils import _pytree as pytree

from torch_onnx_conformance.exporter import _caches
from torch_onnx_conformance.exporter._errors import InvalidExportArgumentsError


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
    from torch_onnx_conformance.exporter._errors import _LIBRARY_PARTS

    return any(part in filename for part in _LIBRARY_PARTS)


def _range_source(
    program: torch.export.ExportedProgram, shape_env: Any, symbol: Any
) -> tuple[str | None, str | None, bool]:
    """Where torch narrowed ``symbol``'s range: (the user's line, its stack trace, whether torch's
    own frame was the user's code).

    torch records one frame; when that frame is inside torch (an op's meta function), the
    graph node of the op that frame calls carries the user's line."""
    from torch_onnx_conformance.exporter._errors import user_source_line

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
    from torch_onnx_conformance.exporter._errors import user_source_line

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
        """torch symbol (``s17``) -> user axis name, from the program's user input metadata.

        In ONNX one dim name declares one size. A name the user gave to dims of different
        example sizes (which torch.export cannot have found equal) goes to the dims of the first
        size; those of each other size get ``name_1``, ``name_2``... and one warning lists
        them. Dims of one example size keep the shared name, as declared (torch.onnx names them
        alike too)."""
        user_inputs = user_input_nodes(program)
        renames: dict[str, str] = {}
        names_of: dict[str, dict[Any, str]] = {}  # user name -> example size -> ONNX name
        given: dict[str, str] = {}  # symbol -> the name the user gave it
        renamed: list[str] = []
        taken = {name for axes in self.by_leaf.values() for name in axes.values()}
        for leaf_index, axes in sorted(self.by_leaf.items()):
            if leaf_index >= len(user_inputs):
                continue
            node = user_inputs[leaf_index]
            val = node.meta.get("val")
            if not isinstance(val, torch.Tensor):
                continue
            for axis, name in sorted(axes.items()):
                if axis >= val.dim():
                    continue
                size = val.shape[axis]
                if not (isinstance(size, torch.SymInt) and size.node.expr.is_Symbol):
                    continue
                symbol = str(size.node.expr)
                if symbol in renames:
                    chosen = renames[symbol]
                    if given[symbol] != name:
                        # torch.onnx warns alike: torch.export found the two dims equal
                        warnings.warn(
                            f"The axis name {name!r} will not be used, since it shares the same "
                            f"shape constraints with another axis: {chosen!r}.",
                            UserWarning,
                            stacklevel=5,  # export()'s caller, via the pipeline
                        )
                    continue
                by_size = names_of.setdefault(name, {})
                hint = size.node.hint
                unique = by_size.get(hint)
                if unique is None:
                    unique = name
                    if by_size:
                        count = len(by_size)
                        while (unique := f"{name}_{count}") in taken:
                            count += 1
                        taken.add(unique)
                        renamed.append(f"{node.name} dim {axis} (size {hint}) is {unique!r}")
                    by_size[hint] = unique
                renames[symbol], given[symbol] = unique, name
        if renamed:
            warnings.warn(
                "One axis name was given to dims of different example sizes (in ONNX one dim "
                "name means one size), so each size keeps a name of its own: "
                + "; ".join(renamed)
                + ". Give such dims different names, or make the model relate them, to "
                "silence this warning.",
                UserWarning,
                stacklevel=5,  # export()'s caller, via the pipeline
            )
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
    if dynamic_shapes is None:
        return None, AxisNames()
    spec = _SpecConverter((args, kwargs))
    params = _bind(model, args, kwargs)
    if isinstance(dynamic_shapes, dict):
        unknown = set(dynamic_shapes) - set(params)
        if unknown:
            raise InvalidExportArgumentsError(
                f"dynamic_shapes has keys {sorted(unknown)} that are not inputs of forward(); "
                f"the inputs are {list(params)} (with input_names, a dict may be keyed by those "
                f"names instead)"
            )
        converted = {k: spec.convert(v, params[k], f"[{k!r}]") for k, v in dynamic_shapes.items()}
        return converted, spec.names
    if isinstance(dynamic_shapes, (list, tuple)):
        values = list(params.values())
        if len(dynamic_shapes) != len(values):
            raise InvalidExportArgumentsError(
                f"dynamic_shapes has {len(dynamic_shapes)} entries but forward() receives "
                f"{len(values)} inputs ({list(params)}); give one entry per input, in order "
                f"(None for inputs without dynamic axes)"
            )
        converted = type(dynamic_shapes)(
            spec.convert(s, v, f"[{i}]") for i, (s, v) in enumerate(zip(dynamic_shapes, values))
        )
        return converted, spec.names
    raise InvalidExportArgumentsError(
        f"dynamic_shapes must be a dict keyed by forward() parameter names or a tuple aligned "
        f"with the inputs, got {type(dynamic_shapes).__name__}"
    )


class _SpecConverter:
    """One input's dynamic_shapes entry, checked against the input and converted to what
    torch.export takes; the axis names met on the way collect in ``names``."""

    def __init__(self, inputs: Any) -> None:
        self.names = AxisNames()
        leaves = pytree.tree_leaves(inputs)
        self.leaf_ids = {
            id(leaf): i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)
        }
        #: Dim name -> the example size of the first dim given a Dim of that name.
        self.dim_sizes: dict[str, int] = {}

    def convert(self, spec: Any, value: Any, path: str) -> Any:
        if isinstance(value, torch.Tensor):
            return None if spec is None else self._tensor(spec, value, path)
        if isinstance(value, dict):
            if spec is None:
                return None
            if not isinstance(spec, dict) or set(spec) - set(value):
                raise InvalidExportArgumentsError(
                    f"dynamic_shapes{path} must be a dict with keys among {sorted(value)}; "
                    f"got {spec!r}"
                )
            return {k: self.convert(spec.get(k), v, f"{path}[{k!r}]") for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            if spec is None:
                return None
            if not isinstance(spec, (list, tuple)) or len(spec) != len(value):
                raise InvalidExportArgumentsError(
                    f"dynamic_shapes{path} must be a list/tuple of {len(value)} entries matching "
                    f"the input; got {spec!r}"
                )
            return type(spec)(
                self.convert(s, v, f"{path}[{i}]") for i, (s, v) in enumerate(zip(spec, value))
            )
        if _caches.is_cache(value) and type(value) in pytree.SUPPORTED_NODES:
            if spec is None:
                return None
            children = _caches.cache_children(value)
            specs = _caches.expand_cache_spec(spec, value, path)
            return [
                self.convert(s, c, f"{path}[{i}]") for i, (s, c) in enumerate(zip(specs, children))
            ]
        return _leaf_spec(spec, value, path)

    def _tensor(self, spec: Any, value: torch.Tensor, path: str) -> Any:
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
                self.names.declared.add((self.leaf_ids[id(value)], axis))
            if isinstance(s, str):
                self.names.add(self.leaf_ids[id(value)], axis, s)
                out[axis] = Dim.DYNAMIC
            elif s is None:
                continue
            else:
                dim_name = getattr(s, "__name__", None)
                if isinstance(dim_name, str) and type(s).__name__ != "_DimHint":
                    self.names.add(self.leaf_ids[id(value)], axis, dim_name)
                    s = _unshared_dim(s, int(value.shape[axis]), self.dim_sizes)
                out[axis] = s
        return out if isinstance(spec, dict) else [out.get(i) for i in range(value.dim())]


def _leaf_spec(spec: Any, value: Any, path: str) -> Any:
    """The spec of a non-tensor leaf input: an int may be dynamic, nothing else."""
    if spec is not None and not (isinstance(spec, dict) and not spec):
        if isinstance(value, int) and not isinstance(value, bool):
            return _int_spec(spec, value, path)
        if isinstance(spec, _DimHint) and spec.type == _DimHintType.STATIC:
            return None
        if isinstance(value, (int, float, bool, str)) or value is None:
            raise InvalidExportArgumentsError(
                f"dynamic_shapes{path} gives {spec!r} for a non-tensor input "
                f"({type(value).__name__}); use None there (torch.export can make only "
                f"int inputs dynamic; pass a 0-d tensor for a value that changes)"
            )
    return spec


def _unshared_dim(dim: Any, size: int, sizes: dict[str, int]) -> Any:
    """``dim``, or, where a Dim of its name was given to a dim of another example size, a Dim
    of its own with the same range: torch.export would refuse dims of one Dim at two sizes,
    and those dims cannot be equal. (Their ONNX names then differ: ``AxisNames``.)"""
    if type(dim).__name__ != "Dim":  # a derived dim (2 * d) follows its root
        return dim
    first = sizes.setdefault(dim.__name__, size)
    if first == size:
        return dim
    return Dim(f"{dim.__name__}_at_{size}", min=dim.min, max=dim.max)


def _int_spec(spec: Any, value: int, path: str) -> Any:
    """An int input's spec: Dim.DYNAMIC/AUTO make it a scalar graph input, Dim.STATIC bakes it."""
    if isinstance(spec, str):
        return Dim.DYNAMIC  # an axis name has no axis to name on a scalar: it just means dynamic
    if isinstance(spec, _DimHint):
        return None if spec.type == _DimHintType.STATIC else spec
    if isinstance(spec, int) and not isinstance(spec, bool):
        if spec != value:
            raise InvalidExportArgumentsError(
                f"dynamic_shapes{path} fixes the int input to {spec} but its example value is "
                f"{value}"
            )
        return None
    raise InvalidExportArgumentsError(
        f"dynamic_shapes{path} gives {spec!r} for an int input ({value}); torch.export makes an "
        f"int input dynamic only with Dim.DYNAMIC or Dim.AUTO (a named Dim has no axis here), "
        f"or static with Dim.STATIC or None"
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


def flat_inputs(
    model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> list[tuple[str, str, Any]]:
    """(default name, forward() parameter, value) of every flattened input, in torch.export's
    order.

    The default name is the one torch.export gives the input's placeholder (and so the ONNX
    graph input): the parameter name, with the keys of nested containers appended (``pair_0``,
    ``d_k``).
    """
    forward = model.forward if isinstance(model, torch.nn.Module) else model
    params = list(inspect.signature(forward).parameters.values())
    positional = [
        p.name
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    var_args = next((p.name for p in params if p.kind == inspect.Parameter.VAR_POSITIONAL), "args")
    out = []
    from torch_onnx_conformance.exporter._program import leaves_with_paths

    leaves = leaves_with_paths((tuple(args), dict(kwargs)))
    if any(path is None for path, _ in leaves):
        raise InvalidExportArgumentsError(
            "an input container is registered with torch's pytree without key paths, so its "
            "flattened inputs have no names; pass dynamic_shapes in the tree form of the inputs"
        )
    for path, leaf in leaves:
        keys = [getattr(k, "idx", getattr(k, "key", getattr(k, "name", k))) for k in path]
        if keys[0] == 0:
            index = keys[1]
            if index < len(positional):
                parts = [positional[index], *keys[2:]]
            else:
                parts = [var_args, index - len(positional), *keys[2:]]
        else:
            parts = keys[1:]
        out.append(("_".join(str(p) for p in parts), str(parts[0]), leaf))
    return out


def from_dynamic_axes(
    model: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    dynamic_axes: dict[str, Any],
    input_names: Sequence[str] | None,
    output_names: Sequence[str] | None,
) -> Any:
    """Legacy ``dynamic_axes`` ({input name: {axis: name} or [axes]}) -> tree-form dynamic_shapes.

    The keys name FLATTENED inputs as ``input_names`` does (nested tuples, lists and dicts
    flattened, in torch.onnx's order), or by the default graph input names (``x``, ``pair_0``);
    output names are accepted and left to the graph, whose output shapes follow the inputs'.
    """
    # a UserWarning as torch.onnx gives, so filters written for torch.onnx's warning match it
    warnings.warn(
        "'dynamic_axes' is not recommended when dynamo=True (it is deprecated): pass "
        "dynamic_shapes in the tree form of the inputs, e.g. dynamic_shapes=({0: 'batch'},). "
        "It was converted for you.",
        UserWarning,
        stacklevel=5,  # export()'s caller, through _validate.validate
    )
    flat = NamedInputs(model, args, kwargs, input_names)
    spec_by_leaf: dict[int, dict[int, str]] = {}
    unknown = []
    for key, axes in dynamic_axes.items():
        index = flat.index(key)
        if index is None:
            if key not in (output_names or ()):
                unknown.append(key)
            continue
        leaf = flat.values[index]
        if not isinstance(leaf, torch.Tensor):
            raise InvalidExportArgumentsError(
                f"dynamic_axes[{key!r}] names a {type(leaf).__name__} input, which has no axes; "
                f"use dynamic_shapes with Dim.DYNAMIC to make an int input dynamic"
            )
        if isinstance(axes, dict) and all(isinstance(a, int) for a in axes):
            spec = {a: str(n) for a, n in axes.items()}
        elif isinstance(axes, (list, tuple)) and all(isinstance(a, int) for a in axes):
            spec = {a: f"{key}_dim_{a % max(leaf.dim(), 1)}" for a in axes}
        else:
            raise InvalidExportArgumentsError(
                f"dynamic_axes[{key!r}] must be a dict {{axis: name}} or a list of axes (ints), "
                f"got {axes!r}"
            )
        bad = [a for a in spec if not -leaf.dim() <= a < leaf.dim()]
        if bad:
            raise InvalidExportArgumentsError(
                f"dynamic_axes[{key!r}] names axes {bad} but that input has shape "
                f"{tuple(leaf.shape)}"
            )
        spec_by_leaf[index] = spec
    if unknown:
        raise InvalidExportArgumentsError(
            f"dynamic_axes names {sorted(unknown)}, which name no input or output; the inputs "
            f"are {flat.shown()} (input_names, or the default names, of the flattened inputs "
            f"in order) and the outputs {list(output_names or [])} (output_names)"
        )
    return flat.tree(spec_by_leaf)


def keyed_by_input_names(
    model: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    dynamic_shapes: Any,
    input_names: Sequence[str] | None,
) -> Any:
    """A dynamic_shapes dict keyed by ``input_names`` -> the tree form torch.export takes.

    torch.export only knows forward()'s parameter names; a user who named the inputs means those
    names, so a dict whose keys are all input names (of flattened inputs) is converted.
    """
    if not isinstance(dynamic_shapes, dict) or not input_names or model is None:
        return dynamic_shapes
    if isinstance(model, torch.export.ExportedProgram):
        return dynamic_shapes
    if set(dynamic_shapes) <= set(_bind(model, args, kwargs)):
        return dynamic_shapes
    flat = NamedInputs(model, args, kwargs, input_names)
    indices = {key: flat.index(key) for key in dynamic_shapes}
    if any(index is None for index in indices.values()):
        return dynamic_shapes  # normalize() names the keys that match nothing
    return flat.tree({indices[key]: spec for key, spec in dynamic_shapes.items()})


class NamedInputs:
    """The flattened inputs with their names: ``input_names`` where given, else the defaults."""

    def __init__(
        self,
        model: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        input_names: Sequence[str] | None,
    ) -> None:
        self.model, self.args, self.kwargs = model, args, kwargs
        flat = flat_inputs(model, args, kwargs)
        self.values = [value for _, _, value in flat]
        self.params = [param for _, param, _ in flat]
        self.graph_inputs = [i for i, v in enumerate(self.values) if isinstance(v, torch.Tensor)]
        names = list(input_names or [])
        # one name per flattened input (baked scalars included) or, as torch.onnx, per graph input
        named = list(range(len(flat))) if len(names) == len(flat) else self.graph_inputs
        self.names = {i: default for i, (default, _, _) in enumerate(flat)}
        self.names.update(dict(zip(named, names)))
        self._by_name = {default: i for i, (default, _, _) in enumerate(flat)}
        self._by_name.update({name: i for i, name in zip(named, names)})

    def index(self, name: str) -> int | None:
        return self._by_name.get(name)

    def shown(self) -> list[str]:
        return [self.names[i] for i in self.graph_inputs]

    def tree(self, spec_by_leaf: dict[int, Any]) -> dict[str, Any]:
        """Per-leaf specs -> a dynamic_shapes dict keyed by forward()'s parameters."""
        tree = {}
        for param, value in _bind(self.model, self.args, self.kwargs).items():
            # the param's leaves, in the order flat_inputs met them (a tensor passed twice
            # gets each place's own spec)
            indices = [i for i, p in enumerate(self.params) if p == param]
            leaves, spec = pytree.tree_flatten(value)
            if len(indices) != len(leaves):
                raise InvalidExportArgumentsError(
                    f"cannot match the flattened inputs of {param!r} with its value; pass "
                    f"dynamic_shapes in the tree form of the inputs instead"
                )
            tree[param] = pytree.tree_unflatten([spec_by_leaf.get(i) for i in indices], spec)
        return tree
