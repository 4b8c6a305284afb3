"""Graph clean-up passes, all from onnx_ir and onnxscript."""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
from collections.abc import Iterable, Iterator

import numpy as np
import onnx
import onnx.defs
import onnx_ir as ir
import onnx_ir.passes.common as common

from torch_onnx_conformance.exporter import _dtypes, _translation_reuse


def finalize(model: ir.Model) -> None:
    """Always-on structural fixes: outputs produced in-graph, unique names, no dead nodes, fills
    onnxruntime can load."""
    _alias_passthrough_outputs(model.graph)
    ir.passes.Sequential(
        common.RemoveUnusedNodesPass(),
        common.OutputFixPass(),
        common.NameFixPass(),
    )(model)
    widen_float8_fills(model)


def _alias_passthrough_outputs(graph: ir.Graph) -> None:
    """An input the model returns as it is becomes an output through an Identity named
    ``<input>_out``: the input keeps its name (onnx_ir's OutputFixPass would rename the input
    to ``<input>_orig`` and give its name to the output, so the names a caller feeds change)."""
    for index, output in enumerate(graph.outputs):
        if output.is_graph_input():
            alias_output(graph, index)


def alias_output(graph: ir.Graph, index: int) -> ir.Value:
    """Make ``graph.outputs[index]`` an Identity of what it was, named ``<name>_out``, so that
    renaming the output leaves an input's or a weight's name as it is."""
    output = graph.outputs[index]
    node = ir.node("Identity", inputs=[output])
    alias = node.outputs[0]
    alias.name = f"{output.name}_out"  # NameFixPass makes it unique if it is not
    alias.shape, alias.type = output.shape, output.type
    alias.metadata_props.update(output.metadata_props)
    graph.append(node)
    graph.outputs[index] = alias
    return alias


def forget_static_dims(model: ir.Model) -> None:
    """Make every fixed dim of the values the graphs compute unknown (ranks, symbolic dims and
    dtypes stay; graph inputs keep their shapes).

    Used when capture held a dim at its example size: torch then simplifies the sizes derived
    from it to constants, and a constant output shape would let the optimizer fold a runtime
    Shape computation into that constant.
    """
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        for value in node.outputs:
            if value.shape is not None:
                value.shape = ir.Shape([None if isinstance(d, int) else d for d in value.shape])


def optimize(model: ir.Model, *, keep_functions: bool | None = None) -> None:
    """onnxscript's optimizer (constant folding, rewrite rules, CSE, constant lifting), then
    the rewrites into the fused ops of the model's opset (torch_onnx_conformance/exporter/_fusions.py).

    Model-local functions are kept (not inlined) when ``keep_functions`` is true; by default
    they are kept whenever the model has any, since someone asked for them.
    """
    # onnxscript (its optimizer and rewriter, ~1 s to import) loads with the first optimized
    # export, not with the exporter: an export with optimize=False never needs it.
    from torch_onnx_conformance.exporter import _fusions

    if keep_functions is None:
        keep_functions = bool(model.functions)
    # Inlining a model without functions finds no call to inline (onnx_ir's InlinePass only
    # lists the graph's names then): it runs only where there is a function to inline.
    with _quiet_folding_misses():
        _onnxscript_optimizer(inline=not keep_functions and bool(model.functions))(model)
    # After folding, so that constant cos/sin tables and shapes are visible to the rules.
    _fusions.fuse(model)
    # The optimizer folds Cast(ConstantOfShape) into one ConstantOfShape again.
    widen_float8_fills(model)


def _onnxscript_optimizer(*, inline: bool) -> ir.passes.Sequential:
    """The passes of ``onnxscript.optimizer.optimize_ir``, in its order and with its defaults,
    but with its default rewrite rules made to cost what the graph costs (:func:`rule_set`),
    its folder inferring no shape the graph has (:func:`_known_shapes_first`), and its second
    round of folding and rewriting run only when the first rewrote something
    (:class:`_FoldRewriteAgainIfRewritten`)."""
    from onnxscript import rewriter
    from onnxscript.optimizer import _constant_folding

    rules = _default_rule_set()
    # A rule set with a rule that keeps the nodes it matched removes the unused nodes itself
    # after every application (onnxscript's set does), and nothing after it adds a node: the
    # clean-up's removal, and the removal onnxscript's optimizer runs next, find none then.
    removal = [] if rules.remove_unused_nodes else [common.RemoveUnusedNodesPass()]
    passes = [
        _FoldRewriteAgainIfRewritten(
            _known_shapes_first()(
                shape_inference=True,
                input_size_limit=_constant_folding.DEFAULT_CONSTANT_FOLD_INPUT_SIZE_LIMIT,
                output_size_limit=_constant_folding.DEFAULT_CONSTANT_FOLD_OUTPUT_SIZE_LIMIT,
                should_fold=_should_fold,
            ),
            rewriter.RewritePass(rules),
            [*removal, common.RemoveUnusedFunctionsPass(), common.RemoveUnusedOpsetsPass()],
        ),
        *removal,
        common.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0),
        common.LiftSubgraphInitializersToMainGraphPass(),
        common.DeduplicateInitializersPass(),
        common.CommonSubexpressionEliminationPass(),
        common.OutputFixPass(),
        common.NameFixPass(),
    ]
    if inline:
        passes.insert(0, common.InlinePass())
    return ir.passes.Sequential(*passes)


