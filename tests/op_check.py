"""Helpers for op-level tests: export a tiny module with our exporter, run it, compare with eager."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch.utils import _pytree as pytree

from torch_onnx_conformance import exporter


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
    params = []
    for name, fn, args, second in cases:
        params.append(pytest.param(fn, args, None, id=f"{name}-static"))
        if second is not None:
            params.append(pytest.param(fn, args, second, id=f"{name}-dynamic"))
    return params


DYN = torch.export.Dim.DYNAMIC


def dynamic(*tensors: torch.Tensor, dim: Any = DYN) -> tuple:
    """dynamic_shapes for a check_op call: every dim of size >= 2 of every tensor is ``dim``.

    torch.export specialises sizes 0 and 1 anyway; the specs are nested one level because the
    Lambda wrapper's forward takes ``*args``.
    """
    return (tuple({d: dim for d in range(t.dim()) if t.shape[d] >= 2} for t in tensors),)


def dims(*specs: Any) -> tuple:
    """dynamic_shapes for a check_op call, one spec (dict or None) per tensor."""
    return (tuple(specs),)


def op_types(program: exporter.ONNXProgram) -> list[str]:
    """The op types of the exported graph's top-level nodes, in order."""
    return [n.op_type for n in program.model.graph]


def case_params(cases: Sequence[tuple]) -> list:
    """(fn, args, second, shapes) params from (name, fn, args, second) cases: every case static,
    and dynamic where it has a second input set (exported once, checked at both shapes)."""
    params = []
    for name, fn, args, second in cases:
        params.append(pytest.param(fn, args, None, "static", id=f"{name}-static"))
        if second is not None:
            params.append(pytest.param(fn, args, second, "dynamic", id=f"{name}-dynamic"))
    return params


def tensor_maker(
    *,
    scale: float = 1.0,
    low: int = -5,
    high: int = 5,
    seed_stride: int | None = None,
    seed_counts_rank: bool = False,
    unsigned_headroom: int | None = None,
) -> Callable[..., torch.Tensor]:
    """An ``r(*shape, dtype=..., low=..., high=..., seed=...)`` input maker for one test file.

    Each op test file draws its inputs its own way and its tolerances were tuned on those values,
    so the one maker takes the differences as parameters instead of re-drawing everyone's data:
    - ``seed_stride=None`` draws from torch's global generator (the file seeds it once at import)
      directly in the requested dtype;
    - otherwise every call seeds a private generator with
      ``seed + seed_stride * sum(shape) (+ len(shape) if seed_counts_rank)``, so a tensor does not
      depend on which tests ran before it, and draws float32 before casting, so a dtype sweep
      sees the same values;
    - floats are standard normal times ``scale``, bools fair coins, integers uniform in
      ``[low, high)``; with ``unsigned_headroom`` uint8 draws from ``[0, high + headroom)``
      instead, as its negative half would wrap.
    """

    def r(
        *shape: int,
        dtype: torch.dtype = torch.float32,
        low: int = low,
        high: int = high,
        seed: int = 0,
    ) -> torch.Tensor:
        generator = None
        if seed_stride is not None:
            offset = seed_stride * sum(shape) + (len(shape) if seed_counts_rank else 0)
            generator = torch.Generator().manual_seed(seed + offset)
        if dtype.is_floating_point:
            if generator is None:
                return torch.randn(shape, dtype=dtype) * scale
            return (torch.randn(shape, generator=generator) * scale).to(dtype)
        if dtype is torch.bool:
            return torch.rand(shape, generator=generator) > 0.5
        if dtype is torch.uint8 and unsigned_headroom is not None:
            low, high = 0, high + unsigned_headroom
        return torch.randint(low, high, shape, dtype=dtype, generator=generator)

    return r
