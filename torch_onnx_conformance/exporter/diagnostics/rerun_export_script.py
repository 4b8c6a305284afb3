"""Re-run an export that failed before an ONNX model existed: python rerun_export.py

Needs torch and the exporter that failed. The program it was translating is rebuilt from its
``forward`` below (torch.export's graph, as Python) with its weights from weights.npz and its example
inputs from inputs.npz; both load with allow_pickle=False, so nothing in this folder is
unpickled. The modules that define the custom ops the program calls (case.json "imports") are
imported first, so run it from the folder they import from (the current directory is searched,
as ``python -c`` would) or with their project on PYTHONPATH. Exits 0 when the
export now succeeds; otherwise the export's error propagates.
"""

import importlib
import json
import math
import operator  # noqa: F401 - the program code may call operator.getitem
import pathlib
import sys

import numpy as np
import torch

from torch_onnx_conformance import exporter

HERE = pathlib.Path(__file__).resolve().parent
CASE = json.loads((HERE / "case.json").read_text(encoding="utf-8"))
inf, nan = math.inf, math.nan  # how FX code spells non-finite constants

if CASE.get("imports"):
    sys.path.insert(1, str(pathlib.Path.cwd()))  # the user's project, when run from its root
for _module in CASE.get("imports", []):  # registers the custom ops the program calls
    try:
        importlib.import_module(_module)
    except ImportError as _error:
        sys.exit(
            f"rerun_export.py: cannot import {_module!r}, which defines custom ops the program "
            f"calls ({_error}). Run this script from the folder {_module!r} imports from, or "
            "with its project on PYTHONPATH."
        )

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
