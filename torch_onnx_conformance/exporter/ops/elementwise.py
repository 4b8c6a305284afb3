"""Elementwise math: arithmetic, unary functions, comparisons, logic, bitwise ops, dtype casts.

Conventions of this module:
- The FX output dtype (``ctx.out_dtype``) is torch's promoted result; inputs are cast to it (or,
  for comparisons, to ``ctx.result_type`` of the inputs) before the ONNX op.
- float16/bfloat16 go through one ONNX op directly when onnxruntime has the kernel; formulas of
  several ops compute in float32 and round once, like torch's opmath.
- ``_kernels.call`` casts around dtypes onnxruntime's CPU provider has no kernel for.
"""

from __future__ import annotations

import math
from typing import Any

import onnx_ir as ir
import torch

from torch_onnx_conformance.exporter import _dtypes
from torch_onnx_conformance.exporter.ops import _formulas as F
from torch_onnx_conformance.exporter.ops import _kernels
from torch_onnx_conformance.exporter.ops import _shape as S
from torch_onnx_conformance.exporter.ops._kernels import call
from torch_onnx_conformance.exporter.ops._opsets import INTRODUCED_IN
from torch_onnx_conformance.exporter.ops._registry import translates

aten = torch.ops.aten
prims = torch.ops.prims


# ----------------------------------------------------------------------------- helpers
def _is_float(dtype: torch.dtype | None) -> bool:
    return dtype is not None and dtype.is_floating_point


def _is_signed_int(dtype: torch.dtype | None) -> bool:
    return dtype in (torch.int8, torch.int16, torch.int32, torch.int64)


def _float_out(ctx, x: ir.Value) -> torch.dtype:
    """The result dtype of an int-to-float op on ``x`` (int and bool become float32)."""
    out = ctx.out_dtype
    if _is_float(out):
        return out
    dtype = ctx.dtype(x)
    return dtype if _is_float(dtype) else torch.get_default_dtype()


def _opmath(ctx, *values: Any, dtype: torch.dtype) -> list[ir.Value]:
    """Values (or Python scalars) in the dtype a formula for ``dtype`` results is computed in."""
    return ctx.promote(*values, dtype=_kernels.opmath_dtype(dtype))


def _full_like(ctx, x: ir.Value, value: Any, dtype: torch.dtype) -> ir.Value:
    """A tensor shaped like ``x`` filled with ``value`` (a Python number or a 0-d value)."""
    shape = ctx.op.Shape(x)
    if isinstance(value, ir.Value):
        return ctx.op.Expand(ctx.cast(ctx.op.Reshape(value, []), dtype), shape)
    if dtype.is_floating_point:
        value = float(value)
    elif dtype == torch.bool:
        value = bool(value)
    else:
        value = int(value)
    return S.constant_of_shape(ctx, shape, value, dtype)


def _isinf(ctx, x: ir.Value, **attributes: Any) -> ir.Value:
    if ctx.dtype(x) in (torch.float16, torch.bfloat16) and not ctx.has("IsInf-f16"):
        x = ctx.cast(x, torch.float32)  # exact: every float16/bfloat16 value is a float32
    return ctx.op.IsInf(x, **attributes)


def _bool(ctx, x: Any) -> Any:
    if isinstance(x, ir.Value):
        return ctx.cast(x, torch.bool)
    return ctx.const(bool(x), torch.bool)


def _needs_opset(ctx, feature: str, what: str) -> None:
    if not ctx.has(feature):
        raise NotImplementedError(
            f"{what} needs ONNX {feature}, which opset {ctx.opset} does not have; export with "
            f"opset_version >= {INTRODUCED_IN[feature]}"
        )


# --------------------------------------------------------------------------- dtype casts
@translates(
    aten._to_copy.default,
    aten.to.dtype,
    aten.to.dtype_layout,
    aten.to.device,
    aten.to.other,
    aten.to.prim_dtype,
    aten.to.prim_Device,
    aten.to.prim_other,
    aten.type_as.default,
    prims.convert_element_type.default,
)
def to_dtype(ctx, self, *args, **kwargs):
    # Every overload's target dtype is the FX output dtype; device/layout/memory format have
    # no meaning in ONNX.
    return convert(ctx, self, ctx.out_dtype)


def convert(ctx, x: ir.Value, dtype: torch.dtype | None) -> ir.Value:
    """Cast, including real <-> complex (complex values carry a trailing (real, imag) axis)."""
    meta = ctx.meta(x)
    src_complex = isinstance(meta, torch.Tensor) and meta.dtype.is_complex
    if dtype is None or (ctx.dtype(x) == dtype and not src_complex):
        return ctx.op.Identity(x)
    if dtype.is_complex and not src_complex:
        real_dtype = _dtypes.COMPLEX_TO_REAL[dtype]
        real = ctx.op.Unsqueeze(ctx.cast(x, real_dtype), [-1])
        return ctx.op.Concat(real, _full_like(ctx, real, 0, real_dtype), axis=-1)
    if src_complex and not dtype.is_complex:
        return ctx.cast(ctx.op.Squeeze(ctx.op.Slice(x, [0], [1], [-1]), [-1]), dtype)
    return ctx.op.Cast(x, to=_dtypes.to_ir(_dtypes.COMPLEX_TO_REAL.get(dtype, dtype)))


#: dtypes onnxruntime's BitCast kernel reads and writes.
_BITCAST_DTYPES = frozenset(
    [torch.float32, torch.float64, torch.float16, torch.bfloat16]
    + [torch.int8, torch.int16, torch.int32, torch.int64]
    + [torch.uint8, torch.uint16, torch.uint32, torch.uint64]
)


@translates(aten.view.dtype)
def view_dtype(ctx, self, dtype):
    source = ctx.dtype(self)
    if source == dtype:
        return ctx.op.Identity(self)
    if {source, dtype} == {_dtypes.FLOAT4_X2, torch.uint8}:  # float4 pairs <-> their bytes
        from torch_onnx_conformance.exporter.ops import _float4

        return (
            _float4.to_bytes(ctx, self) if dtype == torch.uint8 else _float4.from_bytes(ctx, self)
        )
    if source.itemsize != dtype.itemsize or not {source, dtype} <= _BITCAST_DTYPES:
        raise NotImplementedError(
            f"tensor.view({dtype}) of a {source} tensor is not exported: only a reinterpretation "
            f"between same-size dtypes onnxruntime's BitCast runs "
            f"({', '.join(sorted(str(d) for d in _BITCAST_DTYPES))}) is; use a cast (.to) or "
            f"arithmetic instead"
        )
    _needs_opset(ctx, "BitCast", f"tensor.view({dtype})")
    return ctx.op.BitCast(self, to=_dtypes.to_ir(dtype))


