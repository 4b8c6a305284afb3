"""A worker's scratch folder, rewritten in place case after case: a repro directory holds only
what its own case wrote."""

from __future__ import annotations

import json

import numpy as np

from torch_onnx_conformance.conformance import repro

ARRAY = np.arange(6, dtype=np.float32).reshape(2, 3)


def _case(scratch, case_id: str, *, dynamic: bool, exported: bool) -> None:
    """What the parent and the case process write for one case, up to where it stops."""
    repro.reset_scratch(scratch)
    second = {"x": ARRAY + 1} if dynamic else None
    repro.write_artifacts(
        scratch,
        meta={"id": case_id},
        feeds={"x": ARRAY},
        expected=[ARRAY * 2],
        feeds2=second,
        expected2=[ARRAY] if dynamic else None,
    )
    if exported:
        repro.write_in_place(scratch / "model.onnx", case_id.encode() * 50)
        (scratch / "model.onnx.data").write_bytes(b"weights")  # as a model's external data
        repro.claim_export(scratch)


def test_a_kept_case_holds_its_own_files_only(tmp_path):
    scratch, results = tmp_path / "scratch", tmp_path / "results"
    _case(scratch, "first", dynamic=True, exported=True)
    assert json.loads((scratch / "case.json").read_text())["artifacts"] == [
        "expected.npz",
        "expected2.npz",
        "inputs.npz",
        "inputs2.npz",
        "model.onnx",
        "model.onnx.data",
    ]
    _case(scratch, "second", dynamic=False, exported=False)  # export failed: no model of its own
    assert (scratch / "model.onnx").exists() and not (scratch / "model.onnx.data").exists()
    relative = repro.keep_repro(scratch, results, "second", status="fail")
    kept = results / relative
    assert sorted(p.name for p in kept.iterdir()) == [
        "case.json",
        "compare.py",
        "expected.npz",
        "inputs.npz",
        "repro.py",
    ]
    meta = json.loads((kept / "case.json").read_text())
    assert meta["id"] == "second" and meta["status"] == "fail" and "artifacts" not in meta
    np.testing.assert_array_equal(np.load(kept / "inputs.npz")["x"], ARRAY)


def test_a_file_rewritten_shorter_holds_the_new_bytes_only(tmp_path):
    path = tmp_path / "file"
    repro.write_in_place(path, b"x" * 10_000)
    repro.write_in_place(path, b"short")
    assert path.read_bytes() == b"short"


def test_a_case_that_wrote_nothing_leaves_no_repro_directory(tmp_path):
    scratch = tmp_path / "scratch"
    _case(scratch, "earlier", dynamic=False, exported=True)
    repro.reset_scratch(scratch)  # the next case fails before its inputs exist
    assert repro.keep_repro(scratch, tmp_path / "results", "next") is None
    assert repro.keep_repro(tmp_path / "never", tmp_path / "results", "next") is None
