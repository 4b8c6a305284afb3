"""What the exporter makes of each zoo model: node count and op-type histogram (issue 28).

    python bench/graph_census.py [--tier default] [--models a,b] [--opset N]
                                 [--shapes static|dynamic] [--save census.json]
                                 [--against census.json]

One export per zoo case of the tier (default options, or at ``--opset``, or with the case's
dynamic shapes). Prints per model the node count, the initializer count and bytes, and the
op-type histogram. ``--save`` writes the census as JSON, with a digest of each graph's
structure (ops, attributes, value names, dtypes and shapes; not the weights' data);
``--against`` compares with a saved one (say, from main before a change to the optimizer) and
lists, per model, whether the graph is identical, else its node count and every op type whose
count changed. Exit status 1 when any model's node count grew or a model that exported before
no longer does: a speed change to the exporter must not change what it exports.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def census(case, opset: int | None = None, dynamic: bool = False) -> dict:
    """One export of ``case``: its node count, op-type histogram and initializers."""
    import onnx_ir as ir

    from torch_onnx_conformance import exporter

    module, args, kwargs = case.build()
    shapes = case.export_dynamic_shapes() if dynamic else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = exporter.export(
            module, args, kwargs=kwargs, opset_version=opset, dynamic_shapes=shapes
        )
    graph = program.model.graph
    ops = collections.Counter()
    nodes = 0
    for node in ir.traversal.RecursiveGraphIterator(graph):
        nodes += 1
        ops[f"{node.domain}::{node.op_type}" if node.domain else node.op_type] += 1
    sizes = [v.const_value.nbytes for v in graph.initializers.values() if v.const_value is not None]
    return {
        "digest": _digest(program.model),
        "nodes": nodes,
        "initializers": len(graph.initializers),
        "initializer_bytes": sum(sizes),
        "ops": dict(sorted(ops.items())),
    }


def _digest(model) -> str:
    """A hash of the graph's structure: every node's op, attributes, input and output names,
    dtypes and shapes, in order, and every initializer's name, dtype and shape (not its data:
    the zoo's weights are drawn afresh per build)."""
    import hashlib

    import onnx_ir as ir

    parts = []
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        attributes = sorted(
            (
                name,
                "graph"
                if attr.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
                else repr(attr.value),
            )
            for name, attr in node.attributes.items()
        )
        values = [
            (v.name, str(v.dtype), str(v.shape)) if v is not None else None
            for v in (*node.inputs, *node.outputs)
        ]
        parts.append(repr((node.domain, node.op_type, attributes, values)))
    for name, value in model.graph.initializers.items():
        parts.append(repr((name, str(value.dtype), str(value.shape))))
    for value in (*model.graph.inputs, *model.graph.outputs):
        parts.append(repr((value.name, str(value.dtype), str(value.shape))))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _compare(before: dict, after: dict) -> bool:
    """Print what changed per model; whether nothing grew and nothing stopped exporting."""
    ok = True
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name), after.get(name)
        if old is None or new is None:
            print(f"{name:42s} only {'after' if old is None else 'before'}")
            continue
        if "error" in new and "error" not in old:
            print(f"{name:42s} exported before, fails now: {new['error']}")
            ok = False
            continue
        if "error" in new or "error" in old:
            print(f"{name:42s} failed before {'and after' if 'error' in new else ', exports now'}")
            continue
        changed = {
            op: (old["ops"].get(op, 0), new["ops"].get(op, 0))
            for op in sorted(set(old["ops"]) | set(new["ops"]))
            if old["ops"].get(op, 0) != new["ops"].get(op, 0)
        }
        grew = new["nodes"] > old["nodes"]
        ok &= not grew
        mark = "GREW" if grew else ("changed" if changed else "same ops")
        if old.get("digest") and old.get("digest") == new.get("digest"):
            mark = "identical"
        weights = ""
        if (old["initializers"], old["initializer_bytes"]) != (
            new["initializers"],
            new["initializer_bytes"],
        ):
            weights = (
                f" initializers {old['initializers']}->{new['initializers']} "
                f"({old['initializer_bytes']}->{new['initializer_bytes']} bytes)"
            )
        detail = " ".join(f"{op} {a}->{b}" for op, (a, b) in changed.items())
        print(f"{name:42s} nodes {old['nodes']:5d} -> {new['nodes']:5d} {mark}{weights} {detail}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tier", default="default")
    parser.add_argument("--models", default="", help="comma-separated zoo case names")
    parser.add_argument("--opset", type=int, help="the opset to export at (the exporter's default)")
    parser.add_argument("--shapes", default="static", choices=("static", "dynamic"))
    parser.add_argument("--save", type=Path, help="write the census here as JSON")
    parser.add_argument("--against", type=Path, help="a saved census to compare with")
    options = parser.parse_args()

    from torch_onnx_conformance import model_zoo

    if options.models:
        cases = [model_zoo.get(name) for name in options.models.split(",")]
    else:
        cases = model_zoo.cases(options.tier)
    result: dict[str, dict] = {}
    for case in cases:
        try:
            result[case.name] = entry = census(case, options.opset, options.shapes == "dynamic")
        except Exception as error:  # noqa: BLE001 - a failing model is a line, not the end
            first_line = (str(error).strip().splitlines() or [""])[0][:100]
            result[case.name] = {"error": f"{type(error).__name__}: {first_line}"}
            print(f"{case.name:42s} failed: {result[case.name]['error']}", flush=True)
            continue
        histogram = " ".join(f"{op}:{n}" for op, n in entry["ops"].items())
        print(
            f"{case.name:42s} nodes {entry['nodes']:5d} initializers {entry['initializers']:4d} "
            f"({entry['initializer_bytes']} bytes) | {histogram}",
            flush=True,
        )
    if options.save:
        options.save.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    if options.against:
        print(f"\nagainst {options.against}:")
        if not _compare(json.loads(options.against.read_text()), result):
            print("node counts grew or a model stopped exporting")
            return 1
        print("no model's node count grew")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
