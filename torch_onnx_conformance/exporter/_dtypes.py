"""torch dtype <-> ONNX (onnx_ir) data type, and tensors in and out of onnxruntime."""

from __future__ import annotations

import ctypes
import warnings
from typing import Any

import ml_dtypes
import numpy as np
import onnx_ir as ir
import torch

from torch_onnx_conformance.exporter._errors import OnnxExporterError

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
    # two values per element, carried as FLOAT4E2M1 of the unpacked shape (onnx_shape)
    torch.float4_e2m1fn_x2: ir.DataType.FLOAT4E2M1,
}
IR_TO_TORCH: dict[ir.DataType, torch.dtype] = {v: k for k, v in TORCH_TO_IR.items()}

#: Complex tensors travel as real tensors with a trailing dimension of 2.
COMPLEX_TO_REAL = {
    torch.complex32: torch.float16,
    torch.complex64: torch.float32,
    torch.complex128: torch.float64,
}


#: Why a torch dtype has no ONNX counterpart the exporter emits, and what to do instead.
_UNSUPPORTED_WHY = {
    torch.float8_e8m0fnu: (
        "ONNX's FLOAT8E8M0 exists, but onnxruntime has no kernel that reads or writes it"
    ),
}

# ------------------------------------------------------------------- float4 (packed pairs)
#: torch's float4 dtype: each element packs two float4 values, the first in the low nibble
#: (torch.testing's pack_uint4). ONNX's FLOAT4E2M1 tensors store two values per byte, the
#: first in the low nibble too: the bytes are the same, the ONNX shape's last dim twice torch's.
FLOAT4_X2 = torch.float4_e2m1fn_x2
#: The first opset whose Cast, Identity, Reshape... take FLOAT4E2M1.
FLOAT4_OPSET = 23
#: The torch ops the exporter carries float4 tensors through: the value itself, unchanged. Also
#: ``view(torch.uint8)`` and back (exporter.ops._float4) and FLOAT4_MOVES. Any other
#: computation on them (arithmetic, which torch has no kernels for, zeros of float4) is refused
#: by name.
FLOAT4_PASSTHROUGH = frozenset(
    [
        "aten.clone.default",
        "aten.alias.default",
        "aten.detach.default",
        "aten.lift_fresh_copy.default",
        "aten._to_copy.default",
        "aten.contiguous.default",
    ]
)


#: Ops that only move, select or repeat whole elements: on float4 pairs they do what they do on
#: the pairs' bytes, so the exporter runs them on the bytes (exporter._translate).
FLOAT4_MOVES = frozenset(
    [
        "aten.view.default",
        "aten._unsafe_view.default",
        "aten.reshape.default",
        "aten.cat.default",
        "aten.stack.default",
        "aten.slice.Tensor",
        "aten.select.int",
        "aten.narrow.default",
        "aten.index_select.default",
        "aten.permute.default",
        "aten.t.default",
        "aten.transpose.int",
        "aten.expand.default",
        "aten.squeeze.dim",
        "aten.squeeze.dims",
        "aten.unsqueeze.default",
        "aten.flatten.using_ints",
        "aten.repeat.default",
        "aten.flip.default",
    ]
)


def default_opset_for(model: Any, args: Any, kwargs: Any, default: int) -> int:
    """The opset an export without ``opset_version`` takes: ``default``, or the first opset
    with FLOAT4E2M1 when float4 tensors are among the inputs or weights (with a warning)."""
    if default >= FLOAT4_OPSET:
        return default
    tensors = [*torch.utils._pytree.tree_leaves((args, kwargs))]
    if isinstance(model, torch.nn.Module):
        tensors += [*model.parameters(), *model.buffers()]
    elif isinstance(model, torch.export.ExportedProgram):
        tensors += [*model.state_dict.values(), *model.constants.values()]
    if not any(getattr(t, "dtype", None) is FLOAT4_X2 for t in tensors):
        return default
    warnings.warn(
        f"exporting at opset {FLOAT4_OPSET}, not the default {default}: the model holds "
        f"torch.float4_e2m1fn_x2 tensors, and ONNX has FLOAT4E2M1 from opset {FLOAT4_OPSET} on. "
        f"Pass opset_version to choose.",
        UserWarning,
        stacklevel=4,  # export()'s caller, through _validate.validate
    )
    return FLOAT4_OPSET


