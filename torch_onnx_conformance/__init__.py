"""torch-onnx-conformance: a torch.export-based PyTorch-to-ONNX exporter and its conformance suite.

The import names live under this one package, so folders of a user's own named ``exporter/``,
``conformance/``, ``reports/`` or ``model_zoo/`` never shadow them:

- ``torch_onnx_conformance.exporter``: the exporter (``from torch_onnx_conformance import
  exporter``; ``exporter.export(model, args)``);
- ``torch_onnx_conformance.conformance``: the conformance harness
  (``python -m torch_onnx_conformance run``, or the ``onnx-conformance`` console script);
- ``torch_onnx_conformance.model_zoo``: the model cases;
- ``torch_onnx_conformance.reports``: the report builder
  (``python -m torch_onnx_conformance.reports build``).

Importing this package imports nothing else (no torch).
"""
