"""Control flow: torch.cond -> If, while_loop -> Loop, scan -> Scan; the region torch.export
wraps a no_grad block in is translated in place."""

from __future__ import annotations

import onnx_ir as ir
import torch

from torch_onnx_conformance.exporter.ops._registry import translates

higher_order = torch.ops.higher_order


def _as_tuple(outputs) -> tuple:
    if isinstance(outputs, (list, tuple)):
        return tuple(outputs)
    return (outputs,)


@translates(higher_order.cond)
def cond(ctx, pred, true_graph, false_graph, operands):
    # Branches see the operands as outer-scope values; ONNX If branches take no inputs.
    then_branch = ctx.subgraph(true_graph, list(operands), "then_branch")
    else_branch = ctx.subgraph(false_graph, list(operands), "else_branch")
    n = len(then_branch.outputs)
    pred = (
        ctx.op.Reshape(ctx.cast(pred, torch.bool), ctx.const([], torch.int64))
        if (ctx.rank(pred) != 0)
        else ctx.cast(pred, torch.bool)
    )
    return _as_tuple(ctx.op.If(pred, then_branch=then_branch, else_branch=else_branch, _outputs=n))


@translates(higher_order.while_loop)
def while_loop(ctx, cond_graph, body_graph, carried_inputs, additional_inputs):
    # A Python number carried through the loop (torch.export keeps `0` as a literal) becomes a
    # 0-d tensor of the dtype its SymInt/SymFloat/SymBool results get.
    carried = [_scalar_carry(ctx, v) for v in carried_inputs]
    extra = list(additional_inputs)
    first = _as_tuple(ctx.inline(cond_graph, carried + extra))[0]
    keep_going = ctx.cast(first, torch.bool)

    body = ctx.child("loop_body")
    body.input(torch.empty((), dtype=torch.int64), "iteration")
    body.input(torch.empty((), dtype=torch.bool), "condition")
    state = [body.input(_carry_meta(ctx, v), f"{v.name}_state") for v in carried]
    updated = list(_as_tuple(body.inline(body_graph, state + extra)))
    again = body.cast(_as_tuple(body.inline(cond_graph, updated + extra))[0], torch.bool)
    graph = body.finish([again, *updated])
    # No trip count: the loop runs while the condition holds, as torch's while_loop does.
    return _as_tuple(ctx.op.Loop(None, keep_going, *carried, body=graph, _outputs=len(carried)))


def _scalar_carry(ctx, value):
    if isinstance(value, bool):
        return ctx.const(value, torch.bool)
    if isinstance(value, int):
        return ctx.const(value, torch.int64)
    if isinstance(value, float):
        return ctx.const(value, torch.float32)
    return value


def _carry_meta(ctx, value):
    meta = ctx.meta(value)
    return torch.empty((), dtype=ctx.dtype(value)) if meta is None else meta


@translates(higher_order.scan)
def scan(ctx, combine_graph, init, xs, additional_inputs):
    init, xs, extra = list(init), list(xs), list(additional_inputs)
    body = ctx.child("scan_body")
    state = [body.input(ctx.meta(v), f"{v.name}_state") for v in init]
    elements = []
    for x in xs:
        meta = ctx.meta(x)
        element_meta = meta[0] if isinstance(meta, torch.Tensor) and meta.dim() > 0 else meta
        elements.append(body.input(element_meta, f"{x.name}_element"))
    outputs = list(_as_tuple(body.inline(combine_graph, state + elements + extra)))
    graph = body.finish(outputs)
    n_out = len(outputs)
    return _as_tuple(ctx.op.Scan(*init, *xs, body=graph, num_scan_inputs=len(xs), _outputs=n_out))


@translates(higher_order.wrap_with_set_grad_enabled)
def wrap_with_set_grad_enabled(ctx, enable_grad, body, *args):
    # Grad mode changes no forward value. Translating the region keeps the program off
    # run_decompositions, which would re-trace the whole model only to inline it (12 s of a
    # small llama's export: its rotary embedding runs under no_grad).
    return _as_tuple(ctx.inline(body, list(args)))


__all__ = ["cond", "while_loop", "scan", "ir"]
