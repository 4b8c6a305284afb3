"""Elementwise math, comparisons, logic, casts and symbolic-size arithmetic against eager torch.

Static cases run every dtype that matters (float32, float16, int64, int32, bool, and the small
int types onnxruntime has no kernels for); a dynamic case exports with every dim >= 2 dynamic
and runs again at a second shape.
"""

from __future__ import annotations

import math

import onnx
import pytest
import torch

from tests.op_check import Lambda, check_op, dynamic, run_onnx, tensor_maker
from torch_onnx_conformance import exporter

r = tensor_maker(scale=2, low=-4, high=4, seed_stride=7, seed_counts_rank=True, unsigned_headroom=4)

DYN = torch.export.Dim.DYNAMIC
NAN, INF = math.nan, math.inf


def positive(*shape, dtype=torch.float32):
    return (torch.rand(*shape, generator=torch.Generator().manual_seed(3)) * 3 + 0.1).to(dtype)


def unit(*shape, dtype=torch.float32):
    return (torch.rand(*shape, generator=torch.Generator().manual_seed(5)) * 1.8 - 0.9).to(dtype)


SPECIAL = torch.tensor([0.0, -0.0, 1.0, -1.5, 2.5, -2.5, 1e-7, -3e-30, 88.0, INF, -INF, NAN])

F32, F16, I64, I32, B8 = torch.float32, torch.float16, torch.int64, torch.int32, torch.bool


def tol(dtype):
    return {torch.float16: 2e-3, torch.bfloat16: 2e-2}.get(dtype, 1e-5)


# --------------------------------------------------------------------------- unary ops
UNARY_FLOAT = {
    "exp": torch.exp,
    "exp2": torch.exp2,
    "expm1": torch.expm1,
    "log": torch.log,
    "log2": torch.log2,
    "log10": torch.log10,
    "log1p": torch.log1p,
    "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt,
    "reciprocal": torch.reciprocal,
    "sin": torch.sin,
    "cos": torch.cos,
    "tan": torch.tan,
    "asin": torch.asin,
    "acos": torch.acos,
    "atan": torch.atan,
    "sinh": torch.sinh,
    "cosh": torch.cosh,
    "tanh": torch.tanh,
    "asinh": torch.asinh,
    "acosh": torch.acosh,
    "atanh": torch.atanh,
    "erf": torch.erf,
    "erfc": torch.erfc,
    "erfinv": torch.erfinv,
    "sigmoid": torch.sigmoid,
    "sinc": torch.sinc,
    "deg2rad": torch.deg2rad,
    "rad2deg": torch.rad2deg,
    "logit": torch.logit,
    "ndtr": torch.special.ndtr,
    "arccos": torch.arccos,
    "expit": torch.special.expit,
}
# Inputs inside each function's domain (outside it both sides give nan, which also compares).
DOMAIN = {
    "log": positive,
    "log2": positive,
    "log10": positive,
    "sqrt": positive,
    "rsqrt": positive,
    "acosh": lambda *s, dtype=F32: positive(*s, dtype=dtype) + 1,
    "asin": unit,
    "acos": unit,
    "atanh": unit,
    "erfinv": unit,
    "logit": lambda *s, dtype=F32: (unit(*s, dtype=dtype) + 1) / 2,
    "arccos": unit,
}


@pytest.mark.parametrize("dtype", [F32, F16], ids=["f32", "f16"])
@pytest.mark.parametrize("name", sorted(UNARY_FLOAT))
def test_unary_float(name, dtype):
    make = DOMAIN.get(name, r)
    x = make(3, 5, dtype=dtype)
    check_op(UNARY_FLOAT[name], (x,), rtol=tol(dtype), atol=tol(dtype))


@pytest.mark.parametrize("name", sorted(UNARY_FLOAT))
def test_unary_float_of_ints_promotes(name):
    check_op(UNARY_FLOAT[name], (torch.tensor([[0, 1, 2], [3, -1, 5]]),), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "name",
    [
        "exp",
        "log1p",
        "expm1",
        "erfc",
        "erfinv",
        "sinc",
        "tanh",
        "sigmoid",
        "sqrt",
        "log",
        "ndtr",
        "atan",
    ],
)
def test_unary_float_special_values(name):
    check_op(UNARY_FLOAT[name], (SPECIAL,), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["exp", "erfinv", "log1p", "logit"])
def test_unary_0d_and_empty(name):
    check_op(UNARY_FLOAT[name], (torch.tensor(0.25),))
    check_op(UNARY_FLOAT[name], (torch.zeros(0, 3),))


@pytest.mark.parametrize("name", ["exp", "erfinv", "expm1", "rsqrt", "sinc", "logit"])
def test_unary_dynamic(name):
    make = DOMAIN.get(name, r)
    check_op(
        UNARY_FLOAT[name],
        (make(3, 4),),
        dynamic_shapes=dynamic(make(3, 4)),
        second_args=(make(5, 2),),
    )


