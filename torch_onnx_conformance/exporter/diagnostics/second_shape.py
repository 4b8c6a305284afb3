"""The second input shape: which dimensions grow and how the inputs grow.

``verify=True`` and the conformance harness both run a dynamic export again at a second input
shape, because that is what catches a dimension the export silently fixed. This module is the one
place that decides the sizes and fills the grown inputs.

Every dimension of size >= ``MIN_DYNAMIC_SIZE`` may be dynamic (sizes 0 and 1 are specialised by
``torch.export``). For inputs without a declared dynamic spec (op cases), dimensions that share a
size across the inputs form a group and grow together, because ops usually need them to agree
(matmul's inner dimension, a broadcast); ``growth_plans`` lists the fallbacks (all groups but
one, then one group at a time) for ops whose other sizes are tied to something fixed (a weight's
channel count, an ``output_size``, the number of outputs of ``unbind``).

For an exported model (``verify``), ``plan_second_shape`` reads the dims from the ONNX graph
instead: every dim it declares symbolic grows (dims sharing a name together, expressions
following their symbols, within torch.export's ranges), and so does every dim ``dynamic_shapes``
asked for. Either way, ``specialised_dims`` names the dims asked to be dynamic that the ONNX
model declares fixed.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch.utils import _pytree as pytree

if TYPE_CHECKING:
    import onnx_ir as ir

#: The smallest size ``torch.export`` keeps symbolic.
MIN_DYNAMIC_SIZE = 2
#: Growth tried for dynamic dimensions, in order, until eager accepts the inputs.
SECOND_SHAPE_DELTAS = (1, 2)


def dynamic_dims(tensor: torch.Tensor) -> list[int]:
    return [d for d, size in enumerate(tensor.shape) if size >= MIN_DYNAMIC_SIZE]


def has_dynamic_dims(inputs: tuple[torch.Tensor, ...]) -> bool:
    return any(dynamic_dims(t) for t in inputs)


def size_groups(inputs: tuple[torch.Tensor, ...]) -> list[int]:
    """The sizes of the dynamic dimensions, one per group of equal-sized dimensions."""
    return sorted({t.shape[d] for t in inputs for d in dynamic_dims(t)})


def growth_plans(inputs: tuple[torch.Tensor, ...]) -> list[frozenset[int] | None]:
    """Which size groups a second shape grows, in the order to try: ``None`` (every group), then
    every group but one, then each group alone. Larger plans come first so that the second shape
    changes as many dimensions as eager allows."""
    groups = size_groups(inputs)
    plans: list[frozenset[int] | None] = [None]
    if len(groups) > 2:
        plans += [frozenset(groups) - {g} for g in groups]
    if len(groups) > 1:
        plans += [frozenset({g}) for g in groups]
    return plans


def grown_dims(inputs: tuple[torch.Tensor, ...], sizes: frozenset[int] | None) -> set:
    """``(input index, dim)`` of every dimension a plan grows."""
    return {
        (i, d)
        for i, t in enumerate(inputs)
        for d in dynamic_dims(t)
        if sizes is None or t.shape[d] in sizes
    }


def specialised_dims(
    declared: Mapping[str, Sequence[int | str | None] | None],
    requested: Mapping[str, Mapping[int, str | None]],
) -> list[str]:
    """The dimensions asked to be dynamic that the ONNX model declares fixed, one line each:
    ``x dim 0 (batch) fixed to 2``. ``declared`` maps graph input names to their declared
    shapes (each dim an int, a symbol name or None); ``requested`` maps input names to the dims
    asked to be dynamic, each with what the request called it (None: no name to show). A dim the
    model leaves symbolic or unknown is not fixed; an input without a declared shape fixes
    nothing."""
    found = []
    for name, dims in requested.items():
        shape = declared.get(name) or ()
        for dim, label in dims.items():
            size = shape[dim] if dim < len(shape) else None
            if isinstance(size, int):
                called = f" ({label})" if label else ""
                found.append(f"{name} dim {dim}{called} fixed to {size}")
    return found


def grown_inputs(
    inputs: tuple[torch.Tensor, ...],
    delta: int,
    generator: torch.Generator,
    sizes: frozenset[int] | None = None,
) -> tuple[torch.Tensor, ...]:
    """Inputs with each dynamic dimension (of a size in ``sizes``, when given) grown by ``delta``
    (filled by ``grow_tensor``)."""
    grown = []
    for tensor in inputs:
        dims = [d for d in dynamic_dims(tensor) if sizes is None or tensor.shape[d] in sizes]
        if not dims:
            grown.append(tensor.clone())
            continue
        shape = [size + delta if d in dims else size for d, size in enumerate(tensor.shape)]
        grown.append(grow_tensor(tensor, shape, generator))
    return tuple(grown)


def grow_tensor(tensor: torch.Tensor, shape: list[int], generator: torch.Generator) -> torch.Tensor:
    """A tensor of ``shape`` whose leading block is ``tensor``'s.

    The original values fill the leading block, so index tensors stay in range and masks keep
    their pattern; a tensor sorted along its last dimension stays sorted; new float elements are
    drawn uniformly between the tensor's finite min and max (domains such as "positive"
    survive); new integer, bool and complex elements are drawn from the tensor's own values.
    """
    flat = tensor.detach().reshape(-1)
    if flat.numel() == 0 or 0 in shape:
        grown = torch.zeros(shape, dtype=tensor.dtype)
    elif tensor.is_floating_point():
        finite = flat[torch.isfinite(flat)].double()
        low, high = (finite.min().item(), finite.max().item()) if finite.numel() else (-1.0, 1.0)
        values = torch.rand(shape, generator=generator, dtype=torch.float64)
        grown = (low + (high - low) * values).to(tensor.dtype)
    else:
        grown = flat[torch.randint(0, flat.numel(), shape, generator=generator)].clone()
    block = tuple(slice(0, min(a, b)) for a, b in zip(tensor.shape, shape))
    grown[block] = tensor.detach()[block]
    if _sorted_last_dim(tensor):
        # Sorted inputs are a precondition (searchsorted's boundaries, embedding_bag's offsets):
        # they stay sorted, like a positive domain stays positive.
        grown = torch.sort(grown, dim=-1, stable=True).values
    return grown


def _sorted_last_dim(tensor: torch.Tensor) -> bool:
    if tensor.dim() == 0 or tensor.shape[-1] < 2 or tensor.dtype is torch.bool:
        return False
    if tensor.is_complex():
        return False
    return bool((tensor[..., 1:] >= tensor[..., :-1]).all())


# ------------------------------------------------------------- verify's plan: exported models
def tensor_leaf_positions(
    args: Sequence[Any], kwargs: dict[str, Any]
) -> tuple[list[Any], Any, list[int]]:
    """The leaves of (args, kwargs), their tree spec and the positions of the tensor leaves."""
    leaves, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    return leaves, spec, [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]


def requested_dynamic_axes(
    model: Any, args: Sequence[Any], kwargs: dict[str, Any], dynamic_shapes: Any
) -> dict[int, dict[int, str]]:
    """Which (tensor leaf position, axis) dynamic_shapes asks to be dynamic, with a label."""
    if dynamic_shapes is None or model is None:
        return {}
    from torch_onnx_conformance.exporter._dynamic_shapes import _bind

    leaves, _, _ = tensor_leaf_positions(args, kwargs)
    position = {id(leaf): i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)}
    found: dict[int, dict[int, str]] = {}

    def label(s: Any) -> str | None:
        if s is None or s == torch.export.Dim.STATIC:
            return None
        if isinstance(s, str):
            return s
        if s == torch.export.Dim.AUTO:
            return "Dim.AUTO"
        if s == torch.export.Dim.DYNAMIC:
            return "Dim.DYNAMIC"
        return getattr(s, "__name__", None) or str(s)

    def walk(spec: Any, value: Any) -> None:
        if spec is None:
            return
        if isinstance(value, torch.Tensor):
            items = (
                spec.items()
                if isinstance(spec, dict)
                else enumerate(spec if isinstance(spec, (list, tuple)) else [])
            )
            for axis, s in items:
                name = label(s)
                if name is not None and isinstance(axis, int) and id(value) in position:
                    found.setdefault(position[id(value)], {})[axis % value.dim()] = name
        elif isinstance(value, dict) and isinstance(spec, dict):
            for k, v in value.items():
                walk(spec.get(k), v)
        elif isinstance(value, (list, tuple)) and isinstance(spec, (list, tuple)):
            for s, v in zip(spec, value):
                walk(s, v)

    try:
        params = _bind(model, tuple(args), dict(kwargs))
    except Exception:  # noqa: BLE001 - export validated this already; nothing to add here
        return {}
    if isinstance(dynamic_shapes, dict):
        for k, v in params.items():
            walk(dynamic_shapes.get(k), v)
    elif isinstance(dynamic_shapes, (list, tuple)):
        for s, v in zip(dynamic_shapes, params.values()):
            walk(s, v)
    return found


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _parse_dim(text: str) -> Any:
    import sympy
    from sympy.parsing.sympy_parser import parse_expr

    local = {n: sympy.Symbol(n, integer=True) for n in _NAME.findall(text)}
    try:
        return parse_expr(text, local_dict=local)
    except Exception:  # noqa: BLE001 - a name sympy cannot read is treated as a bare symbol
        return sympy.Symbol(text, integer=True)


@dataclasses.dataclass
class Plan:
    """What ``plan_second_shape`` decided."""

    #: tensor leaf position -> its new shape
    new_shapes: dict[int, list[int]] = dataclasses.field(default_factory=dict)
    #: What moved, one line per dim: "x dim 0 (batch): 2 -> 3".
    changed: list[str] = dataclasses.field(default_factory=list)
    #: Dims asked to be dynamic that the ONNX model fixes (``specialised_dims``).
    specialised: list[str] = dataclasses.field(default_factory=list)

    def grow(self, pos: int, tensor: torch.Tensor, axis: int, size: int, what: str) -> None:
        self.new_shapes.setdefault(pos, list(tensor.shape))[axis] = size
        self.changed.append(f"{what}: {int(tensor.shape[axis])} -> {size}")


def plan_second_shape(
    model: ir.Model,
    program: torch.export.ExportedProgram | None,
    tensors: list[tuple[int, torch.Tensor]],
    requested: dict[int, dict[int, str]],
    delta: int,
) -> Plan | None:
    """New sizes, ``delta`` away, for every dimension the ONNX graph declares symbolic (dims
    sharing a name move together, expressions follow their symbols) and every dimension
    ``requested`` (``requested_dynamic_axes``) asks to be dynamic. ``tensors`` are the
    (leaf position, tensor) pairs of the example inputs; None when the graph's inputs do not
    line up with them."""
    inputs = _tensor_graph_inputs(model, program, len(tensors))
    if inputs is None:
        return None
    by_pos = dict(tensors)
    names = {pos: (v.name or f"input {i}") for i, ((pos, _), v) in enumerate(zip(tensors, inputs))}
    exprs = _symbolic_dims(tensors, inputs)
    values = _grown_symbols(exprs, by_pos, _symbol_ranges(program, inputs), delta)
    plan = Plan()
    for (pos, axis), expr in exprs.items():
        try:
            size = int(expr.xreplace(values))
        except TypeError:
            continue  # a symbol we could not give a value: keep the example size
        if size != int(by_pos[pos].shape[axis]) and size >= 0:
            plan.grow(pos, by_pos[pos], axis, size, f"{names[pos]} dim {axis} ({expr})")
    # Requested dims the graph does not keep symbolic: grown too, and named when fixed.
    fixed = {
        names[pos]: {
            axis: label
            for axis, label in axes.items()
            if (pos, axis) not in exprs and axis < by_pos[pos].dim()
        }
        for pos, axes in requested.items()
        if pos in names
    }
    declared = {names[pos]: _declared_dims(value) for (pos, _), value in zip(tensors, inputs)}
    plan.specialised = specialised_dims(declared, fixed)
    position = {name: pos for pos, name in names.items()}
    for name, axes in fixed.items():
        tensor = by_pos[position[name]]
        for axis, label in axes.items():
            size = max(int(tensor.shape[axis]) + delta, MIN_DYNAMIC_SIZE)
            what = f"{name} dim {axis} ({label}, fixed in ONNX)"
            plan.grow(position[name], tensor, axis, size, what)
    return plan


def _tensor_graph_inputs(
    model: ir.Model, program: torch.export.ExportedProgram | None, count: int
) -> list[ir.Value] | None:
    """The graph inputs fed by the ``count`` tensor inputs, in order (dynamic scalar inputs are
    graph inputs too, but only tensors have dims to grow); None when they do not line up."""
    inputs = list(model.graph.inputs)
    if program is not None:
        from torch_onnx_conformance.exporter._program import input_plan

        fed = [entry for entry in input_plan(program) if not entry.baked]
        if len(fed) == len(inputs):
            inputs = [value for value, entry in zip(inputs, fed) if entry.tensor]
    return inputs if len(inputs) == count else None


def _declared_dims(value: ir.Value) -> list[int | str | None] | None:
    if value.shape is None:
        return None
    return [getattr(dim, "value", dim) for dim in value.shape]


def _symbolic_dims(
    tensors: list[tuple[int, torch.Tensor]], inputs: list[ir.Value]
) -> dict[tuple[int, int], Any]:
    """(leaf position, axis) -> the sympy expression of every dim the graph declares symbolic."""
    exprs: dict[tuple[int, int], Any] = {}
    for (pos, tensor), value in zip(tensors, inputs):
        for axis, dim in enumerate(list(value.shape or ())[: tensor.dim()]):
            text = getattr(dim, "value", dim)
            if isinstance(text, str):
                exprs[(pos, axis)] = _parse_dim(text)
    return exprs


def _grown_symbols(
    exprs: dict[tuple[int, int], Any],
    by_pos: dict[int, torch.Tensor],
    ranges: dict[str, tuple[int, int | None]],
    delta: int,
) -> dict[Any, int]:
    """Each symbol's new value: its example value ``delta`` up, or down when its range ends
    first, at least MIN_DYNAMIC_SIZE; a symbol that fits neither way keeps its size."""
    import sympy

    examples: dict[Any, int] = {}
    for (pos, axis), expr in exprs.items():
        if isinstance(expr, sympy.Symbol):
            examples.setdefault(expr, int(by_pos[pos].shape[axis]))
    # Symbols seen only inside expressions: solve for their example value.
    for (pos, axis), expr in exprs.items():
        for sym in expr.free_symbols - set(examples):
            size = by_pos[pos].shape[axis]
            solutions = [s for s in sympy.solve(sympy.Eq(expr, size), sym) if s.is_integer]
            if solutions:
                examples[sym] = int(solutions[0])
    new_values = {}
    for sym, old in examples.items():
        low, high = ranges.get(str(sym), (0, None))
        if low == high:
            # A range narrowed to the example size by a deferred guard (see
            # _dynamic_shapes.audit_dims): the graph keeps the dim symbolic, so test it.
            low, high = 0, None
        low = max(low, MIN_DYNAMIC_SIZE)
        grown = max(old + delta, low)
        if high is None or grown <= high:
            new_values[sym] = grown
        elif old - delta >= low:
            new_values[sym] = old - delta
    return new_values


def _symbol_ranges(
    program: torch.export.ExportedProgram | None, inputs: list[ir.Value]
) -> dict[str, tuple[int, int | None]]:
    """ONNX dim name -> (min, max) from torch.export's range constraints."""
    if program is None:
        return {}
    from torch_onnx_conformance.exporter._dynamic_shapes import user_input_nodes

    user = [n for n in user_input_nodes(program) if isinstance(n.meta.get("val"), torch.Tensor)]
    if len(user) != len(inputs):
        return {}
    ranges = {}
    constraints = {str(k): v for k, v in program.range_constraints.items()}
    for node, value in zip(user, inputs):
        fake = node.meta["val"]
        for axis, dim in enumerate(value.shape or ()):
            name = getattr(dim, "value", dim)
            if not isinstance(name, str) or axis >= fake.dim():
                continue
            size = fake.shape[axis]
            if isinstance(size, torch.SymInt) and size.node.expr.is_Symbol:
                vr = constraints.get(str(size.node.expr))
                if vr is not None:
                    ranges[name] = (_finite_int(vr.lower) or 0, _finite_int(vr.upper))
    return ranges


def _finite_int(bound: Any) -> int | None:
    """A range bound as an int; None for torch's int_oo / sympy infinities."""
    try:
        value = int(bound)
    except (TypeError, ValueError, OverflowError, AttributeError):
        return None
    return value if abs(value) < 2**62 else None
