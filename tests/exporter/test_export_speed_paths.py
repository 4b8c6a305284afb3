"""The export's fast paths do what the slow ones did: ``aten.diff`` translated (not decomposed)
and matching eager, programs of registered ops skipping ``run_decompositions``, and the heavy
libraries left unimported until an export needs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.op_check import check_op, dims, dynamic, tensor_maker
from torch_onnx_conformance import exporter
from torch_onnx_conformance.exporter import _decompose

r = tensor_maker(low=-3, high=3)
torch.manual_seed(0)

DIFF_CASES = [
    ("n1_last", lambda x: torch.diff(x), (r(3, 6),), (r(4, 9),)),
    ("n2_dim0", lambda x: torch.diff(x, n=2, dim=0), (r(5, 3),), (r(7, 2),)),
    ("n_past_length", lambda x: torch.diff(x, n=4, dim=1), (r(2, 3),), None),
    ("n0", lambda x: torch.diff(x, n=0), (r(2, 3),), None),
    (
        "n0_ignores_prepend_append",
        lambda x, p, a: torch.diff(x, n=0, dim=0, prepend=p, append=a),
        (r(5, 5), r(1, 5), r(2, 5)),
        None,
    ),
    (
        "prepend_append",
        lambda x, p, a: torch.diff(x, dim=1, prepend=p, append=a),
        (r(3, 4), r(3, 1), r(3, 2)),
        None,
    ),
    (
        "prepend_int_into_float",
        lambda x, p: torch.diff(x, prepend=p),
        (r(2, 4), r(2, 1).int()),
        None,
    ),
    (
        "int64",
        lambda x: torch.diff(x, n=2),
        (r(3, 5, dtype=torch.int64),),
        (r(2, 8, dtype=torch.int64),),
    ),
    ("bool_is_xor", lambda x: torch.diff(x, dim=0), (r(4, 3, dtype=torch.bool),), None),
    ("f16", lambda x: torch.diff(x), (r(3, 6, dtype=torch.float16),), None),
]


@pytest.mark.parametrize(
    ("fn", "args", "second"),
    [pytest.param(fn, args, second, id=name) for name, fn, args, second in DIFF_CASES],
)
def test_diff_matches_eager_without_decomposition(fn, args, second):
    program = check_op(fn, args)
    assert program.record.decomposition_reason is None
    targets = {node.target for node in program.exported_program.graph.nodes}
    assert torch.ops.aten.diff.default in targets  # translated whole, not lowered
    if second is not None:
        check_op(fn, args, dynamic_shapes=dynamic(*args), second_args=second)


def test_diff_with_a_dynamic_prepend_matches_eager():
    fn = next(case[1] for case in DIFF_CASES if case[0] == "prepend_append")
    x, p, a = r(3, 4), r(3, 1), r(3, 2)
    check_op(
        fn,
        (x, p, a),
        dynamic_shapes=dims({0: "rows", 1: "cols"}, {0: "rows"}, {0: "rows"}),
        second_args=(r(5, 7), r(5, 1), r(5, 2)),
    )


class _RegisteredOpsOnly(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x @ x.T) + x.sum()


def test_a_program_of_registered_ops_never_calls_run_decompositions(monkeypatch):
    calls = []
    real = _decompose._run_decompositions
    monkeypatch.setattr(_decompose, "_run_decompositions", lambda *a: calls.append(a) or real(*a))
    program = exporter.export(_RegisteredOpsOnly(), (torch.randn(3, 3),))
    assert calls == []
    assert program.record.decomposition_reason is None


class _InPlaceDropoutHead(torch.nn.Module):
    """torchvision's classifier heads: flatten, then ``Dropout(inplace=True)``, then Linear."""

    def __init__(self):
        super().__init__()
        self.drop = torch.nn.Dropout(0.2, inplace=True)
        self.linear = torch.nn.Linear(8, 3)

    def forward(self, x):
        flat = torch.flatten(x, 1)
        return self.linear(self.drop(flat)) + flat.sum()


