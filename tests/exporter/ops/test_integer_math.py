"""gcd and lcm against eager torch: signs, zeros, broadcasting, every integer dtype, INT_MIN."""

from __future__ import annotations

import pytest
import torch

from tests.op_check import Lambda, check_op, dynamic
from torch_onnx_conformance import exporter

INT_DTYPES = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]
OPS = {"gcd": torch.gcd, "lcm": torch.lcm}
I64_MIN = torch.iinfo(torch.int64).min


def _ints(*shape, dtype=torch.int64, seed=0):
    """Random values of the dtype's full range, with small values and zeros mixed in."""
    generator = torch.Generator().manual_seed(seed)
    info = torch.iinfo(dtype)
    wide = torch.randint(info.min, info.max, shape, dtype=dtype, generator=generator)
    small = torch.randint(-12 if info.min < 0 else 0, 13, shape, dtype=dtype, generator=generator)
    pick = torch.rand(shape, generator=generator) < 0.6
    return torch.where(pick, small, wide)


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("dtype", INT_DTYPES, ids=str)
def test_every_integer_dtype(name, dtype):
    info = torch.iinfo(dtype)
    a, b = _ints(40, dtype=dtype, seed=1), _ints(40, dtype=dtype, seed=2)
    # Zeros on either side and both; the dtype's extremes (lcm(INT64_MIN, odd) traps in eager).
    edges_a = [0, 0, 7, info.max, info.min, info.min, info.max]
    edges_b = [0, 9, 0, info.max - 1, 0, info.min, 2]
    if info.min < 0:
        edges_a += [-12, 12, -12, info.min, info.min]
        edges_b += [18, -18, -18, 6, 12]
    a = torch.cat([a, torch.tensor(edges_a, dtype=dtype)])
    b = torch.cat([b, torch.tensor(edges_b, dtype=dtype)])
    check_op(OPS[name], (a, b))


def test_gcd_most_negative_int64_follows_eager():
    """torch's abs wraps INT64_MIN to itself, so some of these gcds come out negative."""
    a = torch.full((8,), I64_MIN)
    b = torch.tensor([6, -6, 10, 7, 3, 0, I64_MIN, 1])
    assert (torch.gcd(a, b) < 0).any()  # the case is not vacuous
    check_op(torch.gcd, (a, b))


@pytest.mark.parametrize("name", sorted(OPS))
def test_broadcasting_and_mixed_dtypes(name):
    a = _ints(3, 1, 4, dtype=torch.int32, seed=3)
    b = _ints(5, 1, dtype=torch.int64, seed=4)
    check_op(OPS[name], (a, b))


@pytest.mark.parametrize("name", sorted(OPS))
def test_dynamic_shapes(name):
    a, b = _ints(3, 4, seed=5), _ints(3, 4, seed=6)
    second = (_ints(6, 2, seed=7), _ints(6, 2, seed=8))
    check_op(OPS[name], (a, b), dynamic_shapes=dynamic(a, b), second_args=second)


@pytest.mark.parametrize("name", sorted(OPS))
def test_empty_and_zero_dim(name):
    check_op(OPS[name], (torch.zeros(0, 3, dtype=torch.int64), torch.tensor(4)))
    check_op(OPS[name], (torch.tensor(-84), torch.tensor(36)))
    check_op(OPS[name], (torch.tensor(0), torch.tensor(0)))


def test_long_euclid_chain():
    """Consecutive Fibonacci numbers are Euclid's worst case: ~90 Loop steps for int64."""
    fib = [0, 1]
    while len(fib) < 93:
        fib.append(fib[-1] + fib[-2])
    a = torch.tensor(fib[2:92])
    b = torch.tensor(fib[3:93])
    check_op(torch.gcd, (b, a))
    check_op(torch.gcd, (-a, b))


@pytest.mark.parametrize("name", ["gcd_", "lcm_"])
def test_in_place(name):
    a, b = _ints(4, 3, seed=9), _ints(4, 3, seed=10)
    check_op(lambda x, y: getattr(x.clone(), name)(y), (a, b))


def test_float_inputs_are_rejected_with_a_clear_error():
    class FloatGcd(torch.nn.Module):
        def forward(self, x):
            # gcd has no float kernel; ask the exporter about a graph where the node is float.
            return torch.ops.aten.gcd.default(x, x)

    with pytest.raises(exporter.OnnxExporterError, match="gcd is defined for integer tensors"):
        exporter.export(FloatGcd().eval(), (torch.ones(3),))


def test_uses_one_loop_not_an_unrolled_chain():
    program = exporter.export(Lambda(torch.gcd).eval(), (_ints(4), _ints(4)), optimize=False)
    ops = [node.op_type for node in program.model.graph]
    assert ops.count("Loop") == 1
    assert len(ops) < 40


@pytest.mark.parametrize("opset", [17, 20, 23])
def test_across_opsets(opset):
    a, b = _ints(3, 4, seed=11), _ints(4, seed=12)
    check_op(lambda x, y: (torch.gcd(x, y), torch.lcm(x, y)), (a, b), opset=opset)
