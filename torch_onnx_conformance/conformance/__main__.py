"""Command line of the conformance suite.

``python -m torch_onnx_conformance run [options] [pytest args]``  (``run --help`` lists the options)
    Runs ``pytest torch_onnx_conformance/conformance`` on all cores (xdist, ``--dist worksteal``), then builds the reports
    from the result rows with ``python -m torch_onnx_conformance.reports build RESULTS --out reports/latest``, and exits
    with pytest's exit code, or 6 when some collected cases have no row (pytest or the run was
    killed: the reports say "incomplete: N of M cases have results"), or 7 when another run
    holds RESULTS. A run starts afresh unless ``--resume`` is given: once it has run cases,
    what earlier runs wrote in RESULTS is deleted (files the harness did not write stay; see
    ``torch_onnx_conformance/conformance/runs.py``). ``--help``, ``--collect-only``, ``--fixtures``, ``--markers`` and
    runs that end before any case ran (pytest exit code 2, 4 or 5) write nothing.
    ``--case-memory SIZE`` sets each case process's memory ceiling (``6G``, ``0.25`` of RAM,
    ``none``; see ``torch_onnx_conformance/conformance/limits.py``). Every pytest option passes through, e.g.
    ``--exporter ours --exporter torch-dynamo``, ``--opset 18``, ``--ops 'nn.functional.*'``,
    ``--shard 0/4``, ``-n 4``.

``python -m torch_onnx_conformance repro CASE_ID [--results DIR] [--cases FILE] [--expectations-dir DIR]``
    (``onnx-conformance`` once installed). Re-runs one op or model case by id and rebuilds ``RESULTS/repros/<case>/`` (model.onnx,
    inputs, expected outputs, repro.py), whatever the case's outcome. The outcome is judged
    against the expectations as a run judges it: exit 0 for a pass or an expected failure (it
    prints the entry's reason), 1 for any other result.

``python -m torch_onnx_conformance placement MODEL.onnx [--provider cuda] [--json]``
    Predicts which nodes onnxruntime's CUDA provider leaves to CPU and the Memcpy nodes the
    session adds, on any machine (``torch_onnx_conformance/conformance/placement.py``). Last line:
    ``N nodes, K on CPU, M Memcpy``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from torch_onnx_conformance.reports.rows import INCOMPLETE_EXIT_CODE

DEFAULT_REPORTS_OUT = Path("reports/latest")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "run":
        return run(rest)
    if command == "repro":
        return repro(rest)
    if command == "placement":
        from torch_onnx_conformance.conformance import placement

        return placement.main(rest)
    print(
        f"unknown command {command!r}; use 'run', 'repro' or 'placement' (see --help)",
        file=sys.stderr,
    )
    return 2


# --------------------------------------------------------------------------- run


def _option_value(args: list[str], name: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def _pop_option(args: list[str], name: str) -> str | None:
    """Remove ``name VALUE`` / ``name=VALUE`` from ``args`` and return the value."""
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            value = args[i + 1]
            del args[i : i + 2]
            return value
        if arg.startswith(name + "="):
            del args[i]
            return arg.split("=", 1)[1]
    return None


def _has_flag(args: list[str], *names: str) -> bool:
    return any(arg in names or any(arg.startswith(n + "=") for n in names) for arg in args)


def _is_test_path(arg: str) -> bool:
    """A positional pytest argument naming tests (not the value of an option like --results)."""
    if arg.startswith("-"):
        return False
    path = Path(arg.split("::")[0])
    if path.suffix == ".py":
        return path.exists()
    return path.is_dir() and (any(path.glob("test_*.py")) or (path / "conftest.py").exists())


#: pytest options that only print something: the run passes them through and writes nothing.
INFORMATION_OPTIONS = (
    "-h",
    "--help",
    "--collect-only",
    "--co",
    "--fixtures",
    "--funcargs",
    "--fixtures-per-test",
    "--markers",
    "--version",
    "-V",
    "--setup-plan",
)
#: pytest options that need its cache plugin (which otherwise stays off).
CACHE_OPTIONS = ("--lf", "--last-failed", "--ff", "--failed-first", "--nf", "--new-first")
CACHE_OPTIONS += ("--sw", "--stepwise", "--sw-skip", "--cache-show", "--cache-clear")
#: pytest exit codes that mean no case ran: interrupted, usage error, nothing collected.
NOTHING_RAN_CODES = (2, 4, 5)


#: ``-P``: the current folder stays off the child's ``sys.path``, so folders of the user's own
#: named ``reports/``, ``conformance/``... never shadow the harness's packages.
PYTHON = (sys.executable, "-P")


@functools.cache
def _value_options() -> frozenset[str]:
    """The harness's options that take a value (``--cases FILE``, ``--results DIR``...)."""
    parser = argparse.ArgumentParser(add_help=False)
    from torch_onnx_conformance.conformance import plugin

    plugin.pytest_addoption(_ArgparseOptions(parser))
    return frozenset(
        name for action in parser._actions if action.nargs != 0 for name in action.option_strings
    )