# alias/alias_copy live with the views in shape.py.
@translates(
    aten.clone.default,
    aten.lift_fresh_copy.default,
    aten.detach.default,
    aten.positive.default,
    aten.resolve_conj.default,
    aten.resolve_neg.default,
    aten.detach_copy.default,
    aten.contiguous.default,
)
def identity(ctx, self, *args, **kwargs):
    return ctx.op.Identity(self)


@translates(aten.copy.default)
def copy(ctx, self, src, non_blocking=False):
    # The result has self's shape and dtype, with src's values broadcast into it.
    return ctx.op.Expand(convert(ctx, src, ctx.dtype(self)), ctx.op.Shape(self))


# -------------------------------------------------------------------- complex on real data
def _is_complex(ctx, x: ir.Value) -> bool:
    meta = ctx.meta(x)
    return isinstance(meta, torch.Tensor) and meta.dtype.is_complex


@translates(aten.real.default)
def real(ctx, self):
    if _is_complex(ctx, self):
        return ctx.op.Squeeze(ctx.op.Slice(self, [0], [1], [-1]), [-1])
    return ctx.op.Identity(self)


@translates(aten.imag.default)
def imag(ctx, self):
    if not _is_complex(ctx, self):
        raise TypeError("imag is not defined for real tensors (torch raises too)")
    return ctx.op.Squeeze(ctx.op.Slice(self, [1], [2], [-1]), [-1])


@translates(aten.conj.default, aten._conj.default, aten.conj_physical.default)
def conj(ctx, self):
    if _is_complex(ctx, self):
        dtype = ctx.dtype(self)
        return ctx.op.Mul(self, ctx.const([1, -1], dtype))
    return ctx.op.Identity(self)


# ---------------------------------------------------------------------- fills and scalars
@translates(aten.fill.Scalar, aten.fill.Tensor)
def fill(ctx, self, value):
    return _full_like(ctx, self, value, ctx.out_dtype)


@translates(aten.zeros_like.default, aten.empty_like.default, aten.zero.default)
def zeros_like(ctx, self, **kwargs):
    # empty_like's contents are unspecified; zeros are a valid (and deterministic) choice.
    return _full_like(ctx, self, 0, ctx.out_dtype)


@translates(aten.ones_like.default)
def ones_like(ctx, self, **kwargs):
    return _full_like(ctx, self, 1, ctx.out_dtype)


@translates(aten.full_like.default)
def full_like(ctx, self, fill_value, **kwargs):
    return _full_like(ctx, self, fill_value, ctx.out_dtype)


@translates(aten.scalar_tensor.default)
def scalar_tensor(ctx, s, **kwargs):
    dtype = ctx.out_dtype or torch.get_default_dtype()
    if isinstance(s, ir.Value):
        return ctx.cast(ctx.op.Reshape(s, []), dtype)
    return ctx.op.Identity(ctx.const(s, dtype))


# ------------------------------------------------------------------- unary float functions
# torch promotes int and bool inputs of these to float32; onnxruntime runs each as one op.
_FLOAT_UNARY = {
    aten.exp: "Exp",
    aten.log: "Log",
    aten.sqrt: "Sqrt",
    aten.sin: "Sin",
    aten.cos: "Cos",
    aten.tan: "Tan",
    aten.asin: "Asin",
    aten.acos: "Acos",
    aten.atan: "Atan",
    aten.sinh: "Sinh",
    aten.cosh: "Cosh",
    aten.asinh: "Asinh",
    aten.acosh: "Acosh",
    aten.atanh: "Atanh",
    aten.tanh: "Tanh",
    aten.erf: "Erf",
    aten.sigmoid: "Sigmoid",
    aten.reciprocal: "Reciprocal",
}


def _float_unary(onnx_op: str):
    def translation(ctx, self):
        return call(ctx, onnx_op, ctx.cast(self, _float_out(ctx, self)))

    translation.__qualname__ = translation.__name__ = f"float_unary_{onnx_op}"
    return translation


for _packet, _onnx_op in _FLOAT_UNARY.items():
    translates(_packet.default)(_float_unary(_onnx_op))


def _float_formula(formula):
    """Register-able translation: cast to the float result dtype, apply ``formula`` in opmath."""

    def translation(ctx, self):
        dtype = _float_out(ctx, self)
        (x,) = _opmath(ctx, self, dtype=dtype)
        return ctx.cast(formula(ctx, x), dtype)

    translation.__qualname__ = translation.__name__ = f"float_formula_{formula.__name__}"
    return translation


def _log_base(base: float):
    def log_base(ctx, x):
        # In double, log(x) / log(base) rounds to the exact float result at powers of the base
        # (log2(8) == 3, not 2.9999998), which code that floors or ceils the result relies on.
        dtype = ctx.dtype(x)
        wide = ctx.cast(x, torch.float64)
        out = ctx.op.Div(ctx.op.Log(wide), F.c(ctx, math.log(base), wide))
        return ctx.cast(out, dtype)

    log_base.__name__ = f"log{base:g}"
    return log_base


def _exp2(ctx, x):
    return ctx.op.Pow(F.c(ctx, 2, x), x)


def _rsqrt(ctx, x):
    return ctx.op.Reciprocal(ctx.op.Sqrt(x))


def _frac(ctx, x):
    return ctx.op.Sub(x, F.trunc(ctx, x))


def _sinc(ctx, x):
    pi_x = ctx.op.Mul(x, F.c(ctx, math.pi, x))
    ratio = ctx.op.Div(ctx.op.Sin(pi_x), pi_x)
    return ctx.op.Where(ctx.op.Equal(x, F.c(ctx, 0, x)), F.c(ctx, 1, x), ratio)


def _deg2rad(ctx, x):
    return ctx.op.Mul(x, F.c(ctx, math.pi / 180, x))


def _rad2deg(ctx, x):
    return ctx.op.Mul(x, F.c(ctx, 180 / math.pi, x))


for _packet, _formula in {
    aten.log2: _log_base(2),
    aten.log10: _log_base(10),
    aten.log1p: F.log1p,
    aten.expm1: F.expm1,
    aten.exp2: _exp2,
    aten.rsqrt: _rsqrt,
    aten.erfc: F.erfc,
    aten.erfinv: F.erfinv,
    aten.sinc: _sinc,
    aten.deg2rad: _deg2rad,
    aten.rad2deg: _rad2deg,
}.items():
    translates(_packet.default)(_float_formula(_formula))

