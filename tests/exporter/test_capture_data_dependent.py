"""Capture of functions whose checks read tensor data (torch_onnx_conformance/exporter/_capture_rewrites.py), the
with_effects translation and the in-place polygamma overload."""

from __future__ import annotations

import warnings

import numpy as np
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F

from torch_onnx_conformance import exporter
from torch_onnx_conformance.exporter._capture_rewrites import _corrcoef, _cov, _gaussian_nll_loss

AUTO = torch.export.Dim.AUTO


class Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def _run(program, args):
    session = ort.InferenceSession(
        program.model_proto.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    feeds = {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)}
    return [torch.from_numpy(np.asarray(o)) for o in session.run(None, feeds)]


def _check(fn, args, dynamic=False, second=None):
    # forward(*args): one dynamic_shapes entry, the tuple of every input's dims.
    dynamic_shapes = (
        (tuple({d: AUTO for d in range(a.dim()) if a.shape[d] >= 2} for a in args),)
        if dynamic
        else None
    )
    program = exporter.export(Fn(fn).eval(), args, dynamic_shapes=dynamic_shapes, optimize=False)
    for feed in [args] + ([second] if second is not None else []):
        expected = fn(*feed)
        expected = expected if isinstance(expected, tuple) else (expected,)
        got = _run(program, feed)
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert g.shape == e.shape and g.dtype == e.dtype
            torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5, equal_nan=True)
    return program


# ----------------------------------------------------------------- rewrites equal eager
@pytest.mark.parametrize("shape", [(5,), (1, 4), (3, 6), (4, 1), (2, 0)])
@pytest.mark.parametrize("correction", [0, 1, 2, 7])
def test_cov_rewrite_equals_torch_cov(shape, correction):
    torch.manual_seed(0)
    x = torch.randn(shape, dtype=torch.float64)
    n = x.shape[-1] if x.dim() else 1
    fw = torch.randint(0, 4, (n,))
    aw = torch.rand(n, dtype=torch.float64)
    cases = [{}, {"fweights": fw}, {"aweights": aw}, {"fweights": fw, "aweights": aw}]
    for kwargs in cases:
        if n == 0 and kwargs:
            continue  # weights of an empty input sum to zero: torch raises
        with warnings.catch_warnings():
            # torch.cov warns about non-positive degrees of freedom; the rewrite does not.
            warnings.simplefilter("ignore")
            expected = torch.cov(x, correction=correction, **kwargs)
        got = _cov(x, correction=correction, **kwargs)
        torch.testing.assert_close(got, expected, equal_nan=True)


@pytest.mark.parametrize("shape", [(5,), (1, 4), (3, 6), (2, 2)])
def test_corrcoef_rewrite_equals_torch(shape):
    torch.manual_seed(1)
    x = torch.randn(shape, dtype=torch.float64)
    torch.testing.assert_close(_corrcoef(x), torch.corrcoef(x), equal_nan=True)


def test_gaussian_nll_rewrite_equals_functional():
    torch.manual_seed(2)
    x, t = torch.randn(4, 3), torch.randn(4, 3)
    for var in (torch.rand(4, 3), torch.rand(4, 1), torch.rand(4), torch.rand(())):
        if var.dim() == 0:
            continue  # F's size check rejects a 0-d var against (4, 3), both do
        for reduction in ("none", "mean", "sum"):
            for full in (False, True):
                torch.testing.assert_close(
                    _gaussian_nll_loss(x, t, var, full=full, reduction=reduction),
                    F.gaussian_nll_loss(x, t, var, full=full, reduction=reduction),
                )


def test_rewrite_keeps_eager_data_checks():
    with pytest.raises(RuntimeError, match="negative"):
        _gaussian_nll_loss(torch.ones(3), torch.ones(3), -torch.ones(3))
    with pytest.raises(RuntimeError, match="negative"):
        _cov(torch.ones(2, 3), fweights=torch.tensor([1, -1, 1]))


# ------------------------------------------------------------------ export end to end
@pytest.mark.parametrize("dynamic", [False, True])
def test_cov_exports(dynamic):
    x = torch.randn(3, 5)
    _check(torch.cov, (x,), dynamic, second=(torch.randn(4, 7),) if dynamic else None)


@pytest.mark.parametrize("dynamic", [False, True])
def test_corrcoef_exports(dynamic):
    x = torch.randn(3, 5)
    _check(torch.corrcoef, (x,), dynamic, second=(torch.randn(4, 6),) if dynamic else None)


def test_cov_with_weights_exports():
    x = torch.randn(3, 5)
    fw, aw = torch.tensor([1, 2, 0, 3, 1]), torch.rand(5)
    _check(lambda a, f, w: torch.cov(a, correction=1, fweights=f, aweights=w), (x, fw, aw))


def test_single_observation_cov_is_inf_like_eager():
    _check(torch.cov, (torch.randn(2, 1),))