def _joined_values(args: list[str]) -> list[str]:
    """``--cases x.py`` as ``--cases=x.py``: pytest reads its arguments before it knows the
    harness's options, and would take ``x.py`` for a test file."""
    joined, i = [], 0
    while i < len(args):
        if args[i] in _value_options() and i + 1 < len(args):
            joined.append(f"{args[i]}={args[i + 1]}")
            i += 2
        else:
            joined.append(args[i])
            i += 1
    return joined


#: Keys of the ``[tool.onnx-conformance]`` table of ./pyproject.toml and the options they give.
PROJECT_KEYS = {
    "cases": "--cases",
    "opsets": "--opset",
    "providers": "--provider",
    "shapes": "--shapes",
    "exporters": "--exporter",
    "expectations": "--expectations-dir",
    "results": "--results",
    "reports-out": "--reports-out",
}
#: Keys whose values are paths, relative to the pyproject.toml's folder.
PROJECT_PATH_KEYS = ("cases", "expectations", "results", "reports-out")


class UsageProblem(ValueError):
    """A command line or project setting the command cannot use (exit code 4)."""


def project_args(
    args: list[str], pyproject: Path = Path("pyproject.toml"), keys=tuple(PROJECT_KEYS)
) -> list[str]:
    """``args`` after the options ``[tool.onnx-conformance]`` of ``pyproject`` gives, for each
    of ``keys`` whose option the command line does not give itself."""
    if not pyproject.is_file():
        return args
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    try:
        table = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageProblem(f"{pyproject}: not valid TOML: {exc}") from exc
    table = table.get("tool", {}).get("onnx-conformance")
    if table is None:
        return args
    unknown = sorted(set(table) - set(PROJECT_KEYS))
    if unknown:
        raise UsageProblem(
            f"{pyproject} [tool.onnx-conformance]: unknown keys {unknown}; use {sorted(PROJECT_KEYS)}"
        )
    added = []
    for key, value in table.items():
        option = PROJECT_KEYS[key]
        if key not in keys:
            continue
        if _has_flag(args, option) or (key == "cases" and _has_flag(args, "--model-cases")):
            continue
        for item in value if isinstance(value, list) else [value]:
            if not isinstance(item, (str, int)) or isinstance(item, bool):
                raise UsageProblem(f"{pyproject} [tool.onnx-conformance] {key}: got {item!r}")
            item = str(item)
            if key in PROJECT_PATH_KEYS and (
                key != "cases"
                or item.endswith(".py")
                or (pyproject.parent / item / "config.json").exists()
            ):
                item = str(pyproject.parent / item)
            added.append(f"{option}={item}")
    return added + args


def build_pytest_command(args: list[str], junit_xml: Path | None) -> list[str]:
    args = _joined_values(args)
    command = [*PYTHON, "-m", "pytest"]
    if not any(_is_test_path(a) for a in args):
        command.append(str(Path(__file__).resolve().parent))
    if not _has_flag(args, "-n", "--numprocesses") and not any(
        a.startswith("-n") and a[2:].isdigit() for a in args
    ):
        command += ["-n", str(os.cpu_count() or 1)]
    if not _has_flag(args, "--dist"):
        # worksteal hands each worker a contiguous run of cases (rebalanced by stealing the
        # tail of the busiest): the opsets of one case, adjacent in collection order, run in
        # one worker's case process, which captures them once (exporters.capture_cache).
        command += ["--dist", "worksteal"]
    if not _has_flag(args, *CACHE_OPTIONS) and "no:cacheprovider" not in args:
        # pytest's cache would be written into the checkout, outside RESULTS and the reports.
        command += ["-p", "no:cacheprovider"]
    if not _has_flag(args, "--max-worker-restart"):
        # A worker that dies costs its case (recorded as crash), never the run.
        command += ["--max-worker-restart", "1000"]
    if junit_xml is not None and not _has_flag(args, "--junitxml", "--junit-xml"):
        command += [f"--junitxml={junit_xml}", "-o", "junit_family=xunit1"]
    return command + args


