"""Which dtypes onnxruntime's CPU provider has kernels for, and how to compute around the gaps.

This is the one table of those gaps, for math and data-movement ops alike (``Pad``, ``Trilu``,
``NonZero``, ``ScatterElements`` per reduction mode, ...).

A graph that uses ``Exp`` on int32 or ``Add`` on bfloat16 is valid ONNX but fails to load in
onnxruntime's CPU provider ("NOT_IMPLEMENTED: Could not find an implementation"). Translations
call :func:`call` instead of ``ctx.op.<Op>`` when an input may have such a dtype: it casts the
inputs to the nearest dtype that has a kernel, runs the op there and casts the result back.

The table was measured with onnxruntime 1.31 (one session per op and dtype, opset 20). An op
that is not listed is assumed to support every dtype.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import onnx_ir as ir
import torch

if TYPE_CHECKING:
    from torch_onnx_conformance.exporter.ops._context import TranslationContext

f16, bf16, f32, f64 = torch.float16, torch.bfloat16, torch.float32, torch.float64
i8, i16, i32, i64 = torch.int8, torch.int16, torch.int32, torch.int64
u8, u16, u32, u64 = torch.uint8, torch.uint16, torch.uint32, torch.uint64
b8 = torch.bool

_F32_F16 = frozenset({f32, f16})
_FLOATS = frozenset({f32, f64, f16})
_SIGNED = frozenset({i8, i16, i32, i64})
_UNSIGNED = frozenset({u8, u16, u32, u64})
_INTS = _SIGNED | _UNSIGNED
_NUMERIC = _FLOATS | _INTS
_EVERY = _NUMERIC | {bf16, b8}


def _lacking(*dtypes: torch.dtype) -> frozenset[torch.dtype]:
    return _EVERY - frozenset(dtypes)


SUPPORTED: dict[str, frozenset[torch.dtype]] = {
    **dict.fromkeys(
        "Exp Log Sqrt Reciprocal Sin Cos Tanh Ceil Floor Round Sigmoid Sum".split(), _FLOATS
    ),
    **dict.fromkeys(
        "Tan Asin Acos Atan Sinh Cosh Asinh Acosh Atanh Erf Softsign Softplus HardSwish Mish Elu "
        "Selu Gelu LeakyRelu HardSigmoid ThresholdedRelu PRelu".split(),
        _F32_F16,
    ),
    "Celu": frozenset({f32}),
    "Abs": _NUMERIC,
    "Neg": _FLOATS | _SIGNED,
    "Sign": _NUMERIC | {bf16},
    "Relu": _FLOATS | {i8, i32},
    "IsNaN": _FLOATS | {bf16},
    "IsInf": _FLOATS | {bf16},
    "Shrink": _NUMERIC,
    **dict.fromkeys(
        "Add Sub Mul Div Mod Equal Less LessOrEqual Greater GreaterOrEqual".split(), _NUMERIC
    ),
    "Pow": _FLOATS | {i32, i64},
    "Max": _FLOATS | {i8, i32, i64, u8, u32, u64},
    "Min": _FLOATS | {i8, i32, i64, u8, u32, u64},
    "Where": _FLOATS | {i8, i32, i64, u8, u32},
    "Clip": _FLOATS | {i8, i32, i64, u8, u32, u64},
    **dict.fromkeys("BitwiseAnd BitwiseOr BitwiseXor BitwiseNot".split(), _INTS),
    "BitShift": frozenset({u8, u32, u64}),
    **dict.fromkeys(
        "ReduceSum ReduceMean ReduceProd ReduceSumSquare ReduceL1 ReduceL2 ReduceLogSumExp".split(),
        _FLOATS | {i32, i64},
    ),
    **dict.fromkeys("ReduceMax ReduceMin ArgMax ArgMin TopK".split(), _FLOATS | {i8, i32, i64, u8}),
    **dict.fromkeys("And Or Xor Not".split(), frozenset({b8})),
    # The fused ops of opset 23 (torch_onnx_conformance/exporter/_fusions.py rewrites into them only where listed).
    "RMSNormalization": _FLOATS,
    "RotaryEmbedding": _F32_F16,
    "Attention": _FLOATS,
    # Data movement. A "-mode" suffix names the kernel of one reduction mode of the op.
    "Trilu": _lacking(i8, i16, u8, bf16),
    "Pad": _lacking(i16, bf16),
    **dict.fromkeys("Expand Tile Compress".split(), _lacking(bf16)),
    "NonZero": _lacking(f64, i8, i16, bf16),
    **dict.fromkeys(
        "ScatterElements-add ScatterND-add ScatterElements-mul".split(), _lacking(f16, bf16)
    ),
    **dict.fromkeys("ScatterElements-max ScatterElements-min".split(), _lacking(b8, bf16)),
}
SUPPORTED["Equal"] = SUPPORTED["Equal"] | {b8}

#: Ops that onnxruntime's CPU provider runs only up to some revision: op -> the first opset
#: whose revision has no kernel ("Could not find an implementation for RoiAlign(22)", measured
#: with onnxruntime 1.31). An ONNX model has one opset per domain, so at those opsets a
#: translation computes the op from others (:func:`has_kernel`).
#: The random generators are among them: their opset-22 revisions (bfloat16 added) have no CPU
#: kernel, so random.py draws from a counter-based generator there.
#: CPU only: onnxruntime 1.31.1's CUDA provider does register RoiAlign-22 and the Random*-22
#: generators, yet a model emitting them fails to load wherever the CPU provider must run them,
#: so the table stays. On CUDA the stand-ins cost copies instead: the generator's BitShift and
#: BitwiseXor have no CUDA kernel at any version, its seed's Dropout-22 none either (randn at
#: opset 23: 15 of 37 nodes on CPU, 13 Memcpy, torch_onnx_conformance/exporter/diagnostics/placement.py predicts).
NO_KERNEL_FROM: dict[str, int] = {
    "RoiAlign": 22,
    "MaxRoiPool": 22,
    **dict.fromkeys(
        "RandomUniform RandomUniformLike RandomNormal RandomNormalLike Multinomial".split(),
        22,
    ),
}


# Ops whose output dtype is not the input dtype; their result is never cast back.
_BOOL_RESULT = frozenset("Equal Less LessOrEqual Greater GreaterOrEqual IsNaN IsInf".split())


def kernel_dtype(op_type: str, dtype: torch.dtype | None) -> torch.dtype | None:
    """``dtype`` when onnxruntime has a kernel for it (or it is unknown), else the dtype to
    compute in instead."""
    supported = SUPPORTED.get(op_type)
    if dtype is None or supported is None or dtype in supported:
        return dtype
    if dtype.is_floating_point:
        # float64 falls back to float32 only where there is no double kernel at all.
        candidates = [f32, f64]
    elif dtype in (i8, i16, u8, u16, b8):
        candidates = [i32, i64, f32]
    else:
        candidates = [i64, f64, f32]
    for candidate in candidates:
        if candidate in supported:
            return candidate
    raise TypeError(f"onnxruntime has no kernel for {op_type} that can compute {dtype} values")


def call(
    ctx: TranslationContext,
    op_type: str,
    *inputs: Any,
    _dtype: torch.dtype | None = None,
    **attributes: Any,
) -> ir.Value:
    """``ctx.op.<op_type>(*inputs)``, computed in a dtype onnxruntime supports.

    ``_dtype`` is the dtype of the data inputs (default: the first input's); inputs of that
    dtype are cast, other inputs (a Where condition, an int64 axes list) are left alone.
    """
    dtype = _dtype if _dtype is not None else ctx.dtype(inputs[0])
    builder = getattr(ctx.op, op_type)
    want = kernel_dtype(op_type, dtype)
    if want == dtype:
        return builder(*inputs, **attributes)
    # A Where condition stays bool even when the branches are bool too.
    first_data = 1 if op_type == "Where" else 0
    cast = [
        ctx.cast(x, want)
        if i >= first_data and isinstance(x, ir.Value) and ctx.dtype(x) == dtype
        else x
        for i, x in enumerate(inputs)
    ]
    out = builder(*cast, **attributes)
    return out if op_type in _BOOL_RESULT else ctx.cast(out, dtype)


def where(ctx: TranslationContext, cond: ir.Value, a: ir.Value, b: ir.Value) -> ir.Value:
    """``Where`` on values of one dtype, cast around the dtypes onnxruntime lacks."""
    dtype = ctx.dtype(a)
    if dtype is None:  # call() would take the condition's dtype for the data's
        return ctx.op.Where(cond, a, b)
    return call(ctx, "Where", cond, a, b, _dtype=dtype)


def data_op(
    ctx: TranslationContext, kernel: str, op_type: str, x: ir.Value, *rest: Any, **attrs: Any
) -> ir.Value:
    """``op_type(x, *rest)`` where only ``x`` (and the result) carry the data dtype."""
    dtype = ctx.dtype(x)
    run = kernel_dtype(kernel, dtype)
    builder = getattr(ctx.op, op_type)
    if run == dtype:
        return builder(x, *rest, **attrs)
    return ctx.cast(builder(ctx.cast(x, run), *rest, **attrs), dtype)


def typed_like(outputs: Any, like: ir.Value) -> Any:
    """Record ``like``'s dtype on op outputs the builder leaves untyped (Split, TopK, ...)."""
    for out in outputs if isinstance(outputs, tuple) else (outputs,):
        out.dtype = like.dtype
    return outputs


def has_kernel(op_type: str, dtype: torch.dtype | None = None, *, opset: int | None = None) -> bool:
    """Whether onnxruntime's CPU provider runs ``op_type`` on ``dtype`` values as they are (any
    dtype when None), in a model of default-domain ``opset`` (any opset when None)."""
    # (no arithmetic on the opset: exporter._translation_reuse replays its comparisons only)
    if opset is not None and op_type in NO_KERNEL_FROM and opset >= NO_KERNEL_FROM[op_type]:
        return False
    if dtype is None:
        return True
    supported = SUPPORTED.get(op_type)
    return supported is None or dtype in supported


def opmath_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype torch computes a low-precision float op in (it rounds once at the end)."""
    return f32 if dtype in (f16, bf16) else dtype
