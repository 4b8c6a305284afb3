"""pytest plugin of the conformance suite: options, case collection, sharding, resume,
expectations, one result row per case, JUnit properties.

The module level has ``pytest_addoption`` and ``pytest_configure``; the latter parses the
options once and registers the objects whose methods are the hooks (the style of pytest's own
``junitxml.LogXML`` and xdist's ``DSession``), so no hook asks which process it runs in:

- ``Collector`` (every process that collects): each case kind's ``collect`` (``case.KINDS``)
  turns the options into one pytest item per case, the parameter of its test function
  (``op_case`` of ``test_ops.py``, ``model_case`` of ``test_models.py``); resume and the
  pytest-timeout backstops.
- ``CaseRuntime`` (every process that runs cases): ``run`` is the one body of every test
  item. The case runs in its kind's isolating child process (see ``isolation.py``), its
  outcome is judged against the exporter's expectations file, a row is appended to
  ``RESULTS/<worker>.jsonl`` and, for a case that does not pass, the repro directory is kept.
  ``record`` is the one path from an outcome to a judged row, also for a crashed worker's case.
- ``Controller`` (the controlling process: the only one without xdist): the report header,
  global JUnit properties, a crashed worker's ``crash`` row (through a ``CaseRuntime`` of that
  worker), and ``--update-expectations`` proposals.

Each kind's expectations live in ``expectations/<prefix><exporter>.toml``: ``<exporter>.toml``
for ops, ``models-<exporter>.toml`` for models (same format; a model entry matches on model,
family, dtype, shapes, opset, provider, exporter, optimize, error).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.metadata
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

import pytest

from torch_onnx_conformance.conformance import expectations as expectations_mod
from torch_onnx_conformance.conformance import model_cases, progress, runs
from torch_onnx_conformance.conformance import planted as planted_cases
from torch_onnx_conformance.conformance.case import (
    DTYPES,
    EXPORTERS,
    KINDS,
    PROVIDERS,
    SHAPES,
    CaseKind,
    find_kind,
    kind_of,
    parse_case,
    parse_shard,
)
from torch_onnx_conformance.conformance.errors import signature_of
from torch_onnx_conformance.conformance.expectations import (
    EXPECTATIONS_DIR,
    HARNESS_ERROR,
    judge_outcome,
)
from torch_onnx_conformance.conformance.repro import keep_repro, reset_scratch
from torch_onnx_conformance.conformance.runner import run_case
from torch_onnx_conformance.conformance.runs import case_id_of
from torch_onnx_conformance.exporter import DEFAULT_OPSET
from torch_onnx_conformance.exporter.stages import Stage

#: What ``torch_onnx_conformance/conformance/conftest.py`` takes: pytest finds the rest on the registered objects.
__all__ = ["pytest_addoption", "pytest_configure"]

#: pytest-timeout backstop beyond the case deadline: covers starting a fresh child.
BACKSTOP_SLACK_S = 120.0
ROW_STATUSES_WITH_REPRO = ("fail", "xfail", "crash", "timeout")
OPTIMIZE_CHOICES = {"on": (True,), "off": (False,), "both": (True, False)}
#: Row fields a JUnit test case does not repeat as properties: its name (the id) says them, the
#: failure message holds the error, and the versions are global properties.
NOT_JUNIT_PROPERTIES = frozenset(
    ("kind", "subject", "dtype", "shapes", "opset", "provider", "exporter", "sample", "optimize")
    + ("error", "versions", "extra")
)


@dataclasses.dataclass(frozen=True)
class ModelOptions:
    names: tuple[str, ...] | None
    optimize: tuple[bool, ...]
    enabled: bool  # False when --ops narrows the run to op cases


@dataclasses.dataclass(frozen=True)
class Options:
    opsets: tuple[int, ...]
    providers: tuple[str, ...]
    exporters: tuple[str, ...]
    dtypes: tuple[str, ...]
    shapes: tuple[str, ...]
    samples: int | None  # None: all
    ops: tuple[str, ...] | None
    tier: str
    shard: tuple[int, int] | None
    results: Path
    resume: bool
    update_expectations: bool
    #: Seconds one case may take, by case kind (each kind's ``timeout_option``).
    case_timeouts: dict[str, float]
    planted: tuple[str, ...]
    expectations_dir: Path
    isolation: str
    models: ModelOptions
    #: False when only the user's --cases were asked for (no --ops, no --planted)
    ops_enabled: bool = True

    @property
    def cache_dir(self) -> Path:
        return self.results / ".cache"


_OPTIONS_KEY = pytest.StashKey[Options]()


# --------------------------------------------------------------------------- options


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conformance", "torch-onnx-conformance suite")
    _add_axis_options(group)
    group.addoption("--results", default="results", help="directory for result rows and repros")
    group.addoption(
        "--resume", action="store_true", help="skip cases that already have a result row"
    )
    group.addoption(
        "--update-expectations",
        action="store_true",
        help="write expectations/<exporter>.proposed.toml from this run's rows",
    )
    for kind in KINDS.values():
        default = kind.default_timeout
        group.addoption(
            kind.timeout_option,
            type=float,
            default=default,
            help=f"seconds {kind.timeout_what} may take (default {default:g})",
        )
    _add_case_source_options(group)
    progress.pytest_addoption(parser)


def _add_axis_options(group) -> None:
    """The axes every case runs along, and which ops, samples, tier and shard a run takes."""
    group.addoption(
        "--opset",
        action="append",
        type=int,
        help=f"ONNX opset (repeatable; default {DEFAULT_OPSET})",
    )
    group.addoption(
        "--provider", action="append", choices=PROVIDERS, help="runtime (repeatable; default cpu)"
    )
    group.addoption(
        "--exporter", action="append", choices=EXPORTERS, help="exporter (repeatable; default ours)"
    )
    group.addoption(
        "--dtype", action="append", choices=DTYPES, help="case dtype (repeatable; default f32)"
    )
    group.addoption(
        "--shapes", action="append", choices=SHAPES, help="shape mode (repeatable; default both)"
    )
    group.addoption(
        "--samples",
        default=None,
        help="samples per op: a number or 'all' (default: a few, chosen for variety)",
    )
    group.addoption("--ops", action="append", help="glob over op names (repeatable)")
    group.addoption(
        "--tier", choices=("smoke", "default", "full"), default="default", help="model tier"
    )
    group.addoption("--shard", default=None, help="run shard i of N, as 'i/N' with 0 <= i < N")


def _add_case_source_options(group) -> None:
    """Where cases and expectations come from, and how the model cases run."""
    # For the harness's own tests: planted faulty cases, another expectations directory, and
    # running cases in the pytest process (for debuggers) instead of the isolating child.
    group.addoption("--planted", action="append", help=argparse.SUPPRESS)
    group.addoption(
        "--expectations-dir",
        default=None,
        help="folder of the expectations files (<exporter>.toml for ops, models-<exporter>.toml "
        "for models), e.g. one in your repository (default: the harness's own)",
    )
    group.addoption(
        "--isolation", choices=("child", "none"), default="child", help=argparse.SUPPRESS
    )
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
        "--cases",
        dest="cases",
        action="append",
        metavar="FILE|MODULE|FOLDER",
        help="your own model cases: a Python file or module defining model_cases() (see "
        "torch_onnx_conformance/conformance/user_cases.py), or a transformers model folder (config.json); replaces the zoo (unless --zoo), and op cases run only with --ops "
        "(repeatable)",
    )
    group.addoption(
        "--zoo", action="store_true", help="with --cases: the zoo's model cases run too"
    )
    # The option's older name (the harness's own tests used it before users could).
    group.addoption("--model-cases", dest="cases", action="append", help=argparse.SUPPRESS)


def _parse_options(config: pytest.Config) -> Options:
    get = config.getoption
    samples_text = get("samples")
    if samples_text is None:
        samples = -1  # the default choice, resolved per op (in-place variants take fewer)
    elif str(samples_text).lower() == "all":
        samples = None
    else:
        try:
            samples = int(samples_text)
        except ValueError:
            raise pytest.UsageError(
                f"--samples expects a number or 'all', got {samples_text!r}"
            ) from None
        if samples < 1:
            raise pytest.UsageError("--samples must be at least 1 (or 'all')")
    shard = None
    if get("shard"):
        try:
            shard = parse_shard(get("shard"))
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
    opsets = tuple(dict.fromkeys(get("opset") or [DEFAULT_OPSET]))
    for opset in opsets:
        if not 7 <= opset <= 30:
            raise pytest.UsageError(f"--opset {opset}: expected an ONNX opset between 7 and 30")
    case_timeouts = {}
    for kind in KINDS.values():
        seconds = get(kind.timeout_option.lstrip("-").replace("-", "_"))
        if seconds <= 0:
            raise pytest.UsageError(f"{kind.timeout_option} must be positive")
        case_timeouts[kind.name] = seconds
    try:
        planted = tuple(planted_cases.check_names(get("planted") or []))
    except ValueError as exc:
        raise pytest.UsageError(f"--planted: {exc}") from None
    providers = tuple(dict.fromkeys(get("provider") or ["cpu"]))
    return Options(
        opsets=opsets,
        providers=providers,
        exporters=tuple(dict.fromkeys(get("exporter") or ["ours"])),
        dtypes=tuple(dict.fromkeys(get("dtype") or ["f32"])),
        shapes=tuple(dict.fromkeys(get("shapes") or SHAPES)),
        samples=samples,
        ops=tuple(get("ops")) if get("ops") else None,
        tier=get("tier"),
        shard=shard,
        results=Path(get("results")),
        resume=get("resume"),
        update_expectations=get("update_expectations"),
        case_timeouts=case_timeouts,
        planted=planted,
        expectations_dir=Path(get("expectations_dir") or EXPECTATIONS_DIR),
        isolation=get("isolation"),
        models=_parse_model_options(config),
        # --models (or --cases) alone narrows the run to models, as --ops alone does to ops
        ops_enabled=bool(get("ops") or get("planted") or not (get("cases") or get("models"))),
    )


def get_options(config: pytest.Config) -> Options:
    return config.stash[_OPTIONS_KEY]


def pytest_configure(config: pytest.Config) -> None:
    """Parse the options once, check what can be checked up front, and register the hook
    objects: the collector and the case runtime everywhere, the controller in the process that
    controls the run (not in an xdist worker)."""
    options = _parse_options(config)
    config.stash[_OPTIONS_KEY] = options
    progress.register(config)
    controller = not hasattr(config, "workerinput")
    if "cuda" in options.providers and controller:
        from torch_onnx_conformance.conformance.session import cuda_available

        if not cuda_available():
            raise pytest.UsageError(
                "--provider cuda: onnxruntime has no CUDAExecutionProvider here. Install the "
                "GPU build (pip install '.[cuda]') on a machine with a GPU, or drop the option."
            )
    for exporter in options.exporters:
        # Parse every expectations file up front: a typo there is a usage error, not N failures.
        for kind in KINDS.values():
            try:
                expectations_mod.load_expectations(expectations_file(options, kind.name, exporter))
            except ValueError as exc:
                raise pytest.UsageError(str(exc)) from None
    runs.configure(config, options.results, options.resume)
    if config.getoption("expectations_dir"):
        os.environ[model_cases.EXPECTATIONS_DIR_ENV] = str(options.expectations_dir.resolve())
    try:
        model_cases.use_extra_case_files(config.getoption("cases") or [], config.getoption("zoo"))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    # After runs.configure: it settles the xdist worker id the runtime's files are named by.
    config.pluginmanager.register(Collector(options), "conformance-collector")
    config.pluginmanager.register(CaseRuntime(options), "conformance-runtime")
    if controller:
        config.pluginmanager.register(Controller(options), "conformance-controller")


def _parse_model_options(config: pytest.Config) -> ModelOptions:
    get = config.getoption
    names = tuple(get("models")) if get("models") else None
    return ModelOptions(
        names=names,
        optimize=OPTIMIZE_CHOICES[get("optimize")],
        enabled=names is not None or not (get("ops") or get("planted")),
    )


def expectations_file(options: Options, kind: str, exporter: str) -> Path:
    """The expectations file that judges one exporter's cases of ``kind`` (op or model)."""
    return KINDS[kind].expectations_file(options.expectations_dir, exporter)


