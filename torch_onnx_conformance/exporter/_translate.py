"""FX graph -> onnx_ir model: one walk over the nodes, each dispatched to its registered translation."""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir
import sympy
import torch
from torch.export import graph_signature as gs

from torch_onnx_conformance.exporter import _dtypes, _errors, _metadata, _opset_convert
from torch_onnx_conformance.exporter.ops._context import TranslationContext
from torch_onnx_conformance.exporter.ops._registry import COMPLEX_REGISTRY, Registry, Translation

#: Key in ``model.graph.meta`` of the FX node name -> ONNX value name map.
FX_VALUES_KEY = "exporter.fx_values"

_NO_OP_TARGETS_NAMES = (
    "aten._assert_async",
    "aten._assert_scalar",
    "aten.sym_constrain_range",
    "aten.sym_constrain_range_for_size",
    "aten._assert_tensor_metadata",
    "aten._print",
    # Raises when a factorization's info output is non-zero: an assertion, like the above.
    "aten._linalg_check_errors",
)

#: Higher-order op that threads an effect token through an op with side effects (a print, a
#: check, an effectful custom op): ``with_effects(token, op, *args) -> (token, *op_outputs)``.
#: ONNX has no effects to order, so the token is dropped and the op translated like any other.
_WITH_EFFECTS = getattr(torch.ops.higher_order, "with_effects", None)


def _effect_wrapped(node: torch.fx.Node) -> Any:
    """The op a with_effects node runs, else None."""
    if _WITH_EFFECTS is not None and node.target is _WITH_EFFECTS and len(node.args) >= 2:
        return node.args[1]
    return None


def fx_targets(graph_module: torch.fx.GraphModule) -> list[tuple[torch.fx.Node, Any]]:
    """Every call_function node of a graph and of its control-flow submodules."""
    found = []
    for node in graph_module.graph.nodes:
        if node.op == "call_function":
            found.append((node, _effect_wrapped(node) or node.target))
        elif node.op == "get_attr":
            sub = getattr(graph_module, node.target, None)
            if isinstance(sub, torch.fx.GraphModule):
                found.extend(fx_targets(sub))
    return found


def is_noop_target(target: Any) -> bool:
    return isinstance(target, torch._ops.OpOverload) and _is_noop_overload(target)


@functools.cache
def _is_noop_overload(target: torch._ops.OpOverload) -> bool:
    # Asked several times per FX node (assertion pruning, then translation): an overload's
    # name, built anew by str(), is read once.
    name = str(target)
    return any(name.startswith(n + ".") for n in _NO_OP_TARGETS_NAMES)


def _feeding_only_assertions(gm: torch.fx.GraphModule) -> set[torch.fx.Node]:
    """Assertions (ONNX has none) and the call nodes whose results reach nothing else. Capture
    defers guards to runtime assertions, and their size arithmetic (compared with bounds as
    large as 2**63) needs no translation."""
    skipped: set[torch.fx.Node] = set()
    for node in reversed(gm.graph.nodes):
        if node.op != "call_function":
            continue
        if is_noop_target(node.target) and not node.users:
            skipped.add(node)
            continue
        if not node.users:
            continue
        if all(
            user in skipped or (user.op == "call_function" and is_noop_target(user.target))
            for user in node.users
        ):
            skipped.add(node)
    return skipped


def find_unsupported(graph_module: torch.fx.GraphModule, registry: Registry) -> list[dict]:
    """Every FX node whose target has no translation, with its user source line.

    A tensor of a dtype ONNX cannot carry (float4_e2m1fn_x2, float8_e8m0fnu) is an error naming
    the dtype and the first node holding one, before any op is looked at.
    """
    _check_dtypes(graph_module)
    missing = []
    for node, target in fx_targets(graph_module):
        if target is operator.getitem or is_noop_target(target):
            continue
        if lookup_for_node(registry, node, target) is None:
            missing.append(
                {
                    "target": _target_label(node, target),
                    "fx_node": node.name,
                    "source": _errors.user_source_line(node.meta.get("stack_trace")),
                }
            )
    return missing


