"""Regenerate ``kernels.json``, the kernel table the placement prediction reads.

Two sources, both onnxruntime's own lists of registered kernels:

* the CUDA provider's rows come from onnxruntime's generated ``docs/OperatorKernels.md``
  (written by its ``tools/python/gen_opkernel_doc.py`` from the kernel registrations of a CUDA
  build) at the release of the pinned onnxruntime;
* the CPU provider's rows come from the installed CPU wheel itself,
  ``onnxruntime.capi.onnxruntime_pybind11_state.get_all_opkernel_def()`` (a CPU wheel lists only
  CPU kernels; a GPU wheel cannot list CUDA kernels without a GPU). When the markdown also holds
  the CPU section, it is parsed too and the differences from the wheel are printed.

To regenerate for another onnxruntime version::

    git -C ONNXRUNTIME_CHECKOUT show vX.Y.Z:docs/OperatorKernels.md > /tmp/OperatorKernels.md
    python -m exporter.diagnostics.placement_data.generate /tmp/OperatorKernels.md \
        --source "microsoft/onnxruntime docs/OperatorKernels.md at vX.Y.Z (commit ...)"

with onnxruntime X.Y.Z (CPU wheel) installed, then commit ``kernels.json``. Only the ``ai.onnx``
domain is kept: the exporter emits no other domain.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
TABLE = HERE / "kernels.json"
OPEN_END = 2147483647  # onnxruntime's INT_MAX end of an open-ended kernel
DOMAINS = {"ai.onnx": ""}

_SECTION = re.compile(r"^## Operators implemented by (\w+)")
_DOMAIN = re.compile(r"^\|\*\*Operator Domain:\*\* \*([\w.]+)\*")
_CONSTRAINT = re.compile(r"\*\*([\w]+)\*\* = ([^<|]*)")


def parse_version(text: str) -> list[int | None]:
    """``13+`` -> [13, None] (open-ended), ``[6, 12]`` -> [6, 12], ``13`` -> [13, 13]."""
    text = text.strip()
    if text.endswith("+"):
        return [int(text[:-1]), None]
    if text.startswith("["):
        start, end = (int(x) for x in text.strip("[]").split(","))
        return [start, end]
    return [int(text), int(text)]


def parse_types(text: str) -> dict[str, list[str]]:
    """``**T** = tensor(float), tensor(int64)<br/> **T1** = ...`` -> {"T": [...], ...}."""
    return {
        name: [t.strip() for t in types.split(", ") if t.strip()]
        for name, types in _CONSTRAINT.findall(text)
    }


def parse_markdown(text: str) -> dict[str, dict[str, list[list]]]:
    """provider -> "op" -> [[start, end or None, {constraint: types}], ...] for ai.onnx."""
    table: dict[str, dict[str, list[list]]] = {}
    provider = domain = op = None
    for line in text.splitlines():
        if m := _SECTION.match(line):
            provider, domain, op = m.group(1), None, None
            continue
        if m := _DOMAIN.match(line):
            domain, op = m.group(1), None
            continue
        if provider is None or domain not in DOMAINS or not line.startswith("|"):
            continue
        cells = line.split("|")
        if len(cells) < 6 or cells[1].startswith("-") or cells[1].strip() == "Op Name":
            continue
        name, version, types = cells[1].strip(), cells[3].strip(), "|".join(cells[4:-1])
        if name:
            op = name
        if op is None or not version:
            continue
        table.setdefault(provider, {}).setdefault(op, []).append(
            [*parse_version(version), parse_types(types)]
        )
    return table


def wheel_cpu_kernels() -> dict[str, list[list]]:
    """The installed wheel's CPU kernels for ai.onnx, merged per (op, version range)."""
    from onnxruntime.capi import onnxruntime_pybind11_state as C

    merged: dict[tuple[str, int, int], dict[str, set[str]]] = {}
    for k in C.get_all_opkernel_def():
        if k.provider != "CPUExecutionProvider" or k.domain not in ("", "ai.onnx"):
            continue
        start, end = k.version_range
        types = merged.setdefault((k.op_name, start, end), {})
        for name, allowed in k.type_constraints.items():
            types.setdefault(name, set()).update(allowed)
    table: dict[str, list[list]] = {}
    for (op, start, end), types in sorted(merged.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
        table.setdefault(op, []).append(
            [
                start,
                None if end == OPEN_END else end,
                {n: sorted(t) for n, t in sorted(types.items())},
            ]
        )
    return table


def cpu_differences(doc: dict[str, list[list]], wheel: dict[str, list[list]]) -> list[str]:
    """Kernels (op, version range, types) that the markdown and the wheel list differently."""

    def keyed(table):
        return {
            (op, start, end): {n: sorted(t) for n, t in types.items()}
            for op, rows in table.items()
            for start, end, types in rows
        }

    a, b = keyed(doc), keyed(wheel)
    lines = [f"only in the markdown: {k}" for k in sorted(a.keys() - b.keys(), key=str)]
    lines += [f"only in the wheel: {k}" for k in sorted(b.keys() - a.keys(), key=str)]
    lines += [f"types differ: {k}" for k in sorted(a.keys() & b.keys(), key=str) if a[k] != b[k]]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("markdown", type=Path, help="onnxruntime's docs/OperatorKernels.md")
    parser.add_argument("--source", required=True, help="repo, path and tag/commit of it")
    parser.add_argument("--out", type=Path, default=TABLE)
    args = parser.parse_args(argv)
    import onnxruntime

    parsed = parse_markdown(args.markdown.read_text(encoding="utf-8"))
    if "CUDAExecutionProvider" not in parsed:
        print(f"{args.markdown}: no CUDAExecutionProvider section", file=sys.stderr)
        return 2
    wheel = wheel_cpu_kernels()
    if "CPUExecutionProvider" in parsed:
        for line in cpu_differences(parsed["CPUExecutionProvider"], wheel):
            print(f"CPU: {line}")
    table = {
        "about": (
            "Kernels registered by onnxruntime's providers, domain ai.onnx: op -> "
            "[start, end (null: open-ended), {type constraint: types}]. Generated by "
            "exporter/diagnostics/placement_data/generate.py; do not edit."
        ),
        "onnxruntime": onnxruntime.__version__,
        "sources": {
            "CUDAExecutionProvider": args.source,
            "CPUExecutionProvider": (
                f"onnxruntime {onnxruntime.__version__} CPU wheel, "
                "onnxruntime.capi.onnxruntime_pybind11_state.get_all_opkernel_def()"
            ),
        },
        "providers": {
            "CUDAExecutionProvider": parsed["CUDAExecutionProvider"],
            "CPUExecutionProvider": wheel,
        },
    }
    args.out.write_text(json.dumps(table, indent=None, separators=(",", ":")) + "\n")
    counts = {p: sum(len(r) for r in t.values()) for p, t in table["providers"].items()}
    print(f"wrote {args.out}: {counts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
