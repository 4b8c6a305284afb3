"""Sorting and searching against eager torch: ties, NaN, dtypes, data-dependent output sizes."""

from __future__ import annotations

import math

import pytest
import torch

from tests.op_check import Lambda, case_params, check_op, dynamic, run_onnx, tensor_maker
from torch_onnx_conformance import exporter

r = tensor_maker(low=-3, high=3)

NAN = math.nan

# Inputs are drawn at import: a fixed seed keeps every run on the same cases.
torch.manual_seed(0)

CASES = [
    ("topk", lambda x: torch.topk(x, 2), (r(3, 5),), (r(4, 6),)),
    (
        "topk_smallest_dim0",
        lambda x: torch.topk(x, 3, dim=0, largest=False),
        (r(5, 4),),
        (r(6, 2),),
    ),
    ("topk_int", lambda x: torch.topk(x, 2), (torch.tensor([[5, 1, 9, 3], [0, 7, 2, 8]]),), None),
    ("topk_nan", lambda x: torch.topk(x, 2), (torch.tensor([1.0, NAN, 3.0, 2.0]),), None),
    ("topk_0d", lambda x: torch.topk(x, 1), (torch.tensor(2.0),), None),
    ("sort", lambda x: torch.sort(x), (r(3, 5),), (r(2, 7),)),
    ("sort_desc_dim0", lambda x: torch.sort(x, 0, descending=True), (r(5, 3),), (r(4, 2),)),
    (
        "sort_stable_ties",
        lambda x: torch.sort(x, stable=True),
        (torch.tensor([3, 1, 2, 1, 3, 2, 1]),),
        (torch.tensor([2, 2, 1, 1]),),
    ),
    (
        "sort_stable_desc_ties",
        lambda x: torch.sort(x, stable=True, descending=True),
        (torch.tensor([3.0, 1, 2, 1, 3, 2, 1]),),
        None,
    ),
    ("sort_nan_last", lambda x: torch.sort(x), (torch.tensor([2.0, NAN, -1.0, 5.0]),), None),
    (
        "sort_bool",
        lambda x: torch.sort(x, stable=True),
        (torch.tensor([True, False, True, False]),),
        None,
    ),
    ("sort_0d", lambda x: torch.sort(x), (torch.tensor(1.0),), None),
    (
        "sort_f16",
        lambda x: torch.sort(x, -1),
        (r(3, 6, dtype=torch.float16),),
        (r(2, 4, dtype=torch.float16),),
    ),
    ("argsort", lambda x: torch.argsort(x, 1, descending=True), (r(3, 5),), (r(4, 2),)),
    (
        "argsort_stable",
        lambda x: torch.argsort(x, stable=True),
        (torch.tensor([2, 1, 2, 1]),),
        None,
    ),
    ("msort", lambda x: torch.msort(x), (r(4, 3),), (r(6, 2),)),
    (
        "searchsorted",
        lambda s, v: torch.searchsorted(s, v),
        (torch.tensor([1.0, 2, 2, 4, 7]), r(3, 4)),
        (torch.tensor([0.0, 1, 5]), r(2, 2)),
    ),
    (
        "searchsorted_right_ties",
        lambda s, v: torch.searchsorted(s, v, right=True),
        (torch.tensor([1, 2, 2, 2, 4]), torch.tensor([2, 0, 4, 5])),
        None,
    ),
    (
        "searchsorted_side_int32",
        lambda s, v: torch.searchsorted(s, v, side="right", out_int32=True),
        (torch.tensor([1.0, 2, 3]), torch.tensor([2.0, 2.5])),
        None,
    ),
    (
        "searchsorted_batched",
        lambda s, v: torch.searchsorted(s, v),
        (torch.sort(r(3, 6))[0], r(3, 4)),
        (torch.sort(r(2, 5))[0], r(2, 3)),
    ),
    (
        "searchsorted_sorter",
        lambda s, v, idx: torch.searchsorted(s, v, sorter=idx),
        (torch.tensor([3.0, 1.0, 2.0]), torch.tensor([0.5, 2.5, 3.5]), torch.tensor([1, 2, 0])),
        None,
    ),
    (
        "searchsorted_scalar",
        lambda s: torch.searchsorted(s, 2.5),
        (torch.tensor([1.0, 2, 3]),),
        None,
    ),
    (
        "bucketize",
        lambda v, b: torch.bucketize(v, b),
        (r(3, 4), torch.tensor([-1.0, 0, 1])),
        (r(5, 2), torch.tensor([-1.0, 0.5])),
    ),
    (
        "bucketize_right",
        lambda v, b: torch.bucketize(v, b, right=True),
        (torch.tensor([0, 1, 2, 3]), torch.tensor([1, 2])),
        None,
    ),
    (
        "bucketize_empty_values",
        lambda v, b: torch.bucketize(v, b),
        (torch.zeros(2, 0, 3), torch.tensor([1.0, 2.0])),
        None,
    ),
    (
        "unique",
        lambda x: torch.unique(x),
        (torch.tensor([3, 1, 2, 3, 1, 5]),),
        (torch.tensor([4, 4, 4]),),
    ),
    (
        "unique_inverse_counts",
        lambda x: torch.unique(x, return_inverse=True, return_counts=True),
        (torch.tensor([[3.0, 1.0], [2.0, 3.0], [1.0, 1.0]]),),
        (torch.tensor([[1.0, 2.0], [3.0, 4.0]]),),
    ),
    (
        "unique_int32",
        lambda x: torch.unique(x, return_counts=True),
        (torch.tensor([3, 1, 3], dtype=torch.int32),),
        None,
    ),
    (
        "unique_bool",
        lambda x: torch.unique(x, return_inverse=True),
        (torch.tensor([True, False, True]),),
        None,
    ),
    ("unique_0d", lambda x: torch.unique(x, return_inverse=True), (torch.tensor(4.0),), None),
    ("unique_empty", lambda x: torch.unique(x, return_counts=True), (torch.zeros(0),), None),
    (
        "unique_dim",
        lambda x: torch.unique(x, dim=0, return_inverse=True, return_counts=True),
        (torch.tensor([[1, 2], [0, 5], [1, 2], [0, 1]]),),
        (torch.tensor([[1, 1], [1, 1]]),),
    ),
    (
        "unique_dim1",
        lambda x: torch.unique(x, dim=1),
        (torch.tensor([[1, 0, 1], [2, 5, 2]]),),
        None,
    ),
    (
        "unique_consecutive",
        lambda x: torch.unique_consecutive(x, return_inverse=True, return_counts=True),
        (torch.tensor([[1, 1, 2], [2, 3, 3]]),),
        (torch.tensor([[5, 5], [5, 1], [1, 1]]),),
    ),
    (
        "unique_consecutive_dim",
        lambda x: torch.unique_consecutive(x, return_inverse=True, return_counts=True, dim=0),
        (torch.tensor([[1, 1], [1, 1], [2, 3], [1, 1]]),),
        (torch.tensor([[0, 0], [0, 1]]),),
    ),
    (
        "unique_consecutive_float",
        lambda x: torch.unique_consecutive(x),
        (torch.tensor([1.5, 1.5, 2.0, 1.5]),),
        None,
    ),
]


