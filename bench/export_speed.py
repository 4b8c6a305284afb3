"""Export speed: ours against torch.onnx (dynamo and TorchScript), side by side, warm and cold.

    python bench/export_speed.py [--tier default] [--models a,b] [--shapes static,dynamic]
                                 [--repeats 3] [--warmup-once] [--no-cold | --cold-models a,b]

Models are the zoo's torchvision and transformers cases of the tier (synthetic ones only when
named). For each model and shape mode:

- warm: the median of ``--repeats`` exports in this process after one warm-up export, the
  exporters interleaved so machine load falls on all alike (``--warmup-once``: the warm-up
  runs before the first model only, which halves a whole-tier run on a loaded machine);
- cold: the first export in a fresh Python process, with the imports timed apart (what a CLI
  user pays once), and that process's peak RSS (``--cold-models``: for those models only).

TorchScript (``torch.onnx.export(dynamo=False)``) runs for static shapes, where it exports.
Ours gets a per-stage breakdown (capture, decomposition, translation, optimize, serialize).
Prints per-model ratios ours / torch.onnx dynamo and ours / TorchScript, and their medians;
``cap/dyn`` is ours' capture alone (torch.export, the call torch.onnx makes too) over torch.onnx's
whole export: the floor of ``/dyn`` for that model.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

EXPORTERS = ("ours", "dynamo", "torchscript")
STAGES = ("capture", "decomposition", "translation", "optimize", "serialize")
BENCH_FAMILIES = ("transformers-", "torchvision-")
WARM_TARGET = 0.15  # issue target: warm median ours/torch.onnx dynamo


def _export(name: str, case, shapes: str):
    """One export with ``name``; returns (seconds, ours' stage timings or {})."""
    import torch

    from torch_onnx_conformance import exporter

    module, args, kwargs = case.build()
    dynamic = case.export_dynamic_shapes() if shapes == "dynamic" else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        if name == "ours":
            program = exporter.export(module, args, kwargs=kwargs, dynamic_shapes=dynamic)
            serialize_start = time.perf_counter()
            program.model_proto.SerializeToString()
            end = time.perf_counter()
            stages = dict(program.record.timings)
            stages["serialize"] = end - serialize_start
            stages["nodes"] = len(program.model.graph)
            return end - start, stages
        if name == "dynamo":
            program = torch.onnx.export(
                module, args, kwargs=kwargs, dynamic_shapes=dynamic, dynamo=True, verbose=False
            )
            program.model_proto.SerializeToString()
            return time.perf_counter() - start, {}
        # TorchScript writes the serialized model itself.
        torch.onnx.export(module, args, io.BytesIO(), kwargs=kwargs or None, dynamo=False)
        return time.perf_counter() - start, {}


def _applies(name: str, shapes: str) -> bool:
    return not (name == "torchscript" and shapes == "dynamic")


def cold(name: str, case_name: str, shapes: str) -> dict:
    """The first export in a fresh process: imports and export timed apart, peak RSS."""
    completed = subprocess.run(
        [sys.executable, __file__, "--_cold", name, case_name, shapes],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
        cwd=REPO_ROOT,
    )
    lines = [line for line in completed.stdout.splitlines() if line.startswith("{")]
    if completed.returncode != 0 or not lines:
        tail = (completed.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": tail[:100]}
    return json.loads(lines[-1])


def _peak_rss_kib() -> float:
    """This process's own peak RSS. Linux keeps ``ru_maxrss`` across fork and exec, so in a
    child it is at least the bench's RSS when it forked; VmHWM is the new image's alone."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return float(line.split()[1])
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _cold_child(name: str, case_name: str, shapes: str) -> int:
    start = time.perf_counter()
    import torch  # noqa: F401

    import torch_onnx_conformance.exporter._api  # noqa: F401  (the package itself loads lazily)
    from torch_onnx_conformance import model_zoo

    case = model_zoo.get(case_name)
    imported = time.perf_counter()
    seconds, _ = _export(name, case, shapes)
    peak_kib = _peak_rss_kib()
    print(
        json.dumps(
            {"imports": imported - start, "export": seconds, "peak_rss_mib": peak_kib / 1024}
        )
    )
    return 0


def _load() -> str:
    return "/".join(f"{value:.2f}" for value in os.getloadavg()) + " (1/5/15 min)"


def _median(values):
    return statistics.median(values) if values else float("nan")


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] == "--_cold":
        return _cold_child(*sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tier", default="default")
    parser.add_argument("--models", default="", help="comma-separated zoo case names")
    parser.add_argument("--shapes", default="static,dynamic")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-cold", action="store_true", help="skip the fresh-process exports")
    parser.add_argument(
        "--cold-models",
        default="",
        help="comma-separated: the fresh-process exports only for these",
    )
    parser.add_argument(
        "--warmup-once", action="store_true", help="warm each exporter up on the first model only"
    )
    options = parser.parse_args()

    import torch

    from torch_onnx_conformance import model_zoo

    if options.models:
        cases = [model_zoo.get(name) for name in options.models.split(",")]
    else:
        cases = [c for c in model_zoo.cases(options.tier) if c.family.startswith(BENCH_FAMILIES)]
    shape_modes = options.shapes.split(",")
    cold_models = set(filter(None, options.cold_models.split(",")))
    print(
        f"torch {torch.__version__}; warm: median of {options.repeats} in one process; "
        f"cold: first export in a fresh process; seconds; load average {_load()}"
    )
    print(
        f"{'model':34s} {'shapes':7s} {'ours':>7s} {'dynamo':>7s} {'tscript':>7s} "
        f"{'/dyn':>5s} {'cap/dyn':>7s} {'/ts':>5s} | {'cold ours':>9s} {'cold ts':>7s} {'/ts':>5s} "
        f"{'imports':>7s} {'rss MiB':>7s} | " + " ".join(f"{s[:9]:>9s}" for s in STAGES)
    )
    warm_ratios, warm_ts_ratios, cold_ts_ratios, capture_floors = [], [], [], []
    warmed: set[str] = set()
    # Every model static first, then every model dynamic: a run cut short still has the
    # whole tier in one mode.
    for shapes in shape_modes:
        for case in cases:
            if shapes == "dynamic" and not case.dynamic_shapes:
                continue
            warm: dict[str, list[float]] = {name: [] for name in EXPORTERS}
            stage_rows: list[dict] = []
            failed: dict[str, str] = {}
            for name in EXPORTERS:  # warm-up: imports, caches, first-call compilation
                if not _applies(name, shapes) or (options.warmup_once and name in warmed):
                    continue
                warmed.add(name)
                try:
                    _export(name, case, shapes)
                except Exception as error:
                    failed[name] = f"{type(error).__name__}"
            for _ in range(options.repeats):
                for name in EXPORTERS:
                    if name in failed or not _applies(name, shapes):
                        continue
                    try:  # with --warmup-once, this is the first export of this model
                        seconds, stages = _export(name, case, shapes)
                    except Exception as error:
                        failed[name] = f"{type(error).__name__}"
                        continue
                    warm[name].append(seconds)
                    if stages:
                        stage_rows.append(stages)
            ours, dynamo, tscript = (_median(warm[name]) for name in EXPORTERS)
            if "ours" in failed:
                print(f"{case.name:34s} {shapes:7s} ours failed: {failed['ours']}")
                continue
            capture = _median([r.get("capture", 0.0) for r in stage_rows])
            if warm["dynamo"]:
                warm_ratios.append(ours / dynamo)
                capture_floors.append(capture / dynamo)
            if warm["torchscript"]:
                warm_ts_ratios.append(ours / tscript)
            cold_cells = f"{'':>9s} {'':>7s} {'':>5s} {'':>7s} {'':>7s}"
            if not options.no_cold and (not cold_models or case.name in cold_models):
                mine = cold("ours", case.name, shapes)
                theirs = (
                    cold("torchscript", case.name, shapes)
                    if warm["torchscript"]
                    else {"error": "n/a"}
                )
                if "error" not in mine:
                    ratio = mine["export"] / theirs["export"] if "error" not in theirs else None
                    if ratio is not None:
                        cold_ts_ratios.append(ratio)
                    cold_cells = (
                        f"{mine['export']:9.2f} "
                        + (f"{theirs['export']:7.2f} " if "error" not in theirs else f"{'-':>7s} ")
                        + (f"{ratio:5.2f} " if ratio is not None else f"{'-':>5s} ")
                        + f"{mine['imports']:7.2f} {mine['peak_rss_mib']:7.0f}"
                    )
            stage_text = " ".join(
                f"{_median([r.get(s, 0.0) for r in stage_rows]):9.3f}" for s in STAGES
            )

            def cell(value, width=7):
                return f"{value:{width}.2f}" if value == value else f"{'-':>{width}s}"

            print(
                f"{case.name:34s} {shapes:7s} {cell(ours)} {cell(dynamo)} {cell(tscript)} "
                f"{cell(ours / dynamo, 5)} {cell(capture / dynamo)} {cell(ours / tscript, 5)} | "
                f"{cold_cells} | "
                f"{stage_text}"
                + (
                    f"  (failed: {', '.join(f'{k} {v}' for k, v in failed.items())})"
                    if failed
                    else ""
                ),
                flush=True,
            )
    print(
        f"median warm ratio ours/torch.onnx dynamo: {_median(warm_ratios):.2f} over "
        f"{len(warm_ratios)} exports (target <= {WARM_TARGET})"
    )
    print(
        f"median ours' torch.export capture / torch.onnx dynamo: {_median(capture_floors):.2f} "
        f"(the ratio ours would reach if every stage after capture took no time: the same "
        f"torch.export call torch.onnx makes)"
    )
    print(
        f"median warm ratio ours/TorchScript: {_median(warm_ts_ratios):.2f} over "
        f"{len(warm_ts_ratios)} exports"
    )
    if not options.no_cold:
        print(
            f"median cold ratio ours/TorchScript (first export in a fresh process): "
            f"{_median(cold_ts_ratios):.2f} over {len(cold_ts_ratios)} exports (target <= 1.0)"
        )
    print(f"load average at the end: {_load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