@functools.cache
def _default_rule_set():
    """:func:`rule_set` of :func:`_default_rewrite_rules`, built once: its rules are
    onnxscript's module-level rules (copied, sharing whatever they hold), and the set keeps
    nothing of a model between applications (:func:`_forget_matches`), so every export can
    use the same set (building it, the rules' copies and their producer checks, cost ~1 ms
    an export)."""
    return rule_set(_default_rewrite_rules())


def _default_rewrite_rules() -> tuple:
    """onnxscript's default rewrite rules, its BatchNormalization folding into Conv and Gemm
    replaced by the same rules writing the folded weights into memory torch allocates
    (:func:`_batch_norm_folding`)."""
    from onnxscript import rewriter

    replaced = _batch_norm_folding()
    return tuple(replaced.get(id(rule), rule) for rule in rewriter._DEFAULT_REWRITE_RULES)


@functools.cache
def _batch_norm_folding() -> dict:
    """onnxscript's rules that fold a BatchNormalization into the Conv or Gemm before it, by
    the id of each, made again with the folded weights written into an array that torch
    allocates: the same numpy multiplication, the same values.

    numpy asks the kernel for transparent huge pages for every large array it allocates
    (madvise); where the kernel then compacts memory on the spot to find them
    (``/sys/kernel/mm/transparent_hugepage/defrag``: madvise, the common default), the first
    touch of the folded weights can cost ten times their multiplication: on a busy machine
    0.3 s for r3d_18's 133 MB, more than its whole capture. torch's allocator does not ask.
    """
    from onnxscript.rewriter.rules.common import _fuse_batchnorm

    def torch_allocated(base: type) -> type:
        class TorchAllocated(base):
            def _scale_weights(self, weights, scale_factor, attributes):
                axis = self.get_filters_axis(attributes)
                scale = _fuse_batchnorm._reshape_for_broadcast(scale_factor, weights.ndim, axis)
                out = _torch_array(weights.shape, np.result_type(weights, scale))
                if out is None:
                    return super()._scale_weights(weights, scale_factor, attributes)
                return np.multiply(weights, scale, out=out)

        return TorchAllocated

    return {
        id(rule): torch_allocated(base).rule(name=base.__name__)
        for rule, base in (
            (_fuse_batchnorm.fuse_batchnorm_into_conv_rule, _fuse_batchnorm.FuseBatchNormIntoConv),
            (_fuse_batchnorm.fuse_batchnorm_into_gemm_rule, _fuse_batchnorm.FuseBatchNormIntoGemm),
        )
    }


