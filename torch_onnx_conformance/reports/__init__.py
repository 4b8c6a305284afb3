"""Reports built from conformance result rows: markdown and charts (pytest writes the JUnit XML).

Every report is a pure function of the rows; ``reports.build`` is the only module that writes.
matplotlib loads only when a chart is drawn.
"""

from torch_onnx_conformance.reports.build import build_from_paths, build_reports, render_markdown
from torch_onnx_conformance.reports.rows import CaseResult, append_row, finished_ids, read_rows
from torch_onnx_conformance.reports.signatures import normalise_error

__all__ = [
    "CaseResult",
    "append_row",
    "build_from_paths",
    "build_reports",
    "finished_ids",
    "normalise_error",
    "read_rows",
    "render_markdown",
]
