"""pytest plugin of the conformance suite: options, case collection, sharding, resume,
expectations, one result row per case, JUnit properties.

Collection turns the options into one pytest item per case (``op_case`` parameter of
``test_ops.py``, an ``op_cases.OpCase``) and one per model case (``model_case`` parameter of
``test_models.py``, a ``model_cases.ModelCaseId``). Running an item goes through
``CaseRuntime.run``, one body for both: the case runs in an isolating child process (see
``isolation.py``), its outcome is judged against the exporter's expectations file, a row is
appended to ``RESULTS/<worker>.jsonl`` and, for a case that does not pass, the repro directory is
kept. Controller-side hooks add global JUnit properties, turn a crashed worker into a ``crash``
row, and write ``--update-expectations`` proposals.

Op expectations live in ``expectations/<exporter>.toml``, model expectations in
``expectations/models-<exporter>.toml`` (same format; a model entry matches on model, family,
dtype, shapes, opset, provider, exporter, optimize, error).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import json
import os
import platform
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from conformance import expectations as expectations_mod
from conformance import model_cases, progress, runs
from conformance import planted as planted_cases
from conformance.case import DTYPES, EXPORTERS, PROVIDERS, SHAPES, in_shard, parse_case, parse_shard
from conformance.model_cases import ModelCaseId, is_model_id
from conformance.op_cases import OpCase
from conformance.runs import case_id_of
from exporter.stages import Stage

DEFAULT_OPSET = 20
DEFAULT_CASE_TIMEOUT_S = 120.0
#: pytest-timeout backstop beyond the case deadline: covers starting a fresh child.
BACKSTOP_SLACK_S = 120.0
EXPECTATIONS_DIR = Path(__file__).with_name("expectations")
ROW_STATUSES_WITH_REPRO = ("fail", "xfail", "crash", "timeout")
#: How the signature of a row the harness (not the exporter) failed begins; no expectation covers it.
HARNESS_ERROR = "HarnessError:"
DEFAULT_MODEL_CASE_TIMEOUT_S = 600.0
OPTIMIZE_CHOICES = {"on": (True,), "off": (False,), "both": (True, False)}
TIMEOUT_OPTIONS = (
    ("--case-timeout", DEFAULT_CASE_TIMEOUT_S, "one case"),
    ("--model-case-timeout", DEFAULT_MODEL_CASE_TIMEOUT_S, "one model case"),
)
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
    case_timeout: float
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
    case_timeout: float
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
    group.addoption("--results", default="results", help="directory for result rows and repros")
    group.addoption(
        "--resume", action="store_true", help="skip cases that already have a result row"
    )
    group.addoption(
        "--update-expectations",
        action="store_true",
        help="write expectations/<exporter>.proposed.toml from this run's rows",
    )
    for flag, default, what in TIMEOUT_OPTIONS:
        group.addoption(
            flag, type=float, default=default, help=f"seconds {what} may take (default {default:g})"
        )
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
        metavar="FILE|MODULE",
        help="your own model cases: a Python file or module defining model_cases() (see "
        "conformance/user_cases.py); replaces the zoo (unless --zoo), and op cases run only with --ops "
        "(repeatable)",
    )
    group.addoption(
        "--zoo", action="store_true", help="with --cases: the zoo's model cases run too"
    )
    # The option's older name (the harness's own tests used it before users could).
    group.addoption("--model-cases", dest="cases", action="append", help=argparse.SUPPRESS)
    progress.pytest_addoption(parser)


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
    for flag, _, _ in TIMEOUT_OPTIONS:
        if get(flag.lstrip("-").replace("-", "_")) <= 0:
            raise pytest.UsageError(f"{flag} must be positive")
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
        case_timeout=get("case_timeout"),
        planted=planted,
        expectations_dir=Path(get("expectations_dir") or EXPECTATIONS_DIR),
        isolation=get("isolation"),
        models=_parse_model_options(config),
        ops_enabled=bool(get("ops") or get("planted") or not get("cases")),
    )


def get_options(config: pytest.Config) -> Options:
    return config.stash[_OPTIONS_KEY]


def pytest_configure(config: pytest.Config) -> None:
    options = _parse_options(config)
    config.stash[_OPTIONS_KEY] = options
    progress.register(config)
    if "cuda" in options.providers and not _is_worker(config):
        from conformance.session import cuda_available

        if not cuda_available():
            raise pytest.UsageError(
                "--provider cuda: onnxruntime has no CUDAExecutionProvider here. Install the "
                "GPU build (pip install '.[cuda]') on a machine with a GPU, or drop the option."
            )
    for exporter in options.exporters:
        # Parse every expectations file up front: a typo there is a usage error, not N failures.
        for kind in ("op", "model"):
            try:
                expectations_mod.load_expectations(expectations_file(options, kind, exporter))
            except ValueError as exc:
                raise pytest.UsageError(str(exc)) from None
    runs.configure(config, options.results, options.resume)
    if config.getoption("expectations_dir"):
        os.environ[model_cases.EXPECTATIONS_DIR_ENV] = str(options.expectations_dir.resolve())
    try:
        model_cases.use_extra_case_files(config.getoption("cases") or [], config.getoption("zoo"))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def _parse_model_options(config: pytest.Config) -> ModelOptions:
    get = config.getoption
    names = tuple(get("models")) if get("models") else None
    return ModelOptions(
        names=names,
        optimize=OPTIMIZE_CHOICES[get("optimize")],
        case_timeout=get("model_case_timeout"),
        enabled=names is not None or not (get("ops") or get("planted")),
    )


def expectations_file(options: Options, kind: str, exporter: str) -> Path:
    """The expectations file that judges one exporter's cases of ``kind`` (op or model)."""
    prefix = "models-" if kind == "model" else ""
    return options.expectations_dir / f"{prefix}{exporter}.toml"


