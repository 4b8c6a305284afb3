"""Running cases in a persistent child process, so a crash or a hang costs one case.

A segfault or abort in torch or onnxruntime kills only the child: the parent (the pytest worker)
sees the pipe close, records the case as ``crash`` at the last stage the child announced, and
starts a fresh child for the next case. A case that overruns its deadline gets the child killed
and is recorded as ``timeout``. The child is started with ``spawn`` (a clean interpreter, no
forked torch state) and reused across cases, so its imports are paid once.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import signal
import time
import traceback
from pathlib import Path
from typing import Any

from conformance.limits import apply_case_limits

#: How long a fresh child may take to import torch and get ready (not counted in a case's time).
STARTUP_TIMEOUT_S = 300.0
#: Fresh child after this many cases, to bound memory that torch and onnxruntime never return.
CASES_PER_CHILD = 400


@dataclasses.dataclass
class ChildResult:
    status: str  # "done", "crash", "timeout", or "error" (a bug in the harness itself)
    outcome: dict[str, Any] | None = None  # CaseOutcome.to_dict() when done
    stage: str | None = None  # the last announced stage
    detail: str = ""


class ChildProcess:
    """The one isolation protocol's process handle: a process started by ``start_process`` and
    the parent's end of its pipe. Strategies (a reused spawned child for op cases, a forking
    zygote for model cases) add how a case is run."""

    def __init__(self) -> None:
        self._process = None
        self._conn = None

    def close(self) -> None:
        """Ask the process to exit (killed after 5 s) and drop the pipe."""
        stop_process(self._process, self._conn, polite=True)
        self._process = self._conn = None

    def kill(self) -> None:
        """Stop the process at once (it may be stuck); the next case starts a fresh one."""
        stop_process(self._process, self._conn, polite=False)
        self._process = self._conn = None


class CaseChild(ChildProcess):
    """One persistent child process that runs cases on request."""

    def __init__(self) -> None:
        super().__init__()
        self._cases_run = 0

    def run(
        self,
        case_id: str,
        scratch: Path,
        timeout_s: float,
        tolerances_path: str | None = None,
        on_stage=lambda stage: None,
    ) -> ChildResult:
        if self._process is None or self._cases_run >= CASES_PER_CHILD:
            self._restart()
        request = ("case", case_id, str(scratch), tolerances_path)
        try:
            self._conn.send(request)
        except OSError:  # the idle child died since the last case: start another
            self._restart()
            self._conn.send(request)
        self._cases_run += 1
        deadline = time.monotonic() + timeout_s
        stage = "export"
        while True:
            remaining = deadline - time.monotonic()
            try:
                ready = self._conn.poll(max(remaining, 0))
            except (EOFError, OSError):
                ready = True
            if not ready:
                self.kill()
                return ChildResult(
                    "timeout", stage=stage, detail=f"no result after {timeout_s:g} s"
                )
            try:
                message = self._conn.recv()
            except (EOFError, OSError):
                return ChildResult("crash", stage=stage, detail=self._death_note())
            kind, payload = message
            if kind == "stage":
                stage = payload
                on_stage(stage)
            elif kind == "done":
                return ChildResult("done", outcome=payload, stage=stage)
            elif kind == "error":
                return ChildResult("error", stage=stage, detail=payload)

    def _restart(self) -> None:
        self.close()
        self._process, self._conn = start_process(
            child_main, "conformance-case-child", "case child"
        )
        self._cases_run = 0

    def _death_note(self) -> str:
        process = self._process
        self._process = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if process is None:
            return "the case child died"
        process.join(timeout=10)
        code = process.exitcode
        if code is not None and code < 0:
            return f"the case child died from {signal_name(-code)}"
        return f"the case child exited with code {code}"


def start_process(target, name: str, what: str):
    """Spawn ``target(conn)`` and wait for its "ready"; returns (process, parent end of the
    pipe). ``what`` names the process in errors ("case child")."""
    context = multiprocessing.get_context("spawn")
    parent_conn, child_conn = context.Pipe()
    process = context.Process(target=target, args=(child_conn,), name=name, daemon=True)
    process.start()
    child_conn.close()
    if not parent_conn.poll(STARTUP_TIMEOUT_S):
        process.kill()
        raise RuntimeError(f"the {what} did not start within {STARTUP_TIMEOUT_S:g} s")
    try:
        parent_conn.recv()  # "ready"
    except EOFError:
        process.join()
        raise RuntimeError(
            f"the {what} died while starting (exit code {process.exitcode})"
        ) from None
    return process, parent_conn


def stop_process(process, conn, *, polite: bool) -> None:
    """Stop a process started by ``start_process``: politely (ask it to exit, wait 5 s, then
    kill) or at once, and close its pipe."""
    if polite and conn is not None:
        try:
            conn.send(None)
        except OSError:
            pass
    if process is not None:
        if polite:
            process.join(timeout=5)
        if process.is_alive():
            process.kill()
        process.join()
    if conn is not None:
        conn.close()


def signal_name(number: int) -> str:
    """``SIGSEGV`` for 11; ``signal 99`` for a number the platform does not name."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def prepare_child() -> None:
    """A case process's setup: one thread (cases share the cores and time themselves), no
    warnings on the pipe's terminal."""
    apply_case_limits()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import warnings

    warnings.filterwarnings("ignore")
    import torch

    torch.set_num_threads(1)


def requests(conn):
    """The parent's requests, until it closes the pipe or sends None (exit)."""
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        if request is None:
            return
        yield request


def child_main(conn) -> None:
    """Child loop: receive case ids, run them, send stage announcements and the outcome."""
    prepare_child()
    # Every case compares through exporter.diagnostics, whose package import loads the exporter:
    # paid here, before "ready", rather than inside the first case's deadline.
    import exporter.diagnostics.compare  # noqa: F401
    from conformance.cases import parse_case_id
    from conformance.runner import run_op_case

    conn.send("ready")
    for _, case_id, scratch, tolerances_path in requests(conn):
        try:
            if case_id.startswith("model::"):
                from conformance.models_runner import run_model_case

                outcome = run_model_case(
                    case_id, Path(scratch), announce=lambda stage: conn.send(("stage", stage))
                )
            else:
                outcome = run_op_case(
                    parse_case_id(case_id),
                    Path(scratch),
                    announce=lambda stage: conn.send(("stage", stage)),
                    tolerances_path=tolerances_path,
                )
        except BaseException:  # noqa: BLE001 - reported to the parent, which decides
            conn.send(("error", traceback.format_exc()))
            continue
        conn.send(("done", outcome.to_dict()))