KEEP_DTYPE = {
    "abs": torch.abs,
    "neg": torch.neg,
    "sign": torch.sign,
    "sgn": torch.sgn,
    "ceil": torch.ceil,
    "floor": torch.floor,
    "round": torch.round,
    "trunc": torch.trunc,
    "frac": torch.frac,
    "square": torch.square,
    "positive": torch.positive,
    "fix": torch.fix,
    "round_2": lambda x: torch.round(x, decimals=2),
    "round_neg1": lambda x: torch.round(x * 100, decimals=-1),
    "bitwise_not": torch.bitwise_not,
    "signbit": torch.signbit,
    "isnan": torch.isnan,
    "isinf": torch.isinf,
    "isfinite": torch.isfinite,
    "isposinf": torch.isposinf,
    "isneginf": torch.isneginf,
    "nan_to_num": torch.nan_to_num,
    "nan_to_num_args": lambda x: torch.nan_to_num(x, 1.0, 2.0, -3.0),
    "real": torch.real,
    "conj": torch.conj_physical,
    "clone": torch.clone,
}
FLOAT_ONLY = {"frac", "round_2", "round_neg1", "bitwise_not"}
INT_OK = set(KEEP_DTYPE) - {"frac", "round_2", "round_neg1"}


@pytest.mark.parametrize(
    "dtype",
    [F32, F16, I64, torch.int8, torch.uint8, B8],
    ids=["f32", "f16", "i64", "i8", "u8", "b8"],
)
@pytest.mark.parametrize("name", sorted(KEEP_DTYPE))
def test_unary_keeps_dtype(name, dtype):
    if dtype.is_floating_point and name == "bitwise_not":
        pytest.skip("bitwise_not is defined for ints and bool")
    if not dtype.is_floating_point and name not in INT_OK:
        pytest.skip("float-only op")
    if dtype is B8 and name in (
        "neg",
        "sgn",
        "sign",
        "square",
        "abs",
        "nan_to_num",
        "ceil",
        "floor",
        "round",
        "trunc",
        "fix",
        "positive",
    ):
        pytest.skip("torch refuses this op on bool")
    x = r(4, 5, dtype=dtype)
    if dtype.is_floating_point:
        x = torch.cat([x.flatten(), SPECIAL.to(dtype)])
    check_op(KEEP_DTYPE[name], (x,), rtol=tol(dtype), atol=tol(dtype))


def test_signbit_of_negative_zero():
    check_op(torch.signbit, (torch.tensor([0.0, -0.0, -1.0, 2.0, -INF]),))


def test_trunc_keeps_negative_zero():
    program = check_op(torch.trunc, (torch.tensor([-0.5, 0.5, -2.7]),))
    got = run_onnx(program, (torch.tensor([-0.5, 0.5, -2.7]),))[0]
    assert math.copysign(1.0, float(got[0])) == -1.0


def test_copysign_of_zero_is_signed():
    program = check_op(
        torch.copysign, (torch.tensor([0.0, 2.0, 0.0]), torch.tensor([-1.0, -0.0, 1.0]))
    )
    got = run_onnx(program, (torch.tensor([0.0, 2.0, 0.0]), torch.tensor([-1.0, -0.0, 1.0])))[0]
    assert [math.copysign(1.0, float(v)) for v in got] == [-1.0, -1.0, 1.0]


def test_log2_log10_exact_at_powers():
    x = torch.tensor([2.0**k for k in range(-20, 40)] + [10.0**k for k in range(-10, 20)])
    check_op(lambda t: (torch.log2(t[:60]), torch.log10(t[60:])), (x,), rtol=0, atol=0)


def test_round_half_to_even():
    check_op(torch.round, (torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, 3.5]),), rtol=0, atol=0)


@pytest.mark.parametrize("opset", [17, 20])
def test_float16_classification_across_opsets(opset):
    # IsInf takes float16 only from opset 20.
    x = torch.tensor([NAN, INF, -INF, 1.0, -0.0], dtype=F16)
    check_op(
        lambda t: (
            t.isinf(),
            t.isposinf(),
            t.isneginf(),
            t.isfinite(),
            t.isnan(),
            torch.nan_to_num(t),
        ),
        (x,),
        opset=opset,
        rtol=0,
        atol=0,
    )


def test_nan_to_num_float16_uses_float16_limits():
    x = torch.tensor([NAN, INF, -INF, 1.0], dtype=F16)
    check_op(torch.nan_to_num, (x,), rtol=0, atol=0)


# --------------------------------------------------------------------------- precision
def _export_run(fn, x):
    program = exporter.export(Lambda(fn), (x,), optimize=False)
    return torch.from_numpy(run_onnx(program, (x,))[0])


def _max_relative_error(got, x, fn):
    exact = fn(x.double())
    ok = torch.isfinite(exact) & (exact != 0)
    return ((got.double() - exact).abs() / exact.abs())[ok].max().item()


