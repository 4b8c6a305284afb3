"""torch.prims elementwise ops, which torch's reference decompositions (torch._refs) emit.

A prim never promotes: its operands already share a dtype, and the FX metadata holds the result
dtype. So most prims reuse the ATen translation of the same name. The exceptions are listed
with their reason: ``prims.div`` truncates integers (aten.div would return floats), and a few
prims have no ATen twin of the same name. The reductions (prims.sum/prod/amax/amin/var) live
with the other reductions.
"""

from __future__ import annotations

import onnx_ir as ir
import torch

from torch_onnx_conformance.exporter.ops import _formulas as F
from torch_onnx_conformance.exporter.ops import _kernels
from torch_onnx_conformance.exporter.ops import elementwise as E
from torch_onnx_conformance.exporter.ops._registry import DEFAULT_REGISTRY, translates

aten = torch.ops.aten
prims = torch.ops.prims

# prim name -> ATen overload whose translation has the same semantics on same-dtype operands.
SAME_AS_ATEN = {
    "abs": aten.abs.default,
    "neg": aten.neg.default,
    "sign": aten.sign.default,
    "ceil": aten.ceil.default,
    "floor": aten.floor.default,
    "round": aten.round.default,
    "trunc": aten.trunc.default,
    "exp": aten.exp.default,
    "exp2": aten.exp2.default,
    "expm1": aten.expm1.default,
    "log": aten.log.default,
    "log2": aten.log2.default,
    "log10": aten.log10.default,
    "log1p": aten.log1p.default,
    "sqrt": aten.sqrt.default,
    "rsqrt": aten.rsqrt.default,
    "reciprocal": aten.reciprocal.default,
    "sin": aten.sin.default,
    "cos": aten.cos.default,
    "tan": aten.tan.default,
    "asin": aten.asin.default,
    "acos": aten.acos.default,
    "atan": aten.atan.default,
    "sinh": aten.sinh.default,
    "cosh": aten.cosh.default,
    "tanh": aten.tanh.default,
    "asinh": aten.asinh.default,
    "acosh": aten.acosh.default,
    "atanh": aten.atanh.default,
    "erf": aten.erf.default,
    "erfc": aten.erfc.default,
    "bitwise_not": aten.bitwise_not.default,
    "isfinite": aten.isfinite.default,
    "signbit": aten.signbit.default,
    "conj_physical": aten.conj_physical.default,
    "real": aten.real.default,
    "imag": aten.imag.default,
    "clone": aten.clone.default,
    "add": aten.add.Tensor,
    "sub": aten.sub.Tensor,
    "mul": aten.mul.Tensor,
    "atan2": aten.atan2.default,
    "fmod": aten.fmod.Tensor,
    "remainder": aten.remainder.Tensor,
    "pow": aten.pow.Tensor_Tensor,
    "maximum": aten.maximum.default,
    "minimum": aten.minimum.default,
    "fmax": aten.fmax.default,
    "fmin": aten.fmin.default,
    "hypot": aten.hypot.default,
    "nextafter": aten.nextafter.default,
    "eq": aten.eq.Tensor,
    "ne": aten.ne.Tensor,
    "lt": aten.lt.Tensor,
    "le": aten.le.Tensor,
    "gt": aten.gt.Tensor,
    "ge": aten.ge.Tensor,
    "bitwise_and": aten.bitwise_and.Tensor,
    "bitwise_or": aten.bitwise_or.Tensor,
    "bitwise_xor": aten.bitwise_xor.Tensor,
    "shift_left": aten.bitwise_left_shift.Tensor,
    "shift_right_arithmetic": aten.bitwise_right_shift.Tensor,
    "where": aten.where.self,
    "fill": aten.fill.Scalar,
    "item": aten._local_scalar_dense.default,
}


def _register_same_as_aten() -> None:
    for name, aten_op in SAME_AS_ATEN.items():
        packet = getattr(prims, name, None)
        found = DEFAULT_REGISTRY.get(aten_op)
        if packet is None or found is None or packet.default in DEFAULT_REGISTRY:
            continue
        translates(packet.default)(found.fn)


_register_same_as_aten()


@translates(prims.div.default)
def div(ctx, self, other):
    # C division: integers truncate toward zero (aten.div would give floats).
    if ctx.out_dtype is not None and ctx.out_dtype.is_floating_point:
        return E.div(ctx, self, other)
    a, b = ctx.promote(self, other, dtype=ctx.out_dtype)
    return _kernels.call(ctx, "Div", a, b)


@translates(prims.cbrt.default)
def cbrt(ctx, self):
    dtype = ctx.out_dtype
    x = ctx.cast(self, _kernels.opmath_dtype(dtype))
    # Pow of a negative base to 1/3 is nan; take the root of |x| and put the sign back.
    root = ctx.op.Pow(ctx.op.Abs(x), F.c(ctx, 1 / 3, x))
    return ctx.cast(ctx.op.Mul(root, F.sign_factor(ctx, ctx.op.Less(x, F.c(ctx, 0, x)), x)), dtype)


@translates(prims.full_like.default)
def full_like(ctx, a, fill_value, *, dtype=None, device=None, requires_grad=False):
    return E.full_like(ctx, a, fill_value)


@translates(prims.scalar_tensor.default)
def scalar_tensor(ctx, s, *, dtype=None, device=None):
    return E.scalar_tensor(ctx, s)


@translates(prims.view_of.default, prims.device_put.default)
def view_of(ctx, a, *args, **kwargs):
    return ctx.op.Identity(a)


@translates(prims.conj.default)
def conj(ctx, a):
    return E.conj(ctx, a)


@translates(prims.iota.default)
def iota(ctx, length, *, start, step, dtype, device=None, requires_grad=False):
    def scalar(v: object) -> ir.Value:
        return ctx.scalar(v, dtype)

    limit = ctx.op.Add(scalar(start), ctx.op.Mul(scalar(length), scalar(step)))
    return _kernels.call(ctx, "Range", scalar(start), limit, scalar(step))
