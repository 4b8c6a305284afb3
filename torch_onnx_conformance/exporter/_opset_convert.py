"""Which opsets ``export`` accepts, and the conversion down to those older than the op library.

The op library translates at opset 17 and newer (``ops/_opsets.py``). An older
``opset_version`` (torch.onnx accepts them too) is reached the way torch.onnx does it: translate
at the oldest opset the library knows, then let ONNX's version converter rewrite the model. The
converted model is checked with onnx.checker before it is handed back; a conversion the
converter cannot do is an error naming the opset, never a model at another opset than asked.
"""

from __future__ import annotations

import warnings
from typing import Any

import onnx
import onnx.checker
import onnx.version_converter
import onnx_ir as ir

from torch_onnx_conformance.exporter._errors import InvalidExportArgumentsError, OnnxExporterError
from torch_onnx_conformance.exporter.ops import _opsets

#: onnxruntime runs no model whose default-domain opset is older than this.
OLDEST_RUNNABLE_OPSET = 7


class OpsetConversionError(OnnxExporterError):
    """ONNX's version converter could not bring the model down to the requested opset."""

    stage = "opset conversion"


def check(opset_version: Any) -> int:
    """The opset the user asked for (the default when None), validated."""
    if opset_version is None:
        return _opsets.DEFAULT_OPSET
    if not isinstance(opset_version, int) or isinstance(opset_version, bool):
        raise InvalidExportArgumentsError(
            f"opset_version must be an int, got {type(opset_version).__name__}"
        )
    if not OLDEST_RUNNABLE_OPSET <= opset_version <= _opsets.MAX_OPSET:
        raise InvalidExportArgumentsError(
            f"opset_version {opset_version} is not supported; choose one from "
            f"{OLDEST_RUNNABLE_OPSET} to {_opsets.MAX_OPSET} (default {_opsets.DEFAULT_OPSET}). "
            f"{_opsets.MAX_OPSET} is the newest opset onnxruntime runs; opsets below "
            f"{_opsets.MIN_OPSET} are reached with ONNX's version converter."
        )
    return opset_version


def translation_opset(opset: int) -> int:
    """The opset the op library translates at for a requested ``opset``."""
    return max(opset, _opsets.MIN_OPSET)


def convert_down(model: ir.Model, opset: int) -> ir.Model:
    """``model`` at ``opset``: itself when it is there already, else converted and checked."""
    current = model.opset_imports.get("", opset)
    if current <= opset:
        return model
    warnings.warn(
        f"opset_version {opset} is older than opset {_opsets.MIN_OPSET}, the oldest the op "
        f"library translates to: the model was translated at opset {current} and converted "
        f"down with onnx.version_converter. Check it with export(..., verify=True).",
        UserWarning,
        stacklevel=5,  # export()'s caller, through the pipeline's finish
    )
    if model.functions:
        raise OpsetConversionError(
            f"cannot convert a model with local functions to opset {opset}: ONNX's version "
            f"converter does not convert function bodies. Export at opset_version >= "
            f"{_opsets.MIN_OPSET}."
        )
    proto = ir.serde.serialize_model(model)
    try:
        converted = onnx.version_converter.convert_version(proto, opset)
        onnx.checker.check_model(converted, full_check=True)
    except Exception as exc:
        raise OpsetConversionError(
            f"ONNX's version converter could not bring the model from opset {current} down to "
            f"opset {opset}: {type(exc).__name__}: {_first_line(exc)}. Export at "
            f"opset_version >= {_opsets.MIN_OPSET}, or at the oldest opset the failing op "
            f"converts to."
        ) from exc
    result = ir.serde.deserialize_model(converted)
    result.graph.meta.update(model.graph.meta)
    return result


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""
