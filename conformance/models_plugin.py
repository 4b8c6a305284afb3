"""The model half of the conformance plugin: options, collection of ``model_case`` items, running
them in the isolating child, expectations, rows, crash rows and expectation proposals.

``conformance/plugin.py`` owns the shared options (``--exporter``, ``--opset``, ``--provider``,
``--dtype``, ``--shapes``, ``--tier``, ``--shard``, ``--results``, ``--resume``,
``--update-expectations``) and the per-worker child; this module adds the model options and
registers itself as a second plugin from ``plugin.pytest_configure``.

Model expectations live in ``expectations/models-<exporter>.toml`` (same format as the op files;
match keys model, family, dtype, shapes, opset, provider, exporter, optimize, error).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from conformance import expectations as expectations_mod
from conformance import models_cases
from conformance.models_cases import ModelCaseId, is_model_id, parse_model_id

DEFAULT_MODEL_CASE_TIMEOUT_S = 600.0
OPTIMIZE_CHOICES = {"on": (True,), "off": (False,), "both": (True, False)}
ROW_STATUSES_WITH_REPRO = ("fail", "xfail", "crash", "timeout", "vacuous")


@dataclasses.dataclass(frozen=True)
class ModelOptions:
    names: tuple[str, ...] | None
    optimize: tuple[bool, ...]
    case_timeout: float
    enabled: bool  # False when --ops narrows the run to op cases


_MODEL_OPTIONS_KEY = pytest.StashKey[ModelOptions]()
_FAMILY_OF: dict[str, str] = {}


def add_options(group) -> None:
    """Called from ``plugin.pytest_addoption``."""
    group.addoption(
        "--models",
        action="append",
        help="glob over zoo model names, e.g. 'torchvision/*' (repeatable; default: the --tier)",
    )
    group.addoption(
        "--optimize",
        choices=tuple(OPTIMIZE_CHOICES),
        default="on",
        help="model cases: export with the exporter's graph optimisation on, off or both "
        "(default on)",
    )
    group.addoption(
        "--model-case-timeout",
        type=float,
        default=DEFAULT_MODEL_CASE_TIMEOUT_S,
        help=f"seconds one model case may take (default {DEFAULT_MODEL_CASE_TIMEOUT_S:g})",
    )
    # For the harness's own tests: Python files defining model_cases(), replacing the zoo.
    group.addoption("--model-cases", action="append", help=argparse.SUPPRESS)


def configure(config: pytest.Config) -> None:
    """Called from ``plugin.pytest_configure`` after the shared options are parsed."""
    get = config.getoption
    if get("model_case_timeout") <= 0:
        raise pytest.UsageError("--model-case-timeout must be positive")
    try:
        models_cases.use_extra_case_files(get("model_cases") or [])
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    names = tuple(get("models")) if get("models") else None
    options = ModelOptions(
        names=names,
        optimize=OPTIMIZE_CHOICES[get("optimize")],
        case_timeout=get("model_case_timeout"),
        enabled=names is not None or not (get("ops") or get("planted")),
    )
    config.stash[_MODEL_OPTIONS_KEY] = options
    from conformance.plugin import get_options

    shared = get_options(config)
    for exporter in shared.exporters:
        try:
            expectations_mod.load_expectations(expectations_path(shared, exporter))
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
    config.pluginmanager.register(ModelsPlugin(), "conformance-models")


def get_model_options(config: pytest.Config) -> ModelOptions:
    return config.stash[_MODEL_OPTIONS_KEY]


def expectations_path(shared, exporter: str) -> Path:
    return shared.expectations_dir / f"models-{exporter}.toml"


def collect_model_cases(config: pytest.Config) -> list[ModelCaseId]:
    from conformance.plugin import get_options

    shared, options = get_options(config), get_model_options(config)
    if not options.enabled:
        return []
    try:
        selected = models_cases.collect(
            tier=shared.tier,
            names=options.names,
            dtypes=shared.dtypes,
            shapes=shared.shapes,
            opsets=shared.opsets,
            providers=shared.providers,
            exporters=shared.exporters,
            optimize=options.optimize,
            shard=shared.shard,
        )
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    if options.names and not selected and not shared.shard:
        raise pytest.UsageError(
            f"--models {' '.join(options.names)}: no model of tier {shared.tier!r} matches "
            f"(dtypes {', '.join(shared.dtypes)}; models run in {', '.join(models_cases.MODEL_DTYPES)}). "
            "List them with: python -m model_zoo list --tier full"
        )
    for key, case in selected:
        _FAMILY_OF[key.model] = case.family
    return [key for key, _ in selected]


def family_of(model: str) -> str:
    if model not in _FAMILY_OF:
        try:
            _FAMILY_OF[model] = models_cases.find_case(model).family
        except Exception:  # noqa: BLE001 - only a label for a crash row
            _FAMILY_OF[model] = model.split("/", 1)[0]
    return _FAMILY_OF[model]


def model_facts(key: ModelCaseId) -> dict[str, Any]:
    """What an expectation's ``match`` can look at for a model case."""
    return {
        "id": key.id,
        "model": key.model,
        "family": family_of(key.model),
        "dtype": key.dtype,
        "shapes": key.shapes,
        "opset": key.opset,
        "provider": key.provider,
        "exporter": key.exporter,
        "optimize": key.optimize,
    }