translates(prims.erf_inv.default)(_float_formula(F.erfinv))


@translates(aten.frac.default)
def frac(ctx, self):
    (x,) = _opmath(ctx, self, dtype=ctx.dtype(self))
    return ctx.cast(_frac(ctx, x), ctx.dtype(self))


@translates(aten.logit.default)
def logit(ctx, self, eps=None):
    dtype = _float_out(ctx, self)
    (x,) = _opmath(ctx, self, dtype=dtype)
    if eps is not None:
        lo, hi = F.c(ctx, eps, x), F.c(ctx, 1 - eps, x)
        if eps <= 0.5:
            x = ctx.op.Clip(x, lo, hi)
        else:
            # torch tests x < eps first, so with eps > 0.5 the bounds cross instead of pinning
            # everything to 1 - eps the way Clip would.
            x = ctx.op.Where(ctx.op.Less(x, lo), lo, ctx.op.Where(ctx.op.Greater(x, hi), hi, x))
    out = call(ctx, "Log", ctx.op.Div(x, ctx.op.Sub(F.c(ctx, 1, x), x)))
    return ctx.cast(out, dtype)


# ----------------------------------------------------------- unary ops that keep int dtypes
@translates(aten.abs.default)
def abs_(ctx, self):
    if ctx.dtype(self) == torch.bool:
        return ctx.op.Identity(self)
    return call(ctx, "Abs", self)


@translates(aten.neg.default)
def neg(ctx, self):
    dtype = ctx.dtype(self)
    if dtype in (torch.uint8, torch.uint16, torch.uint32, torch.uint64):
        # Unsigned negation wraps around: 0 - x in the same dtype.
        return ctx.op.Sub(ctx.scalar_like(0, self), self)
    return call(ctx, "Neg", self)


@translates(aten.sign.default, aten.sgn.default)
def sign(ctx, self):
    dtype = ctx.dtype(self)
    if dtype == torch.bool:
        return ctx.op.Identity(self)
    out = call(ctx, "Sign", self)
    if _is_float(dtype):
        # torch's sign(nan) is 0.
        out = call(ctx, "Where", ctx.op.IsNaN(self), ctx.scalar_like(0, self), out, _dtype=dtype)
    return out


def _rounding(onnx_op: str):
    def translation(ctx, self):
        if not _is_float(ctx.dtype(self)):
            return ctx.op.Identity(self)  # integers are already whole
        return call(ctx, onnx_op, self)

    translation.__qualname__ = translation.__name__ = f"rounding_{onnx_op}"
    return translation


translates(aten.ceil.default)(_rounding("Ceil"))
translates(aten.floor.default)(_rounding("Floor"))
translates(aten.round.default)(_rounding("Round"))  # both round half to even


@translates(aten.trunc.default, aten.fix.default)
def trunc(ctx, self):
    dtype = ctx.dtype(self)
    if not _is_float(dtype):
        return ctx.op.Identity(self)
    (x,) = _opmath(ctx, self, dtype=dtype)
    return ctx.cast(F.trunc(ctx, x), dtype)


@translates(aten.round.decimals)
def round_decimals(ctx, self, *, decimals=0):
    dtype = ctx.dtype(self)
    if not _is_float(dtype):
        return ctx.op.Identity(self)
    if decimals == 0:
        return call(ctx, "Round", self)
    (x,) = _opmath(ctx, self, dtype=dtype)
    # torch scales by a power of ten computed exactly in that direction: multiply then divide
    # for positive decimals, divide then multiply for negative ones.
    scale = F.c(ctx, 10.0 ** abs(decimals), x)
    if decimals > 0:
        out = ctx.op.Div(ctx.op.Round(ctx.op.Mul(x, scale)), scale)
    else:
        out = ctx.op.Mul(ctx.op.Round(ctx.op.Div(x, scale)), scale)
    return ctx.cast(out, dtype)


@translates(aten.square.default)
def square(ctx, self):
    x = ctx.cast(self, ctx.out_dtype)
    return call(ctx, "Mul", x, x)


@translates(aten.signbit.default)
def signbit(ctx, self):
    dtype = ctx.dtype(self)
    if _is_float(dtype):
        return F.signbit(ctx, ctx.cast(self, _kernels.opmath_dtype(dtype)))
    if _is_signed_int(dtype):
        return call(ctx, "Less", self, ctx.scalar_like(0, self))
    return _full_like(ctx, self, False, torch.bool)


# -------------------------------------------------------------------- float classification
@translates(aten.isnan.default)
def isnan(ctx, self):
    if not _is_float(ctx.dtype(self)):
        return _full_like(ctx, self, False, torch.bool)
    return ctx.op.IsNaN(self)


@translates(aten.isinf.default)
def isinf(ctx, self):
    if not _is_float(ctx.dtype(self)):
        return _full_like(ctx, self, False, torch.bool)
    return _isinf(ctx, self)


@translates(aten.isposinf.default)
def isposinf(ctx, self):
    if not _is_float(ctx.dtype(self)):
        return _full_like(ctx, self, False, torch.bool)
    return _isinf(ctx, self, detect_negative=0)


@translates(aten.isneginf.default)
def isneginf(ctx, self):
    if not _is_float(ctx.dtype(self)):
        return _full_like(ctx, self, False, torch.bool)
    return _isinf(ctx, self, detect_positive=0)


@translates(aten.isfinite.default)
def isfinite(ctx, self):
    if not _is_float(ctx.dtype(self)):
        return _full_like(ctx, self, True, torch.bool)
    return ctx.op.Not(ctx.op.Or(ctx.op.IsNaN(self), _isinf(ctx, self)))


@translates(aten.nan_to_num.default)
def nan_to_num(ctx, self, nan=None, posinf=None, neginf=None):
    dtype = ctx.dtype(self)
    if not _is_float(dtype):
        return ctx.op.Identity(self)
    info = torch.finfo(dtype)
    nan = 0.0 if nan is None else nan
    posinf = info.max if posinf is None else posinf
    neginf = info.min if neginf is None else neginf
    out = call(ctx, "Where", ctx.op.IsNaN(self), ctx.scalar_like(nan, self), self, _dtype=dtype)
    out = call(
        ctx,
        "Where",
        _isinf(ctx, self, detect_negative=0),
        ctx.scalar_like(posinf, self),
        out,
        _dtype=dtype,
    )
    return call(
        ctx,
        "Where",
        _isinf(ctx, self, detect_positive=0),
        ctx.scalar_like(neginf, self),
        out,
        _dtype=dtype,
    )


