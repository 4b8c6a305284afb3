"""``python -m torch_onnx_conformance placement`` (torch_onnx_conformance/conformance/placement.py, over the exporter's
prediction) and the GPU check's script, .ci/gpu_check.py, with its dry run on CPU."""

from __future__ import annotations

import json

import onnx
import pytest
from onnx import helper as h

from tests.exporter.diagnostics.test_placement import _model, _x, _y
from torch_onnx_conformance.conformance import placement
from torch_onnx_conformance.conformance.__main__ import main as conformance_main


def test_cli_last_line_and_reasons(tmp_path, capsys):
    # Elu-22 (opset 23) has a CPU kernel in onnxruntime 1.31.1, and a CUDA one only as Elu 6+.
    model = _model([h.make_node("Elu", ["x"], ["y"], name="elu")], [_x()], [_y()], opset=23)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    assert conformance_main(["placement", str(path), "--provider", "cuda"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == "1 nodes, 1 on CPU, 0 Memcpy"
    assert lines[-2].startswith("CPU     elu (Elu-22): no kernel for version 22 (CUDA")
    assert conformance_main(["placement", str(tmp_path / "missing.onnx")]) == 2
    assert "no such model file" in capsys.readouterr().err


def test_json_output(tmp_path, capsys):
    model = _model([h.make_node("Relu", ["x"], ["y"])], [_x()], [_y()])
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    assert placement.main([str(path), "--json"]) == 0
    out = capsys.readouterr().out
    record = json.loads(out[: out.index("\n}") + 2])
    assert record["on_cpu"] == 0 and record["memcpy"] == 0


def _gpu_check():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / ".ci" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pieces_split_receive_join_and_verify(tmp_path):
    gpu_check = _gpu_check()
    original = tmp_path / "wheel.whl"
    original.write_bytes(bytes(range(256)) * 4000 + b"tail")  # 1,024,004 bytes
    pieces = gpu_check.split(original, tmp_path / "pieces", 300_000)
    assert [p.stat().st_size for p in pieces] == [300_000, 300_000, 300_000, 124_004]
    store = tmp_path / "store"
    gpu_check.receive(tmp_path / "pieces" / gpu_check.MANIFEST, store)
    for piece in pieces[:-1]:
        gpu_check.receive(piece, store)
    with pytest.raises(SystemExit, match=r"not received yet: wheel\.whl\.part03"):
        gpu_check.join(store)
    gpu_check.receive(pieces[-1], store)
    joined = gpu_check.join(store, tmp_path / "joined")
    assert joined.read_bytes() == original.read_bytes()
    # A damaged piece is named, and nothing is installed from it.
    (store / pieces[1].name).write_bytes(b"x" * 300_000)
    with pytest.raises(SystemExit, match=r"part01 is damaged"):
        gpu_check.join(store)


@pytest.mark.skipif(
    __import__("shutil").which("zstd") is None, reason="pack needs the zstd program (apt zstd)"
)
def test_pack_keeps_the_package_and_recompresses_the_cuda_library(tmp_path):
    import subprocess
    import tarfile
    import zipfile

    gpu_check = _gpu_check()
    library = bytes(range(256)) * 3000
    wheel = tmp_path / "onnxruntime_gpu-0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(gpu_check.CUDA_LIB, library)
        zf.writestr("onnxruntime/__init__.py", "VERSION = 0\n")
        zf.writestr("onnxruntime-0.dist-info/METADATA", "Name: onnxruntime-gpu\n")
    extra = tmp_path / "extra-0-py3-none-any.whl"
    extra.write_bytes(b"wheel")
    payload = gpu_check.pack(wheel, tmp_path / "out", [extra])
    with tarfile.open(payload) as tar:
        assert sorted(tar.getnames()) == sorted([extra.name, "cuda.so.zst", "onnxruntime.tar.xz"])
        tar.extractall(tmp_path / "payload", filter="data")
    with tarfile.open(tmp_path / "payload" / "onnxruntime.tar.xz") as tar:
        names = tar.getnames()
    # The package travels without its CUDA library, which travels alone and comes back whole.
    assert "onnxruntime/__init__.py" in names and gpu_check.CUDA_LIB not in names
    unpacked = tmp_path / "cuda.so"
    subprocess.run(
        ["zstd", "-q", "-d", f"--long={gpu_check.ZSTD_WINDOW_LOG}",
         str(tmp_path / "payload" / "cuda.so.zst"), "-o", str(unpacked)],
        check=True,
    )  # fmt: skip
    assert unpacked.read_bytes() == library


def test_slice_covers_every_op_family_opsets_and_dtypes(tmp_path):
    from torch_onnx_conformance.conformance.families import op_family

    gpu_check = _gpu_check()
    families = {op_family(op) for op in gpu_check.SLICE_OPS}
    assert {"nn", "linalg", "fft", "special", "reduction", "matmul", "shape"} <= families
    ops_run, models_run = gpu_check.slice_commands("cuda", tmp_path, dry_run=False)
    for command in (ops_run, models_run):
        assert command[command.index("--provider") + 1] == "cuda"
        assert [command[i + 1] for i, a in enumerate(command) if a == "--opset"] == ["20", "23"]
        assert [command[i + 1] for i, a in enumerate(command) if a == "--dtype"] == ["f32", "f16"]
    assert models_run[models_run.index("--tier") + 1] == "default"


def test_dry_run_end_to_end_on_cpu(tmp_path):
    # Everything but the GPU: pieces of a fake file, the purpose-built models' predicted vs real
    # placement on the CPU provider, a one-case harness slice, the report.
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [
            sys.executable,
            str(root / ".ci" / "gpu_check.py"),
            "run",
            "--dry-run",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = (tmp_path / "dry-run.md").read_text()
    assert "joined and verified" in report
    probes = [
        line for line in report.splitlines() if line.startswith("| ") and "_opset20.onnx" in line
    ]
    assert len(probes) == 5 and all(line.endswith("| none |") for line in probes), probes
    assert "1 rows: 1 pass" in report
    assert (
        "| model::synthetic/mlp::f32::static::opset20::cpu::ours::opt | pass | 0 on CPU"
        not in report
    )


def test_cuda_rows_compare_without_tf32_and_with_their_own_float16_row():
    from torch_onnx_conformance.conformance.op_cases import OP_TOLERANCES_PATH
    from torch_onnx_conformance.conformance.session import CUDA_OPTIONS
    from torch_onnx_conformance.exporter.diagnostics.compare import load_policy

    assert CUDA_OPTIONS["use_tf32"] == "0"
    policy = load_policy(OP_TOLERANCES_PATH)
    cuda_f16 = policy.tolerance("abs", "f16", "cuda")
    assert "float16 on CUDA" in cuda_f16.source
    assert policy.tolerance("abs", "f16", "cpu").source == "dtype f16"
    assert policy.tolerance("abs", "f32", "cuda").source == "dtype f32"
