"""Model zoo: `ModelCase` registry of torchvision, transformers and synthetic models.

``cases(tier)`` lists the cases of a cost tier (smoke, default, full; each includes the cheaper
ones), ``get(name)`` returns one, and ``case.build()`` gives ``(module, args, kwargs)`` with
deterministic, non-degenerate weights. See ``torch_onnx_conformance/model_zoo/README.md``.
"""

from torch_onnx_conformance.model_zoo.registry import (
    FAMILIES,
    TIERS,
    ModelCase,
    Tolerance,
    UnknownCaseError,
    cases,
    families,
    get,
    register,
)
from torch_onnx_conformance.model_zoo.vacuity import is_vacuous, output_scale

__all__ = [
    "FAMILIES",
    "TIERS",
    "ModelCase",
    "Tolerance",
    "UnknownCaseError",
    "cases",
    "families",
    "get",
    "is_vacuous",
    "output_scale",
    "register",
]
