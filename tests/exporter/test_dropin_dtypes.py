"""Unusual dtypes and int loop carries: export and run like eager, or a clear error naming the
dtype.

float8 tensors (the four types onnxruntime runs) go in and out of ``ONNXProgram.__call__`` and
live in weights and ``zeros``; torch.onnx 2.14.1 runs the same models except that its
``__call__`` cannot return float8 outputs. float8_e8m0fnu has no ONNX type onnxruntime
computes with, and the exporter carries float4_e2m1fn_x2 tensors only unchanged or to and
from their bytes (tests/exporter/test_float4.py), so other computations on them stop the export
with an error that names the dtype and the value or op holding it.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch._higher_order_ops.while_loop import while_loop

from torch_onnx_conformance import exporter
from torch_onnx_conformance.exporter._dtypes import UnsupportedDtypeError

FLOAT8 = [torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.float8_e5m2, torch.float8_e5m2fnuz]


class Float8Input(torch.nn.Module):
    def forward(self, x):
        return x.to(torch.float32) * 2


class Float8Output(torch.nn.Module):
    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.dtype = dtype

    def forward(self, x):
        return (x * 2).to(self.dtype)


class Float8ZerosAndWeight(torch.nn.Module):
    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.dtype = dtype
        self.register_buffer("weight", torch.tensor([1.0, -2.0, 0.5]).to(dtype))

    def forward(self, x):
        zeros = torch.zeros(x.shape[0], 3, dtype=self.dtype)
        return x + zeros.to(torch.float32) + self.weight.to(torch.float32)


def _float8_cases(dtype):
    x = torch.tensor([[1.0, -2.0, 0.5], [224.0, -0.0, 3.25]])
    return {
        "input": (Float8Input(), (x.to(dtype),)),
        "output": (Float8Output(dtype), (x / 4,)),
        "zeros_and_weight": (Float8ZerosAndWeight(dtype), (x,)),
    }


def _assert_same_bits(got: torch.Tensor, expected: torch.Tensor) -> None:
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if expected.element_size() == 1 and expected.is_floating_point():
        got, expected = got.view(torch.uint8), expected.view(torch.uint8)
    assert torch.equal(got, expected)


@pytest.mark.parametrize("case", ["input", "output", "zeros_and_weight"])
@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_float8_exports_and_runs_through_call(dtype, case):
    module, args = _float8_cases(dtype)[case]
    (got,) = exporter.export(module, args)(*args)
    _assert_same_bits(got, module(*args))


@pytest.mark.parametrize("case", ["input", "output"])
def test_verify_runs_float8_through_onnxruntime_and_finds_it_matches(case):
    """onnxruntime's plain ``run`` hands float8 back as raw bytes; verify must not read those
    as numbers and report a match as a mismatch."""
    module, args = _float8_cases(torch.float8_e4m3fn)[case]
    with warnings.catch_warnings():
        warnings.simplefilter("error", exporter.verify.OnnxVerificationWarning)
        program = exporter.export(module.eval(), args, verify=True)
    (run,) = program.verification.runs
    assert all(output.ok for output in run.outputs), run.outputs


class BFloat16Affine(torch.nn.Module):
    def forward(self, x):
        return x * 2 + 1, (x * 3).to(torch.float32)


def test_bfloat16_goes_in_and_out_of_call_and_verify():
    """onnxruntime's Python API reads no numpy bfloat16: __call__ and verify hand it raw
    bytes, as they do float8."""
    x = torch.randn(3, 4).to(torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("error", exporter.verify.OnnxVerificationWarning)
        program = exporter.export(BFloat16Affine().eval(), (x,), verify=True)
    for got, expected in zip(program(x), BFloat16Affine()(x)):
        _assert_same_bits(got, expected)


OVERFLOWING = torch.tensor(
    [1000.0, -1e6, float("inf"), float("-inf"), float("nan"), 0.3, 57344.0, 70000.0, 1e-9, -1e-9]
)


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_float8_cast_overflows_like_torch(dtype):
    """torch saturates float8_e4m3fn but turns overflow into inf (e5m2) or NaN (the fnuz
    types); ONNX's Cast saturates all of them unless told not to."""
    module = Float8Output(dtype)
    (got,) = exporter.export(module, (OVERFLOWING / 2,))(OVERFLOWING / 2)
    _assert_same_bits(got, module(OVERFLOWING / 2))