#: Options ``run`` takes itself, before pytest starts: (flag, metavar, help).
RUN_OPTIONS = (
    ("--reports-out", "DIR", f"where the reports are written (default {DEFAULT_REPORTS_OUT})"),
    (
        "--case-memory",
        "SIZE",
        "memory ceiling of each case process: 6G, 0.25 (of RAM) or none "
        "(default: half the RAM shared among the workers)",
    ),
    ("--help-pytest", None, "pytest's own help (every pytest option passes through)"),
)
HELP_PROLOGUE = """usage: python -m torch_onnx_conformance run [OPTIONS] [PYTEST ARGS]

Runs the conformance cases with pytest on all cores (-n CPUS --dist worksteal), writes one result
row per case into --results and pytest's JUnit XML into RESULTS/junit.xml, then builds the
reports (summary.md, ops.md, models.md, charts) into --reports-out.

exit codes (for CI): 0 every case as expected (passes and expected failures), 1 an unexpected
result (a failure no expectation names, or an expected failure that passed), 2 interrupted,
3 an internal error of pytest, 4 usage error (a bad option, a --cases file that does not
import: its file:line is printed), 5 nothing selected; 6 some collected cases have no row
(see the report's banner; --resume runs them); 7 another run holds RESULTS.

Your own models: --cases FILE|MODULE (see torch_onnx_conformance/conformance/user_cases.py) or a transformers
model FOLDER holding config.json (weights optional), or a
[tool.onnx-conformance] table in ./pyproject.toml with any of the keys cases, opsets,
providers, shapes, exporters, expectations, results, reports-out (paths relative to it; the
command line wins). Installed, the command is also `onnx-conformance run ...`.
"""
HELP_EPILOGUE = """Every other argument goes to pytest unchanged, e.g. -n 4, -k EXPR, -x, --maxfail N.
pytest's own options: python -m torch_onnx_conformance run --help-pytest
"""


def run_help() -> str:
    """The harness's options first, all of them (those ``run`` takes itself, then the
    conformance plugin's), then a pointer to pytest's help."""
    parser = argparse.ArgumentParser(
        prog="python -m torch_onnx_conformance run", add_help=False, usage=argparse.SUPPRESS
    )
    own = parser.add_argument_group("run options (taken before pytest starts)")
    for flag, metavar, text in RUN_OPTIONS:
        if metavar is None:
            own.add_argument(flag, action="store_true", help=text)
        else:
            own.add_argument(flag, metavar=metavar, help=text)
    own.add_argument("-h", "--help", action="store_true", help="this help")
    from torch_onnx_conformance.conformance import plugin

    plugin.pytest_addoption(_ArgparseOptions(parser))
    return HELP_PROLOGUE + "\n" + parser.format_help() + "\n" + HELP_EPILOGUE


class _ArgparseOptions:
    """Takes the conformance plugin's ``pytest_addoption`` calls into an argparse parser, so the
    help lists exactly the options the plugin registers, with its texts and defaults."""

    def __init__(self, parser: argparse.ArgumentParser):
        self.parser = parser

    def getgroup(self, name: str, description: str = "") -> _ArgparseOptions._Group:
        title = f"conformance options ({description or name}; passed to pytest)"
        return self._Group(self.parser.add_argument_group(title))

    def addoption(self, *names: str, **attrs) -> None:
        self.parser.add_argument(*names, **attrs)

    def addini(self, *args, **kwargs) -> None:
        """ini settings are not command-line options."""

    class _Group:
        def __init__(self, group):
            self.group = group

        def addoption(self, *names: str, **attrs) -> None:
            if "default" in attrs and attrs.get("help") not in (None, argparse.SUPPRESS):
                default = attrs["default"]
                if default not in (None, False) and "default" not in attrs["help"]:
                    attrs = {**attrs, "help": f"{attrs['help']} (default {default})"}
            self.group.add_argument(*names, **attrs)


