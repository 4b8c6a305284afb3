"""Export speed, ours against torch.onnx.export(dynamo=True), side by side in one process, warm.

    python bench/export_speed.py [--repeats 3] [--models resnet18,mobilenet_v3_small,bert,gpt2]

Prints a per-stage breakdown for ours (capture, decomposition, translation, optimize, serialize),
the per-model wall times and the ratio ours / torch.onnx, and the median ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import exporter  # noqa: E402


def _vision(name):
    import torchvision

    def build():
        model = getattr(torchvision.models, name)(weights=None).eval()
        return model, (torch.randn(1, 3, 224, 224),), {}

    return build


def _bert():
    from transformers import BertConfig, BertModel

    config = BertConfig(
        vocab_size=100,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
    )
    model = BertModel(config).eval()
    ids = torch.randint(0, 100, (2, 16))
    return model, (), {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=100, n_embd=64, n_layer=2, n_head=2, use_cache=False)
    model = GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, 100, (2, 16))
    return model, (), {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


MODELS = {
    "resnet18": _vision("resnet18"),
    "mobilenet_v3_small": _vision("mobilenet_v3_small"),
    "bert": _bert,
    "gpt2": _gpt2,
}


def ours(model, args, kwargs):
    start = time.perf_counter()
    program = exporter.export(model, args, kwargs=kwargs)
    serialize_start = time.perf_counter()
    program.model_proto.SerializeToString()
    end = time.perf_counter()
    stages = dict(program.record.timings)
    stages["serialize"] = end - serialize_start
    return end - start, stages


def theirs(model, args, kwargs):
    start = time.perf_counter()
    program = torch.onnx.export(model, args, kwargs=kwargs, dynamo=True, verbose=False)
    program.model_proto.SerializeToString()
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", default=",".join(MODELS))
    options = parser.parse_args()
    warnings.filterwarnings("ignore")
    stage_names = ("capture", "decomposition", "translation", "optimize", "serialize")
    ratios = []
    print(f"torch {torch.__version__}, {options.repeats} warm repeats, median wall seconds")
    header = f"{'model':20s} {'ours':>7s} {'torch.onnx':>10s} {'ratio':>6s}  " + "  ".join(
        f"{s:>13s}" for s in stage_names
    )
    print(header)
    for name in options.models.split(","):
        model, args, kwargs = MODELS[name]()
        ours(model, args, kwargs)  # warm-up: imports, caches, first-call compilation
        theirs(model, args, kwargs)
        our_times, their_times, stage_rows = [], [], []
        for _ in range(options.repeats):
            # Interleave the two so machine load affects both alike.
            t, stages = ours(model, args, kwargs)
            our_times.append(t)
            stage_rows.append(stages)
            their_times.append(theirs(model, args, kwargs))
        mine, other = statistics.median(our_times), statistics.median(their_times)
        ratios.append(mine / other)
        stage_text = "  ".join(
            f"{statistics.median(r.get(s, 0.0) for r in stage_rows):13.3f}" for s in stage_names
        )
        print(f"{name:20s} {mine:7.3f} {other:10.3f} {mine / other:6.2f}  {stage_text}", flush=True)
    print(f"median ratio ours/torch.onnx: {statistics.median(ratios):.2f} (target <= 0.40)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
