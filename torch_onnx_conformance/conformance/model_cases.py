"""Zoo models as conformance cases: ``ModelCaseId``, a zoo model under one combination of axes,
its stable id, where its ``ModelCase`` comes from, and preparing it for the runner.

An id reads ``model::<zoo name>::<dtype>::<static|dynamic>::opset<N>::<provider>::<exporter>::
<opt|noopt>``, for example ``model::torchvision/resnet18::f32::dynamic::opset20::cpu::ours::opt``.
Zoo names are ``<source>/<model>``, so the id starts with the family-ish source and stays
greppable (``model::transformers/*::*::ours::*``).

Cases come from ``model_zoo``, or from the files and modules named by ``--cases`` (the user's
own models, ``torch_onnx_conformance/conformance/user_cases.py``; ``--model-cases`` is its older name): each defines
``model_cases()`` returning ``user_cases.ModelCase`` (or ``model_zoo.ModelCase``) objects. Those
replace the zoo for the run (like ``--planted`` replaces the OpInfo cases); the option's value
travels to the isolating child through ``EXTRA_CASES_ENV``, and into every saved rerun command.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import gc
import os
import shlex
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from torch_onnx_conformance.conformance.case import (
    CaseKind,
    CaseSetupError,
    IdFormat,
    Prepared,
    StageFailed,
    format_id,
    in_shard,
    register_kind,
)
from torch_onnx_conformance.conformance.errors import error_text
from torch_onnx_conformance.conformance.isolation import ForkingModelChild
from torch_onnx_conformance.conformance.runner import CaseOutcome, run_case
from torch_onnx_conformance.exporter.stages import Stage

if TYPE_CHECKING:
    from torch_onnx_conformance.conformance.plugin import Options
    from torch_onnx_conformance.model_zoo import ModelCase

#: Dtypes a model case can run in: the zoo's models are float models; integer or bool "model
#: dtypes" mean nothing, and bf16 inputs cannot go through numpy to onnxruntime.
MODEL_DTYPES = ("f32", "f16")
OPTIMIZE_FLAGS = {True: "opt", False: "noopt"}
EXTRA_CASES_ENV = "CONFORMANCE_MODEL_CASES"
#: The ``--expectations-dir`` of the run, when one was given (for the saved rerun commands).
EXPECTATIONS_DIR_ENV = "CONFORMANCE_EXPECTATIONS_DIR"
#: Seconds one model case may take (``--model-case-timeout``).
DEFAULT_MODEL_CASE_TIMEOUT_S = 600.0
#: Vacuity descriptions kept in a row, at most (decoder caches have dozens of outputs).
MAX_DESCRIBED_OUTPUTS = 8
#: An exporter cannot be asked to match eager more closely than eager matches exact arithmetic:
#: the tolerance relative to the output scale is at least this many times eager's own error
#: against a float64 run of the same model (deep BatchNorm stacks amplify rounding: regnet_x_400mf
#: measured 1.8e-3 in float32 eager). Capped, so that a model whose float64 run takes other
#: discrete decisions (top-k, NMS) cannot loosen its tolerance into meaninglessness.
NOISE_FACTOR = 4.0
NOISE_RTOL_CAP = 1e-2

_ID_FORMAT = IdFormat(
    "model::{model}::{dtype}::{shapes}::opset{opset}::{provider}::{exporter}::{optimize}",
    "a model case id",
    "model::torchvision/resnet18::f32::static::opset20::cpu::ours::opt",
    MODEL_DTYPES,
)


#: A model case's axes after its model and family, in the order its facts list them.
_AXES = ("dtype", "shapes", "opset", "provider", "exporter", "optimize")


@dataclasses.dataclass(frozen=True)
class ModelCaseId:
    """One model case: a zoo model under one combination of axes. ``family`` is the zoo's
    family of the model, when the case was collected (looked up otherwise)."""

    model: str
    dtype: str
    shapes: str
    opset: int
    provider: str
    exporter: str
    optimize: bool
    family: str | None = dataclasses.field(default=None, compare=False, hash=False, repr=False)

    @property
    def id(self) -> str:
        return format_id(
            "model",
            self.model,
            self.dtype,
            self.shapes,
            f"opset{self.opset}",
            self.provider,
            self.exporter,
            OPTIMIZE_FLAGS[self.optimize],
        )

    @property
    def dynamic(self) -> bool:
        return self.shapes == "dynamic"

    def facts(self) -> dict[str, Any]:
        """What an expectation's ``match`` can look at for a model case."""
        facts: dict[str, Any] = {"id": self.id, "model": self.model}
        facts["family"] = self.family or family_of(self.model)
        facts.update((axis, getattr(self, axis)) for axis in _AXES)
        return facts

    def row_identity(self) -> dict[str, Any]:
        """The model is the row's subject."""
        facts = self.facts()
        return {"kind": "model", "subject": facts.pop("model"), **facts}

    #: Model cases carry no planted fault of the op kind's (planted models are a case file).
    planted = None

    def row_extra(self, facts: dict[str, Any] | None = None) -> dict[str, Any]:
        return {}

    def with_sample_facts(self, sample_facts: dict[str, Any]) -> ModelCaseId:
        return self

    def prepare(self, outcome) -> Prepared:
        return _prepare(self, outcome)