def test_erfinv_matches_float32_to_a_few_ulp():
    x = torch.linspace(-1, 1, 200001)[1:-1]
    got = _export_run(torch.erfinv, x)
    assert _max_relative_error(got, x, torch.erfinv) < 5e-7
    torch.testing.assert_close(got, torch.erfinv(x), rtol=1e-6, atol=1e-7)


def test_erfinv_edges():
    x = torch.tensor([-1.0, 1.0, 0.0, 1.5, -2.0, NAN, 0.99999994, -1e-30])
    torch.testing.assert_close(_export_run(torch.erfinv, x), torch.erfinv(x), equal_nan=True)


def test_prims_erf_inv():
    check_op(lambda x: torch.ops.prims.erf_inv(x), (unit(3, 4),), rtol=1e-6, atol=1e-7)


def test_erfc_tail_keeps_relative_precision():
    x = torch.linspace(-9, 9, 20001)
    assert _max_relative_error(_export_run(torch.erfc, x), x, torch.erfc) < 1e-6


@pytest.mark.parametrize("fn", [torch.log1p, torch.expm1], ids=["log1p", "expm1"])
def test_log1p_expm1_tiny_inputs(fn):
    x = torch.cat([torch.logspace(-30, 1, 2001), -torch.logspace(-30, -0.01, 2001)])
    assert _max_relative_error(_export_run(fn, x), x, fn) < 5e-7


# ------------------------------------------------------------------------ binary arithmetic
BINARY = {
    "add": torch.add,
    "add_alpha": lambda a, b: torch.add(a, b, alpha=2),
    "sub": torch.sub,
    "sub_alpha": lambda a, b: torch.sub(a, b, alpha=3),
    "mul": torch.mul,
    "div": torch.div,
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "floor_divide": torch.floor_divide,
    "remainder": torch.remainder,
    "fmod": torch.fmod,
    "pow": torch.pow,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "fmax": torch.fmax,
    "fmin": torch.fmin,
    "atan2": torch.atan2,
    "hypot": torch.hypot,
    "logaddexp": torch.logaddexp,
    "logaddexp2": torch.logaddexp2,
    "xlogy": torch.xlogy,
    "xlog1py": torch.special.xlog1py,
    "copysign": torch.copysign,
    "heaviside": torch.heaviside,
    "float_power": torch.float_power,
    "rsub": torch.rsub,
    "true_divide": torch.true_divide,
    "nextafter": torch.nextafter,
    "eq": torch.eq,
    "ne": torch.ne,
    "lt": torch.lt,
    "le": torch.le,
    "gt": torch.gt,
    "ge": torch.ge,
    "logical_and": torch.logical_and,
    "logical_or": torch.logical_or,
    "logical_xor": torch.logical_xor,
    "bitwise_and": torch.bitwise_and,
    "bitwise_or": torch.bitwise_or,
    "bitwise_xor": torch.bitwise_xor,
    "lshift": torch.bitwise_left_shift,
    "rshift": torch.bitwise_right_shift,
}
FLOAT_BINARY = {"atan2", "hypot", "logaddexp", "logaddexp2", "xlogy", "xlog1py", "nextafter"}
PROMOTES_INTS = {"atan2", "xlogy", "xlog1py", "copysign"}
INT_BINARY_ONLY = {"bitwise_and", "bitwise_or", "bitwise_xor", "lshift", "rshift"}
NONZERO_DIVISOR = {"div_trunc", "div_floor", "floor_divide", "remainder", "fmod"}


def _binary_inputs(name, dtype):
    a, b = r(3, 4, dtype=dtype, seed=1), r(4, dtype=dtype, seed=2)
    if name in NONZERO_DIVISOR and not dtype.is_floating_point:
        b = torch.where(b == 0, torch.ones_like(b), b)
    if name == "pow" and not dtype.is_floating_point:
        b = b.abs()
    if name in ("lshift", "rshift"):
        b = r(4, dtype=dtype, low=0, high=5, seed=2)
    if name == "xlogy":
        a = torch.where(a > 1, torch.zeros_like(a), a)
    return a, b


@pytest.mark.parametrize(
    "dtype", [F32, F16, I64, torch.int8, torch.uint8], ids=["f32", "f16", "i64", "i8", "u8"]
)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary(name, dtype):
    if dtype.is_floating_point and name in INT_BINARY_ONLY:
        pytest.skip("integer-only op")
    if not dtype.is_floating_point and name in FLOAT_BINARY | {"copysign"}:
        if dtype is not I64 or name not in PROMOTES_INTS:
            pytest.skip("torch has no integer kernel; int -> float promotion runs on int64")
    if dtype is torch.uint8 and name in ("sub_alpha", "rsub"):
        pytest.skip("unsigned wrap-around is checked elsewhere")
    a, b = _binary_inputs(name, dtype)
    check_op(BINARY[name], (a, b), rtol=tol(dtype), atol=tol(dtype))


