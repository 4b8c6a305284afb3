"""Bisection speed on resnet18: ours against torch.onnx's per-node verification, in one process.

    python bench/bisect_speed.py [--repeats 3] [--model resnet18] [--skip-torch-onnx]

Measures, warm, on the same model and input:
  * our outputs-only verification (``exporter.diagnostics.verify.verify_program`` without bisection: the
    onnx.checker full check, eager run, onnxruntime session and run, comparison);
  * our bisection (``exporter.diagnostics.bisect.bisect``: FX interpreter + ONE onnxruntime session exposing
    every FX node's value; it re-translates without optimisation when optimisation dropped names);
  * torch.onnx's outputs-only and per-node verification (``verify_onnx_program`` with
    ``compare_intermediates=False/True``) of a ``torch.onnx.export(..., dynamo=True)`` program.
Prints the times and the ratios: our bisection / our outputs-only (target <= 3) and torch.onnx
per-node / our bisection.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from torch_onnx_conformance import exporter  # noqa: E402
from torch_onnx_conformance.exporter.diagnostics import bisect, verify  # noqa: E402
from torch_onnx_conformance.exporter.diagnostics.compare import FALLBACK_TOLERANCE  # noqa: E402

TARGET_RATIO = 3.0


def _timed(fn: Callable[[], object], repeats: int) -> tuple[float, object]:
    """Median wall time of ``repeats`` runs after one warm-up run, and the last result."""
    result = fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18", help="a torchvision model name")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--skip-torch-onnx",
        action="store_true",
        help="leave out torch.onnx's per-node verification (about a minute)",
    )
    options = parser.parse_args()

    import torchvision

    torch.manual_seed(0)
    model = getattr(torchvision.models, options.model)(weights=None).eval()
    x = torch.randn(1, 3, 224, 224)
    try:
        program = exporter.export(model, (x,))
    except exporter.OnnxExporterError as exc:
        print(f"our exporter cannot export {options.model} yet, so the bench cannot run:\n{exc}")
        return 2
    n_fx = sum(1 for n in program.exported_program.graph.nodes if n.op == "call_function")
    print(
        f"{options.model}: {n_fx} FX call_function nodes, {len(program.model.graph)} ONNX "
        f"nodes (optimised); {options.repeats} timed repeats after a warm-up, median"
    )

    outputs_only, result = _timed(
        lambda: verify.verify_program(program, model, (x,), bisect_on_mismatch=False),
        options.repeats,
    )
    print(
        f"  ours  outputs-only verification     {outputs_only:8.2f} s  "
        f"({'match' if result.ok else 'MISMATCH: ' + result.summary()})"
    )
    rtol, atol = FALLBACK_TOLERANCE
    ours_bisect, found = _timed(
        lambda: bisect.bisect(
            program, (x,), rtol=rtol, atol=atol, registry=exporter.DEFAULT_REGISTRY
        ),
        options.repeats,
    )
    print(
        f"  ours  bisection (all nodes)         {ours_bisect:8.2f} s  "
        f"({found.compared}/{found.candidates} FX nodes compared on the {found.model_used}; "
        f"{'no divergence' if found.first is None else 'first divergent: ' + found.first.fx_node})"
    )
    ratio = ours_bisect / outputs_only
    verdict = "within" if ratio <= TARGET_RATIO else "OVER"
    print(
        f"  ratio ours bisection / ours outputs-only: {ratio:.2f}x ({verdict} the "
        f"{TARGET_RATIO:g}x target)"
    )

    if options.skip_torch_onnx:
        return 0
    import logging

    from torch.onnx.verification import verify_onnx_program

    # torch.onnx logs one warning per node over its (arbitrary) thresholds; keep the output ours.
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch_program = torch.onnx.export(model, (x,), dynamo=True, verbose=False)
        # One run each: the per-node comparison alone takes about a minute.
        torch_outputs, _ = _timed(lambda: verify_onnx_program(torch_program), 1)
        start = time.perf_counter()
        infos = verify_onnx_program(torch_program, compare_intermediates=True)
        torch_per_node = time.perf_counter() - start
    print(f"  torch.onnx outputs-only verification {torch_outputs:7.2f} s")
    print(
        f"  torch.onnx per-node verification    {torch_per_node:8.2f} s  "
        f"({len(infos)} values compared, one onnxruntime session each)"
    )
    print(f"  ratio torch.onnx per-node / ours bisection: {torch_per_node / ours_bisect:.1f}x")
    print(
        f"  ratio torch.onnx per-node / ours outputs-only: "
        f"{torch_per_node / outputs_only:.1f}x (ours bisection: {ratio:.2f}x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
