"""Capture defers guards on dynamic dims to runtime assertions (like torch.onnx), and says so
when a guard held a dim at its example size."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.export import Dim

from tests.op_check import check_op
from torch_onnx_conformance import exporter

AUTO = Dim.AUTO


def test_a_meta_check_does_not_freeze_dims_the_graph_handles():
    # take_along_dim's meta function compares sizes; the graph itself is a GatherElements.
    def fn(x, index):
        return torch.take_along_dim(x, index, 1)

    x, index = torch.randn(3, 4), torch.randint(0, 4, (3, 2))
    program = check_op(
        fn,
        (x, index),
        dynamic_shapes=(({0: AUTO, 1: AUTO}, {0: AUTO, 1: AUTO}),),  # forward(*args)
        second_args=(torch.randn(5, 6), torch.randint(0, 6, (5, 3))),
    )
    dims = [
        [d if isinstance(d, int) else "sym" for d in v.shape] for v in program.model.graph.inputs
    ]
    assert dims == [["sym", "sym"], ["sym", "sym"]]


def test_a_dim_held_at_its_example_size_is_reported():
    class Pool(torch.nn.Module):
        def forward(self, x):
            # None output sizes take the input's sizes, read as Python ints by the functional.
            return torch.nn.functional.adaptive_max_pool2d(x, (None, 2))

    with pytest.warns(UserWarning, match=r"held dynamic dims at their example size.*x dim 2"):
        program = exporter.export(
            Pool().eval(), (torch.randn(1, 2, 5, 6),), dynamic_shapes=({2: AUTO, 3: AUTO},)
        )
    assert any("x dim 2 (size 5)" in note for note in program.record.notes)


def test_no_note_when_every_dim_stays_free():
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        program = exporter.export(
            torch.nn.Linear(4, 3).eval(), (torch.randn(2, 4),), dynamic_shapes=({0: AUTO},)
        )
    assert not any("held dynamic dims" in note for note in program.record.notes)


def test_sizes_derived_from_a_held_dim_are_not_folded_into_constants():
    # kron's meta function holds every dim at its example size, and torch then simplifies the
    # output size to a number; the optimizer must not fold the runtime Shape into it.
    program = check_op(
        lambda a, b: torch.kron(a, b),
        (torch.randn(5, 5), torch.randn(10, 20)),
        dynamic_shapes=(({0: AUTO, 1: AUTO}, {0: AUTO, 1: AUTO}),),
        second_args=(torch.randn(6, 6), torch.randn(11, 21)),
        optimize=True,
    )
    assert any("held dynamic dims" in note for note in program.record.notes)