class ModelsPlugin:
    """Hooks for model cases (registered by ``configure``)."""

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        from conformance.plugin import get_options

        options = get_model_options(config)
        if not options.enabled:
            return ["conformance models: off (--ops without --models)"]
        flags = ",".join("opt" if flag else "noopt" for flag in options.optimize)
        return [
            f"conformance models: tier={get_options(config).tier} optimize={flags} "
            f"case-timeout={options.case_timeout:g}s"
            + (f" models={','.join(options.names)}" if options.names else "")
        ]

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "model_case" not in metafunc.fixturenames:
            return
        keys = collect_model_cases(metafunc.config)
        metafunc.parametrize("model_case", keys, ids=[key.id for key in keys])

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        from conformance.plugin import BACKSTOP_SLACK_S, case_id_of, get_options

        options = get_model_options(config)
        backstop = options.case_timeout + (
            BACKSTOP_SLACK_S if get_options(config).isolation == "child" else 0
        )
        keep, drop = [], []
        for item in items:
            case_id = case_id_of(item)
            if is_model_id(case_id):
                item.add_marker(pytest.mark.timeout(backstop))
            elif case_id is None and getattr(item, "originalname", None) == "test_model":
                drop.append(item)  # the placeholder of an empty selection: not a real case
                continue
            keep.append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report, sched) -> None:
        """A whole xdist worker died running a model case: write its ``crash`` row."""
        from conformance.plugin import (
            _case_id_from_nodeid,
            get_options,
            new_row,
            record_worker_crash,
            versions,
        )

        case_id = _case_id_from_nodeid(crashitem)
        if not is_model_id(case_id):
            return None
        key = parse_model_id(case_id)
        record_worker_crash(
            report,
            case_id,
            expectations_path=expectations_path(get_options(report.node.config), key.exporter),
            facts_of=lambda inflight: model_facts(key),
            make_row=lambda facts, worker: new_row(
                _model_identity(key), versions(), {"worker": worker}
            ),
        )
        return None

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        config = session.config
        if hasattr(config, "workerinput"):
            return
        from conformance.plugin import get_options

        shared = get_options(config)
        if shared.update_expectations and get_model_options(config).enabled:
            _write_proposals(config, shared)


def _write_proposals(config: pytest.Config, shared) -> None:
    from conformance.plugin import write_proposals

    write_proposals(
        config,
        {key.id for key in collect_model_cases(config)},
        shared,
        lambda exporter: expectations_path(shared, exporter),
        facts_of=lambda row: model_facts(parse_model_id(row.id)),
    )


def _model_identity(key: ModelCaseId) -> dict[str, Any]:
    """The row fields that say which model case a row is about: its facts, with the model as
    the row's subject."""
    facts = model_facts(key)
    return {"kind": "model", "subject": facts.pop("model"), **facts}


# --------------------------------------------------------------------------- running a case


class ModelRuntime:
    """Runs each model case in a fresh process forked from this worker's zygote
    (``models_isolation.py``)."""

    def __init__(self, base, options: ModelOptions):
        from conformance.models_isolation import ForkingModelChild

        self.base = base  # plugin.CaseRuntime: rows file, scratch, in-flight marker, versions
        self.options = options
        self.child = ForkingModelChild()
        self._expectations: dict[str, list] = {}

    def close(self) -> None:
        self.child.close()

    def expectations(self, exporter: str) -> list:
        if exporter not in self._expectations:
            path = expectations_path(self.base.options, exporter)
            self._expectations[exporter] = expectations_mod.load_expectations(path)
        return self._expectations[exporter]

    def run_model_case(self, key: ModelCaseId, record_property) -> None:
        facts = model_facts(key)
        self.base.judge_and_record(
            key.id,
            facts,
            self.expectations(key.exporter),
            lambda: self._run(key, facts),
            lambda fields: self._row(key, fields),
            lambda row: self._finish(row, record_property),
        )

    def _run(self, key: ModelCaseId, facts: dict[str, Any]) -> dict[str, Any]:
        """The case's outcome as a dict of row fields, whatever happens to the child."""
        from conformance.plugin import run_isolated

        def inline(scratch, announce) -> dict[str, Any]:
            from conformance.models_runner import run_model_case

            return run_model_case(key.id, scratch, announce=announce).to_dict()

        return run_isolated(self.base, key, facts, self.child, self.options.case_timeout, inline)

    def _row(self, key: ModelCaseId, fields: dict[str, Any]):
        from conformance.plugin import new_row

        extra = dict(fields.pop("extra", None) or {})
        extra["worker"] = self.base.worker
        return new_row(_model_identity(key), self.base.versions, extra, fields)

    def _finish(self, row, record_property) -> None:
        self.base._finish(row, record_property)
        for key in ("node_count", "latency_ms", "session_create_s"):
            if getattr(row, key) is not None:
                record_property(key, getattr(row, key))
        if row.extra.get("max_rel_scale") is not None:
            record_property("max_rel_scale", row.extra["max_rel_scale"])
