"""The progress line of long runs: done/total, rate, elapsed and ETA every N cases or T s."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from torch_onnx_conformance.conformance.progress import Progress, format_duration

ROOT = Path(__file__).resolve().parents[2]


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_line_every_n_cases_with_rate_and_eta():
    clock, lines = Clock(), []
    progress = Progress(every_cases=2, every_seconds=0, write=lines.append, clock=clock)
    progress.total = 10
    for failed in (False, True, False, False):
        clock.now += 5  # one case every 5 s
        progress.case_finished(failed)
    assert lines == [
        "[progress] 2/10 cases (20.0%) · 0.2 cases/s · 10s elapsed · ETA 40s · 1 failed",
        "[progress] 4/10 cases (40.0%) · 0.2 cases/s · 20s elapsed · ETA 30s · 1 failed",
    ]


def test_a_line_after_t_seconds_even_between_n_cases():
    clock, lines = Clock(), []
    progress = Progress(every_cases=1000, every_seconds=60, write=lines.append, clock=clock)
    progress.total = 5000
    clock.now += 30
    progress.case_finished(False)
    assert lines == []
    clock.now += 31
    progress.case_finished(False)
    assert lines == ["[progress] 2/5000 cases (0.0%) · 0.033 cases/s · 1m01s elapsed · ETA 43h02m"]


def test_eta_counts_from_the_first_finished_case_not_the_start_up():
    clock, lines = Clock(), []
    progress = Progress(every_cases=0, every_seconds=60, write=lines.append, clock=clock)
    progress.total = 1001
    clock.now += 80  # collection and worker start-up
    progress.case_finished(False)
    assert lines == ["[progress] 1/1001 cases (0.1%) · 0.013 cases/s · 1m20s elapsed"]
    for _ in range(600):
        clock.now += 0.1
        progress.case_finished(False)
    # 601 done in 2m20s overall, but 0.1 s a case since the first: 400 left take 40 s.
    assert progress.line().endswith("· 2m20s elapsed · ETA 40s")


def test_durations_read_as_hours_minutes_seconds():
    assert [format_duration(s) for s in (0, 59.4, 61, 3600 * 2 + 61)] == [
        "0s",
        "59s",
        "1m01s",
        "2h01m",
    ]


def test_progress_under_xdist_counts_every_case_of_the_run(tmp_path):
    (tmp_path / "conftest.py").write_text(
        textwrap.dedent(
            """
            from torch_onnx_conformance.conformance import progress

            def pytest_addoption(parser):
                progress.pytest_addoption(parser)

            def pytest_configure(config):
                progress.register(config)
            """
        )
    )
    (tmp_path / "test_cases.py").write_text(
        textwrap.dedent(
            """
            import pytest

            @pytest.mark.parametrize("i", range(6))
            def test_case(i):
                if i == 3:
                    pytest.fail("planted")
                if i == 4:
                    pytest.skip("planted skip")
            """
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "-p", "no:cacheprovider",
         "--progress-every", "3", "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith("[progress]")]
    assert [line.split(" · ")[0] for line in lines] == [
        "[progress] 3/6 cases (50.0%)",
        "[progress] 6/6 cases (100.0%)",
    ], done.stdout
    assert lines[-1].endswith("· 1 failed")
    assert "ETA" in lines[0]


def test_no_cuda_runtime_warning_from_the_opinfo_import():
    code = "from torch_onnx_conformance.conformance.op_cases import op_db; op_db()"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "No CUDA runtime" not in done.stderr
