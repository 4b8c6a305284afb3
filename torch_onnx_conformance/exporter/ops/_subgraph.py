"""Hand-built ONNX subgraphs: Loop and Scan bodies whose nodes come from a translation context.

Recurrences that ONNX has no single op for (a column-by-column elimination, a Jacobi sweep, a
sequential scan like torch's) run as an ONNX Loop or Scan whose body is written here by hand.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import onnx_ir as ir
import torch

from torch_onnx_conformance.exporter import _dtypes

if TYPE_CHECKING:
    from torch_onnx_conformance.exporter.ops._context import TranslationContext

i64 = torch.int64


class Subgraph:
    """A hand-built ONNX subgraph (Loop or Scan body) whose nodes come from ``self.ctx.op``.

    Values of the enclosing graph can be used directly inside (ONNX scoping rules); every value
    made here gets a model-unique name when the body is finished, so nothing shadows.
    """

    def __init__(self, ctx: TranslationContext, name: str) -> None:
        from torch_onnx_conformance.exporter._translate import GraphScope
        from torch_onnx_conformance.exporter.ops._context import TranslationContext

        self._translator = ctx.scope.translator
        self.name = self._translator.fresh_name(name)
        self.graph = ir.Graph(inputs=[], outputs=[], nodes=[], name=self.name)
        self.ctx = TranslationContext(GraphScope(self._translator, self.graph, ctx.scope), None)

    def input(self, dtype: torch.dtype, shape: Sequence[Any] | None = None) -> ir.Value:
        value = ir.Value(
            name=self._translator.fresh_name(f"{self.name}_in"),
            type=ir.TensorType(_dtypes.to_ir(dtype)),
            shape=None
            if shape is None
            else ir.Shape([d if isinstance(d, int) else None for d in shape]),
        )
        self.graph.inputs.append(value)
        return value

    def finish(self, outputs: Sequence[ir.Value], dtypes: Sequence[torch.dtype]) -> ir.Graph:
        for out, dtype in zip(outputs, dtypes):
            out = self.ctx.cast(out, dtype)
            if out.producer() is None or out.graph is not self.graph or out in self.graph.inputs:
                out = self.ctx.op.Identity(out)
            self.graph.outputs.append(out)
        for node in self.graph:
            for value in node.outputs:
                if value.name is None or value.name.startswith("val_"):
                    value.name = self._translator.fresh_name(f"{self.name}_v")
        return self.graph


def scan_along(
    ctx: TranslationContext,
    xs: Sequence[ir.Value],
    axes: int | Sequence[int],
    states: Sequence[ir.Value],
    body: Callable[[Any, list[ir.Value], list[ir.Value]], tuple[list[ir.Value], list[ir.Value]]],
    state_dtypes: Sequence[torch.dtype],
    out_dtypes: Sequence[torch.dtype],
    name: str,
    out_axis: int | None = None,
) -> tuple[ir.Value, ...]:
    """An ONNX Scan over ``xs`` (each along its axis): a sequential recurrence, exact like torch's.

    ``body(sub_ctx, states, slices) -> (new_states, per_step_outputs)``; slices have their scan
    axis removed and the per-step outputs are stacked along ``out_axis`` (default: the first
    input's axis). Returns the final states followed by the stacked outputs.
    """
    axes = [axes] * len(xs) if isinstance(axes, int) else list(axes)
    out_axis = axes[0] if out_axis is None else out_axis
    sub = Subgraph(ctx, name)
    state_in = [sub.input(dt) for dt in state_dtypes]
    slices = [sub.input(ctx.dtype(x)) for x in xs]
    new_states, outs = body(sub.ctx, state_in, slices)
    graph = sub.finish([*new_states, *outs], [*state_dtypes, *out_dtypes])
    results = ctx.op.Scan(
        *states,
        *xs,
        body=graph,
        num_scan_inputs=len(xs),
        scan_input_axes=axes,
        scan_output_axes=[out_axis] * len(outs),
        _outputs=len(states) + len(outs),
    )
    results = results if isinstance(results, tuple) else (results,)
    for value, dtype in zip(results, [*state_dtypes, *out_dtypes]):
        value.dtype = _dtypes.to_ir(dtype)
    return results


def loop(
    ctx: TranslationContext,
    trip_count: ir.Value,
    states: Sequence[ir.Value],
    body: Callable[[Any, ir.Value, list[ir.Value]], list[ir.Value]],
    state_dtypes: Sequence[torch.dtype],
    name: str,
    condition: Callable[[Any, list[ir.Value]], ir.Value] | None = None,
) -> tuple[ir.Value, ...]:
    """An ONNX Loop of at most ``trip_count`` (0-d int64) iterations carrying ``states``.

    ``body(sub_ctx, iteration, states) -> new_states``; ``condition(sub_ctx, new_states)``
    (optional) gives a 0-d bool that ends the loop early when false. Returns the final states.
    """
    sub = Subgraph(ctx, name)
    iteration = sub.input(i64, [])
    cond_in = sub.input(torch.bool, [])
    state_in = [sub.input(dt) for dt in state_dtypes]
    new_states = body(sub.ctx, iteration, state_in)
    if condition is None:
        cond_out = sub.ctx.op.Identity(cond_in)
    else:
        cond_out = condition(sub.ctx, list(new_states))
    graph = sub.finish([cond_out, *new_states], [torch.bool, *state_dtypes])
    keep_going = None if condition is None else ctx.const(True, torch.bool)
    results = ctx.op.Loop(trip_count, keep_going, *states, body=graph, _outputs=len(states))
    results = results if isinstance(results, tuple) else (results,)
    for value, dtype in zip(results, state_dtypes):
        value.dtype = _dtypes.to_ir(dtype)
    return results
