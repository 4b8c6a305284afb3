"""exporter._dtypes: the one torch <-> numpy conversion."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

from torch_onnx_conformance.exporter import _dtypes


def test_to_numpy_keeps_the_types_numpy_lacks_and_takes_plain_values():
    bf16 = _dtypes.to_numpy(torch.tensor([1.5, -2.0], dtype=torch.bfloat16))
    assert bf16.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(bf16.astype(np.float32), [1.5, -2.0])
    f8 = _dtypes.to_numpy(torch.tensor([0.5], dtype=torch.float8_e4m3fn))
    assert f8.dtype == ml_dtypes.float8_e4m3fn
    assert _dtypes.to_numpy(3).shape == () and _dtypes.to_numpy(3) == 3
    assert torch.equal(_dtypes.from_numpy(bf16), torch.tensor([1.5, -2.0], dtype=torch.bfloat16))


def test_graph_array_carries_complex_as_real_pairs():
    z = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64)
    pairs = _dtypes.graph_array(z)
    assert pairs.dtype == np.float32
    np.testing.assert_array_equal(pairs, [[1, 2], [3, -4]])
    np.testing.assert_array_equal(_dtypes.graph_array(torch.ones(2)), [1.0, 1.0])


def test_run_session_keeps_0d_inputs_0d_on_the_bfloat16_path():
    """bfloat16 feeds go to onnxruntime as OrtValues; a 0-d one (and a 0-d float beside it)
    stays 0-d, as eager's would, instead of arriving as shape [1]."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    bf16, f32 = TensorProto.BFLOAT16, TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["x_out"]), helper.make_node("Neg", ["y"], ["y_out"])],
        "scalars",
        [helper.make_tensor_value_info("x", bf16, []), helper.make_tensor_value_info("y", f32, [])],
        [
            helper.make_tensor_value_info("x_out", bf16, None),
            helper.make_tensor_value_info("y_out", f32, None),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10)
    session = ort.InferenceSession(
        model.SerializeToString(),
        providers=["CPUExecutionProvider"],
    )
    x, y = torch.tensor(1.5, dtype=torch.bfloat16), torch.tensor(3.0)
    feeds = {"x": _dtypes.to_numpy(x), "y": _dtypes.to_numpy(y)}
    x_out, y_out = _dtypes.run_session(session, feeds)
    assert x_out.shape == () and x_out.dtype == torch.bfloat16 and torch.equal(x_out, x)
    assert y_out.shape == () and torch.equal(y_out, -y)
