"""Ours' warm export against its floor, ``torch.export.export(strict=False)`` alone.

    python bench/export_vs_capture.py [--tier default] [--models a,b] [--shapes static]
                                      [--repeats 3]

Every export, ours and torch.onnx's, starts with a torch.export capture: the floor an exporter
built on it starts from. Per zoo model (the tier's torchvision and transformers cases), after one
warm-up of each: ``--repeats`` rounds of one export with ours and one capture with torch.export
on the same model and inputs, in one process, the order alternating per round so machine load
falls on both alike. Ours is ``exporter.export`` plus serializing its ``model_proto`` (as in
``export_speed.py``: the ModelProto is what a user gets); ``-ser`` is the ratio without the
serialization (``exporter.export`` alone, as issue 28 measured it). The floor of a model that
torch.export captures only with ours' capture patches (torchvision detection) runs with them.
Prints the medians, their ratio, and the median stage timings of ours from each export's
record (capture, decomposition, translation, optimize, serialize), the exported node count and
the optimize stage's ms per node. The last lines: the median
and the worst ratio over the models (issue 28's goals: median <= 1.15, worst <= 1.5), without
and with serialization; then ours' capture stage over torch.export alone (below 1: the
capture defers torch.export's graph-module code generation) and the ratio with ours' stages
after capture added to torch.export alone (ours' own cost, the capture counted at the floor);
then the load average at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from export_speed import BENCH_FAMILIES, STAGES, _export, _load, _median  # noqa: E402

GOALS = {"median": 1.15, "worst": 1.5}


def _capture(case, shapes: str) -> float:
    """torch.export.export(strict=False) alone, as ours' capture calls it first. A model that
    torch.export captures only with ours' model-side capture patches (torchvision detection)
    gets them, and the data-dependent rewrites they go with, here too."""
    import torch

    from torch_onnx_conformance.exporter._capture_patches import CAPTURE_PATCHES, resolve
    from torch_onnx_conformance.exporter._capture_rewrites import data_dependent_rewrites

    module, args, kwargs = case.build()
    dynamic = case.export_dynamic_shapes() if shapes == "dynamic" else None
    patches, _ = resolve(None, module)
    with warnings.catch_warnings(), contextlib.ExitStack() as stack:
        warnings.simplefilter("ignore")
        if patches:
            stack.enter_context(data_dependent_rewrites())
            for patch in patches:
                stack.enter_context(CAPTURE_PATCHES[patch]())
        start = time.perf_counter()
        torch.export.export(module, args, kwargs=kwargs, dynamic_shapes=dynamic, strict=False)
        return time.perf_counter() - start


def _round(case, shapes: str, ours_first: bool) -> tuple[float, dict, float]:
    if ours_first:
        ours, stages = _export("ours", case, shapes)
        return ours, stages, _capture(case, shapes)
    floor = _capture(case, shapes)
    ours, stages = _export("ours", case, shapes)
    return ours, stages, floor


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tier", default="default")
    parser.add_argument("--models", default="", help="comma-separated zoo case names")
    parser.add_argument("--shapes", default="static", choices=("static", "dynamic"))
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args()

    import torch

    from torch_onnx_conformance import model_zoo

    if options.models:
        cases = [model_zoo.get(name) for name in options.models.split(",")]
    else:
        cases = [c for c in model_zoo.cases(options.tier) if c.family.startswith(BENCH_FAMILIES)]
    print(
        f"torch {torch.__version__}; {options.shapes} shapes; warm: median of {options.repeats} "
        f"interleaved rounds in one process; seconds; load average {_load()}"
    )
    print(
        f"{'model':42s} {'ours':>7s} {'capture':>7s} {'ratio':>5s} {'-ser':>5s} | "
        + " ".join(f"{s[:9]:>9s}" for s in STAGES)
        + f" {'nodes':>6s} {'opt ms/node':>7s}"
    )
    ratios: dict[str, float] = {}
    unserialized: dict[str, float] = {}
    after_capture: dict[str, float] = {}
    capture_share: dict[str, float] = {}
    optimize_ms_per_node: list[float] = []
    for case in cases:
        try:
            _round(case, options.shapes, True)  # warm-up: imports, caches, first calls
            rows = [
                _round(case, options.shapes, ours_first=(i % 2 == 0))
                for i in range(options.repeats)
            ]
        except Exception as error:
            first_line = (str(error).strip().splitlines() or [""])[0][:100]
            print(f"{case.name:42s} failed: {type(error).__name__}: {first_line}")
            continue
        ours = _median([row[0] for row in rows])
        floor = _median([row[2] for row in rows])
        ratios[case.name] = ours / floor
        export_only = _median([row[0] - row[1].get("serialize", 0.0) for row in rows])
        unserialized[case.name] = export_only / floor
        own_capture = _median([row[1].get("capture", 0.0) for row in rows])
        capture_share[case.name] = own_capture / floor
        after_capture[case.name] = 1 + (export_only - own_capture) / floor
        stages = " ".join(f"{_median([row[1].get(s, 0.0) for row in rows]):9.3f}" for s in STAGES)
        nodes = rows[0][1].get("nodes", 0)
        optimize = _median([row[1].get("optimize", 0.0) for row in rows])
        optimize_ms_per_node.append(1e3 * optimize / max(nodes, 1))
        print(
            f"{case.name:42s} {ours:7.3f} {floor:7.3f} {ours / floor:5.2f} "
            f"{unserialized[case.name]:5.2f} | {stages} {nodes:6d} {optimize_ms_per_node[-1]:7.3f}",
            flush=True,
        )
    for label, table in (("", unserialized), (" with serialize", ratios)):
        if not table:
            continue
        worst = max(table, key=table.get)
        print(
            f"median ratio ours{label} / torch.export alone: {_median(list(table.values())):.2f} "
            f"over {len(table)} models (goal <= {GOALS['median']})"
        )
        print(
            f"worst ratio ours{label} / torch.export alone: {table[worst]:.2f} ({worst}) "
            f"(goal <= {GOALS['worst']})"
        )
    if after_capture:
        print(
            f"ours' capture stage / torch.export alone: median "
            f"{_median(list(capture_share.values())):.2f} (lazy graph-module code generation)"
        )
        worst = max(after_capture, key=after_capture.get)
        print(
            f"median ratio (torch.export alone + ours' stages after capture) / torch.export "
            f"alone: {_median(list(after_capture.values())):.2f}, worst "
            f"{after_capture[worst]:.2f} ({worst})"
        )
    if optimize_ms_per_node:
        print(
            f"optimize ms per exported node: median {_median(optimize_ms_per_node):.3f} over "
            f"{len(optimize_ms_per_node)} models"
        )
    print(f"load average at the end: {_load()}")
    return 0 if ratios else 1


if __name__ == "__main__":
    raise SystemExit(main())
