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


class NodeProps:
    """The per-node props (up to five) of the FX nodes of one program. What they take from
    a node's module stack (the leading parts of its namespace, class hierarchy and name
    scopes) is worked out once per distinct stack: the nodes of one module share it."""

    def __init__(self, root_class: str) -> None:
        self.root_class = root_class
        self._by_stack: dict[tuple, tuple[str, list[str], list[str]]] = {}
        self._targets: dict[Any, str] = {}

    def __call__(self, node: torch.fx.Node) -> dict[str, str]:
        stack = tuple((node.meta.get("nn_module_stack") or {}).values())
        try:
            parts = self._by_stack.get(stack)
        except TypeError:  # an entry that cannot be a key: worked out for this node alone
            parts, stack = None, None
        if parts is None:
            parts = self._stack_parts(stack or ())
            if stack is not None:
                self._by_stack[stack] = parts
        namespace, classes, scopes = parts
        target = self._target(node.target)
        props = {
            NAMESPACE: f"{namespace}/{node.name}: {target}",
            CLASS_HIERARCHY: repr([*classes, target]),
            FX_NODE: node.format_node() or "",
            NAME_SCOPES: repr([*scopes, node.name]),
        }
        stack_trace = node.meta.get("stack_trace")
        if stack_trace:
            props[STACK_TRACE] = stack_trace
        return props

    def _stack_parts(self, stack: tuple) -> tuple[str, list[str], list[str]]:
        paths = [(path, _type_name(cls)) for path, cls in stack]
        namespace = "/".join([f": {self.root_class}"] + [f"{path}: {cls}" for path, cls in paths])
        classes = [self.root_class] + [cls for _, cls in paths]
        scopes = [""] + [path.rsplit(".", 1)[-1] for path, _ in paths]
        return namespace, classes, scopes

    def _target(self, target: Any) -> str:
        try:
            name = self._targets.get(target)
        except TypeError:
            return _target_name(target)
        if name is None:
            name = self._targets[target] = _target_name(target)
        return name


def _target_name(target: Any) -> str:
    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    return getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or str(target)


def target_name(target: Any) -> str:
    return _target_name(target)
