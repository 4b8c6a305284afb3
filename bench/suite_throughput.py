"""Per-op suite throughput: the same op cases through the conformance harness with our exporter
and with torch.onnx's dynamo exporter, in cases per second.

    python bench/suite_throughput.py [--every 24] [--all] [--workers 1] [--out /tmp/suite-throughput]

By default a deterministic sample of the default op run: every ``--every``-th op name in sorted
order, with all of its default cases (samples, static and dynamic), so it finishes in minutes;
``--all`` runs the whole default op run. Each exporter is one ``python -m torch_onnx_conformance run`` of
``torch_onnx_conformance/conformance/test_ops.py`` with its rows and reports under ``--out`` (never the checkout's).

Prints per exporter: cases, wall time and cases/s of the whole run; the in-case time the result
rows record (CPU seconds of each case, and the wall seconds of its export); and the worker time
outside cases (the harness's overhead: interpreter and OpInfo start-up, collection, the case
processes, the reports; on a loaded machine also the time spent waiting for a CPU). Then the ratios ours / torch.onnx, in cases/s over the whole run
and over the in-case CPU time alone (the latter is steadier on a loaded machine).

    python bench/suite_throughput.py --opsets 18 20 23 26 [--every 24] [--uncached]

Instead compares our exporter's run of the same ops at several opsets with its run at one of
them alone (the default opset, 20, when listed), side by side: a case captures once for every opset (``exporter.CaptureCache``
in each case process), translates once for every opset that makes the same opset-dependent
choices (``exporter._translation_reuse``) and prepares once (its eager outputs and references,
``op_cases._prepare_shared``), so the goal is that 4 opsets cost at most 1.6x one. ``--uncached`` adds
the several-opset run with the capture cache off (``CONFORMANCE_CAPTURE_CACHE=0``). The last
line is the ratio, over the whole run's wall time and over the in-case CPU time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXPORTERS = {"ours": "ours", "torch.onnx": "torch-dynamo"}


def op_names() -> list[str]:
    """The op names of a default run (OpInfos and their in-place variants), sorted."""
    sys.path.insert(0, str(ROOT))
    from torch_onnx_conformance.conformance import op_cases

    names = set()
    for info in op_cases.op_db():
        names.add(op_cases.opinfo_name(info))
        if info.inplace_variant is not None:
            names.add(op_cases.inplace_name(info))
    return sorted(names)


def sample_ops(names: list[str], every: int) -> list[str]:
    """Every ``every``-th name, starting from the first: the same ops on every run."""
    return names[::every]


def read_rows(results: Path) -> list[dict]:
    rows = []
    for path in sorted(results.glob("*.jsonl")):
        with path.open() as lines:
            rows += [json.loads(line) for line in lines if line.strip()]
    return rows


def run_suite(
    exporter: str,
    ops: list[str] | None,
    workers: int,
    out: Path,
    opsets: list[int] = (),
    env: dict[str, str] | None = None,
) -> dict:
    """One conformance run of the op cases with ``exporter`` (at ``opsets``, by default the
    harness's); its wall time and rows."""
    results, reports = out / exporter / "results", out / exporter / "reports"
    for stale in (results, reports):  # rows of an earlier run would count again
        shutil.rmtree(stale, ignore_errors=True)
    command = [sys.executable, "-m", "torch_onnx_conformance", "run", "--exporter", exporter]
    command += ["--results", str(results), "--reports-out", str(reports)]
    for op in ops or ():
        command += ["--ops", op]
    for opset in opsets:
        command += ["--opset", str(opset)]
    command += ["-n", str(workers), "-q", "torch_onnx_conformance/conformance/test_ops.py"]
    if workers > 1:
        command += ["--dist", "worksteal"]
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    finished = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, env={**os.environ, **(env or {})}
    )
    wall = time.perf_counter() - started
    # 1: some case failed unexpectedly, which the conformance report is for; any row counts.
    if finished.returncode not in (0, 1):
        tail = (finished.stdout + finished.stderr)[-2000:]
        raise RuntimeError(f"{' '.join(command)} exited {finished.returncode}:\n{tail}")
    return {
        "rows": read_rows(results),
        "wall": wall,
        "load": (load_before, os.getloadavg()[0]),
    }


def summarize(run: dict, workers: int) -> dict:
    """Cases/s over the run, and how its worker time splits into in-case time and overhead."""
    rows = run["rows"]
    in_case_cpu = sum(row["extra"].get("cpu_s", 0.0) for row in rows)
    export_wall = sum(row.get("export_s") or 0.0 for row in rows)
    worker_time = run["wall"] * workers
    return {
        "cases": len(rows),
        "passed": sum(row["status"] == "pass" for row in rows),
        "wall": run["wall"],
        "cases_per_s": len(rows) / run["wall"],
        "in_case_cpu": in_case_cpu,
        "cases_per_cpu_s": len(rows) / in_case_cpu if in_case_cpu else float("nan"),
        "export_wall": export_wall,
        "overhead": worker_time - in_case_cpu,
        "load": run["load"],
    }


