"""dynamic_shapes in the tree form of the inputs: user axis names, Dims, and legacy dynamic_axes."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from torch.export import Dim
from torch.export.dynamic_shapes import _DimHint, _DimHintType
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
                if not (isinstance(size, torch.SymInt) and size.node.expr.is_Symbol):
                    continue
                chosen = renames.setdefault(str(size.node.expr), name)
                if chosen != name:
                    # torch.onnx warns alike: torch.export found the two dims equal
                    warnings.warn(
                        f"The axis name {name!r} will not be used, since it shares the same "
                        f"shape constraints with another axis: {chosen!r}.",
                        UserWarning,
                        stacklevel=4,
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
    names = AxisNames()
    if dynamic_shapes is None:
        return None, names
    leaves = pytree.tree_leaves((args, kwargs))
    leaf_ids = {id(leaf): i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)}
    named_sizes: dict[str, tuple[int, str]] = {}

    def name_axis(value: torch.Tensor, axis: int, name: str, path: str) -> None:
        size = int(value.shape[axis])
        first = named_sizes.setdefault(name, (size, f"dynamic_shapes{path} axis {axis}"))
        if first[0] != size:
            raise InvalidExportArgumentsError(
                f"axis name {name!r} is given to dims whose example sizes differ: {first[1]} "
                f"(size {first[0]}) and dynamic_shapes{path} axis {axis} (size {size}). One "
                f"name declares one size in the ONNX graph; give these dims different names."
            )
        names.add(leaf_ids[id(value)], axis, name)

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
                    name_axis(value, axis, s, path)
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

    params = _bind(model, args, kwargs)
    if isinstance(dynamic_shapes, dict):
        unknown = set(dynamic_shapes) - set(params)
        if unknown:
            raise InvalidExportArgumentsError(
                f"dynamic_shapes has keys {sorted(unknown)} that are not inputs of forward(); "
                f"the inputs are {list(params)} (with input_names, a dict may be keyed by those "
                f"names instead)"
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
    from exporter._program import leaves_with_paths

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
        stacklevel=3,
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