def _torch_array(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray | None:
    """An uninitialized numpy array of ``shape`` and ``dtype`` in memory torch allocated (the
    array keeps the tensor alive); None for a dtype torch has no counterpart of."""
    import torch

    try:
        torch_dtype = torch.from_numpy(np.empty(0, dtype)).dtype
    except TypeError:
        return None
    return torch.empty(shape, dtype=torch_dtype).numpy()


class _FoldRewriteAgainIfRewritten(ir.passes.InPlacePass):
    """Constant folding, the rewrite rules and the clean-ups after them, twice, as
    onnxscript's optimizer runs them, except that the second round runs only when the first
    round's rewrite changed the graph.

    The folder visits the nodes in order and folds what it can in one sweep: run again on
    what it made, it finds nothing more (over the zoo, a second round found something only
    after a rewrite: t5's). The rewrite, in turn, sees every node after the folding; without
    a rewrite there is nothing new for either of them. (onnxscript's pass manager ran the
    second round whenever any pass had changed anything, the folding or a clean-up too.)
    """

    def __init__(self, fold, rewrite, cleanups, steps: int = 2) -> None:
        super().__init__()
        self.fold, self.rewrite, self.cleanups, self.steps = fold, rewrite, cleanups, steps

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for _ in range(self.steps):
            results = [self.fold(model), rewritten := self.rewrite(model)]
            results += [cleanup(model) for cleanup in self.cleanups]
            modified |= any(result.modified for result in results)
            if not rewritten.modified:
                break
        return ir.passes.PassResult(model, modified)


@functools.cache
def _known_shapes_first() -> type:
    """onnxscript's constant folder, which infers no shape for a node whose outputs all have
    a dtype and a shape of fixed dims already (as the translation gives every value from the
    FX graph's meta, unless the export keeps dims unknown).

    The folder runs ONNX shape inference on every node (serializing the node, its inputs'
    types and small constants to protos, and back) to merge what it infers into the outputs'
    shapes, preferring the dims they have: a fixed dim stays as it is, so for such a node
    inference changes nothing, and it was most of the folder's time (ssdlite: 0.6 of 1.0 s).
    A node with any unknown or symbolic output dim, or no dtype, is inferred as before.

    Where ONNX's answer is plain arithmetic on fixed input shapes (an elementwise op, a
    broadcast, a Transpose, a Cast, a MatMul: :func:`_infer_simply`), the folder merges that
    answer without the round trip through protos; the nodes translations add without a
    shape (the Sigmoid of every SiLU, the Transposes of attention) cost t5 ~12 ms an export
    that way. Anything ONNX would answer otherwise or refuse (a dtype outside what every
    opset's schema allows, dims that do not broadcast, an attribute it does not know) goes
    to ONNX as before.

    A folded array within the size limit becomes ``ir.Tensor(array)``, the tensor onnx_ir's
    ``ir.tensor`` makes of a numpy array, without its way there: ``ir.tensor`` first asks
    whether the array is an ``ir.TensorProtocol``, and on Python 3.11 an ``isinstance``
    against a protocol with data members walks the protocol's attributes on every call
    (~25 us; t5 folds ~150 arrays an export). A larger array, or anything else, goes
    through the folder's own step, which also weighs its size.
    """
    from onnxscript.optimizer import _constant_folding

    class KnownShapesFirst(_constant_folding.FoldConstantsPass):
        def _do_inference(self, node: ir.Node) -> None:
            if all(_fixed(value) for value in node.outputs):
                return
            simple = self._opset_imports.get("", 0) >= _SIMPLE_FROM
            inferred = _infer_simply(node) if simple else None
            output = node.outputs[0]
            if inferred is None or (
                output.shape is not None
                and inferred[1] is not None
                and len(output.shape) != len(inferred[1])
            ):  # (ONNX's answer of another rank fails to merge; the folder logs that)
                super()._do_inference(node)
                return
            dtype, dims = inferred
            if dims is not None:  # None: the dtype alone, as ONNX answers an unknown shape
                shape = ir.Shape(dims, denotations=[None] * len(dims), frozen=True)
                output.shape = _constant_folding._merge_shapes(output.shape, shape)
            output.type = ir.TensorType(dtype)

        def process_node(self, node: ir.Node, is_function: bool):
            # A tracked opset (exporter._translation_reuse): the folder picks how to infer
            # and evaluate a node by its op's schema at the opset (onnx's reference
            # implementations, one per schema version); that schema is what is noted, and
            # the folder reads the plain number.
            imports = self._opset_imports
            version = imports.get(node.domain)
            if not isinstance(version, _translation_reuse.TrackedOpset):
                return super().process_node(node, is_function)
            with contextlib.suppress(Exception):
                onnx.defs.get_schema(node.op_type, version, node.domain)
            self._opset_imports = {d: _translation_reuse.plain(v) for d, v in imports.items()}
            try:
                return super().process_node(node, is_function)
            finally:
                self._opset_imports = imports

        def _prepare_folded_tensor(self, node, output_name, output_array):
            if type(output_array) is not np.ndarray or output_array.size > self.output_size_limit:
                return super()._prepare_folded_tensor(node, output_name, output_array)
            tensor = ir.Tensor(output_array)
            tensor.name = output_name
            return tensor

    return KnownShapesFirst


_FLOATS = frozenset((ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.DOUBLE))
_NUMBERS = _FLOATS | {ir.DataType.INT32, ir.DataType.INT64}
#: The first opset whose schemas :func:`_infer_simply` follows.
_SIMPLE_FROM = 13
#: Types every opset from 13 on allows for Transpose, Cast and Where's branches (Where
#: without bfloat16, which it takes from opset 16 on).
_PLAIN = _NUMBERS | {
    ir.DataType.BFLOAT16,
    ir.DataType.INT8,
    ir.DataType.INT16,
    ir.DataType.UINT8,
    ir.DataType.UINT16,
    ir.DataType.UINT32,
    ir.DataType.UINT64,
    ir.DataType.BOOL,
}
#: Per op, (the dtypes its inputs may have, all alike; the output's dtype, None for the
#: first input's), for ops whose output has the broadcast shape of their inputs.
_UNARY = {
    **dict.fromkeys(
        ("Sigmoid", "Sqrt", "Relu", "Neg", "Abs", "Exp", "Log", "Tanh", "Erf", "Reciprocal"),
        (_FLOATS, None),
    ),
    **dict.fromkeys(("Sin", "Cos", "Softmax", "Floor", "Ceil"), (_FLOATS, None)),
    "Not": (frozenset({ir.DataType.BOOL}), None),
    "IsNaN": (_FLOATS, ir.DataType.BOOL),
    "IsInf": (frozenset({ir.DataType.FLOAT, ir.DataType.DOUBLE}), ir.DataType.BOOL),
    "Identity": (_PLAIN, None),
}
_BINARY = {
    **dict.fromkeys(("Add", "Sub", "Mul", "Div", "Pow"), (_NUMBERS, None)),
    "Equal": (_NUMBERS | {ir.DataType.BOOL}, ir.DataType.BOOL),
    # (not LessOrEqual and GreaterOrEqual: ONNX infers no shape for them at opset 13)
    **dict.fromkeys(("Less", "Greater"), (_NUMBERS, ir.DataType.BOOL)),
    **dict.fromkeys(("And", "Or"), (frozenset({ir.DataType.BOOL}), ir.DataType.BOOL)),
}
#: Ops of any number of inputs (from one), broadcast like the binary ones.
_VARIADIC = {**dict.fromkeys(("Min", "Max"), (_NUMBERS, None))}


def _infer_simply(node: ir.Node) -> tuple[ir.DataType, list | None] | None:
    """The dtype and dims ONNX shape inference gives the one output of ``node``, where that
    is plain arithmetic on its inputs' shapes; None where ONNX is to be asked (it could
    answer otherwise, or refuse). Asked only of the ops, dtypes and attributes ONNX accepts
    at every opset from 13 on, with named inputs and output (ONNX's inference reads them by
    name). Symbolic dims (a dynamic export's) are answered where ONNX copies them: an
    elementwise op, Cast or Transpose of one input, and a broadcast whose axis holds one
    named symbol beside 1s; any other mix of symbols and sizes is ONNX's to answer."""
    if node.domain != "" or len(node.outputs) != 1 or not node.outputs[0].name:
        return None
    inputs = node.inputs
    names = {}
    for value in inputs:
        if value is None or not value.name or names.setdefault(value.name, value) is not value:
            return None
        if value.type is None or not isinstance(value.type, ir.TensorType):
            return None
    if node.outputs[0].name in names:
        return None
    op, attributes = node.op_type, node.attributes
    dtypes = [value.dtype for value in inputs]
    shapes = [None if value.shape is None else list(value.shape) for value in inputs]
    if any(shape is None for shape in shapes):
        # An input of unknown rank (a Loop body's): ONNX gives elementwise ops, Where and
        # Cast their dtype alone.
        return _dtype_alone(op, attributes, dtypes)
    if op in _UNARY or op in _BINARY or op in _VARIADIC:
        return _elementwise(op, attributes, dtypes, shapes)
    if op == "Where":
        dtype = _where_dtype(attributes, dtypes)
        dims = None if dtype is None else _broadcast(shapes)
        return None if dims is None else (dtype, dims)
    if op == "Transpose":
        perm = attributes.get("perm")
        if len(inputs) != 1 or set(attributes) - {"perm"} or dtypes[0] not in _PLAIN:
            return None
        rank = len(shapes[0])
        if perm is None:
            order = list(reversed(range(rank)))
        elif perm.type == ir.AttributeType.INTS and sorted(perm.value) == list(range(rank)):
            order = list(perm.value)
        else:
            return None
        return dtypes[0], [shapes[0][i] for i in order]
    if op == "Cast":
        to = attributes.get("to")
        if len(inputs) != 1 or set(attributes) != {"to"} or to.type != ir.AttributeType.INT:
            return None
        if dtypes[0] not in _PLAIN or to.value not in {int(t) for t in _PLAIN}:
            return None
        return ir.DataType(to.value), shapes[0]
    if op == "MatMul":
        if len(inputs) != 2 or attributes or dtypes[0] not in _FLOATS or dtypes[0] != dtypes[1]:
            return None
        a, b = shapes
        if not all(isinstance(d, int) for d in (*a, *b)):
            return None
        if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
            return None
        batch = _broadcast([a[:-2], b[:-2]])
        return None if batch is None else (dtypes[0], [*batch, a[-2], b[-1]])
    return None


def _elementwise_dtype(op: str, dtypes: list) -> ir.DataType | None:
    """The output dtype of a ``_UNARY``, ``_BINARY`` or ``_VARIADIC`` op on inputs of
    ``dtypes``; None where their count or dtypes are not what :func:`_infer_simply` answers."""
    allowed, result = _UNARY.get(op) or _BINARY.get(op) or _VARIADIC[op]
    arity = 1 if op in _UNARY else 2 if op in _BINARY else len(dtypes)
    if not dtypes or len(dtypes) != arity:
        return None
    if dtypes[0] not in allowed or len(set(dtypes)) != 1:
        return None
    return result or dtypes[0]


def _where_dtype(attributes, dtypes: list) -> ir.DataType | None:
    """Where's output dtype, where :func:`_infer_simply` answers for it."""
    if len(dtypes) != 3 or attributes or dtypes[0] != ir.DataType.BOOL:
        return None
    if dtypes[1] != dtypes[2] or dtypes[1] not in _PLAIN - {ir.DataType.BFLOAT16}:
        return None
    return dtypes[1]


def _elementwise(op: str, attributes, dtypes: list, shapes: list[list]):
    """:func:`_infer_simply` for ``_UNARY``, ``_BINARY`` and ``_VARIADIC`` ops."""
    result = _elementwise_dtype(op, dtypes)
    if result is None:
        return None
    if op == "Softmax":
        axis = attributes.get("axis")
        rank = len(shapes[0])
        if set(attributes) - {"axis"} or rank == 0:
            return None
        if axis is not None and (
            axis.type != ir.AttributeType.INT or not -rank <= axis.value < rank
        ):
            return None
    elif attributes:
        return None
    dims = _broadcast(shapes)
    return None if dims is None else (result, dims)


def _dtype_alone(op: str, attributes, dtypes: list) -> tuple[ir.DataType, None] | None:
    """:func:`_infer_simply`'s answer where some input's shape is unknown: the output's
    dtype and no shape, for the ops whose ONNX inference then sets the dtype alone."""
    if op in _UNARY or op in _BINARY or op in _VARIADIC:
        dtype = None if op == "Softmax" or attributes else _elementwise_dtype(op, dtypes)
    else:
        dtype = _where_dtype(attributes, dtypes) if op == "Where" else None
    return None if dtype is None else (dtype, None)


def _broadcast(shapes: list[list]) -> list | None:
    """numpy's (ONNX's multidirectional) broadcast of ``shapes``; None when two dims of an
    axis differ and neither is 1, and where an axis mixes a symbol with anything but 1s or
    the same named symbol (ONNX has rules of its own there). One shape is its own answer,
    unknown dims included."""
    if len(shapes) == 1:
        return list(shapes[0])
    rank = max(len(shape) for shape in shapes)
    dims = []
    for axis in range(-rank, 0):
        sizes = {shape[axis] for shape in shapes if len(shape) >= -axis}
        if len(sizes) > 1:
            sizes.discard(1)
        if len(sizes) > 1:
            return None
        size = sizes.pop()
        if not isinstance(size, int) and size.value is None:
            return None  # an unknown dim: ONNX's to merge with the others
        dims.append(size)
    return dims


def fold_constants(model: ir.Model) -> None:
    """onnxscript's ``fold_constants`` with its defaults (no ONNX shape inference, the
    default size limits, its own choice of what to fold), through
    :func:`_known_shapes_first`'s folder: without shape inference that folder is
    onnxscript's, but for the way a folded array becomes a tensor."""
    from onnxscript.optimizer import _constant_folding

    _known_shapes_first()(
        shape_inference=False,
        input_size_limit=_constant_folding.DEFAULT_CONSTANT_FOLD_INPUT_SIZE_LIMIT,
        output_size_limit=_constant_folding.DEFAULT_CONSTANT_FOLD_OUTPUT_SIZE_LIMIT,
    )(model)


def _fixed(value: ir.Value) -> bool:
    """Whether ``value`` has a dtype and a shape whose every dim is a fixed size."""
    shape = value.shape
    return (
        value.type is not None and shape is not None and all(isinstance(dim, int) for dim in shape)
    )


def rule_set(rules: Iterable, *, commute: bool = False):
    """An onnxscript ``RewriteRuleSet`` of ``rules`` (commuted first when ``commute``), each
    made to cost what the graph costs (:func:`local_rules`), and skipped as a whole when the
    graph holds no node of an op type that any of its rules starts from.

    A rule matches only at a node of its pattern's first output node's op type and domain;
    when the graph has none for any rule of the set, nothing can match, and nothing the set
    would rewrite can make one: skipping the set (its walk over the graph, its constant
    propagation) changes nothing. Unused nodes are still removed when onnxscript's set would
    have removed them.
    """
    return _local_rule_set_class()(rules, commute=commute)


@functools.cache
def _local_rule_set_class() -> type:
    import itertools

    import onnxscript.optimizer
    from onnxscript.rewriter import pattern

    class LocalRuleSet(pattern.RewriteRuleSet):
        def __init__(self, rules: Iterable, *, commute: bool = False) -> None:
            if commute:
                rules = itertools.chain.from_iterable(rule.commute() for rule in rules)
            super().__init__(local_rules(rules))
            self.triggers = _triggers(self.rules)
            self.needs = [_needs(rule) for rule in self.rules]
            self.by_op_type = _RulesByOpType(self.rules)

        def may_change(self, model: ir.Model) -> bool:
            """Whether applying the set could change ``model``: some rule's needed op types
            are all in it (a rule's trigger is among them), or its clean-up removes something."""
            present = _op_types(model)
            return any(need <= present for need in self.needs) or (
                self.remove_unused_nodes and may_remove_unused(model)
            )

        def apply_to_model(self, model: ir.Model, *, verbose=None, tracer=None) -> int:
            if (
                tracer is None
                and self.triggers is not None
                and not _holds_any(model, self.triggers)
            ):
                if self.remove_unused_nodes:
                    onnxscript.optimizer.remove_unused_nodes(model)
                return 0
            try:
                return super().apply_to_model(model, verbose=verbose, tracer=tracer)
            finally:
                _forget_matches(self.rules)

        def _apply_to_graph_or_function(self, model, graph_or_function, *, verbose, tracer=None):
            if tracer is not None:
                return super()._apply_to_graph_or_function(
                    model, graph_or_function, verbose=verbose, tracer=tracer
                )
            rules, self.rules = self.rules, [self.by_op_type]
            try:
                return super()._apply_to_graph_or_function(
                    model, graph_or_function, verbose=verbose, tracer=tracer
                )
            finally:
                self.rules = rules

    return LocalRuleSet


def _forget_matches(rules: Iterable) -> None:
    """Drop what the rules' matchers keep of their last match: onnxscript's matcher keeps
    the graph, the node and the match result it last looked at (each match starts afresh,
    so nothing reads them later). A rule set built once (the fusions', the optimizer's
    defaults) would keep the model last exported alive through them, weights included,
    until the next export's matches: the next export's new weights (efficientnet_b0's
    BatchNormalization folding writes all 21 MB of them) then land in memory never
    touched before instead of the freed memory, at ~35 ms of page faults."""
    for rule in rules:
        matcher = getattr(rule, "_matcher", None)
        if matcher is not None:
            matcher._match = matcher._graph = matcher._current_node = None


class _RulesByOpType:
    """The rules of a set as one rule that, at each node, tries only the rules that can
    match there, in the set's order: those whose pattern starts at the node's op type and
    domain (:func:`local_rules` made them answer None at once at any other node), and those
    whose start is not known in advance.

    onnxscript's rule set asks every rule about every node; over the zoo most of the rewrite's
    time went to rules answering None for a node of another op type. The set applies a match
    as the rule that made it says (its name, whether it removes the matched nodes, whether
    it makes a function), so this one takes on those of the rule that matched before it
    returns the match. A rewrite adding initializers inside a function is skipped by the set
    and the node's next rule tried: this one tries that next rule itself. Used without a
    tracer only (with one, the set asks every rule, as it records each miss)."""

    def __init__(self, rules: list) -> None:
        self.rules = rules
        self.name, self.remove_nodes, self.as_function = None, True, False
        starts = [_start(rule) for rule in rules]
        self._anywhere = [rule for rule, start in zip(rules, starts) if start is None]
        self._by_start: dict = {}
        for start in set(starts) - {None}:
            self._by_start[start] = [
                rule for rule, other in zip(rules, starts) if other in (start, None)
            ]
        pre = [rule.graph_pre_visitor for rule in rules if rule.graph_pre_visitor]
        post = [rule.graph_post_visitor for rule in rules if rule.graph_post_visitor]
        self.graph_pre_visitor = (lambda: [visit() for visit in pre]) if pre else None
        self.graph_post_visitor = (lambda: [visit() for visit in post]) if post else None

    def try_rewrite(self, model, graph_or_function, node, *, verbose=None, tracer=None):
        rules = self._by_start.get((node.op_type, node.domain), self._anywhere)
        for rule in rules:
            delta = rule.try_rewrite(model, graph_or_function, node, verbose=verbose)
            if delta is None:
                continue
            if delta.new_initializers and isinstance(graph_or_function, ir.Function):
                if verbose:
                    print(f"Rewrites adding initializers not supported for functions: {rule}")
                continue
            self.name = rule.name
            self.remove_nodes, self.as_function = rule.remove_nodes, rule.as_function
            return delta
        return None


def _start(rule) -> tuple[str, str] | None:
    """The (op type, domain) of the nodes a match of ``rule`` can start at, when
    :func:`local_rules` made it answer None at once at every other node; else None."""
    if "try_rewrite" not in vars(rule):
        return None
    op, domain = (_constant(p) for p in _first_node(rule))
    return None if op is None or domain is None else (op, domain)


def may_remove_unused(model: ir.Model) -> bool:
    """Whether onnx_ir's RemoveUnusedNodesPass could change ``model``: some node output that
    nothing reads (a node it removes, or an optional output it drops), a trailing empty input,
    or an initializer nothing reads. False means the pass changes nothing."""
    graph = model.graph
    if any(
        not (init.uses() or init.is_graph_input() or init.is_graph_output())
        for init in graph.initializers.values()
    ):
        return True
    opset = model.opset_imports.get("")
    opset = None if opset is None else _translation_reuse.plain(opset)
    outputs: dict[int, frozenset] = {}
    for graph_like, node in walk_nodes(model):
        if (node.inputs and node.inputs[-1] is None) or (
            node.outputs and not node.outputs[-1].name
        ):
            return True
        graph_outputs = outputs.get(id(graph_like))
        if graph_outputs is None:
            graph_outputs = outputs[id(graph_like)] = frozenset(graph_like.outputs)
        unused = [
            i
            for i, output in enumerate(node.outputs)
            if output.name and output not in graph_outputs and not output.uses()
        ]
        if unused and (len(unused) == len(node.outputs) or _drops(node, unused, opset)):
            return True
    return False


def _drops(node: ir.Node, unused: list[int], opset: int | None) -> bool:
    """Whether the removal of unused optional outputs could drop one of ``unused`` (outputs
    of ``node`` nothing reads): one its schema makes optional, or an op whose schema cannot
    be read here."""
    if node.domain not in ("", "onnx.ai"):
        return False
    if opset is None or node.op_type == "BatchNormalization":
        return True
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, node.domain)
    except onnx.defs.SchemaError:
        return True
    formal = schema.outputs
    optional = onnx.defs.OpSchema.FormalParameterOption.Optional
    return any(i < len(formal) and formal[i].option == optional for i in unused)


