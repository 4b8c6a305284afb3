"""Graph clean-up passes, all from onnx_ir and onnxscript."""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
from collections.abc import Iterable, Iterator

import numpy as np
import onnx_ir as ir
import onnx_ir.passes.common as common

from exporter import _dtypes


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
    the rewrites into the fused ops of the model's opset (exporter/_fusions.py).

    Model-local functions are kept (not inlined) when ``keep_functions`` is true; by default
    they are kept whenever the model has any, since someone asked for them.
    """
    # onnxscript (its optimizer and rewriter, ~1 s to import) loads with the first optimized
    # export, not with the exporter: an export with optimize=False never needs it.
    from exporter import _fusions

    if keep_functions is None:
        keep_functions = bool(model.functions)
    with _quiet_folding_misses():
        _onnxscript_optimizer(inline=not keep_functions)(model)
    # After folding, so that constant cos/sin tables and shapes are visible to the rules.
    _fusions.fuse(model)
    # The optimizer folds Cast(ConstantOfShape) into one ConstantOfShape again.
    widen_float8_fills(model)


def _onnxscript_optimizer(*, inline: bool) -> ir.passes.Sequential:
    """The passes of ``onnxscript.optimizer.optimize_ir``, in its order and with its defaults,
    but with its default rewrite rules made to cost what the graph costs (``local_rules``)."""
    from onnxscript import rewriter
    from onnxscript.optimizer import _constant_folding

    passes = [
        ir.passes.PassManager(
            [
                _constant_folding.FoldConstantsPass(
                    shape_inference=True,
                    input_size_limit=_constant_folding.DEFAULT_CONSTANT_FOLD_INPUT_SIZE_LIMIT,
                    output_size_limit=_constant_folding.DEFAULT_CONSTANT_FOLD_OUTPUT_SIZE_LIMIT,
                    should_fold=_should_fold,
                ),
                rewriter.RewritePass(local_rules(rewriter._DEFAULT_REWRITE_RULES)),
                common.RemoveUnusedNodesPass(),
                common.RemoveUnusedFunctionsPass(),
                common.RemoveUnusedOpsetsPass(),
            ],
            steps=2,
            early_stop=True,
        ),
        common.RemoveUnusedNodesPass(),
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


def local_rules(rules: Iterable) -> list:
    """``rules`` (onnxscript rewrite rules) with a matcher that first asks whether the node is
    of the op type and domain of the pattern's first output node: the same matches, at a cost
    that follows the graph.

    onnxscript's matcher, for a pattern of several output nodes (its SlicesSplit), lists every
    node of the graph by op type for every node it is asked about, before it looks at the
    node itself: that rule alone cost nodes squared (1,024 Linear+GELU blocks: 9.4 million
    node visits, most of the optimize stage). For every pattern, a node of another op type
    is a miss: the matcher's first check on the node is that op type and domain, so asking
    it first changes no match; it only skips building the match state for each of the rules
    (commuted variants included) on every node.
    """
    matcher_class = _first_output_node_first()
    local = []
    for rule in rules:
        matcher = getattr(rule, "_matcher", None)
        if type(matcher) is matcher_class.__base__:
            rule = copy.copy(rule)
            rule._matcher = matcher_class(matcher.pattern)
        local.append(rule)
    return local


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
    for node in list(ir.traversal.RecursiveGraphIterator(model.graph)):
        attr = node.attributes.get("value")
        if node.op_type != "ConstantOfShape" or node.domain not in ("", "ai.onnx") or not attr:
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