@pytest.mark.parametrize(("fn", "args", "second", "shapes"), case_params(CASES))
def test_sort_search(fn, args, second, shapes):
    if shapes == "dynamic":
        check_op(fn, args, dynamic_shapes=dynamic(*args), second_args=second)
    else:
        check_op(fn, args)


@pytest.mark.parametrize("opset", [17, 20, 23])
def test_sort_family_across_opsets(opset):
    x = r(4, 6)
    check_op(
        lambda t: (torch.sort(t)[0], torch.topk(t, 2)[1], torch.argsort(t, 0)), (x,), opset=opset
    )


def test_unique_output_size_follows_the_data():
    """One exported graph, two inputs with different numbers of distinct values."""
    first = torch.tensor([1, 1, 1, 2])
    second = torch.tensor([7, 3, 9, 3, 1, 0])
    check_op(
        lambda t: torch.unique(t, return_counts=True),
        (first,),
        dynamic_shapes=dynamic(first),
        second_args=(second,),
    )


# (fn, indices the stable order picks): torch's sort(stable=True) keeps equal values in input
# order, which is ONNX TopK's rule (lower index first among ties).
TIE_CASES = [
    (
        "topk",
        lambda t: torch.topk(t, 3),
        lambda t: torch.sort(t, dim=-1, descending=True, stable=True)[1][:, :3],
    ),
    (
        "topk_smallest",
        lambda t: torch.topk(t, 2, largest=False),
        lambda t: torch.sort(t, dim=-1, stable=True)[1][:, :2],
    ),
    (
        "kthvalue",
        lambda t: torch.kthvalue(t, 2),
        lambda t: torch.sort(t, dim=-1, stable=True)[1][:, 1],
    ),
]


@pytest.mark.parametrize(
    ("fn", "stable_indices"), [c[1:] for c in TIE_CASES], ids=[c[0] for c in TIE_CASES]
)
def test_ties_pick_the_lower_index(fn, stable_indices):
    """torch documents topk's tie order as unstable: its CPU kernel (partial_sort/nth_element)
    returns [1, 0, 4] for topk([1, 1, 0, 0, 0], 3) but [2, 3, 4] for [0, 0, 1, 1, 0], so the
    exported indices are held to the stable order instead, and values must match eager."""
    x = torch.tensor([[1, 1, 0, 0, 0], [0, 0, 1, 1, 0], [2, 2, 2, 0, 0], [5, 0, 5, 0, 0]])
    values, indices = (
        torch.from_numpy(o) for o in run_onnx(exporter.export(Lambda(fn).eval(), (x,)), (x,))
    )
    assert torch.equal(values, fn(x)[0])
    assert torch.equal(indices, stable_indices(x))