@pytest.mark.parametrize(
    "name",
    [
        "add_alpha",
        "div_floor",
        "remainder",
        "pow",
        "atan2",
        "logaddexp",
        "maximum",
        "lt",
        "lshift",
        "xlogy",
    ],
)
def test_binary_dynamic(name):
    dtype = I64 if name == "lshift" else F32
    a, b = _binary_inputs(name, dtype)
    a2, b2 = r(2, 6, dtype=dtype, seed=7), r(6, dtype=dtype, seed=8)
    if name == "lshift":
        b2 = b2.abs()
    check_op(BINARY[name], (a, b), dynamic_shapes=dynamic(a, b), second_args=(a2, b2))


@pytest.mark.parametrize("name", ["div_floor", "floor_divide", "remainder", "fmod", "div_trunc"])
def test_division_signs_ints(name):
    a = torch.tensor([7, -7, 7, -7, 0, 6, -6, 5])
    b = torch.tensor([2, 2, -2, -2, 3, -4, 4, 5])
    check_op(BINARY[name], (a, b), rtol=0, atol=0)


@pytest.mark.parametrize("name", ["div_floor", "floor_divide", "remainder", "fmod", "div_trunc"])
def test_division_signs_floats(name):
    a = torch.tensor([7.5, -7.5, 7.5, -7.5, 0.0, -0.0, 1.0, 5.0, INF, 3.0, -3.0])
    b = torch.tensor([2.0, 2.0, -2.0, -2.0, 3.0, 3.0, 0.1, 0.0, 2.0, INF, 0.0])
    check_op(BINARY[name], (a, b), rtol=1e-6, atol=1e-6)


def test_float_floor_divide_is_exact_where_a_over_b_rounds_up():
    # 1 / 0.1 rounds to 10.0 but 1 // 0.1 is 9 in torch (and Python).
    check_op(lambda a: torch.floor_divide(a, 0.1), (torch.tensor([1.0, 2.0, 0.3]),), rtol=0, atol=0)


@pytest.mark.parametrize("name", ["maximum", "minimum", "fmax", "fmin"])
def test_max_min_nan_semantics(name):
    a = torch.tensor([NAN, 1.0, NAN, 2.0, -0.0])
    b = torch.tensor([1.0, NAN, NAN, 3.0, 0.0])
    check_op(BINARY[name], (a, b))


def test_atan2_special_values():
    y = torch.tensor([0.0, -0.0, 0.0, -0.0, 1.0, -1.0, 1.0, -1.0, INF, -INF, INF, 2.0, NAN, 0.0])
    x = torch.tensor([1.0, 1.0, -1.0, -1.0, 0.0, 0.0, -INF, INF, INF, -INF, 1.0, -3.0, 1.0, 0.0])
    check_op(torch.atan2, (y, x), rtol=1e-6, atol=1e-6)


def test_nextafter_is_exact():
    x = torch.tensor([0.0, 1.0, 1.0, -1.0, 1e-40, 3.5, -2.0, 1e30, INF, NAN, 2.0, 0.0])
    y = torch.tensor([1.0, 2.0, 0.0, -INF, 0.0, 3.5, 5.0, -INF, 0.0, 1.0, NAN, -1.0])
    check_op(torch.nextafter, (x, y), rtol=0, atol=0)


def test_hypot_does_not_overflow():
    check_op(
        torch.hypot, (torch.tensor([1e30, 3.0, 0.0, INF]), torch.tensor([1e30, 4.0, 0.0, NAN]))
    )


def test_logaddexp_infinities():
    a = torch.tensor([INF, -INF, -INF, 1.0, 1000.0])
    b = torch.tensor([INF, -INF, 2.0, 1.0, -1000.0])
    check_op(torch.logaddexp, (a, b))
    check_op(torch.logaddexp2, (a, b))


def test_xlogy_zero_times_log_zero():
    x = torch.tensor([0.0, 0.0, 1.0, 2.0, 0.0])
    y = torch.tensor([0.0, NAN, 0.0, 3.0, -1.0])
    check_op(torch.xlogy, (x, y))
    check_op(torch.special.xlog1py, (x, y - 1))