def _holds_any(model: ir.Model, op_types: frozenset[tuple[str, str]]) -> bool:
    """Whether a node of the model, its subgraphs or functions is of one of ``op_types``
    ((domain, op type) pairs); stops at the first one."""
    return any((node.domain, node.op_type) in op_types for _, node in walk_nodes(model))


def _first_node(rule):
    """The op type and domain patterns of the first output node of ``rule``'s pattern."""
    first = rule._matcher.pattern.output_nodes[0]
    return first.op, first.domain


def _constant(string_pattern) -> str | None:
    from onnxscript.rewriter import _pattern_ir

    if isinstance(string_pattern, _pattern_ir.StringConstantPattern):
        return string_pattern.value()
    return None


def _needs(rule) -> frozenset[tuple[str, str]]:
    """The (domain, op type) pairs a graph must hold for ``rule`` to match: those of the
    pattern's nodes that produce a value another of its nodes takes (and its output nodes),
    where the pattern names them."""
    from onnxscript.rewriter._pattern_ir import NodeOutputPattern

    needed, pending, seen = set(), list(rule._matcher.pattern.output_nodes), set()
    while pending:
        node = pending.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node._op_identifier is not None:
            needed.add(node._op_identifier[:2])
        pending += [v.producer() for v in node.inputs if isinstance(v, NodeOutputPattern)]
    return frozenset(needed)


