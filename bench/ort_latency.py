"""ONNX Runtime latency of the graphs we export against torch.onnx's, side by side in one process.

    python bench/ort_latency.py [--opset 23] [--runs 20] [--tier default] [--models a,b,...]

For each model of the zoo tier (transformers and torchvision families; synthetic cases are left
out unless named), export with ours and with ``torch.onnx.export(dynamo=True)`` at the same
opset, then time both graphs on the same inputs with onnxruntime's CPU provider, one intra-op
thread, at ORT_ENABLE_ALL and again at ORT_ENABLE_BASIC. Runs are interleaved (ours, theirs,
then theirs, ours, ...) so machine load and warm caches fall on both alike. Prints per model:
median milliseconds, the ratio ours / torch.onnx (below 1.0: ours runs faster), node counts;
then per level the median ratio over all models and over the transformers models alone (the
fusions target those), and the worst model.

    python bench/ort_latency.py --opset 20 --dump-optimized /tmp/ort-graphs

``--dump-optimized DIR`` also writes the graphs onnxruntime runs after its own fusions at
ORT_ENABLE_ALL (``DIR/<model>.ours.onnx`` and ``.theirs.onnx``) and prints the op types whose
counts differ, to see which of onnxruntime's fusions fire on one exporter's graph only.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402

from torch_onnx_conformance import (
    exporter,  # noqa: E402
    model_zoo,  # noqa: E402
)

LEVELS = {
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
}
BENCH_FAMILIES = ("transformers-", "torchvision-")


def _session(model_bytes: bytes, level, optimized_path: Path | None = None) -> ort.InferenceSession:
    options = ort.SessionOptions()
    if optimized_path is not None:
        options.optimized_model_filepath = str(optimized_path)
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.graph_optimization_level = level
    options.log_severity_level = 3
    return ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])


def _feeds(session: ort.InferenceSession, args, kwargs) -> dict[str, np.ndarray]:
    """Session inputs from the model's example inputs (flattened tensors, in order)."""
    tensors = [
        leaf
        for leaf in torch.utils._pytree.tree_leaves((args, kwargs))
        if isinstance(leaf, torch.Tensor)
    ]
    names = [i.name for i in session.get_inputs()]
    if len(names) != len(tensors):
        raise RuntimeError(f"graph takes {len(names)} inputs, the example has {len(tensors)}")
    return {name: t.detach().cpu().numpy() for name, t in zip(names, tensors)}


def _time(session, feeds) -> float:
    start = time.perf_counter()
    session.run(None, feeds)
    return time.perf_counter() - start


def _exports(case, opset: int):
    module, args, kwargs = case.build()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = exporter.export(module, args, kwargs=kwargs, opset_version=opset)
        try:
            theirs = torch.onnx.export(
                module, args, kwargs=kwargs, dynamo=True, opset_version=opset, verbose=False
            )
        except Exception as error:  # nothing to compare against: say whose export failed
            raise RuntimeError(f"torch.onnx cannot export it: {error}") from error
    return args, kwargs, ours.model_proto, theirs.model_proto


def _op_counts(path: Path) -> collections.Counter:
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    return collections.Counter(
        f"{node.domain}.{node.op_type}" if node.domain else node.op_type for node in graph.node
    )


def dump_optimized(name: str, ours, theirs, directory: Path) -> str:
    """Writes both graphs as onnxruntime optimizes them at ORT_ENABLE_ALL; returns the op types
    whose counts differ, as ``op ours/theirs``."""
    directory.mkdir(parents=True, exist_ok=True)
    stem = name.replace("/", "_")
    counts = []
    for side, proto in (("ours", ours), ("theirs", theirs)):
        path = directory / f"{stem}.{side}.onnx"
        _session(proto.SerializeToString(), LEVELS["all"], optimized_path=path)
        counts.append(_op_counts(path))
    differing = sorted(
        (op, counts[0][op], counts[1][op])
        for op in counts[0].keys() | counts[1].keys()
        if counts[0][op] != counts[1][op]
    )
    return ", ".join(f"{op} {a}/{b}" for op, a, b in differing) or "same op counts"


