"""Regenerate ``kernels.json``, the kernel table the placement prediction reads.

Both providers' rows come from onnxruntime's own list of registered kernels,
``onnxruntime.capi.onnxruntime_pybind11_state.get_all_opkernel_def()``:

* the CUDA provider's rows from the **onnxruntime-gpu** wheel of the pinned version. That wheel
  lists its CUDA kernels only when its CUDA provider library loads and its provider object can be
  created, so ``dump`` runs on a machine with the CUDA 13 runtime, cuBLAS and a GPU (the GPU
  machine), or on any Linux machine with stand-in libraries (placement_data/README.md);
* the CPU provider's rows from the installed onnxruntime (the CPU wheel of constraints.txt),
  checked against the dump's CPU rows (the same release lists the same CPU kernels).

To regenerate for another onnxruntime version X.Y.Z::

    # 1. in a Python with onnxruntime-gpu==X.Y.Z installed (and its CUDA libraries loadable;
    #    the file runs alone, without this project or torch installed):
    python torch_onnx_conformance/exporter/diagnostics/placement_data/generate.py dump /tmp/kernels-gpu.json
    # 2. here, with onnxruntime==X.Y.Z (CPU wheel) installed:
    python -m torch_onnx_conformance.exporter.diagnostics.placement_data.generate build /tmp/kernels-gpu.json \
        --source "onnxruntime-gpu X.Y.Z wheel FILE (sha256 ...), get_all_opkernel_def()"

then commit ``kernels.json``. ``build`` also reads onnxruntime's generated
``docs/OperatorKernels.md`` (a release tag's copy) in place of a dump, when no GPU wheel can be
run. Only the ``ai.onnx`` domain is kept: the exporter emits no other domain.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
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


def kernel_defs() -> list[dict]:
    """The installed onnxruntime's registered kernels, every provider and domain, as plain
    records: {op, domain, provider, start, end, types: {constraint: [types]}}."""
    from onnxruntime.capi import onnxruntime_pybind11_state as C

    return [
        {
            "op": k.op_name,
            "domain": k.domain,
            "provider": k.provider,
            "start": k.version_range[0],
            "end": k.version_range[1],
            "types": {name: sorted(allowed) for name, allowed in k.type_constraints.items()},
        }
        for k in C.get_all_opkernel_def()
    ]


def merge_kernels(defs: list[dict], provider: str) -> dict[str, list[list]]:
    """``provider``'s ai.onnx kernels of ``kernel_defs()``, merged per (op, version range)
    (onnxruntime registers one kernel per type for typed kernels), newest range first."""
    merged: dict[tuple[str, int, int], dict[str, set[str]]] = {}
    for k in defs:
        if k["provider"] != provider or k["domain"] not in ("", *DOMAINS):
            continue
        types = merged.setdefault((k["op"], k["start"], k["end"]), {})
        for name, allowed in k["types"].items():
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


def wheel_cpu_kernels() -> dict[str, list[list]]:
    """The installed wheel's CPU kernels for ai.onnx, merged per (op, version range)."""
    return merge_kernels(kernel_defs(), "CPUExecutionProvider")


def read_source(path: Path) -> dict[str, dict[str, list[list]]]:
    """provider -> op -> rows, from a ``dump`` (.json) or an OperatorKernels.md."""
    text = path.read_text(encoding="utf-8")
    if path.suffix != ".json":
        return parse_markdown(text)
    defs = json.loads(text)["kernels"]
    providers = sorted({k["provider"] for k in defs})
    return {provider: merge_kernels(defs, provider) for provider in providers}


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


def build_commit() -> str:
    """The onnxruntime git commit the installed wheel was built from (its get_build_info())."""
    from onnxruntime.capi import onnxruntime_pybind11_state as C

    info = C.get_build_info()
    return info.split("git-commit-id=", 1)[1].split(",", 1)[0] if "git-commit-id=" in info else ""


