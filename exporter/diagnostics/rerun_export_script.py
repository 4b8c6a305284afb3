"""Re-run an export that failed before an ONNX model existed: python rerun_export.py

Needs torch and the exporter that failed. The program it was translating is rebuilt from its
``forward`` below (torch.export's graph, as Python) with its weights from weights.npz and its example
inputs from inputs.npz; both load with allow_pickle=False, so nothing in this folder is
unpickled. Custom ops the program calls must be registered first (import the library that
defines them). Exits 0 when the export now succeeds; otherwise the export's error propagates.
"""

import json
import math
import operator  # noqa: F401 - the program code may call operator.getitem
import pathlib
import sys

import numpy as np
import torch

import exporter

HERE = pathlib.Path(__file__).resolve().parent
CASE = json.loads((HERE / "case.json").read_text(encoding="utf-8"))
inf, nan = math.inf, math.nan  # how FX code spells non-finite constants

# The program's forward(self, *placeholders), written here when the repro is written.
# PROGRAM CODE


def load(name):
    with np.load(HERE / name, allow_pickle=False) as data:
        tensors = {key: torch.from_numpy(data[key].copy()) for key in data.files}
    for key in CASE.get("bfloat16", {}).get(name, []):
        tensors[key] = tensors[key].view(torch.bfloat16)
    return tensors


class RebuiltProgram(torch.nn.Module):
    """The failing program: weights as buffers, user inputs in the program's order."""

    def __init__(self):
        super().__init__()
        weights = load("weights.npz")
        self.slots = []
        for index, target in enumerate(CASE["placeholders"]):
            if target is None:
                self.slots.append(None)
                continue
            self.register_buffer(f"weight_{index}", weights[target])
            self.slots.append(f"weight_{index}")

    def forward(self, *user_inputs):
        remaining = iter(user_inputs)
        values = [next(remaining) if s is None else getattr(self, s) for s in self.slots]
        return globals()["forward"](self, *values)


def main():
    feeds = load("inputs.npz")
    inputs = tuple(feeds[name] for name in CASE["input_order"])
    print(f"case: {CASE.get('id', '?')}")
    print(f"recorded: {CASE.get('stage')}: {str(CASE.get('error', ''))[:500]}")
    exporter.export(RebuiltProgram().eval(), inputs)
    print("the export succeeds now")
    return 0


if __name__ == "__main__":
    sys.exit(main())
