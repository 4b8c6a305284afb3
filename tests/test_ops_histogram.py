"""histogram, histogramdd and hash_tensor against eager torch: static, dynamic at a second
shape, empty inputs, and hash_tensor's bit patterns for special float values."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import exporter
from exporter.ops import histogram as histogram_ops
from tests.op_check import Lambda, check_op, run_onnx, static_and_dynamic


def dynamic(*tensors, dim=torch.export.Dim.DYNAMIC):
    """Every dim of size >= 2 dynamic; one extra nesting level for the wrapper's ``*args``."""
    return (tuple({d: dim for d in range(t.dim()) if t.shape[d] >= 2} for t in tensors),)


def r(*shape):
    return torch.randn(*shape)


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
    from exporter.ops._fake_kernels import installed

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


# ------------------------------------------------------------------------------ hash_tensor
def check_hash(fn, args, *, dynamic_shapes=None, second_args=None, opset=None):
    """hash_tensor returns uint64, which check_op cannot turn back into a torch tensor;
    compare the exact bit patterns with numpy instead."""
    module = Lambda(fn).eval()
    program = exporter.export(
        module, tuple(args), dynamic_shapes=dynamic_shapes, opset_version=opset, optimize=False
    )
    for inputs in [args] + ([second_args] if second_args is not None else []):
        expected = module(*inputs)
        (got,) = run_onnx(program, inputs)
        got = np.asarray(got).astype(np.uint64)
        assert got.shape == tuple(expected.shape)
        np.testing.assert_array_equal(got, expected.numpy())


def hash_of(*dims, keepdim=False):
    return lambda x: torch.ops.aten.hash_tensor(x, list(dims), keepdim=keepdim)


HASH_CASES = [
    ("all", hash_of(), (r(3, 5),), (r(4, 7),)),
    ("dim", hash_of(1), (r(3, 5),), (r(5, 2),)),
    ("dims_keepdim", hash_of(0, -1, keepdim=True), (r(3, 2, 1, 2),), (r(4, 3, 1, 3),)),
    ("scalar", hash_of(), (torch.tensor(-2.5),), None),
    ("empty_kept_dim", hash_of(1), (torch.empty(0, 3),), None),
]


@pytest.mark.parametrize(("fn", "args", "second"), case_params(HASH_CASES))
def test_hash_tensor(fn, args, second):
    # Dim.AUTO, as the conformance suite asks: torch's own Meta kernel for hash_tensor trips
    # Dim.DYNAMIC's specialisation check although the exported graph stays symbolic.
    shapes = dynamic(*args, dim=torch.export.Dim.AUTO) if second is not None else None
    check_hash(fn, args, dynamic_shapes=shapes, second_args=second)


def special_floats(dtype):
    info = torch.finfo(dtype)
    values = [0.0, -0.0, float("inf"), float("-inf"), float("nan"), info.max, -info.max]
    values += [info.tiny, info.smallest_normal / 2, info.smallest_normal / 2**5, -info.eps]
    # Every exponent, including the subnormal ones, just above and at a power of two.
    exponents = torch.arange(-160 if dtype == torch.float32 else -1074, 128).to(torch.float64)
    powers = torch.pow(2.0, exponents)
    values = torch.cat([torch.tensor(values, dtype=torch.float64), powers, powers * 1.75])
    return values.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_hash_tensor_bit_patterns(dtype):
    # Each value hashed alone is its own widened bit pattern.
    check_hash(hash_of(1), (special_floats(dtype).reshape(-1, 1),))


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int32, torch.int64, torch.bool])
def test_hash_tensor_integers(dtype):
    if dtype is torch.bool:
        x = torch.tensor([[True, False, True], [False, False, True]])
    else:
        info = torch.iinfo(dtype)
        x = torch.tensor([[info.min, -1 if info.min < 0 else 3, 5], [info.max, 7, 0]], dtype=dtype)
    check_hash(hash_of(0), (x,))
    check_hash(hash_of(), (x,))


@pytest.mark.parametrize("opset", [17, 23])
def test_hash_tensor_opsets(opset):
    check_hash(hash_of(), (r(6, 4),), opset=opset)