def lookup(registry: Registry, target: Any) -> Translation | None:
    """The translation for a target; in-place overloads fall back to their functional twin."""
    found = registry.get(target)
    if found is not None or not isinstance(target, torch._ops.OpOverload):
        return found
    # Ops of optional libraries (torchvision) are registered by qualified name, so they work
    # whatever the import order.
    found = registry.get(qualified_name(target))
    if found is not None:
        return found
    packet = target.overloadpacket.__name__
    if packet.endswith("_") and not packet.endswith("__"):
        functional = getattr(getattr(torch.ops, target.namespace), packet[:-1], None)
        if functional is not None:
            overload = getattr(functional, target._overloadname, None)
            if overload is not None:
                return registry.get(overload)
    return None


def _check_dtypes(graph_module: torch.fx.GraphModule) -> None:
    for node in graph_module.graph.nodes:
        if any(_is_float4(n) for n in (node, *node.all_input_nodes)):
            _check_float4(node)
        for meta in _flatten([node.meta.get("val")]):
            if not isinstance(meta, torch.Tensor):
                continue
            dtype = _dtypes.COMPLEX_TO_REAL.get(meta.dtype, meta.dtype)
            if dtype in _dtypes.TORCH_TO_IR:
                continue
            source = _errors.user_source_line(node.meta.get("stack_trace"))
            try:
                _dtypes.to_ir(dtype)
            except _dtypes.UnsupportedDtypeError as exc:
                where = f" at {source}" if source else ""
                kind = "input" if node.op == "placeholder" else "value"
                raise _dtypes.UnsupportedDtypeError(
                    f"FX {kind} {node.name}{where} is a {dtype} tensor. {exc}"
                ) from None
        if node.op == "get_attr":
            sub = getattr(graph_module, node.target, None)
            if isinstance(sub, torch.fx.GraphModule):
                _check_dtypes(sub)


def _is_float4(node: torch.fx.Node) -> bool:
    return getattr(node.meta.get("val"), "dtype", None) is _dtypes.FLOAT4_X2


def _check_float4(node: torch.fx.Node) -> None:
    """A float4 value goes in, out, and through the ops that keep it as it is; any other op
    that makes or reads one is refused by name."""
    if node.op != "call_function" or node.target is operator.getitem:
        return
    target = str(node.target)
    same = all(_is_float4(n) for n in (node, *node.all_input_nodes))
    if target in _dtypes.FLOAT4_PASSTHROUGH and same:
        return
    if target in _dtypes.FLOAT4_MOVES and _is_float4(node):
        return  # run on the pairs' bytes (Translator._call_on_bytes)
    dtypes = {getattr(n.meta.get("val"), "dtype", None) for n in (node, *node.all_input_nodes)}
    if target == "aten.view.dtype" and dtypes == {_dtypes.FLOAT4_X2, torch.uint8}:
        return  # its bytes, computed from the values (exporter.ops._float4)
    source = _errors.user_source_line(node.meta.get("stack_trace"))
    where = f" at {source}" if source else ""
    raise _dtypes.UnsupportedDtypeError(
        f"FX node {node.name}{where} computes {target} on torch.float4_e2m1fn_x2 tensors, which "
        f"the exporter does not express in ONNX: it carries float4 tensors (as FLOAT4E2M1 of "
        f"the unpacked shape) into and out of the graph, as weights, and through "
        f"{', '.join(sorted(_dtypes.FLOAT4_PASSTHROUGH))}, ops that move whole elements "
        f"(reshape, cat, slice, permute...) and tensor.view(torch.uint8) (its bytes) and back, "
        f"not through other computations. Keep that computation outside the "
        f"exported model, or pass its result as the input."
    )


def lookup_for_node(registry: Registry, node: torch.fx.Node, target: Any) -> Translation | None:
    """The translation for one node: a node that reads or produces a complex tensor gets a
    custom translation or one from the complex table, never a real-only one."""
    found = lookup(registry, target)
    if (found is not None and found.custom) or not _touches_complex(node):
        return found
    return lookup(COMPLEX_REGISTRY, target)


def _touches_complex(node: torch.fx.Node) -> bool:
    return any(_holds_complex(other.meta.get("val")) for other in (node, *node.all_input_nodes))


def _holds_complex(meta: Any) -> bool:
    """Whether an FX value's metadata is, or nests, a complex tensor."""
    if isinstance(meta, torch.Tensor):
        return meta.dtype.is_complex
    if isinstance(meta, (list, tuple)):
        return any(_holds_complex(item) for item in meta)
    return False


def _target_label(node: torch.fx.Node, target: Any) -> str:
    name = _metadata.target_name(target)
    return f"{name} on complex tensors" if _touches_complex(node) else name


