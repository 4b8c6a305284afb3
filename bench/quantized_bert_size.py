"""onnxruntime CPU latency of a BERT in float and after torchao's int8 dynamic quantization, at a
size where the integer matmuls carry the time (the zoo's BERT, hidden 32, is too small for
that: bench/quantized_latency.py).

    python bench/quantized_bert_size.py [--hidden 384] [--layers 2] [--sequence 128] [--runs 40]

Builds ``transformers.BertModel`` from a config (random weights, nothing downloaded), quantizes
a copy with ``Int8DynamicActivationInt8WeightConfig`` (per-row int8 activations as
QuantizeLinear, int8 weights, MatMulInteger), exports both with ours, and times them on the
same input with one intra-op thread at ORT_ENABLE_ALL, interleaved, by the calling thread's CPU
time (see bench/quantized_latency.py). Prints the medians, float / int8, and the int8 graph's
largest difference from the int8 eager model beside the eager int8 model's own from float.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402
from quantized_latency import _session, _time  # noqa: E402

from torch_onnx_conformance import exporter  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=384)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--sequence", type=int, default=128)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--opset", type=int, default=21)
    options = parser.parse_args()
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        hidden_size=options.hidden,
        num_hidden_layers=options.layers,
        num_attention_heads=max(options.hidden // 64, 1),
        intermediate_size=4 * options.hidden,
        vocab_size=1000,
    )
    floating = BertModel(config).eval()
    quantized = copy.deepcopy(floating)
    quantize_(quantized, Int8DynamicActivationInt8WeightConfig())
    ids = torch.randint(0, 1000, (1, options.sequence))
    mask = torch.ones_like(ids)
    sessions = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for key, model in (("float", floating), ("int8", quantized)):
            program = exporter.export(
                model, (ids,), kwargs={"attention_mask": mask}, opset_version=options.opset
            )
            sessions[key] = _session(program.model_proto.SerializeToString(), 1)
    feeds = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
    feeds = {i.name: feeds[i.name] for i in sessions["float"].get_inputs()}
    cpu: dict[str, list[float]] = {key: [] for key in sessions}
    for run in range(options.runs + 1):
        for key in sessions if run % 2 else reversed(sessions):
            _, seconds = _time(sessions[key], feeds)
            if run:
                cpu[key].append(seconds)
    with torch.no_grad():
        eager_int8 = quantized(ids, attention_mask=mask).last_hidden_state.numpy()
        eager_float = floating(ids, attention_mask=mask).last_hidden_state.numpy()
    ours_int8 = sessions["int8"].run(None, feeds)[0]
    median = {key: statistics.median(values) * 1e3 for key, values in cpu.items()}
    print(
        f"onnxruntime {ort.__version__}, CPU, 1 thread, ORT_ENABLE_ALL, opset {options.opset}, "
        f"{options.runs} runs, load average {' '.join(f'{v:.1f}' for v in os.getloadavg())}"
    )
    print(
        f"BertModel hidden {options.hidden}, {options.layers} layers, sequence "
        f"{options.sequence}: float {median['float']:.2f} ms, int8 {median['int8']:.2f} ms "
        f"(cpu), float/int8 {median['float'] / median['int8']:.2f}x; int8 graph vs int8 eager "
        f"max |diff| {np.abs(ours_int8 - eager_int8).max():.4f} (int8 eager vs float eager "
        f"{np.abs(eager_int8 - eager_float).max():.4f})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