# ------------------------------------------------------------------------------ arithmetic
def _alpha_times(ctx, value: ir.Value, alpha: Any) -> ir.Value:
    if isinstance(alpha, ir.Value) or alpha != 1:
        return call(ctx, "Mul", value, ctx.scalar(alpha, ctx.dtype(value)))
    return value


@translates(aten.add.Tensor, aten.add.Scalar)
def add(ctx, self, other, alpha=1):
    a, b = ctx.promote(self, other, dtype=ctx.out_dtype)
    if ctx.out_dtype == torch.bool:
        return ctx.op.Or(a, b)  # torch adds bools as logical or
    return call(ctx, "Add", a, _alpha_times(ctx, b, alpha))


@translates(aten.sub.Tensor, aten.sub.Scalar)
def sub(ctx, self, other, alpha=1):
    a, b = ctx.promote(self, other, dtype=ctx.out_dtype)
    return call(ctx, "Sub", a, _alpha_times(ctx, b, alpha))


@translates(aten.rsub.Tensor, aten.rsub.Scalar)
def rsub(ctx, self, other, alpha=1):
    a, b = ctx.promote(self, other, dtype=ctx.out_dtype)
    return call(ctx, "Sub", b, _alpha_times(ctx, a, alpha))


@translates(aten.mul.Tensor, aten.mul.Scalar)
def mul(ctx, self, other):
    a, b = ctx.promote(self, other, dtype=ctx.out_dtype)
    if ctx.out_dtype == torch.bool:
        return ctx.op.And(a, b)
    return call(ctx, "Mul", a, b)


@translates(aten.div.Tensor, aten.div.Scalar, aten.true_divide.Tensor, aten.true_divide.Scalar)
def div(ctx, self, other):
    a, b = ctx.promote(self, other, dtype=ctx.out_dtype)
    return call(ctx, "Div", a, b)


@translates(aten.div.Tensor_mode, aten.div.Scalar_mode)
def div_mode(ctx, self, other, *, rounding_mode=None):
    if rounding_mode is None:
        return div(ctx, self, other)
    if rounding_mode == "trunc":
        return _div_trunc(ctx, self, other)
    if rounding_mode == "floor":
        return _div_floor(ctx, self, other)
    raise ValueError(f"div rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")


@translates(aten.floor_divide.default, aten.floor_divide.Scalar)
def floor_divide(ctx, self, other):
    return _div_floor(ctx, self, other)


def _div_trunc(ctx, self, other):
    dtype = ctx.out_dtype
    if not _is_float(dtype):
        a, b = ctx.promote(self, other, dtype=dtype)
        return call(ctx, "Div", a, b)  # integer Div truncates toward zero
    # torch rounds the quotient to the tensor dtype before truncating it, so float16 stays
    # float16 here (a cast to float32 in between would let onnxruntime fuse away the rounding).
    a, b = ctx.promote(self, other, dtype=dtype)
    quotient = call(ctx, "Div", a, b)
    quotient = ctx.cast(quotient, _kernels.kernel_dtype("Floor", dtype))
    return ctx.cast(F.trunc(ctx, quotient), dtype)


def _div_floor(ctx, self, other):
    dtype = ctx.out_dtype
    if not _is_float(dtype):
        a, b = ctx.promote(self, other, dtype=dtype)
        compute = _kernels.kernel_dtype("Div", dtype)
        a, b = ctx.cast(a, compute), ctx.cast(b, compute)
        quotient = ctx.op.Div(a, b)
        remainder = ctx.op.Sub(a, ctx.op.Mul(quotient, b))
        zero = ctx.scalar_like(0, a)
        signs_differ = ctx.op.Xor(ctx.op.Less(remainder, zero), ctx.op.Less(b, zero))
        inexact = ctx.op.And(ctx.op.Not(ctx.op.Equal(remainder, zero)), signs_differ)
        out = ctx.op.Sub(quotient, ctx.cast(inexact, compute))
        return ctx.cast(out, dtype)
    a, b = _opmath(ctx, self, other, dtype=dtype)
    return ctx.cast(_float_floor_divide(ctx, a, b), dtype)


def _float_floor_divide(ctx, a: ir.Value, b: ir.Value) -> ir.Value:
    # torch divides (a - fmod(a, b)) / b, which is exact, instead of flooring a / b, whose
    # rounding can land on the next integer (1 // 0.1 is 9, while floor(1 / 0.1) is 10).
    zero, one = F.c(ctx, 0, a), F.c(ctx, 1, a)
    mod = ctx.op.Mod(a, b, fmod=1)
    quotient = ctx.op.Div(ctx.op.Sub(a, mod), b)
    mod_sign_wrong = ctx.op.And(
        ctx.op.Not(ctx.op.Equal(mod, zero)),
        ctx.op.Xor(ctx.op.Less(b, zero), ctx.op.Less(mod, zero)),
    )
    quotient = ctx.op.Where(mod_sign_wrong, ctx.op.Sub(quotient, one), quotient)
    floored = ctx.op.Floor(quotient)
    floored = ctx.op.Where(
        ctx.op.Greater(ctx.op.Sub(quotient, floored), F.c(ctx, 0.5, a)),
        ctx.op.Add(floored, one),
        floored,
    )
    true_quotient = ctx.op.Div(a, b)
    signed_zero = ctx.op.Where(F.signbit(ctx, true_quotient), F.c(ctx, -0.0, a), zero)
    out = ctx.op.Where(ctx.op.Equal(quotient, zero), signed_zero, floored)
    return ctx.op.Where(ctx.op.Equal(b, zero), true_quotient, out)


@translates(aten.remainder.Tensor, aten.remainder.Scalar, aten.remainder.Scalar_Tensor)
def remainder(ctx, self, other):
    dtype = ctx.out_dtype
    if not _is_float(dtype):
        a, b = ctx.promote(self, other, dtype=dtype)
        return call(ctx, "Mod", a, b)  # fmod=0: Python's sign-of-divisor remainder
    a, b = _opmath(ctx, self, other, dtype=dtype)
    zero = F.c(ctx, 0, a)
    mod = ctx.op.Mod(a, b, fmod=1)
    wrong_sign = ctx.op.And(
        ctx.op.Not(ctx.op.Equal(mod, zero)),
        ctx.op.Xor(ctx.op.Less(b, zero), ctx.op.Less(mod, zero)),
    )
    return ctx.cast(ctx.op.Where(wrong_sign, ctx.op.Add(mod, b), mod), dtype)


