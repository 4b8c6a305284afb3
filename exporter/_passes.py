"""Graph clean-up passes, all from onnx_ir and onnxscript."""

from __future__ import annotations

import onnx_ir as ir
import onnx_ir.passes.common as common


def finalize(model: ir.Model) -> None:
    """Always-on structural fixes: outputs produced in-graph, unique names, no dead nodes."""
    ir.passes.Sequential(
        common.RemoveUnusedNodesPass(),
        common.OutputFixPass(),
        common.NameFixPass(),
    )(model)


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
    """onnxscript's optimizer: constant folding, rewrite rules, CSE, constant lifting.

    Model-local functions are kept (not inlined) when ``keep_functions`` is true; by default
    they are kept whenever the model has any, since someone asked for them.
    """
    import onnxscript.optimizer

    if keep_functions is None:
        keep_functions = bool(model.functions)
    onnxscript.optimizer.optimize_ir(model, inline=not keep_functions)


def strip_metadata(model: ir.Model) -> None:
    common.ClearMetadataAndDocStringPass()(model)