def parse_model_id(case_id: str) -> ModelCaseId:
    """Parse a model case id; raises ValueError naming what is wrong."""
    fields = _ID_FORMAT.parse(case_id)
    return ModelCaseId(
        **{**fields, "opset": int(fields["opset"]), "optimize": fields["optimize"] == "opt"}
    )


def family_of(model: str) -> str:
    """The zoo family of a model; its source prefix when the case cannot be found (a crash
    row still needs a label)."""
    try:
        return find_case(model).family
    except Exception:  # noqa: BLE001 - only a label
        return model.split("/", 1)[0]


def run_in_child(
    case_id: str,
    scratch: Path,
    *,
    announce: Callable[[str], None] = lambda stage: None,
    release_memory: bool = True,
) -> CaseOutcome:
    """The model kind's child-process entry: ``run_case`` for a model case id.
    ``release_memory=False`` skips dropping torch's caches afterwards, for a process that exits
    after the case anyway."""
    _quiet_torch_logs()
    try:
        return run_case(parse_model_id(case_id), scratch, announce=announce)
    finally:
        if release_memory:
            _release_memory()


def _quiet_torch_logs() -> None:
    """torch.export logs every failed guard at ERROR level with a long stack; the row already
    records the error, and the log would flood the terminal of a run over many models."""
    import logging

    import torch

    torch._logging.set_logs(all=logging.CRITICAL)


def _release_memory() -> None:
    """Models are big and the child is reused: drop compiled-graph caches between cases."""
    try:
        import torch

        torch._dynamo.reset()
    except Exception:  # noqa: BLE001, S110 - best effort
        pass
    gc.collect()


# --------------------------------------------------------------------------- case sources


def extra_case_files() -> tuple[str, ...]:
    value = os.environ.get(EXTRA_CASES_ENV, "")
    return tuple(path for path in value.split(os.pathsep) if path)


def _is_module_name(entry: str) -> bool:
    return not entry.endswith(".py") and all(part.isidentifier() for part in entry.split("."))


def use_extra_case_files(entries: Sequence[str], zoo: bool = False) -> None:
    """Make ``entries`` (case files or importable module names, see ``user_cases``) the case
    source of this process and of children started after this, and load them once here, so
    that a case file that does not import is a usage error naming its file and line."""
    resolved = []
    for entry in entries:
        if _is_module_name(entry) and not Path(entry).exists():
            resolved.append(entry)
            continue
        path = Path(entry).resolve()
        if _is_module_name(entry) and (path / "__init__.py").is_file():
            if not (path / "config.json").exists():  # a package, not a transformers folder
                resolved.append(entry)
                continue
        if not (path.is_file() or path.is_dir()):
            raise ValueError(
                f"--cases {entry}: no such file, and not a module name; give a Python file or "
                "module that defines model_cases() returning a list of "
                "torch_onnx_conformance.conformance.user_cases.ModelCase, or a transformers model folder"
            )
        resolved.append(str(path))
    if resolved and zoo:
        resolved.append(ZOO_ENTRY)
    if resolved:
        os.environ[EXTRA_CASES_ENV] = os.pathsep.join(resolved)
    else:
        os.environ.pop(EXTRA_CASES_ENV, None)
    _extra_cases.cache_clear()
    if resolved:
        _extra_cases(_user_entries())


