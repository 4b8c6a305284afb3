"""The per-op conformance suite: one test function, the variety lives in the case data.

Each item is one OpInfo sample x dtype x shape mode x opset x provider x exporter; see
``torch_onnx_conformance/conformance/plugin.py`` for the options that select them.
"""


def test_op(op_case, conformance_runtime, record_property):
    conformance_runtime.run(op_case, record_property)
