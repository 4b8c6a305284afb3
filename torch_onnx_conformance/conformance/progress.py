"""A progress line with rate and ETA on long runs, every N cases or T seconds.

pytest's own progress is a percentage at the end of a line of dots; a run of thousands of cases
needs how many are done, how fast, and when it will end::

    [progress] 1200/4204 cases (28.5%) · 2.1 cases/s · 9m31s elapsed · ETA 23m50s · 3 failed

It runs where the reports arrive: the controller under xdist (its total comes from the workers'
collections), the only process otherwise.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

DEFAULT_EVERY_CASES = 200
DEFAULT_EVERY_SECONDS = 60.0
PLUGIN_NAME = "conformance-progress"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conformance", "torch-onnx-conformance suite")
    group.addoption(
        "--progress-every",
        type=int,
        default=DEFAULT_EVERY_CASES,
        metavar="N",
        help="print a progress line with rate and ETA every N finished cases (0: never)",
    )
    group.addoption(
        "--progress-seconds",
        type=float,
        default=DEFAULT_EVERY_SECONDS,
        metavar="T",
        help="... and at least every T seconds while cases finish (0: never)",
    )


def format_duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{seconds:02d}s"
    return f"{seconds}s"


class Progress:
    """Counts finished cases and writes a line when N more are done or T seconds passed."""

    def __init__(
        self,
        every_cases: int,
        every_seconds: float,
        write: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
    ):
        self.every_cases = every_cases
        self.every_seconds = every_seconds
        self.write = write
        self.clock = clock
        self.total: int | None = None
        self.done = 0
        self.failed = 0
        self.started = clock()
        self._last_line_at = self.started
        self._last_line_done = 0
        #: When the first case finished: the ETA's rate counts from there, since the time
        #: before it (collection, worker start-up, first imports) is not spent per case.
        self._first_done_at: float | None = None
        self._failed_ids: set[str] = set()

    def line(self) -> str:
        elapsed = self.clock() - self.started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        parts = []
        if self.total:
            percent = 100.0 * self.done / self.total
            parts.append(f"{self.done}/{self.total} cases ({percent:.1f}%)")
        else:
            parts.append(f"{self.done} cases")
        parts.append(f"{rate:.2g} cases/s" if rate < 10 else f"{rate:.0f} cases/s")
        parts.append(f"{format_duration(elapsed)} elapsed")
        if self.total and self._first_done_at is not None and self.done > 1:
            since_first = self.clock() - self._first_done_at
            if since_first > 0:
                per_case = since_first / (self.done - 1)
                parts.append(f"ETA {format_duration((self.total - self.done) * per_case)}")
        if self.failed:
            parts.append(f"{self.failed} failed")
        return "[progress] " + " · ".join(parts)

    def case_finished(self, failed: bool) -> None:
        self.done += 1
        self.failed += failed
        now = self.clock()
        if self._first_done_at is None:
            self._first_done_at = now
        due_cases = self.every_cases > 0 and self.done - self._last_line_done >= self.every_cases
        due_time = self.every_seconds > 0 and now - self._last_line_at >= self.every_seconds
        if due_cases or due_time:
            self._last_line_at, self._last_line_done = now, self.done
            self.write(self.line())

    # ----------------------------------------------------------------- pytest hooks

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.total = len(session.items)

    def pytest_xdist_node_collection_finished(self, node, ids) -> None:
        # Every worker collects the whole (selected) run; their counts agree.
        self.total = max(self.total or 0, len(ids))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # One report per phase; every case ends with a teardown report, even one skipped at
        # setup, so that is where it counts, failed if any of its phases failed.
        if report.failed:
            self._failed_ids.add(report.nodeid)
        if report.when == "teardown":
            failed = report.nodeid in self._failed_ids
            self._failed_ids.discard(report.nodeid)
            self.case_finished(failed=failed)


def register(config: pytest.Config) -> None:
    """Register the progress line for this session, where the results arrive (not on an
    xdist worker), unless both intervals are 0."""
    if hasattr(config, "workerinput"):
        return
    every_cases = config.getoption("progress_every", DEFAULT_EVERY_CASES)
    every_seconds = config.getoption("progress_seconds", DEFAULT_EVERY_SECONDS)
    if every_cases <= 0 and every_seconds <= 0:
        return

    def write(text: str) -> None:
        # Looked up when used: the terminal reporter may register after this plugin.
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        # After a run of progress dots the cursor is mid-line: start a line of our own.
        writer = getattr(reporter, "_tw", None)
        if getattr(writer, "width_of_current_line", 1):
            reporter.write("\n")
        reporter.write_line(text)

    config.pluginmanager.register(Progress(every_cases, every_seconds, write), PLUGIN_NAME)