def _import_cases_source(index: int, entry: str):
    """The module of one ``--cases`` entry. A file's folder goes on ``sys.path`` (its own
    imports work), a module's search adds the current folder; both at the end of it, so that a
    folder named like one of the harness's packages never shadows it."""
    import importlib
    import importlib.util
    import sys

    if os.path.isabs(entry):
        folder = str(Path(entry).parent)
        if folder not in sys.path:
            sys.path.append(folder)
        spec = importlib.util.spec_from_file_location(f"_conformance_user_cases_{index}", entry)
        if spec is None or spec.loader is None:
            raise ValueError(f"--cases {entry}: cannot be imported as a Python file")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    return importlib.import_module(entry)


def _import_error(entry: str, exc: BaseException) -> str:
    """``--cases ENTRY: FILE:LINE: Error: message``, at the deepest frame in the user's code."""
    import traceback

    if isinstance(exc, SyntaxError) and exc.filename:
        where = f"{exc.filename}:{exc.lineno}"
    else:
        harness = str(Path(__file__).resolve().parent)
        frames = [
            f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith(harness)
        ]
        frame = frames[-1] if frames else None
        where = f"{frame.filename}:{frame.lineno}" if frame else entry
    return f"--cases {entry}: {where}: {type(exc).__name__}: {exc}"


def _cases_of_source(index: int, entry: str) -> list:
    """What ``model_cases()`` of one case file or module returns; a ``ValueError`` naming the
    entry (and the file:line of the user's code) when it cannot be had."""
    try:
        module = _import_cases_source(index, entry)
        factory = getattr(module, "model_cases", None)
        if factory is None:
            raise ValueError(f"--cases {entry}: defines no model_cases() function")
        return list(factory())
    except ValueError as exc:
        if str(exc).startswith("--cases"):
            raise
        raise ValueError(_import_error(entry, exc)) from exc
    except Exception as exc:  # noqa: BLE001 - the user's code: any error is named, not raised
        raise ValueError(_import_error(entry, exc)) from exc


@functools.cache
def _extra_cases(entries: tuple[str, ...]) -> dict[str, ModelCase]:
    from torch_onnx_conformance.conformance import user_cases

    found: dict[str, ModelCase] = {}
    for index, entry in enumerate(entries):
        if os.path.isabs(entry) and os.path.isdir(entry):  # a transformers model folder
            try:
                cases = [user_cases.ModelCase.from_transformers_folder(entry)]
            except ValueError as exc:
                raise ValueError(f"--cases: {exc}") from exc
        else:
            cases = _cases_of_source(index, entry)
        for case in cases:
            if isinstance(case, user_cases.ModelCase):
                case = case.runner_case()
            elif not hasattr(case, "build"):
                raise ValueError(
                    f"--cases {entry}: model_cases() returned {case!r}; return "
                    "torch_onnx_conformance.conformance.user_cases.ModelCase objects"
                )
            if case.name in found:
                raise ValueError(f"--cases: case {case.name!r} is defined twice")
            found[case.name] = case
    return found


#: The entry of ``EXTRA_CASES_ENV`` that ``--zoo`` adds: the zoo's cases run beside the user's.
ZOO_ENTRY = "@zoo"


def _user_entries() -> tuple[str, ...]:
    return tuple(entry for entry in extra_case_files() if entry != ZOO_ENTRY)


def _with_zoo() -> bool:
    return ZOO_ENTRY in extra_case_files() or not _user_entries()


