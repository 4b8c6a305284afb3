"""The special functions whose fixed recurrences run as ONNX Loops (torch_onnx_conformance/exporter/
ops/special.py): the incomplete gamma functions against torch.special.gammainc/gammaincc on a grid
(both sides of the series/fraction switch at x = a + 1, small and large arguments, the special
points 0, inf, nan and negative, broadcasting shapes, float32 and float64 inputs), and zeta,
polygamma, digamma and the Bessel functions on broadcasting shapes, where a Loop's carried
states must keep one shape. Values elsewhere: test_special.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tests.op_check import Lambda, op_types, run_onnx
from torch_onnx_conformance import exporter
from torch_onnx_conformance.conformance.op_cases import OP_TOLERANCES_PATH
from torch_onnx_conformance.exporter.diagnostics.compare import compare_arrays, load_policy

NAN, INF = math.nan, math.inf
POINTS = [0.0, -0.0, 1e-8, 0.3, 0.5, 1.0, 1.5, 2.0, 3.0, 9.5, 10.0, 11.0, 30.0, 31.0]
POINTS += [99.0, 100.0, 101.0, INF, -INF, NAN, -1.0, -0.5]


def _grid() -> tuple[torch.Tensor, torch.Tensor]:
    """Every pair of POINTS, then random pairs on both sides of x = a + 1 (float64)."""
    pts = torch.tensor(POINTS, dtype=torch.float64)
    a, x = (t.reshape(-1) for t in torch.meshgrid(pts, pts, indexing="ij"))
    # torch answers x == 0 and x == inf (and x == nan at a == inf) before it looks at a NaN
    # argument; the translation's NaN rule comes last, so those pairs give NaN there.
    torch_first = (a.isnan() & ((x == 0) | x.isinf())) | (a.isinf() & x.isnan())
    a, x = a[~torch_first], x[~torch_first]
    g = torch.Generator().manual_seed(0)
    # a up to ~150: far above that, 60 steps of the series leave x just below a unconverged.
    ra = torch.exp(torch.rand(600, generator=g, dtype=torch.float64) * 12 - 7)
    rx = ra * (0.2 + 1.8 * torch.rand(600, generator=g, dtype=torch.float64))
    edge = torch.exp(torch.rand(100, generator=g, dtype=torch.float64) * 9 - 4)
    return torch.cat([a, ra, edge, edge]), torch.cat([x, rx, edge + 1, edge + 0.999])


def _tolerance() -> tuple[float, float]:
    # The op cases' float32 rule (tolerances.toml). The translation computes in float64 to meet
    # float32 at that rule; the op cases have no float64 table, so float64 inputs are held to it
    # too (60 fixed steps are not float64-exact for a in the hundreds).
    tolerance = load_policy(OP_TOLERANCES_PATH).tolerance("igamma", "f32")
    return tolerance.rtol, tolerance.atol


def _check(fn, a: torch.Tensor, x: torch.Tensor) -> exporter.ONNXProgram:
    module = Lambda(fn).eval()
    program = exporter.export(module, (a, x))
    (got,) = run_onnx(program, (a, x))
    want = fn(a, x).numpy()
    assert got.dtype == want.dtype and got.shape == want.shape
    rtol, atol = _tolerance()
    result = compare_arrays(want, got, rtol=rtol, atol=atol)
    assert result.ok, result.message
    return program


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("fn", [torch.special.gammainc, torch.special.gammaincc])
def test_grid_matches_torch_with_one_loop(fn, dtype):
    a, x = _grid()
    program = _check(fn, a.to(dtype), x.to(dtype))
    # Both 60-step recurrences are one Loop, not thousands of unrolled nodes.
    assert op_types(program).count("Loop") == 1
    assert len(op_types(program)) < 300
    # Both regimes were exercised.
    assert np.any((x < a + 1).numpy() & (a > 0).numpy()) and np.any((x > a + 1).numpy())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("fn", [torch.special.gammainc, torch.special.gammaincc])
def test_broadcasting_shapes(fn, dtype):
    g = torch.Generator().manual_seed(1)
    a = torch.rand(5, 1, generator=g, dtype=torch.float64) * 8
    x = torch.rand(1, 7, generator=g, dtype=torch.float64) * 12
    _check(fn, a.to(dtype), x.to(dtype))
    _check(fn, torch.tensor(2.5, dtype=dtype), (x.reshape(7, 1) * a.reshape(1, 5)).to(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    "fn",
    [
        torch.special.i0,
        torch.special.i0e,
        torch.special.i1,
        torch.special.i1e,
        torch.digamma,
        lambda t: torch.polygamma(2, t),
    ],
    ids=["i0", "i0e", "i1", "i1e", "digamma", "polygamma2"],
)
def test_series_loops_on_broadcasting_shapes(fn, dtype):
    g = torch.Generator().manual_seed(2)
    s = torch.rand(4, 1, generator=g, dtype=torch.float64) * 6 + 1.1
    q = torch.rand(1, 9, generator=g, dtype=torch.float64) * 17 - 5  # |s q| < 85: finite i0
    program = _check(lambda a, x: fn(a * x), s.to(dtype), q.to(dtype))
    assert "Loop" in op_types(program)
    # zeta's two Loops carry s, q and their broadcast: here of three different shapes.
    zeta = torch.special.zeta
    assert op_types(_check(zeta, s.to(dtype), q.to(dtype))).count("Loop") == 2
    _check(zeta, torch.tensor(3.0, dtype=dtype), q.to(dtype))