def run(args: list[str]) -> int:
    """Run the cases, then build the reports; see the module doc for what it writes when."""
    from torch_onnx_conformance.conformance import runs
    from torch_onnx_conformance.reports.rows import folder_files, repair_torn_tails

    args = list(args)
    if any(arg in ("-h", "--help") for arg in args):
        print(run_help(), end="")
        return 0
    if "--help-pytest" in args:
        args = [("--help" if arg == "--help-pytest" else arg) for arg in args]
    typed = shlex.join(["python", "-m", "torch_onnx_conformance", "run", *args])
    try:
        args = project_args(args)
    except UsageProblem as problem:
        print(problem, file=sys.stderr)
        return 4
    reports_out = Path(_pop_option(args, "--reports-out") or DEFAULT_REPORTS_OUT)
    case_memory = _pop_option(args, "--case-memory")
    try:
        env = _run_env(typed, case_memory)
    except ValueError as error:
        print(f"--case-memory: {error}", file=sys.stderr)
        return 4
    if any(arg in INFORMATION_OPTIONS for arg in args):
        env[runs.READ_ONLY_ENV] = "1"
        command = build_pytest_command(args, None)
        print("+ " + " ".join(command), flush=True)
        return subprocess.call(command, env=env)

    results = Path(_option_value(_joined_values(args), "--results") or "results")
    resume = "--resume" in args
    run_id = runs.new_run_id()
    env[runs.RUN_ID_ENV] = run_id
    lock = runs.ResultsLock(results)
    try:
        lock.acquire()
    except runs.RunRefused as refused:
        print(f"refused: {refused}", file=sys.stderr)
        return runs.REFUSED_EXIT_CODE
    cases_ran = False
    # pytest writes its JUnit file even when nothing ran: it goes to the run's staging folder
    # and moves to RESULTS/junit.xml only when cases ran.
    found = results.stat()
    runs.clear_staging(results)
    staging = runs.staging_dir(results, run_id)
    staging.mkdir(parents=True)
    try:
        if resume and results.is_dir():
            for repaired in repair_torn_tails(folder_files(results)[0]):
                print(f"--resume: {repaired}", file=sys.stderr)
        junit_xml = staging / "junit.xml"
        command = build_pytest_command(args, junit_xml)
        print("+ " + " ".join(command), flush=True)
        pytest_code = _call_as_group(command, env)
        cases_ran = runs.manifest_path(results, run_id).exists() and (
            pytest_code not in NOTHING_RAN_CODES or runs.rows_written(results, run_id)
        )
        if not cases_ran:
            runs.manifest_path(results, run_id).unlink(missing_ok=True)
            print("no case ran: the results and reports were left as they were", file=sys.stderr)
            return pytest_code
        if junit_xml.exists():
            shutil.move(junit_xml, results / "junit.xml")
        else:  # pytest was killed before writing it: an earlier run's file would misreport
            (results / "junit.xml").unlink(missing_ok=True)
        runs.remove_run_leftovers(results, run_id)
        if not resume:
            runs.remove_superseded(results)
    finally:
        runs.clear_staging(results)
        if not cases_ran:  # the folder is left as it was found, its modification time too
            os.utime(results, ns=(found.st_atime_ns, found.st_mtime_ns))
        lock.release(remove_created=not cases_ran)
    return _build_reports(results, reports_out, pytest_code)


def _build_reports(results: Path, reports_out: Path, pytest_code: int) -> int:
    """Build the reports from the run's rows; the run's exit code (see the module doc)."""
    report_command = [*PYTHON, "-m", "torch_onnx_conformance.reports", "build", str(results)]
    report_command += ["--out", str(reports_out)]
    print("+ " + " ".join(report_command), flush=True)
    report_code = subprocess.call(report_command)
    if report_code == INCOMPLETE_EXIT_CODE:
        return INCOMPLETE_EXIT_CODE
    if report_code != 0:
        print(f"building the reports failed (exit code {report_code})", file=sys.stderr)
    if pytest_code < 0:
        return 128 - pytest_code  # killed by a signal, as a shell would say it
    return pytest_code if pytest_code != 0 else report_code


def _run_env(typed: str, case_memory: str | None) -> dict[str, str]:
    """pytest's environment: the typed command, the case memory ceiling (ValueError when it
    does not parse), no bytecode files."""
    from torch_onnx_conformance.conformance import limits, runs

    env = dict(os.environ)
    # pytest and Python would otherwise leave __pycache__ folders (assertion-rewritten test
    # modules, the harness's own modules) beside the files a run was pointed at: a run writes
    # only under the results and reports folders it was given.
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env[runs.COMMAND_ENV] = typed
    if case_memory is not None:
        limits.parse_memory(case_memory)
        env[limits.MEMORY_ENV] = case_memory
    return env