def all_cases(tier: str) -> list[ModelCase]:
    """The cases of ``tier`` from the active source: the ``--cases`` files, then the zoo's when
    none are given or ``--zoo`` asks for them too."""
    from torch_onnx_conformance.model_zoo import TIERS

    if tier not in TIERS:
        raise ValueError(f"unknown tier {tier!r}; use one of {TIERS}")
    entries = _user_entries()
    found = [case for case in _extra_cases(entries).values() if tier in case.tags]
    if _with_zoo():
        from torch_onnx_conformance import model_zoo

        found += model_zoo.cases(tier)
    return found


def find_case(name: str) -> ModelCase:
    """One case by name from the active source; raises ``model_zoo.UnknownCaseError``."""
    cases = _extra_cases(_user_entries())
    if name in cases:
        return cases[name]
    if _with_zoo():
        from torch_onnx_conformance import model_zoo

        return model_zoo.get(name)
    from torch_onnx_conformance.model_zoo import UnknownCaseError

    raise UnknownCaseError(
        f"no model case named {name!r} in the --cases files; known: {', '.join(cases)}"
    )


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
            if dtype not in MODEL_DTYPES or dtype not in getattr(case, "dtypes", MODEL_DTYPES):
                continue
            for shape in shapes:
                if shape == "dynamic" and getattr(case, "static_only", False):
                    continue
                for opset in opsets:
                    for provider in providers:
                        for exporter in exporters:
                            for flag in optimize:
                                key = ModelCaseId(
                                    case.name,
                                    dtype,
                                    shape,
                                    opset,
                                    provider,
                                    exporter,
                                    flag,
                                    family=case.family,
                                )
                                if in_shard(key.id, shard):
                                    selected.append((key, case))
    return selected


def _load_cases() -> None:
    """What a model case zygote loads before it forks: the active source's cases (the zoo's
    case modules, the ``--cases`` files)."""
    all_cases("full")


def collect_cases(options: Options) -> list[ModelCaseId]:
    """Every model case the run's options select (none when ``--ops`` narrows it to ops)."""
    models = options.models
    if not models.enabled:
        return []
    try:
        selected = collect(
            tier=options.tier,
            names=models.names,
            dtypes=options.dtypes,
            shapes=options.shapes,
            opsets=options.opsets,
            providers=options.providers,
            exporters=options.exporters,
            optimize=models.optimize,
            shard=options.shard,
        )
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    if models.names and not selected and not options.shard:
        raise pytest.UsageError(
            f"--models {' '.join(models.names)}: no model of tier {options.tier!r} matches "
            f"(dtypes {', '.join(options.dtypes)}; models run in {', '.join(MODEL_DTYPES)}). "
            "List them with: python -m torch_onnx_conformance.model_zoo list --tier full"
        )
    return [key for key, _ in selected]


# --------------------------------------------------------------------------- preparing a case


class ModelSetupError(CaseSetupError):
    """The zoo case itself failed (build or eager run): a bug in the case, not the exporter."""


