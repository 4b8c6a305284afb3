"""The ATen -> ONNX op library. Importing this package registers every translation.

One module per op family; each translation is a plain function registered with
``@translates(aten.<op>.<overload>, ...)``. See ``_registry.py`` for the contract and
``_opsets.py`` for the opset-dependent choices.
"""

import importlib
import pkgutil

from torch_onnx_conformance.exporter.ops._context import TranslationContext
from torch_onnx_conformance.exporter.ops._registry import (
    DEFAULT_REGISTRY,
    Registry,
    register,
    translates,
)

# Every public module of this package is an op family; import them all so the registry is full
# no matter which one a user imported first.
for _info in pkgutil.iter_modules(__path__):
    if not _info.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_info.name}")

__all__ = ["DEFAULT_REGISTRY", "Registry", "TranslationContext", "register", "translates"]
