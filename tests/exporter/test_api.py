"""export() and ONNXProgram behave like torch.onnx's, with its traps fixed."""

from __future__ import annotations

import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn as nn

from torch_onnx_conformance import exporter
from torch_onnx_conformance.exporter import _metadata


class MLPModel(nn.Module):
    """The seeds' simple MLP (torch.onnx docs, 'A simple example')."""

    def __init__(self):
        super().__init__()
        self.fc0 = nn.Linear(8, 8, bias=True)
        self.fc1 = nn.Linear(8, 4, bias=True)
        self.fc2 = nn.Linear(4, 2, bias=True)
        self.fc3 = nn.Linear(2, 2, bias=True)

    def forward(self, tensor_x: torch.Tensor):
        tensor_x = self.fc0(tensor_x)
        tensor_x = torch.sigmoid(tensor_x)
        tensor_x = self.fc1(tensor_x)
        tensor_x = torch.sigmoid(tensor_x)
        tensor_x = self.fc2(tensor_x)
        tensor_x = torch.sigmoid(tensor_x)
        output = self.fc3(tensor_x)
        return output


class MLPDictListModel(nn.Module):
    """The seeds' MLP with a tensor, a dict and a list input."""

    def __init__(self):
        super().__init__()
        self.fc0 = nn.Linear(8, 8, bias=True)
        self.fc1 = nn.Linear(8, 4, bias=True)
        self.fc2 = nn.Linear(4, 2, bias=True)
        self.fc3 = nn.Linear(2, 2, bias=True)
        self.fc_combined = nn.Linear(8 + 8 + 8, 8, bias=True)

    def forward(self, tensor_x: torch.Tensor, input_dict: dict, input_list: list):
        dict_tensor = input_dict["tensor_x"]
        list_tensor = input_list[0]
        combined_tensor = torch.cat([tensor_x, dict_tensor, list_tensor], dim=1)
        combined_tensor = self.fc_combined(combined_tensor)
        combined_tensor = torch.sigmoid(combined_tensor)
        combined_tensor = self.fc0(combined_tensor)
        combined_tensor = torch.sigmoid(combined_tensor)
        combined_tensor = self.fc1(combined_tensor)
        combined_tensor = torch.sigmoid(combined_tensor)
        combined_tensor = self.fc2(combined_tensor)
        combined_tensor = torch.sigmoid(combined_tensor)
        return self.fc3(combined_tensor)


def _ort_run(path_or_proto, feeds):
    data = path_or_proto if isinstance(path_or_proto, str) else path_or_proto.SerializeToString()
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, {n: f.numpy() for n, f in zip(names, feeds)})


def test_seed_simple_mlp_dynamic_batch(tmp_path):
    model = MLPModel().eval()
    tensor_x = torch.rand((97, 8), dtype=torch.float32)
    program = exporter.export(model, (tensor_x,), dynamic_shapes=({0: "batch_size"},))
    assert program.model.graph.inputs[0].shape == ("batch_size", 8)
    path = str(tmp_path / "mlp.onnx")
    program.save(path)
    onnx.checker.check_model(path, full_check=True)
    for batch in (97, 5):
        x = torch.rand((batch, 8))
        (got,) = _ort_run(path, [x])
        torch.testing.assert_close(torch.from_numpy(got), model(x), rtol=1e-5, atol=1e-6)


def test_seed_dict_list_mlp(tmp_path):
    model = MLPDictListModel().eval()
    tensor_input = torch.rand((97, 8), dtype=torch.float32)
    dict_input = {"tensor_x": torch.rand((97, 8), dtype=torch.float32)}
    list_input = [torch.rand((97, 8), dtype=torch.float32)]
    input_names = ["tensor_input", "tensor_x", "list_input_index_0"]
    output_names = ["output"]
    program = exporter.export(
        model,
        (tensor_input, dict_input, list_input),
        dynamic_shapes=({0: "batch_size"}, {"tensor_x": {0: "batch_size"}}, [{0: "batch_size"}]),
        input_names=input_names,
        output_names=output_names,
    )
    for i in range(3):
        assert program.model.graph.inputs[i].shape == ("batch_size", 8)
    assert [v.name for v in program.model.graph.inputs] == input_names
    assert [v.name for v in program.model.graph.outputs] == output_names
    path = str(tmp_path / "mlp.onnx")
    program.save(path)
    for batch in (97, 3):
        a, b, c = (torch.rand((batch, 8)) for _ in range(3))
        (got,) = _ort_run(path, [a, b, c])
        torch.testing.assert_close(
            torch.from_numpy(got), model(a, {"tensor_x": b}, [c]), rtol=1e-5, atol=1e-6
        )
    # ONNXProgram.__call__ runs the same model through onnxruntime, taking the tree inputs.
    (called,) = program(tensor_input, dict_input, list_input)
    torch.testing.assert_close(
        called, model(tensor_input, dict_input, list_input), rtol=1e-5, atol=1e-6
    )