@dataclasses.dataclass(kw_only=True)
class ModelPrepared(Prepared):
    """A model case ready to export: the case's module and inputs, exported by the case's
    exporter into a file (weights may be external data), run in a ``ModelSession`` (latency
    measured) and compared relative to each output's scale, or by the case's own comparison."""

    key: ModelCaseId
    case: Any  # model_zoo.ModelCase, or a user's case
    module: Any  # torch.nn.Module
    args: tuple
    kwargs: dict
    #: The flattened inputs (``flat_io.FlatInput``), in the order the model takes them.
    inputs: list
    rtol: float
    atol: float
    #: The case's row while it runs: the export records the capture patches it applied.
    outcome: Any
    second_what: str = "second inputs"
    #: float16 cases: the upcast eager outputs at each shape and the rule judging against them
    #: (``_low_precision_reference``); None otherwise.
    references: Any = (None, None)
    reference_rule: Any = None
    #: Where ``export`` wrote the model (for the case's ``check_export``).
    exported_path: Path | None = None

    def export(self, path: Path) -> str:
        from torch_onnx_conformance.conformance import flat_io
        from torch_onnx_conformance.conformance.exporters import export_model

        key, case = self.key, self.case
        ours = key.exporter == "ours"
        table = case.custom_translation_table_factory
        applied = export_model(
            key.exporter,
            self.module,
            flat_io.clone_tree(self.args),
            flat_io.clone_tree(self.kwargs),
            inputs=self.inputs,
            dynamic_shapes=case.dynamic_shapes if key.dynamic else None,
            opset=key.opset,
            optimize=key.optimize,
            path=path,
            custom_translation_table=table() if table else None,
            capture=case.capture if ours else None,
        )
        if applied:
            self.outcome.extra["capture_patches"] = applied
        self.exported_path = path
        return str(path)

    def open_session(self, path: str):
        from torch_onnx_conformance.conformance.session import ModelSession

        return ModelSession(Path(path), self.key.provider)

    def before_run(self, session, feeds) -> None:
        missing = session.missing_inputs(feeds)
        if missing:
            raise StageFailed(
                Stage.RUN,
                f"the ONNX model declares inputs {missing} that are not among the model's "
                f"flattened inputs {list(feeds)} (the exporter ignored input_names)",
            )

    def after_run(self, session, feeds, outcome) -> None:
        try:
            latency = session.latency_ms(feeds)
            if latency is not None:
                outcome.latency_ms, outcome.extra["latency_wall_ms"] = latency
        except Exception as exc:  # noqa: BLE001 - it ran once already; timing is a by-product
            outcome.extra["latency_error"] = error_text(exc)

    def compare(self, expected, actual, session):
        from torch_onnx_conformance.exporter.diagnostics.compare import SCALE, compare_outputs

        if self.case.compare:
            return _compare_with(self.case.compare, expected, actual)
        return compare_outputs(
            expected,
            actual,
            rtol=self.rtol,
            atol=self.atol,
            rule=SCALE,
            declared_shapes=session.output_shapes,
            references=self.references[0 if expected is self.expected else 1],
            reference_rule=self.reference_rule,
        )

    def after_compare(self, session, outcome) -> None:
        key = self.key
        if self.case.greedy_prompt is not None and key.dynamic and key.dtype == "f32":
            _check_greedy(self.case, self.module, session, outcome)
        check = getattr(self.case, "check_export", None)
        if check is not None and self.exported_path is not None:
            problems, facts = check(
                self.module, self.args, self.kwargs, self.exported_path, key.opset
            )
            outcome.extra["export_checks"] = facts
            if problems:
                raise StageFailed(Stage.COMPARE, "; ".join(problems))

    def specialised(self, session, grown_only: bool) -> list[str]:
        from torch_onnx_conformance.exporter.diagnostics.second_shape import specialised_dims

        return specialised_dims(
            session.input_shapes, {item.name: item.axes for item in self.inputs}
        )

    def conclude(self, outcome) -> None:
        if outcome.status == "pass" and outcome.extra.get("vacuous"):
            outcome.status = "vacuous"
            outcome.stage = Stage.COMPARE.value
            outcome.error = (
                "eager outputs are near-constant, so matching them proves nothing: "
                + "; ".join(_describe_line(d) for d in outcome.extra.get("vacuity", []))
            )
            outcome.error_signature = "vacuous: near-constant eager outputs"