# ------------------------------------------------------------------------ type promotion
PROMOTION = [
    ("int_plus_float_scalar", lambda x: x + 2.5, (r(3, dtype=I64),)),
    ("int_times_bool", lambda x, m: x * m, (r(3, dtype=I32), r(3, dtype=B8))),
    ("bool_plus_bool", lambda a, b: a + b, (r(4, dtype=B8), r(4, dtype=B8, seed=3))),
    ("bool_times_bool", lambda a, b: a * b, (r(4, dtype=B8), r(4, dtype=B8, seed=3))),
    ("f16_plus_float_scalar", lambda x: x + 2.5, (r(3, dtype=F16),)),
    ("f16_times_0d_f32", lambda x, s: x * s, (r(3, dtype=F16), torch.tensor(1.5))),
    ("int_times_0d_float", lambda x, s: x * s, (r(3, dtype=I64), torch.tensor(1.5))),
    ("int8_plus_int64_0d", lambda x, s: x + s, (r(3, dtype=torch.int8), torch.tensor(3))),
    ("int8_mul_wraps", lambda x: x * 50, (torch.tensor([3, -3, 100], dtype=torch.int8),)),
    ("uint8_sub_wraps", lambda x: x - 10, (torch.tensor([3, 200, 10], dtype=torch.uint8),)),
    ("uint8_neg_wraps", lambda x: -x, (torch.tensor([3, 200, 0], dtype=torch.uint8),)),
    ("int_div_is_float", lambda a, b: a / b, (torch.tensor([7, -7, 1]), torch.tensor([2, 2, 3]))),
    ("int_pow_float", lambda x: x**0.5, (torch.tensor([4, 9, 2]),)),
    ("int_pow_exact", lambda x: x**39, (torch.tensor([3, -3, 1, 2]),)),
    ("int_pow_wraps", lambda x: x**70, (torch.tensor([3, 2, -1]),)),
    ("int_pow_zero", lambda x: x**0, (torch.tensor([3, 0, -1]),)),
    (
        "int_pow_tensor_negative",
        lambda a, b: a**b,
        (torch.tensor([2, 1, -1, -1, 0, 3]), torch.tensor([-1, -5, -3, -2, 2, 3])),
    ),
    ("scalar_pow_tensor", lambda x: 2**x, (r(4),)),
    ("int_scalar_pow_tensor", lambda x: 3**x, (torch.tensor([0, 1, 5]),)),
    ("float_scalar_pow_int_tensor", lambda x: 1.5**x, (torch.tensor([0, 1, 5]),)),
    ("float_power_int", torch.float_power, (torch.tensor([2, 3]), torch.tensor([3, -1]))),
    ("compare_int_float_scalar", lambda x: x < 2.5, (r(5, dtype=I64),)),
    ("compare_bool", lambda a, b: a < b, (r(4, dtype=B8), r(4, dtype=B8, seed=3))),
    (
        "compare_f16_f32",
        lambda a, b: a == b,
        (torch.tensor([1.0, 2.0], dtype=F16), torch.tensor([1.0, 2.1])),
    ),
    ("eq_scalar", lambda x: x.eq(2), (torch.tensor([1.0, 2.0, NAN]),)),
    ("ne_nan", lambda x: x != x, (torch.tensor([1.0, NAN]),)),
    ("rsub_scalar", lambda x: 1 - x, (r(3, dtype=I64),)),
    ("radd_float_int", lambda x: 1.5 + x, (r(3, dtype=I32),)),
    ("rdiv_int", lambda x: 3 / x, (torch.tensor([1, 2, 4]),)),
    ("rmod_float", lambda x: 5.5 % x, (torch.tensor([2.0, -2.0, 3.0]),)),
    ("add_int_alpha", lambda a, b: torch.add(a, b, alpha=-2), (r(3, dtype=I64), r(3, dtype=I64))),
    (
        "int16_ops",
        lambda a, b: (a + b, a * b, a - b, a // b, torch.maximum(a, b), a.abs()),
        (
            torch.tensor([3, -300, 7], dtype=torch.int16),
            torch.tensor([2, 5, -3], dtype=torch.int16),
        ),
    ),
    (
        "uint8_ops",
        lambda a, b: (a * b, a // b, a % b, torch.minimum(a, b), a > b),
        (torch.tensor([3, 200, 7], dtype=torch.uint8), torch.tensor([2, 5, 3], dtype=torch.uint8)),
    ),
    (
        "f64",
        lambda a: (a.tan(), torch.erfinv(a * 0.1), a.atan(), a * 2),
        (r(3, dtype=torch.float64),),
    ),
]


@pytest.mark.parametrize(("fn", "args"), [c[1:] for c in PROMOTION], ids=[c[0] for c in PROMOTION])
def test_type_promotion(fn, args):
    dtypes = {a.dtype for a in args}
    t = max((tol(d) for d in dtypes), default=1e-5)
    if torch.bfloat16 in dtypes:
        t = 2e-2
    check_op(fn, args, rtol=t, atol=t)


BF16_OPS = {
    "add": lambda a, b: a + b,
    "mul_scalar": lambda a, b: a * 2,
    "exp": lambda a, b: a.exp(),
    "clamp": lambda a, b: a.clamp(0, 1),
    "gt": lambda a, b: a > b,
    "where": lambda a, b: torch.where(a > b, a, b),
    "erfinv": lambda a, b: torch.erfinv(a * 0.1),
    "gelu": lambda a, b: torch.nn.functional.gelu(a),
    "abs": lambda a, b: a.abs(),
    "neg": lambda a, b: -a,
    "div_floor": lambda a, b: a // b,
    "isnan": lambda a, b: a.isnan(),
}


@pytest.mark.parametrize("name", sorted(BF16_OPS))
def test_bfloat16(name):
    # onnxruntime cannot feed bfloat16 from numpy: the bfloat16 work happens inside the graph.
    def fn(a, b):
        out = BF16_OPS[name](a.bfloat16(), b.bfloat16())
        return out.float() if out.dtype == torch.bfloat16 else out

    check_op(fn, (r(6), r(6, seed=5)), rtol=2e-2, atol=2e-2)


def test_bfloat16_and_float32_constants_of_equal_value_in_one_graph():
    check_op(
        lambda a: (a.bfloat16().clamp(0, 1).float(), torch.erfinv(a * 0.1)),
        (r(6),),
        rtol=2e-2,
        atol=2e-2,
    )


# -------------------------------------------------------------------------- bitwise
@pytest.mark.parametrize("dtype", [I64, I32, torch.int16, torch.int8, torch.uint8])
def test_shifts_past_width_and_negative_values(dtype):
    bits = torch.iinfo(dtype).bits
    low = 0 if dtype is torch.uint8 else -100
    a = torch.tensor([1, 3, low, low + 1, 100, 0, 5, low], dtype=dtype)
    b = torch.tensor([0, 2, 3, 1, bits - 1, bits, bits + 3, bits - 1], dtype=dtype)
    check_op(lambda x, y: (x << y, x >> y), (a, b), rtol=0, atol=0)


def test_shift_by_python_scalar():
    check_op(
        lambda x: (x << 3, x >> 2, torch.bitwise_left_shift(x, 1)),
        (torch.tensor([-5, 7, 1 << 40]),),
        rtol=0,
        atol=0,
    )


def test_bitwise_bool_and_scalar():
    a, b = r(6, dtype=B8), r(6, dtype=B8, seed=4)
    check_op(lambda x, y: (x & y, x | y, x ^ y, ~x), (a, b))
    check_op(lambda x: (x & 6, x | 1, x ^ -1), (r(5, dtype=I64),))


def test_bitwise_not_at_opset_17():
    check_op(lambda x: (~x, ~x.to(torch.uint8)), (torch.tensor([0, 5, -7]),), opset=17)


def test_bitwise_and_on_ints_at_opset_17_is_refused_clearly():
    with pytest.raises(exporter.OnnxExporterError, match="opset_version >= 18"):
        exporter.export(
            Lambda(lambda a, b: a & b), (r(3, dtype=I64), r(3, dtype=I64)), opset_version=17
        )


def test_bool_bitwise_at_opset_17():
    check_op(lambda a, b: a & b, (r(3, dtype=B8), r(3, dtype=B8, seed=2)), opset=17)


# ------------------------------------------------------------------- clamp, where, lerp ...
CLAMP = [
    ("clamp_scalars", lambda x: x.clamp(-1, 1), (r(3, 4),)),
    ("clamp_min_only", lambda x: x.clamp(min=0.5), (r(3, 4),)),
    ("clamp_max_only", lambda x: torch.clamp_max(x, 0.5), (r(3, 4),)),
    ("clamp_min_gt_max", lambda x: x.clamp(1, -1), (r(3, 4),)),
    ("clamp_nan", lambda x: x.clamp(-1, 1), (torch.tensor([NAN, 2.0, -2.0]),)),
    ("clamp_int", lambda x: x.clamp(-2, 2), (r(3, 4, dtype=I64),)),
    ("clamp_int8", lambda x: x.clamp(-2, 2), (r(3, 4, dtype=torch.int8),)),
    ("clamp_int16", lambda x: x.clamp(min=0), (r(3, 4, dtype=torch.int16),)),
    ("clamp_int_float_bound", lambda x: x.clamp(0.5, 2.5), (r(3, 4, dtype=I64),)),
    ("clamp_f16", lambda x: x.clamp(-1, 1), (r(3, 4, dtype=F16),)),
    ("clamp_tensors", lambda x, lo, hi: x.clamp(lo, hi), (r(3, 4), r(4) - 1, r(3, 1) + 1)),
    ("clamp_tensor_min", lambda x, lo: torch.clamp_min(x, lo), (r(3, 4), r(4))),
    (
        "clamp_tensor_nan_bound",
        lambda x, lo: x.clamp(min=lo),
        (torch.tensor([1.0, 2.0]), torch.tensor([NAN, 0.0])),
    ),
    ("clip", lambda x: torch.clip(x, -0.5, 0.5), (r(3, 4),)),
    ("where", lambda c, a, b: torch.where(c, a, b), (r(3, 4, dtype=B8), r(3, 4), r(4))),
    ("where_scalar_other", lambda c, a: torch.where(c, a, 0.0), (r(3, 4, dtype=B8), r(3, 4))),
    (
        "where_scalar_self_int",
        lambda c, a: torch.where(c, 2, a),
        (r(3, 4, dtype=B8), r(3, 4, dtype=I64)),
    ),
    ("where_scalars", lambda c: torch.where(c, 1.5, -2.0), (r(3, 4, dtype=B8),)),
    (
        "where_bool_values",
        lambda c, a, b: torch.where(c, a, b),
        (r(5, dtype=B8), r(5, dtype=B8, seed=1), r(5, dtype=B8, seed=2)),
    ),
    (
        "where_int16_values",
        lambda c, a, b: torch.where(c, a, b),
        (r(5, dtype=B8), r(5, dtype=torch.int16, seed=1), r(5, dtype=torch.int16, seed=2)),
    ),
    (
        "where_mixed",
        lambda c, a, b: torch.where(c, a, b),
        (r(5, dtype=B8), r(5, dtype=I64), r(5, dtype=F16)),
    ),
    ("tensor_where", lambda a, c: a.where(c, -a), (r(3, 4), r(3, 4, dtype=B8))),
    ("lerp_scalar", lambda a, b: torch.lerp(a, b, 0.3), (r(3, 4), r(3, 4, seed=3))),
    ("lerp_scalar_high", lambda a, b: torch.lerp(a, b, 0.8), (r(3, 4), r(3, 4, seed=3))),
    ("lerp_tensor", lambda a, b, w: torch.lerp(a, b, w), (r(3, 4), r(3, 4, seed=3), unit(4))),
    ("addcmul", lambda s, a, b: torch.addcmul(s, a, b, value=0.5), (r(3, 4), r(4), r(3, 1))),
    ("addcdiv", lambda s, a, b: torch.addcdiv(s, a, b, value=2), (r(3, 4), r(4), positive(3, 1))),
    (
        "addcmul_int",
        lambda s, a, b: torch.addcmul(s, a, b, value=3),
        (r(3, dtype=I64), r(3, dtype=I64), r(3, dtype=I64)),
    ),
]


@pytest.mark.parametrize(("fn", "args"), [c[1:] for c in CLAMP], ids=[c[0] for c in CLAMP])
def test_clamp_where_lerp(fn, args):
    t = max(tol(a.dtype) for a in args)
    check_op(fn, args, rtol=t, atol=t)


def test_clamp_where_dynamic():
    args = (r(3, 4), r(4) - 1, r(3, 4, dtype=B8))

    def fn(x, lo, c):
        return torch.where(c, x.clamp(min=lo).clamp(max=1.0), torch.lerp(x, lo, 0.25))

    second = (r(5, 2), r(2) - 1, r(5, 2, dtype=B8))
    check_op(fn, args, dynamic_shapes=dynamic(*args), second_args=second)


# -------------------------------------------------------------------------- casts, copies
CAST_DTYPES = {
    "f32": F32,
    "f16": F16,
    "i64": I64,
    "i32": I32,
    "i8": torch.int8,
    "u8": torch.uint8,
    "b8": B8,
    "f64": torch.float64,
}


@pytest.mark.parametrize("target", list(CAST_DTYPES.values()), ids=list(CAST_DTYPES))
@pytest.mark.parametrize("source", [F32, I64, B8, F16], ids=["f32", "i64", "b8", "f16"])
def test_to_dtype(source, target):
    x = torch.tensor([0.0, 1.0, -2.75, 3.5, 100.25, -0.5])
    if target is torch.uint8:
        x = x.abs()
    x = x.to(source)
    check_op(lambda t: t.to(target), (x,), rtol=tol(target), atol=tol(target))


def test_to_bfloat16_and_back():
    check_op(
        lambda t: (t.bfloat16().float(), t.to(torch.bfloat16).to(torch.int32)),
        (torch.tensor([1.0, 2.5, -3.3, 1000.7]),),
        rtol=0,
        atol=0,
    )


def test_copy_like_ops():
    x = r(3, 4)
    check_op(
        lambda t: (
            t.clone(),
            t.detach(),
            t.contiguous(),
            t.type_as(t.int()),
            torch.ops.aten._to_copy(t, dtype=torch.float16),
            torch.ops.aten.copy(t, torch.tensor(2.0)),
            torch.ops.aten.copy(t.int(), t),
            torch.ops.aten.lift_fresh_copy(t),
        ),
        (x,),
        atol=1e-3,
        rtol=1e-3,
    )


def test_fills():
    x = r(3, 4)
    check_op(
        lambda t: (
            torch.zeros_like(t),
            torch.ones_like(t, dtype=torch.int32),
            torch.full_like(t, 7.5),
            torch.full_like(t, 3, dtype=B8),
            torch.ops.aten.fill(t, 2),
            torch.ops.aten.fill(t, torch.tensor(-1.5)),
            torch.empty_like(t).shape[0] + t,
        ),
        (x,),
        dynamic_shapes=dynamic(x),
        second_args=(r(2, 5),),
    )


def test_scalar_tensor():
    check_op(lambda t: t + torch.scalar_tensor(2.5) + torch.scalar_tensor(3, dtype=I64), (r(3),))


def test_real_to_complex_cast_and_parts():
    check_op(
        lambda t: (torch.view_as_real(t.to(torch.complex64)), t.to(torch.complex64).real), (r(3),)
    )


# ------------------------------------------------------------------- symbolic arithmetic
class _SizeArithmetic(torch.nn.Module):
    def forward(self, x):
        n, m = x.shape
        flat = x.reshape(n * m)
        half = flat[: (n * m) // 2]
        scaled = x * (m / n) + (n % 3) + max(n, m) - min(n, m) + (-n)
        ratio = torch.full((2,), math.ceil(n / 2) + math.floor(m / 3) + n**2)
        return half, scaled, ratio


def test_symbolic_size_arithmetic():
    x = r(6, 4)
    check_op(_SizeArithmetic(), (x,), dynamic_shapes=({0: DYN, 1: DYN},), second_args=(r(7, 3),))


def test_symbolic_floordiv_of_negative():
    def fn(x):
        n = x.shape[0]
        return torch.full((3,), (2 - n) // 3) + torch.full((3,), (2 - n) % 3)

    x = r(5, 2)
    check_op(fn, (x,), dynamic_shapes=dynamic(x), second_args=(r(9, 2),))


def test_item_of_tensor():
    def fn(x, k):
        return x * k.item()

    check_op(fn, (r(3, 4), torch.tensor(2.5)))
    check_op(fn, (r(3, 4, dtype=I64), torch.tensor(3)))


def test_translations_registered_for_symbolic_targets():
    import operator

    from torch_onnx_conformance.exporter import DEFAULT_REGISTRY

    for target in (
        operator.add,
        operator.floordiv,
        operator.truediv,
        operator.mod,
        operator.pow,
        operator.neg,
        operator.eq,
        operator.and_,
        operator.not_,
        math.ceil,
        math.floor,
        math.sqrt,
        torch.sym_max,
        torch.sym_min,
        torch.sym_not,
        torch.sym_float,
        torch.sym_int,
        torch.sym_ite,
        torch.ops.aten._local_scalar_dense.default,
    ):
        assert target in DEFAULT_REGISTRY, target


# ----------------------------------------------------------------------------- structure
def test_one_onnx_op_for_plain_unary_functions():
    program = exporter.export(Lambda(torch.tanh), (r(3, 4),), optimize=False)
    ops = [n.op_type for n in program.model_proto.graph.node]
    assert ops == ["Tanh"]


def test_int_input_to_float_unary_is_cast_once():
    program = exporter.export(Lambda(torch.exp), (r(3, dtype=I64),), optimize=False)
    ops = [n.op_type for n in program.model_proto.graph.node]
    assert ops == ["Cast", "Exp"]
    onnx.checker.check_model(program.model_proto, full_check=True)


# ----------------------------------------------------------------------------------- prims
PRIMS = torch.ops.prims


def test_prims_float():
    a, b = r(3, 4, seed=1), r(3, 4, seed=2)
    check_op(
        lambda x, y: (
            PRIMS.add(x, y),
            PRIMS.div(x, y),
            PRIMS.exp(x),
            PRIMS.cbrt(x),
            PRIMS.where(x > y, x, y),
            PRIMS.fmod(x, y),
            PRIMS.remainder(x, y),
            PRIMS.maximum(x, y),
            PRIMS.convert_element_type(x, I32),
            PRIMS.erf_inv(x * 0.1),
            PRIMS.trunc(x),
            PRIMS.pow(x.abs(), y),
        ),
        (a, b),
        rtol=1e-5,
        atol=1e-5,
    )


def test_prims_int_division_truncates():
    a, b = torch.tensor([7, -7, 5, -9]), torch.tensor([2, 2, -3, 4])
    check_op(
        lambda x, y: (
            PRIMS.div(x, y),
            PRIMS.remainder(x, y),
            PRIMS.fmod(x, y),
            PRIMS.shift_left(x, y.abs()),
            PRIMS.shift_right_arithmetic(x, y.abs()),
        ),
        (a, b),
        rtol=0,
        atol=0,
    )


def test_prims_iota_and_fill():
    x = r(5, 3)

    def fn(t):
        n = t.shape[0]
        ramp = PRIMS.iota(n, start=2, step=3, dtype=I64, device="cpu", requires_grad=False)
        return (
            ramp,
            PRIMS.fill(t, 1.5),
            PRIMS.full_like(t, 2, dtype=F32, device="cpu", requires_grad=False),
        )

    check_op(fn, (x,), dynamic_shapes=dynamic(x), second_args=(r(7, 2),))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_zero_in_place_of_an_intermediate(dtype):
    # swin_v2's relative-position table zeroes part of a fresh tensor: aten.zero_ of a slice,
    # translated as its functional twin aten.zero without re-tracing the program.
    def fn(x):
        y = x * 1
        y[1:].zero_()
        return y + 1

    program = check_op(fn, (r(4, 3, dtype=dtype),))
    assert program.record.decomposition_reason is None
