"""The "exporting to ONNX" flag that model code (transformers among it) branches on."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator

_depth = 0


def is_in_onnx_export() -> bool:
    """True while ``exporter.export`` is capturing or translating a model."""
    return _depth > 0


@contextlib.contextmanager
def onnx_export_flag() -> Iterator[None]:
    """Raise our flag and torch's, so ``torch.onnx.is_in_onnx_export()`` is True as well.

    Setting torch's flag is the one place this package touches torch.onnx: model code calls
    ``torch.onnx.is_in_onnx_export()`` and must see True while we export.
    """
    global _depth
    torch_flags = importlib.import_module("torch.onnx._internal.exporter._flags")
    previous = torch_flags._is_onnx_exporting
    _depth += 1
    torch_flags._is_onnx_exporting = True
    try:
        yield
    finally:
        _depth -= 1
        torch_flags._is_onnx_exporting = previous