def test_float8_cast_below_opset_19_is_an_error_naming_the_opset():
    with pytest.raises(exporter.OnnxExporterError, match="float8.*opset_version >= 19"):
        exporter.export(Float8Output(torch.float8_e5m2), (OVERFLOWING,), opset_version=18)


class Float8Empty(torch.nn.Module):
    def forward(self, x):
        return torch.empty(x.shape[0], 2, dtype=torch.float8_e5m2)


def test_float8_empty_has_the_shape_and_dtype_of_eager():
    x = torch.randn(3, 4)
    (got,) = exporter.export(Float8Empty(), (x,))(x)
    assert got.dtype == torch.float8_e5m2 and got.shape == (3, 2)


@pytest.mark.parametrize("case", ["input", "zeros_and_weight"])
def test_float8_torch_onnx_side_by_side(case):
    module, args = _float8_cases(torch.float8_e4m3fn)[case]
    expected = module(*args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = torch.onnx.export(module, args, dynamo=True, verbose=False)
    _assert_same_bits(theirs(*args)[0], expected)
    _assert_same_bits(exporter.export(module, args)(*args)[0], expected)


class Float4Zeros(torch.nn.Module):
    def forward(self, x):
        return x + torch.zeros(3, dtype=torch.float4_e2m1fn_x2).view(torch.uint8)


class E8M0Output(torch.nn.Module):
    def forward(self, x):
        return x.to(torch.float8_e8m0fnu)


BYTES = torch.tensor([[1, 2, 3]], dtype=torch.uint8)


@pytest.mark.parametrize(
    ("module", "args", "dtype", "where"),
    [
        (Float4Zeros(), (BYTES,), "float4_e2m1fn_x2", "node zeros"),
        (E8M0Output(), (torch.tensor([1.0, 4.0]),), "float8_e8m0fnu", "value"),
    ],
    ids=["float4_zeros", "e8m0_output"],
)
def test_dtype_without_onnx_runtime_support_is_an_error_naming_it(module, args, dtype, where):
    module(*args)  # eager runs it
    with pytest.raises(UnsupportedDtypeError, match=rf"FX {where}.*torch\.{dtype}"):
        exporter.export(module, args)


class ReinterpretBits(torch.nn.Module):
    def forward(self, x):
        return x.view(torch.int32) & 0x7FFFFFFF


def test_view_as_other_dtype_uses_bitcast_at_opset_26_and_names_the_opset_below():
    x = torch.tensor([1.5, -2.0, float("inf"), -0.0])
    (got,) = exporter.export(ReinterpretBits(), (x,), opset_version=26)(x)
    assert torch.equal(got, ReinterpretBits()(x))
    with pytest.raises(exporter.OnnxExporterError, match="BitCast.*opset_version >= 26"):
        exporter.export(ReinterpretBits(), (x,), opset_version=25)


# ------------------------------------------------------------------------- while_loop carries
class TensorIntCarry(torch.nn.Module):
    def forward(self, x):
        return while_loop(
            lambda i, acc: i < 5, lambda i, acc: (i + 1, acc + x * i), (torch.tensor(0), x * 0)
        )


class PythonIntCarry(torch.nn.Module):
    def forward(self, x):
        def body(i, acc):
            return i + 1, acc + x[i]

        return while_loop(lambda i, acc: i < x.shape[0], body, (0, torch.zeros(x.shape[1:])))


class IntOnlyCarries(torch.nn.Module):
    def forward(self, n):
        return while_loop(
            lambda i, s: i < n, lambda i, s: (i + 1, s + i * i), (torch.tensor(0), torch.tensor(0))
        )


WHILE_CASES = {
    "tensor_int_carry": (TensorIntCarry(), (torch.randn(3),)),
    "python_int_carry": (PythonIntCarry(), (torch.randn(4, 3),)),
    "int_only_carries": (IntOnlyCarries(), (torch.tensor(6),)),
}


def _assert_loop_results(got, expected):
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, torch.as_tensor(e))


@pytest.mark.parametrize("name", list(WHILE_CASES))
def test_while_loop_with_int_carries_matches_eager_like_torch_onnx(name):
    module, args = WHILE_CASES[name]
    expected = module(*args)
    _assert_loop_results(exporter.export(module, args)(*args), expected)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = torch.onnx.export(module, args, dynamo=True, verbose=False)
    _assert_loop_results(theirs(*args), expected)