@translates(aten.fmod.Tensor, aten.fmod.Scalar)
def fmod(ctx, self, other):
    a, b = ctx.promote(self, other, dtype=ctx.out_dtype)
    return call(ctx, "Mod", a, b, fmod=1)


@translates(aten.pow.Tensor_Tensor, aten.pow.Tensor_Scalar, aten.pow.Scalar)
def pow_(ctx, self, exponent):
    dtype = ctx.out_dtype
    if not isinstance(exponent, ir.Value):
        if exponent == 1:
            return ctx.cast(ctx.op.Identity(self), dtype)
        if exponent == 2:
            x = ctx.cast(self, dtype)
            return call(ctx, "Mul", x, x)
        if not _is_float(dtype) and dtype != torch.bool and exponent >= 0:
            return _int_pow_by_squaring(ctx, ctx.cast(self, dtype), int(exponent))
    base, exp = ctx.promote(self, exponent, dtype=dtype)
    if _is_float(dtype) or dtype == torch.bool:
        return call(ctx, "Pow", base, exp)
    return _int_pow(ctx, base, exp)


def _int_pow_by_squaring(ctx, base: ir.Value, exponent: int) -> ir.Value:
    # Exact and wrapping on overflow like torch's integer pow; onnxruntime's int Pow goes
    # through double and loses the low bits above 2**53.
    result = None
    while exponent:
        if exponent & 1:
            result = base if result is None else call(ctx, "Mul", result, base)
        exponent >>= 1
        if exponent:
            base = call(ctx, "Mul", base, base)
    return result if result is not None else _full_like(ctx, base, 1, ctx.dtype(base))


def _int_pow(ctx, base: ir.Value, exp: ir.Value) -> ir.Value:
    # Integer powers with negative exponents are 0 except for bases 1 and -1 (torch's rule);
    # a double Pow would give inf for 0 ** -1 and fractions elsewhere.
    dtype = ctx.dtype(base)
    zero, one = ctx.scalar_like(0, base), ctx.scalar_like(1, base)
    minus_one = ctx.scalar_like(-1, base) if _is_signed_int(dtype) else zero
    powered = call(ctx, "Pow", base, call(ctx, "Max", exp, zero))
    if not _is_signed_int(dtype):
        return powered
    odd = call(ctx, "Equal", call(ctx, "Mod", exp, ctx.scalar_like(2, base)), one)
    from_minus_one = call(ctx, "Where", odd, minus_one, one, _dtype=dtype)
    negative_result = call(
        ctx,
        "Where",
        call(ctx, "Equal", base, one),
        one,
        call(ctx, "Where", call(ctx, "Equal", base, minus_one), from_minus_one, zero, _dtype=dtype),
        _dtype=dtype,
    )
    return call(ctx, "Where", call(ctx, "Less", exp, zero), negative_result, powered, _dtype=dtype)


@translates(aten.float_power.Tensor_Tensor, aten.float_power.Tensor_Scalar, aten.float_power.Scalar)
def float_power(ctx, self, exponent):
    base, exp = ctx.promote(self, exponent, dtype=ctx.out_dtype)
    return call(ctx, "Pow", base, exp)


@translates(aten.atan2.default, aten.atan2.out, aten.arctan2.default)
def atan2(ctx, self, other, out=None):
    dtype = ctx.out_dtype if _is_float(ctx.out_dtype) else torch.get_default_dtype()
    y, x = _opmath(ctx, self, other, dtype=dtype)
    zero = F.c(ctx, 0, x)
    pi = F.c(ctx, math.pi, x)
    base = ctx.op.Atan(ctx.op.Div(y, x))
    # x < 0 needs a half turn, signed like y (signbit makes -0.0 pick -pi, like C atan2).
    turn = ctx.op.Where(F.signbit(ctx, y), ctx.op.Neg(pi), pi)
    x_negative = F.signbit(ctx, x)
    result = ctx.op.Where(x_negative, ctx.op.Add(base, turn), base)
    # x == 0: +-pi/2 by y's sign, 0 (signed) when y is also 0.
    half_pi = ctx.op.Where(F.signbit(ctx, y), F.c(ctx, -math.pi / 2, x), F.c(ctx, math.pi / 2, x))
    y_zero = ctx.op.Equal(y, zero)
    result = ctx.op.Where(ctx.op.And(ctx.op.Equal(x, zero), ctx.op.Not(y_zero)), half_pi, result)
    # y == 0 keeps y's sign when x >= 0 and is +-pi when x < 0 (-0.0 included).
    result = ctx.op.Where(y_zero, ctx.op.Where(x_negative, turn, y), result)
    # Both infinite: +-pi/4 or +-3pi/4.
    both_inf = ctx.op.And(ctx.op.IsInf(x), ctx.op.IsInf(y))
    quarter = ctx.op.Where(x_negative, F.c(ctx, 3 * math.pi / 4, x), F.c(ctx, math.pi / 4, x))
    quarter = ctx.op.Where(F.signbit(ctx, y), ctx.op.Neg(quarter), quarter)
    result = ctx.op.Where(both_inf, quarter, result)
    return ctx.cast(result, dtype)


@translates(aten.hypot.default)
def hypot(ctx, self, other):
    dtype = ctx.out_dtype
    a, b = _opmath(ctx, self, other, dtype=dtype)
    a, b = ctx.op.Abs(a), ctx.op.Abs(b)
    # Scaling by the larger magnitude avoids overflow of a^2 + b^2 (hypot(1e30, 1e30) is finite).
    hi, lo = ctx.op.Max(a, b), ctx.op.Min(a, b)
    ratio = ctx.op.Div(lo, hi)
    out = ctx.op.Mul(hi, ctx.op.Sqrt(ctx.op.Add(F.c(ctx, 1, a), ctx.op.Mul(ratio, ratio))))
    out = ctx.op.Where(ctx.op.Equal(hi, F.c(ctx, 0, a)), F.c(ctx, 0, a), out)
    # hypot(inf, nan) is inf.
    infinite = ctx.op.Or(ctx.op.IsInf(a), ctx.op.IsInf(b))
    out = ctx.op.Where(infinite, F.c(ctx, math.inf, a), out)
    return ctx.cast(out, dtype)


