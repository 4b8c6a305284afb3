"""How the optimize stage's cost grows with the graph (issue 28, item 2).

    python bench/optimize_scaling.py [--blocks 64,256,1024,4096] [--tier default] [--no-zoo]

A stack of N Linear+GELU residual blocks (3 ONNX nodes each), one export per N in this one
process: each stage's time from the export record (wall seconds), the optimize stage's CPU
seconds (``time.process_time`` around it: other processes on a loaded machine inflate the
wall time, not this), its ms per node of the exported graph, and the growth factor of the
optimize stage against the previous N (x4 blocks: 4.0 is linear). Then the optimize stage's
ms per node over the tier's zoo models, one export each, and their median. The load average
is printed at the start and the end.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from export_speed import STAGES, _load, _median  # noqa: E402

_STAGES = [stage for stage in STAGES if stage != "serialize"]


def _block_stack(blocks: int, width: int = 16):
    import torch

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(width, width)

        def forward(self, x):
            return x + torch.nn.functional.gelu(self.linear(x))

    return torch.nn.Sequential(*(Block() for _ in range(blocks))).eval(), (torch.randn(2, width),)


class _OptimizeClock:
    """Wraps the exporter's optimize stage to take its CPU time as well (the record holds
    wall times only)."""

    def __init__(self):
        from torch_onnx_conformance.exporter import _passes

        self._passes, self._optimize, self.cpu = _passes, _passes.optimize, 0.0

    def __enter__(self):
        def timed(*args, **kwargs):
            start = time.process_time()
            try:
                return self._optimize(*args, **kwargs)
            finally:
                self.cpu = time.process_time() - start

        self._passes.optimize = timed
        return self

    def __exit__(self, *_):
        self._passes.optimize = self._optimize


def _export(module, args, kwargs=None) -> tuple[dict, float, int]:
    """One export: (the record's stage timings, optimize CPU seconds, nodes exported)."""
    from torch_onnx_conformance import exporter

    with _OptimizeClock() as clock, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = exporter.export(module, args, kwargs=kwargs)
    return dict(program.record.timings), clock.cpu, len(program.model.graph)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", default="64,256,1024,4096")
    parser.add_argument("--tier", default="default")
    parser.add_argument("--no-zoo", action="store_true", help="the block stack only")
    options = parser.parse_args()
    print(f"load average at the start: {_load()}")

    module, args = _block_stack(2)
    _export(module, args)  # warm-up: imports (onnxscript loads with the first optimize)
    print(
        f"{'blocks':>6s} {'nodes':>6s} | "
        + " ".join(f"{s[:11]:>11s}" for s in _STAGES)
        + f" | {'opt cpu s':>9s} {'ms/node':>7s} {'cpu ms/node':>11s} {'growth':>6s} {'cpu growth':>10s}"
    )
    previous = None
    for blocks in (int(b) for b in options.blocks.split(",")):
        module, args = _block_stack(blocks)
        timings, cpu, nodes = _export(module, args)
        wall = timings.get("optimize", 0.0)
        growth = cpu_growth = ""
        if previous:
            growth = f"x{wall / previous[0]:.1f}"
            cpu_growth = f"x{cpu / previous[1]:.1f}"
        print(
            f"{blocks:6d} {nodes:6d} | "
            + " ".join(f"{timings.get(s, 0.0):11.3f}" for s in _STAGES)
            + f" | {cpu:9.3f} {1e3 * wall / nodes:7.3f} {1e3 * cpu / nodes:11.3f}"
            + f" {growth:>6s} {cpu_growth:>10s}",
            flush=True,
        )
        previous = (wall, cpu, blocks)
    if not options.no_zoo:
        _zoo(options.tier)
    print(f"load average at the end: {_load()}")
    return 0


def _zoo(tier: str) -> None:
    from torch_onnx_conformance import model_zoo

    print(
        f"\n{'zoo model (' + tier + ' tier)':42s} {'nodes':>6s} {'optimize s':>10s} {'cpu s':>7s} "
        f"{'ms/node':>7s} {'cpu ms/node':>11s}"
    )
    per_node: list[float] = []
    per_node_cpu: list[float] = []
    pooled = [0.0, 0.0, 0]  # optimize wall s, cpu s, nodes over all models
    for case in model_zoo.cases(tier):
        try:
            module, args, kwargs = case.build()
            timings, cpu, nodes = _export(module, args, kwargs)
        except Exception as error:
            first_line = (str(error).strip().splitlines() or [""])[0][:80]
            print(f"{case.name:42s} failed: {type(error).__name__}: {first_line}")
            continue
        wall = timings.get("optimize", 0.0)
        pooled[0], pooled[1], pooled[2] = pooled[0] + wall, pooled[1] + cpu, pooled[2] + nodes
        per_node.append(1e3 * wall / max(nodes, 1))
        per_node_cpu.append(1e3 * cpu / max(nodes, 1))
        print(
            f"{case.name:42s} {nodes:6d} {wall:10.3f} {cpu:7.3f} {per_node[-1]:7.3f} "
            f"{per_node_cpu[-1]:11.3f}",
            flush=True,
        )
    print(
        f"optimize ms per node over {len(per_node)} zoo models: median {_median(per_node):.3f} "
        f"(cpu {_median(per_node_cpu):.3f}); all models pooled: "
        f"{1e3 * pooled[0] / max(pooled[2], 1):.3f} (cpu {1e3 * pooled[1] / max(pooled[2], 1):.3f})"
    )


if __name__ == "__main__":
    raise SystemExit(main())
