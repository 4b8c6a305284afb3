"""Runs custom translations written with onnxscript (opset builders or @onnxscript.script).

``op.Add(x, y)`` in user code calls onnxscript's current evaluator; we install one that records
nodes into the graph being built. An ``OnnxFunction`` stays a model-local ONNX function: the
call becomes one node in the function's domain and its body is added to ``model.functions``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import onnx_ir as ir
import torch

if TYPE_CHECKING:
    from torch_onnx_conformance.exporter._translate import Translator
    from torch_onnx_conformance.exporter.ops._context import TranslationContext
    from torch_onnx_conformance.exporter.ops._registry import Translation


class _RecordingEvaluator:
    """onnxscript Evaluator protocol (eval_op / eval_function) that emits onnx_ir nodes."""

    def __init__(self, ctx: TranslationContext, translator: Translator) -> None:
        self.ctx = ctx
        self.translator = translator

    def _input(self, x: Any, op_name: str) -> ir.Value | None:
        if x is None or isinstance(x, ir.Value):
            return x
        if isinstance(x, bool):
            return self.ctx.const(x, torch.bool)
        if isinstance(x, int):
            return self.ctx.const(x, torch.int64)
        if isinstance(x, float):
            return self.ctx.const(x, torch.float32)
        if isinstance(x, (list, tuple)) and all(isinstance(i, int) for i in x):
            return self.ctx.const(list(x), torch.int64)
        if isinstance(x, (list, tuple)) and all(isinstance(i, float) for i in x):
            return self.ctx.const(list(x), torch.float32)
        return self.ctx.const(x)

    def eval_op(self, op: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        schema = op.op_schema
        domain = op.opset.domain
        version = op.opset.version
        inputs = list(args)
        attributes = {}
        input_names = [p.name for p in schema.inputs] if schema is not None else []
        for key, value in kwargs.items():
            if key in input_names:
                index = input_names.index(key)
                while len(inputs) <= index:
                    inputs.append(None)
                inputs[index] = value
            else:
                attributes[key] = value
        n_out = _output_count(schema, op.name, inputs, attributes)
        ir_inputs = [self._input(x, op.name) for x in inputs]
        if domain not in ("", "ai.onnx"):
            self.ctx.scope.use_domain(domain, version or 1)
        result = self.ctx.make_node(
            op.name,
            ir_inputs,
            attributes,
            num_outputs=n_out,
            domain="" if domain == "ai.onnx" else domain,
            version=version if domain not in ("", "ai.onnx") else None,
        )
        return result

    def eval_function(self, function: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        return call_onnx_function(self.ctx, self.translator, function, args, kwargs)


def _output_count(schema: Any, op_name: str, inputs: list[Any], attributes: dict) -> int:
    """How many outputs a call makes: the schema's count, with a variadic tail sized by the call.

    A variadic output (Split's pieces, Loop's and Scan's results) has one entry in the schema
    but as many values as the call asks for, and user code indexes them (``op.Split(...)[i]``).
    """
    if schema is None:
        return 1
    fixed = len(schema.outputs)
    if not schema.outputs or schema.outputs[-1].option.name != "Variadic":
        return fixed
    fixed -= 1
    if attributes.get("num_outputs") is not None:
        return fixed + int(attributes["num_outputs"])
    if op_name == "Split" and len(inputs) > 1 and inputs[1] is not None:
        return fixed + _static_length(inputs[1], op_name)
    body = attributes.get("body")
    if body is not None and op_name in ("Loop", "Scan"):
        graph_outputs = len(body.outputs) if isinstance(body, ir.Graph) else len(body.output)
        # Loop's body also returns the continue condition, which is no output of the node.
        return graph_outputs - 1 if op_name == "Loop" else graph_outputs
    raise TypeError(
        f"onnxscript call op.{op_name}(...) has a variadic output whose count this call does "
        f"not fix: pass num_outputs=N (or, for Split, a constant split sizes input)."
    )


def _static_length(value: Any, op_name: str) -> int:
    """The length of a 1-D sizes input given as a Python list, a tensor or a constant value."""
    if isinstance(value, (list, tuple)):
        return len(value)
    if isinstance(value, torch.Tensor):
        return int(value.numel())
    if isinstance(value, ir.Value):
        if value.const_value is not None:
            return int(value.const_value.size)
        producer = value.producer()
        if producer is not None and producer.op_type == "Constant":
            (attribute,) = producer.attributes.values()
            constant = attribute.value
            return len(constant) if isinstance(constant, Sequence) else int(constant.size)
        shape = value.shape
        if shape is not None and len(shape) == 1 and isinstance(shape[0], int):
            return shape[0]
    raise TypeError(
        f"onnxscript call op.{op_name}(...): the number of pieces is not known at export time "
        f"(split sizes of unknown length); pass num_outputs=N."
    )


def call_onnx_function(
    ctx: TranslationContext,
    translator: Translator,
    function: Any,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
) -> Any:
    """Emit one call node to an OnnxFunction and register its body as a model function."""
    import onnxscript

    if isinstance(function, onnxscript.values.TracedOnnxFunction):
        # trace_only functions are plain Python over ops: run them under our evaluator.
        return function.func(*args, **kwargs)
    proto = function.to_function_proto()
    ir_function = ir.serde.deserialize_function(proto)
    key = ir_function.identifier()
    # ONNX requires a function to import the model's default opset version; onnxscript stamps
    # the opset it was written against, and the ops it uses keep their meaning across 17-23.
    if "" in ir_function.opset_imports:
        ir_function.opset_imports[""] = translator.opset
    translator.functions.setdefault(key, ir_function)
    for domain, version in ir_function.opset_imports.items():
        if domain:
            ctx.scope.use_domain(domain, version)
    ctx.scope.use_domain(ir_function.domain, 1)
    input_names = [i.name for i in ir_function.inputs]
    attr_names = set(ir_function.attributes)
    inputs = list(args[: len(input_names)])
    attributes = {}
    for key_, value in kwargs.items():
        if key_ in attr_names:
            attributes[key_] = value
        elif key_ in input_names:
            index = input_names.index(key_)
            while len(inputs) <= index:
                inputs.append(None)
            inputs[index] = value
    for extra, value in zip(list(ir_function.attributes), args[len(input_names) :]):
        attributes[extra] = value
    evaluator = _RecordingEvaluator(ctx, translator)
    ir_inputs = [evaluator._input(x, ir_function.name) for x in inputs]
    # The output count comes from the function body, never from Python annotations.
    n_out = len(ir_function.outputs)
    return ctx.make_node(
        ir_function.name,
        ir_inputs,
        attributes,
        num_outputs=n_out,
        domain=ir_function.domain,
        version=None,
    )


def call_onnxscript_translation(
    ctx: TranslationContext,
    translation: Translation,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    translator: Translator,
) -> Any:
    """Call a custom translation written against onnxscript's API."""
    import onnxscript
    from onnxscript import evaluator as ox_evaluator

    fn = translation.fn
    evaluator = _RecordingEvaluator(ctx, translator)
    with ox_evaluator.default_as(evaluator):
        if isinstance(fn, onnxscript.values.OnnxFunction):
            return call_onnx_function(ctx, translator, fn, args, kwargs)
        return fn(*args, **kwargs)