def pytest_report_header(config: pytest.Config) -> list[str]:
    o = get_options(config)
    samples = "default" if o.samples == -1 else ("all" if o.samples is None else o.samples)
    return [
        f"conformance: exporters={','.join(o.exporters)} dtypes={','.join(o.dtypes)} "
        f"shapes={','.join(o.shapes)} opsets={','.join(map(str, o.opsets))} "
        f"providers={','.join(o.providers)} samples={samples} results={o.results}"
        + (f" shard={o.shard[0]}/{o.shard[1]}" if o.shard else ""),
        _models_header(config),
    ]


def _models_header(config: pytest.Config) -> str:
    options = get_options(config).models
    if not options.enabled:
        return "conformance models: off (--ops without --models)"
    flags = ",".join("opt" if flag else "noopt" for flag in options.optimize)
    return (
        f"conformance models: tier={get_options(config).tier} optimize={flags} "
        f"case-timeout={options.case_timeout:g}s"
        + (f" models={','.join(options.names)}" if options.names else "")
    )


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def worker_id() -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


# --------------------------------------------------------------------------- collection


def collect_op_cases(options: Options) -> list[OpCase]:
    """Every op case the options select, in a stable order, sharded."""
    from conformance import op_cases

    if not options.ops_enabled:
        return []  # the OpInfo database is not even imported
    axes = [
        (shapes, opset, provider, exporter)
        for shapes in options.shapes
        for opset in options.opsets
        for provider in options.providers
        for exporter in options.exporters
    ]
    cases = []
    if options.planted:
        for name in options.planted:
            for shapes, opset, provider, exporter in axes:
                cases.append(
                    OpCase(planted_cases.PREFIX + name, 0, "f32", shapes, opset, provider, exporter)
                )
    else:
        matched = 0
        for dtype in options.dtypes:
            ops = op_cases.load_manifest(options.cache_dir, dtype, options.ops)
            matched += len(ops)
            for op in ops:
                if op.error:
                    warnings.warn(
                        f"conformance: {op.op} ({dtype}) has no samples: {op.error}", stacklevel=2
                    )
                    continue
                limit = options.samples
                if limit == -1:
                    limit = (
                        op_cases.DEFAULT_INPLACE_SAMPLES if op.inplace else op_cases.DEFAULT_SAMPLES
                    )
                by_index = {f["index"]: f for f in op.samples}
                for index in op_cases.select_samples(op.samples, limit, inplace=op.inplace):
                    for shapes, opset, provider, exporter in axes:
                        cases.append(
                            OpCase(
                                op.op,
                                index,
                                dtype,
                                shapes,
                                opset,
                                provider,
                                exporter,
                                sample_facts=by_index[index],
                            )
                        )
        if options.ops and not matched:
            raise pytest.UsageError(
                f"--ops {' '.join(options.ops)}: no OpInfo supporting {', '.join(options.dtypes)} "
                "has a matching name. Names look like 'abs', 'nn.functional.conv2d', "
                "'div.trunc_rounding' (name.variant) or 'add_' (in-place); globs are fnmatch."
            )
    return [case for case in cases if in_shard(case.id, options.shard)]


