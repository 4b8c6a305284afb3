"""One capture for every opset, measured without the harness around it: op cases run one after
the other in this process (``conformance.runner.run_case``, as a case process runs them) at one
opset, at several with the capture cache, and at several without it; CPU seconds of each.

    python bench/capture_reuse.py [--every 48] [--opsets 18 20 23 26] [--repeat 2]

Cases: the ops ``suite_throughput.py --every`` takes (in-place variants included), samples 0
and 1, float32, static and dynamic. The single opset is the exporter's default. ``suite_throughput.py --opsets`` measures
the same through whole conformance runs (with their fixed and per-row costs); this one shows
what a case process spends. The last line is the ratio several / one, with and without the
cache.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--every", type=int, default=48, help="take every N-th op (default 48)")
    parser.add_argument("--opsets", type=int, nargs="+", default=[18, 20, 23, 26])
    parser.add_argument("--repeat", type=int, default=2, help="rounds of the three runs")
    options = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    import torch

    from torch_onnx_conformance.conformance import exporters, op_cases
    from torch_onnx_conformance.conformance.runner import run_case
    from torch_onnx_conformance.exporter import DEFAULT_OPSET

    torch.set_num_threads(1)
    sys.path.insert(0, str(ROOT / "bench"))
    from suite_throughput import op_names, sample_ops

    names = sample_ops(op_names(), options.every)

    def cases(opsets):
        return [
            op_cases.OpCase(op, sample, "f32", shapes, opset, "cpu", "ours")
            for op in names
            for sample in (0, 1)
            for shapes in ("static", "dynamic")
            for opset in opsets
        ]

    scratch = Path(tempfile.mkdtemp(prefix="capture-reuse-"))

    def timed(label: str, opsets: list[int], cache_size: int) -> float:
        os.environ[exporters.CAPTURE_CACHE_ENV] = str(cache_size)
        exporters.capture_cache.cache_clear()
        chosen = cases(opsets)
        started = time.process_time()
        for case in chosen:
            run_case(case, scratch)
        seconds = time.process_time() - started
        print(f"{label:16s} {len(chosen):5d} cases {seconds:7.1f} CPU-s", flush=True)
        return seconds

    print(
        f"every {options.every}th op ({len(names)} ops), samples 0-1, static and dynamic; "
        f"load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    for case in cases([DEFAULT_OPSET])[:10]:  # warm: imports, first exports
        run_case(case, scratch)
    several = f"{len(options.opsets)} opsets"
    ratios = []
    for _ in range(options.repeat):
        one = timed(f"opset {DEFAULT_OPSET}", [DEFAULT_OPSET], exporters.DEFAULT_CAPTURE_CACHE)
        cached = timed(several, options.opsets, exporters.DEFAULT_CAPTURE_CACHE)
        uncached = timed(f"{several} uncached", options.opsets, 0)
        ratios.append((cached / one, uncached / one))
    print(
        f"{several} / 1 opset (CPU, per round): "
        + ", ".join(f"{c:.2f}x cached, {u:.2f}x uncached" for c, u in ratios)
        + f"; load average {os.getloadavg()[0]:.2f} (goal <= 1.6x)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
