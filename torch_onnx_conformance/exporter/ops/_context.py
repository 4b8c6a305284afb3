"""What a translation sees: an op builder, the FX node, its metadata, and small helpers.

Translations build nodes with ``ctx.op.<OnnxOp>(*inputs, **attributes)``. Inputs are
``ir.Value`` (or None for an omitted optional input); Python ints and int lists are accepted as
int64 constants for convenience, anything else must go through ``ctx.const`` so its dtype is
explicit. Special keyword arguments: ``_outputs=N`` (returns a tuple of N values), ``_domain``,
``_version``.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx_ir as ir
import torch

from torch_onnx_conformance.exporter import _dtypes
from torch_onnx_conformance.exporter.ops import _opsets

if TYPE_CHECKING:
    from torch_onnx_conformance.exporter._translate import GraphScope

# Output dtype rules for the builder's light type propagation. Translations read dtypes of
# intermediate values (to promote scalars, pick casts), so common ops carry them forward.
_BOOL_OUT = frozenset(
    "Equal Less Greater LessOrEqual GreaterOrEqual Not And Or Xor IsNaN IsInf".split()
)
#: What ``used_outputs`` answers when any result may be read: every index an ATen op can have.
EVERY_OUTPUT = frozenset(range(64))
_INT64_OUT = frozenset("Shape Size ArgMax ArgMin NonZero NonMaxSuppression".split())
_SAME_AS_SECOND = frozenset(["Where"])
_NO_PROPAGATION = frozenset(
    "Cast BitCast CastLike Constant ConstantOfShape If Loop Scan TopK Unique QuantizeLinear "
    "DequantizeLinear RandomNormal RandomUniform RandomNormalLike RandomUniformLike Multinomial "
    "Bernoulli EyeLike SequenceConstruct SequenceAt SplitToSequence ConcatFromSequence "
    "OptionalHasElement Optional".split()
)


#: The attribute classes (one value, a list of them) of a Python value's exact type, as
#: ``ir.convenience.convert_attribute`` infers them (a bool is an int there too).
_ATTRIBUTE_CLASSES = {
    int: (ir.AttrInt64, ir.AttrInt64s),
    bool: (ir.AttrInt64, ir.AttrInt64s),
    float: (ir.AttrFloat32, ir.AttrFloat32s),
    str: (ir.AttrString, ir.AttrStrings),
}
#: The item types a list of each attribute class may hold (onnx_ir checks ``isinstance(x, int)``
#: for an int list, so bools may be among its ints).
_ITEM_TYPES = {ir.AttrInt64s: (int, bool), ir.AttrFloat32s: (float,), ir.AttrStrings: (str,)}


def _attribute(name: str, value: Any) -> ir.Attr:
    """``ir.convenience.convert_attribute(name, value)``: the same attribute, made without
    onnx_ir's checks against its runtime protocols for what translations pass most, a number,
    a string, a non-empty list or tuple of one of them, or an ``ir.Tensor``.

    On Python 3.11 a check against a protocol costs tens of microseconds (``typing`` collects
    the protocol's members on every call), and onnx_ir makes three of them (graph, tensor,
    type) before it looks at a list's items: over a transformer's translation they were a
    tenth of its time. Anything else goes to onnx_ir as before."""
    kind = type(value)
    classes = _ATTRIBUTE_CLASSES.get(kind)
    if classes is not None:
        return classes[0](name, value)
    if kind in (list, tuple) and value:
        classes = _ATTRIBUTE_CLASSES.get(type(value[0]))
        if classes is not None:
            many, allowed = classes[1], _ITEM_TYPES[classes[1]]
            if all(type(item) in allowed for item in value):
                return many(name, value)
    elif isinstance(value, ir.Tensor):
        return ir.AttrTensor(name, value)
    return ir.convenience.convert_attribute(name, value)


class OpBuilder:
    """``ctx.op.Add(a, b)`` creates an ``Add`` node in the current graph."""

    def __init__(self, ctx: TranslationContext) -> None:
        self._ctx = ctx

    def __getattr__(self, op_type: str):
        if op_type.startswith("_"):
            raise AttributeError(op_type)

        def make(
            *inputs: Any,
            _outputs: int = 1,
            _domain: str = "",
            _version: int | None = None,
            **attributes: Any,
        ):
            return self._ctx.make_node(
                op_type,
                inputs,
                attributes,
                num_outputs=_outputs,
                domain=_domain,
                version=_version,
            )

        make.__name__ = op_type
        return make


class TranslationContext:
    """Per-FX-node view of the translation in progress."""

    def __init__(self, scope: GraphScope, node: torch.fx.Node | None) -> None:
        self.scope = scope
        self.node = node
        self.op = OpBuilder(self)
        self.nodes: list[ir.Node] = []

    # ------------------------------------------------------------------ facts
    @property
    def opset(self) -> int:
        return self.scope.opset

    def has(self, feature: str) -> bool:
        """Whether the target opset offers ``feature`` (see torch_onnx_conformance/exporter/ops/_opsets.py)."""
        return _opsets.has(feature, self.opset)

    @property
    def out(self) -> Any:
        """The FX output metadata (FakeTensor, tuple of them, or SymInt)."""
        return None if self.node is None else self.node.meta.get("val")

    def used_outputs(self) -> frozenset[int]:
        """Indices of this multi-output node's results that something reads.

        A ``getitem`` whose result nobody reads does not count. When the tuple escapes whole
        (returned, passed on), or there is no FX node to ask (a hand-built Loop or Scan body),
        every index counts: computing an output nobody needs is safe, dropping one is not.
        """
        if self.node is None:
            return EVERY_OUTPUT
        used: set[int] = set()
        for user in self.node.users:
            if user.op != "call_function" or user.target is not operator.getitem:
                return EVERY_OUTPUT
            if user.users:
                used.add(int(user.args[1]))
        return frozenset(used)

    @property
    def out_dtype(self) -> torch.dtype | None:
        out = self.out
        if isinstance(out, torch.Tensor):
            return out.dtype
        if isinstance(out, (list, tuple)) and out and isinstance(out[0], torch.Tensor):
            return out[0].dtype
        return None

    def dtype(self, value: Any) -> torch.dtype | None:
        """torch dtype of a value (or of a Python scalar), None when unknown."""
        if isinstance(value, ir.Value):
            return _dtypes.to_torch(value.dtype)
        if isinstance(value, bool):
            return torch.bool
        if isinstance(value, int):
            return torch.int64
        if isinstance(value, float):
            return torch.float32
        return None

    def meta(self, value: ir.Value) -> Any:
        """The FakeTensor / SymInt the FX graph recorded for this value, if any."""
        return self.scope.meta_of(value)

    def rank(self, value: ir.Value) -> int | None:
        meta = self.meta(value)
        if isinstance(meta, torch.Tensor):
            return meta.dim()
        if meta is not None and not isinstance(meta, (list, tuple)):
            return 0
        if value.shape is not None:
            return len(value.shape)
        return None

    def shape(self, value: ir.Value) -> tuple[Any, ...] | None:
        """Static shape as a tuple of ints and torch.SymInts (from FX metadata)."""
        meta = self.meta(value)
        if isinstance(meta, torch.Tensor):
            return tuple(meta.shape)
        if value.shape is not None:
            return tuple(d if isinstance(d, int) else None for d in value.shape)
        return None

    def static_shape(self, value: ir.Value) -> tuple[int, ...] | None:
        """The shape when every dimension is a plain int, else None."""
        shape = self.shape(value)
        if shape is None or not all(isinstance(d, int) for d in shape):
            return None
        return shape

    # ------------------------------------------------------------- builders
    def make_node(
        self,
        op_type: str,
        inputs: Sequence[Any],
        attributes: dict[str, Any],
        *,
        num_outputs: int = 1,
        domain: str = "",
        version: int | None = None,
        graph: ir.Graph | None = None,
    ):
        ir_inputs = [self._as_input(op_type, i, x) for i, x in enumerate(inputs)]
        # Trailing omitted optional inputs are dropped; inner ones stay as empty names.
        while ir_inputs and ir_inputs[-1] is None:
            ir_inputs.pop()
        attrs = {k: v for k, v in attributes.items() if v is not None}
        if op_type == "Cast" and not domain:
            attrs = self._float8_cast_attributes(attrs)
        node = ir.Node(
            domain,
            op_type,
            ir_inputs,
            attributes=[_attribute(name, value) for name, value in attrs.items()],
            num_outputs=num_outputs,
            version=version,
        )
        self.scope.append(node)
        self.nodes.append(node)
        if domain:
            self.scope.use_domain(domain, version or 1)
        self._propagate_dtype(node, attrs)
        if num_outputs == 1:
            return node.outputs[0]
        return tuple(node.outputs)

    def _as_input(self, op_type: str, index: int, x: Any) -> ir.Value | None:
        if x is None or isinstance(x, ir.Value):
            return x
        if isinstance(x, bool):
            return self.const(x, torch.bool)
        if isinstance(x, int) or (
            isinstance(x, (list, tuple))
            and all(isinstance(i, int) and not isinstance(i, bool) for i in x)
        ):
            return self.const(x, torch.int64)
        if isinstance(x, (np.ndarray, torch.Tensor)):
            return self.const(x)
        raise TypeError(
            f"Input {index} of ONNX op {op_type} is a {type(x).__name__} ({x!r}); pass an "
            f"ir.Value, or wrap constants with ctx.const(value, dtype) so the dtype is explicit"
        )

    def _float8_cast_attributes(self, attrs: dict[str, Any]) -> dict[str, Any]:
        to = ir.DataType(attrs["to"])
        if to not in _dtypes.FLOAT8_TYPES:
            return attrs
        if not self.has("Cast-float8"):
            raise NotImplementedError(
                f"a cast to {_dtypes.to_torch(to)} needs ONNX's float8 types, which opset "
                f"{self.opset} does not have; export with opset_version >= 19"
            )
        if to in _dtypes.FLOAT8_OVERFLOW_NOT_SATURATED and "saturate" not in attrs:
            return {**attrs, "saturate": 0}
        return attrs

    def _propagate_dtype(self, node: ir.Node, attrs: dict[str, Any]) -> None:
        op = node.op_type
        if node.domain not in ("", "ai.onnx") or op in _NO_PROPAGATION:
            if op in ("Cast", "BitCast"):
                node.outputs[0].dtype = ir.DataType(attrs["to"])
            elif op == "CastLike" and node.inputs[1] is not None:
                node.outputs[0].dtype = node.inputs[1].dtype
            elif op == "Constant":
                pass
            return
        if op == "Split" and node.inputs[0] is not None and node.inputs[0].dtype is not None:
            for out in node.outputs:
                out.dtype = node.inputs[0].dtype
            return
        if op in _BOOL_OUT:
            dtype = ir.DataType.BOOL
        elif op in _INT64_OUT:
            dtype = ir.DataType.INT64
        elif op in _SAME_AS_SECOND:
            dtype = node.inputs[1].dtype if node.inputs[1] is not None else None
        else:
            first = node.inputs[0] if node.inputs else None
            dtype = first.dtype if first is not None else None
        if dtype is None:
            return  # unknown input dtype: leave the outputs untyped rather than wrongly typed
        # Extra outputs (MaxPool indices, Dropout mask, LayerNormalization statistics) have
        # their own dtypes; only the first output follows the rule.
        node.outputs[0].dtype = dtype

    def const(self, value: Any, dtype: torch.dtype | None = None) -> ir.Value:
        """A constant value (deduplicated per graph). ``dtype`` is a torch dtype."""
        return self.scope.constant(value, dtype)

    def scalar_like(self, value: Any, like: ir.Value | torch.dtype) -> ir.Value:
        """A 0-d constant with the dtype of ``like`` (a value or a torch dtype)."""
        dtype = like if isinstance(like, torch.dtype) else self.dtype(like)
        if dtype is None:
            raise TypeError(f"cannot make a scalar like {like}: its dtype is unknown")
        return self.const(value, dtype)

    def cast(self, value: ir.Value, dtype: torch.dtype) -> ir.Value:
        """Cast to a torch dtype; a no-op when the dtype is already right."""
        if self.dtype(value) == dtype:
            return value
        if dtype.is_complex:
            dtype = _dtypes.COMPLEX_TO_REAL[dtype]
        return self.op.Cast(value, to=_dtypes.to_ir(dtype))

    def promote(self, *values: Any, dtype: torch.dtype | None = None) -> list[ir.Value]:
        """Bring tensors and Python scalars to one dtype, the way torch's promotion does.

        Without ``dtype``, the common dtype follows torch.result_type over the FX metadata, so
        ``float16_tensor + 2.5`` stays float16 and ``int_tensor + 2.5`` becomes float32.
        """
        if dtype is None:
            dtype = self.result_type(*values)
        out = []
        for v in values:
            if isinstance(v, ir.Value):
                out.append(self.cast(v, dtype))
            else:
                out.append(self.const(v, dtype))
        return out

    def result_type(self, *values: Any) -> torch.dtype:
        """torch's type promotion over values (tensors by their metadata) and Python scalars."""
        probes: list[Any] = []
        for v in values:
            if isinstance(v, ir.Value):
                dt = self.dtype(v)
                if dt is None:
                    raise TypeError(f"dtype of {v.name} is unknown; cast it explicitly")
                meta = self.meta(v)
                is_0d = (
                    (isinstance(meta, torch.Tensor) and meta.dim() == 0)
                    or (meta is not None and not isinstance(meta, torch.Tensor))
                    or (v.shape is not None and len(v.shape) == 0)
                )
                if isinstance(meta, (torch.SymInt, torch.SymFloat, torch.SymBool)):
                    probes.append({torch.int64: 1, torch.bool: True}.get(dt, 1.0))
                else:
                    probes.append(torch.empty(() if is_0d else (1,), dtype=dt))
            elif isinstance(v, (bool, int, float, complex)):
                probes.append(v)
            elif isinstance(v, (torch.SymInt, torch.SymFloat)):
                probes.append(1 if isinstance(v, torch.SymInt) else 1.0)
        if not probes:
            raise TypeError("result_type needs at least one value")
        from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

        _, result = elementwise_dtypes(
            *probes, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT
        )
        return result

    def ints(self, items: Any) -> ir.Value:
        """A 1-D int64 value from a list mixing Python ints and scalar int values (SymInts)."""
        if isinstance(items, ir.Value):
            return items if self.rank(items) != 0 else self.op.Reshape(items, [1])
        items = list(items)
        if all(isinstance(i, int) for i in items):
            return self.const(items, torch.int64)
        pieces = []
        for i in items:
            if isinstance(i, ir.Value):
                i = self.cast(i, torch.int64)
                pieces.append(self.op.Reshape(i, [1]))
            else:
                pieces.append(self.const([int(i)], torch.int64))
        return self.op.Concat(*pieces, axis=0)

    def scalar(self, item: Any, dtype: torch.dtype = torch.int64) -> ir.Value:
        """A 0-d value of ``dtype`` from a Python number or a scalar value."""
        if isinstance(item, ir.Value):
            return self.cast(item, dtype)
        return self.const(item, dtype)

    def subgraph(
        self, graph_module: torch.fx.GraphModule, inputs: Sequence[Any], name: str
    ) -> ir.Graph:
        """Translate an FX submodule (a control-flow branch or body) into an ONNX subgraph.

        ``inputs`` pairs with the submodule's placeholders: an ``ir.Value`` from the outer graph
        is referenced directly (ONNX subgraphs see outer values); ``None`` makes the placeholder
        a formal input of the subgraph (Loop and Scan bodies).
        """
        return self.scope.translate_subgraph(graph_module, inputs, name)

    def child(self, name: str) -> TranslationContext:
        """A context that builds an empty subgraph (Loop/Scan bodies built by hand).

        Use ``sub.input(meta, name)`` for formal inputs, ``sub.inline(gm, inputs)`` to translate
        an FX submodule into it, and ``sub.finish(outputs)`` to get the ``ir.Graph``.
        """
        sub = TranslationContext(self.scope.new_child(name), self.node)
        sub.nodes = self.nodes  # nodes of subgraphs carry the same FX metadata
        return sub

    def input(self, meta: Any, name: str) -> ir.Value:
        return self.scope.add_input(meta, name)

    def inline(self, graph_module: torch.fx.GraphModule, inputs: Sequence[Any]) -> Any:
        """Translate an FX submodule's nodes right here, its placeholders bound to ``inputs``."""
        return self.scope.inline(graph_module, inputs)

    def finish(self, outputs: Sequence[ir.Value]) -> ir.Graph:
        self.scope.set_outputs(list(outputs))
        return self.scope.graph
