"""Small helpers shared by the neural-network families (nn, matmul, conv_pool, attention) and
the reductions that need a dimension size as a value.

They answer the questions every layer translation asks: which dtype onnxruntime can compute
in, how big a dimension is (a constant when static, a Shape slice when symbolic).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import onnx_ir as ir
import torch

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


def dim_size(ctx: Any, x: ir.Value, axis: int) -> ir.Value:
    """1-D int64 [size of ``axis``]: a constant when known, else sliced from Shape."""
    shape = ctx.shape(x)
    rank = ctx.rank(x)
    if rank is None:  # a fresh intermediate without FX metadata: ask the graph
        return ctx.op.Shape(x, start=axis, end=axis + 1 if axis != -1 else None)
    axis = axis % rank
    if shape is not None and isinstance(shape[axis], int):
        return ctx.const([shape[axis]], torch.int64)
    return ctx.op.Shape(x, start=axis, end=axis + 1)


def shape_slice(ctx: Any, x: ir.Value, start: int, end: int | None = None) -> ir.Value:
    """1-D int64 sizes of dims [start, end): constant when static, else from Shape."""
    shape = ctx.shape(x)
    rank = ctx.rank(x)
    stop = rank if end is None else end % (rank + 1) if end >= 0 else rank + end
    start = start if start >= 0 else rank + start
    if shape is not None and all(isinstance(d, int) for d in shape[start:stop]):
        return ctx.const([int(d) for d in shape[start:stop]], torch.int64)
    return ctx.op.Shape(x, start=start, end=stop)


def concat_ints(ctx: Any, *parts: Any) -> ir.Value:
    """Concatenate 1-D int64 values and Python int lists into one shape value."""
    values = []
    for p in parts:
        if isinstance(p, ir.Value):
            values.append(p)
        else:
            p = list(p)
            if not p:
                continue
            values.append(ctx.ints(p))
    if all(v.const_value is not None or _is_const(v) for v in values):
        flat = []
        for v in values:
            flat.extend(_const_ints(v))
        return ctx.const(flat, torch.int64)
    if len(values) == 1:
        return values[0]
    return ctx.op.Concat(*values, axis=0)


def _is_const(v: ir.Value) -> bool:
    node = v.producer()
    return node is not None and node.op_type == "Constant"


def _const_ints(v: ir.Value) -> list[int]:
    if v.const_value is not None:
        return [int(i) for i in v.const_value.numpy().reshape(-1)]
    node = v.producer()
    return [int(i) for i in node.attributes["value"].as_tensor().numpy().reshape(-1)]


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


def unbatched(ctx: Any, x: ir.Value, spatial: int) -> tuple[ir.Value, bool]:
    """Give an unbatched (C, *spatial) input a batch axis; report whether one was added."""
    if ctx.rank(x) == spatial + 1:
        return ctx.op.Unsqueeze(x, [0]), True
    return x, False


def neg_inf(ctx: Any, dtype: torch.dtype) -> ir.Value:
    return ctx.const(float("-inf"), dtype)


def prod_of_dims(ctx: Any, x: ir.Value, start: int, end: int | None = None) -> ir.Value:
    """1-D int64 [product of dims start..end) of x] (1 for an empty range)."""
    shape = ctx.shape(x)
    rank = ctx.rank(x)
    stop = rank if end is None else (end if end >= 0 else rank + end)
    start = start if start >= 0 else rank + start
    dims = shape[start:stop] if shape is not None else None
    if dims is not None and all(isinstance(d, int) for d in dims):
        total = 1
        for d in dims:
            total *= d
        return ctx.const([total], torch.int64)
    return ctx.op.ReduceProd(ctx.op.Shape(x, start=start, end=stop), keepdims=1)


def reshape(ctx: Any, x: ir.Value, *parts: Any) -> ir.Value:
    """Reshape to explicit sizes (no -1, zeros mean zero): safe for empty tensors."""
    return ctx.op.Reshape(x, concat_ints(ctx, *parts), allowzero=1)


def static_ints(items: Sequence[Any], what: str) -> list[int]:
    """ATen SymInt[] layer hyper-parameters must be plain ints for ONNX attributes."""
    if not all(isinstance(i, int) for i in items):
        raise NotImplementedError(
            f"{what}={items!r} depends on a dynamic size; ONNX needs it as a constant. Export "
            f"with that dimension static (drop it from dynamic_shapes)."
        )
    return [int(i) for i in items]


def to_work(
    ctx: Any, x: ir.Value, supported: Iterable[torch.dtype] = FLOAT32_ONLY
) -> tuple[ir.Value, torch.dtype]:
    """x cast to a dtype onnxruntime computes ``supported`` ops in, and its own dtype."""
    dtype = ctx.dtype(x)
    work = compute_dtype(dtype, supported)
    return ctx.cast(x, work), dtype