def qualified_name(target: torch._ops.OpOverload) -> str:
    """'torchvision::nms.default' style name of an overload."""
    return f"{target.namespace}::{target._opname}.{target._overloadname}"


class SymbolNames:
    """Turns torch symbolic sizes into ONNX dim names, applying the user's axis names."""

    def __init__(self, renames: dict[str, str] | None = None) -> None:
        self.renames = dict(renames or {})

    def dim(self, d: Any) -> int | str | None:
        if isinstance(d, int):
            return d
        if isinstance(d, torch.SymInt):
            expr = d.node.expr
            if expr.is_number:
                return int(expr)
            if self.renames:
                expr = expr.xreplace(
                    {
                        s: sympy.Symbol(self.renames[str(s)])
                        for s in expr.free_symbols
                        if str(s) in self.renames
                    }
                )
            return str(expr)
        return None

    def shape(self, shape: Sequence[Any]) -> ir.Shape:
        return ir.Shape([self.dim(d) for d in shape])


class GraphScope:
    """One ONNX graph being filled (the main graph or a control-flow subgraph)."""

    def __init__(self, translator: Translator, graph: ir.Graph, parent: GraphScope | None) -> None:
        self.translator = translator
        self.graph = graph
        self.parent = parent
        self.env: dict[torch.fx.Node, Any] = {}
        self._constants: dict[tuple, ir.Value] = {}

    @property
    def opset(self) -> int:
        """The opset the user asked for: translations choose their ONNX operators by it."""
        return self.translator.target_opset

    def append(self, node: ir.Node) -> None:
        self.graph.append(node)

    def use_domain(self, domain: str, version: int) -> None:
        self.translator.opset_imports.setdefault(domain, version)

    def meta_of(self, value: ir.Value) -> Any:
        return self.translator.value_meta.get(value)

    def constant(self, value: Any, dtype: torch.dtype | None) -> ir.Value:
        array = _to_numpy(value, dtype)
        # bfloat16 travels as a float32 array here, so the torch dtype is part of the key.
        key = (str(dtype), array.dtype.str, array.shape, array.tobytes())
        scope: GraphScope | None = self
        while scope is not None:
            found = scope._constants.get(key)
            if found is not None:
                return found
            scope = scope.parent
        # ir.Tensor(array) is what ir.tensor makes of a numpy array, without its checks
        # against onnx_ir's runtime protocols (tens of microseconds each on Python 3.11).
        tensor = (
            ir.Tensor(array)
            if dtype is not torch.bfloat16
            else ir.tensor(torch.as_tensor(value, dtype=torch.bfloat16))
        )
        node = ir.Node("", "Constant", [], attributes=[ir.AttrTensor("value", tensor)])
        out = node.outputs[0]
        out.name = self.translator.fresh_name("const")
        out.dtype = tensor.dtype
        out.shape = ir.Shape(tensor.shape)
        self.append(node)
        self._constants[key] = out
        return out

    def new_child(self, name: str) -> GraphScope:
        """An empty subgraph scope whose nodes may reference this scope's values."""
        graph = ir.Graph(inputs=[], outputs=[], nodes=[], name=self.translator.fresh_name(name))
        return GraphScope(self.translator, graph, parent=self)

    def add_input(self, meta: Any, name: str) -> ir.Value:
        """A formal input of this (sub)graph, typed from FX metadata."""
        value = self.translator.new_value(None, meta, name=name)
        self.graph.inputs.append(value)
        return value

    def inline(self, gm: torch.fx.GraphModule, inputs: Sequence[Any]) -> Any:
        """Translate ``gm``'s nodes into this scope with its placeholders bound to ``inputs``."""
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(inputs):
            raise ValueError(
                f"submodule takes {len(placeholders)} inputs, {len(inputs)} were given"
            )
        for node, value in zip(placeholders, inputs):
            self.env[node] = value
        return self.translator.translate_nodes(self, gm)

    def set_outputs(self, outputs: Sequence[ir.Value]) -> None:
        """Make ``outputs`` this subgraph's outputs; values from elsewhere pass through Identity."""
        produced = {out for node in self.graph for out in node.outputs}
        for out in outputs:
            if out not in produced or out in self.graph.outputs:
                # A subgraph output must be produced inside it and listed once.
                node = ir.Node("", "Identity", [out])
                self.append(node)
                ident = node.outputs[0]
                ident.name = self.translator.fresh_name(f"{self.graph.name}_out")
                ident.shape, ident.dtype = out.shape, out.dtype
                if out in self.translator.value_meta:
                    self.translator.value_meta[ident] = self.translator.value_meta[out]
                out = ident
            self.graph.outputs.append(out)

    def translate_subgraph(
        self, gm: torch.fx.GraphModule, inputs: Sequence[Any], name: str
    ) -> ir.Graph:
        child = self.new_child(name)
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(inputs):
            raise ValueError(
                f"subgraph {name} takes {len(placeholders)} inputs, {len(inputs)} were given"
            )
        bound = [
            child.add_input(node.meta.get("val"), node.name) if outer is None else outer
            for node, outer in zip(placeholders, inputs)
        ]
        outputs = child.inline(gm, bound)
        child.set_outputs([o for o in _flatten(outputs) if o is not None])
        return child.graph