def expectations_path(options: Options, case) -> Path:
    return expectations_file(options, kind_of(case.id).name, case.exporter)


def worker_id() -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for dist in ("torch", "onnx", "onnxruntime", "onnxscript", "onnx-ir", "numpy"):
        # onnxruntime-gpu installs the same import package under another distribution name.
        for name in (dist, "onnxruntime-gpu") if dist == "onnxruntime" else (dist,):
            with contextlib.suppress(importlib.metadata.PackageNotFoundError):
                found[dist.replace("-", "_")] = importlib.metadata.version(name)
                break
        else:
            found[dist.replace("-", "_")] = "missing"
    return found


# --------------------------------------------------------------------------- collection


class Collector:
    """Collection hooks: the cases of every kind as the parameters of their test functions,
    ``--resume``, and the pytest-timeout backstop of each item."""

    def __init__(self, options: Options):
        self.options = options

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        for kind in KINDS.values():
            if kind.parameter in metafunc.fixturenames:
                cases = kind.collect(self.options)
                metafunc.parametrize(kind.parameter, cases, ids=[case.id for case in cases])

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        options = self.options
        if options.resume:
            from torch_onnx_conformance.reports.rows import finished_ids

            done = finished_ids([options.results])
            keep, drop = [], []
            for item in items:
                (drop if case_id_of(item) in done else keep).append(item)
            if drop:
                config.hook.pytest_deselected(items=drop)
                items[:] = keep
        slack = BACKSTOP_SLACK_S if options.isolation == "child" else 0
        placeholders = {kind.test_function for kind in KINDS.values()}
        keep, drop = [], []
        for item in items:
            kind = find_kind(case_id_of(item))
            if kind is not None:
                item.add_marker(pytest.mark.timeout(options.case_timeouts[kind.name] + slack))
            elif getattr(item, "originalname", None) in placeholders:
                drop.append(item)  # the placeholder of an empty selection: not a real case
                continue
            keep.append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep


# --------------------------------------------------------------------------- running a case


class CaseRuntime:
    """The cases of one worker (or of the only process): the isolating children (one per case
    kind, each started when its first case runs), loaded expectations, the rows file; and
    ``record``, the one path from an outcome to a judged row."""

    def __init__(self, options: Options, worker: str | None = None):
        self.options = options
        self.worker = worker or worker_id()
        self.rows_path = runs.rows_path(options.results, self.worker)
        self.scratch = runs.scratch_dir(options.results, self.worker)
        self.inflight = runs.inflight_path(options.results, self.worker)
        self._inflight_file: tuple[int, int] | None = None  # (fd, bytes written so far)
        self.versions = versions()
        self._children: dict[str, Any] = {}
        self._expectations: dict[Path, list] = {}

    @pytest.fixture(scope="session")
    def conformance_runtime(self):
        """This runtime, for the test functions (``test_op``, ``test_model``)."""
        yield self
        self.close()

    def close(self) -> None:
        for child in self._children.values():
            child.close()
        if self._inflight_file is not None:
            os.close(self._inflight_file[0])
            self._inflight_file = None

    def child(self, kind: CaseKind):
        if kind.name not in self._children:
            self._children[kind.name] = kind.child()
        return self._children[kind.name]

    def expectations(self, case) -> list:
        path = expectations_path(self.options, case)
        if path not in self._expectations:
            self._expectations[path] = expectations_mod.load_expectations(path)
        return self._expectations[path]

    def run(self, case, record_property) -> None:
        """The one body of every case, of every kind: skip by expectation, run it isolated (row
        fields back whatever happens to the child), judge and record it, and fail or pass the
        pytest item accordingly."""
        # pytest's report of an xfail or failure shows the source of each frame it keeps,
        # parsing the whole file of each (this one: ~0.1 s per xfail); the outcome's message is
        # the report, so only the test function's own frame is kept.
        __tracebackhide__ = True
        facts = case.facts()
        skip = expectations_mod.skip_entry(self.expectations(case), facts)
        if skip is not None:
            row = self._row(
                case, {"status": "skip", "error": f"skipped by expectation: {skip.reason}"}
            )
            row.expectation = skip.reason
            self._finish(row, record_property)
            pytest.skip(f"expectation: {skip.reason}")

        if case.planted == "worker_crash":
            self._mark_inflight(case, Stage.EXPORT, facts)
            os.abort()
        verdict, row = self.record(case, facts, self._run(case, facts), record_property)
        self._write_inflight({"id": None})  # between cases: no case of this worker in flight
        _conclude(verdict, row, self.options.results)

    def record(self, case, facts, outcome: dict[str, Any], record_property=None, *, repro=True):
        """Judge an outcome (row fields with its ``status``) against the expectations, keep a
        repro for a case that did not pass (unless ``repro`` is False), append the row and give
        JUnit its properties; returns the verdict and the row."""
        outcome = dict(outcome)
        status = outcome.pop("status")
        verdict = judge_outcome(self.expectations(case), facts, status, outcome)
        row = self._row(case, {**outcome, "status": verdict.status})
        if verdict.entry is not None:
            row.expectation = verdict.entry.reason
        if repro and row.status in ROW_STATUSES_WITH_REPRO:
            row.repro_dir = keep_repro(
                self.scratch,
                self.options.results,
                case.id,
                status=row.status,
                stage=row.stage,
                error=row.error,
            )
        self._finish(row, record_property)
        return verdict, row

    def record_crash(self, case):
        """The row of a case whose whole worker (this runtime's) died running it: ``crash`` at
        the stage its in-flight marker names. The worker's scratch folder is not kept: it may
        hold an earlier case's files."""
        stage, facts = self._take_inflight(case.id)
        facts = facts or case.facts()
        detail = f"xdist worker {self.worker} crashed while running the case (stage {stage})"
        outcome = {**_abnormal("crash", stage, detail), "extra": case.row_extra(facts)}
        verdict, _ = self.record(case, facts, outcome, repro=False)
        return verdict

    def _run(self, case, facts: dict[str, Any]) -> dict[str, Any]:
        """The case's outcome as a dict of row fields, whatever happens to the child."""
        kind = kind_of(case.id)
        timeout = self.options.case_timeouts[kind.name]
        self._mark_inflight(case, Stage.EXPORT, facts)
        reset_scratch(self.scratch)  # never inherit the last case's files
        announce = lambda stage: self._mark_inflight(case, stage, facts)  # noqa: E731
        try:
            if self.options.isolation == "none":
                return run_case(case, self.scratch, announce=announce).to_dict()
            result = self.child(kind).run(case.id, self.scratch, timeout, on_stage=announce)
        except pytest.fail.Exception as exc:
            if "Timeout" not in str(exc):
                raise
            # pytest-timeout fired: in-process that is the case timeout, with the child it is
            # the backstop and the child is stuck somewhere.
            self.child(kind).kill()
            stage = self._inflight_stage() or Stage.EXPORT.value
            return _abnormal("timeout", stage, f"{exc} at stage {stage}")
        if result.status == "done":
            return result.outcome
        if result.status == "timeout":
            detail = f"case timed out after {timeout:g} s at stage {result.stage}"
            return _abnormal("timeout", result.stage, detail)
        if result.status == "error":
            # A bug in the harness, not in the exporter: the row says so in its signature.
            row = _abnormal("fail", result.stage, f"conformance harness error: {result.detail}")
            row["error_signature"] = f"{HARNESS_ERROR} {row['error_signature']}"
            return row
        return _abnormal("crash", result.stage, f"{result.detail} at stage {result.stage}")

    def _row(self, case, fields: dict[str, Any]):
        extra = dict(fields.pop("extra", None) or {})
        for name, value in case.row_extra().items():
            extra.setdefault(name, value)
        extra["worker"] = self.worker
        return new_row(case.row_identity(), self.versions, extra, fields)

    def _finish(self, row, record_property) -> None:
        from torch_onnx_conformance.reports.rows import append_row

        append_row(self.rows_path, row)
        if record_property is None:
            return
        for field in dataclasses.fields(row):
            value = getattr(row, field.name)
            if field.name not in NOT_JUNIT_PROPERTIES and value is not None:
                record_property(field.name, value)
        if row.extra.get("max_rel_scale") is not None:
            record_property("max_rel_scale", row.extra["max_rel_scale"])

    def _mark_inflight(self, case, stage: str, facts: dict[str, Any]) -> None:
        """Where this worker is, for the controller to use if the whole worker dies."""
        self._write_inflight({"id": case.id, "stage": stage, "facts": facts})

    def _write_inflight(self, marker: dict[str, Any]) -> None:
        """The marker file is opened once and rewritten in place, a shorter text padded with
        spaces (which JSON ignores): it changes at every stage of every case, and truncating
        or unlinking a file costs milliseconds on a filesystem with online discard (ext4
        mounted ``discard``), where one write into an open file costs microseconds."""
        data = json.dumps(marker).encode()
        if self._inflight_file is None:
            self.inflight.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.inflight, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            self._inflight_file = (fd, 0)
        fd, size = self._inflight_file
        os.pwrite(fd, data.ljust(size), 0)
        self._inflight_file = (fd, max(size, len(data)))

    def _inflight_stage(self) -> str | None:
        try:
            return json.loads(self.inflight.read_text())["stage"]
        except (OSError, ValueError, KeyError):
            return None

    def _take_inflight(self, case_id: str) -> tuple[str, dict[str, Any] | None]:
        """The stage and facts the in-flight marker kept for ``case_id``; the marker goes."""
        stage, facts = Stage.EXPORT.value, None
        try:
            data = json.loads(self.inflight.read_text())
            if data.get("id") == case_id:
                stage, facts = data.get("stage", Stage.EXPORT.value), data.get("facts")
            self.inflight.unlink()
        except (OSError, ValueError):
            pass
        return stage, facts