@translates(aten.logaddexp.default)
def logaddexp(ctx, self, other):
    return _logaddexp(ctx, self, other, base_e=True)


@translates(aten.logaddexp2.default)
def logaddexp2(ctx, self, other):
    return _logaddexp(ctx, self, other, base_e=False)


def _logaddexp(ctx, self, other, *, base_e: bool):
    dtype = ctx.out_dtype
    a, b = _opmath(ctx, self, other, dtype=dtype)
    hi = ctx.op.Max(a, b)
    gap = ctx.op.Neg(ctx.op.Abs(ctx.op.Sub(a, b)))
    if base_e:
        out = ctx.op.Add(hi, F.softplus(ctx, gap))
        equal = ctx.op.Add(a, F.c(ctx, math.log(2), a))
    else:
        ln2 = F.c(ctx, math.log(2), a)
        out = ctx.op.Add(hi, ctx.op.Div(F.softplus(ctx, ctx.op.Mul(gap, ln2)), ln2))
        equal = ctx.op.Add(a, F.c(ctx, 1, a))
    # Equal inputs (inf included, where the gap is nan) add exactly log(2).
    return ctx.cast(ctx.op.Where(ctx.op.Equal(a, b), equal, out), dtype)


@translates(aten.xlogy.Tensor, aten.xlogy.Scalar_Self, aten.xlogy.Scalar_Other)
def xlogy(ctx, self, other):
    return _x_log_y(ctx, self, other, lambda ctx, y: ctx.op.Log(y))


@translates(
    aten.special_xlog1py.default,
    aten.special_xlog1py.self_scalar,
    aten.special_xlog1py.other_scalar,
)
def xlog1py(ctx, self, other):
    return _x_log_y(ctx, self, other, F.log1p)


def _x_log_y(ctx, self, other, log):
    dtype = ctx.out_dtype
    x, y = _opmath(ctx, self, other, dtype=dtype)
    zero = F.c(ctx, 0, x)
    # 0 * log(0) is 0 by definition, but a nan y still gives nan.
    x_zero = ctx.op.And(ctx.op.Equal(x, zero), ctx.op.Not(ctx.op.IsNaN(y)))
    out = ctx.op.Where(x_zero, zero, ctx.op.Mul(x, log(ctx, y)))
    return ctx.cast(out, dtype)


@translates(aten.copysign.Tensor, aten.copysign.Scalar)
def copysign(ctx, self, other):
    dtype = ctx.out_dtype
    a, b = _opmath(ctx, self, other, dtype=dtype)
    # A Mul by +-1 (not Where) so copysign(0, -1) is -0.0.
    out = ctx.op.Mul(ctx.op.Abs(a), F.sign_factor(ctx, F.signbit(ctx, b), a))
    return ctx.cast(out, dtype)


@translates(aten.heaviside.default)
def heaviside(ctx, self, values):
    dtype = ctx.out_dtype
    x, v = ctx.promote(self, values, dtype=dtype)
    zero = ctx.scalar_like(0, x)
    step = ctx.cast(call(ctx, "Greater", x, zero), dtype)
    return call(ctx, "Where", call(ctx, "Equal", x, zero), v, step, _dtype=dtype)


@translates(aten.nextafter.default)
def nextafter(ctx, self, other):
    dtype = ctx.out_dtype
    if not _is_float(dtype):
        raise TypeError(f"nextafter is defined for floating-point tensors, not {dtype}")
    info = torch.finfo(dtype)
    # float16/bfloat16 neighbours are exact in float32, so they are computed there.
    x, y = _opmath(ctx, self, other, dtype=dtype)

    def k(value: float) -> ir.Value:
        return F.c(ctx, value, x)

    # One unit in the last place of |x| is 2**(exponent - mantissa bits); stepping towards zero
    # from a power of two uses the finer spacing below it; subnormals share the smallest step.
    magnitude = ctx.op.Abs(x)
    exponent = ctx.op.Floor(ctx.op.Div(ctx.op.Log(magnitude), k(math.log(2))))
    # Log's rounding can be one off next to a power of two: correct with exact comparisons.
    power = ctx.op.Pow(k(2), exponent)
    exponent = ctx.op.Where(ctx.op.Greater(power, magnitude), ctx.op.Sub(exponent, k(1)), exponent)
    power = ctx.op.Pow(k(2), exponent)
    exponent = ctx.op.Where(
        ctx.op.LessOrEqual(ctx.op.Mul(power, k(2)), magnitude), ctx.op.Add(exponent, k(1)), exponent
    )
    power = ctx.op.Pow(k(2), exponent)
    ulp = ctx.op.Mul(power, k(info.eps))
    towards_zero = ctx.op.Less(ctx.op.Mul(ctx.op.Sub(y, x), x), k(0))
    at_power = ctx.op.Equal(magnitude, power)
    ulp = ctx.op.Where(ctx.op.And(towards_zero, at_power), ctx.op.Mul(ulp, k(0.5)), ulp)
    smallest = info.smallest_normal * info.eps
    ulp = ctx.op.Max(ulp, k(smallest))
    out = ctx.op.Add(x, ctx.op.Mul(ctx.op.Sign(ctx.op.Sub(y, x)), ulp))
    # From zero the step is the smallest subnormal, signed towards y; from infinity it is the
    # largest finite number.
    out = ctx.op.Where(ctx.op.Equal(x, k(0)), ctx.op.Mul(ctx.op.Sign(y), k(smallest)), out)
    largest = ctx.op.Mul(ctx.op.Sign(x), k(info.max))
    out = ctx.op.Where(ctx.op.IsInf(x), largest, out)
    out = ctx.op.Where(ctx.op.Equal(x, y), y, out)
    out = ctx.op.Where(ctx.op.Or(ctx.op.IsNaN(x), ctx.op.IsNaN(y)), ctx.op.Add(x, y), out)
    return ctx.cast(out, dtype)


@translates(aten.lerp.Scalar, aten.lerp.Tensor)
def lerp(ctx, self, end, weight):
    dtype = ctx.out_dtype
    start, stop, w = _opmath(ctx, self, end, weight, dtype=dtype)
    one = F.c(ctx, 1, start)
    diff = ctx.op.Sub(stop, start)
    # torch interpolates from the nearer end, so weight 1 returns end exactly.
    from_start = ctx.op.Add(start, ctx.op.Mul(w, diff))
    from_end = ctx.op.Sub(stop, ctx.op.Mul(diff, ctx.op.Sub(one, w)))
    if isinstance(weight, ir.Value):
        near_start = ctx.op.Less(ctx.op.Abs(w), F.c(ctx, 0.5, start))
        out = ctx.op.Where(near_start, from_start, from_end)
    else:
        out = from_start if abs(weight) < 0.5 else from_end
    return ctx.cast(out, dtype)


