"""Planted cases: synthetic cases with a known fault, for testing the harness itself.

Selected with the hidden ``--planted NAME`` option; their op names start with ``planted.``. The
module is always ``abs`` of one float tensor, and the export is done by a fake exporter here that
writes the ONNX graph by hand, whatever exporter the case id names: the harness's tests must not
depend on any real exporter's coverage or speed. Each planted case fails in a known way at a known
stage, so the tests can check that a crash, a hang, a wrong result and a shape-specialising export
each end as their own result row.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

PREFIX = "planted."

PLANTED = {
    "pass": "a correct Abs graph: passes everywhere",
    "wrong": "a Neg graph where eager computes abs: fails at compare",
    "crash_export": "os.abort() in the exporter: crash at export",
    "crash_run": "os.abort() while onnxruntime runs: crash at run",
    "hang": "the exporter sleeps forever: timeout at export",
    "specialise": "fixed input shape although dynamic shapes were asked: fails at second-shape",
    "worker_crash": "os.abort() in the pytest worker itself: crash row from the xdist controller",
}


def planted_name(op: str) -> str | None:
    return op.removeprefix(PREFIX) if op.startswith(PREFIX) else None


def check_names(names: list[str]) -> list[str]:
    """Validate ``--planted`` values; ``all`` expands to every planted case."""
    if "all" in names:
        return list(PLANTED)
    unknown = [n for n in names if n not in PLANTED]
    if unknown:
        raise ValueError(f"unknown planted case(s) {unknown}; known: {', '.join(PLANTED)}, all")
    return names


def build_planted(name: str):
    """The module (eager ``abs``) and inputs of a planted case."""
    import torch

    class Abs(torch.nn.Module):
        def forward(self, *tensors):
            return (tensors[0].abs(),)

    return Abs(), (torch.linspace(-2.0, 2.0, 12).reshape(3, 4),)


def fake_export(name: str, inputs: tuple, *, dynamic: bool, opset: int):
    """The planted exporter: a hand-written one-node graph, or the planted fault."""
    import onnx
    from onnx import TensorProto, helper

    from conformance.exporters import Exported

    if name == "crash_export":
        os.abort()
    if name == "hang":
        time.sleep(24 * 3600)
    shape: list = list(inputs[0].shape)
    if dynamic and name != "specialise":
        shape = [f"input_0_dim{d}" if size >= 2 else size for d, size in enumerate(shape)]
    op_type = "Neg" if name == "wrong" else "Abs"
    graph = helper.make_graph(
        [helper.make_node(op_type, ["input_0"], ["output_0"])],
        f"planted_{name}",
        [helper.make_tensor_value_info("input_0", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("output_0", TensorProto.FLOAT, shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    onnx.checker.check_model(model)
    return Exported(model, ["input_0"])


def runtime_fault(name: str | None) -> Callable[[], None] | None:
    if name == "crash_run":
        return os.abort
    return None
