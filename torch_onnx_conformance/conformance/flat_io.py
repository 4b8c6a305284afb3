"""Inputs and outputs as flat lists of tensors, the way ONNX sees them, and their numpy copies.

Exporters flatten ``(args, kwargs)`` with pytree (keywords in the order given) and drop
everything that is not a tensor; outputs the same way, ``None`` dropped. The harness names every
input tensor itself and passes the names to the exporter, so feeds go by name whatever the
exporter would have called them, and an exporter that drops an unused input is still fed right.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.utils._pytree as pytree

from torch_onnx_conformance.exporter import _dtypes
from torch_onnx_conformance.model_zoo.shapes import is_axis_spec, node_children


@dataclasses.dataclass(frozen=True)
class FlatInput:
    name: str
    tensor: torch.Tensor
    #: ``{dim: axis name}`` for the dims the case declares dynamic (empty when static).
    axes: dict[int, str]


def flat_inputs(
    module: torch.nn.Module, args: tuple, kwargs: Mapping[str, Any], dynamic_shapes: Any
) -> list[FlatInput]:
    """Every input tensor in exporter order, named after its parameter and path, with the
    axes ``dynamic_shapes`` (the zoo's tree of axis names) marks dynamic for it."""
    parameter_names = _positional_parameter_names(module)
    found: list[FlatInput] = []
    taken: set[str] = set()
    spec_args = dynamic_shapes if isinstance(dynamic_shapes, (tuple, list)) else None
    spec_kwargs = dynamic_shapes if isinstance(dynamic_shapes, dict) else None
    for index, value in enumerate(args):
        base = parameter_names[index] if index < len(parameter_names) else f"input_{index}"
        spec = spec_args[index] if spec_args is not None and index < len(spec_args) else None
        _collect(base, value, spec, found, taken)
    for key, value in kwargs.items():
        spec = spec_kwargs.get(key) if spec_kwargs is not None else None
        _collect(str(key), value, spec, found, taken)
    return found


def _positional_parameter_names(module: torch.nn.Module) -> list[str]:
    try:
        parameters = inspect.signature(module.forward).parameters.values()
    except (TypeError, ValueError):
        return []
    names = []
    for parameter in parameters:
        if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
            names.append(parameter.name)
        elif parameter.kind is parameter.VAR_POSITIONAL:
            break
    return names


def _collect(path: str, value: Any, spec: Any, found: list[FlatInput], taken: set) -> None:
    if isinstance(value, torch.Tensor):
        name = path
        suffix = 1
        while name in taken:
            name = f"{path}_{suffix}"
            suffix += 1
        taken.add(name)
        axes = dict(spec) if is_axis_spec(spec) else {}
        found.append(FlatInput(name, value, {d % value.dim(): n for d, n in axes.items()}))
        return
    if isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            item_spec = spec[i] if isinstance(spec, (tuple, list)) and i < len(spec) else None
            _collect(f"{path}_{i}", item, item_spec, found, taken)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            item_spec = spec.get(key) if isinstance(spec, dict) and not is_axis_spec(spec) else None
            _collect(f"{path}_{key}", item, item_spec, found, taken)
        return
    children = node_children(value)
    if children is not None and isinstance(spec, (tuple, list)) and len(spec) == len(children):
        # a registered container with one spec per child (a transformers cache)
        for i, (item, item_spec) in enumerate(zip(children, spec)):
            _collect(f"{path}_{i}", item, item_spec, found, taken)
        return
    # Other pytree containers (dataclasses, ModelOutput): flatten, no dynamic axes inside.
    leaves = pytree.tree_leaves(value)
    if len(leaves) == 1 and leaves[0] is value:
        return  # a constant (int, float, str, None): baked into the graph, not an input
    for i, leaf in enumerate(leaves):
        _collect(f"{path}_{i}", leaf, None, found, taken)


def dynamic_axes(inputs: list[FlatInput]) -> dict[str, dict[int, str]]:
    """The TorchScript exporter's spelling of the case's dynamic axes, keyed by input name."""
    return {item.name: dict(item.axes) for item in inputs if item.axes}


def feeds(inputs: list[FlatInput]) -> dict[str, np.ndarray]:
    return {item.name: to_numpy(item.tensor) for item in inputs}


def flat_outputs(outputs: Any) -> list[torch.Tensor]:
    """Output tensors in exporter order (pytree leaves, ``None`` and constants dropped)."""
    return [leaf for leaf in pytree.tree_leaves(outputs) if isinstance(leaf, torch.Tensor)]


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A contiguous numpy copy (ml_dtypes arrays for bfloat16 and float8), which nothing the
    model does to its inputs afterwards can change."""
    if tensor.layout != torch.strided:
        # A sparse (or other non-strided) eager output is compared by its values: ONNX has no
        # sparse runtime tensors, so the exported model can only return the dense form.
        tensor = tensor.to_dense()
    # np.array, not np.ascontiguousarray: the latter turns 0-d arrays into 1-d ones.
    return np.array(_dtypes.to_numpy(tensor), order="C")


def clone_tree(tree: Any) -> Any:
    """A copy with every tensor cloned, so an in-place op in the model cannot change the
    inputs the next run uses."""
    return pytree.tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, tree)


def cast_floats(tree: Any, dtype: torch.dtype) -> Any:
    return pytree.tree_map(
        lambda x: x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x,
        tree,
    )


def shapes_text(arrays: Mapping[str, np.ndarray]) -> str:
    return ", ".join(f"{name}{list(value.shape)}" for name, value in arrays.items())
