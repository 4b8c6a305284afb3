"""Small helpers shared by the neural-network families (nn, matmul, conv_pool, attention).

They answer the questions every layer translation asks: which dtype onnxruntime can compute
in, and how ATen's int[N] layer arguments (kernel sizes, strides) read. Sizes and reshapes live
in ``_shape``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import onnx_ir as ir
import torch

if TYPE_CHECKING:
    from torch_onnx_conformance.exporter.ops._context import TranslationContext

#: onnxruntime's CPU kernels for float math (Gemm, Softmax, LayerNormalization, ...).
FLOATS = frozenset({torch.float32, torch.float64, torch.float16})
#: Kernels such as Conv, AveragePool, InstanceNormalization only have float32 (float16 runs
#: through onnxruntime's own cast insertion).
FLOAT32_ONLY = frozenset({torch.float32, torch.float16})


def compute_dtype(dtype: torch.dtype | None, supported: Iterable[torch.dtype]) -> torch.dtype:
    """The dtype to compute in: ``dtype`` itself when supported, else the closest wider one."""
    supported = frozenset(supported)
    if dtype in supported:
        return dtype
    if dtype is not None and dtype.is_floating_point:
        return torch.float32 if torch.float32 in supported else next(iter(supported))
    if torch.int64 in supported:
        return torch.int64
    return torch.float32


def as_int_list(value: Any, length: int) -> list[Any]:
    """An ATen int[N] argument (int or list, possibly shorter) as a list of ``length`` items."""
    if isinstance(value, (list, tuple)):
        items = list(value)
    else:
        items = [value]
    if len(items) == 1 and length > 1:
        items = items * length
    return items


def is_static_ints(items: Sequence[Any]) -> bool:
    return all(isinstance(i, int) for i in items)


def unbatched(ctx: TranslationContext, x: ir.Value, spatial: int) -> tuple[ir.Value, bool]:
    """Give an unbatched (C, *spatial) input a batch axis; report whether one was added."""
    if ctx.rank(x) == spatial + 1:
        return ctx.op.Unsqueeze(x, [0]), True
    return x, False


def neg_inf(ctx: TranslationContext, dtype: torch.dtype) -> ir.Value:
    return ctx.const(float("-inf"), dtype)


def static_ints(items: Sequence[Any], what: str) -> list[int]:
    """ATen SymInt[] layer hyper-parameters must be plain ints for ONNX attributes."""
    if not all(isinstance(i, int) for i in items):
        raise NotImplementedError(
            f"{what}={items!r} depends on a dynamic size; ONNX needs it as a constant. Export "
            f"with that dimension static (drop it from dynamic_shapes)."
        )
    return [int(i) for i in items]


def to_work(
    ctx: TranslationContext, x: ir.Value, supported: Iterable[torch.dtype] = FLOAT32_ONLY
) -> tuple[ir.Value, torch.dtype]:
    """x cast to a dtype onnxruntime computes ``supported`` ops in, and its own dtype."""
    dtype = ctx.dtype(x)
    work = compute_dtype(dtype, supported)
    return ctx.cast(x, work), dtype