def onnx_shape(dtype: torch.dtype, shape: list[Any]) -> list[Any]:
    """The ONNX shape of a torch tensor's values: float4 pairs unpacked along the last dim."""
    if dtype is not FLOAT4_X2:
        return shape
    if not shape:
        return [2]
    return [*shape[:-1], shape[-1] * 2]


def ir_tensor(tensor: torch.Tensor, name: str | None = None) -> ir.TensorProtocol:
    """An ONNX tensor of ``tensor``'s data: float4 pairs as FLOAT4E2M1 of the unpacked shape,
    its bytes unchanged; other dtypes shared with torch's memory."""
    if tensor.dtype is not FLOAT4_X2:
        return ir.tensor_adapters.TorchTensor(tensor, name=name)
    packed = tensor.detach().cpu().contiguous().view(torch.uint8).numpy()
    shape = onnx_shape(tensor.dtype, list(tensor.shape))
    return ir.PackedTensor(packed.reshape(-1), ir.DataType.FLOAT4E2M1, shape=shape, name=name)


def float4_values(tensor: torch.Tensor) -> np.ndarray:
    """A float4_e2m1fn_x2 tensor unpacked: an ml_dtypes float4_e2m1fn array, one value per
    element, of the ONNX shape (what the ONNX graph declares and onnx's reference runs on)."""
    packed = tensor.detach().cpu().contiguous().view(torch.uint8).numpy()
    codes = np.stack([packed & 0x0F, packed >> 4], axis=-1)
    shape = onnx_shape(tensor.dtype, list(tensor.shape))
    return codes.reshape(shape).view(ml_dtypes.float4_e2m1fn)


