#!/usr/bin/env python3
"""The CUDA check, prepared to fit a 15-minute GPU window; its --dry-run rehearses it on CPU.

The GPU machine has torch (CUDA 13, cuBLAS, cuDNN), onnx and a CPU-only onnxruntime, reaches no
package index, and one command there receives at most 64 MiB of files. So onnxruntime-gpu
1.31.1 (244 MiB; 199 MiB once ``pack`` recompresses its CUDA library) travels in pieces of at
most 56 MiB (4 pieces), one per command, and is reassembled and installed there. Step by step (torch_onnx_conformance/conformance/README.md, "The CUDA check"):

    # here, once (the wheels are never committed; .whl/ is ignored by git):
    pip download --no-deps onnxruntime-gpu==1.31.1 --only-binary=:all: \
        --python-version 3.12 --platform manylinux_2_28_x86_64 -d .whl   # + the extra wheels
    python .ci/gpu_check.py pack .whl/onnxruntime_gpu-1.31.1-*.whl --out .whl/packed --extra ...
    python .ci/gpu_check.py split .whl/packed/payload.tar --out .whl/pieces
    # on the GPU machine, one command per piece (carry=[".whl/pieces/<piece>"], plus the
    # manifest with the first), each stores its piece in .whl/store (kept while the machine
    # stays up):
    python .ci/gpu_check.py receive .whl/pieces/<piece> --store .whl/store
    # then, with the last piece: join + verify sha256 + install, then the check itself:
    python .ci/gpu_check.py join .whl/store --install && python .ci/gpu_check.py run

``run`` (a) checks that onnxruntime really runs on CUDAExecutionProvider, (b) runs the CUDA
slice with the harness (``python -m torch_onnx_conformance run --provider cuda``: a sample of every op
family plus the default-tier models, opsets 20 and 23, float32 and float16), (c) records the
real placement of purpose-built models and of every harness case (session option
``session.record_ep_graph_assignment_info`` and ``get_provider_graph_assignment_info()``; the
Memcpy count from onnxruntime's log) beside the prediction of
``torch_onnx_conformance/exporter/diagnostics/placement.py``,
and (d) writes ``reports/cuda/REPORT.md`` (commit it). ``--dry-run`` does all of it on the CPU
provider with a small fake file for the pieces and a tiny slice.

``predict-zoo`` exports the default-tier models at opsets 20 and 23 here (CPU) and writes the
predicted placement of each into ``reports/cuda/predicted.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: The device machine takes 64 MiB per command, the repository's tracked files (about 3 MiB)
#: included: 56 MiB pieces leave room for the repository to grow.
PIECE_MIB = 56
MANIFEST = "manifest.json"
REPORT_DIR = ROOT / "reports" / "cuda"
OPSETS = (20, 23)
DTYPES = ("f32", "f16")
#: One or a few ops of every op family (torch_onnx_conformance/conformance/families.py), one sample each.
SLICE_OPS = (
    "abs", "exp", "sigmoid", "add", "mul", "div", "pow", "where",  # elementwise
    "nn.functional.relu", "nn.functional.gelu", "nn.functional.softmax",
    "nn.functional.conv2d", "nn.functional.conv_transpose2d", "nn.functional.max_pool2d",
    "nn.functional.avg_pool2d", "nn.functional.layer_norm", "nn.functional.batch_norm",
    "nn.functional.pad", "nn.functional.interpolate", "nn.functional.embedding",
    "nn.functional.scaled_dot_product_attention", "nn.functional.linear",
    "sum", "mean", "amax", "argmax", "var",  # reduction
    "cumsum",  # scan
    "matmul", "bmm", "einsum",  # matmul
    "sort", "topk",  # sort
    "gather", "index_select", "masked_fill", "nonzero",  # indexing
    "reshape", "permute", "cat", "flip", "tril", "repeat", "expand",  # shape
    "arange", "zeros", "full",  # factory
    "eq", "isnan", "clamp_max", "maximum",  # comparison
    "linalg.norm", "linalg.vector_norm",  # linalg
    "fft.fft", "fft.rfft",  # fft
    "special.erf", "special.log_ndtr",  # special
    "masked.sum",  # masked
    "_refs.abs",  # refs
)  # fmt: skip
DRY_RUN_MODEL = "synthetic/mlp"


# --------------------------------------------------------------------------- pieces


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def split(path: Path, out: Path, piece_bytes: int = PIECE_MIB << 20) -> list[Path]:
    """Cut ``path`` into ``out/<name>.partNN`` of at most ``piece_bytes`` and write
    ``out/manifest.json`` (the file's name, size and sha256, and each piece's)."""
    if not path.is_file():
        raise SystemExit(f"split: {path} is not a file; download the wheel first (see --help)")
    out.mkdir(parents=True, exist_ok=True)
    pieces = []
    with path.open("rb") as f:
        for index in range(10_000):
            block = f.read(piece_bytes)
            if not block:
                break
            piece = out / f"{path.name}.part{index:02d}"
            piece.write_bytes(block)
            pieces.append(piece)
    manifest = {
        "name": path.name,
        "size": path.stat().st_size,
        "sha256": sha256(path),
        "pieces": [{"name": p.name, "size": p.stat().st_size, "sha256": sha256(p)} for p in pieces],
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return pieces


def receive(piece: Path, store: Path) -> Path:
    """Move one carried piece (or the manifest) into ``store``, which outlives the command."""
    if not piece.is_file():
        raise SystemExit(f"receive: {piece} did not arrive (name it in the run's carry)")
    store.mkdir(parents=True, exist_ok=True)
    target = store / piece.name
    shutil.copyfile(piece, target)
    return target


def join(store: Path, out_dir: Path | None = None) -> Path:
    """Reassemble the file the manifest in ``store`` names; every piece and the whole file
    are checked against their sha256, and a missing or damaged piece is named."""
    manifest_path = store / MANIFEST
    if not manifest_path.is_file():
        raise SystemExit(f"join: no {MANIFEST} in {store}; carry it with the first piece")
    manifest = json.loads(manifest_path.read_text())
    missing = [p["name"] for p in manifest["pieces"] if not (store / p["name"]).is_file()]
    if missing:
        raise SystemExit(f"join: pieces not received yet: {', '.join(missing)}")
    for p in manifest["pieces"]:
        if sha256(store / p["name"]) != p["sha256"]:
            raise SystemExit(f"join: {p['name']} is damaged (sha256 differs); send it again")
    target = (out_dir or store) / manifest["name"]
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("wb") as f:
        for p in manifest["pieces"]:
            f.write((store / p["name"]).read_bytes())
    if sha256(target) != manifest["sha256"] or target.stat().st_size != manifest["size"]:
        target.unlink()
        raise SystemExit(f"join: {manifest['name']} reassembled with the wrong sha256")
    return target


def install(wheel: Path) -> None:
    """Leave onnxruntime-gpu alone in this interpreter (both wheels own the same files; see
    .ci/install-onnxruntime-gpu), without any index: the image has the CUDA libraries.
    ``wheel`` may also be a payload written by ``pack`` (a .tar): see install_payload."""
    if wheel.suffix == ".tar":
        install_payload(wheel)
        return
    pip = [sys.executable, "-m", "pip"]
    subprocess.run([*pip, "uninstall", "-y", "onnxruntime", "onnxruntime-gpu"], check=False)
    subprocess.run([*pip, "install", "--no-deps", "--no-index", str(wheel)], check=True)


#: The CUDA provider library is most of the wheel (284 MB unpacked, about 210 MB deflated);
#: zstd at level 19 with a 128 MiB window brings it to about 177 MiB, one piece fewer.
CUDA_LIB = "onnxruntime/capi/libonnxruntime_providers_cuda.so"
ZSTD_WINDOW_LOG = 27


def pack(wheel: Path, out: Path, extra_wheels: list[Path]) -> Path:
    """Write ``out/payload.tar``: the wheel's ``onnxruntime`` package (and dist-info) without the CUDA provider
    library (xz), that library alone (zstd, long window; needs the zstd program here) and
    ``extra_wheels`` (small pure wheels the GPU image lacks, and the ``zstandard`` wheel that
    unpacks the library there)."""
    import tarfile
    import zipfile

    if shutil.which("zstd") is None:
        raise SystemExit("pack: needs the zstd program (apt-get install zstd)")
    work = Path(tempfile.mkdtemp(prefix="gpu_pack_"))
    try:
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(work / "unpacked")
        lib = work / "unpacked" / CUDA_LIB
        subprocess.run(
            ["zstd", "-q", "-19", f"--long={ZSTD_WINDOW_LOG}", "-T0", str(lib),
             "-o", str(work / "cuda.so.zst")],
            check=True,
        )  # fmt: skip
        lib.unlink()
        with tarfile.open(work / "onnxruntime.tar.xz", "w:xz") as tar:
            # The dist-info too: the harness's rows read onnxruntime's version from it.
            for folder in sorted((work / "unpacked").iterdir()):
                tar.add(folder, arcname=folder.name)
        out.mkdir(parents=True, exist_ok=True)
        payload = out / "payload.tar"
        with tarfile.open(payload, "w") as tar:
            for path in [work / "onnxruntime.tar.xz", work / "cuda.so.zst", *extra_wheels]:
                tar.add(path, arcname=path.name)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return payload


def install_payload(payload: Path) -> None:
    """Install what ``pack`` wrote: the extra wheels (no index, no dependencies), then the
    onnxruntime package in place of the image's CPU build, its CUDA library unpacked."""
    import sysconfig
    import tarfile

    work = payload.parent / "payload"
    shutil.rmtree(work, ignore_errors=True)
    with tarfile.open(payload) as tar:
        tar.extractall(work, filter="data")
    pip = [sys.executable, "-m", "pip"]
    wheels = sorted(str(w) for w in work.glob("*.whl"))
    if wheels:
        subprocess.run([*pip, "install", "-q", "--no-deps", "--no-index", *wheels], check=True)
    subprocess.run([*pip, "uninstall", "-y", "onnxruntime", "onnxruntime-gpu"], check=False)
    site = Path(sysconfig.get_paths()["purelib"])
    for old in [site / "onnxruntime", *site.glob("onnxruntime*.dist-info")]:
        shutil.rmtree(old, ignore_errors=True)
    with tarfile.open(work / "onnxruntime.tar.xz") as tar:
        tar.extractall(site, filter="data")
    unpack = (
        "import sys, zstandard\n"
        f"d = zstandard.ZstdDecompressor(max_window_size=1 << {ZSTD_WINDOW_LOG})\n"
        "with open(sys.argv[1], 'rb') as src, open(sys.argv[2], 'wb') as dst:\n"
        "    d.copy_stream(src, dst)\n"
    )
    subprocess.run(
        [sys.executable, "-c", unpack, str(work / "cuda.so.zst"), str(site / CUDA_LIB)], check=True
    )
    print(f"installed onnxruntime-gpu into {site}")