def _op_types(model: ir.Model) -> frozenset[tuple[str, str]]:
    """The (domain, op type) pairs of the nodes of the model, its subgraphs and functions."""
    return frozenset((node.domain, node.op_type) for _, node in walk_nodes(model))


def walk_nodes(model: ir.Model) -> Iterator[tuple[ir.Graph | ir.Function, ir.Node]]:
    """Every node of the model, its functions and subgraphs, with the graph it is in. (A walk
    over the graphs' node lists: onnx_ir's RecursiveGraphIterator, a generator per node, cost
    more than the questions asked of it.)"""
    graphs = [model.graph, *model.functions.values()]
    while graphs:
        graph_like = graphs.pop()
        for node in graph_like:
            yield graph_like, node
            for attr in node.attributes.values():
                if not isinstance(attr, ir.Attr):
                    continue
                if attr.type == ir.AttributeType.GRAPH:
                    graphs.append(attr.value)
                elif attr.type == ir.AttributeType.GRAPHS:
                    graphs.extend(attr.value)


def _triggers(rules: Iterable) -> frozenset[tuple[str, str]] | None:
    """The (domain, op type) pairs a match of any of ``rules`` starts at; None when some
    rule's pattern starts at op types not known in advance."""
    found = set()
    for rule in rules:
        op, domain = (_constant(p) for p in _first_node(rule))
        if op is None or domain is None:
            return None
        found.add((domain, op))
    return frozenset(found)