def test_legacy_dynamic_axes_converted_with_a_warning():
    model = MLPModel().eval()
    with pytest.warns(UserWarning, match="'dynamic_axes' is not recommended when dynamo=True"):
        program = exporter.export(
            model, (torch.rand(4, 8),), input_names=["x"], dynamic_axes={"x": {0: "batch"}}
        )
    assert program.model.graph.inputs[0].shape == ("batch", 8)


def test_dim_objects_keep_their_names():
    batch = torch.export.Dim("batch")
    program = exporter.export(MLPModel().eval(), (torch.rand(4, 8),), dynamic_shapes=({0: batch},))
    assert program.model.graph.inputs[0].shape == ("batch", 8)


def test_exported_program_input():
    model = MLPModel().eval()
    ep = torch.export.export(model, (torch.rand(4, 8),))
    program = exporter.export(ep)
    assert program.record.status["capture"] == "skipped"
    (got,) = program(torch.rand(4, 8) * 0 + 1)
    torch.testing.assert_close(got, model(torch.ones(4, 8)), rtol=1e-5, atol=1e-6)


def test_no_zero_byte_data_file_for_small_models(tmp_path):
    path = tmp_path / "m.onnx"
    exporter.export(MLPModel().eval(), (torch.rand(2, 8),), str(path))
    assert path.exists()
    assert not (tmp_path / "m.onnx.data").exists()


def test_external_data_written_when_asked_for_big_tensors(tmp_path):
    model = nn.Sequential(nn.Linear(256, 256)).eval()
    program = exporter.export(model, (torch.rand(2, 256),))
    path = tmp_path / "big.onnx"
    program.save(path, external_data=True)
    data = tmp_path / "big.onnx.data"
    assert data.exists() and data.stat().st_size >= 256 * 256 * 4
    x = torch.rand(2, 256)
    (got,) = _ort_run(str(path), [x])
    torch.testing.assert_close(torch.from_numpy(got), model(x), rtol=1e-5, atol=1e-5)


def test_export_params_false_gives_a_valid_model_with_weights_as_inputs(tmp_path):
    model = MLPModel().eval()
    path = tmp_path / "noparams.onnx"
    exporter.export(model, (torch.rand(2, 8),), str(path), export_params=False)
    proto = onnx.load(str(path))
    onnx.checker.check_model(proto, full_check=True)
    assert not proto.graph.initializer
    input_names = [i.name for i in proto.graph.input]
    assert "fc0.weight" in input_names
    x = torch.rand(2, 8)
    state = model.state_dict()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {name: (x if name == input_names[0] else state[name]).numpy() for name in input_names}
    (got,) = session.run(None, feeds)
    torch.testing.assert_close(torch.from_numpy(got), model(x), rtol=1e-5, atol=1e-6)


def test_keep_initializers_as_inputs(tmp_path):
    path = tmp_path / "kept.onnx"
    exporter.export(
        MLPModel().eval(), (torch.rand(2, 8),), str(path), keep_initializers_as_inputs=True
    )
    proto = onnx.load(str(path))
    inputs = {i.name for i in proto.graph.input}
    assert {init.name for init in proto.graph.initializer} <= inputs
    onnx.checker.check_model(proto, full_check=True)


