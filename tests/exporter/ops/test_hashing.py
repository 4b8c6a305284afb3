"""aten.hash_tensor against eager torch: the XOR of the values' 64-bit patterns over all values
or along dims, static and dynamic, the bit patterns of special floats and integer extremes, and
two opsets. hash_tensor returns uint64, so results compare as numpy bit patterns."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.op_check import Lambda, dynamic, run_onnx, static_and_dynamic, tensor_maker
from torch_onnx_conformance import exporter

r = tensor_maker()
case_params = static_and_dynamic
torch.manual_seed(0)  # the cases below draw their inputs at import time


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