def _abnormal(status: str, stage: str | None, detail: str) -> dict[str, Any]:
    if stage not in expectations_mod.STAGES:
        stage = Stage.EXPORT.value  # before the export the case was still being built
    # The child announces Stage members; the row must hold the plain name, because xdist ships
    # row fields to the controller as junit properties and execnet serialises builtins only (an
    # enum there killed the worker, so one timed-out model case ended a whole -n 1 run).
    stage = Stage(stage).value
    return {
        "status": status,
        "stage": stage,
        "error": detail,
        "error_signature": signature_of(detail),
    }


def _conclude(verdict, row, results: Path) -> None:
    """Turn the verdict into the pytest item's outcome."""
    __tracebackhide__ = True
    if verdict.item == "pass":
        return
    if verdict.item == "skip":
        pytest.skip(row.error or "skipped")
    if verdict.item == "xfail":
        pytest.xfail(f"{row.status} at {row.stage}: {verdict.message}")
    # The first line is what a JUnit viewer shows as the failure message: it carries the
    # error's own first line (its numbers, the op it names), not just the stage.
    headline = f"{row.status} at stage {row.stage}" if row.stage else row.status
    error_first, _, error_rest = (row.error or "").partition("\n")
    details = [text for text in (error_first, verdict.message, error_rest) if text]
    lines = [f"{headline}: {details[0]}" if details else headline, *details[1:]]
    if row.repro_dir:
        lines.append(f"repro: python {results / row.repro_dir / 'repro.py'}")
    pytest.fail("\n".join(lines), pytrace=False)