def bench_case(case, opset: int, runs: int, dump: Path | None = None) -> dict:
    args, kwargs, ours, theirs = _exports(case, opset)
    row = {"nodes": (len(ours.graph.node), len(theirs.graph.node))}
    if dump is not None:
        row["optimized"] = dump_optimized(case.name, ours, theirs, dump)
    for level_name, level in LEVELS.items():
        sessions = [_session(proto.SerializeToString(), level) for proto in (ours, theirs)]
        feeds = [_feeds(s, args, kwargs) for s in sessions]
        for session, feed in zip(sessions, feeds):  # warm-up: allocations, kernel selection
            for _ in range(3):
                session.run(None, feed)
        times = ([], [])
        for run in range(runs):
            # Who goes first alternates: the second of a pair finds the caches the first warmed.
            for side in (0, 1) if run % 2 == 0 else (1, 0):
                times[side].append(_time(sessions[side], feeds[side]))
        row[level_name] = tuple(statistics.median(t) for t in times)
    return row


def summary_lines(level: str, by_model: dict[str, float]) -> list[str]:
    """The median ratio over all models and over the transformers models (the ones the fused
    ops are for), and the worst model, at one optimisation level."""
    lines = []
    groups = (
        ("all models", by_model),
        ("transformers", {k: v for k, v in by_model.items() if k.startswith("transformers/")}),
    )
    for label, group in groups:
        if group:
            lines.append(
                f"median ratio ours/torch.onnx at {level}, {label}: "
                f"{statistics.median(group.values()):.2f} over {len(group)} models"
            )
    if by_model:
        worst = max(by_model, key=by_model.get)
        lines.append(f"worst model at {level}: {worst} {by_model[worst]:.2f}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--opset", type=int, default=23)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--tier", default="default", choices=model_zoo.TIERS)
    parser.add_argument("--models", default="", help="comma-separated zoo case names")
    parser.add_argument(
        "--dump-optimized",
        type=Path,
        metavar="DIR",
        help="write onnxruntime's optimized graphs (ORT_ENABLE_ALL) of both exporters here",
    )
    options = parser.parse_args()
    if options.models:
        cases = [model_zoo.get(name) for name in options.models.split(",")]
    else:
        cases = [
            case for case in model_zoo.cases(options.tier) if case.family.startswith(BENCH_FAMILIES)
        ]
    print(
        f"torch {torch.__version__}, onnxruntime {ort.__version__}, opset {options.opset}, "
        f"1 intra-op thread, {options.runs} interleaved runs, median ms; "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"{'model':32s} {'ours':>8s} {'theirs':>8s} {'ratio':>6s} "
        f"{'ours':>8s} {'theirs':>8s} {'ratio':>6s}  nodes ours/theirs"
    )
    print(f"{'':32s} {'--- ORT_ENABLE_ALL ---':>24s} {'--- ORT_ENABLE_BASIC ---':>24s}")
    ratios = {name: {} for name in LEVELS}
    for case in cases:
        try:
            row = bench_case(case, options.opset, options.runs, options.dump_optimized)
        except Exception as error:  # one model failing must not hide the others' figures
            first_line = next(iter(str(error).strip().splitlines()), "")
            print(f"{case.name:32s} skipped: {type(error).__name__}: {first_line[:120]}")
            continue
        cells = []
        for name in LEVELS:
            mine, other = row[name]
            ratios[name][case.name] = mine / other
            cells.append(f"{mine * 1e3:8.2f} {other * 1e3:8.2f} {mine / other:6.2f}")
        print(f"{case.name:32s} {' '.join(cells)}  {row['nodes'][0]}/{row['nodes'][1]}", flush=True)
        if "optimized" in row:
            print(f"{'':32s} after ORT_ENABLE_ALL, ours/theirs: {row['optimized']}", flush=True)
    for name, by_model in ratios.items():
        for line in summary_lines(f"ORT_ENABLE_{name.upper()}", by_model):
            print(line)
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