def local_rules(rules: Iterable) -> list:
    """``rules`` (onnxscript rewrite rules) made to ask first whether the node is of the op
    type and domain of the pattern's first output node: the same matches, at a cost that
    follows the graph.

    onnxscript's rule set asks every rule about every node. Its matcher, for a pattern of
    several output nodes (its SlicesSplit), lists every node of the graph by op type for
    every node it is asked about, before it looks at the node itself: that rule alone cost
    nodes squared (1,024 Linear+GELU blocks: 9.4 million node visits, most of the optimize
    stage). For every pattern, a node of another op type is a miss: the matcher's first
    check on the node is that op type and domain, so asking it first changes no match. Each
    rule gets that check twice: in its matcher (a match asked for directly) and before its
    ``try_rewrite`` (what the rule set calls for every node and rule), which then answers a
    miss without building a match state, a result and its failure message.
    """
    matcher_class = _first_output_node_first()
    local = []
    for rule in rules:
        matcher = getattr(rule, "_matcher", None)
        if type(matcher) in (matcher_class, matcher_class.__base__):
            rule = copy.copy(rule)
            rule._matcher = matcher_class(matcher.pattern)
            rule.try_rewrite = _op_type_first(rule)
        local.append(rule)
    return local


def _op_type_first(rule):
    """``rule.try_rewrite``, answering None at once for a node the pattern cannot match at:
    another op type or domain than its first output node's, or (for a pattern of one output
    node) a node whose producers, a few steps up, are not of the op types the pattern's are
    (:func:`_producer_checks`). With a tracer, onnxscript's own, which records the miss."""
    rewrite = type(rule).try_rewrite.__get__(rule)
    op_pattern, domain_pattern = _first_node(rule)
    op, domain = _constant(op_pattern), _constant(domain_pattern)
    pattern = rule._matcher.pattern
    checks = _producer_checks(pattern.output_nodes[0]) if pattern.has_single_output_node else ()
    if op is not None and domain is not None:

        def try_rewrite(model, graph_or_function, node, *, verbose=None, tracer=None):
            if tracer is None and (
                node.op_type != op or node.domain != domain or not _producers_hold(node, checks)
            ):
                return None
            return rewrite(model, graph_or_function, node, verbose=verbose, tracer=tracer)

    else:

        def try_rewrite(model, graph_or_function, node, *, verbose=None, tracer=None):
            if tracer is None and not (
                op_pattern.matches(node.op_type) and domain_pattern.matches(node.domain)
            ):
                return None
            return rewrite(model, graph_or_function, node, verbose=verbose, tracer=tracer)

    return try_rewrite


