"""torch dtype <-> ONNX (onnx_ir) data type."""

from __future__ import annotations

import onnx_ir as ir
import torch

TORCH_TO_IR: dict[torch.dtype, ir.DataType] = {
    torch.float32: ir.DataType.FLOAT,
    torch.float64: ir.DataType.DOUBLE,
    torch.float16: ir.DataType.FLOAT16,
    torch.bfloat16: ir.DataType.BFLOAT16,
    torch.int8: ir.DataType.INT8,
    torch.int16: ir.DataType.INT16,
    torch.int32: ir.DataType.INT32,
    torch.int64: ir.DataType.INT64,
    torch.uint8: ir.DataType.UINT8,
    torch.uint16: ir.DataType.UINT16,
    torch.uint32: ir.DataType.UINT32,
    torch.uint64: ir.DataType.UINT64,
    torch.bool: ir.DataType.BOOL,
    torch.complex64: ir.DataType.COMPLEX64,
    torch.complex128: ir.DataType.COMPLEX128,
    torch.float8_e4m3fn: ir.DataType.FLOAT8E4M3FN,
    torch.float8_e4m3fnuz: ir.DataType.FLOAT8E4M3FNUZ,
    torch.float8_e5m2: ir.DataType.FLOAT8E5M2,
    torch.float8_e5m2fnuz: ir.DataType.FLOAT8E5M2FNUZ,
}
IR_TO_TORCH: dict[ir.DataType, torch.dtype] = {v: k for k, v in TORCH_TO_IR.items()}

#: Complex tensors travel as real tensors with a trailing dimension of 2.
COMPLEX_TO_REAL = {
    torch.complex32: torch.float16,
    torch.complex64: torch.float32,
    torch.complex128: torch.float64,
}


def to_ir(dtype: torch.dtype) -> ir.DataType:
    try:
        return TORCH_TO_IR[dtype]
    except KeyError:
        raise TypeError(f"torch dtype {dtype} has no ONNX equivalent") from None


def to_torch(dtype: ir.DataType | None) -> torch.dtype | None:
    if dtype is None:
        return None
    return IR_TO_TORCH.get(dtype)


def is_float(dtype: torch.dtype | None) -> bool:
    return dtype is not None and dtype.is_floating_point


def is_int(dtype: torch.dtype | None) -> bool:
    return (
        dtype is not None
        and not dtype.is_floating_point
        and not dtype.is_complex
        and (dtype is not torch.bool)
    )