def _prepare(key: ModelCaseId, outcome) -> ModelPrepared:
    from torch_onnx_conformance.conformance import flat_io
    from torch_onnx_conformance.exporter.diagnostics.compare import SCALE

    case = find_case(key.model)
    started = time.perf_counter()
    module, args, kwargs, second = _build(key, case, outcome)
    expected = _eager(module, args, kwargs, "the example inputs")
    expected2 = _eager(module, *second, "the second inputs") if second is not None else None
    outcome.extra["build_s"] = round(time.perf_counter() - started, 4)
    rtol, atol, reference_rule, references = _tolerance(
        key, case, outcome, module, (args, kwargs, expected), second, expected2
    )
    outcome.rtol, outcome.atol = rtol, atol
    _note_vacuity(outcome, expected, expected2)

    inputs = flat_io.flat_inputs(module, args, kwargs, case.dynamic_shapes)
    feeds2 = expected2_np = None
    if second is not None:
        inputs2 = flat_io.flat_inputs(module, *second, case.dynamic_shapes)
        feeds2 = flat_io.feeds(inputs2)
        expected2_np = [flat_io.to_numpy(t) for t in flat_io.flat_outputs(expected2)]
        outcome.extra["second_inputs"] = flat_io.shapes_text(feeds2)
    if case.capture and key.exporter == "ours":
        outcome.extra["capture"] = case.capture
    return ModelPrepared(
        meta={
            "id": key.id,
            "model": key.model,
            "provider": key.provider,
            "rtol": rtol,
            "atol": atol,
            "rule": SCALE,
            "dynamic_axes": flat_io.dynamic_axes(inputs) if key.dynamic else {},
            "rerun": rerun_command(key),
        },
        feeds=flat_io.feeds(inputs),
        expected=[flat_io.to_numpy(t) for t in flat_io.flat_outputs(expected)],
        dynamic=second is not None,
        feeds2=feeds2,
        expected2=expected2_np,
        key=key,
        case=case,
        module=module,
        args=args,
        kwargs=kwargs,
        inputs=inputs,
        rtol=rtol,
        atol=atol,
        outcome=outcome,
        references=references,
        reference_rule=reference_rule,
    )


def _build(key: ModelCaseId, case, outcome) -> tuple[Any, tuple, dict, Any]:
    """The case's module, example inputs and (dynamic cases) second inputs, on the CPU for the
    cpu provider and in the case's dtype; ``StageFailed`` when the case itself fails."""
    import torch

    from torch_onnx_conformance.conformance import flat_io

    torch.manual_seed(0)
    try:
        module, args, kwargs = case.build()
        if key.provider == "cpu":
            from torch_onnx_conformance.conformance.user_cases import on_cpu

            module, args, kwargs, moved = on_cpu(module, args, kwargs)
            if moved:
                outcome.extra["moved_to_cpu"] = "; ".join(moved)
        if getattr(case, "row_notes", ""):
            outcome.extra["case_notes"] = case.row_notes
        second = case.second_inputs(args, kwargs) if key.dynamic else None
    except Exception as exc:
        raise StageFailed(Stage.EXPORT, _setup_error("building the model case", exc)) from exc
    if key.dtype == "f16":
        module = module.to(torch.float16)
        args, kwargs = flat_io.cast_floats((args, kwargs), torch.float16)
        if second is not None:
            second = flat_io.cast_floats(second, torch.float16)
    return module, args, kwargs, second


def _tolerance(key, case, outcome, module, first, second, expected2) -> tuple:
    """``(rtol, atol, reference_rule, references)``: the case's own or the default model
    tolerance, with rtol raised to ``NOISE_FACTOR`` x eager's own rounding noise (capped), and
    for a float16 case the rule judging it against the upcast run (``_low_precision_reference``). ``first`` is ``(args, kwargs,
    eager outputs)``; what decided it goes to ``outcome.extra["tolerance_source"]``."""
    from torch_onnx_conformance.exporter.diagnostics.compare import default_tolerance, max_or_none

    args, kwargs, expected = first
    override = case.tolerance(key.dtype)
    if override is not None:
        rtol, atol = override.rtol, override.atol
        source = (
            "case file"
            if extra_case_files()
            else "torch_onnx_conformance/model_zoo/tolerances.toml"
        )
        outcome.extra["tolerance_source"] = f"{source}: {override.reason}"
    else:
        rtol, atol = default_tolerance("model", key.dtype)
        outcome.extra["tolerance_source"] = "default"
    exact = _upcast_run(module, args, kwargs)
    exact2 = _upcast_run(module, *second) if second is not None else None
    noise = max_or_none(
        _eager_noise(expected, exact),
        _eager_noise(expected2, exact2) if second is not None else None,
    )
    if noise is not None:
        outcome.extra["eager_noise"] = noise
        floor = min(NOISE_FACTOR * noise, NOISE_RTOL_CAP)
        if floor > rtol:
            rtol = floor
            outcome.extra["tolerance_source"] += (
                f"; rtol raised to {NOISE_FACTOR:g} x the model's own float rounding noise "
                f"(eager vs float64 error/scale {noise:.2g})"
            )
    reference_rule, references = _low_precision_reference(
        key, override, expected, (exact, exact2), outcome
    )
    return rtol, atol, reference_rule, references


