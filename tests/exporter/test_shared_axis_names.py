"""One axis name on dims of different example sizes: exported, each size with a name of its own.

PyTorch's own exporter test gives ``{0: "batch", 1: "sequence"}`` to three inputs of shapes
(1, 3), (1, 5) and (1, 8). In ONNX one dim name means one size, so naming all three
``sequence`` would tell the runtime something false: the dims of the first size keep the name,
the others become ``sequence_1``, ``sequence_2``, and one warning names each renamed dim.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch.export import Dim

from torch_onnx_conformance import exporter


class Three(torch.nn.Module):
    def forward(self, a, b, c):
        return a.sum(1) + b.sum(1) + c.sum(1), c * 2


class Outer(torch.nn.Module):
    def forward(self, x, y):
        return x[:, None] * y


class Doubled(torch.nn.Module):
    def forward(self, a, b, c):
        return a * 2, b * 2, c * 2


_ARGS = (torch.randn(1, 3), torch.randn(1, 5), torch.randn(1, 8))
_AXES = {0: "batch", 1: "sequence"}


def _export(form: str):
    if form == "dynamic_axes":
        options = {"input_names": ["a", "b", "c"], "dynamic_axes": dict.fromkeys("abc", _AXES)}
    elif form == "strings":
        options = {"dynamic_shapes": [_AXES] * 3}
    else:
        axes = {0: Dim("batch"), 1: Dim("sequence")}
        options = {"dynamic_shapes": [axes] * 3}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        program = exporter.export(Three().eval(), _ARGS, **options)
    return program, [str(w.message) for w in caught if "example sizes" in str(w.message)]


def _dims(values) -> list[list[str]]:
    return [[str(d) for d in v.shape] for v in values]


@pytest.mark.parametrize("form", ["dynamic_axes", "strings", "Dim"])
def test_one_name_on_three_sizes_gets_a_name_per_size(form):
    program, renamed = _export(form)
    graph = program.model.graph
    assert _dims(graph.inputs) == [
        ["batch", "sequence"],
        ["batch", "sequence_1"],
        ["batch", "sequence_2"],
    ]
    assert _dims(graph.outputs) == [["batch"], ["batch", "sequence_2"]]
    assert len(renamed) == 1
    assert "b dim 1 (size 5) is 'sequence_1'" in renamed[0]
    assert "c dim 1 (size 8) is 'sequence_2'" in renamed[0]
    # each dim stays free: other sizes, independent of each other, match eager
    inputs = (torch.randn(2, 4), torch.randn(2, 6), torch.randn(2, 2))
    expected = Three()(*inputs)
    for got, want in zip(program(*inputs), expected):
        np.testing.assert_allclose(np.asarray(got), want.numpy(), rtol=1e-5, atol=1e-6)


def test_an_outer_product_of_two_sizes_declares_both():
    # one name for both would declare [n] x [n] -> [n, n] while the real output is 3 x 5
    with pytest.warns(UserWarning, match=r"y dim 0 \(size 5\) is 'n_1'"):
        program = exporter.export(
            Outer().eval(), (torch.randn(3), torch.randn(5)), dynamic_shapes=({0: "n"}, {0: "n"})
        )
    assert _dims(program.model.graph.outputs) == [["n", "n_1"]]
    x, y = torch.randn(4), torch.randn(2)
    np.testing.assert_allclose(np.asarray(program(x, y)[0]), (x[:, None] * y).numpy(), rtol=1e-6)


def test_a_suffixed_name_the_user_took_is_skipped():
    with pytest.warns(UserWarning, match=r"b dim 0 \(size 5\) is 'n_2'"):
        program = exporter.export(
            Doubled().eval(),
            (torch.randn(3), torch.randn(5), torch.randn(4)),
            dynamic_shapes=({0: "n"}, {0: "n"}, {0: "n_1"}),
        )
    assert _dims(program.model.graph.inputs) == [["n"], ["n_2"], ["n_1"]]


def test_dims_torch_export_found_equal_keep_the_shared_name():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        program = exporter.export(
            Three().eval(),
            (torch.randn(2, 4), torch.randn(2, 4), torch.randn(2, 4)),
            dynamic_shapes=[_AXES] * 3,
        )
    assert _dims(program.model.graph.inputs) == [["batch", "sequence"]] * 3