# --------------------------------------------------------------------------- real placement

_MEMCPY_LOG = re.compile(r"(\d+) Memcpy nodes are added to the graph (\S+) for (\w+)")


def observe(model_path: Path, provider: str) -> dict:
    """Where onnxruntime really put each node (graph optimizations off, like the prediction),
    in a child process so that onnxruntime's log (the Memcpy warning) can be read."""
    code = (
        "import json, sys\n"
        "from torch_onnx_conformance.conformance.placement import observe_in_process\n"
        "print(json.dumps(observe_in_process(sys.argv[1], sys.argv[2])))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code, str(model_path), provider],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    observed = json.loads(done.stdout.strip().splitlines()[-1])
    observed["memcpy_log"] = sum(int(m.group(1)) for m in _MEMCPY_LOG.finditer(done.stderr))
    return observed


def compare(prediction, observed: dict) -> list[str]:
    """The differences between a prediction and what onnxruntime did."""
    from torch_onnx_conformance.conformance.placement import differences
    from torch_onnx_conformance.exporter.diagnostics.placement import PROVIDERS as PROVIDER_NAMES

    if "error" in observed:
        return [f"session failed: {observed['error']}"]
    wanted = PROVIDER_NAMES[prediction.provider]
    if observed.get("providers", [wanted])[0] != wanted:
        return [f"onnxruntime silently fell back to {observed['providers']}: nothing to compare"]
    lines = differences(prediction, observed["nodes"])
    real_memcpy = observed.get("memcpy_log", 0)
    if len(prediction.copies) != real_memcpy:
        lines.append(f"Memcpy: predicted {len(prediction.copies)}, onnxruntime added {real_memcpy}")
    return lines


# --------------------------------------------------------------------------- probes


def probe_models(folder: Path, opsets: tuple[int, ...] = OPSETS) -> list[Path]:
    """Small models built for the purpose (the cases tests/exporter/diagnostics/test_placement.py
    predicts), saved into ``folder``."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h

    def save(name, nodes, inputs, outputs, inits=(), opset=20):
        graph = h.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
        model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
        model.ir_version = 10  # onnxruntime 1.31 reads IR <= 13
        path = folder / f"{name}.onnx"
        onnx.save(model, path)
        return path

    x = h.make_tensor_value_info("x", T.FLOAT, [2, 3])
    x16 = h.make_tensor_value_info("x", T.FLOAT16, [2, 3])
    y = h.make_tensor_value_info("y", T.FLOAT, None)
    x4 = h.make_tensor_value_info("x4", T.FLOAT, [1, 2, 4, 4])
    pads4 = h.make_tensor("pads4", T.INT64, [8], [0, 0, 1, 1, 0, 0, 1, 1])
    idx = h.make_tensor("idx", T.INT64, [], [0])
    axes = h.make_tensor("axes", T.INT64, [1], [0])
    minus1 = h.make_tensor("minus1", T.INT64, [1], [-1])
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for opset in opsets:
        relu = [h.make_node("Relu", ["x"], ["a"], name="r1")]
        # Pad-19/23 (CUDA kernels since onnxruntime 1.2x, #26393) and MaxPool-22 (none in
        # 1.31.1: on CPU at opset 23, two copies) between Relus.
        paths.append(
            save(
                f"pad_maxpool_between_relus_opset{opset}",
                [h.make_node("Relu", ["x4"], ["a"], name="r1"),
                 h.make_node("Pad", ["a", "pads4"], ["b"], name="pad"),
                 h.make_node("MaxPool", ["b"], ["p"], kernel_shape=[2, 2], name="maxpool"),
                 h.make_node("Relu", ["p"], ["y"], name="r2")],
                [x4], [y], [pads4], opset,
            )
        )  # fmt: skip
        shape_chain = [
            h.make_node("Shape", ["x"], ["s"], name="shape"),
            h.make_node("Gather", ["s", "idx"], ["d0"], name="gather"),
            h.make_node("Unsqueeze", ["d0", "axes"], ["d0u"], name="unsq"),
            h.make_node("Concat", ["d0u", "minus1"], ["shp"], axis=0, name="concat"),
            h.make_node("Reshape", ["x", "shp"], ["y"], name="reshape"),
        ]
        paths.append(save(f"shape_subgraph_opset{opset}", shape_chain, [x], [y],
                          [idx, axes, minus1], opset))  # fmt: skip
        # Version gaps of older onnxruntime tables that 1.31.1 closed (Flatten-21/23,
        # ConstantOfShape-21/23: #27728; Sin-22, Equal-19) beside one it keeps (Elu-22).
        zero = h.make_tensor("zero", T.FLOAT, [1], [0.0])
        paths.append(
            save(
                f"version_gaps_opset{opset}",
                [h.make_node("Flatten", ["x"], ["f"], name="flatten"),
                 h.make_node("Sin", ["f"], ["s"], name="sin"),
                 h.make_node("Elu", ["s"], ["e"], name="elu"),
                 h.make_node("Equal", ["e", "s"], ["q"], name="equal"),
                 h.make_node("Where", ["q", "e", "f"], ["w"], name="where"),
                 h.make_node("Shape", ["x"], ["sh"], name="shape"),
                 h.make_node("ConstantOfShape", ["sh"], ["c"], value=zero, name="cos"),
                 h.make_node("Add", ["w", "c"], ["y"], name="add")],
                [x], [y], (), opset,
            )
        )  # fmt: skip
        paths.append(
            save(
                f"cosh_fanout_opset{opset}",
                [*relu, h.make_node("Cosh", ["a"], ["b"], name="cosh"),
                 h.make_node("Neg", ["b"], ["c1"], name="n1"),
                 h.make_node("Abs", ["b"], ["c2"], name="n2"),
                 h.make_node("Sum", ["c1", "c2", "b"], ["y"], name="sum")],
                [x], [y], (), opset,
            )
        )  # fmt: skip
        paths.append(
            save(
                f"mish_inlined_matmul_softmax_f16_opset{opset}",
                [h.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
                 h.make_node("Mish", ["m"], ["mi"], name="mish"),
                 h.make_node("Softmax", ["mi"], ["y"], name="softmax")],
                [x16], [h.make_tensor_value_info("y", T.FLOAT16, None)],
                [h.make_tensor("w", T.FLOAT16, [3, 3], [0.1] * 9)], opset,
            )
        )  # fmt: skip
    return paths


def placement_rows(models: list[Path], provider: str) -> list[dict]:
    from torch_onnx_conformance.exporter.diagnostics import placement

    rows = []
    for path in models:
        prediction = placement.predict(path, provider)
        observed = observe(path, provider)
        rows.append(
            {
                "model": path.name,
                "predicted": prediction.summary(),
                "real": _real_summary(observed, len(prediction.nodes)),
                "differences": compare(prediction, observed),
            }
        )
    return rows


def _real_summary(observed: dict, nodes: int) -> str:
    if "error" in observed:
        return f"error: {observed['error']}"
    on_cpu = sum(
        1
        for _, op in observed["nodes"].get("CPUExecutionProvider", [])
        if not op.startswith("Memcpy")
    )
    return f"{nodes} nodes, {on_cpu} on CPU, {observed.get('memcpy_log', 0)} Memcpy"


# --------------------------------------------------------------------------- the slice


def slice_commands(provider: str, results: Path, dry_run: bool) -> list[list[str]]:
    """The harness commands of the slice: op cases (one sample of each of SLICE_OPS) and the
    default-tier model cases, at opsets 20 and 23, float32 and float16, static shapes. The dry
    run's slice is one model case (no OpInfo import: it stays fast)."""
    base = [
        sys.executable,
        "-m",
        "torch_onnx_conformance",
        "run",
        "--provider",
        provider,
        "--resume",
    ]
    base += ["--results", str(results), "--reports-out", str(results / "reports")]
    base += ["--shapes", "static"]
    if dry_run:
        models = ["--opset", "20", "--dtype", "f32", "--models", DRY_RUN_MODEL, "-n", "0"]
        return [[*base, *models, "torch_onnx_conformance/conformance/test_models.py"]]
    axes = [arg for opset in OPSETS for arg in ("--opset", str(opset))]
    axes += [arg for dtype in DTYPES for arg in ("--dtype", dtype)]
    ops = [arg for op in SLICE_OPS for arg in ("--ops", op)]
    return [
        [*base, *axes, "--samples", "1", *ops, "torch_onnx_conformance/conformance/test_ops.py"],
        [*base, *axes, "--tier", "default", "torch_onnx_conformance/conformance/test_models.py"],
    ]


def run_slice(command: list[str], budget_s: float) -> dict:
    """Run one harness command for at most ``budget_s``; past it the run gets SIGTERM, which
    it passes to pytest and the case processes, and the rows written so far count."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CONFORMANCE_RECORD_PLACEMENT": "1"}
    env.setdefault("HF_HUB_OFFLINE", "1")  # the GPU machine reaches no hub: never wait on one
    started = time.perf_counter()
    log = tempfile.TemporaryFile(mode="w+")
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        code = process.wait(timeout=budget_s)
    except subprocess.TimeoutExpired:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        code = f"stopped at the {budget_s:.0f} s budget"
    log.seek(0)
    tail = log.read()[-1500:]
    log.close()
    seconds = round(time.perf_counter() - started)
    return {"command": command, "exit": code, "seconds": seconds, "tail": tail}


def slice_rows(results: Path) -> list[dict]:
    """The harness's result rows (one JSON object a line under RESULTS)."""
    rows = []
    for path in sorted(results.rglob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                rows.append(json.loads(line))
    return rows


# --------------------------------------------------------------------------- report


#: What the harness imports beyond the standard library (the GPU image had all but tomli_w
#: as of 2026-11, in other versions than constraints.txt pins): a missing one is reported.
HARNESS_MODULES = ("onnx_ir", "onnxscript", "torchvision", "transformers", "ml_dtypes", "tomli_w")


def _versions() -> dict:
    versions = {"python": platform.python_version(), "machine": platform.node()}
    for name in ("torch", "onnx", "onnxruntime", *HARNESS_MODULES):
        try:
            versions[name] = getattr(__import__(name), "__version__", "importable")
        except Exception as exc:  # noqa: BLE001 - a report line, not a failure
            versions[name] = f"not importable ({type(exc).__name__})"
    with contextlib.suppress(Exception):
        import onnxruntime

        versions["onnxruntime providers"] = ", ".join(onnxruntime.get_available_providers())
    with contextlib.suppress(Exception):
        import torch

        if torch.cuda.is_available():
            versions["gpu"] = torch.cuda.get_device_name(0)
    return versions


def write_report(out: Path, *, provider: str, dry_run: bool, versions: dict, probes, slices, rows):
    out.mkdir(parents=True, exist_ok=True)
    title = "CUDA check" + (" (dry run on the CPU provider)" if dry_run else "")
    lines = [
        f"# {title}",
        "",
        f"Written by `.ci/gpu_check.py run{' --dry-run' if dry_run else ''}`.",
        "",
    ]
    lines += [f"- {k}: {v}" for k, v in versions.items()]
    lines += ["", "## Placement of purpose-built models: predicted vs real", ""]
    lines += ["| model | predicted | real | differences |", "|---|---|---|---|"]
    for r in probes:
        diff = "; ".join(r["differences"]) or "none"
        lines.append(f"| {r['model']} | {r['predicted']} | {r['real']} | {diff} |")
    lines += ["", "## The slice (harness, `--provider " + provider + "`)", ""]
    for s in slices:
        lines.append(f"- `{' '.join(s['command'][1:])}`: exit {s['exit']} in {s['seconds']} s")
        if s["exit"] != 0:
            lines += ["", "```text", s["tail"].strip(), "```", ""]
    status = Counter(r.get("status") for r in rows)
    lines += [
        "",
        f"{len(rows)} rows: " + ", ".join(f"{n} {s}" for s, n in status.most_common()),
        "",
    ]
    lines += [
        "| case | status | predicted | real CPU nodes | differences |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        p = (r.get("extra") or {}).get("placement") or {}
        predicted = p.get("predicted", {})
        lines.append(
            f"| {r.get('id')} | {r.get('status')} | "
            f"{predicted.get('on_cpu', '-')} on CPU, {predicted.get('memcpy', '-')} Memcpy | "
            f"{p.get('real_on_cpu', '-')} | {'; '.join(p.get('differences', [])) or '-'} |"
        )
    path = out / ("dry-run.md" if dry_run else "REPORT.md")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def rehearse_pieces(work: Path) -> str:
    """The dry run's transfer: a small fake file split, received piece by piece, joined and
    verified exactly as the wheel will be."""
    fake = work / "fake-wheel.whl"
    fake.write_bytes(os.urandom(3 * (1 << 20) + 12345))
    pieces = split(fake, work / "pieces", 1 << 20)
    store = work / "store"
    for piece in [work / "pieces" / MANIFEST, *pieces]:
        receive(piece, store)
    joined = join(store, work / "joined")
    if sha256(joined) != sha256(fake):
        raise SystemExit("dry run: the joined file differs from the original")
    return f"{len(pieces)} pieces of <= 1 MiB, joined and verified (sha256 {sha256(fake)[:12]})"


def run(args) -> int:
    provider = "cpu" if args.dry_run else "cuda"
    versions = _versions()
    if not args.dry_run:
        import onnxruntime

        if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
            print(
                "run: onnxruntime has no CUDAExecutionProvider; install the wheel (join --install)"
            )
            return 3
        with contextlib.suppress(Exception):
            onnxruntime.preload_dlls()
    work = Path(tempfile.mkdtemp(prefix="gpu_check_"))
    try:
        if args.dry_run:
            versions["pieces"] = rehearse_pieces(work)
        opsets = OPSETS[:1] if args.dry_run else OPSETS
        probes = placement_rows(probe_models(work / "probes", opsets), provider)
        results = work / "results"
        commands = slice_commands(provider, results, args.dry_run)
        slices = [run_slice(c, args.budget_s / len(commands)) for c in commands]
        rows = slice_rows(results)
        report = write_report(
            args.out, provider=provider, dry_run=args.dry_run, versions=versions,
            probes=probes, slices=slices, rows=rows,
        )  # fmt: skip
        if args.rows:
            args.rows.parent.mkdir(parents=True, exist_ok=True)
            args.rows.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"report: {report}")
    return 0


# --------------------------------------------------------------------------- predicted.md


def export_zoo_model(case, opset: int, path: Path) -> None:
    import torch

    from torch_onnx_conformance.conformance import flat_io
    from torch_onnx_conformance.conformance.exporters import export_model

    torch.manual_seed(0)
    module, args, kwargs = case.build()
    inputs = flat_io.flat_inputs(module, args, kwargs, case.dynamic_shapes)
    export_model(
        "ours", module, args, kwargs, inputs=inputs, dynamic_shapes=case.dynamic_shapes,
        opset=opset, optimize=True, path=path, capture=case.capture,
    )  # fmt: skip


def predict_zoo(out: Path, models: list[str] | None, work: Path, reuse: bool = False) -> Path:
    """Export the default-tier zoo models (ours, dynamic shapes, optimized) at opsets 20 and 23
    here and write each one's predicted CUDA placement into ``out``."""
    from torch_onnx_conformance.conformance.model_cases import all_cases
    from torch_onnx_conformance.exporter.diagnostics import placement

    work.mkdir(parents=True, exist_ok=True)
    cases = [c for c in all_cases("default") if not models or c.name in models]
    lines = [
        "# Predicted CUDA placement of the default-tier models",
        "",
        "`python .ci/gpu_check.py predict-zoo` exported each model here (exporter ours, dynamic "
        "shapes, optimized, float32) and ran `python -m torch_onnx_conformance placement MODEL.onnx "
        "--provider cuda` on it: onnxruntime "
        f"{placement.kernel_table()['onnxruntime']}, graph optimizations off. "
        "Kernel table: " + placement.kernel_table()["sources"]["CUDAExecutionProvider"] + ".",
        "",
        "The kernel rules are onnxruntime's; the rest of the prediction (CPU-memory inputs, shape "
        "subgraphs, copies) stands until the GPU check (`.ci/gpu_check.py run`) compares it "
        "with onnxruntime on a GPU.",
        "",
        "| model | opset | prediction | CPU nodes (first 6) |",
        "|---|---|---|---|",
    ]
    for case in cases:
        for opset in OPSETS:
            path = work / f"{case.name.replace('/', '_')}_opset{opset}.onnx"
            try:
                if not (reuse and path.is_file()):
                    export_zoo_model(case, opset, path)
                prediction = placement.predict(path, "cuda")
                cpu = Counter(
                    f"{n.op_type}: {n.reason.split(' (')[0]}" for n in prediction.cpu_nodes
                )
                shown = "; ".join(f"{k} x{v}" for k, v in cpu.most_common(6))
                lines.append(f"| {case.name} | {opset} | {prediction.summary()} | {shown} |")
            except Exception as exc:  # noqa: BLE001 - one model never takes the table down
                text = str(exc).splitlines()[0][:120] if str(exc) else ""
                lines.append(
                    f"| {case.name} | {opset} | export failed: {type(exc).__name__}: {text} | |"
                )
            print(lines[-1], flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("split", help="cut a file into pieces of at most --piece-mib MiB")
    p.add_argument("file", type=Path)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--piece-mib", type=float, default=PIECE_MIB)
    p = sub.add_parser("pack", help="the wheel as a smaller payload (see pack)")
    p.add_argument("wheel", type=Path)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--extra", type=Path, nargs="*", default=[], help="wheels to carry along")
    p = sub.add_parser("receive", help="keep one carried piece in --store")
    p.add_argument("piece", type=Path)
    p.add_argument("--store", type=Path, default=ROOT / ".whl" / "store")
    p = sub.add_parser("join", help="reassemble and verify the pieces in STORE")
    p.add_argument("store", type=Path)
    p.add_argument("--install", action="store_true", help="then install the wheel (no index)")
    p = sub.add_parser("run", help="the CUDA check: slice, placement, report")
    p.add_argument("--dry-run", action="store_true", help="everything but the GPU, on CPU")
    p.add_argument("--out", type=Path, default=REPORT_DIR)
    p.add_argument("--budget-s", type=float, default=420.0, help="time for the harness slice")
    p.add_argument("--rows", type=Path, help="also keep the slice's result rows (JSON lines) here")
    p = sub.add_parser("predict-zoo", help="write reports/cuda/predicted.md")
    p.add_argument("--out", type=Path, default=REPORT_DIR / "predicted.md")
    p.add_argument("--models", nargs="*")
    p.add_argument("--work", type=Path, default=ROOT / "artifacts" / "cuda-zoo")
    p.add_argument("--reuse", action="store_true", help="predict on the exports already in --work")
    args = parser.parse_args(argv)
    if args.command == "split":
        pieces = split(args.file, args.out, int(args.piece_mib * (1 << 20)))
        print(
            f"{len(pieces)} pieces in {args.out} (carry each with its own command; the manifest with the first)"
        )
    elif args.command == "pack":
        print(f"wrote {pack(args.wheel, args.out, args.extra)}")
    elif args.command == "receive":
        print(f"stored {receive(args.piece, args.store)}")
    elif args.command == "join":
        wheel = join(args.store)
        print(f"joined and verified {wheel}")
        if args.install:
            install(wheel)
    elif args.command == "run":
        return run(args)
    elif args.command == "predict-zoo":
        print(f"wrote {predict_zoo(args.out, args.models, args.work, args.reuse)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