#: How many producer steps up from the node :func:`_producer_checks` looks.
_PRODUCER_DEPTH = 3


def _producer_checks(node_pattern, depth: int = _PRODUCER_DEPTH) -> tuple:
    """What onnxscript's matcher requires of a node's producers before it can match
    ``node_pattern`` there, as (path, op types): following ``path`` (per step, the input's
    index and the index of the producer's output it is) from the node reaches a producer
    whose (domain, op type) is one of ``op types``. Only the pattern's inputs that are a
    node's output of a fixed op type count (the matcher fails on anything else there: no
    producer, another output, another op type), and the alternatives (``OrValue``) whose
    every choice is one: the matcher tries each choice, and each fails at a producer of an
    op type none of them has. A pattern input that is a constant (onnxscript's ``Constant``,
    the 1 of ``x * 1``) is a check whose last step has no output index and whose op types are
    None: the input there must be a value with a constant value (the matcher fails on a
    missing input or one without). Variables and alternatives with a variable among them ask
    nothing here; the steps go on up only through a choice-free input.

    Patterns are commuted into a rule per order of the inputs, and a model has many nodes of
    the op types the rules start from (Mul, Add): these checks turn away most of them without
    building a match. (The alternatives matter for the RMSNorm rules, whose last Mul takes a
    Cast or a Mul, where efficientnet's SiLU Muls take a Sigmoid; the constants for
    onnxscript's ``x * 1``, ``x + 0`` rules, asked about every Mul and Add.)
    """
    from onnxscript.rewriter import _pattern_ir

    checks = []

    def visit(pattern, path, left):
        for index, value in enumerate(pattern.inputs):
            if isinstance(value, _pattern_ir.Constant):
                checks.append(((*path, (index, None)), None))
                continue
            choices = _choices(value)
            if choices is None:
                continue
            ops = frozenset(
                (_constant(choice.producer().domain), _constant(choice.producer().op))
                for choice in choices
            )
            output_indices = {choice.output_index for choice in choices}
            if any(None in op for op in ops) or len(output_indices) != 1:
                continue
            step = (*path, (index, output_indices.pop()))
            checks.append((step, ops))
            if left > 1 and isinstance(value, _pattern_ir.NodeOutputPattern):
                visit(value.producer(), step, left - 1)

    visit(node_pattern, (), depth)
    return tuple(checks)


