"""A fresh process for every model case, without paying torch's import each time.

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

import os
import signal
import time
import traceback
from pathlib import Path

from conformance.isolation import (
    ChildProcess,
    ChildResult,
    prepare_child,
    requests,
    signal_name,
    start_process,
)
from conformance.limits import die_with_parent

#: How long the zygote may take to report a killed case process before it is killed too.
REAP_TIMEOUT_S = 30.0


class ForkingModelChild(ChildProcess):
    """Runs each model case in a process forked from a pre-imported zygote."""

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
        stage, pid, finished = "export", None, None
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
            zygote_main, "conformance-model-zygote", "model case zygote"
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


def zygote_main(conn) -> None:
    """Import everything a model case needs, then fork one process per case."""
    prepare_child()
    _preload()
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


def _preload() -> None:
    """The imports every case would otherwise pay again after each fork."""
    import importlib

    for name in (
        "onnx",
        "onnxruntime",
        "onnxscript",
        "onnx_ir",
        "torchvision",
        "transformers",
        "exporter",
        "model_zoo",
        "conformance.models_runner",
        "conformance.exporters",
        "conformance.session",
    ):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a missing library fails its cases, not the zygote
            pass
    try:
        from conformance.models_cases import all_cases

        all_cases("full")  # registers the zoo's cases (imports the case modules)
    except Exception:  # noqa: BLE001
        pass


def _case_process(conn, case_id: str, scratch: Path) -> None:
    """The forked case process: run one case, report, and leave without cleanup (the state it
    inherited belongs to the zygote)."""
    code = 0
    try:
        die_with_parent()  # a fork does not inherit the zygote's death signal
        conn.send(("pid", os.getpid()))
        from conformance.models_runner import run_model_case

        outcome = run_model_case(
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
    from conformance.isolation import CaseChild

    child = CaseChild()
    try:
        return child.run(case_id, scratch, timeout_s, on_stage=on_stage)
    finally:
        child.close()
