"""Complex tensors: translations for nodes that read or produce them.

A complex tensor of shape S travels as a real tensor of shape S + [2] (real part, imaginary
part), the layout torch.view_as_real gives and torch.onnx uses. Every node that touches a
complex tensor is looked up in the complex table only (see ``_registry.COMPLEX_REGISTRY``), so
an op without an entry here fails at export instead of treating the pair axis as data.

The op families that already work on the pair layout (FFT, real/imag/conj, casts, complex and
polar, the complex<->real views) are listed at the end of this module and keep their
translations.
"""

from __future__ import annotations

from typing import Any

import onnx_ir as ir
import torch

from torch_onnx_conformance.exporter import _dtypes
from torch_onnx_conformance.exporter.ops import _reduce as R
from torch_onnx_conformance.exporter.ops import _shape as S

# fft, shape and special register the pair-aware translations _PAIR_AWARE reads.
from torch_onnx_conformance.exporter.ops import control_flow, elementwise, fft, shape, special  # noqa: F401
from torch_onnx_conformance.exporter.ops._registry import (
    COMPLEX_REGISTRY,
    DEFAULT_REGISTRY,
    translates_complex,
)

aten = torch.ops.aten


# ------------------------------------------------------------------------------ helpers
def _is_complex(ctx, x: Any) -> bool:
    if isinstance(x, complex):
        return True
    meta = ctx.meta(x) if isinstance(x, ir.Value) else None
    return isinstance(meta, torch.Tensor) and meta.dtype.is_complex


def _complex_rank(ctx, x: ir.Value) -> int:
    """The rank torch sees (the pair axis not counted)."""
    return ctx.meta(x).dim()


def _work_dtype(ctx) -> torch.dtype:
    """The real dtype of the pair the node's (complex or real) result is computed in."""
    out = ctx.out_dtype
    return _dtypes.COMPLEX_TO_REAL.get(out, out)


def _part(ctx, pair: ir.Value, index: int) -> ir.Value:
    return ctx.op.Gather(pair, ctx.const(index, torch.int64), axis=-1)


def _stack(ctx, real: ir.Value, imag: ir.Value) -> ir.Value:
    return ctx.op.Concat(ctx.op.Unsqueeze(real, [-1]), ctx.op.Unsqueeze(imag, [-1]), axis=-1)


def _as_pair(ctx, x: Any, dtype: torch.dtype) -> ir.Value:
    """``x`` (complex or real tensor, Python number) as a pair in the real ``dtype``."""
    if isinstance(x, ir.Value):
        if _is_complex(ctx, x):
            return ctx.cast(x, dtype)
        real = ctx.cast(x, dtype)
        # Not real * 0: an inf or NaN real part keeps a zero imaginary part, as in torch.
        return _stack(ctx, real, S.constant_of_shape(ctx, ctx.op.Shape(real), 0, dtype))
    value = complex(x)
    return ctx.const([value.real, value.imag], dtype)


def _as_real_factor(ctx, x: Any, dtype: torch.dtype) -> ir.Value:
    """A real operand shaped to scale a pair (its values broadcast over the pair axis)."""
    if isinstance(x, ir.Value):
        return ctx.op.Unsqueeze(ctx.cast(x, dtype), [-1])
    return ctx.const(x, dtype)


def _product(ctx, a: ir.Value, b: ir.Value, combine: str) -> ir.Value:
    """(ar + i ai)(br + i bi) with ``combine`` (Mul or MatMul) as the product of parts."""
    ar, ai, br, bi = _part(ctx, a, 0), _part(ctx, a, 1), _part(ctx, b, 0), _part(ctx, b, 1)
    op = getattr(ctx.op, combine)
    real = ctx.op.Sub(op(ar, br), op(ai, bi))
    imag = ctx.op.Add(op(ar, bi), op(ai, br))
    return _stack(ctx, real, imag)