class Translator:
    def __init__(
        self, registry: Registry, opset: int, *, metadata: bool, names: SymbolNames, root_class: str
    ) -> None:
        self.registry = registry
        #: Below the op library's oldest opset, nodes are written at that opset and avoid the
        #: operators the requested one lacks, so ONNX's version converter can take them down.
        self.target_opset = opset
        self.opset = _opset_convert.translation_opset(opset)
        self.metadata = metadata
        self.names = names
        self.root_class = root_class
        self.node_props = _metadata.NodeProps(root_class)
        self.value_meta: dict[ir.Value, Any] = {}
        self.opset_imports: dict[str, int] = {"": self.opset}
        self.functions: dict[tuple[str, str, str], ir.Function] = {}
        self._used_names: set[str] = set()
        self._counter = 0
        #: FX node name -> ONNX value name of its (first) output, for bisection and reports.
        self.fx_values: dict[str, str] = {}

    def fresh_name(self, base: str) -> str:
        name = base
        while name in self._used_names:
            self._counter += 1
            name = f"{base}_{self._counter}"
        self._used_names.add(name)
        return name

    def new_value(self, node: torch.fx.Node | None, meta: Any, name: str | None = None) -> ir.Value:
        value = ir.Value(name=self.fresh_name(name or node.name))
        self.set_type(value, meta)
        return value

    def set_type(self, value: ir.Value, meta: Any) -> None:
        if meta is None:
            return
        self.value_meta[value] = meta
        if isinstance(meta, torch.Tensor):
            shape = list(meta.shape)
            dtype = meta.dtype
            if dtype.is_complex:
                dtype = _dtypes.COMPLEX_TO_REAL[dtype]
                shape.append(2)
            value.dtype = _dtypes.to_ir(dtype)
            value.shape = self.names.shape(_dtypes.onnx_shape(dtype, shape))
        elif isinstance(meta, (torch.SymInt, int)) and not isinstance(meta, bool):
            value.dtype = ir.DataType.INT64
            value.shape = ir.Shape([])
        elif isinstance(meta, (torch.SymFloat, float)):
            value.dtype = ir.DataType.FLOAT
            value.shape = ir.Shape([])
        elif isinstance(meta, (torch.SymBool, bool)):
            value.dtype = ir.DataType.BOOL
            value.shape = ir.Shape([])

    # ---------------------------------------------------------------- nodes
    def translate_nodes(self, scope: GraphScope, gm: torch.fx.GraphModule) -> Any:
        outputs = None
        skipped = _feeding_only_assertions(gm)
        for node in gm.graph.nodes:
            if node in skipped:
                continue
            if node.op == "placeholder":
                if node not in scope.env:
                    raise RuntimeError(f"placeholder {node.name} has no value")
            elif node.op == "get_attr":
                scope.env[node] = self._get_attr(scope, gm, node)
            elif node.op == "call_function":
                scope.env[node] = self._call(scope, node)
            elif node.op == "output":
                outputs = self._convert_arg(scope, node.args[0])
            else:
                raise _errors.TranslationError(
                    f"FX node {node.name} has unsupported kind {node.op!r}", fx_node=node.name
                )
        return outputs

    def _get_attr(self, scope: GraphScope, gm: torch.fx.GraphModule, node: torch.fx.Node) -> Any:
        attr = gm
        for part in node.target.split("."):
            attr = getattr(attr, part)
        if isinstance(attr, torch.Tensor):
            return self.add_initializer(scope, node.target, attr, node)
        return attr  # a GraphModule for control flow: the HOP translation turns it into a graph

    def add_initializer(
        self, scope: GraphScope, name: str, tensor: torch.Tensor, node: torch.fx.Node | None
    ) -> ir.Value:
        value = ir.Value(name=self.fresh_name(name))
        self.set_type(value, tensor)
        t = tensor.detach()
        if t.is_complex():
            t = torch.view_as_real(t)
        value.const_value = _dtypes.ir_tensor(t.contiguous(), name=value.name)
        root = scope
        while root.parent is not None:
            root = root.parent
        root.graph.register_initializer(value)
        return value

    def _convert_arg(self, scope: GraphScope, arg: Any) -> Any:
        if isinstance(arg, torch.fx.Node):
            s: GraphScope | None = scope
            while s is not None:
                if arg in s.env:
                    return s.env[arg]
                s = s.parent
            raise RuntimeError(f"FX node {arg.name} used before it was translated")
        if isinstance(arg, (list, tuple)):
            return type(arg)(self._convert_arg(scope, a) for a in arg)
        if isinstance(arg, dict):
            return {k: self._convert_arg(scope, v) for k, v in arg.items()}
        return arg

    def _call(self, scope: GraphScope, node: torch.fx.Node) -> Any:
        target = node.target
        args = self._convert_arg(scope, node.args)
        kwargs = self._convert_arg(scope, node.kwargs)
        if target is operator.getitem and isinstance(args[0], (list, tuple)):
            return args[0][args[1]]
        meta = node.meta.get("val")
        wrapped = _effect_wrapped(node)
        if wrapped is None:
            return self._call_op(scope, node, target, args, kwargs, meta)
        # with_effects(token, op, *args): the outputs are (token, out) or (token, *outs).
        returns = len(wrapped._schema.returns) if hasattr(wrapped, "_schema") else 1
        metas = list(meta[1:]) if isinstance(meta, (list, tuple)) else []
        op_meta = tuple(metas) if returns > 1 else (metas[0] if metas else None)
        result = self._call_op(scope, node, wrapped, args[2:], kwargs, op_meta)
        return (None, *result) if returns > 1 and isinstance(result, tuple) else (None, result)

    def _call_op(
        self,
        scope: GraphScope,
        node: torch.fx.Node,
        target: Any,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        meta: Any,
    ) -> Any:
        """Translate ``target(*args, **kwargs)`` for ``node`` whose output metadata is ``meta``."""
        if is_noop_target(target):
            return None
        if (
            str(target) in _dtypes.FLOAT4_MOVES
            and isinstance(meta, torch.Tensor)
            and meta.dtype is _dtypes.FLOAT4_X2
        ):
            return self._call_on_bytes(
                scope,
                node,
                args,
                meta,
                lambda moved, moved_meta: self._call_op(
                    scope, node, target, moved, kwargs, moved_meta
                ),
            )
        translation = lookup_for_node(self.registry, node, target)
        if translation is None:  # find_unsupported ran before; this is a submodule-only miss
            raise _errors.UnsupportedOpError(
                f"No translation for {_target_label(node, target)} (FX node {node.name})",
                [
                    {
                        "target": _target_label(node, target),
                        "fx_node": node.name,
                        "source": _errors.user_source_line(node.meta.get("stack_trace")),
                    }
                ],
            )
        ctx = (
            TranslationContext(scope, node)
            if meta is node.meta.get("val")
            else _OutputMetaContext(scope, node, meta)
        )
        try:
            if translation.style == "ctx":
                result = translation.fn(ctx, *args, **kwargs)
            else:
                from torch_onnx_conformance.exporter._onnxscript_bridge import (
                    call_onnxscript_translation,
                )

                result = call_onnxscript_translation(ctx, translation, args, kwargs, self)
        except _errors.OnnxExporterError:
            raise
        except Exception as exc:
            source = _errors.user_source_line(node.meta.get("stack_trace"))
            raise _errors.TranslationError(
                f"Translating FX node {node.name} ({_metadata.target_name(target)}) with "
                f"{translation.name} failed: {type(exc).__name__}: {exc}"
                + (f"\n  at {source}" if source else ""),
                target=_metadata.target_name(target),
                fx_node=node.name,
                source=source,
            ) from exc
        result = self._finish_outputs(ctx, node, result, meta)
        first = result[0] if isinstance(result, (list, tuple)) and result else result
        if isinstance(first, ir.Value) and first.name:
            self.fx_values[node.name] = first.name
        if self.metadata and ctx.nodes:
            props = self.node_props(node)
            for n in ctx.nodes:
                n.metadata_props.update(props)
        for i, n in enumerate(ctx.nodes):
            if n.name is None:
                n.name = self.fresh_name(
                    f"node_{node.name}" if i == len(ctx.nodes) - 1 else f"node_{node.name}_{i}"
                )
        return result

    def _call_on_bytes(
        self, scope: GraphScope, node: torch.fx.Node, args: Sequence[Any], meta: Any, call: Any
    ) -> ir.Value:
        """An op that moves whole float4 pairs, run on their bytes: the float4 inputs become
        bytes, the op's own translation (``call(args, output meta)``) runs on those, and its
        result becomes float4 again."""
        from torch_onnx_conformance.exporter.ops import _float4

        ctx = TranslationContext(scope, node)

        def to_bytes(value: Any) -> Any:
            if isinstance(value, ir.Value) and value.dtype == ir.DataType.FLOAT4E2M1:
                packed = _float4.to_bytes(ctx, value)
                self.set_type(packed, self.value_meta[value].view(torch.uint8))
                return packed
            if isinstance(value, (list, tuple)):
                return type(value)(to_bytes(item) for item in value)
            return value

        args = [to_bytes(arg) for arg in args]
        moved = call(args, meta.view(torch.uint8))
        result = _float4.from_bytes(ctx, moved)
        result.name = self.fresh_name(f"{node.name}_float4")
        self.set_type(result, meta)
        for i, n in enumerate(ctx.nodes):
            if n.name is None:
                n.name = self.fresh_name(f"node_{node.name}_float4_{i}")
        return result

    def _finish_outputs(
        self, ctx: TranslationContext, node: torch.fx.Node, result: Any, meta: Any
    ) -> Any:
        created = {out for n in ctx.nodes for out in n.outputs}
        if isinstance(result, ir.Value):
            return self._finish_value(ctx, node.name, result, meta, created)
        if isinstance(result, (list, tuple)):
            metas = meta if isinstance(meta, (list, tuple)) else [None] * len(result)
            return type(result)(
                self._finish_value(ctx, f"{node.name}__{i}", r, m, created)
                if isinstance(r, ir.Value)
                else r
                for i, (r, m) in enumerate(zip(result, metas))
            )
        return result

    def _finish_value(
        self, ctx: TranslationContext, name: str, value: ir.Value, meta: Any, created: set[ir.Value]
    ) -> ir.Value:
        if value not in created:
            return value  # an alias of an existing value (e.g. a no-op view)
        expected = meta.dtype if isinstance(meta, torch.Tensor) else None
        if expected is not None and expected.is_complex:
            expected = _dtypes.COMPLEX_TO_REAL[expected]
        actual = _dtypes.to_torch(value.dtype)
        if expected is not None and actual is not None and actual != expected:
            # The translation computed in another dtype; torch's result dtype is the contract.
            value = ctx.op.Cast(value, to=_dtypes.to_ir(expected))
        # Created here (or the Cast just added): it takes the FX node's name.
        value.name = self.fresh_name(name)
        self.set_type(value, meta)
        return value


