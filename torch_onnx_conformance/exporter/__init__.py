"""torch-onnx-conformance's exporter: PyTorch -> ONNX through torch.export and our own op library.

Drop-in for ``torch.onnx.export(model, args, kwargs=..., dynamo=True)``::

    from torch_onnx_conformance import exporter
    onnx_program = exporter.export(model, (x,), dynamic_shapes=({0: "batch"},))
    onnx_program.save("model.onnx")
"""

import importlib

#: The opset ``export`` targets when none is given. Defined here, not in ``ops/_opsets.py``
#: (which reads it from here), so that light readers such as the conformance plugin get it
#: without importing the op library.
DEFAULT_OPSET = 20

# The public names load on first use, so that the exporter's plain-data modules (the stage
# vocabulary, the comparison rule) can be imported without torch and the op library: the
# conformance controller and the report builder read them and must stay light.
_PUBLIC = {
    "export": "torch_onnx_conformance.exporter._api",
    "CaptureCache": "torch_onnx_conformance.exporter._capture_cache",
    "ONNXProgram": "torch_onnx_conformance.exporter._program",
    "is_in_onnx_export": "torch_onnx_conformance.exporter._flags",
    "register": "torch_onnx_conformance.exporter.ops._registry",
    "translates": "torch_onnx_conformance.exporter.ops._registry",
    "DEFAULT_REGISTRY": "torch_onnx_conformance.exporter.ops._registry",
    **dict.fromkeys(
        (
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
        ),
        "torch_onnx_conformance.exporter._errors",
    ),
}
# The diagnostics layer moved under exporter.diagnostics; `from torch_onnx_conformance.exporter import verify` (and the
# others) keep working for code written before the move.
_MODULES = {
    "ops": "torch_onnx_conformance.exporter.ops",
    "bisect": "torch_onnx_conformance.exporter.diagnostics.bisect",
    "report": "torch_onnx_conformance.exporter.diagnostics.report",
    "repro": "torch_onnx_conformance.exporter.diagnostics.repro",
    "verify": "torch_onnx_conformance.exporter.diagnostics.verify",
}


def __getattr__(name: str):
    if name in _MODULES:
        value = importlib.import_module(_MODULES[name])
    elif name in _PUBLIC:
        # Every translation registers when the op library is imported: before any export.
        importlib.import_module("torch_onnx_conformance.exporter.ops")
        value = getattr(importlib.import_module(_PUBLIC[name]), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC, *_MODULES})


__all__ = list(_PUBLIC)