def _choices(value_pattern) -> list | None:
    """The node outputs a pattern input can match: itself when it is one, the choices of an
    alternative whose every choice is one; None for anything else."""
    from onnxscript.rewriter import _pattern_ir

    if isinstance(value_pattern, _pattern_ir.NodeOutputPattern):
        return [value_pattern]
    if isinstance(value_pattern, _pattern_ir.OpIdDispatchOr):
        return [choice for _, choice in value_pattern._op_to_pattern.values()]
    if isinstance(value_pattern, _pattern_ir.BacktrackingOr):
        choices = list(value_pattern._values)
        if all(isinstance(choice, _pattern_ir.NodeOutputPattern) for choice in choices):
            return choices
    return None


def _producers_hold(node: ir.Node, checks: tuple) -> bool:
    """Whether ``node``'s producers and constant inputs meet every one of
    :func:`_producer_checks`' ``checks``."""
    for path, ops in checks:
        current = node
        for index, output_index in path:
            inputs = current.inputs
            value = inputs[index] if index < len(inputs) else None
            if value is None:
                return False
            if output_index is None:  # a constant's step, the last
                break
            current = value.producer()
            if current is None or value.index() != output_index:
                return False
        if ops is None:
            if value.const_value is None:
                return False
        elif (current.domain, current.op_type) not in ops:
            return False
    return True


@functools.cache
def _first_output_node_first() -> type:
    from onnxscript.rewriter import _matcher, pattern

    class FirstOutputNodeFirst(_matcher.SimplePatternMatcher):
        def match(self, model, graph_or_function, node, **options):
            first = self.pattern.output_nodes[0]
            if not (first.op.matches(node.op_type) and first.domain.matches(node.domain)):
                return pattern.MatchResult().fail("op type or domain of another pattern")
            return super().match(model, graph_or_function, node, **options)

    return FirstOutputNodeFirst


_FOLDING_LOGGER = "onnxscript.optimizer._constant_folding"


class _FoldingMiss(logging.Filter):
    """Drops the constant folder's "Evaluation failed" warnings: onnx's reference kernel could
    not evaluate a node, so the node stays in the graph and onnxruntime computes it. The model
    is right, and a warning on every such export reads as if it were not; the message goes to
    the exporter's debug log instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not message.startswith("Evaluation failed"):
            return True
        logging.getLogger("exporter").debug("constant folding left a node unfolded: %s", message)
        return False


@contextlib.contextmanager
def _quiet_folding_misses() -> Iterator[None]:
    logger = logging.getLogger(_FOLDING_LOGGER)
    miss = _FoldingMiss()
    logger.addFilter(miss)
    try:
        yield
    finally:
        logger.removeFilter(miss)


#: Quantization nodes the constant folder must leave alone: a DequantizeLinear of an integer
#: weight folded into a float constant loses the int8 initializer onnxruntime fuses on
#: (QLinearConv, QGemm, MatMulNBits), and the model grows back to float size.
_QUANTIZATION_OPS = frozenset(("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"))


def _should_fold(node: ir.Node) -> bool | None:
    """The constant folder's per-node answer: never for Q/DQ, small fills yes, else its
    default."""
    if node.op_type in _QUANTIZATION_OPS and node.domain in ("", "ai.onnx"):
        return False
    return _fold_small_fills(node)


#: A fill of at most this many elements is folded into a constant.
_SMALL_FILL = 64


def _fold_small_fills(node: ir.Node) -> bool | None:
    """Fold a small ConstantOfShape of a constant shape (the optimizer keeps every fill, to
    keep models small): as a constant it folds on into what consumes it, such as the
    ``ones(()) & mask`` that transformers starts its attention masks with. None: the
    optimizer's default for every other node. Never a Dropout that reaches the folder (one in
    training mode): its mask is drawn afresh on every run (random.py seeds from it)."""
    if node.op_type == "Dropout" and node.domain in ("", "ai.onnx"):
        return False
    if node.op_type != "ConstantOfShape" or node.domain not in ("", "ai.onnx"):
        return None
    shape = ir.convenience.get_const_tensor(node.inputs[0]) if node.inputs else None
    fill = node.attributes.get("value")
    if shape is None or (fill is not None and fill.as_tensor().dtype in _dtypes.FLOAT8_TYPES):
        return None
    return int(np.prod(shape.numpy())) <= _SMALL_FILL or None


def widen_float8_fills(model: ir.Model) -> None:
    """onnxruntime cannot load a ConstantOfShape with a float8 fill: fill in float32, then
    Cast (the fill value is a float8 value, so the cast is exact)."""
    fills = [
        node
        for node in ir.traversal.RecursiveGraphIterator(model.graph)
        if node.op_type == "ConstantOfShape" and node.domain in ("", "ai.onnx")
    ]
    for node in fills:
        attr = node.attributes.get("value")
        if not attr:
            continue
        fill = attr.as_tensor()
        if fill.dtype not in _dtypes.FLOAT8_TYPES:
            continue
        wide = ir.tensor(np.asarray(fill.numpy(), dtype=np.float32))
        widened = ir.node("ConstantOfShape", inputs=list(node.inputs), attributes={"value": wide})
        cast = ir.node("Cast", inputs=widened.outputs, attributes={"to": fill.dtype})
        cast.outputs[0].dtype = fill.dtype
        cast.outputs[0].shape = node.outputs[0].shape
        ir.convenience.replace_nodes_and_values(
            node.graph, node, [node], [widened, cast], node.outputs, cast.outputs
        )


def strip_metadata(model: ir.Model) -> None:
    common.ClearMetadataAndDocStringPass()(model)
