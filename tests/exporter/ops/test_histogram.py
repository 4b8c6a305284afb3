"""histogram and histogramdd against eager torch: static, dynamic at a second shape, and empty
inputs. (hash_tensor, which used to share this file, is in test_hashing.py.)"""

from __future__ import annotations

import pytest
import torch

from tests.op_check import check_op, dynamic, static_and_dynamic, tensor_maker
from torch_onnx_conformance.exporter.ops import histogram as histogram_ops

r = tensor_maker()


def points(n, dims=2):
    """``n`` points in ``dims`` dimensions; the number of dimensions must stay fixed."""
    return torch.randn(n, dims)


case_params = static_and_dynamic


HISTOGRAM_CASES = [
    ("bins", lambda x: torch.histogram(x, 6), (r(40),), (r(23),)),
    ("bins_2d_input", lambda x: torch.histogram(x, 3), (r(4, 5),), (r(6, 7),)),
    ("density", lambda x: torch.histogram(x, 4, density=True), (r(30),), (r(17),)),
    (
        "range_weight_density",
        lambda x, w: torch.histogram(x, 5, range=(-1.0, 2.0), weight=w, density=True),
        (r(30), torch.rand(30)),
        (r(12), torch.rand(12)),
    ),
    ("empty_range", lambda x: torch.histogram(x, 3, range=(1.0, 1.0)), (r(9),), (r(4),)),
    ("constant_input", lambda x: torch.histogram(x, 4), (torch.ones(5),), (torch.ones(8),)),
    # No data: torch's edges are [0, 1]; density divides 0 by 0.
    ("empty_input", lambda x: torch.histogram(x, 2), (torch.empty(5, 0, 5),), None),
    ("empty_density", lambda x: torch.histogram(x, 3, density=True), (torch.empty(0),), None),
    (
        "edges",
        lambda x, b: torch.histogram(x, b),
        (r(30), torch.tensor([-2.0, 0, 0.5, 3])),
        # The edge count is dynamic too.
        (r(11), torch.tensor([-1.0, -0.5, 0, 0.5, 1.0])),
    ),
    (
        "edges_weight_density",
        lambda x, b, w: torch.histogram(x, b, weight=w, density=True),
        (r(20), torch.tensor([-1.0, 0, 2.0]), torch.rand(20)),
        (r(9), torch.tensor([-1.0, 0, 1.0, 2.0]), torch.rand(9)),
    ),
]

HISTOGRAMDD_CASES = [
    ("bin_counts", lambda x: torch.histogramdd(x, [3, 2]), (points(20),), (points(13),)),
    (
        "bin_counts_3d_input",
        lambda x: torch.histogramdd(x, [2, 2, 3]),
        (torch.randn(4, 5, 3),),
        (torch.randn(6, 2, 3),),
    ),
    (
        "range_weight_density",
        lambda x, w: torch.histogramdd(
            x, [2, 3], range=[-1.0, 1.0, 0.0, 2.0], weight=w, density=True
        ),
        (points(25), torch.rand(25)),
        (points(10), torch.rand(10)),
    ),
    ("empty", lambda x: torch.histogramdd(x, [1, 2]), (torch.empty(5, 0, 2),), None),
    (
        "edges",
        lambda x, a, b: torch.histogramdd(x, [a, b]),
        (points(20), torch.tensor([-2.0, 0.0, 2.0]), torch.tensor([-1.0, 0.0, 0.5, 1.0])),
        (points(8), torch.tensor([-1.0, 0.0, 1.0, 2.0]), torch.tensor([-3.0, 0.0, 3.0])),
    ),
    (
        "edges_density",
        lambda x, a, b: torch.histogramdd(x, [a, b], density=True),
        (points(30), torch.tensor([-2.0, 0.0, 2.0]), torch.tensor([-2.0, 0.0, 0.5, 2.0])),
        None,
    ),
]


@pytest.mark.parametrize(("fn", "args", "second"), case_params(HISTOGRAM_CASES))
def test_histogram(fn, args, second):
    shapes = dynamic(*args) if second is not None else None
    check_op(fn, args, dynamic_shapes=shapes, second_args=second)


@pytest.mark.parametrize(("fn", "args", "second"), case_params(HISTOGRAMDD_CASES))
def test_histogramdd(fn, args, second):
    shapes = None
    if second is not None:
        # The last dimension is the number of bin counts and cannot change.
        shapes = dynamic(*args)
        shapes[0][0].pop(args[0].dim() - 1, None)
    check_op(fn, args, dynamic_shapes=shapes, second_args=second)


@pytest.mark.parametrize("opset", [17, 23])
def test_histogram_opsets(opset):
    x = r(30)
    check_op(lambda x: torch.histogram(x, 5, density=True), (x,), opset=opset)


def test_meta_kernels_are_registered_while_exporting():
    from torch_onnx_conformance.exporter.ops._fake_kernels import installed

    with installed():
        _check_meta_kernels()
    for name in histogram_ops._META_KERNELS:  # torch as shipped again
        assert not torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", "Meta")


def _check_meta_kernels():
    for name in histogram_ops._META_KERNELS:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", "Meta"), name
    # A second registration pass finds them all present and registers nothing more.
    assert histogram_ops._register_meta_kernels() is None
    hist, edges = torch.ops.aten.histogram.bin_ct(torch.empty(7, device="meta"), 4)
    assert hist.shape == (4,) and edges.shape == (5,)
    x = torch.empty(9, 3, device="meta")
    assert torch.ops.aten._histogramdd_from_bin_cts(x, [2, 3, 4]).shape == (2, 3, 4)
    bins = [torch.empty(n, device="meta") for n in (3, 5, 2)]
    assert torch.ops.aten._histogramdd_from_bin_tensors(x, bins).shape == (2, 4, 1)
    with pytest.raises(RuntimeError, match="last dimension"):
        torch.ops.aten._histogramdd_bin_edges(x, [2, 3])