def test_metadata_props_and_option_to_leave_them_out():
    model = MLPModel().eval()
    program = exporter.export(model, (torch.rand(2, 8),), optimize=False)
    node = next(n for n in program.model.graph if n.op_type == "Gemm")
    for key in (
        _metadata.NAMESPACE,
        _metadata.CLASS_HIERARCHY,
        _metadata.FX_NODE,
        _metadata.NAME_SCOPES,
        _metadata.STACK_TRACE,
    ):
        assert key in node.metadata_props, key
    assert "fc0" in node.metadata_props[_metadata.NAMESPACE]
    graph_props = program.model.graph.metadata_props
    assert _metadata.GRAPH_SIGNATURE in graph_props
    assert _metadata.RANGE_CONSTRAINTS in graph_props
    assert program.model.graph.inputs[0].metadata_props[_metadata.INPUT_KIND] == "USER_INPUT"
    init = program.model.graph.initializers["fc0.weight"]
    assert init.metadata_props[_metadata.INPUT_KIND] == "PARAMETER"
    assert init.metadata_props[_metadata.ORIGINAL_NAME] == "p_fc0_weight"
    assert program.model.graph.outputs[0].metadata_props[_metadata.OUTPUT_KIND] == "USER_OUTPUT"

    bare = exporter.export(model, (torch.rand(2, 8),), optimize=False, metadata=False)
    assert all(not n.metadata_props for n in bare.model.graph)
    assert len(bare.model_proto.SerializeToString()) < len(program.model_proto.SerializeToString())


def test_is_in_onnx_export_flag_is_raised_during_export():
    seen = []

    class Branchy(nn.Module):
        def forward(self, x):
            seen.append((exporter.is_in_onnx_export(), torch.onnx.is_in_onnx_export()))
            return x * 2.0 if torch.onnx.is_in_onnx_export() else x

    x = torch.rand(3)
    program = exporter.export(Branchy(), (x,))
    assert (True, True) in seen
    assert not exporter.is_in_onnx_export() and not torch.onnx.is_in_onnx_export()
    (got,) = program(x)
    torch.testing.assert_close(got, x * 2.0)


def test_opset_choice_is_recorded():
    for opset in (17, 20, 23):
        program = exporter.export(MLPModel().eval(), (torch.rand(2, 8),), opset_version=opset)
        assert program.model.opset_imports[""] == opset


def test_output_of_bytesio(tmp_path):
    import io

    buffer = io.BytesIO()
    exporter.export(MLPModel().eval(), (torch.rand(2, 8),), buffer)
    proto = onnx.load_from_string(buffer.getvalue())
    onnx.checker.check_model(proto, full_check=True)


def test_apply_weights_and_compute_values():
    model = MLPModel().eval()
    x = torch.rand(2, 8)
    program = exporter.export(model, (x,), optimize=False)
    other = MLPModel().eval()
    program.apply_weights(other.state_dict())
    (got,) = program(x)
    torch.testing.assert_close(got, other(x), rtol=1e-5, atol=1e-6)
    (hidden,) = program.compute_values(["sigmoid"], (x,))
    torch.testing.assert_close(hidden, torch.sigmoid(other.fc0(x)), rtol=1e-5, atol=1e-6)


def test_call_reference_matches_onnxruntime():
    model = MLPModel().eval()
    x = torch.rand(2, 8)
    program = exporter.export(model, (x,))
    (ref,) = program.call_reference(x)
    torch.testing.assert_close(ref, model(x), rtol=1e-5, atol=1e-6)


class GatherOfExpandedBuffer(nn.Module):
    """BERT's token-type ids: a buffer expanded, then gathered at positions. onnx's reference
    GatherElements cannot evaluate it, so constant folding leaves the node in the graph."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("types", torch.zeros(1, 64, dtype=torch.int64), persistent=False)
        self.register_buffer("positions", torch.arange(64).unsqueeze(0), persistent=False)

    def forward(self, x):
        positions = self.positions[:, : x.shape[1]]
        return x + torch.gather(self.types.expand(positions.shape[0], -1), 1, positions)


def test_a_node_constant_folding_cannot_evaluate_warns_nobody(caplog):
    x = torch.randn(2, 7)
    with caplog.at_level("DEBUG"):
        program = exporter.export(GatherOfExpandedBuffer().eval(), (x,))
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert not warnings, [r.getMessage() for r in warnings]
    # The miss is kept in the exporter's debug log, and the model is right.
    assert any("left a node unfolded" in r.getMessage() for r in caplog.records)
    session = ort.InferenceSession(program.model_proto.SerializeToString())
    (got,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    torch.testing.assert_close(torch.from_numpy(got), GatherOfExpandedBuffer()(x))
