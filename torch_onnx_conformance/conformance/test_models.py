"""The per-model conformance suite: one test function, the variety lives in the case data.

Each item is one zoo model x dtype x shape mode x opset x provider x exporter x optimize, with
an id such as ``model::torchvision/resnet18::f32::dynamic::opset20::cpu::ours::opt``; see
``torch_onnx_conformance/conformance/plugin.py`` for the options that select them and ``runner.py`` (``run_case``) and
``model_cases.py`` for what a case does.
"""


def test_model(model_case, conformance_runtime, record_property):
    conformance_runtime.run(model_case, record_property)
