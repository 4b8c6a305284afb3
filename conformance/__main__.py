"""Command line of the conformance suite.

``python -m conformance run [pytest args]``
    Runs ``pytest conformance`` on all cores (xdist, ``--dist load``), then builds the reports
    from the result rows with ``python -m reports build RESULTS --out reports/latest``, and exits
    with pytest's exit code. A run starts from empty result rows unless ``--resume`` is given.
    Every pytest option passes through, e.g. ``--exporter ours --exporter torch-dynamo``,
    ``--opset 18``, ``--ops 'nn.functional.*'``, ``--shard 0/4``, ``-n 4``.

``python -m conformance repro CASE_ID [--results DIR]``
    Re-runs one op or model case by id and rebuilds ``RESULTS/repros/<case>/`` (model.onnx,
    inputs, expected outputs, repro.py), whatever the case's outcome.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

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
    print(f"unknown command {command!r}; use 'run' or 'repro' (see --help)", file=sys.stderr)
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


def clear_rows(results: Path) -> None:
    """Start a fresh run: drop the rows and repros of the last one (the sample cache stays)."""
    if not results.is_dir():
        return
    for rows in results.glob("*.jsonl"):
        rows.unlink()
    for folder in ("repros", ".scratch", ".inflight"):
        shutil.rmtree(results / folder, ignore_errors=True)


def _is_test_path(arg: str) -> bool:
    """A positional pytest argument naming tests (not the value of an option like --results)."""
    if arg.startswith("-"):
        return False
    path = Path(arg.split("::")[0])
    if path.suffix == ".py":
        return path.exists()
    return path.is_dir() and (any(path.glob("test_*.py")) or (path / "conftest.py").exists())


def build_pytest_command(args: list[str], results: Path) -> list[str]:
    command = [sys.executable, "-m", "pytest"]
    if not any(_is_test_path(a) for a in args):
        command.append(str(Path(__file__).resolve().parent))
    if not _has_flag(args, "-n", "--numprocesses") and not any(
        a.startswith("-n") and a[2:].isdigit() for a in args
    ):
        command += ["-n", str(os.cpu_count() or 1), "--dist", "load"]
    if not _has_flag(args, "--max-worker-restart"):
        # A worker that dies costs its case (recorded as crash), never the run.
        command += ["--max-worker-restart", "1000"]
    if not _has_flag(args, "--junitxml", "--junit-xml"):
        command += [f"--junitxml={results / 'junit.xml'}", "-o", "junit_family=xunit1"]
    return command + args


def run(args: list[str]) -> int:
    args = list(args)
    reports_out = Path(_pop_option(args, "--reports-out") or DEFAULT_REPORTS_OUT)
    results = Path(_option_value(args, "--results") or "results")
    if "--resume" not in args:
        clear_rows(results)
    command = build_pytest_command(args, results)
    print("+ " + " ".join(command), flush=True)
    pytest_code = subprocess.call(command)
    report_command = [
        sys.executable,
        "-m",
        "reports",
        "build",
        str(results),
        "--out",
        str(reports_out),
    ]
    print("+ " + " ".join(report_command), flush=True)
    if not results.exists():
        print(f"no results directory {results}: no case ran, no report built", file=sys.stderr)
        return pytest_code
    report_code = subprocess.call(report_command)
    if report_code != 0:
        print(f"building the reports failed (exit code {report_code})", file=sys.stderr)
    return pytest_code if pytest_code != 0 else report_code


# --------------------------------------------------------------------------- repro


def repro(args: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m conformance repro",
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
        "--in-process",
        action="store_true",
        help="run in this process (for a debugger); a crash then ends this command",
    )
    options = parser.parse_args(args)

    from conformance.cases import parse_case_id
    from conformance.models_cases import is_model_id, parse_model_id
    from conformance.repro import keep_repro

    model = is_model_id(options.case_id)
    try:
        case = (parse_model_id if model else parse_case_id)(options.case_id)
    except ValueError as exc:
        parser.error(str(exc))
    scratch = options.results / ".scratch" / "repro" / "current"
    shutil.rmtree(scratch, ignore_errors=True)
    if options.in_process:
        if model:
            from conformance.models_runner import run_model_case

            outcome = run_model_case(case.id, scratch).to_dict()
        else:
            from conformance.runner import run_op_case

            outcome = run_op_case(case, scratch).to_dict()
    else:
        if model:
            from conformance.models_isolation import ForkingModelChild as Child
        else:
            from conformance.isolation import CaseChild as Child

        child = Child()
        try:
            result = child.run(case.id, scratch, options.timeout)
        finally:
            child.close()
        if result.status == "done":
            outcome = result.outcome
        else:
            outcome = {"status": result.status, "stage": result.stage, "error": result.detail}
    status, stage, error = outcome["status"], outcome.get("stage"), outcome.get("error")
    print(f"{case.id}: {status}" + (f" at stage {stage}" if stage else ""))
    if error:
        print(error)
    if outcome.get("max_abs") is not None:
        print(f"max abs error {outcome['max_abs']:.3g}, max rel error {outcome['max_rel']:.3g}")
    relative = keep_repro(
        scratch, options.results, case.id, status=status, stage=stage, error=error
    )
    if relative is None:
        print("no repro directory: the case stopped before it had inputs")
    else:
        directory = options.results / relative
        print(f"repro directory: {directory}\n  python {directory / 'repro.py'}")
    return 0 if status == "pass" else 1


if __name__ == "__main__":
    sys.exit(main())