def describe(label: str, s: dict) -> str:
    return (
        f"{label:10s} {s['cases']:5d} cases ({s['passed']} passed) in {s['wall']:7.1f} s: "
        f"{s['cases_per_s']:5.2f} cases/s; in cases {s['in_case_cpu']:7.1f} CPU-s "
        f"({s['cases_per_cpu_s']:5.2f} cases/CPU-s, export {s['export_wall']:6.1f} s wall), "
        f"outside cases {s['overhead']:6.1f} s; load {s['load'][0]:.2f} -> {s['load'][1]:.2f}"
    )


def per_worker(rows: list[dict]) -> str:
    """Cases and in-case CPU seconds per xdist worker: how evenly the run spread them."""
    workers: dict[str, list[float]] = {}
    for row in rows:
        counts = workers.setdefault(row["extra"].get("worker", "?"), [0, 0.0])
        counts[0] += 1
        counts[1] += row["extra"].get("cpu_s", 0.0)
    return ", ".join(f"{w} {n} cases {cpu:.1f} CPU-s" for w, (n, cpu) in sorted(workers.items()))


def compare_opsets(options, ops: list[str] | None, what: str) -> int:
    """Ours at all of ``--opsets`` against ours at one of them alone (the exporter's default
    opset when it is among them, else the first), in one invocation."""
    sys.path.insert(0, str(ROOT))
    from torch_onnx_conformance.exporter import DEFAULT_OPSET

    opsets = options.opsets
    single = DEFAULT_OPSET if DEFAULT_OPSET in opsets else opsets[0]
    print(
        f"{what}, default samples, static and dynamic, ours at opsets "
        f"{' '.join(map(str, opsets))} against opset {single} alone, {options.workers} "
        f"worker(s); load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    plans = {
        f"{len(opsets)} opsets": (opsets, {}),
        "1 opset": ([single], {}),
    }
    if options.uncached:
        plans[f"{len(opsets)} uncached"] = (opsets, {"CONFORMANCE_CAPTURE_CACHE": "0"})
    summaries = {}
    for label, (chosen, env) in plans.items():
        out = options.out / label.replace(" ", "-")
        run = run_suite("ours", ops, options.workers, out, chosen, env)
        summaries[label] = s = summarize(run, options.workers)
        print(describe(label, s), flush=True)
        if options.workers > 1:
            print(f"{'':10s} per worker: {per_worker(run['rows'])}", flush=True)
    many, one = summaries[f"{len(opsets)} opsets"], summaries["1 opset"]
    if options.uncached:
        uncached = summaries[f"{len(opsets)} uncached"]
        print(
            f"capture cache: {len(opsets)} opsets cost {uncached['wall'] / many['wall']:.2f}x "
            f"as much wall time without it, {uncached['in_case_cpu'] / many['in_case_cpu']:.2f}x "
            f"the in-case CPU time"
        )
    print(
        f"{len(opsets)} opsets / 1 opset: {many['wall'] / one['wall']:.2f}x wall over the "
        f"whole run, {many['in_case_cpu'] / one['in_case_cpu']:.2f}x in-case CPU time "
        f"({many['cases']} / {one['cases']} cases; goal <= 1.6x)"
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--every", type=int, default=24, help="take every N-th op (default 24)")
    parser.add_argument("--all", action="store_true", help="the whole default op run")
    parser.add_argument("--workers", type=int, default=1, help="pytest-xdist workers (default 1)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/suite-throughput"))
    parser.add_argument(
        "--opsets",
        type=int,
        nargs="+",
        help="ours at these opsets against ours at opset 20 (or the first) alone, e.g. 18 20 23 26",
    )
    parser.add_argument(
        "--uncached", action="store_true", help="with --opsets: also without the capture cache"
    )
    options = parser.parse_args()
    if options.out.resolve().is_relative_to(ROOT):
        parser.error("--out must be outside the checkout, so that no run touches its reports")
    if options.uncached and not options.opsets:
        parser.error("--uncached compares runs over several --opsets: give them")
    ops = None if options.all else sample_ops(op_names(), options.every)
    what = (
        "the whole default op run" if ops is None else f"every {options.every}th op: {len(ops)} ops"
    )
    if options.opsets:
        return compare_opsets(options, ops, what)
    print(
        f"{what}, default samples, static and dynamic, opset 20, {options.workers} worker(s); "
        f"load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    summaries = {}
    for label, exporter in EXPORTERS.items():
        summaries[label] = summarize(
            run_suite(exporter, ops, options.workers, options.out / exporter), options.workers
        )
        print(describe(label, summaries[label]), flush=True)
    ours, theirs = summaries["ours"], summaries["torch.onnx"]
    if ours["cases"] != theirs["cases"]:
        print(f"note: the runs recorded {ours['cases']} and {theirs['cases']} rows")
    print(
        f"throughput ours / torch.onnx: {ours['cases_per_s'] / theirs['cases_per_s']:.2f}x "
        f"over the whole run, {ours['cases_per_cpu_s'] / theirs['cases_per_cpu_s']:.2f}x "
        f"in-case CPU time (target >= 3x)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