def new_row(identity: dict[str, Any], versions: dict[str, str], extra, fields=None):
    """A result row for a case (op or model): its identity fields, then the outcome ``fields``
    the row format knows (others are dropped)."""
    from torch_onnx_conformance.reports.rows import CaseResult

    row = CaseResult(**identity, status="fail", versions=versions, extra=extra)
    known = {f.name for f in dataclasses.fields(CaseResult)} - {"extra", "versions", *identity}
    for name, value in (fields or {}).items():
        if name in known:
            setattr(row, name, value)
    return row


def _case_id_from_nodeid(nodeid: str) -> str | None:
    if "[" not in nodeid or not nodeid.endswith("]"):
        return None
    return nodeid[nodeid.index("[") + 1 : -1]


# --------------------------------------------------------------------------- controller side


class Controller:
    """The process that controls the run (xdist's controller, or the only process): the report
    header, JUnit global properties, the rows of cases whose worker died, and
    ``--update-expectations`` proposals."""

    def __init__(self, options: Options):
        self.options = options
        self._parent = os.getppid()

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        o = self.options
        samples = "default" if o.samples == -1 else ("all" if o.samples is None else o.samples)
        return [
            f"conformance: exporters={','.join(o.exporters)} dtypes={','.join(o.dtypes)} "
            f"shapes={','.join(o.shapes)} opsets={','.join(map(str, o.opsets))} "
            f"providers={','.join(o.providers)} samples={samples} results={o.results}"
            + (f" shard={o.shard[0]}/{o.shard[1]}" if o.shard else ""),
            self._models_header(),
        ]

    def _models_header(self) -> str:
        options = self.options.models
        if not options.enabled:
            return "conformance models: off (--ops without --models)"
        flags = ",".join("opt" if flag else "noopt" for flag in options.optimize)
        return (
            f"conformance models: tier={self.options.tier} optimize={flags} "
            f"case-timeout={self.options.case_timeouts['model']:g}s"
            + (f" models={','.join(options.names)}" if options.names else "")
        )

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        from _pytest.junitxml import xml_key  # private: the only way to reach the controller's XML

        xml = session.config.stash.get(xml_key, None)
        if xml is None:
            return
        options = self.options
        for name, version in versions().items():
            xml.add_global_property(name, version)
        xml.add_global_property("opsets", ",".join(map(str, options.opsets)))
        xml.add_global_property("providers", ",".join(options.providers))
        xml.add_global_property("exporters", ",".join(options.exporters))
        if options.shard:
            xml.add_global_property("shard", f"{options.shard[0]}/{options.shard[1]}")

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report, sched) -> None:
        """A whole xdist worker died running ``crashitem``: its ``crash`` row, judged and
        written by a runtime of that worker (ops and models). None when this process's own
        parent has died meanwhile: the whole run is being killed (``kill -9`` on its process
        tree), not the case; ``--resume`` runs the case again rather than keep a crash row
        that a race between the kills would have written."""
        if os.getppid() != self._parent:
            return None
        try:
            case = parse_case(_case_id_from_nodeid(crashitem) or "")
        except ValueError:
            return None
        verdict = CaseRuntime(self.options, worker=report.node.gateway.id).record_crash(case)
        if verdict.item == "xfail":
            report.outcome = "skipped"
            report.wasxfail = verdict.message
        return None

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.options.update_expectations:
            self._write_proposals(session.config)

    def _write_proposals(self, config: pytest.Config) -> None:
        """``--update-expectations``: beside each expectations file that judged this run's
        cases, a ``.proposed.toml`` judged from the rows of those cases."""
        from torch_onnx_conformance.reports.rows import read_rows

        options = self.options
        cases = [case for kind in KINDS.values() for case in kind.collect(options)]
        ids_by_path: dict[Path, set[str]] = {}
        for kind in KINDS.values():
            if kind.proposes_always:  # even where the run had no case of the kind for it
                for exporter in options.exporters:
                    ids_by_path[expectations_file(options, kind.name, exporter)] = set()
        for case in cases:
            ids_by_path.setdefault(expectations_path(options, case), set()).add(case.id)
        rows = read_rows([options.results])
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        for path, ids in ids_by_path.items():
            entries = expectations_mod.load_expectations(path)
            proposal = expectations_mod.propose(entries, (r for r in rows if r.id in ids))
            target = expectations_mod.proposed_path(path)
            expectations_mod.write_expectations(target, proposal.entries)
            message = (
                f"conformance: {target}: {len(proposal.dropped)} stale entries dropped, "
                f"{len(proposal.added)} new failures added, {len(proposal.entries)} entries"
            )
            if reporter is not None:
                reporter.write_line(message)
            else:
                print(message, file=sys.stderr)
