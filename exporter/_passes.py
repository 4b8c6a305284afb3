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
