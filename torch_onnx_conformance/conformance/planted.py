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
import signal
import time
from collections.abc import Callable

PREFIX = "planted."
SLOW_S = 2.0
HUGE_ALLOCATION_BYTES = 40 * 10**9

PLANTED = {
    "pass": "a correct Abs graph: passes everywhere",
    "wrong": "a Neg graph where eager computes abs: fails at compare",
    "crash_export": "os.abort() in the exporter: crash at export",
    "crash_run": "os.abort() while onnxruntime runs: crash at run",
    "hang": "the exporter sleeps forever: timeout at export",
    "specialise": "fixed input shape although dynamic shapes were asked: fails at second-shape",
    "worker_crash": "os.abort() in the pytest worker itself: crash row from the xdist controller",
    "segfault": "a read of address 0 in the exporter: crash (SIGSEGV) at export",
    "sigkill": "the exporter SIGKILLs its own process: crash (SIGKILL) at export",
    "huge_alloc": "the exporter allocates 40 GB: crash (oom) at export under the per-case memory limit",
    "slow": f"the exporter sleeps {SLOW_S:g} s, then passes: a run to interrupt mid-way",
}
#: Planted faults the model cases of ``model_cases()`` carry (``planted/<fault>``).
MODEL_FAULTS = ("pass", "segfault", "sigkill", "huge_alloc", "hang", "slow")


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

    from torch_onnx_conformance.conformance.exporters import Exported

    if name == "crash_export":
        os.abort()
    plant_fault(name)
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


def plant_fault(name: str) -> None:
    """The faults op and model cases share, set off where the exporter runs."""
    if name == "hang":
        time.sleep(24 * 3600)
    elif name == "segfault":
        import ctypes

        ctypes.string_at(0)
    elif name == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif name == "huge_alloc":
        # bytearray zero-fills: without a memory limit every page is touched and the kernel's
        # OOM killer has to choose a victim.
        bytearray(HUGE_ALLOCATION_BYTES)
    elif name == "slow":
        time.sleep(SLOW_S)


def model_cases():
    """Planted model cases, for ``--model-cases torch_onnx_conformance/conformance/planted.py``: a small linear model
    whose export sets off one of ``MODEL_FAULTS`` (``planted/pass`` none)."""
    import torch

    from torch_onnx_conformance.model_zoo import ModelCase

    class FaultUnderExport(torch.nn.Module):
        def __init__(self, fault: str) -> None:
            super().__init__()
            self.fault = fault
            self.linear = torch.nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            from torch_onnx_conformance import exporter

            if exporter.is_in_onnx_export() or torch.onnx.is_in_onnx_export():
                plant_fault(self.fault)
            return self.linear(x)

    def module(fault: str):
        def make() -> torch.nn.Module:
            torch.manual_seed(0)
            return FaultUnderExport(fault)

        return make

    def inputs(sizes):
        generator = torch.Generator().manual_seed(sizes["batch"])
        return (torch.randn(sizes["batch"], 4, generator=generator),), {}

    return [
        ModelCase(
            f"planted/{fault}",
            "synthetic",
            "smoke",
            module(fault),
            inputs,
            sizes={"batch": 3},
            second_sizes={"batch": 5},
            dynamic_shapes=({0: "batch"},),
        )
        for fault in MODEL_FAULTS
    ]


def runtime_fault(name: str | None) -> Callable[[], None] | None:
    if name == "crash_run":
        return os.abort
    return None