def float4_packed(array: Any) -> torch.Tensor:
    """An ml_dtypes float4_e2m1fn array (one value per element) packed back into torch's
    float4_e2m1fn_x2, pairs along the last dim."""
    codes = np.asarray(array).view(np.uint8) & 0x0F
    if codes.shape[-1] % 2:
        raise ValueError(
            f"a float4 array of shape {codes.shape} cannot pack into pairs: its last dim is odd"
        )
    pairs = codes.reshape(*codes.shape[:-1], codes.shape[-1] // 2, 2)
    packed = pairs[..., 0] | (pairs[..., 1] << 4)
    return torch.from_numpy(np.ascontiguousarray(packed)).view(FLOAT4_X2)


class UnsupportedDtypeError(OnnxExporterError, TypeError):
    """A tensor of a torch dtype the exported model cannot carry."""

    stage = "translation"


def to_ir(dtype: torch.dtype) -> ir.DataType:
    try:
        return TORCH_TO_IR[dtype]
    except KeyError:
        why = _UNSUPPORTED_WHY.get(dtype, "ONNX has no data type for it")
        raise UnsupportedDtypeError(
            f"torch dtype {dtype} cannot be exported: {why}. Keep such tensors out of the "
            f"exported graph's inputs, outputs, weights and computations, or view or cast them "
            f"to a supported dtype (for example tensor.view(torch.uint8) for the raw bytes, or "
            f"a float8 type such as torch.float8_e4m3fn)."
        ) from None


#: float8 types whose torch conversion turns overflow into NaN or inf. ONNX's Cast saturates to
#: the largest finite value unless ``saturate=0``; only float8_e4m3fn saturates in torch too.
FLOAT8_OVERFLOW_NOT_SATURATED = frozenset(
    [ir.DataType.FLOAT8E4M3FNUZ, ir.DataType.FLOAT8E5M2, ir.DataType.FLOAT8E5M2FNUZ]
)
FLOAT8_TYPES = FLOAT8_OVERFLOW_NOT_SATURATED | {ir.DataType.FLOAT8E4M3FN}


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


# ------------------------------------------------------------------- onnxruntime boundary
#: Types numpy lacks, as ml_dtypes arrays (bfloat16 and the float8 types onnxruntime runs).
TORCH_TO_ML_DTYPES = {
    torch.bfloat16: ml_dtypes.bfloat16,
    torch.float8_e4m3fn: ml_dtypes.float8_e4m3fn,
    torch.float8_e4m3fnuz: ml_dtypes.float8_e4m3fnuz,
    torch.float8_e5m2: ml_dtypes.float8_e5m2,
    torch.float8_e5m2fnuz: ml_dtypes.float8_e5m2fnuz,
}
#: ml_dtypes array dtype -> (torch dtype, ONNX type) for raw-byte transfers through OrtValues.
_ML_DTYPES = {
    np.dtype(ml_type): (dtype, TORCH_TO_IR[dtype]) for dtype, ml_type in TORCH_TO_ML_DTYPES.items()
}
#: onnxruntime's Python API takes and returns these (bfloat16, float8) only as OrtValues of raw
#: bytes: numpy has no such types, and onnxruntime does not read ml_dtypes arrays.
_ORT_RAW_BY_TYPE = {int(onnx_type): dtype for dtype, onnx_type in _ML_DTYPES.values()}
_ORT_RAW_TYPE_NAMES = tuple(
    f"tensor({str(onnx_type).lower()})" for _, onnx_type in _ML_DTYPES.values()
)


def to_numpy(tensor: Any) -> np.ndarray:
    """A CPU numpy array of ``tensor``'s values (ml_dtypes arrays for the types numpy lacks,
    float4 pairs unpacked); a view where torch's memory can be shared, so large weights are
    not copied. Anything else (a Python number, an array) as ``np.asarray`` gives it."""
    if not isinstance(tensor, torch.Tensor):
        return np.asarray(tensor)
    if tensor.dtype is FLOAT4_X2:
        return float4_values(tensor)
    tensor = tensor.detach().cpu().resolve_conj().resolve_neg()
    ml_type = TORCH_TO_ML_DTYPES.get(tensor.dtype)
    if ml_type is not None:
        raw = torch.uint16 if tensor.element_size() == 2 else torch.uint8
        return tensor.view(raw).numpy().view(ml_type)
    if tensor.dtype not in TORCH_TO_IR:
        to_ir(tensor.dtype)  # raises the error that names the dtype
    return tensor.numpy()


def graph_array(value: Any) -> np.ndarray:
    """``value`` as the ONNX graph holds it: a complex tensor as real pairs along a trailing
    dim of 2 (``COMPLEX_TO_REAL``), anything else as :func:`to_numpy` gives it."""
    if isinstance(value, torch.Tensor) and value.is_complex():
        value = torch.view_as_real(value)
    return to_numpy(value)


def from_numpy(array: Any) -> torch.Tensor:
    """A torch tensor of an onnxruntime result (ml_dtypes arrays and ulonglong included)."""
    array = np.asarray(array)
    if array.dtype == ml_dtypes.float4_e2m1fn:
        return float4_packed(array)
    if array.dtype in _ML_DTYPES:
        raw = np.uint16 if array.dtype.itemsize == 2 else np.uint8
        return torch.from_numpy(array.view(raw).copy()).view(_ML_DTYPES[array.dtype][0])
    if array.dtype.kind in "iu":
        # numpy's longlong/ulonglong are distinct from int64/uint64, which torch wants.
        array = array.view(f"{array.dtype.kind}{array.dtype.itemsize}")
    return torch.from_numpy(array)


def run_session(session: Any, feeds: dict[str, np.ndarray]) -> list[torch.Tensor]:
    """``session.run`` with torch results, bfloat16 and float8 inputs and outputs included."""
    raw_outputs = any(o.type in _ORT_RAW_TYPE_NAMES for o in session.get_outputs())
    if not raw_outputs and not any(a.dtype in _ML_DTYPES for a in feeds.values()):
        return [from_numpy(o) for o in session.run(None, feeds)]
    import onnxruntime as ort

    values = {}
    for name, array in feeds.items():
        array = np.asarray(array, order="C")  # ascontiguousarray would make a 0-d array 1-D
        if array.dtype in _ML_DTYPES:
            raw = array.view(np.uint16 if array.dtype.itemsize == 2 else np.uint8)
            onnx_type = int(_ML_DTYPES[array.dtype][1])
            values[name] = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(raw, onnx_type)
        else:
            values[name] = ort.OrtValue.ortvalue_from_numpy(array)
    names = [o.name for o in session.get_outputs()]
    return [_from_ortvalue(v) for v in session.run_with_ort_values(names, values)]


def _from_ortvalue(value: Any) -> torch.Tensor:
    dtype = _ORT_RAW_BY_TYPE.get(value.element_type())
    if dtype is None:
        return from_numpy(value.numpy())
    size = value.tensor_size_in_bytes()
    raw = bytearray((ctypes.c_uint8 * size).from_address(value.data_ptr())) if size else b""
    data = torch.frombuffer(raw, dtype=torch.uint8) if size else torch.empty(0, dtype=torch.uint8)
    return data.view(dtype).reshape(value.shape())
