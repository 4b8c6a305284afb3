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
