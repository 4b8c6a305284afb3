"""Emit the GitHub Actions matrix for .github/workflows/conformance.yml.

The workflow's `plan` job runs this and feeds its JSON to `strategy.matrix`, so the opsets and
shard counts live here and nowhere else. GPU entries are planned only for the self-hosted runner
labels a repository names in its `CONFORMANCE_GPU_RUNNERS` variable (comma- or space-separated,
e.g. `gpu-a100, gpu-h100`): a fork or an adopter without GPU runners plans CPU entries only, so no
job waits for a runner that does not exist. Run it by hand to see the plan:

    python .ci/conformance_matrix.py                                 # cpu entries only
    python .ci/conformance_matrix.py --gpu-runners "gpu-a100 gpu-h100"  # plus cuda entries
    CONFORMANCE_GPU_RUNNERS=gpu-a100 python .ci/conformance_matrix.py
    python .ci/conformance_matrix.py --no-gpu                        # never cuda (fork pull requests)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

# The oldest opset the op library translates to, the newest onnxruntime runs, the default, and
# opsets where translations change (torch_onnx_conformance/exporter/ops/_opsets.py: 18 Col2Im/Bitwise, 21
# GroupNormalization, 23 Attention/RMSNormalization, 26 CumProd/BitCast); run others by hand.
OPSETS = (17, 18, 20, 21, 23, 26)
CPU_SHARDS = 4
GPU_SHARDS = 2
CPU_RUNNER = "ubuntu-latest"
GPU_RUNNERS_VARIABLE = "CONFORMANCE_GPU_RUNNERS"
# A runner label as GitHub accepts it; anything else in the variable is a typo worth stopping on.
_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def gpu_runner_labels(text: str | None) -> tuple[str, ...]:
    """The GPU runner labels named in ``text`` (comma- or space-separated), in order, once each."""
    labels: list[str] = []
    for label in re.split(r"[\s,]+", text or ""):
        if not label:
            continue
        if not _LABEL.match(label):
            raise ValueError(
                f"{GPU_RUNNERS_VARIABLE}: {label!r} is not a runner label (letters, digits, "
                "'.', '_' and '-'); name your self-hosted GPU runners' labels, e.g. 'gpu-a100'."
            )
        if label not in labels:
            labels.append(label)
    return tuple(labels)


def plan(*, gpu_labels: tuple[str, ...] = ()) -> list[dict]:
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
        for label in gpu_labels:
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
        "--gpu-runners",
        default=os.environ.get(GPU_RUNNERS_VARIABLE, ""),
        help=f"self-hosted GPU runner labels (default: ${GPU_RUNNERS_VARIABLE}, else none)",
    )
    parser.add_argument(
        "--no-gpu",
        action="store_true",
        help="leave out the self-hosted cuda entries (untrusted code must not reach them)",
    )
    args = parser.parse_args(argv)
    try:
        labels = () if args.no_gpu else gpu_runner_labels(args.gpu_runners)
    except ValueError as error:
        parser.error(str(error))
    matrix = json.dumps({"include": plan(gpu_labels=labels)})
    output = os.environ.get("GITHUB_OUTPUT")
    if output:
        with open(output, "a", encoding="utf-8") as stream:
            stream.write(f"matrix={matrix}\n")
    print(matrix)
    return 0


if __name__ == "__main__":
    sys.exit(main())