def collect_model_cases(config: pytest.Config) -> list[ModelCaseId]:
    shared = get_options(config)
    options = shared.models
    if not options.enabled:
        return []
    try:
        selected = model_cases.collect(
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
            f"(dtypes {', '.join(shared.dtypes)}; models run in {', '.join(model_cases.MODEL_DTYPES)}). "
            "List them with: python -m model_zoo list --tier full"
        )
    return [key for key, _ in selected]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "op_case" in metafunc.fixturenames:
        cases = collect_op_cases(get_options(metafunc.config))
        metafunc.parametrize("op_case", cases, ids=[case.id for case in cases])
    if "model_case" in metafunc.fixturenames:
        keys = collect_model_cases(metafunc.config)
        metafunc.parametrize("model_case", keys, ids=[key.id for key in keys])


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    options = get_options(config)
    if options.resume:
        from reports.rows import finished_ids

        done = finished_ids([options.results])
        keep, drop = [], []
        for item in items:
            (drop if case_id_of(item) in done else keep).append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep
    slack = BACKSTOP_SLACK_S if options.isolation == "child" else 0
    op_backstop = options.case_timeout + slack
    model_backstop = options.models.case_timeout + slack
    keep, drop = [], []
    for item in items:
        case_id = case_id_of(item) or ""
        if case_id.startswith("op::"):
            item.add_marker(pytest.mark.timeout(op_backstop))
        elif is_model_id(case_id):
            item.add_marker(pytest.mark.timeout(model_backstop))
        elif getattr(item, "originalname", None) in ("test_model", "test_op"):
            drop.append(item)  # the placeholder of an empty selection: not a real case
            continue
        keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


# --------------------------------------------------------------------------- running a case


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for dist in ("torch", "onnx", "onnxruntime", "onnxscript", "onnx-ir", "numpy"):
        try:
            found[dist.replace("-", "_")] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            found[dist.replace("-", "_")] = "missing"
    return found


