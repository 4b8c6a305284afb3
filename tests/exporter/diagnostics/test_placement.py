"""The CUDA placement prediction (torch_onnx_conformance/exporter/diagnostics/placement.py) on models built for the
purpose, its kernel table against onnxruntime's CPU wheel, and the export report's section."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from torch_onnx_conformance.exporter.diagnostics import placement
from torch_onnx_conformance.exporter.diagnostics.placement_data import generate


def _model(nodes, inputs, outputs, initializers=(), opset=20) -> onnx.ModelProto:
    graph = h.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])

    return model


def _x(dtype=T.FLOAT, name="x"):
    return h.make_tensor_value_info(name, dtype, [2, 3])


def _y(dtype=T.FLOAT, name="y"):
    return h.make_tensor_value_info(name, dtype, None)


def _cpu(prediction):
    return {(n.name, n.op_type): n.reason for n in prediction.cpu_nodes}


def test_all_cuda_kernels_no_cpu_no_copy():
    # Shape's output lives in CPU memory and Reshape reads its shape input from CPU memory:
    # no copy; Relu, MatMul, Softmax have CUDA kernels at opset 20.
    w = h.make_tensor("w", T.FLOAT, [3, 3], [0.1] * 9)
    model = _model(
        [
            h.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
            h.make_node("Relu", ["m"], ["r"], name="relu"),
            h.make_node("Shape", ["r"], ["s"], name="shape"),
            h.make_node("Reshape", ["r", "s"], ["q"], name="reshape"),
            h.make_node("Softmax", ["q"], ["y"], name="softmax"),
        ],
        [_x()],
        [_y()],
        [w],
    )
    prediction = placement.predict(model, "cuda")
    assert prediction.summary() == "5 nodes, 0 on CPU, 0 Memcpy"
    assert all(n.device == "cuda" for n in prediction.nodes)


def test_version_without_cuda_kernel_goes_to_cpu_with_reason():
    # MaxPool's schema at opset 23 is MaxPool-22; onnxruntime 1.31.1's CUDA provider registers
    # MaxPool 12+ (open-ended: 12 only), its CPU provider MaxPool 22+.
    pads = h.make_tensor("pads", T.INT64, [8], [0, 0, 1, 1, 0, 0, 1, 1])
    model = _model(
        [
            h.make_node("Relu", ["x"], ["a"], name="r1"),
            h.make_node("Pad", ["a", "pads"], ["b"], name="pad"),
            h.make_node("MaxPool", ["b"], ["c"], kernel_shape=[2, 2], name="maxpool"),
            h.make_node("Relu", ["c"], ["y"], name="r2"),
        ],
        [h.make_tensor_value_info("x", T.FLOAT, [1, 2, 4, 4])],
        [_y()],
        [pads],
        opset=23,
    )
    prediction = placement.predict(model, "cuda")
    reason = _cpu(prediction)[("maxpool", "MaxPool")]
    assert reason.startswith("no kernel for version 22")
    assert "12+" in reason
    # b goes to the host, c comes back: one copy per crossing value. Pad-23 has its CUDA
    # kernel in 1.31.1 (older tables lacked Pad from 19: onnxruntime #26393).
    assert sorted((c.kind, c.value) for c in prediction.copies) == [
        ("MemcpyFromHost", "c"),
        ("MemcpyToHost", "b"),
    ]
    assert prediction.summary() == "4 nodes, 1 on CPU, 2 Memcpy"
    # At opset 20 (MaxPool-12, Pad-19) the same graph has its kernels.
    model.opset_import[0].version = 20
    assert placement.predict(model, "cuda").summary() == "4 nodes, 0 on CPU, 0 Memcpy"


def test_one_copy_per_value_not_per_edge():
    # A CPU-only op (Cosh: no CUDA kernel, and no ONNX function to inline) between CUDA ops:
    # its input is read by it alone, its output by three CUDA consumers: one MemcpyToHost,
    # one MemcpyFromHost.
    model = _model(
        [
            h.make_node("Relu", ["x"], ["a"], name="r"),
            h.make_node("Cosh", ["a"], ["b"], name="cosh"),
            h.make_node("Neg", ["b"], ["c1"], name="n1"),
            h.make_node("Abs", ["b"], ["c2"], name="n2"),
            h.make_node("Add", ["b", "c1"], ["c3"], name="n3"),
            h.make_node("Sum", ["c1", "c2", "c3"], ["y"], name="sum"),
        ],
        [_x()],
        [_y()],
    )
    prediction = placement.predict(model, "cuda")
    assert _cpu(prediction)[("cosh", "Cosh")].startswith("no CUDAExecutionProvider kernel")
    assert [(c.kind, c.value) for c in prediction.copies] == [
        ("MemcpyFromHost", "b"),
        ("MemcpyToHost", "a"),
    ]
    assert prediction.summary() == "6 nodes, 1 on CPU, 2 Memcpy"


def test_function_op_without_kernels_is_inlined():
    # Mish has a kernel on neither provider but is an ONNX function: onnxruntime inlines it
    # (Softplus, Tanh, Mul) and places those, here all on CUDA.
    model = _model(
        [
            h.make_node("Relu", ["x"], ["a"], name="r"),
            h.make_node("Mish", ["a"], ["b"], name="mish"),
            h.make_node("Neg", ["b"], ["y"], name="n"),
        ],
        [_x()],
        [_y()],
    )
    prediction = placement.predict(model, "cuda")
    assert prediction.inlined == ["mish (Mish-18)"]
    assert sorted(n.op_type for n in prediction.nodes) == ["Mul", "Neg", "Relu", "Softplus", "Tanh"]
    assert prediction.summary() == "5 nodes, 0 on CPU, 0 Memcpy"


def test_float16_without_cpu_kernel_runs_in_float32_on_cpu():
    # Cosh has no CUDA kernel and no float16 CPU kernel: onnxruntime computes it in float32
    # between Casts on CPU (not a load failure).
    model = _model(
        [h.make_node("Cosh", ["x"], ["y"], name="cosh")], [_x(T.FLOAT16)], [_y(T.FLOAT16)]
    )
    reason = _cpu(placement.predict(model, "cuda"))[("cosh", "Cosh")]
    assert "InsertCastTransformer" in reason


def test_type_without_cuda_kernel():
    # CUDA Relu has float kernels only; int8 Relu runs on CPU (the CPU provider has int8).
    model = _model(
        [
            h.make_node("Relu", ["x"], ["y"], name="relu"),
        ],
        [_x(T.INT8)],
        [_y(T.INT8)],
    )
    prediction = placement.predict(model, "cuda")
    assert _cpu(prediction)[("relu", "Relu")].startswith("type T=tensor(int8)")
    # Graph input and output move through the session, not Memcpy nodes.
    assert prediction.summary() == "1 nodes, 1 on CPU, 0 Memcpy"


def test_initializer_on_both_sides_is_duplicated_not_copied():
    # w feeds a CUDA Add and a CPU-only Cosh: onnxruntime duplicates the initializer.
    w = h.make_tensor("w", T.FLOAT, [2, 3], [0.5] * 6)
    model = _model(
        [
            h.make_node("Add", ["x", "w"], ["a"], name="add"),
            h.make_node("Cosh", ["w"], ["b"], name="cosh"),
            h.make_node("Mul", ["a", "b"], ["y"], name="mul"),
        ],
        [_x()],
        [_y()],
        [w],
    )
    prediction = placement.predict(model, "cuda")
    assert [(c.kind, c.value) for c in prediction.copies] == [("MemcpyFromHost", "b")]


def test_graph_input_read_on_both_sides_gets_one_copy():
    model = _model(
        [
            h.make_node("Relu", ["x"], ["a"], name="relu"),
            h.make_node("Cosh", ["x"], ["b"], name="cosh"),
            h.make_node("Add", ["a", "b"], ["y"], name="add"),
        ],
        [_x()],
        [_y()],
    )
    prediction = placement.predict(model, "cuda")
    assert sorted((c.kind, c.value) for c in prediction.copies) == [
        ("MemcpyFromHost", "b"),
        ("MemcpyFromHost", "x"),
    ]


def test_shape_subgraph_moves_to_cpu():
    # Shape -> Gather -> Unsqueeze -> Concat -> Reshape: the int64 arithmetic on Shape's
    # CPU-memory output moves to CPU (fallback_cpu_capability); Reshape reads its shape input
    # from CPU memory, so nothing is copied.
    idx = h.make_tensor("idx", T.INT64, [], [0])
    axes = h.make_tensor("axes", T.INT64, [1], [0])
    minus1 = h.make_tensor("minus1", T.INT64, [1], [-1])
    model = _model(
        [
            h.make_node("Shape", ["x"], ["s"], name="shape"),
            h.make_node("Gather", ["s", "idx"], ["d0"], name="gather"),
            h.make_node("Unsqueeze", ["d0", "axes"], ["d0u"], name="unsq"),
            h.make_node("Concat", ["d0u", "minus1"], ["shp"], axis=0, name="concat"),
            h.make_node("Reshape", ["x", "shp"], ["y"], name="reshape"),
        ],
        [_x()],
        [_y()],
        [idx, axes, minus1],
    )
    prediction = placement.predict(model, "cuda")
    assert set(_cpu(prediction)) == {
        ("gather", "Gather"),
        ("unsq", "Unsqueeze"),
        ("concat", "Concat"),
    }
    assert all("fallback_cpu_capability" in r for r in _cpu(prediction).values())
    assert prediction.copies == []


def test_float16_input_keeps_node_on_cuda():
    # A node with a float16 input never moves to CPU, even when it reads Shape's output.
    model = _model(
        [
            h.make_node("Shape", ["x"], ["s"], name="shape"),
            h.make_node("Cast", ["s"], ["sf"], to=T.FLOAT16, name="cast"),
            h.make_node("Add", ["x", "sf"], ["y"], name="add"),
        ],
        [h.make_tensor_value_info("x", T.FLOAT16, [3])],
        [_y(T.FLOAT16)],
    )
    prediction = placement.predict(model, "cuda")
    names = {n.name: n.device for n in prediction.nodes}
    assert names == {"shape": "cuda", "cast": "cpu", "add": "cuda"}
    # Cast reads only Shape's CPU value, so it moves; its float16 output comes back.
    assert [(c.kind, c.value) for c in prediction.copies] == [("MemcpyFromHost", "sf")]


def test_attribute_refusals():
    w = h.make_tensor("w", T.FLOAT, [1, 1, 3, 3], [0.1] * 9)
    model = _model(
        [
            h.make_node("ConvTranspose", ["x4", "w"], ["y"], pads=[0, 0, 1, 1], name="ct"),
        ],
        [h.make_tensor_value_info("x4", T.FLOAT, [1, 1, 4, 4])],
        [_y()],
        [w],
    )
    reason = _cpu(placement.predict(model, "cuda"))[("ct", "ConvTranspose")]
    assert reason.startswith("attribute pads=[0, 0, 1, 1]")
    # RNNs: the CUDA kernels take no clip (GetCapability refuses before any kernel runs).
    gru_w = h.make_tensor("W", T.FLOAT, [1, 6, 3], [0.1] * 18)
    gru_r = h.make_tensor("R", T.FLOAT, [1, 6, 2], [0.1] * 12)
    model = _model(
        [h.make_node("GRU", ["x3", "W", "R"], ["y"], hidden_size=2, clip=1.0, name="gru")],
        [h.make_tensor_value_info("x3", T.FLOAT, [4, 1, 3])],
        [_y()],
        [gru_w, gru_r],
    )
    reason = _cpu(placement.predict(model, "cuda"))[("gru", "GRU")]
    assert reason.startswith("attribute clip")
    # A Cast to string fails the kernel's type constraint before the attribute rule is read.
    model = _model(
        [h.make_node("Cast", ["x"], ["y"], to=T.STRING, name="cast")],
        [_x()],
        [_y(T.STRING)],
    )
    reason = _cpu(placement.predict(model, "cuda"))[("cast", "Cast")]
    assert reason.startswith("type T2=tensor(string)")


def test_if_bodies_are_placed():
    then = h.make_graph(
        [h.make_node("Cosh", ["x"], ["t"], name="cosh_in_then")], "then", [], [_y(name="t")]
    )
    other = h.make_graph(
        [h.make_node("Relu", ["x"], ["e"], name="relu_in_else")], "else", [], [_y(name="e")]
    )
    model = _model(
        [h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="if")],
        [_x(), h.make_tensor_value_info("c", T.BOOL, [])],
        [_y()],
    )
    prediction = placement.predict(model, "cuda")
    cpu = [n.label for n in prediction.cpu_nodes]
    assert cpu == ["if/then_branch/cosh_in_then (Cosh-9)"]
    assert prediction.summary() == "3 nodes, 1 on CPU, 0 Memcpy"


def test_cpu_provider_places_everything_on_cpu():
    model = _model([h.make_node("Relu", ["x"], ["y"])], [_x()], [_y()])
    assert placement.predict(model, "cpu").summary() == "1 nodes, 1 on CPU, 0 Memcpy"


def test_kernel_table_names_its_source_and_version():
    table = placement.kernel_table()
    import onnxruntime

    assert table["onnxruntime"] == onnxruntime.__version__
    # The CUDA rows are the onnxruntime-gpu wheel's own registrations, of the same version.
    source = table["sources"]["CUDAExecutionProvider"]
    assert f"onnxruntime-gpu {onnxruntime.__version__} wheel" in source
    assert "get_all_opkernel_def()" in source and "sha256 " in source
    assert generate.build_commit() and f"commit {generate.build_commit()}" in source


def test_cpu_part_of_the_table_is_the_installed_wheel():
    # Every CPU kernel the installed wheel lists is in the table with the same version range
    # and types (the table goes stale when onnxruntime is bumped: regenerate it).
    table = placement.kernel_table()["providers"]["CPUExecutionProvider"]
    assert generate.cpu_differences(table, generate.wheel_cpu_kernels()) == []


def test_markdown_parser_reads_rows_and_ranges():
    text = "\n".join(
        [
            "## Operators implemented by CUDAExecutionProvider",
            "|**Operator Domain:** *ai.onnx*||||",
            "|Pad|*in* data:**T**|18+|**T** = tensor(bool), tensor(float)|",
            "|||[13, 17]|**T** = tensor(float)<br/> **Tind** = tensor(int64)|",
            "|||10|**T** = tensor(double)|",
            "|**Operator Domain:** *com.microsoft*||||",
            "|Gelu|*in* X:**T**|1+|**T** = tensor(float)|",
        ]
    )
    parsed = generate.parse_markdown(text)
    assert parsed == {
        "CUDAExecutionProvider": {
            "Pad": [
                [18, None, {"T": ["tensor(bool)", "tensor(float)"]}],
                [13, 17, {"T": ["tensor(float)"], "Tind": ["tensor(int64)"]}],
                [10, 10, {"T": ["tensor(double)"]}],
            ]
        }
    }


@pytest.mark.parametrize(
    ("start", "end", "since", "matches"),
    [(13, None, 13, True), (13, None, 14, False), (6, 12, 12, True), (6, 12, 13, False)],
)
def test_version_rule(start, end, since, matches):
    assert placement.version_matches(start, end, since) is matches


def test_export_report_gains_a_cuda_placement_section(tmp_path):
    import torch

    from torch_onnx_conformance import exporter

    class PoolRelu(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.max_pool2d(torch.relu(x), 2) * 2

    program = exporter.export(
        PoolRelu().eval(),
        (torch.randn(1, 2, 4, 4),),
        opset_version=23,
        report=True,
        placement_provider="cuda",
        artifacts_dir=tmp_path,
    )
    text = program.report_path.read_text()
    section = text[text.index("## CUDA placement") :]
    assert section.splitlines()[2].startswith("**3 nodes, 1 on CPU, 2 Memcpy**")
    assert "(MaxPool-22)` | no kernel for version 22" in section
    with pytest.raises(ValueError, match="pass report=True"):
        exporter.export(PoolRelu().eval(), (torch.randn(1, 2, 4, 4),), placement_provider="cuda")


def test_local_functions_inlined_and_other_domains_named():
    fn = h.make_function(
        "local",
        "MyRelu",
        ["a"],
        ["b"],
        [h.make_node("Relu", ["a"], ["b"])],
        [h.make_opsetid("", 20)],
    )
    graph = h.make_graph(
        [
            h.make_node("MyRelu", ["x"], ["r"], domain="local", name="myrelu"),
            h.make_node("FusedMatMul", ["r", "r"], ["y"], domain="com.microsoft", name="fmm"),
        ],
        "g",
        [_x()],
        [_y()],
    )
    model = h.make_model(
        graph,
        opset_imports=[
            h.make_opsetid("", 20),
            h.make_opsetid("local", 1),
            h.make_opsetid("com.microsoft", 1),
        ],
        functions=[fn],
    )
    prediction = placement.predict(model, "cuda")
    assert [n.op_type for n in prediction.nodes] == ["Relu", "FusedMatMul"]
    reason = _cpu(prediction)[("fmm", "FusedMatMul")]
    assert "ai.onnx" in reason and "fails to load" not in reason


def test_exporter_does_not_import_the_harness():
    # The exporter's diagnostics (the placement prediction and the report's section with it)
    # stand alone: an installed exporter runs without conformance/ (ast, so no import runs).
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    importers = []
    for path in sorted((root / "torch_onnx_conformance" / "exporter").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            if any(n.split(".")[0] == "conformance" for n in names):
                importers.append(f"{path.relative_to(root)}:{node.lineno}")
    assert importers == []
    assert (
        root
        / "torch_onnx_conformance"
        / "exporter"
        / "diagnostics"
        / "placement_data"
        / "kernels.json"
    ).is_file()
