"""The model registry: one `ModelCase` per model the conformance suite exports.

Cases register themselves when their module (`torchvision_cases`, `transformers_cases`,
`synthetic`) is imported; `cases()`, `get()` and `families()` import them on first use.
Registering is cheap: models are constructed, and transformers imported, only by `build()`.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from torch import nn

from torch_onnx_conformance.model_zoo import shapes

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, packaged as tomli
    import tomli as tomllib

TIERS = ("smoke", "default", "full")
FAMILIES = (
    "torchvision-classification",
    "torchvision-segmentation",
    "torchvision-detection",
    "torchvision-video",
    "torchvision-optical-flow",
    "transformers-encoder",
    "transformers-decoder",
    "transformers-seq2seq",
    "transformers-vision",
    "transformers-audio",
    "transformers-auto",
    "synthetic",
    "quantized",
)
DTYPES = ("f32", "f16", "bf16", "i64", "b8")
_CASE_MODULES = (
    "torch_onnx_conformance.model_zoo.synthetic",
    "torch_onnx_conformance.model_zoo.torchvision_cases",
    "torch_onnx_conformance.model_zoo.transformers_cases",
    "torch_onnx_conformance.model_zoo.transformers_auto",
    "torch_onnx_conformance.model_zoo.quantized_cases",
)
_TOLERANCES_PATH = Path(__file__).with_name("tolerances.toml")

Inputs = tuple[tuple[Any, ...], dict[str, Any]]


class UnknownCaseError(KeyError):
    """No registered case has the requested name."""


@dataclasses.dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float
    reason: str


@dataclasses.dataclass(frozen=True, eq=False)
class ModelCase:
    """A model with deterministic weights, example inputs and their dynamic axes.

    ``make_inputs(sizes)`` builds ``(args, kwargs)`` for a mapping from axis name to size;
    ``sizes`` are the example sizes and ``second_sizes`` the sizes the second inputs use (every
    axis named in ``dynamic_shapes`` changes between the two). Axes a case derives from others
    (a total length = past + new tokens) are named in ``dynamic_shapes`` but not in ``sizes``.
    """

    name: str
    family: str
    tier: str
    make_module: Callable[[], nn.Module]
    make_inputs: Callable[[Mapping[str, int]], Inputs]
    sizes: Mapping[str, int]
    second_sizes: Mapping[str, int]
    dynamic_shapes: Any
    capture: str | None = None
    notes: str = ""
    custom_translation_table_factory: Callable[[], dict[Any, Callable[..., Any]]] | None = None
    #: replaces the element-wise comparison: (eager outputs, ONNX outputs) -> problems, none
    #: when they agree (detections compare up to score ties: exporter.diagnostics.detection_match)
    compare: Callable[[Any, Any], list[str]] | None = None
    #: a decoder's greedy-generation prompt: keywords (input_ids, attention_mask, an empty
    #: past_key_values) for exporter.diagnostics.generation.check_greedy, which the model suite
    #: runs after the compare: 8 tokens through the graph must equal eager's
    greedy_prompt: Callable[[], dict[str, Any]] | None = None
    #: checks of the exported file beyond its outputs, run after the compare: (module, args,
    #: kwargs, ONNX path, opset) -> (problems, facts for the row); quantized cases check their
    #: Q/DQ structure and onnxruntime's fusion (model_zoo.quantized_cases)
    check_export: Callable[..., tuple[list[str], dict[str, Any]]] | None = None
    #: the dtypes the case runs in (a quantized model is made for float32 activations: cast to
    #: float16 it is another program than the one quantized)
    dtypes: tuple[str, ...] = ("f32", "f16")

    @property
    def tags(self) -> frozenset[str]:
        """Cost tiers the case belongs to: a smoke case is also default and full."""
        return frozenset(TIERS[TIERS.index(self.tier) :])

    def build(self) -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
        """The module in eval mode with deterministic weights, and the example inputs."""
        module = self.make_module().eval()
        args, kwargs = self.inputs()
        return module, args, kwargs

    def inputs(self, sizes: Mapping[str, int] | None = None) -> Inputs:
        args, kwargs = self.make_inputs(dict(self.sizes if sizes is None else sizes))
        return tuple(args), dict(kwargs)

    def second_inputs(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Inputs:
        """Inputs in which every named dynamic axis differs from its size in ``(args, kwargs)``.

        Each axis moves by the same step as from ``sizes`` to ``second_sizes``, so the same axis
        name always gets the same new size, and inputs built from the second ones move again.
        """
        seen = shapes.axis_sizes(self.dynamic_shapes, tuple(args), kwargs)
        new_sizes = {
            name: seen.get(name, size) + self.second_sizes[name] - size
            for name, size in self.sizes.items()
        }
        return self.inputs(new_sizes)

    def export_dynamic_shapes(self, dim_for: Callable[[str], Any] | None = None) -> Any:
        """``dynamic_shapes`` for `torch.export.export` (axis names become `Dim.DYNAMIC`)."""
        return shapes.to_export_dynamic_shapes(self.dynamic_shapes, dim_for)

    @property
    def axis_names(self) -> frozenset[str]:
        return frozenset(
            name
            for spec in _shape_leaves(self.dynamic_shapes)
            if spec is not None
            for name in spec.values()
        )

    def tolerance(self, dtype: str = "f32") -> Tolerance | None:
        """The override from ``tolerances.toml`` for this case and dtype, or None for defaults."""
        return tolerance_overrides().get((self.name, dtype))


def register(case: ModelCase) -> ModelCase:
    if case.family not in FAMILIES:
        raise ValueError(
            f"case {case.name!r}: unknown family {case.family!r}; use one of {FAMILIES}"
        )
    if case.tier not in TIERS:
        raise ValueError(f"case {case.name!r}: unknown tier {case.tier!r}; use one of {TIERS}")
    if case.name in _REGISTRY:
        raise ValueError(f"case {case.name!r} is registered twice; case names must be unique")
    missing = set(case.sizes) ^ set(case.second_sizes)
    if missing:
        raise ValueError(
            f"case {case.name!r}: sizes and second_sizes must name the same axes, differ on "
            f"{sorted(missing)}"
        )
    unchanged = [name for name, size in case.sizes.items() if case.second_sizes[name] == size]
    if unchanged:
        raise ValueError(f"case {case.name!r}: second_sizes must change {unchanged}")
    _REGISTRY[case.name] = case
    return case


def get(name: str) -> ModelCase:
    _load_cases()
    try:
        return _REGISTRY[name]
    except KeyError:
        close = difflib.get_close_matches(name, list(_REGISTRY), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else "; see model_zoo.cases()"
        raise UnknownCaseError(f"no model case named {name!r}{hint}") from None


def cases(tier: str = "full", family: str | None = None) -> list[ModelCase]:
    """Cases in ``tier`` (``"default"`` includes the smoke cases), optionally of one family."""
    if tier not in TIERS:
        raise ValueError(f"unknown tier {tier!r}; use one of {TIERS}")
    if family is not None and family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; use one of {FAMILIES}")
    _load_cases()
    return [
        case
        for case in _REGISTRY.values()
        if tier in case.tags and (family is None or case.family == family)
    ]


def families() -> list[str]:
    """Families that have at least one registered case, in `FAMILIES` order."""
    _load_cases()
    present = {case.family for case in _REGISTRY.values()}
    return [family for family in FAMILIES if family in present]


@functools.cache
def tolerance_overrides() -> dict[tuple[str, str], Tolerance]:
    """The overrides in ``torch_onnx_conformance/model_zoo/tolerances.toml`` (see `load_tolerances`)."""
    return load_tolerances(_TOLERANCES_PATH)


def load_tolerances(path: Path) -> dict[tuple[str, str], Tolerance]:
    """A tolerance file as ``{(case name, dtype): Tolerance}``.

    Each ``[cases."<name>"]`` table's own ``rtol``/``atol`` apply to f32; a sub-table named
    after a dtype (``[cases."<name>".f16]``) applies to that dtype. Every entry needs a reason
    (a sub-table may inherit its case's).
    """
    with path.open("rb") as file:
        data = tomllib.load(file)
    unknown_top = set(data) - {"cases"}
    if unknown_top:
        raise ValueError(
            f"{path}: unknown top-level keys {sorted(unknown_top)}; put entries under "
            '[cases."<case name>"]'
        )
    overrides = {}
    for name, table in data.get("cases", {}).items():
        for dtype, entry in _tolerance_entries(path, name, table):
            overrides[(name, dtype)] = entry
    return overrides


def _tolerance_entries(
    path: Path, name: str, table: Mapping[str, Any]
) -> Iterator[tuple[str, Tolerance]]:
    allowed = {"rtol", "atol", "reason", *DTYPES}
    unknown = set(table) - allowed
    if unknown:
        raise ValueError(
            f"{path}: case {name!r} has unknown keys {sorted(unknown)}; "
            f"use rtol, atol, reason or a dtype sub-table ({', '.join(DTYPES)})"
        )
    if "rtol" in table or "atol" in table:
        yield "f32", _tolerance(path, name, "f32", table)
    for dtype in DTYPES:
        if dtype in table:
            yield dtype, _tolerance(path, name, dtype, table[dtype], table.get("reason"))


def _tolerance(
    path: Path,
    name: str,
    dtype: str,
    table: Mapping[str, Any],
    inherited_reason: str | None = None,
) -> Tolerance:
    reason = table.get("reason", inherited_reason)
    if "rtol" not in table or "atol" not in table or not reason:
        raise ValueError(f"{path}: case {name!r} ({dtype}) needs rtol, atol and a reason")
    return Tolerance(rtol=float(table["rtol"]), atol=float(table["atol"]), reason=str(reason))


def _shape_leaves(dynamic_shapes: Any) -> list[Any]:
    import torch.utils._pytree as pytree

    return pytree.tree_leaves(dynamic_shapes, is_leaf=shapes.is_shape_leaf)


_REGISTRY: dict[str, ModelCase] = {}


def _load_cases() -> None:
    for module_name in _CASE_MODULES:
        importlib.import_module(module_name)