class CaseRuntime:
    """Per-worker state: the isolating children (one for op cases, a forking zygote for model
    cases, each started when its first case runs), loaded expectations, the rows file."""

    def __init__(self, options: Options):
        self.options = options
        self.worker = worker_id()
        self.rows_path = runs.rows_path(options.results, self.worker)
        self.scratch = runs.scratch_dir(options.results, self.worker)
        self.inflight = runs.inflight_path(options.results, self.worker)
        self.versions = versions()
        self._children: dict[str, Any] = {}
        self._expectations: dict[Path, list] = {}

    def close(self) -> None:
        for child in self._children.values():
            child.close()

    def child(self, kind: str):
        if kind not in self._children:
            from conformance.isolation import CaseChild, ForkingModelChild

            self._children[kind] = ForkingModelChild() if kind == "model" else CaseChild()
        return self._children[kind]

    def expectations(self, case) -> list:
        path = expectations_path(self.options, case)
        if path not in self._expectations:
            self._expectations[path] = expectations_mod.load_expectations(path)
        return self._expectations[path]

    def run(self, case, record_property) -> None:
        """The one body of every case, op or model: skip by expectation, run it isolated (row
        fields back whatever happens to the child), judge against the expectations, keep a
        repro for a case that did not pass, append its row, and fail or pass the pytest item
        accordingly."""
        facts = case.facts()
        entries = self.expectations(case)
        skip = expectations_mod.skip_entry(entries, facts)
        if skip is not None:
            row = self._row(
                case, {"status": "skip", "error": f"skipped by expectation: {skip.reason}"}
            )
            row.expectation = skip.reason
            self._finish(row, record_property)
            pytest.skip(f"expectation: {skip.reason}")

        if planted_cases.planted_name(getattr(case, "op", "")) == "worker_crash":
            self._mark_inflight(case, Stage.EXPORT, facts)
            os.abort()
        outcome = self._run(case, facts)
        status = outcome.pop("status")
        verdict = judge_outcome(entries, facts, status, outcome)
        row = self._row(case, {**outcome, "status": verdict.status})
        if verdict.entry is not None:
            row.expectation = verdict.entry.reason
        if row.status in ROW_STATUSES_WITH_REPRO:
            from conformance.repro import keep_repro

            row.repro_dir = keep_repro(
                self.scratch,
                self.options.results,
                case.id,
                status=row.status,
                stage=row.stage,
                error=row.error,
            )
        self._finish(row, record_property)
        self.inflight.unlink(missing_ok=True)
        _conclude(verdict, row, self.options.results)

    def _run(self, case, facts: dict[str, Any]) -> dict[str, Any]:
        """The case's outcome as a dict of row fields, whatever happens to the child."""
        kind = case.row_identity()["kind"]
        timeout = self.options.models.case_timeout if kind == "model" else self.options.case_timeout
        self._mark_inflight(case, Stage.EXPORT, facts)
        shutil.rmtree(self.scratch, ignore_errors=True)  # never inherit the last case's files
        announce = lambda stage: self._mark_inflight(case, stage, facts)  # noqa: E731
        try:
            if self.options.isolation == "none":
                from conformance.runner import run_case

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
        if getattr(case, "sample_facts", None) is not None:
            extra.setdefault("sample", case.sample_facts)
        extra["worker"] = self.worker
        return new_row(case.row_identity(), self.versions, extra, fields)

    def _finish(self, row, record_property) -> None:
        from reports.rows import append_row

        append_row(self.rows_path, row)
        for field in dataclasses.fields(row):
            value = getattr(row, field.name)
            if field.name not in NOT_JUNIT_PROPERTIES and value is not None:
                record_property(field.name, value)
        if row.extra.get("max_rel_scale") is not None:
            record_property("max_rel_scale", row.extra["max_rel_scale"])

    def _mark_inflight(self, case, stage: str, facts: dict[str, Any]) -> None:
        """Where this worker is, for the controller to use if the whole worker dies."""
        self.inflight.parent.mkdir(parents=True, exist_ok=True)
        self.inflight.write_text(json.dumps({"id": case.id, "stage": stage, "facts": facts}))

    def _inflight_stage(self) -> str | None:
        try:
            return json.loads(self.inflight.read_text())["stage"]
        except (OSError, ValueError, KeyError):
            return None


def expectations_path(options: Options, case) -> Path:
    return expectations_file(options, case.row_identity()["kind"], case.exporter)


