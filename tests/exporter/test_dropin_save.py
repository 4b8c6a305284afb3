"""Saving: one file or external data is decided from the serialized size; a save without external
data removes the ``.data`` file that an earlier save of the same model file wrote."""

from __future__ import annotations

import onnx
import onnxruntime as ort
import pytest
import torch

from torch_onnx_conformance import exporter
from torch_onnx_conformance.exporter._program import fits_one_protobuf

X = torch.randn(2, 64)


def _linear():
    return torch.nn.Linear(64, 32).eval()


def _run(path, x):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return torch.from_numpy(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0])


def _meta_program(gib):
    features = 16 * 1024
    rows = int(gib * 2**30 / 4 / features)
    with torch.device("meta"):
        model = torch.nn.Linear(features, rows, bias=False).eval()
    with pytest.warns(UserWarning, match="meta device"):
        return exporter.export(model, (torch.randn(1, features, device="meta"),))


def test_a_model_under_two_gib_fits_one_file():
    # before: refused above 1.5 GiB of weights although protobuf holds up to 2 GiB
    assert fits_one_protobuf(_meta_program(1.72).model)
    assert not fits_one_protobuf(_meta_program(2.05).model)


def test_external_data_none_writes_one_file_for_a_small_model(tmp_path):
    model = _linear()
    program = exporter.export(model, (X,))
    program.save(tmp_path / "model.onnx", external_data=None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]
    torch.testing.assert_close(_run(tmp_path / "model.onnx", X), model(X))


def test_resave_without_external_data_removes_the_stale_data_file(tmp_path):
    model = _linear()
    path = tmp_path / "model.onnx"
    exporter.export(model, (X,), path)  # external_data=True: weights go to model.onnx.data
    assert (tmp_path / "model.onnx.data").is_file()
    exporter.export(model, (X,), path, external_data=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]
    onnx.checker.check_model(str(path), full_check=True)
    torch.testing.assert_close(_run(path, X), model(X))


def test_a_data_file_the_old_model_did_not_reference_is_kept(tmp_path):
    model = _linear()
    path = tmp_path / "model.onnx"
    exporter.export(model, (X,), path, external_data=False)
    (tmp_path / "model.onnx.data").write_bytes(b"the user's own file")
    exporter.export(model, (X,), path, external_data=False)
    assert (tmp_path / "model.onnx.data").read_bytes() == b"the user's own file"


def test_resave_with_external_data_keeps_a_loadable_pair(tmp_path):
    model = _linear()
    path = tmp_path / "model.onnx"
    program = exporter.export(model, (X,), path, external_data=False)
    program.save(path, external_data=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx", "model.onnx.data"]
    torch.testing.assert_close(_run(path, X), model(X))