def test_an_eval_mode_in_place_dropout_forces_no_decomposition():
    x = torch.randn(2, 2, 4)
    program = check_op(_InPlaceDropoutHead().eval(), (x,))
    assert program.record.decomposition_reason is None


def test_a_training_mode_in_place_dropout_still_decomposes():
    program = exporter.export(_InPlaceDropoutHead().train(), (torch.randn(2, 2, 4),))
    assert "mutates" in program.record.decomposition_reason


_HEAVY = ("onnxruntime", "transformers", "torchvision", "onnxscript")

_IMPORTED_AFTER = """
import json, sys
from torch_onnx_conformance import exporter
seen = {"from torch_onnx_conformance import exporter": [m for m in HEAVY if m in sys.modules]}
import torch
exporter.export
seen["exporter.export"] = [m for m in HEAVY if m in sys.modules]
exporter.export(torch.nn.ReLU(), (torch.randn(2),), optimize=False)
seen["an unoptimized export"] = [m for m in HEAVY if m in sys.modules]
exporter.export(torch.nn.ReLU(), (torch.randn(2),))
seen["an optimized export"] = [m for m in HEAVY if m in sys.modules]
print(json.dumps(seen))
"""


def test_heavy_libraries_load_only_when_an_export_needs_them():
    completed = subprocess.run(
        [sys.executable, "-c", f"HEAVY = {_HEAVY!r}" + _IMPORTED_AFTER],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
        cwd=Path(__file__).resolve().parents[2],  # this checkout's exporter
    )
    seen = json.loads(completed.stdout.strip().splitlines()[-1])
    assert seen["from torch_onnx_conformance import exporter"] == []
    assert seen["exporter.export"] == []
    assert seen["an unoptimized export"] == []
    # The optimizer is onnxscript's; onnxruntime stays out until someone runs the model.
    assert seen["an optimized export"] == ["onnxscript"]


def test_a_llama_given_position_ids_translates_diff_and_skips_decomposition():
    """transformers' packed-sequence check runs ``torch.diff`` on ``position_ids``: with it
    translated, the decoder keeps off the whole-graph re-trace."""
    pytest.importorskip("transformers")
    from tests.exporter.test_kv_cache import _llama

    model = _llama()
    ids = torch.randint(0, model.config.vocab_size, (1, 8))
    positions = torch.arange(8).unsqueeze(0)
    kwargs = {"position_ids": positions, "use_cache": False}
    program = exporter.export(model, (ids,), kwargs=kwargs)
    captured = {node.target for node in program.record.captured_program.graph.nodes}
    assert torch.ops.aten.diff.default in captured
    assert program.record.decomposition_reason is None
    with torch.no_grad():
        expected = model(ids, **kwargs).logits
    got = torch.as_tensor(program(ids, **kwargs)[0])
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_capture_defers_the_code_of_graph_modules_nobody_runs(monkeypatch):
    """Non-strict capture leaves torch.export's intermediate graph modules lazy (their Python
    ``forward`` is generated when called): fewer code generations than torch.export alone
    makes, and the captured program still runs as the model does."""
    from torch.fx import graph_module

    compiled: list[str] = []
    real = graph_module._exec_with_source

    def counting(*args, **kwargs):
        compiled.append(args[0])
        return real(*args, **kwargs)

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 3)

        def forward(self, x):
            return torch.relu(self.linear(x)) * 2

    model, x = Model().eval(), torch.randn(2, 4)
    exporter.export(model, (x,))  # warm-up: torch's first-call code paths
    monkeypatch.setattr(graph_module, "_exec_with_source", counting)
    torch.export.export(model, (x,), strict=False)
    alone, compiled[:] = len(compiled), []
    program = exporter.export(model, (x,))
    assert len(compiled) < alone, (len(compiled), alone)
    torch.testing.assert_close(program.exported_program.module()(x), model(x))
