"""torch-onnx-conformance's exporter: PyTorch -> ONNX through torch.export and our own op library.

Drop-in for ``torch.onnx.export(model, args, kwargs=..., dynamo=True)``::

    import exporter
    onnx_program = exporter.export(model, (x,), dynamic_shapes=({0: "batch"},))
    onnx_program.save("model.onnx")
"""

from exporter import ops as ops  # noqa: F401  (fills the registry)
from exporter._api import export
from exporter._errors import (
    CaptureError,
    DecompositionError,
    InvalidExportArgumentsError,
    OnnxCheckerError,
    OnnxExporterError,
    OnnxVerificationError,
    OptimizationError,
    SerializationError,
    TranslationError,
    UnsupportedOpError,
)
from exporter._flags import is_in_onnx_export
from exporter._program import ONNXProgram

# The diagnostics layer moved under exporter.diagnostics; `from exporter import verify` (and the
# others) keep working for code written before the move.
from exporter.diagnostics import bisect as bisect  # noqa: F401
from exporter.diagnostics import report as report  # noqa: F401
from exporter.diagnostics import repro as repro  # noqa: F401
from exporter.diagnostics import verify as verify  # noqa: F401
from exporter.ops._registry import DEFAULT_REGISTRY, register, translates

__all__ = [
    "export",
    "ONNXProgram",
    "is_in_onnx_export",
    "register",
    "translates",
    "DEFAULT_REGISTRY",
    "OnnxExporterError",
    "InvalidExportArgumentsError",
    "CaptureError",
    "DecompositionError",
    "UnsupportedOpError",
    "TranslationError",
    "OptimizationError",
    "SerializationError",
    "OnnxCheckerError",
    "OnnxVerificationError",
]
