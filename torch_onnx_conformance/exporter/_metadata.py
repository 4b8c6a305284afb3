"""Metadata props that tie ONNX nodes and values back to the PyTorch program.

The names match torch.onnx's documented ones, so tools that read them (Netron, model explorers)
work unchanged.
"""

from __future__ import annotations

from typing import Any

import torch

NAMESPACE = "namespace"
CLASS_HIERARCHY = "pkg.torch.onnx.class_hierarchy"
FX_NODE = "pkg.torch.onnx.fx_node"
NAME_SCOPES = "pkg.torch.onnx.name_scopes"
STACK_TRACE = "pkg.torch.onnx.stack_trace"
GRAPH_SIGNATURE = "pkg.torch.export.ExportedProgram.graph_signature"
RANGE_CONSTRAINTS = "pkg.torch.export.ExportedProgram.range_constraints"
INPUT_KIND = "pkg.torch.export.graph_signature.InputSpec.kind"
INPUT_PERSISTENT = "pkg.torch.export.graph_signature.InputSpec.persistent"
OUTPUT_KIND = "pkg.torch.export.graph_signature.OutputSpec.kind"
ORIGINAL_NAME = "pkg.torch.onnx.original_node_name"


def _type_name(t: Any) -> str:
    if isinstance(t, type):
        return f"{t.__module__}.{t.__qualname__}"
    return str(t)


def node_props(node: torch.fx.Node, root_class: str) -> dict[str, str]:
    """The five per-node props for an FX node."""
    stack = node.meta.get("nn_module_stack") or {}
    paths = [(path, _type_name(cls)) for path, cls in stack.values()]
    target = _target_name(node.target)
    namespace_parts = [f": {root_class}"] + [f"{path}: {cls}" for path, cls in paths]
    namespace_parts.append(f"{node.name}: {target}")
    scopes = [path.rsplit(".", 1)[-1] for path, _ in paths]
    props = {
        NAMESPACE: "/".join(namespace_parts),
        CLASS_HIERARCHY: repr([root_class] + [cls for _, cls in paths] + [target]),
        FX_NODE: node.format_node() or "",
        NAME_SCOPES: repr([""] + scopes + [node.name]),
    }
    stack_trace = node.meta.get("stack_trace")
    if stack_trace:
        props[STACK_TRACE] = stack_trace
    return props


def _target_name(target: Any) -> str:
    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    return getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or str(target)


def target_name(target: Any) -> str:
    return _target_name(target)
