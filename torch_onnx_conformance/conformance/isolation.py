"""Running cases in a persistent child process, so a crash or a hang costs one case.

A segfault or abort in torch or onnxruntime kills only the child: the parent (the pytest worker)
sees the pipe close, records the case as ``crash`` at the last stage the child announced, and
starts a fresh child for the next case. A case that overruns its deadline gets the child killed
and is recorded as ``timeout``. The child is started with ``spawn`` (a clean interpreter, no
forked torch state) and reused across cases, so its imports are paid once. That is the
strategy for op cases (``CaseChild``); model cases use the forking zygote below
(``ForkingModelChild``), both one protocol on one ``ChildProcess`` handle. Which kind of case
takes which is its ``CaseKind.child``; inside, a case runs through its kind's ``CaseKind.run``.

Model cases: a fresh process for every model case, without paying torch's import each time.

Reusing one process across model cases is not only a memory problem: torch keeps state
between exports. Measured (torch 2.14.1): ``torch.onnx.export(dynamo=True)`` of a bidirectional
LSTM with a dynamic time axis succeeds in a fresh process, but fails at capture once any LSTM
has been exported earlier in the same process; a case's outcome would depend on which cases
ran before it. So each model case runs in its own process, forked from a *zygote*: a process
started clean (``spawn``) that has imported torch, onnxruntime, the exporters and the zoo's
libraries, and never runs a case itself. Forking it costs milliseconds; the imports are paid
once per worker.

Protocol (one pipe, never two writers at once): the parent sends ``("case", id, scratch)``;
the zygote forks; the case process sends ``("pid", pid)``, then ``("stage", name)``..., then
``("done", outcome)`` or ``("error", traceback)`` and exits; the zygote reaps it and sends
``("exit", status)``. The parent kills the case process on a timeout. Where ``os.fork`` does
not exist, a fresh spawned child per case does the same job, slowly.
"""

from __future__ import annotations

import dataclasses
import functools
import multiprocessing
import os
import signal
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch_onnx_conformance.conformance.case import kind_of
from torch_onnx_conformance.conformance.limits import (
    apply_case_limits,
    case_memory_limit,
    die_with_parent,
)
from torch_onnx_conformance.exporter.stages import Stage

#: How long a fresh child may take to import torch and get ready (not counted in a case's time).
STARTUP_TIMEOUT_S = 300.0
#: Memory that torch and onnxruntime never return stays in a reused child: a fresh child replaces
#: it once its writable memory (``VmData``, what the per-case ``RLIMIT_DATA`` ceiling of
#: ``limits.py`` counts) passes this share of that ceiling, so each case keeps at least the rest.
CHILD_MEMORY_SHARE = 0.5
#: The same bound in bytes for a run without a per-case ceiling.
CHILD_MEMORY_WITHOUT_CEILING = 8 * 2**30
#: Where the child's memory cannot be read (no /proc): a fresh child after this many cases.
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
        self._memory_budget = child_memory_budget()

    def run(
        self,
        case_id: str,
        scratch: Path,
        timeout_s: float,
        on_stage=lambda stage: None,
    ) -> ChildResult:
        if self._process is None or self._outgrown():
            self._restart()
        request = ("case", case_id, str(scratch))
        try:
            self._conn.send(request)
        except OSError:  # the idle child died since the last case: start another
            self._restart()
            self._conn.send(request)
        self._cases_run += 1
        deadline = time.monotonic() + timeout_s
        stage = Stage.EXPORT.value
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

    def _outgrown(self) -> bool:
        """Whether the child should be replaced before the next case (``CHILD_MEMORY_SHARE``)."""
        used = data_bytes(self._process.pid)
        if used is None:
            return self._cases_run >= CASES_PER_CHILD
        return used > self._memory_budget

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


