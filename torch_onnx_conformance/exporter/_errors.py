"""Errors raised by the exporter: one class per stage, each naming what failed and where."""

from __future__ import annotations

import os
import re
from typing import Any

import torch


class OnnxExporterError(RuntimeError):
    """Base class of every export failure. ``stage`` names the step that failed."""

    stage = "export"


class InvalidExportArgumentsError(OnnxExporterError, TypeError):
    """An argument of ``export`` is wrong (type, shape tree, opset, names, paths)."""

    stage = "arguments"


class CaptureError(OnnxExporterError):
    """Every capture strategy (torch.export non-strict, strict, ...) failed."""

    stage = "capture"

    def __init__(self, message: str, attempts: list[tuple[str, BaseException]]) -> None:
        super().__init__(message)
        self.attempts = attempts


class DecompositionError(OnnxExporterError):
    stage = "decomposition"


class UnsupportedOpError(OnnxExporterError):
    """Some FX nodes have no translation. ``unsupported`` lists every one of them."""

    stage = "translation"

    def __init__(self, message: str, unsupported: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.unsupported = unsupported


class TranslationError(OnnxExporterError):
    """A translation function raised while building ONNX nodes for one FX node."""

    stage = "translation"

    def __init__(
        self, message: str, *, target: str = "", fx_node: str = "", source: str | None = None
    ) -> None:
        super().__init__(message)
        self.target = target
        self.fx_node = fx_node
        self.source = source


class OptimizationError(OnnxExporterError):
    stage = "optimize"


class SerializationError(OnnxExporterError):
    stage = "serialize"


class OnnxCheckerError(OnnxExporterError):
    stage = "checker"


class OnnxVerificationError(OnnxExporterError):
    """``verify`` found outputs that differ from the eager module (strict mode)."""

    stage = "verification"


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)')
# Frames inside torch itself or this exporter are never the user's line; model libraries
# (torchvision, transformers) are, because that is where the model's code lives.
# Package folders, not a "/torch/" substring: a virtualenv named torch (.tox/torch) would
# make every installed library, torchvision included, look like torch itself.
_LIBRARY_PARTS = (
    os.path.join(os.path.dirname(os.path.abspath(torch.__file__)), ""),
    "<eval_with_key>",
    os.path.join(os.path.dirname(os.path.abspath(__file__)), ""),
)


def user_source_line(stack_trace: str | None) -> str | None:
    """The innermost frame of user code in an FX node's stack trace: 'file:line in fn: code'."""
    if not stack_trace:
        return None
    frames = _FRAME.findall(stack_trace)
    if not frames:
        return None
    user = [f for f in frames if not any(p in f[0] for p in _LIBRARY_PARTS)]
    file, line, fn, code = (user or frames)[-1]
    return f"{file}:{line} in {fn}: {code.strip()}"
