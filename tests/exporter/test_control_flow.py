"""torch.cond -> If, while_loop -> Loop, scan -> Scan, each checked at two input sizes."""

from __future__ import annotations

import torch
from torch._higher_order_ops.scan import scan
from torch._higher_order_ops.while_loop import while_loop

from tests.op_check import check_op
from torch_onnx_conformance.exporter import _decompose


class Cond(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda t: torch.sigmoid(t) * 2.0, lambda t: t - 1.0, (x,))


class WhileLoop(torch.nn.Module):
    """Doubles x until its sum passes a limit; the trip count depends on the data."""

    def forward(self, x, limit):
        def cond_fn(i, y):
            return y.abs().sum() < limit.sum()

        def body_fn(i, y):
            return i + 1, y * 2.0

        return while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64), x))


class CumulativeScan(torch.nn.Module):
    def forward(self, init, xs):
        def combine(carry, x):
            nxt = carry * 0.5 + x
            return nxt, nxt + 1.0

        return scan(combine, init, xs)


def test_cond_both_branches_two_sizes():
    positive = torch.rand(4) + 0.1
    negative = -torch.rand(7) - 0.1
    check_op(Cond(), (positive,), dynamic_shapes=({0: "n"},), second_args=(negative,))
    check_op(Cond(), (negative,), dynamic_shapes=({0: "n"},), second_args=(positive,))


def test_while_loop_two_sizes():
    x = torch.rand(3) + 0.5
    check_op(
        WhileLoop(),
        (x, torch.tensor([40.0])),
        dynamic_shapes=({0: "n"}, None),
        second_args=(torch.rand(6) + 0.5, torch.tensor([500.0])),
    )


def test_scan_two_sizes():
    init, xs = torch.rand(3), torch.rand(5, 3)
    check_op(
        CumulativeScan(),
        (init, xs),
        dynamic_shapes=({0: "f"}, {0: "t", 1: "f"}),
        second_args=(torch.rand(4), torch.rand(9, 4)),
    )


class CondWithUntranslatedOp(torch.nn.Module):
    """binary_cross_entropy has no translation of its own: only its decomposition exports."""

    def forward(self, x, target):
        def loss(p, t):
            return torch.nn.functional.binary_cross_entropy(p, t, reduction="none")

        return torch.cond(x.sum() > 0, loss, lambda p, t: p - t, (torch.sigmoid(x), target))


def test_control_flow_alone_does_not_force_decomposition():
    for module, args in (
        (Cond(), (torch.rand(4),)),
        (WhileLoop(), (torch.rand(3) + 0.5, torch.tensor([40.0]))),
        (CumulativeScan(), (torch.rand(3), torch.rand(5, 3))),
    ):
        program = check_op(module, args)
        assert program.record.decomposition_reason is None, type(module).__name__


def test_untranslated_op_in_a_branch_still_decomposes(monkeypatch):
    retraces = []  # the op is decomposed alone, in its branch: the program is not re-traced
    monkeypatch.setattr(_decompose, "_run_decompositions", lambda *a: retraces.append(a))
    x, target = torch.rand(6) + 0.1, torch.rand(6)
    program = check_op(
        CondWithUntranslatedOp(),
        (x, target),
        dynamic_shapes=({0: "n"}, {0: "n"}),
        second_args=(-torch.rand(9) - 0.1, torch.rand(9)),
    )
    assert "binary_cross_entropy" in program.record.decomposition_reason
    assert retraces == []


class NoGradRegion(torch.nn.Module):
    """transformers computes its rotary tables under no_grad: torch.export keeps the block as a
    wrap_with_set_grad_enabled region."""

    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor(1.5))

    def forward(self, x):
        with torch.no_grad():
            table = torch.cos(x * 2.0)
        return x * self.scale + table


def test_no_grad_region_is_translated_in_place_without_decomposing():
    with torch.enable_grad():
        program = check_op(
            NoGradRegion(),
            (torch.rand(3, 4),),
            dynamic_shapes=({0: "n"},),
            second_args=(torch.rand(5, 4),),
        )
    targets = {str(n.target) for n in program.record.captured_program.graph.nodes}
    assert any("wrap_with_set_grad_enabled" in t for t in targets)
    assert program.record.decomposition_reason is None
