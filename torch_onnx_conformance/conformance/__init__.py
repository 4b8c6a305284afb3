"""The conformance suite: OpInfo-driven per-op cases and zoo-model cases, run as a pytest plugin.

``python -m torch_onnx_conformance run [pytest args]`` runs the suite and builds the reports;
``python -m torch_onnx_conformance repro CASE_ID`` re-runs one case and rebuilds its repro directory.
"""

# The case kinds: each module registers its row of ``conformance.case.KINDS`` when imported, so
# the table is full wherever the package is used. A new kind is one module and one import here;
# the order of the imports is the table's (options, proposals), so it is kept as written.
# isort: off
from torch_onnx_conformance.conformance import op_cases  # noqa: E402, F401
from torch_onnx_conformance.conformance import model_cases  # noqa: E402, F401

# isort: on