def _call_as_group(command: list[str], env: dict[str, str]) -> int:
    """Run pytest in a process group of its own that dies with this process: SIGKILL here
    takes the controller down (``PR_SET_PDEATHSIG``; its workers and case children follow the
    same way), and SIGINT, SIGTERM or SIGHUP here are passed to the whole group."""
    from torch_onnx_conformance.conformance.limits import die_with_parent

    process = subprocess.Popen(
        command,
        env=env,
        start_new_session=True,
        preexec_fn=functools.partial(die_with_parent, os.getpid()),
    )

    def forward(number, frame) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, number)

    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {number: signal.signal(number, forward) for number in handled}
    try:
        while True:
            try:
                return process.wait()
            except KeyboardInterrupt:
                continue
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        # Whatever is left of the group (a worker that ignored the signal) goes too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)


# --------------------------------------------------------------------------- repro


def _replay(kind, case, scratch: Path, options) -> dict:
    """The case's outcome, run by its kind's entry here (``--in-process``) or in its kind's
    isolating child; the fields of a row."""
    if options.in_process:
        return kind.run(case.id, scratch).to_dict()
    child = kind.child()
    try:
        result = child.run(case.id, scratch, options.timeout)
    finally:
        child.close()
    if result.status == "done":
        return result.outcome
    return {"status": result.status, "stage": result.stage, "error": result.detail}


def _repro_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m torch_onnx_conformance repro",
        description="Re-run one op or model case and rebuild its repro directory.",
    )
    parser.add_argument(
        "case_id",
        help="e.g. 'op::abs::s000::f32::static::opset20::cpu::ours' or "
        "'model::torchvision/resnet18::f32::dynamic::opset20::cpu::ours::opt'",
    )
    parser.add_argument("--results", default="results", type=Path, help="results directory")
    parser.add_argument(
        "--timeout", type=float, default=600.0, help="seconds the case may take (default 600)"
    )
    parser.add_argument(
        "--cases",
        "--model-cases",
        dest="cases",
        action="append",
        metavar="FILE|MODULE",
        help="the case files or modules the run took the case from (repeatable)",
    )
    parser.add_argument("--zoo", action="store_true", help="the run had --zoo")
    parser.add_argument(
        "--expectations-dir", type=Path, default=None, help="the run's expectations folder"
    )
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="run in this process (for a debugger); a crash then ends this command",
    )
    return parser


def repro(args: list[str]) -> int:
    parser = _repro_parser()
    try:
        args = project_args(args, keys=("cases", "expectations", "results"))
    except UsageProblem as problem:
        parser.error(str(problem))
    options = parser.parse_args(args)

    from torch_onnx_conformance.conformance.case import kind_of
    from torch_onnx_conformance.conformance.model_cases import use_extra_case_files

    try:
        use_extra_case_files(options.cases or [], options.zoo)
    except ValueError as exc:
        parser.error(str(exc))
    from torch_onnx_conformance.conformance.repro import keep_repro

    try:
        kind = kind_of(options.case_id)
        case = kind.parse(options.case_id)
    except ValueError as exc:
        parser.error(str(exc))
    # A folder of this command's own: a run or another repro may be using the results folder.
    scratch = options.results / ".scratch" / f"repro-{os.getpid()}" / "current"
    shutil.rmtree(scratch, ignore_errors=True)
    outcome = _replay(kind, case, scratch, options)
    status, stage, error = outcome["status"], outcome.get("stage"), outcome.get("error")
    from torch_onnx_conformance.conformance.repro import judge_replay

    # Judged as a run judges it: an expected failure says so and is no failure of this command.
    verdict = judge_replay(case, outcome, options.results, options.expectations_dir)
    print(f"{case.id}: {verdict.status}" + (f" at stage {stage}" if stage else ""))
    if error:
        print(error)
    if verdict.item == "xfail" and verdict.entry is not None:
        print(f"this failure is expected (exit code 0): {verdict.entry.reason}")
    elif verdict.message:
        print(verdict.message)
    if outcome.get("max_abs") is not None:
        print(f"max abs error {outcome['max_abs']:.3g}, max rel error {outcome['max_rel']:.3g}")
    relative = keep_repro(
        scratch, options.results, case.id, status=status, stage=stage, error=error
    )
    shutil.rmtree(scratch.parent, ignore_errors=True)
    with contextlib.suppress(OSError):
        scratch.parent.parent.rmdir()  # .scratch, when nothing else is in it
    if relative is None:
        print("no repro directory: the case stopped before it had inputs")
    else:
        directory = options.results / relative
        print(f"repro directory: {directory}\n  python {directory / 'repro.py'}")
    return 0 if verdict.item in ("pass", "xfail") else 1


if __name__ == "__main__":
    sys.exit(main())
