"""dynamic_shapes in the tree form of the inputs: user axis names, Dims, and legacy dynamic_axes."""

from __future__ import annotations

import inspect
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


def narrowed_dims(program: torch.export.ExportedProgram) -> list[str]:
    """User-input dims that stay symbolic but whose range torch.export narrowed to one size.

    Capture turns guards into deferred runtime assertions (so a meta function's check does not
    freeze a dim the graph handles), which leaves such a dim dynamic in the graph while a guard
    held it at its example size: the graph may or may not be right at other sizes.
    """
    ranges = {str(sym): vr for sym, vr in program.range_constraints.items()}
    found = []
    for node in user_input_nodes(program):
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        for axis, size in enumerate(val.shape):
            if not (isinstance(size, torch.SymInt) and size.node.expr.is_Symbol):
                continue
            vr = ranges.get(str(size.node.expr))
            if vr is not None and vr.is_singleton():
                found.append(f"{node.name} dim {axis} (size {int(vr.lower)})")
    return found


class AxisNames:
    """Which (flat input index, axis) the user named, and with what."""

    def __init__(self) -> None:
        self.by_leaf: dict[int, dict[int, str]] = {}

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
