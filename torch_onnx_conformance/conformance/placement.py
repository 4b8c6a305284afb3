"""``python -m torch_onnx_conformance placement MODEL.onnx --provider cuda``, and onnxruntime's real
placement recorded beside the prediction for the harness's provider rows.

The prediction itself is the exporter's diagnostic, ``torch_onnx_conformance/exporter/diagnostics/placement.py`` (its
kernel table and rules are documented there); this module is the harness side: the command line
over it, and reading where a real onnxruntime session placed each node
(``session.record_ep_graph_assignment_info``) to compare with it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import onnx

from torch_onnx_conformance.exporter.diagnostics.placement import PROVIDERS, Prediction, predict

#: Session config entry that makes onnxruntime keep each provider's nodes (1.31: PR #26781).
RECORD_ASSIGNMENT = "session.record_ep_graph_assignment_info"


def assignment(session) -> dict[str, list[list[str]]]:
    """onnxruntime's real placement of a session created with ``RECORD_ASSIGNMENT`` set:
    provider -> [[node name, op type], ...]."""
    placed: dict[str, list[list[str]]] = {}
    for subgraph in session.get_provider_graph_assignment_info():
        nodes = placed.setdefault(subgraph.ep_name, [])
        nodes += [[n.name, n.op_type] for n in subgraph.get_nodes()]
    return placed


def observe_in_process(model: str, provider: str) -> dict:
    """Create a session for ``model`` on ``provider`` (graph optimizations off, warnings
    logged, so onnxruntime's Memcpy count appears on stderr) and return its real placement."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 1
    options.add_session_config_entry(RECORD_ASSIGNMENT, "1")
    providers = [PROVIDERS[provider]] + (["CPUExecutionProvider"] if provider != "cpu" else [])
    if provider == "cuda" and hasattr(ort, "preload_dlls"):
        ort.preload_dlls()  # the CUDA and cuDNN libraries of the nvidia-* wheels, if present
    session = ort.InferenceSession(model, options, providers=providers)
    return {"providers": session.get_providers(), "nodes": assignment(session)}


def differences(prediction: Prediction, placed: dict[str, list[list[str]]]) -> list[str]:
    """Nodes of the main graph that onnxruntime put on CPU against the prediction, or the
    other way round (by name and op type; Memcpy nodes left out)."""
    real_cpu = Counter(
        (name, op)
        for name, op in placed.get("CPUExecutionProvider", [])
        if not op.startswith("Memcpy")
    )
    predicted_cpu = Counter(
        (n.name, n.op_type) for n in prediction.nodes if not n.graph and n.device == "cpu"
    )
    only_predicted, only_real = predicted_cpu - real_cpu, real_cpu - predicted_cpu
    # Nodes onnxruntime named itself (inlined function bodies) match by op type alone.
    by_op_predicted = Counter(op for (_, op), n in only_predicted.items() for _ in range(n))
    by_op_real = Counter(op for (_, op), n in only_real.items() for _ in range(n))
    return [
        f"predicted on CPU, ran elsewhere: {op} x{n}"
        for op, n in (by_op_predicted - by_op_real).items()
    ] + [
        f"ran on CPU, predicted elsewhere: {op} x{n}"
        for op, n in (by_op_real - by_op_predicted).items()
    ]


def record(model: onnx.ModelProto | str | Path, provider: str, session=None) -> dict:
    """The row record of a case: the prediction, and beside it the real placement when
    ``session`` was created with ``RECORD_ASSIGNMENT``, with their differences."""
    prediction = predict(model, provider)
    out = {"predicted": prediction.to_dict()}
    if session is None:
        return out
    try:
        placed = assignment(session)
    except Exception as exc:  # noqa: BLE001 - the case's run matters more than this record
        out["real_error"] = f"{type(exc).__name__}: {exc}"
        return out
    out["real_on_cpu"] = sum(
        1 for _, op in placed.get("CPUExecutionProvider", []) if not op.startswith("Memcpy")
    )
    out["real_memcpy_listed"] = sum(
        1 for nodes in placed.values() for _, op in nodes if op.startswith("Memcpy")
    )
    out["differences"] = differences(prediction, placed)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m torch_onnx_conformance placement",
        description="Predict which nodes onnxruntime runs on the provider and which on CPU, "
        "and the Memcpy nodes it adds (onnxruntime's rules at the pinned version, "
        "graph optimizations off). Last line: N nodes, K on CPU, M Memcpy.",
    )
    parser.add_argument("model", help="an .onnx file (external data is not read)")
    parser.add_argument("--provider", choices=sorted(PROVIDERS), default="cuda")
    parser.add_argument("--json", action="store_true", help="print the prediction as JSON")
    args = parser.parse_args(argv)
    try:
        prediction = predict(args.model, args.provider)
    except (FileNotFoundError, ValueError) as exc:
        print(f"placement: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(prediction.to_dict(), indent=1))
    print("\n".join(prediction.lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
