"""Shared op helpers answer one question one way, whichever family asks."""

from __future__ import annotations

import operator

import torch
import torch.fx

from exporter.ops import _kernels
from exporter.ops._context import EVERY_OUTPUT, TranslationContext


def _graph_with_users(*, read: tuple[int, ...], dead: tuple[int, ...] = (), escape: bool = False):
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    multi = graph.call_function(torch.ops.aten.var_mean.correction, (x,))
    outputs = [graph.call_function(operator.getitem, (multi, i)) for i in read]
    for i in dead:
        graph.call_function(operator.getitem, (multi, i))
    graph.output(multi if escape else tuple(outputs))
    return multi


def test_used_outputs_counts_getitems_that_something_reads():
    ctx = TranslationContext(None, _graph_with_users(read=(1,), dead=(0,)))
    assert ctx.used_outputs() == {1}


def test_used_outputs_counts_everything_when_the_tuple_escapes_whole():
    ctx = TranslationContext(None, _graph_with_users(read=(), escape=True))
    assert ctx.used_outputs() == EVERY_OUTPUT


def test_used_outputs_counts_everything_inside_a_hand_built_body():
    assert TranslationContext(None, None).used_outputs() == EVERY_OUTPUT


def test_kernel_dtype_keeps_supported_and_unknown_dtypes():
    assert _kernels.kernel_dtype("Pad", torch.float32) is torch.float32
    assert _kernels.kernel_dtype("Pad", None) is None
    assert _kernels.kernel_dtype("NotAnOnnxOp", torch.bfloat16) is torch.bfloat16


def test_kernel_dtype_answers_a_dtype_the_table_lists_for_every_gap():
    every = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.bool]
    every += [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]
    for op_type, supported in _kernels.SUPPORTED.items():
        for dtype in every:
            try:
                run = _kernels.kernel_dtype(op_type, dtype)
            except TypeError:
                continue  # no kernel can hold these values (And on floats, BitShift on signed)
            assert run in supported, (op_type, dtype, run)