@translates(aten.addcmul.default)
def addcmul(ctx, self, tensor1, tensor2, *, value=1):
    dtype = ctx.out_dtype
    s, t1, t2 = _opmath(ctx, self, tensor1, tensor2, dtype=dtype)
    product = call(ctx, "Mul", _alpha_times(ctx, t1, value), t2)
    return ctx.cast(call(ctx, "Add", s, product), dtype)


@translates(aten.addcdiv.default)
def addcdiv(ctx, self, tensor1, tensor2, *, value=1):
    dtype = ctx.out_dtype
    s, t1, t2 = _opmath(ctx, self, tensor1, tensor2, dtype=dtype)
    quotient = call(ctx, "Div", _alpha_times(ctx, t1, value), t2)
    return ctx.cast(call(ctx, "Add", s, quotient), dtype)


# ------------------------------------------------------------------ min, max, clamp, where
@translates(aten.maximum.default, aten.max.other)
def maximum(ctx, self, other):
    a, b = ctx.promote(self, other, dtype=ctx.out_dtype)
    if ctx.out_dtype == torch.bool:
        return ctx.op.Or(a, b)
    return call(ctx, "Max", a, b)  # onnxruntime's Max propagates nan, like torch


@translates(aten.minimum.default, aten.min.other)
def minimum(ctx, self, other):
    a, b = ctx.promote(self, other, dtype=ctx.out_dtype)
    if ctx.out_dtype == torch.bool:
        return ctx.op.And(a, b)
    return call(ctx, "Min", a, b)


@translates(aten.fmax.default)
def fmax(ctx, self, other):
    return _nan_ignoring(ctx, self, other, maximum)


@translates(aten.fmin.default)
def fmin(ctx, self, other):
    return _nan_ignoring(ctx, self, other, minimum)


def _nan_ignoring(ctx, self, other, extremum):
    out = extremum(ctx, self, other)
    if not _is_float(ctx.out_dtype):
        return out
    a, b = ctx.promote(self, other, dtype=ctx.out_dtype)
    dtype = ctx.out_dtype
    # A nan loses to any number: take the other operand where one side is nan.
    out = call(ctx, "Where", ctx.op.IsNaN(a), b, out, _dtype=dtype)
    return call(ctx, "Where", ctx.op.IsNaN(b), a, out, _dtype=dtype)


@translates(aten.clamp.default, aten.clip.default)
def clamp(ctx, self, min=None, max=None):
    if min is None and max is None:
        raise ValueError("clamp needs at least one of min and max")
    dtype = ctx.out_dtype
    x = ctx.cast(self, dtype)
    lo = None if min is None else ctx.scalar(min, dtype)
    hi = None if max is None else ctx.scalar(max, dtype)
    if dtype == torch.bool:
        out = x if lo is None else ctx.op.Or(x, lo)
        return out if hi is None else ctx.op.And(out, hi)
    return call(ctx, "Clip", x, lo, hi)


@translates(aten.clamp.Tensor, aten.clip.Tensor)
def clamp_tensor(ctx, self, min=None, max=None):
    if min is None and max is None:
        raise ValueError("clamp needs at least one of min and max")
    out = self
    if min is not None:
        out = maximum(ctx, out, min)
    if max is not None:
        out = minimum(ctx, out, max)
    return ctx.cast(out, ctx.out_dtype)


@translates(aten.clamp_min.default, aten.clamp_min.Tensor)
def clamp_min(ctx, self, min):
    if isinstance(min, ir.Value):
        return clamp_tensor(ctx, self, min=min)
    return clamp(ctx, self, min=min)


@translates(aten.clamp_max.default, aten.clamp_max.Tensor)
def clamp_max(ctx, self, max):
    if isinstance(max, ir.Value):
        return clamp_tensor(ctx, self, max=max)
    return clamp(ctx, self, max=max)


