"""Dynamic-shape specs in tree form, with user axis names as strings.

A case's ``dynamic_shapes`` mirrors its inputs the way ``torch.export`` expects:

* a tuple (or list) with one entry per positional argument when the case passes only ``args``;
* a dict keyed by keyword name when the case passes only ``kwargs``.

Inside, containers (tuple, list, dict) mirror the input containers and each tensor gets
either ``None`` (all dimensions static) or an axis spec ``{dim_index: "axis_name"}``. The same
axis name on two tensors means the same size.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.utils._pytree as pytree


class DynamicShapesError(ValueError):
    """The dynamic-shapes tree does not fit the inputs it describes."""


def is_axis_spec(node: Any) -> bool:
    """An axis spec is a non-empty dict whose keys are all dimension indices."""
    return (
        isinstance(node, dict)
        and bool(node)
        and all(isinstance(key, int) and not isinstance(key, bool) for key in node)
    )


def is_shape_leaf(node: Any) -> bool:
    """Leaves of a dynamic-shapes tree: ``None`` or an axis spec (for `pytree` ``is_leaf``)."""
    return node is None or is_axis_spec(node)


def inputs_tree(dynamic_shapes: Any, args: tuple, kwargs: Mapping[str, Any]) -> Any:
    """The part of ``(args, kwargs)`` that ``dynamic_shapes`` describes, checking the convention."""
    if isinstance(dynamic_shapes, dict):
        if args:
            raise DynamicShapesError(
                "dynamic_shapes is a dict (keyed by keyword name) but the case also passes "
                f"{len(args)} positional argument(s); pass every input as a keyword instead"
            )
        return dict(kwargs)
    if isinstance(dynamic_shapes, (tuple, list)):
        if kwargs:
            raise DynamicShapesError(
                "dynamic_shapes is a tuple (one entry per positional argument) but the case "
                f"also passes keywords {sorted(kwargs)}; pass every input positionally instead"
            )
        return tuple(args)
    raise DynamicShapesError(
        f"dynamic_shapes must be a tuple (for args) or a dict (for kwargs), got "
        f"{type(dynamic_shapes).__name__}"
    )


def axis_sizes(dynamic_shapes: Any, args: tuple, kwargs: Mapping[str, Any]) -> dict[str, int]:
    """Size of every named axis in the given inputs.

    Raises `DynamicShapesError` naming the path when the tree does not match the inputs, an
    axis index is out of range, or one axis name has two different sizes.
    """
    sizes: dict[str, int] = {}
    where: dict[str, str] = {}
    tree = inputs_tree(dynamic_shapes, args, kwargs)

    def visit(path: str, value: Any, spec: Any) -> None:
        if isinstance(value, torch.Tensor):
            if spec is None:
                return
            if not is_axis_spec(spec):
                raise DynamicShapesError(
                    f"{path}: a tensor needs None or {{dim: 'axis_name'}}, got {spec!r}"
                )
            for dim, name in spec.items():
                if not isinstance(name, str):
                    raise DynamicShapesError(
                        f"{path}: axis {dim} must be named with a string, got {name!r}"
                    )
                if not -value.dim() <= dim < value.dim():
                    raise DynamicShapesError(
                        f"{path}: axis {dim} is out of range for a {value.dim()}-D tensor"
                    )
                size = value.shape[dim]
                if name in sizes and sizes[name] != size:
                    raise DynamicShapesError(
                        f"axis {name!r} has size {sizes[name]} at {where[name]} but {size} at "
                        f"{path}[{dim}]; one axis name must mean one size"
                    )
                sizes[name] = size
                where[name] = f"{path}[{dim}]"
            return
        _walk_children(path, value, spec, visit)

    visit("inputs", tree, dynamic_shapes)
    return sizes


def to_export_dynamic_shapes(
    dynamic_shapes: Any, dim_for: Callable[[str], Any] | None = None
) -> Any:
    """Replace each axis name by ``dim_for(name)`` (default ``torch.export.Dim.DYNAMIC``).

    ``torch.export.export`` does not take string axis names; exporters that do (torch.onnx,
    ours) can use the tree as it is.
    """
    if dim_for is None:

        def dim_for(_name: str) -> Any:
            return torch.export.Dim.DYNAMIC

    def convert(spec: Any) -> Any:
        if spec is None:
            return None
        return {dim: dim_for(name) for dim, name in spec.items()}

    return pytree.tree_map(convert, dynamic_shapes, is_leaf=is_shape_leaf)


def _walk_children(path: str, value: Any, spec: Any, visit: Callable[..., None]) -> None:
    if isinstance(value, dict):
        if not isinstance(spec, dict) or is_axis_spec(spec) or set(spec) != set(value):
            raise DynamicShapesError(
                f"{path}: inputs are a dict with keys {sorted(value)} but the spec is "
                f"{_describe(spec)}"
            )
        for key in value:
            visit(f"{path}[{key!r}]", value[key], spec[key])
        return
    # a tuple or list, or a registered container (a cache) given one spec per child
    items = value if isinstance(value, (tuple, list)) else node_children(value)
    if items is not None and (isinstance(value, (tuple, list)) or isinstance(spec, (tuple, list))):
        if not isinstance(spec, (tuple, list)) or len(spec) != len(items):
            raise DynamicShapesError(
                f"{path}: inputs are a {type(value).__name__} of {len(items)} parts but the "
                f"spec is {_describe(spec)}"
            )
        for index, (item, item_spec) in enumerate(zip(items, spec)):
            visit(f"{path}[{index}]", item, item_spec)
        return
    if spec is not None:
        raise DynamicShapesError(
            f"{path}: a {type(value).__name__} input cannot carry dynamic axes, got {spec!r}"
        )


def node_children(value: Any) -> list[Any] | None:
    """The children of a registered pytree container other than tuple/list/dict (a
    transformers cache, one entry per key or value tensor): a spec for it lists one entry per
    child, as torch.export takes it. None for anything else."""
    node = pytree.SUPPORTED_NODES.get(type(value))
    if node is None or isinstance(value, (tuple, list, dict)):
        return None
    return list(node.flatten_fn(value)[0])


def _describe(spec: Any) -> str:
    if isinstance(spec, dict):
        return f"a dict with keys {sorted(spec, key=repr)}"
    if isinstance(spec, (tuple, list)):
        return f"a {type(spec).__name__} of {len(spec)}"
    return repr(spec)