def _note_vacuity(outcome, expected, expected2) -> None:
    """Near-constant eager outputs (``model_zoo.vacuity``): marked, and described, in the row."""
    from torch_onnx_conformance.model_zoo import vacuity

    if vacuity.is_vacuous(expected) or (expected2 is not None and vacuity.is_vacuous(expected2)):
        outcome.extra["vacuous"] = True
        described = [
            d for outs in (expected, expected2) if outs is not None for d in vacuity.describe(outs)
        ]
        outcome.extra["vacuity"] = described[:MAX_DESCRIBED_OUTPUTS]


def _check_greedy(case, module, session, outcome) -> None:
    """A decoder's 8 greedy tokens driven through the graph (prefill on an empty cache, then
    decodes on the cache the graph returns) must equal eager's."""
    import torch

    from torch_onnx_conformance.conformance import flat_io
    from torch_onnx_conformance.exporter.diagnostics.generation import check_greedy

    def run_graph(**inputs):
        flat = flat_io.flat_inputs(module, (), inputs, case.dynamic_shapes)
        return [torch.from_numpy(out) for out in session.run(flat_io.feeds(flat))]

    try:
        check = check_greedy(module, run_graph, **case.greedy_prompt())
    except Exception as exc:
        raise StageFailed(Stage.COMPARE, f"greedy generation through the graph: {exc}") from exc
    outcome.extra["greedy_tokens"] = check.onnx.tolist()
    if check.problem:
        raise StageFailed(Stage.COMPARE, check.problem)


def _compare_with(compare, expected, actual):
    """A case's own comparison (``ModelCase.compare``: problems, empty when equal)."""
    from torch_onnx_conformance.exporter.diagnostics.compare import Comparison

    problems = compare(expected, actual)
    return Comparison(not problems, "; ".join(problems), details=list(problems))


def rerun_command(key: ModelCaseId) -> str:
    """The pytest command line that selects exactly this case (with the ``--cases`` it came
    from: then runnable from any folder, as ``-P`` keeps the folder's own packages out)."""
    entries = extra_case_files()
    if entries:
        tests = Path(__file__).with_name("test_models.py")
        cases = " ".join(shlex.quote(f"--cases={entry}") for entry in _user_entries())
        cases += " --zoo" if ZOO_ENTRY in entries else ""
        start = f"python -P -m pytest {shlex.quote(str(tests))} -p no:cacheprovider {cases}"
    else:
        start = "python -m pytest torch_onnx_conformance/conformance/test_models.py"
    expectations = os.environ.get(EXPECTATIONS_DIR_ENV)
    if expectations:
        start += " " + shlex.quote(f"--expectations-dir={expectations}")
    return (
        f"{start} --tier full --models '{key.model}' "
        f"--dtype {key.dtype} --shapes {key.shapes} --opset {key.opset} --provider "
        f"{key.provider} --exporter {key.exporter} --optimize {'on' if key.optimize else 'off'}"
    )


def _eager(module, args: tuple, kwargs: dict, what: str) -> Any:
    """Eager outputs on a copy of the module and of the inputs: a model that mutates buffers or
    its inputs must not change what the exporter sees."""
    import torch

    from torch_onnx_conformance.conformance.flat_io import clone_tree

    torch.manual_seed(0)
    try:
        with torch.no_grad():
            return copy.deepcopy(module)(*clone_tree(args), **clone_tree(kwargs))
    except Exception as exc:
        raise StageFailed(Stage.EXPORT, _setup_error(f"running eager at {what}", exc)) from exc