class _OutputMetaContext(TranslationContext):
    """A context whose output metadata is given, for an op wrapped in a higher-order node
    (the node's own metadata also holds the effect token)."""

    def __init__(self, scope: GraphScope, node: torch.fx.Node, meta: Any) -> None:
        super().__init__(scope, node)
        self._meta = meta

    @property
    def out(self) -> Any:
        return self._meta


def _flatten(x: Any) -> list[Any]:
    if isinstance(x, (list, tuple)):
        return [y for item in x for y in _flatten(item)]
    return [x]


def _to_numpy(value: Any, dtype: torch.dtype | None) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu()
        if dtype is not None:
            t = t.to(dtype)
        if t.dtype == torch.bfloat16:
            return t.float().numpy()
        return t.numpy()
    if isinstance(value, np.ndarray):
        return value if dtype is None else value.astype(_np_dtype(dtype))
    if dtype is None:
        raise TypeError(f"constant {value!r} needs an explicit dtype")
    if dtype == torch.bfloat16:
        return np.asarray(value, dtype=np.float32)
    return np.asarray(value, dtype=_np_dtype(dtype))


def _np_dtype(dtype: torch.dtype) -> np.dtype:
    return torch.empty((), dtype=dtype).numpy().dtype


# --------------------------------------------------------------------- program level
def _check_float4_opset(program: torch.export.ExportedProgram, opset: int) -> None:
    # The opset is compared only for a program that holds float4: other programs translate
    # alike at every opset (exporter._translation_reuse records each comparison).
    for node in program.graph.nodes:
        if _is_float4(node) and opset < _dtypes.FLOAT4_OPSET:
            raise _dtypes.UnsupportedDtypeError(
                f"FX value {node.name} is a torch.float4_e2m1fn_x2 tensor, and ONNX has "
                f"FLOAT4E2M1 from opset {_dtypes.FLOAT4_OPSET} on; opset_version={opset} "
                f"cannot carry it. Export with opset_version={_dtypes.FLOAT4_OPSET} or later."
            )