@translates(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def where(ctx, condition, self, other):
    dtype = ctx.out_dtype
    a, b = ctx.promote(self, other, dtype=dtype)
    return call(ctx, "Where", _bool(ctx, condition), a, b, _dtype=dtype)


# -------------------------------------------------------------------------- comparisons
def _comparison(onnx_op: str, negate: bool = False):
    def translation(ctx, self, other):
        a, b = ctx.promote(self, other)
        out = call(ctx, onnx_op, a, b)
        return ctx.op.Not(out) if negate else out

    translation.__qualname__ = translation.__name__ = f"compare_{'not_' if negate else ''}{onnx_op}"
    return translation


for _packet, (_onnx_op, _negate) in {
    aten.eq: ("Equal", False),
    aten.ne: ("Equal", True),
    aten.lt: ("Less", False),
    aten.le: ("LessOrEqual", False),
    aten.gt: ("Greater", False),
    aten.ge: ("GreaterOrEqual", False),
}.items():
    translates(_packet.Tensor, _packet.Scalar)(_comparison(_onnx_op, _negate))


# ------------------------------------------------------------------------------- logic
@translates(aten.logical_and.default)
def logical_and(ctx, self, other):
    return ctx.op.And(_bool(ctx, self), _bool(ctx, other))


@translates(aten.logical_or.default)
def logical_or(ctx, self, other):
    return ctx.op.Or(_bool(ctx, self), _bool(ctx, other))


@translates(aten.logical_xor.default)
def logical_xor(ctx, self, other):
    return ctx.op.Xor(_bool(ctx, self), _bool(ctx, other))


@translates(aten.logical_not.default)
def logical_not(ctx, self):
    return ctx.op.Not(_bool(ctx, self))


# ----------------------------------------------------------------------------- bitwise
def _bitwise(bool_op: str, int_op: str):
    def translation(ctx, self, other):
        dtype = ctx.out_dtype
        a, b = ctx.promote(self, other, dtype=dtype)
        if dtype == torch.bool:
            return getattr(ctx.op, bool_op)(a, b)
        _needs_opset(ctx, int_op, f"{int_op} on {dtype} tensors")
        return call(ctx, int_op, a, b)

    translation.__qualname__ = translation.__name__ = f"bitwise_{int_op}"
    return translation


for _packets, _ops in {
    (aten.bitwise_and, aten.__and__): ("And", "BitwiseAnd"),
    (aten.bitwise_or, aten.__or__): ("Or", "BitwiseOr"),
    (aten.bitwise_xor, aten.__xor__): ("Xor", "BitwiseXor"),
}.items():
    _translation = _bitwise(*_ops)
    for _packet in _packets:
        translates(
            *[
                getattr(_packet, name)
                for name in ("Tensor", "Scalar", "Scalar_Tensor")
                if name in _packet.overloads()
            ]
        )(_translation)


@translates(aten.bitwise_not.default)
def bitwise_not(ctx, self):
    dtype = ctx.dtype(self)
    if dtype == torch.bool:
        return ctx.op.Not(self)
    if ctx.has("BitwiseNot"):
        return call(ctx, "BitwiseNot", self)
    if _is_signed_int(dtype):
        # Two's complement: ~x == -x - 1.
        return call(ctx, "Sub", call(ctx, "Neg", self), ctx.scalar_like(1, self))
    return call(ctx, "Sub", ctx.scalar_like(torch.iinfo(dtype).max, self), self)


_UNSIGNED = (torch.uint8, torch.uint16, torch.uint32, torch.uint64)


@translates(
    aten.bitwise_left_shift.Tensor,
    aten.bitwise_left_shift.Tensor_Scalar,
    aten.bitwise_left_shift.Scalar_Tensor,
    aten.__lshift__.Tensor,
    aten.__lshift__.Scalar,
)
def left_shift(ctx, self, other):
    return _shift(ctx, self, other, left=True)


@translates(
    aten.bitwise_right_shift.Tensor,
    aten.bitwise_right_shift.Tensor_Scalar,
    aten.bitwise_right_shift.Scalar_Tensor,
    aten.__rshift__.Tensor,
    aten.__rshift__.Scalar,
)
def right_shift(ctx, self, other):
    return _shift(ctx, self, other, left=False)


def _shift(ctx, self, other, *, left: bool):
    # ONNX BitShift is defined for unsigned types only, and C leaves shifts past the bit width
    # undefined; torch defines them (0 for <<, the sign for >>). So: compute in uint64 on
    # magnitudes and handle the sign and the width explicitly.
    dtype = ctx.out_dtype
    if dtype == torch.bool or _is_float(dtype):
        raise TypeError(f"bit shifts are defined for integer tensors, not {dtype}")
    a, b = ctx.promote(self, other, dtype=dtype)
    width = torch.iinfo(dtype).bits
    a64, b64 = ctx.cast(a, torch.int64), ctx.cast(b, torch.int64)
    zero64 = ctx.const(0, torch.int64)
    too_far = ctx.op.Or(
        ctx.op.Less(b64, zero64), ctx.op.GreaterOrEqual(b64, ctx.const(width, torch.int64))
    )
    if left:
        amount = ctx.op.Where(too_far, zero64, b64)
        shifted = ctx.op.BitShift(
            ctx.cast(a64, torch.uint64), ctx.cast(amount, torch.uint64), direction="LEFT"
        )
        out = ctx.op.Where(too_far, zero64, ctx.cast(shifted, torch.int64))
        return ctx.cast(out, dtype)
    amount = ctx.op.Where(too_far, ctx.const(width - 1, torch.int64), b64)
    amount = ctx.cast(amount, torch.uint64)
    if dtype in _UNSIGNED:
        shifted = ctx.op.BitShift(ctx.cast(a64, torch.uint64), amount, direction="RIGHT")
        return ctx.cast(shifted, dtype)
    # Arithmetic shift of a negative number: ~((~a) >> b), with ~a == -a - 1.
    negative = ctx.op.Less(a64, zero64)
    one64 = ctx.const(1, torch.int64)
    flipped = ctx.op.Where(negative, ctx.op.Sub(ctx.op.Neg(a64), one64), a64)
    shifted = ctx.cast(
        ctx.op.BitShift(ctx.cast(flipped, torch.uint64), amount, direction="RIGHT"), torch.int64
    )
    out = ctx.op.Where(negative, ctx.op.Sub(ctx.op.Neg(shifted), one64), shifted)
    return ctx.cast(out, dtype)


@translates(aten.special_ndtr.default)
def ndtr(ctx, self):
    dtype = _float_out(ctx, self)
    (x,) = _opmath(ctx, self, dtype=dtype)
    # Phi(x) = erfc(-x / sqrt 2) / 2 keeps the lower tail's relative precision.
    scaled = ctx.op.Mul(x, F.c(ctx, -1 / math.sqrt(2), x))
    return ctx.cast(ctx.op.Mul(F.erfc(ctx, scaled), F.c(ctx, 0.5, x)), dtype)


# ------------------------------------------------------------------------------ aliases
# torch.export keeps these alias ops as they are written; each shares its canonical op's
# translation overload by overload.
ALIASES = {
    "absolute": "abs",
    "negative": "neg",
    "arccos": "acos",
    "arcsin": "asin",
    "arctan": "atan",
    "arccosh": "acosh",
    "arcsinh": "asinh",
    "arctanh": "atanh",
    "arctan2": "atan2",
    "multiply": "mul",
    "divide": "div",
    "subtract": "sub",
    "greater": "gt",
    "greater_equal": "ge",
    "less": "lt",
    "less_equal": "le",
    "not_equal": "ne",
    "special_erf": "erf",
    "special_erfc": "erfc",
    "special_erfinv": "erfinv",
    "special_expit": "sigmoid",
    "special_exp2": "exp2",
    "special_expm1": "expm1",
    "special_log1p": "log1p",
    "special_logit": "logit",
    "special_sinc": "sinc",
    "special_round": "round",
    "special_xlogy": "xlogy",
}


def _register_aliases() -> None:
    from torch_onnx_conformance.exporter.ops._registry import DEFAULT_REGISTRY

    for alias, canonical in ALIASES.items():
        alias_packet = getattr(aten, alias, None)
        canonical_packet = getattr(aten, canonical, None) if canonical else None
        if alias_packet is None or canonical_packet is None:
            continue
        for name in alias_packet.overloads():
            target = getattr(canonical_packet, name, None)
            found = DEFAULT_REGISTRY.get(target) if target is not None else None
            alias_target = getattr(alias_packet, name)
            if found is not None and alias_target not in DEFAULT_REGISTRY:
                translates(getattr(alias_packet, name))(found.fn)


_register_aliases()
