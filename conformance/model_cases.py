"""Model case identity: the axes of one model conformance case, its stable id, and where its
``ModelCase`` comes from.

An id reads ``model::<zoo name>::<dtype>::<static|dynamic>::opset<N>::<provider>::<exporter>::
<opt|noopt>``, for example ``model::torchvision/resnet18::f32::dynamic::opset20::cpu::ours::opt``.
Zoo names are ``<source>/<model>``, so the id starts with the family-ish source and stays
greppable (``model::transformers/*::*::ours::*``).

Cases come from ``model_zoo``, or, for the harness's own tests, from files named by the hidden
``--model-cases`` option: a Python file defining ``model_cases() -> list[ModelCase]``. Those
replace the zoo for the run (like ``--planted`` replaces the OpInfo cases); the option's value
travels to the isolating child through ``EXTRA_CASES_ENV``.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from conformance.cases import EXPORTERS, PROVIDERS, SHAPES, in_shard

if TYPE_CHECKING:
    from model_zoo import ModelCase

#: Dtypes a model case can run in: the zoo's models are float models; integer or bool "model
#: dtypes" mean nothing, and bf16 inputs cannot go through numpy to onnxruntime.
MODEL_DTYPES = ("f32", "f16")
OPTIMIZE_FLAGS = {True: "opt", False: "noopt"}
EXTRA_CASES_ENV = "CONFORMANCE_MODEL_CASES"

_ID_PATTERN = re.compile(
    r"^model::(?P<model>[^:]+)::(?P<dtype>[^:]+)::(?P<shapes>[^:]+)::opset(?P<opset>\d+)"
    r"::(?P<provider>[^:]+)::(?P<exporter>[^:]+)::(?P<optimize>opt|noopt)$"
)


@dataclasses.dataclass(frozen=True)
class ModelCaseId:
    """One model case: a zoo model under one combination of axes."""

    model: str
    dtype: str
    shapes: str
    opset: int
    provider: str
    exporter: str
    optimize: bool

    @property
    def id(self) -> str:
        return (
            f"model::{self.model}::{self.dtype}::{self.shapes}::opset{self.opset}"
            f"::{self.provider}::{self.exporter}::{OPTIMIZE_FLAGS[self.optimize]}"
        )

    @property
    def dynamic(self) -> bool:
        return self.shapes == "dynamic"


def is_model_id(case_id: str | None) -> bool:
    return isinstance(case_id, str) and case_id.startswith("model::")


def parse_model_id(case_id: str) -> ModelCaseId:
    """Parse a model case id; raises ValueError naming what is wrong."""
    match = _ID_PATTERN.match(case_id.strip())
    if match is None:
        raise ValueError(
            f"not a model case id: {case_id!r}. Expected 'model::<zoo name>::<dtype>::"
            "<static|dynamic>::opset<N>::<provider>::<exporter>::<opt|noopt>', for example "
            "'model::torchvision/resnet18::f32::static::opset20::cpu::ours::opt'."
        )
    fields = match.groupdict()
    for what, choices in (
        ("dtype", MODEL_DTYPES),
        ("shapes", SHAPES),
        ("provider", PROVIDERS),
        ("exporter", EXPORTERS),
    ):
        if fields[what] not in choices:
            raise ValueError(
                f"unknown {what} {fields[what]!r} in model case id {case_id!r}; "
                f"choose one of {', '.join(choices)}"
            )
    return ModelCaseId(
        model=fields["model"],
        dtype=fields["dtype"],
        shapes=fields["shapes"],
        opset=int(fields["opset"]),
        provider=fields["provider"],
        exporter=fields["exporter"],
        optimize=fields["optimize"] == "opt",
    )


# --------------------------------------------------------------------------- case sources


def extra_case_files() -> tuple[str, ...]:
    value = os.environ.get(EXTRA_CASES_ENV, "")
    return tuple(path for path in value.split(os.pathsep) if path)


def use_extra_case_files(paths: Sequence[str]) -> None:
    """Make ``paths`` the case source of this process and of children started after this."""
    resolved = [str(Path(p).resolve()) for p in paths]
    for path in resolved:
        if not Path(path).is_file():
            raise ValueError(
                f"--model-cases {path}: no such file; give a Python file that defines "
                "model_cases() returning a list of model_zoo.ModelCase"
            )
    if resolved:
        os.environ[EXTRA_CASES_ENV] = os.pathsep.join(resolved)
    else:
        os.environ.pop(EXTRA_CASES_ENV, None)
    _extra_cases.cache_clear()


@functools.cache
def _extra_cases(paths: tuple[str, ...]) -> dict[str, ModelCase]:
    found: dict[str, ModelCase] = {}
    for index, path in enumerate(paths):
        spec = importlib.util.spec_from_file_location(f"_conformance_model_cases_{index}", path)
        if spec is None or spec.loader is None:
            raise ValueError(f"--model-cases {path}: cannot be imported as a Python file")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        factory = getattr(module, "model_cases", None)
        if factory is None:
            raise ValueError(f"--model-cases {path}: defines no model_cases() function")
        for case in factory():
            if case.name in found:
                raise ValueError(f"--model-cases: case {case.name!r} is defined twice")
            found[case.name] = case
    return found


def all_cases(tier: str) -> list[ModelCase]:
    """The cases of ``tier`` from the active source (extra case files, else the zoo)."""
    paths = extra_case_files()
    if paths:
        from model_zoo import TIERS

        if tier not in TIERS:
            raise ValueError(f"unknown tier {tier!r}; use one of {TIERS}")
        return [case for case in _extra_cases(paths).values() if tier in case.tags]
    import model_zoo

    return model_zoo.cases(tier)


def find_case(name: str) -> ModelCase:
    """One case by name from the active source; raises ``model_zoo.UnknownCaseError``."""
    paths = extra_case_files()
    if paths:
        cases = _extra_cases(paths)
        if name in cases:
            return cases[name]
        from model_zoo import UnknownCaseError

        raise UnknownCaseError(
            f"no model case named {name!r} in --model-cases files; known: {', '.join(cases)}"
        )
    import model_zoo

    return model_zoo.get(name)


def collect(
    *,
    tier: str,
    names: Sequence[str] | None,
    dtypes: Sequence[str],
    shapes: Sequence[str],
    opsets: Sequence[int],
    providers: Sequence[str],
    exporters: Sequence[str],
    optimize: Sequence[bool],
    shard: tuple[int, int] | None,
) -> list[tuple[ModelCaseId, ModelCase]]:
    """Every model case the options select, in zoo order then axis order, sharded."""
    import fnmatch

    selected = []
    for case in all_cases(tier):
        if names and not any(fnmatch.fnmatchcase(case.name, glob) for glob in names):
            continue
        for dtype in dtypes:
            if dtype not in MODEL_DTYPES:
                continue
            for shape in shapes:
                for opset in opsets:
                    for provider in providers:
                        for exporter in exporters:
                            for flag in optimize:
                                key = ModelCaseId(
                                    case.name, dtype, shape, opset, provider, exporter, flag
                                )
                                if in_shard(key.id, shard):
                                    selected.append((key, case))
    return selected