def translate_program(
    program: torch.export.ExportedProgram,
    registry: Registry,
    *,
    opset: int,
    metadata: bool,
    names: SymbolNames,
    root_class: str,
) -> ir.Model:
    _check_float4_opset(program, opset)
    translator = Translator(registry, opset, metadata=metadata, names=names, root_class=root_class)
    graph = ir.Graph(inputs=[], outputs=[], nodes=[], name="main_graph")
    scope = GraphScope(translator, graph, parent=None)
    sig = program.graph_signature
    placeholders = [n for n in program.graph.nodes if n.op == "placeholder"]
    state = program.state_dict
    constants = program.constants
    for node, spec in zip(placeholders, sig.input_specs):
        kind = spec.kind
        meta = node.meta.get("val")
        if kind == gs.InputKind.TOKEN:
            scope.env[node] = None  # effect ordering: nothing to carry in ONNX
            continue
        if kind == gs.InputKind.USER_INPUT:
            if isinstance(spec.arg, gs.ConstantArgument) or meta is None:
                scope.env[node] = (
                    spec.arg.value if isinstance(spec.arg, gs.ConstantArgument) else None
                )
                continue
            value = translator.new_value(node, meta)
            graph.inputs.append(value)
            scope.env[node] = value
            if metadata:
                value.metadata_props[_metadata.INPUT_KIND] = kind.name
        else:
            tensor = state.get(spec.target) if spec.target in state else constants.get(spec.target)
            if tensor is None:
                raise _errors.TranslationError(
                    f"{kind.name} {spec.target} (FX node {node.name}) has no tensor in the "
                    f"exported program's state_dict or constants",
                    fx_node=node.name,
                )
            if not isinstance(tensor, torch.Tensor):
                scope.env[node] = tensor  # a script object: translations handle it
                continue
            value = translator.add_initializer(scope, spec.target, tensor, node)
            scope.env[node] = value
            if metadata:
                value.metadata_props[_metadata.INPUT_KIND] = kind.name
                value.metadata_props[_metadata.ORIGINAL_NAME] = node.name
                if spec.persistent is not None:
                    value.metadata_props[_metadata.INPUT_PERSISTENT] = str(spec.persistent)
    outputs = translator.translate_nodes(scope, program.graph_module)
    for spec, value in zip(sig.output_specs, outputs):
        if spec.kind != gs.OutputKind.USER_OUTPUT or not isinstance(value, ir.Value):
            continue  # mutations have no ONNX equivalent; None and constants are not outputs
        graph.outputs.append(value)
        if metadata:
            value.metadata_props[_metadata.OUTPUT_KIND] = spec.kind.name
    if metadata:
        graph.metadata_props[_metadata.GRAPH_SIGNATURE] = str(sig)
        graph.metadata_props[_metadata.RANGE_CONSTRAINTS] = str(program.range_constraints)
    graph.opset_imports.update(translator.opset_imports)
    graph.meta[FX_VALUES_KEY] = dict(translator.fx_values)
    model = ir.Model(
        graph,
        ir_version=10,
        producer_name="torch-onnx-conformance",
        producer_version=_version(),
        functions=list(translator.functions.values()),
    )
    return model


@functools.cache
def _version() -> str:
    """This distribution's version (read once: importlib's lookup walks the installed
    distributions' metadata)."""
    try:
        from importlib.metadata import version

        return version("torch-onnx-conformance")
    except Exception:
        return "0+unknown"