def _dims(ctx, x: ir.Value, dims: Any) -> list[int]:
    """torch dims (negative ones counted from the complex rank) as non-negative pair axes."""
    rank = _complex_rank(ctx, x)
    if dims is None or dims == []:
        return list(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    return [S.axis(d, max(rank, 1)) for d in dims]


# --------------------------------------------------------------------------- arithmetic
def _add_or_sub(ctx, op: str, self, other, alpha) -> ir.Value:
    dtype = _work_dtype(ctx)
    other = _as_pair(ctx, other, dtype)
    if alpha != 1:
        other = ctx.op.Mul(other, _as_real_factor(ctx, alpha, dtype))
    return getattr(ctx.op, op)(_as_pair(ctx, self, dtype), other)


@translates_complex(aten.add.Tensor, aten.add.Scalar)
def add(ctx, self, other, alpha=1):
    return _add_or_sub(ctx, "Add", self, other, alpha)


@translates_complex(aten.sub.Tensor, aten.sub.Scalar)
def sub(ctx, self, other, alpha=1):
    return _add_or_sub(ctx, "Sub", self, other, alpha)


@translates_complex(aten.rsub.Tensor, aten.rsub.Scalar)
def rsub(ctx, self, other, alpha=1):
    return sub(ctx, other, self, alpha)


@translates_complex(aten.mul.Tensor, aten.mul.Scalar)
def mul(ctx, self, other):
    dtype = _work_dtype(ctx)
    if not _is_complex(ctx, other):
        return ctx.op.Mul(_as_pair(ctx, self, dtype), _as_real_factor(ctx, other, dtype))
    if not _is_complex(ctx, self):
        return ctx.op.Mul(_as_real_factor(ctx, self, dtype), _as_pair(ctx, other, dtype))
    return _product(ctx, _as_pair(ctx, self, dtype), _as_pair(ctx, other, dtype), "Mul")


@translates_complex(aten.div.Tensor, aten.div.Scalar)
def div(ctx, self, other):
    dtype = _work_dtype(ctx)
    a = _as_pair(ctx, self, dtype)
    if not _is_complex(ctx, other):
        return ctx.op.Div(a, _as_real_factor(ctx, other, dtype))
    b = _as_pair(ctx, other, dtype)
    return _quotient(ctx, a, b)


def _quotient(ctx, x: ir.Value, y: ir.Value) -> ir.Value:
    """(a + bi) / (c + di) the way torch (and numpy) divide: scaled by the larger of |c|, |d|
    so nothing overflows, and a zero divisor gives a complex inf or NaN like a / 0."""
    a, b, c, d = _part(ctx, x, 0), _part(ctx, x, 1), _part(ctx, y, 0), _part(ctx, y, 1)
    op = ctx.op
    abs_c, abs_d = op.Abs(c), op.Abs(d)
    # |c| >= |d|: with r = d / c and s = 1 / (c + d r), (a + b r) s + (b - a r) s i.
    rat = op.Div(d, c)
    scale = op.Reciprocal(op.Add(c, op.Mul(d, rat)))
    c_larger = _stack(
        ctx, op.Mul(op.Add(a, op.Mul(b, rat)), scale), op.Mul(op.Sub(b, op.Mul(a, rat)), scale)
    )
    # |d| > |c|: with r = c / d and s = 1 / (d + c r), (a r + b) s + (b r - a) s i.
    rat = op.Div(c, d)
    scale = op.Reciprocal(op.Add(d, op.Mul(c, rat)))
    d_larger = _stack(
        ctx, op.Mul(op.Add(op.Mul(a, rat), b), scale), op.Mul(op.Sub(op.Mul(b, rat), a), scale)
    )
    by_zero = _stack(ctx, op.Div(a, abs_c), op.Div(b, abs_d))
    zero = ctx.const(0, ctx.dtype(c))
    divisor_zero = op.And(op.Equal(abs_c, zero), op.Equal(abs_d, zero))
    pick = op.Unsqueeze(op.GreaterOrEqual(abs_c, abs_d), [-1])
    return op.Where(op.Unsqueeze(divisor_zero, [-1]), by_zero, op.Where(pick, c_larger, d_larger))


@translates_complex(aten.neg.default)
def neg(ctx, self):
    return ctx.op.Neg(self)


@translates_complex(aten.abs.default)
def abs_(ctx, self):
    real, imag = ctx.op.Abs(_part(ctx, self, 0)), ctx.op.Abs(_part(ctx, self, 1))
    # |z| = m * sqrt((re/m)^2 + (im/m)^2) with m the larger part: no overflow for big parts.
    larger = ctx.op.Max(real, imag)
    dtype = ctx.dtype(real)
    safe = ctx.op.Where(ctx.op.Equal(larger, ctx.const(0, dtype)), ctx.const(1, dtype), larger)
    real, imag = ctx.op.Div(real, safe), ctx.op.Div(imag, safe)
    norm = ctx.op.Sqrt(ctx.op.Add(ctx.op.Mul(real, real), ctx.op.Mul(imag, imag)))
    return ctx.op.Mul(larger, norm)


@translates_complex(aten.angle.default)
def angle(ctx, self):
    return elementwise.atan2(ctx, _part(ctx, self, 1), _part(ctx, self, 0))


def _polar_power(ctx, z: ir.Value, exponent: float) -> ir.Value:
    """z ** exponent on the principal branch: |z|^p (cos p*angle, sin p*angle)."""
    magnitude = ctx.op.Pow(abs_(ctx, z), ctx.const(exponent, ctx.dtype(z)))
    phase = ctx.op.Mul(angle(ctx, z), ctx.const(exponent, ctx.dtype(z)))
    return _stack(
        ctx, ctx.op.Mul(magnitude, ctx.op.Cos(phase)), ctx.op.Mul(magnitude, ctx.op.Sin(phase))
    )


@translates_complex(aten.pow.Tensor_Scalar)
def pow_(ctx, self, exponent):
    if isinstance(exponent, complex) or isinstance(exponent, ir.Value):
        raise NotImplementedError(
            "a complex tensor to a complex or tensor power is not exported; only real "
            "Python-number exponents are"
        )
    z = ctx.cast(self, _work_dtype(ctx))
    if exponent == 1:
        return ctx.op.Identity(z)
    if exponent == 2:  # exact, as torch's own square of a complex number
        return _product(ctx, z, z, "Mul")
    return _polar_power(ctx, z, float(exponent))


@translates_complex(aten.sqrt.default)
def sqrt(ctx, self):
    return _polar_power(ctx, self, 0.5)


@translates_complex(aten.reciprocal.default)
def reciprocal(ctx, self):
    return div(ctx, 1.0, self)


@translates_complex(aten.exp.default)
def exp(ctx, self):
    magnitude = ctx.op.Exp(_part(ctx, self, 0))
    phase = _part(ctx, self, 1)
    return _stack(
        ctx, ctx.op.Mul(magnitude, ctx.op.Cos(phase)), ctx.op.Mul(magnitude, ctx.op.Sin(phase))
    )


@translates_complex(aten.eq.Tensor, aten.eq.Scalar)
def eq(ctx, self, other):
    common = torch.result_type(
        *[ctx.meta(x) if isinstance(x, ir.Value) else x for x in (self, other)]
    )
    dtype = _dtypes.COMPLEX_TO_REAL[common]
    a, b = _as_pair(ctx, self, dtype), _as_pair(ctx, other, dtype)
    parts_equal = ctx.op.Equal(a, b)
    return ctx.op.And(_part(ctx, parts_equal, 0), _part(ctx, parts_equal, 1))


@translates_complex(aten.ne.Tensor, aten.ne.Scalar)
def ne(ctx, self, other):
    return ctx.op.Not(eq(ctx, self, other))


@translates_complex(aten.zeros_like.default, aten.empty_like.default)
def zeros_like(ctx, self, **kwargs):
    return S.constant_of_shape(ctx, ctx.op.Shape(self), 0, _work_dtype(ctx))


# ------------------------------------------------------------------------------ products
@translates_complex(
    aten.mm.default, aten.bmm.default, aten.matmul.default, aten.mv.default, aten.dot.default
)
def matmul(ctx, self, other):
    dtype = _work_dtype(ctx)
    if not _is_complex(ctx, other) or not _is_complex(ctx, self):
        a, b = _as_pair(ctx, self, dtype), _as_pair(ctx, other, dtype)
    else:
        a, b = ctx.cast(self, dtype), ctx.cast(other, dtype)
    return _product(ctx, a, b, "MatMul")


@translates_complex(aten.vdot.default)
def vdot(ctx, self, other):
    dtype = _work_dtype(ctx)
    a = ctx.op.Mul(_as_pair(ctx, self, dtype), ctx.const([1, -1], dtype))
    return _product(ctx, a, _as_pair(ctx, other, dtype), "MatMul")


# ------------------------------------------------------------------------------ reductions
def _reduce(ctx, op: str, self, dim, keepdim) -> ir.Value:
    # The pair axis is never reduced: dims count from the complex rank.
    axes = _dims(ctx, self, dim)
    x = ctx.cast(self, _work_dtype(ctx))
    if not axes:
        return ctx.op.Identity(x)
    return R.reduce(ctx, op, x, axes, keepdim)


@translates_complex(aten.sum.dim_IntList, aten.sum.default)
def sum_(ctx, self, dim=None, keepdim=False, *, dtype=None):
    return _reduce(ctx, "ReduceSum", self, dim, keepdim)


@translates_complex(aten.mean.dim, aten.mean.default)
def mean(ctx, self, dim=None, keepdim=False, *, dtype=None):
    return _reduce(ctx, "ReduceMean", self, dim, keepdim)


# ----------------------------------------------------------------------------- layout
@translates_complex(
    aten.view.default,
    aten.reshape.default,
    aten._unsafe_view.default,
    aten.view_copy.default,
    aten.flatten.using_ints,
    aten.unflatten.int,
)
def reshape(ctx, self, *args):
    target = S.target_shape(ctx, S.out_shape(ctx), [self])
    return ctx.op.Reshape(self, ctx.op.Concat(target, ctx.const([2], torch.int64), axis=0))


@translates_complex(aten.expand.default, aten.expand_copy.default)
def expand(ctx, self, size, *, implicit=False):
    # Expand keeps an input dim where the target says 1, which is what torch's -1 means.
    sizes = [1 if isinstance(s, int) and s == -1 else s for s in size]
    return ctx.op.Expand(self, ctx.ints([*sizes, 2]))


@translates_complex(aten.permute.default, aten.permute_copy.default)
def permute(ctx, self, dims):
    rank = _complex_rank(ctx, self)
    return ctx.op.Transpose(self, perm=[S.axis(d, rank) for d in dims] + [rank])


@translates_complex(aten.transpose.int, aten.transpose_copy.int)
def transpose(ctx, self, dim0, dim1):
    rank = _complex_rank(ctx, self)
    perm = list(range(rank + 1))
    d0, d1 = S.axis(dim0, max(rank, 1)), S.axis(dim1, max(rank, 1))
    if rank < 2:
        return ctx.op.Identity(self)
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return ctx.op.Transpose(self, perm=perm)


@translates_complex(aten.t.default, aten.t_copy.default)
def t(ctx, self):
    return transpose(ctx, self, 0, 1)


@translates_complex(aten.unsqueeze.default, aten.unsqueeze_copy.default)
def unsqueeze(ctx, self, dim):
    return ctx.op.Unsqueeze(self, [S.axis(dim, _complex_rank(ctx, self) + 1)])


@translates_complex(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default)
def squeeze(ctx, self, dim=None):
    meta = ctx.meta(self)
    axes = [d for d in _dims(ctx, self, dim) if meta.dim() and meta.shape[d] == 1]
    if not axes:
        return ctx.op.Identity(self)
    return ctx.op.Squeeze(self, ctx.const(axes, torch.int64))


@translates_complex(aten.select.int, aten.select_copy.int)
def select(ctx, self, dim, index):
    axis = _dims(ctx, self, dim)[0]
    return ctx.op.Gather(self, ctx.scalar(index), axis=axis)


@translates_complex(aten.slice.Tensor, aten.slice_copy.Tensor)
def slice_(ctx, self, dim=0, start=None, end=None, step=1):
    axis = _dims(ctx, self, dim)[0]
    begin = 0 if start is None else start
    stop = 2**63 - 1 if end is None else end
    return ctx.op.Slice(
        self,
        ctx.ints([begin]),
        ctx.ints([stop]),
        ctx.const([axis], torch.int64),
        ctx.ints([step]),
    )


@translates_complex(aten.cat.default, aten.concat.default)
def cat(ctx, tensors, dim=0):
    dtype = _work_dtype(ctx)
    ranked = [t for t in tensors if _is_complex(ctx, t)]
    axis = _dims(ctx, ranked[0], dim)[0]
    return ctx.op.Concat(*[_as_pair(ctx, t, dtype) for t in tensors], axis=axis)


@translates_complex(aten.stack.default)
def stack(ctx, tensors, dim=0):
    dtype = _work_dtype(ctx)
    axis = S.axis(dim, ctx.out.dim())
    pairs = [ctx.op.Unsqueeze(_as_pair(ctx, t, dtype), [axis]) for t in tensors]
    return ctx.op.Concat(*pairs, axis=axis)


# ------------------------------------------------------------ translations already pair-aware
_PAIR_AWARE = [
    # views, copies and casts: the pair layout passes through unchanged or is converted
    aten.clone.default,
    aten.alias.default,
    aten.detach.default,
    aten.lift_fresh_copy.default,
    aten.contiguous.default,
    aten.resolve_conj.default,
    aten.resolve_neg.default,
    aten.view_as_real.default,
    aten.view_as_complex.default,
    aten.view_as_real_copy.default,
    aten.view_as_complex_copy.default,
    aten._to_copy.default,
    aten.to.dtype,
    aten.to.dtype_layout,
    aten._conj.default,
    aten.conj.default,
    aten.conj_physical.default,
    aten.real.default,
    aten.imag.default,
    aten.complex.default,
    aten.polar.default,
    # a no_grad region (llama4's rotary table): its body's nodes are looked up one by one
    torch.ops.higher_order.wrap_with_set_grad_enabled,
    # the FFT family reads and writes the pair layout itself
    *[
        target
        for target in DEFAULT_REGISTRY.targets()
        if isinstance(target, torch._ops.OpOverload)
        and target.namespace == "aten"
        and (
            target._opname.startswith("_fft_")
            or target._opname in ("stft", "istft")
            or target._opname.startswith("fft_")
        )
    ],
]
for _target in _PAIR_AWARE:
    _found = DEFAULT_REGISTRY.get(_target)
    if _found is not None:
        COMPLEX_REGISTRY.add(_target, _found)
