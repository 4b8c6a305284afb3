"""Helpers for op-level tests: export a tiny module with our exporter, run it, compare with eager."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import torch
from torch.utils import _pytree as pytree

import exporter


class Lambda(torch.nn.Module):
    """An nn.Module whose forward is ``fn(*tensors)``; non-tensor arguments are closed over."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any) -> Any:
        return self.fn(*args)


def _flat_outputs(out: Any) -> list[torch.Tensor]:
    leaves = [x for x in pytree.tree_leaves(out) if x is not None]
    result = []
    for x in leaves:
        x = torch.as_tensor(x)
        result.append(torch.view_as_real(x) if x.is_complex() else x)
    return result


def run_onnx(program: exporter.ONNXProgram, args: Sequence[Any]) -> list[np.ndarray]:
    proto = program.model_proto
    onnx.checker.check_model(proto, full_check=True)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(
        proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    flat = [a for a in pytree.tree_leaves(tuple(args)) if isinstance(a, torch.Tensor)]
    feeds = {i.name: t.detach().numpy() for i, t in zip(session.get_inputs(), flat)}
    return session.run(None, feeds)


def check_op(
    fn: Callable[..., Any] | torch.nn.Module,
    args: Sequence[Any],
    *,
    opset: int | None = None,
    dynamic_shapes: Any = None,
    second_args: Sequence[Any] | None = None,
    rtol: float = 1e-5,
    atol: float = 1e-5,
    compare_values: bool = True,
    optimize: bool = False,
) -> exporter.ONNXProgram:
    """Export ``fn`` at ``args`` and assert onnxruntime matches eager (and at ``second_args``)."""
    module = fn if isinstance(fn, torch.nn.Module) else Lambda(fn)
    module.eval()
    program = exporter.export(
        module, tuple(args), dynamic_shapes=dynamic_shapes, opset_version=opset, optimize=optimize
    )
    for inputs in [args] + ([second_args] if second_args is not None else []):
        expected = _flat_outputs(module(*inputs))
        got = run_onnx(program, inputs)
        assert len(got) == len(expected), f"{len(got)} outputs, expected {len(expected)}"
        for g, e in zip(got, expected):
            g = torch.from_numpy(np.asarray(g))
            assert tuple(g.shape) == tuple(e.shape), f"shape {tuple(g.shape)} != {tuple(e.shape)}"
            assert g.dtype == e.dtype, f"dtype {g.dtype} != {e.dtype}"
            if compare_values:
                torch.testing.assert_close(g, e, rtol=rtol, atol=atol, equal_nan=True)
    return program


def static_and_dynamic(cases):
    """pytest params from ``(name, fn, args, second_args)`` rows: every case static, and the
    cases with a second shape also dynamic, checked at that shape."""
    import pytest

    params = []
    for name, fn, args, second in cases:
        params.append(pytest.param(fn, args, None, id=f"{name}-static"))
        if second is not None:
            params.append(pytest.param(fn, args, second, id=f"{name}-dynamic"))
    return params
