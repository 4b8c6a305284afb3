"""Outputs whose size depends on the data: exported with unbacked sizes, then run at a second
input whose data changes the output size (and, for torch.cond, takes the other branch)."""

from __future__ import annotations

import pytest
import torch

from tests.op_check import check_op

_FEW = torch.tensor([0.1, 0.9, 0.7, 0.2])
_MANY = torch.tensor([0.9, 0.9, 0.7, 0.8, 0.6, 0.1])


def _keep_large(t):
    return t[t > 0.5]


def _keep_small(t):
    return t[t < 0.5]


CASES = [
    ("nonzero", lambda x: torch.nonzero(x > 0.5), (_FEW,), (_MANY,)),
    (
        "nonzero_2d",
        lambda x: torch.nonzero(x > 0.5),
        (torch.tensor([[0.1, 0.9, 0.7], [0.2, 0.3, 0.4]]),),
        (torch.tensor([[0.9, 0.6], [0.7, 0.8], [0.1, 0.95]]),),
    ),
    ("masked_select", lambda x: torch.masked_select(x, x > 0.5), (_FEW,), (_MANY,)),
    ("boolean_mask_index", lambda x: x[x > 0.5] * 2.0, (_FEW,), (_MANY,)),
    (
        "unique_inverse_counts",
        lambda x: torch.unique(x, return_inverse=True, return_counts=True),
        (torch.tensor([3, 1, 3, 2]),),
        (torch.tensor([5, 5, 5, 1, 9, 7]),),
    ),
    (
        "repeat_interleave_tensor_repeats",
        lambda x, repeats: torch.repeat_interleave(x, repeats, dim=0),
        (torch.rand(3, 2), torch.tensor([1, 2, 0])),
        (torch.rand(4, 2), torch.tensor([3, 0, 2, 5])),
    ),
    (
        "cond_on_data",
        lambda x: torch.cond(x.sum() > 2.0, _keep_large, _keep_small, (x,)),
        (torch.tensor([0.9, 0.8, 0.7, 0.1]),),
        (torch.tensor([0.1, 0.2, 0.9, 0.3, 0.4, 0.05]),),
    ),
]


@pytest.mark.parametrize(
    ("fn", "args", "second"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_output_size_follows_the_data(fn, args, second):
    first_sizes = [tuple(t.shape) for t in _as_tuple(fn(*args))]
    second_sizes = [tuple(t.shape) for t in _as_tuple(fn(*second))]
    assert first_sizes != second_sizes  # the second input really changes the output size
    dynamic_shapes = (tuple({d: torch.export.Dim.AUTO for d in range(a.dim())} for a in args),)
    program = check_op(fn, args, dynamic_shapes=dynamic_shapes, second_args=second)
    for output, size in zip(program.model.graph.outputs, first_sizes):
        if size:
            # the data-dependent axis is left symbolic, never the example's count
            assert not isinstance(output.shape[0], int), output.shape


def _as_tuple(out):
    return out if isinstance(out, tuple) else (out,)