@pytest.mark.parametrize("dynamic", [False, True])
def test_gaussian_nll_loss_exports(dynamic):
    args = (torch.randn(4, 5), torch.randn(4, 5), torch.rand(4, 1) + 0.1)
    second = (torch.randn(6, 7), torch.randn(6, 7), torch.rand(6, 1) + 0.1)
    _check(lambda a, b, v: F.gaussian_nll_loss(a, b, v), args, dynamic, second if dynamic else None)


@pytest.mark.parametrize("dynamic", [False, True])
def test_narrow_with_tensor_start_exports(dynamic):
    x = torch.randn(5, 6, 5)
    program = _check(
        lambda a, s: torch.narrow(a, 1, s, 2),
        (x, torch.tensor(3)),
        dynamic,
        second=(torch.randn(6, 8, 7), torch.tensor(-4)) if dynamic else None,
    )
    assert program is not None


def test_tensor_split_by_tensor_section_count_stays_a_capture_error():
    # The number of outputs would depend on the tensor's value: nothing to export.
    with pytest.raises(exporter.OnnxExporterError):
        exporter.export(
            Fn(lambda a, s: torch.tensor_split(a, s)).eval(), (torch.randn(5), torch.tensor(2))
        )


def test_rewrites_are_inactive_outside_capture():
    from torch.overrides import _get_current_function_mode_stack

    exporter.export(Fn(torch.cov).eval(), (torch.randn(2, 3),), optimize=False)
    assert not any(
        type(m).__name__ == "DataDependentRewrites" for m in _get_current_function_mode_stack()
    )


# ------------------------------------------- the rewrites only where a rewritten call was made
def _targets(program) -> list:
    return [n.target for n in program.graph.nodes if n.op == "call_function"]


def test_a_capture_that_calls_no_rewritten_function_runs_without_the_rewrites(monkeypatch):
    import torch_onnx_conformance.exporter._capture_rewrites as rewrites

    entered = []
    real = rewrites.data_dependent_rewrites
    monkeypatch.setattr(rewrites, "data_dependent_rewrites", lambda: entered.append(1) or real())
    program = exporter.export(Fn(lambda a: torch.narrow(a, 0, 1, 2) * 2), (torch.randn(4, 3),))
    # narrow with an int start: a rewritten function's name, so the rewrites run after all
    assert len(entered) == 1
    assert len(program.record.capture_attempts) == 1
    entered.clear()
    exporter.export(Fn(lambda a: a.relu() * 2), (torch.randn(4, 3),))
    assert entered == []


def test_a_call_that_captures_without_the_rewrites_still_gets_them():
    # A constant tensor start: torch.export captures narrow.Tensor as it is; the rewrite reads
    # the start with item(), which makes narrow.default. The export keeps the rewrite's.
    fn = Fn(lambda a: a.narrow(0, torch.tensor(1), 2) * 2)
    x = torch.randn(4, 3)
    bare = torch.export.export(fn, (x,), strict=False)
    assert torch.ops.aten.narrow.Tensor in _targets(bare)
    program = exporter.export(fn, (x,))
    captured = _targets(program.record.captured_program)
    assert torch.ops.aten.narrow.default in captured
    assert torch.ops.aten.narrow.Tensor not in captured
    torch.testing.assert_close(_run(program, (x,))[0], fn(x))


@pytest.mark.parametrize(
    "fn",
    [
        lambda a: a.narrow(0, torch.tensor(1), 2),
        lambda a: torch.narrow(a, 0, 1, 2),
        lambda a: F.gaussian_nll_loss(a, a, 1.0),
        lambda a: torch.cond(
            a.sum() > 0, lambda b: b.narrow(0, 0, 2) * 2, lambda b: b[:2] + 1, (a,)
        ),
    ],
    ids=["method", "function", "functional", "in-a-cond-branch"],
)
def test_torch_export_names_the_function_each_node_came_from(fn):
    # calls_rewritten reads torch.export's torch_fn node metadata: a torch that stopped
    # recording it would make every capture skip the rewrites.
    from torch_onnx_conformance.exporter._capture_rewrites import calls_rewritten

    program = torch.export.export(Fn(fn), (torch.randn(4, 3),), strict=False)
    assert calls_rewritten(program)
    assert not calls_rewritten(torch.export.export(Fn(torch.relu), (torch.randn(2),)))


# ----------------------------------------------------------------------- with_effects
@pytest.mark.parametrize("dynamic", [False, True])
def test_tensorinv_with_effects_token_is_dropped(dynamic):
    x = (torch.randn(6, 6) + 3 * torch.eye(6)).reshape(2, 3, 6)
    program = _check(lambda a: torch.linalg.tensorinv(a, 2), (x,), dynamic)
    assert [v.name for v in program.model.graph.inputs] and len(program.model.graph.inputs) == 1


# --------------------------------------------------------------------- polygamma_
@pytest.mark.parametrize("n", [0, 1, 3])
def test_inplace_polygamma_gets_order_and_input_right(n):
    x = torch.rand(4, 3) + 0.5
    _check(lambda a: a.clone().polygamma_(n), (x,))
