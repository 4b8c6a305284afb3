"""Emit the GitHub Actions matrix for .github/workflows/conformance.yml.

The workflow's `plan` job runs this and feeds its JSON to `strategy.matrix`, so the opsets, shard
counts and GPU runner labels live here and nowhere else. Run it by hand to see the plan:

    python .ci/conformance_matrix.py            # every entry, cpu and cuda
    python .ci/conformance_matrix.py --no-gpu   # cpu entries only (pull requests from forks)
"""

from __future__ import annotations

import argparse
import json
import os
import sys

OPSETS = (17, 18, 20, 23)
CPU_SHARDS = 4
GPU_SHARDS = 2
CPU_RUNNER = "ubuntu-latest"
# One self-hosted runner label per GPU kind: add a line here to add a GPU to the matrix.
# Shards are numbered from 0, as `--shard i/N` expects (0 <= i < N).
GPU_RUNNER_LABELS = (
    "gpu-a100",
    "gpu-h100",
)


def plan(*, include_gpu: bool) -> list[dict]:
    entries = []
    for opset in OPSETS:
        for shard in range(CPU_SHARDS):
            entries.append(
                {
                    "opset": opset,
                    "provider": "cpu",
                    "gpu": "none",
                    "runs-on": [CPU_RUNNER],
                    "shard": shard,
                    "shards": CPU_SHARDS,
                }
            )
        if not include_gpu:
            continue
        for label in GPU_RUNNER_LABELS:
            for shard in range(GPU_SHARDS):
                entries.append(
                    {
                        "opset": opset,
                        "provider": "cuda",
                        "gpu": label,
                        "runs-on": ["self-hosted", "linux", label],
                        "shard": shard,
                        "shards": GPU_SHARDS,
                    }
                )
    return entries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--no-gpu",
        action="store_true",
        help="leave out the self-hosted cuda entries (untrusted code must not reach them)",
    )
    args = parser.parse_args(argv)
    matrix = json.dumps({"include": plan(include_gpu=not args.no_gpu)})
    output = os.environ.get("GITHUB_OUTPUT")
    if output:
        with open(output, "a", encoding="utf-8") as stream:
            stream.write(f"matrix={matrix}\n")
    print(matrix)
    return 0


if __name__ == "__main__":
    sys.exit(main())