def _upcast_run(module, args: tuple, kwargs: dict) -> Any:
    """Eager's outputs with the module and the float inputs upcast to float64 (the same
    values); None when the model cannot run in float64."""
    import torch

    from torch_onnx_conformance.conformance.flat_io import cast_floats, clone_tree

    torch.manual_seed(0)
    try:
        with torch.no_grad():
            return copy.deepcopy(module).double()(
                *cast_floats(clone_tree(args), torch.float64),
                **cast_floats(clone_tree(kwargs), torch.float64),
            )
    except Exception:  # noqa: BLE001 - some models cannot run in float64; no floor then
        return None


def _low_precision_reference(key, override, expected, exact_runs, outcome):
    """A float16 case without a per-model override is judged against the float64 run
    (``[float16]`` of torch_onnx_conformance/conformance/tolerances.toml): the rule, and per input set the reference
    arrays (None for an output that does not line up with eager's, all None when the float64
    run failed)."""
    from torch_onnx_conformance.conformance.flat_io import flat_outputs, to_numpy
    from torch_onnx_conformance.conformance.op_cases import LOW_PRECISION, OP_TOLERANCES_PATH
    from torch_onnx_conformance.exporter.diagnostics.compare import load_reference_rule

    if key.dtype not in LOW_PRECISION or override is not None:
        return None, (None, None)
    rule = load_reference_rule(OP_TOLERANCES_PATH)
    references = []
    for exact in exact_runs:
        flat = flat_outputs(exact) if exact is not None else None
        if flat is not None and len(flat) == len(flat_outputs(expected)):
            references.append([to_numpy(t) if t.is_floating_point() else None for t in flat])
        else:
            references.append(None)
    if references[0] is not None:
        outcome.extra["tolerance_source"] = (
            f"float16 against a float64 reference, within {rule.multiple:g} x eager "
            f"float16's own error ([float16] in torch_onnx_conformance/conformance/tolerances.toml)"
        )
    return rule, tuple(references)


def _eager_noise(expected: Any, exact: Any) -> float | None:
    """Eager's own rounding error: max over float outputs of ``max |y - y64| / max |y64|``
    against the float64 run ``exact`` (``_upcast_run``); None when that run failed or gives
    other shapes."""
    import torch

    from torch_onnx_conformance.conformance.flat_io import flat_outputs
    from torch_onnx_conformance.model_zoo.vacuity import output_scale

    if exact is None:
        return None
    ours, reference = flat_outputs(expected), flat_outputs(exact)
    if len(ours) != len(reference):
        return None
    worst = 0.0
    for value, exact_value in zip(ours, reference):
        if not value.is_floating_point():
            continue
        if value.shape != exact_value.shape:
            return None
        scale = output_scale(exact_value)
        if scale == 0.0 or value.numel() == 0:
            continue
        finite = torch.isfinite(exact_value) & torch.isfinite(value)
        if not finite.any():
            continue
        error = (value.double()[finite] - exact_value[finite]).abs().max().item()
        worst = max(worst, error / scale)
    return worst


def _setup_error(what: str, exc: BaseException) -> ModelSetupError:
    error = ModelSetupError(f"the model case failed {what}: {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error


def _describe_line(entry: dict[str, Any]) -> str:
    scale, spread = entry.get("scale"), entry.get("spread")
    numbers = f" scale {scale:.3g}, spread {spread:.3g}" if scale is not None else ""
    return f"output{entry['path']} {entry['dtype']}{list(entry['shape'])}{numbers}"


KIND = register_kind(
    CaseKind(
        name="model",
        id_format=_ID_FORMAT,
        parse=parse_model_id,
        child=functools.partial(ForkingModelChild, preload=_load_cases),
        run=run_in_child,
        timeout_option="--model-case-timeout",
        default_timeout=DEFAULT_MODEL_CASE_TIMEOUT_S,
        timeout_what="one model case",
        expectations_prefix="models-",
        test_function="test_model",
        parameter="model_case",
        collect=collect_cases,
    )
)
