"""Reduction helpers shared by the reduction, sort/search, norm, linalg, FFT and layer families.

They answer the questions every reduction asks: which axes an ATen ``dim`` argument names, how
to call a Reduce* op at the target opset (axes as an input or as an attribute), whether the
reduced axes stay (keepdims), how many elements a reduction combines, and which dtype
onnxruntime can reduce in while accumulating like torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import onnx_ir as ir
import torch

from torch_onnx_conformance.exporter.ops import _kernels
from torch_onnx_conformance.exporter.ops._shape import axis

if TYPE_CHECKING:
    from torch_onnx_conformance.exporter.ops._context import TranslationContext

i64 = torch.int64

#: ReduceSum takes axes as an input since opset 13; the rest only since 18.
_AXES_INPUT_SINCE_13 = frozenset({"ReduceSum"})


# ------------------------------------------------------------------------------------ axes
def reduce_axes(dim: Any, rank: int) -> list[int] | None:
    """Sorted non-negative axes named by an ATen ``dim`` argument; None means every axis.

    ``None`` and ``[]`` reduce everything (ATen's convention), and so does any dim of a 0-d
    tensor (its only valid dims are 0 and -1). Each dim is range-checked (``_shape.axis``).
    """
    if dim is None:
        return None
    dims = [dim] if isinstance(dim, int) else list(dim)
    if not dims or rank == 0:
        return None
    return sorted({axis(d, rank) for d in dims})


# ---------------------------------------------------------------------------------- reduce
def reduce(
    ctx: TranslationContext,
    op_type: str,
    x: ir.Value,
    axes: Sequence[int] | None,
    keepdim: bool | int,
) -> ir.Value:
    """``op_type`` (ReduceSum, ReduceMax, ...) over ``axes`` (None: all), axes as the opset wants.

    Axes should be non-negative: onnxruntime ignores negative axes when the input is empty.
    """
    build = getattr(ctx.op, op_type)
    keepdims = int(bool(keepdim))
    if axes is None:
        return build(x, keepdims=keepdims)
    axes = [int(a) for a in axes]
    if op_type in _AXES_INPUT_SINCE_13 or ctx.has("ReduceMax-axes-input"):
        return build(x, ctx.const(axes, i64), keepdims=keepdims)
    return build(x, axes=axes, keepdims=keepdims)


def reduce_dtype(op_type: str, dtype: torch.dtype) -> torch.dtype:
    """The dtype onnxruntime can run ``op_type`` in for ``dtype`` values, accumulating like torch.

    Half floats accumulate in float32 (torch's CPU kernels do the same); small integers and bool
    widen to a type with a kernel.
    """
    if dtype in (torch.float16, torch.bfloat16):
        return torch.float32
    minmax = op_type in ("ReduceMax", "ReduceMin", "ArgMax", "ArgMin", "TopK")
    supported = _kernels.SUPPORTED[op_type]
    if dtype in supported:
        return dtype
    if dtype is torch.bool:
        return torch.uint8 if minmax else i64
    if dtype.is_floating_point:
        return torch.float32
    if dtype in (torch.int16,) and minmax:
        return torch.int32
    return i64


def reduce_as(
    ctx: TranslationContext,
    op_type: str,
    x: ir.Value,
    axes: list[int] | None,
    keepdim: bool,
    out_dtype: torch.dtype,
) -> ir.Value:
    """Reduce in a dtype onnxruntime supports, return ``out_dtype``."""
    work = reduce_dtype(op_type, ctx.dtype(x))
    return ctx.cast(reduce(ctx, op_type, ctx.cast(x, work), axes, keepdim), out_dtype)


def float_work(dtype: torch.dtype) -> torch.dtype:
    """The float dtype a float-valued reduction (mean, var, norm) computes in."""
    if dtype in (torch.float16, torch.bfloat16) or not dtype.is_floating_point:
        return torch.float32
    return dtype


# ---------------------------------------------------------------------------------- counts
def static_count(ctx: TranslationContext, x: ir.Value, axes: list[int] | None) -> int | None:
    """Number of elements a reduction over ``axes`` combines, when it is static."""
    axes = list(range(ctx.rank(x))) if axes is None else axes
    shape = ctx.shape(x)
    if shape is None:
        return None
    sizes = [shape[a] for a in axes]
    if any(isinstance(s, int) and s == 0 for s in sizes):
        return 0
    if not all(isinstance(s, int) for s in sizes):
        return None
    return math.prod(sizes)


def count(ctx: TranslationContext, x: ir.Value, axes: list[int] | None) -> ir.Value | int:
    """Number of elements a reduction over ``axes`` combines: an int when static, else 0-d."""
    n = static_count(ctx, x, axes)
    if n is not None:
        return n
    axes = list(range(ctx.rank(x))) if axes is None else axes
    sizes = ctx.op.Gather(ctx.op.Shape(x), ctx.const(axes, i64), axis=0)
    return ctx.op.ReduceProd(sizes, keepdims=0)
