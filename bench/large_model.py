"""A model larger than RAM: LLaMA-shaped export on the meta device, weights streamed from disk.

    python bench/large_model.py [--layers 32] [--hidden 4096] [--intermediate 11008]
                                [--heads 32] [--kv-heads 32] [--vocab 32000] [--dtype f16]
                                [--weights /tmp/llama7b] [--out /tmp/llama7b-onnx]
                                [--slice-layers 2] [--keep]

The defaults are LLaMA-2-7B's shape (about 6.7B parameters, 13.5 GB in f16). Steps:

1. seeded weights go to a safetensors folder (``--weights``), in shards, by a child process
   so this one's peak memory is the exporter's; a folder already holding weights of the same
   shape, dtype and seed is reused;
2. the model is built on the meta device and exported with the optimizer on (no weight is
   ever in memory), its rotary ``inv_freq`` computed by the model's own initialisation;
3. ``save(..., weights=folder)`` streams the weights one tensor at a time into the model's
   ``.data`` file;
4. a ``--slice-layers`` model (the same weights, its first layers) is exported the same way,
   loaded in onnxruntime and compared with eager PyTorch holding those weights.

Prints export time, save time and the peak RSS of this process after each step. The saved
model is deleted at the end unless ``--keep`` (it takes as much disk as the weights).
Measured with the defaults (f16, 13.48 GB of weights) on a 2-core, 24 GiB machine: export
57 s with peak RSS 0.85 GiB; save 32 s streaming 13.48 GB, peak RSS 1.10 GiB; the 2-layer
slice matched eager at 2.0e-3 of the largest logit, peak RSS 5.1 GiB (eager and onnxruntime
holding the slice). Develop at a small size, e.g. ``--layers 2 --hidden 512 --intermediate 1024 --heads 8
--kv-heads 8 --vocab 1000``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

DTYPES = {"f16": "float16", "bf16": "bfloat16"}
#: Written last into the weights folder: its presence means the folder is complete.
MARKER = "weights.json"
SHARD_BYTES = 1 << 30


def _config(args: argparse.Namespace, layers: int | None = None):
    import torch
    import transformers

    return transformers.LlamaConfig(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers if layers is None else layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        dtype=getattr(torch, DTYPES[args.dtype]),
    )


def _meta_model(args: argparse.Namespace, layers: int | None = None):
    import torch
    import transformers

    config = _config(args, layers)
    with torch.device("meta"):
        # built in the weights' dtype; buffers the model computes in float32 (rotary
        # inv_freq) stay float32, as when it is loaded with from_pretrained
        model = transformers.LlamaForCausalLM._from_config(config, dtype=config.dtype)
    return model.eval()


def _shape_record(args: argparse.Namespace) -> dict:
    fields = ("layers", "hidden", "intermediate", "heads", "kv_heads", "vocab", "dtype", "seed")
    return {field: getattr(args, field) for field in fields}


def _rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def write_weights(args: argparse.Namespace) -> None:
    """Seeded weights, tensor by tensor, into shards of about 1 GiB (run in a child)."""
    import safetensors.torch
    import torch

    folder = Path(args.weights)
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("*.safetensors"):
        stale.unlink()
    dtype = getattr(torch, DTYPES[args.dtype])
    shard: dict[str, torch.Tensor] = {}
    shard_bytes, index = 0, 0

    def flush() -> None:
        nonlocal shard, shard_bytes, index
        if shard:
            index += 1
            safetensors.torch.save_file(shard, str(folder / f"model-{index:05d}.safetensors"))
            shard, shard_bytes = {}, 0

    for number, (name, meta) in enumerate(_meta_model(args).state_dict().items()):
        generator = torch.Generator().manual_seed(args.seed * 1_000_003 + number)
        if name.endswith("norm.weight"):
            tensor = 1.0 + 0.1 * torch.randn(meta.shape, generator=generator)
        else:
            tensor = 0.02 * torch.randn(meta.shape, generator=generator)
        shard[name] = tensor.to(dtype)
        shard_bytes += shard[name].nbytes
        if shard_bytes >= SHARD_BYTES:
            flush()
    flush()
    (folder / MARKER).write_text(json.dumps(_shape_record(args)))


def _ensure_weights(args: argparse.Namespace) -> None:
    marker = Path(args.weights) / MARKER
    if marker.is_file() and json.loads(marker.read_text()) == _shape_record(args):
        print(f"weights: reusing {args.weights}")
        return
    marker.unlink(missing_ok=True)
    start = time.perf_counter()
    command = [sys.executable, __file__, "--write-weights-only", *sys.argv[1:]]
    subprocess.run(command, check=True)
    size = sum(p.stat().st_size for p in Path(args.weights).glob("*.safetensors"))
    print(f"weights: wrote {size / 1e9:.2f} GB in {time.perf_counter() - start:.1f} s")


def _export(args: argparse.Namespace, layers: int | None = None):
    import torch

    from torch_onnx_conformance import exporter

    model = _meta_model(args, layers)
    input_ids = torch.zeros(1, args.tokens, dtype=torch.long, device="meta")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the meta-device warning: weights come at save
        return exporter.export(
            model,
            (),
            kwargs={"input_ids": input_ids, "use_cache": False},
            dynamic_shapes={"input_ids": {1: "sequence"}, "use_cache": None},
        )


def _check_slice(args: argparse.Namespace, out: Path) -> float:
    """The first ``--slice-layers`` layers: ONNX in onnxruntime against eager, max |diff|
    relative to the largest logit."""
    import onnxruntime as ort
    import safetensors
    import torch

    program = _export(args, args.slice_layers)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the other layers' weights are not the slice's
        program.apply_weights(args.weights, strict=False)
    path = out / "slice.onnx"
    program.save(path, external_data=True)
    del program

    eager = _meta_model(args, args.slice_layers)
    wanted = set(eager.state_dict())
    weights = {}
    for file in sorted(Path(args.weights).glob("*.safetensors")):
        with safetensors.safe_open(str(file), framework="pt") as handle:
            weights.update({n: handle.get_tensor(n) for n in handle.keys() if n in wanted})
    missing, _ = eager.load_state_dict(weights, strict=False, assign=True)
    if missing:
        raise SystemExit(f"the weights folder lacks {missing[:5]}")
    eager.model.rotary_emb = type(eager.model.rotary_emb)(eager.config)  # computed on CPU
    input_ids = torch.randint(
        0, args.vocab, (1, args.tokens + 3), generator=torch.Generator().manual_seed(args.seed)
    )
    with torch.no_grad():
        expected = eager(input_ids=input_ids, use_cache=False).logits.float()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (logits,) = session.run(None, {session.get_inputs()[0].name: input_ids.numpy()})
    got = torch.from_numpy(logits).float()
    return float((got - expected).abs().max() / expected.abs().max())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--intermediate", type=int, default=11008)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="f16")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tokens", type=int, default=16, help="sequence length at export")
    parser.add_argument("--weights", default="/tmp/llama7b", help="safetensors folder")
    parser.add_argument("--out", default="/tmp/llama7b-onnx", help="folder for the ONNX files")
    parser.add_argument("--slice-layers", type=int, default=2)
    parser.add_argument("--tolerance", type=float, default=2e-2, help="relative, for the slice")
    parser.add_argument("--keep", action="store_true", help="keep the saved ONNX model")
    parser.add_argument("--write-weights-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.write_weights_only:
        write_weights(args)
        return 0

    _ensure_weights(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    program = _export(args)
    exported = time.perf_counter() - start
    stages = ", ".join(f"{k} {v:.1f} s" for k, v in program.record.timings.items())
    print(f"export: {exported:.1f} s ({stages}); peak RSS so far {_rss_gib():.2f} GiB")
    reason = program.record.decomposition_reason
    print(f"  decomposition {'ran: ' + reason if reason else 'skipped'}")

    start = time.perf_counter()
    program.save(out / "model.onnx", weights=args.weights, external_data=True)
    saved = time.perf_counter() - start
    data = (out / "model.onnx.data").stat().st_size
    print(
        f"save: {saved:.1f} s, {data / 1e9:.2f} GB streamed; peak RSS so far {_rss_gib():.2f} GiB"
    )
    del program
    if not args.keep:
        for name in ("model.onnx", "model.onnx.data"):
            (out / name).unlink(missing_ok=True)

    relative = _check_slice(args, out)
    verdict = "ok" if relative <= args.tolerance else "MISMATCH"
    print(
        f"slice ({args.slice_layers} layers) in onnxruntime vs eager: max |diff| / max |logit| "
        f"= {relative:.2e} ({verdict}); peak RSS {_rss_gib():.2f} GiB"
    )
    if not args.keep:
        for name in ("slice.onnx", "slice.onnx.data"):
            (out / name).unlink(missing_ok=True)
    return 0 if relative <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
