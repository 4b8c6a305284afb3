"""An op without a translation is decomposed alone, in place: the rest of the program is never
re-traced (``run_decompositions`` is not called), and the export still matches eager."""

from __future__ import annotations

import pytest
import torch

from tests.exporter.test_custom_ops import Experts
from tests.op_check import check_op, dims
from torch_onnx_conformance import exporter
from torch_onnx_conformance.exporter import _decompose


@pytest.fixture
def retraces(monkeypatch):
    """The calls of the whole-program re-trace made while the test runs."""
    calls = []
    real = _decompose._run_decompositions
    monkeypatch.setattr(_decompose, "_run_decompositions", lambda *a: calls.append(a) or real(*a))
    return calls


class _MseHead(torch.nn.Module):
    """``mse_loss`` (no translation) between translated ops, reading a dynamic dim."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x, y):
        loss = torch.nn.functional.mse_loss(self.linear(x), y, reduction="none")
        mean = torch.nn.functional.mse_loss(x, y)
        return loss.relu() * x.shape[0], mean


def _targets(program: torch.export.ExportedProgram) -> set:
    return {node.target for node in program.graph.nodes if node.op == "call_function"}


def test_one_untranslated_op_is_decomposed_alone(retraces):
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    program = check_op(
        _MseHead(),
        (x, y),
        dynamic_shapes=({0: "n"}, {0: "n"}),
        second_args=(torch.randn(5, 4), torch.randn(5, 4)),
    )
    assert retraces == []
    assert "aten.mse_loss.default has no translation" in program.record.decomposition_reason
    # the record keeps the program as captured; the translated one holds the decomposition
    assert torch.ops.aten.mse_loss.default in _targets(program.record.captured_program)
    translated = program.exported_program
    assert torch.ops.aten.mse_loss.default not in _targets(translated)
    assert torch.ops.aten.linear.default in _targets(translated)  # the rest as captured
    subs = [n for n in translated.graph.nodes if n.target == torch.ops.aten.sub.Tensor]
    assert subs, "mse_loss lowers to a subtraction"
    for node in subs:  # the new nodes keep where they came from
        assert "mse_loss" in node.meta["stack_trace"]
        assert node.meta["val"].shape[1] == 4


def test_custom_op_is_traced_alone_through_its_implementation(retraces):
    model, x = Experts().eval(), torch.randn(6, 4)
    program = exporter.export(model, (x,), dynamic_shapes=({0: "tokens"},))
    assert retraces == []
    assert any(n.startswith("traced custom op customtest") for n in program.record.notes)
    with torch.no_grad():
        for rows in (6, 9):
            x = torch.randn(rows, 4)
            torch.testing.assert_close(program(x)[0], model(x), rtol=1e-5, atol=1e-5)


@torch.library.custom_op("localdecomp::scaled_by_table", mutates_args=())
def scaled_by_table(x: torch.Tensor) -> torch.Tensor:
    # a constant made inside the implementation: the trace holds it as a tensor attribute
    return x * torch.tensor([1.0, -2.0, 0.5])


@scaled_by_table.register_fake
def _(x):
    return torch.empty_like(x)


def test_a_constant_made_by_the_decomposition_is_carried(retraces):
    check_op(
        lambda x: torch.ops.localdecomp.scaled_by_table(x) + 1.0,
        (torch.randn(2, 3),),
        dynamic_shapes=dims({0: "n"}),
        second_args=(torch.randn(4, 3),),
    )
    assert retraces == []


class _AliasedWriteAndNoTranslation(torch.nn.Module):
    """A write seen through an alias taken before it: no local rewrite is sound."""

    def forward(self, x, y):
        z = x * 1
        first = z[0]
        z[0:2].fill_(3.0)
        return torch.nn.functional.mse_loss(first + z, y, reduction="none")


def test_a_write_that_cannot_be_rewritten_still_re_traces_the_program(retraces):
    x, y = torch.randn(4, 3), torch.randn(4, 3)
    program = exporter.export(_AliasedWriteAndNoTranslation(), (x, y))
    assert len(retraces) == 1
    expected = _AliasedWriteAndNoTranslation()(x, y)
    torch.testing.assert_close(torch.as_tensor(program(x, y)[0]), expected)


@torch.library.custom_op("localdecomp::low_and_high", mutates_args=())
def low_and_high(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x.amin(-1), x.amax(-1) * 2


@low_and_high.register_fake
def _(x):
    return x.new_empty(x.shape[:-1]), x.new_empty(x.shape[:-1])


def test_an_op_with_several_outputs_is_replaced_output_by_output(retraces):
    def spread(x):
        low, high = torch.ops.localdecomp.low_and_high(x)
        return high - low, low

    check_op(
        spread,
        (torch.randn(3, 5),),
        dynamic_shapes=dims({0: "n"}),
        second_args=(torch.randn(6, 5),),
    )
    assert retraces == []


class _TensorSolve(torch.nn.Module):
    def forward(self, a, b):
        return torch.linalg.tensorsolve(a, b)


def test_a_decompositions_unread_outputs_and_checks_are_dropped(retraces):
    """tensorsolve decomposes to _linalg_solve_ex, whose info output only feeds
    _linalg_check_errors (a check ONNX has no equivalent of): both go, so the solve exports."""
    a = torch.randn(2, 3, 6) + 4 * torch.eye(6).reshape(2, 3, 6)
    program = check_op(_TensorSolve(), (a, torch.randn(2, 3)))
    assert retraces == []
    targets = _targets(program.exported_program)
    assert torch.ops.aten._linalg_solve_ex.default in targets
    assert torch.ops.aten._linalg_check_errors.default not in targets


class _CartesianProduct(torch.nn.Module):
    def forward(self, x, y):
        return torch.cartesian_prod(x, y)


def test_an_op_the_table_cannot_decompose_falls_back_to_the_re_trace(retraces):
    """cartesian_prod has no entry in the exporter's table (run_decompositions decomposes it as
    a CompositeImplicitAutograd op): the whole program is re-traced rather than left
    untranslated."""
    check_op(_CartesianProduct(), (torch.randn(3), torch.randn(4)))
    assert len(retraces) == 1
