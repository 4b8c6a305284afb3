"""``python -m torch_onnx_conformance run|repro|placement ...``: the conformance command line
(the ``onnx-conformance`` console script), see ``torch_onnx_conformance/conformance/__main__.py``."""

import sys

from torch_onnx_conformance.conformance.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
