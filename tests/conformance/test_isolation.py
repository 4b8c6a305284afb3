"""When a reused op-case child is replaced: by its memory where /proc tells it, by a count
of cases where not."""

from __future__ import annotations

import os
import types

import pytest

from torch_onnx_conformance.conformance import isolation
from torch_onnx_conformance.conformance.limits import MEMORY_ENV


def test_data_bytes_reads_a_live_process_and_none_for_a_gone_one():
    own = isolation.data_bytes(os.getpid())
    if own is None:
        pytest.skip("no /proc/PID/status on this platform")
    assert own > 10 * 2**20  # this interpreter has imported pytest and more
    assert isolation.data_bytes(2**22 + 12345) is None  # beyond the kernel's largest pid


@pytest.mark.parametrize(
    ("environ", "budget"),
    [
        ({MEMORY_ENV: "6G"}, 3 * 2**30),
        ({MEMORY_ENV: "none"}, isolation.CHILD_MEMORY_WITHOUT_CEILING),
    ],
)
def test_the_budget_is_a_share_of_the_case_ceiling(environ, budget):
    assert isolation.child_memory_budget(environ) == budget


def _child(monkeypatch, used: int | None, cases_run: int) -> isolation.CaseChild:
    monkeypatch.setenv(MEMORY_ENV, "4G")  # a budget of 2 GiB
    monkeypatch.setattr(isolation, "data_bytes", lambda pid: used)
    child = isolation.CaseChild()
    child._process = types.SimpleNamespace(pid=1)
    child._cases_run = cases_run
    return child


@pytest.mark.parametrize(
    ("used", "cases_run", "replaced"),
    [
        (1 * 2**30, 10_000, False),  # memory decides, not the count
        (3 * 2**30, 1, True),
        (None, isolation.CASES_PER_CHILD - 1, False),  # memory unknown: the count decides
        (None, isolation.CASES_PER_CHILD, True),
    ],
)
def test_a_child_is_replaced_when_it_outgrows_its_budget(monkeypatch, used, cases_run, replaced):
    assert _child(monkeypatch, used, cases_run)._outgrown() is replaced


def test_the_in_flight_marker_is_rewritten_in_place_and_read_back(tmp_path, monkeypatch):
    from torch_onnx_conformance.conformance import runs
    from torch_onnx_conformance.conformance.plugin import CaseRuntime

    monkeypatch.setenv(runs.RUN_ID_ENV, "run-1")
    runtime = CaseRuntime(types.SimpleNamespace(results=tmp_path), worker="gw0")
    case = types.SimpleNamespace(id="op::abs::s000::f32::static::opset20::cpu::ours")
    runtime._mark_inflight(case, "export", {"a long fact": "x" * 200})
    runtime._mark_inflight(case, "compare", {})  # shorter: padded, never truncated
    path = runtime.inflight
    assert path.stat().st_size > len(path.read_text().strip())
    assert runtime._inflight_stage() == "compare"
    # The controller's view of a dead worker: its stage while the case ran, export otherwise.
    assert CaseRuntime(runtime.options, worker="gw0")._take_inflight(case.id) == ("compare", {})
    runtime.close()
    idle = CaseRuntime(runtime.options, worker="gw0")
    idle._mark_inflight(case, "run", {})
    idle._write_inflight({"id": None})
    assert idle._take_inflight(case.id) == ("export", None)
    idle.close()