def judge_outcome(entries, facts: dict[str, Any], status: str, outcome: dict[str, Any]):
    """The expectations' verdict on a case's outcome. A harness error (its signature starts
    with ``HARNESS_ERROR``) judges no exporter: no entry covers it, it fails as what it is."""
    signature = outcome.get("error_signature")
    if str(signature or "").startswith(HARNESS_ERROR):
        return expectations_mod.Verdict(
            status, "fail", None, "conformance harness error (not the exporter's): fix the harness"
        )
    return expectations_mod.judge(entries, facts, status, outcome.get("stage"), signature)


def _abnormal(status: str, stage: str | None, detail: str) -> dict[str, Any]:
    from conformance.runner import signature_of

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


@pytest.fixture(scope="session")
def conformance_runtime(request: pytest.FixtureRequest):
    runtime = CaseRuntime(get_options(request.config))
    yield runtime
    runtime.close()


# --------------------------------------------------------------------------- controller side


def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    if _is_worker(config):
        return
    from _pytest.junitxml import xml_key  # private: the only way to reach the controller's XML

    xml = config.stash.get(xml_key, None)
    if xml is None:
        return
    options = get_options(config)
    for name, version in versions().items():
        xml.add_global_property(name, version)
    xml.add_global_property("opsets", ",".join(map(str, options.opsets)))
    xml.add_global_property("providers", ",".join(options.providers))
    xml.add_global_property("exporters", ",".join(options.exporters))
    if options.shard:
        xml.add_global_property("shard", f"{options.shard[0]}/{options.shard[1]}")


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem: str, report, sched) -> None:
    """A whole xdist worker died running ``crashitem``: judge and append its ``crash`` row (ops
    and models); the stage comes from the worker's in-flight marker."""
    from reports.rows import append_row

    try:
        case = parse_case(_case_id_from_nodeid(crashitem) or "")
    except ValueError:
        return None
    options = get_options(report.node.config)
    worker = report.node.gateway.id
    inflight = runs.inflight_path(options.results, worker)
    stage, facts = Stage.EXPORT.value, None
    try:
        data = json.loads(inflight.read_text())
        if data.get("id") == case.id:
            stage, facts = data.get("stage", Stage.EXPORT.value), data.get("facts")
        inflight.unlink()
    except (OSError, ValueError):
        pass
    facts = facts or case.facts()
    detail = f"xdist worker {worker} crashed while running the case (stage {stage})"
    outcome = _abnormal("crash", stage, detail)
    entries = expectations_mod.load_expectations(expectations_path(options, case))
    verdict = expectations_mod.judge(entries, facts, "crash", stage, outcome["error_signature"])
    extra = {"sample": facts} if isinstance(case, OpCase) else {}
    row = new_row(case.row_identity(), versions(), {**extra, "worker": worker})
    row.status, row.stage, row.error = verdict.status, outcome["stage"], detail
    row.error_signature = outcome["error_signature"]
    row.expectation = verdict.entry.reason if verdict.entry else None
    append_row(runs.rows_path(options.results, worker), row)
    if verdict.item == "xfail":
        report.outcome = "skipped"
        report.wasxfail = verdict.message
    return None


def new_row(identity: dict[str, Any], versions: dict[str, str], extra, fields=None):
    """A result row for a case (op or model): its identity fields, then the outcome ``fields``
    the row format knows (others are dropped)."""
    from reports.rows import CaseResult

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


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if _is_worker(config):
        return
    options = get_options(config)
    if options.update_expectations:
        _write_proposals(config, options)


def _write_proposals(config: pytest.Config, options: Options) -> None:
    """``--update-expectations``: beside each expectations file that judged this run's cases, a
    ``.proposed.toml`` judged from the rows of those cases."""
    from reports.rows import read_rows

    cases: list = collect_op_cases(options)
    if get_options(config).models.enabled:
        cases += collect_model_cases(config)
    ids_by_path: dict[Path, set[str]] = {}
    for exporter in options.exporters:
        # Every exporter's op file gets a proposal, even where the run had no op case for it.
        ids_by_path[expectations_file(options, "op", exporter)] = set()
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