def data_bytes(pid: int) -> int | None:
    """A process's writable memory (``VmData`` of /proc/PID/status) in bytes; None where that
    cannot be read (not Linux, or the process is gone)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def child_memory_budget(environ=None) -> int:
    """How much writable memory a reused case child may hold between cases: a share of the
    per-case ceiling, or a fixed bound without one."""
    limit = case_memory_limit(environ)
    return int(limit * CHILD_MEMORY_SHARE) if limit else CHILD_MEMORY_WITHOUT_CEILING


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
    """Child loop: receive case ids, run each through its kind's entry, send stage
    announcements and the outcome."""
    prepare_child()
    # Every case exports and compares: the exporter's import (torch, the op library) is paid
    # here, before "ready", rather than inside the first case's deadline.
    import torch_onnx_conformance.exporter._api  # noqa: F401
    import torch_onnx_conformance.exporter.diagnostics.compare  # noqa: F401

    conn.send("ready")
    for _, case_id, scratch in requests(conn):
        try:
            outcome = kind_of(case_id).run(
                case_id, Path(scratch), announce=lambda stage: conn.send(("stage", stage))
            )
        except BaseException:  # noqa: BLE001 - reported to the parent, which decides
            conn.send(("error", traceback.format_exc()))
            continue
        conn.send(("done", outcome.to_dict()))


#: How long the zygote may take to report a killed case process before it is killed too.
REAP_TIMEOUT_S = 30.0


class ForkingModelChild(ChildProcess):
    """Runs each model case in a process forked from a pre-imported zygote; ``preload`` (a
    module-level function: it travels to the spawned zygote) is what the zygote loads besides
    the libraries (the case source's cases)."""

    def __init__(self, preload: Callable[[], None] | None = None) -> None:
        super().__init__()
        self._preload = preload

    def run(self, case_id: str, scratch: Path, timeout_s: float, on_stage=lambda s: None):
        if not hasattr(os, "fork"):
            return _run_in_fresh_spawned_child(case_id, scratch, timeout_s, on_stage)
        if self._process is None or not self._process.is_alive():
            self._start()
        try:
            self._conn.send(("case", case_id, str(scratch)))
        except OSError:
            self._start()
            self._conn.send(("case", case_id, str(scratch)))
        deadline = time.monotonic() + timeout_s
        stage, pid, finished = Stage.EXPORT.value, None, None
        while True:
            try:
                ready = self._conn.poll(max(deadline - time.monotonic(), 0))
            except (EOFError, OSError):
                ready = True
            if not ready:
                self._kill_case(pid)
                return ChildResult(
                    "timeout", stage=stage, detail=f"no result after {timeout_s:g} s"
                )
            try:
                kind, payload = self._conn.recv()
            except (EOFError, OSError):
                self.kill()  # the zygote is gone: reap it and drop the pipe
                if finished is not None:
                    return finished
                return ChildResult("crash", stage=stage, detail="the model case zygote died")
            if kind == "pid":
                pid = payload
            elif kind == "stage":
                stage = payload
                on_stage(stage)
            elif kind == "done":
                finished = ChildResult("done", outcome=payload, stage=stage)
            elif kind == "error":
                finished = ChildResult("error", stage=stage, detail=payload)
            elif kind == "exit":
                if finished is not None:
                    return finished
                return ChildResult("crash", stage=stage, detail=_death_note(payload))

    def _start(self) -> None:
        self.close()
        self._process, self._conn = start_process(
            functools.partial(zygote_main, preload=self._preload),
            "conformance-model-zygote",
            "model case zygote",
        )

    def _kill_case(self, pid: int | None) -> None:
        """Kill a stuck case process and take the zygote's report of it off the pipe."""
        if pid is None:
            self.kill()
            return
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + REAP_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                if not self._conn.poll(max(deadline - time.monotonic(), 0)):
                    break
                kind, _ = self._conn.recv()
            except (EOFError, OSError):
                break
            if kind == "exit":
                return
        self.kill()


def _death_note(status: int) -> str:
    if status < 0:
        return f"the case process died from {signal_name(-status)}"
    return f"the case process exited with code {status} before reporting a result"


def zygote_main(conn, preload: Callable[[], None] | None = None) -> None:
    """Import everything a model case needs, then fork one process per case."""
    prepare_child()
    _preload(preload)
    conn.send("ready")
    for _, case_id, scratch in requests(conn):
        pid = os.fork()
        if pid == 0:
            _case_process(conn, case_id, Path(scratch))
        _, status = os.waitpid(pid, 0)
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        try:
            conn.send(("exit", code))
        except OSError:
            return


def _preload(cases: Callable[[], None] | None) -> None:
    """The imports every case would otherwise pay again after each fork, and ``cases()``."""
    import importlib

    for name in (
        "onnx",
        "onnxruntime",
        "onnxscript",
        "onnx_ir",
        "torchvision",
        "transformers",
        "torch_onnx_conformance.exporter._api",
        "torch_onnx_conformance.model_zoo",
        "torch_onnx_conformance.conformance.runner",
        "torch_onnx_conformance.conformance.exporters",
        "torch_onnx_conformance.conformance.session",
    ):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a missing library fails its cases, not the zygote
            pass
    try:
        if cases is not None:
            cases()
    except Exception:  # noqa: BLE001
        pass


def _case_process(conn, case_id: str, scratch: Path) -> None:
    """The forked case process: run one case, report, and leave without cleanup (the state it
    inherited belongs to the zygote)."""
    code = 0
    try:
        die_with_parent()  # a fork does not inherit the zygote's death signal
        conn.send(("pid", os.getpid()))
        outcome = kind_of(case_id).run(
            case_id,
            scratch,
            announce=lambda stage: conn.send(("stage", stage)),
            release_memory=False,
        )
        conn.send(("done", outcome.to_dict()))
    except BaseException:  # noqa: BLE001 - reported to the parent, which decides
        try:
            conn.send(("error", traceback.format_exc()))
        except OSError:
            code = 1
    finally:
        os._exit(code)


def _run_in_fresh_spawned_child(case_id, scratch, timeout_s, on_stage) -> ChildResult:
    child = CaseChild()
    try:
        return child.run(case_id, scratch, timeout_s, on_stage=on_stage)
    finally:
        child.close()