def dump(out: Path) -> int:
    """Write the installed onnxruntime's kernel list (run it with onnxruntime-gpu)."""
    import onnxruntime

    defs = kernel_defs()
    counts = dict(sorted(Counter(k["provider"] for k in defs).items()))
    if "CUDAExecutionProvider" not in counts:
        print(
            f"onnxruntime {onnxruntime.__version__} at {onnxruntime.__file__} listed no CUDA "
            f"kernels ({counts}): run dump with onnxruntime-gpu whose CUDA provider library "
            "loads (see placement_data/README.md)",
            file=sys.stderr,
        )
        return 2
    record = {"onnxruntime": onnxruntime.__version__, "commit": build_commit(), "kernels": defs}
    out.write_text(json.dumps(record, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"wrote {out}: onnxruntime {onnxruntime.__version__}, kernels per provider {counts}")
    return 0


def build(source_path: Path, source: str, out: Path) -> int:
    """Write ``kernels.json`` from a dump or markdown (CUDA rows) and the installed CPU wheel."""
    import onnxruntime

    parsed = read_source(source_path)
    if "CUDAExecutionProvider" not in parsed:
        print(f"{source_path}: no CUDAExecutionProvider kernels", file=sys.stderr)
        return 2
    if source_path.suffix == ".json":
        dumped = json.loads(source_path.read_text(encoding="utf-8"))
        ours = build_commit()
        # One release: the same version, built from the same commit (a short id prefixes a long).
        if dumped["onnxruntime"] != onnxruntime.__version__ or not (
            dumped["commit"].startswith(ours) or ours.startswith(dumped["commit"])
        ):
            print(
                f"{source_path} lists onnxruntime {dumped['onnxruntime']}'s kernels (commit "
                f"{dumped['commit']}), the installed onnxruntime is {onnxruntime.__version__} "
                f"(commit {ours}): dump and build with one release",
                file=sys.stderr,
            )
            return 2
        source += f"; built from microsoft/onnxruntime commit {dumped['commit']}"
    wheel = wheel_cpu_kernels()
    differences = cpu_differences(parsed.get("CPUExecutionProvider", {}), wheel)
    for line in differences:
        print(f"CPU: {line}")
    table = {
        "about": (
            "Kernels registered by onnxruntime's providers, domain ai.onnx: op -> "
            "[start, end (null: open-ended), {type constraint: types}]. Generated by "
            "torch_onnx_conformance/exporter/diagnostics/placement_data/generate.py; do not edit."
        ),
        "onnxruntime": onnxruntime.__version__,
        "sources": {
            "CUDAExecutionProvider": source,
            "CPUExecutionProvider": (
                f"onnxruntime {onnxruntime.__version__} CPU wheel, "
                "onnxruntime.capi.onnxruntime_pybind11_state.get_all_opkernel_def()"
                + (f" (built from commit {build_commit()})" if build_commit() else "")
                + ("" if differences else f"; the same as the CPU rows of {source_path.name}")
            ),
        },
        "providers": {
            "CUDAExecutionProvider": parsed["CUDAExecutionProvider"],
            "CPUExecutionProvider": wheel,
        },
    }
    out.write_text(json.dumps(table, indent=None, separators=(",", ":")) + "\n")
    counts = {p: sum(len(r) for r in t.values()) for p, t in table["providers"].items()}
    print(f"wrote {out}: kernel rows (op, version range) per provider {counts}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("dump", help="write the installed (GPU) onnxruntime's kernel list")
    p.add_argument("out", type=Path)
    p = sub.add_parser("build", help="write kernels.json from a dump or OperatorKernels.md")
    p.add_argument("source_file", type=Path, help="a dump's .json or docs/OperatorKernels.md")
    p.add_argument("--source", required=True, help="what the file is: wheel or repo, tag, commit")
    p.add_argument("--out", type=Path, default=TABLE)
    args = parser.parse_args(argv)
    if args.command == "dump":
        return dump(args.out)
    return build(args.source_file, args.source, args.out)


if __name__ == "__main__":
    sys.exit(main())
