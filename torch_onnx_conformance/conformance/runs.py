"""Which files a conformance run owns, and the lock that keeps two runs out of one folder.

Every run has a run id (``20261124T001500123456-4242``: start time, then pid, so ids sort by
age). It writes only under names carrying that id: rows ``RESULTS/<id>.<worker>.jsonl``,
scratch ``RESULTS/.scratch/<id>/``, in-flight markers ``RESULTS/.inflight/<id>/``, pytest's
JUnit file while it is being written ``RESULTS/.staging/<id>/``, and its
manifest ``RESULTS/runs/<id>.json``, written once the run has collected at least one case to
run (so ``--collect-only``, a usage error or an empty selection write none). The manifest
records the collected case ids, which is how a report knows it is incomplete.

Reading a folder takes the newest fresh run and the ``--resume`` runs after it
(``reports.rows.run_lineage``); a fresh run that has run cases deletes what the runs before it
wrote (``remove_superseded``), and nothing else: files the harness did not write stay.

``python -m torch_onnx_conformance run`` holds a ``flock`` on ``RESULTS`` for its whole run; a second run
into the same folder is refused at once, naming the holder.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from torch_onnx_conformance.conformance.case import find_kind
from torch_onnx_conformance.reports.rows import (
    RUNS_DIR,
    read_manifests,
    rows_file_name,
    run_lineage,
    scan_rows,
)

RUN_ID_ENV = "CONFORMANCE_RUN_ID"
#: The command line the user typed (``python -m torch_onnx_conformance run ...``), set by that command so
#: the manifest, and the report header after it, name it rather than the pytest it started.
COMMAND_ENV = "CONFORMANCE_COMMAND"
#: Set for sessions that only list or describe (``--collect-only``, ``--fixtures``...): even
#: the OpInfo sample cache is then computed in memory, never saved.
READ_ONLY_ENV = "CONFORMANCE_READ_ONLY"
#: pytest options (``config.option`` names) of sessions that never run a case.
READ_ONLY_OPTIONS = ("collectonly", "showfixtures", "show_fixtures_per_test", "setupplan")
#: What pytest-xdist tells its workers through the environment.
XDIST_WORKER_ENVS = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT")

#: Exit code of ``conformance run`` when another run holds the results folder.
REFUSED_EXIT_CODE = 7


def new_run_id() -> str:
    now = datetime.datetime.now(datetime.timezone.utc)
    return f"{now:%Y%m%dT%H%M%S%f}-{os.getpid()}"


def current_run_id() -> str:
    """This run's id; the first process to ask (the controller) makes one and hands it on to
    the xdist workers it starts through the environment."""
    run_id = os.environ.get(RUN_ID_ENV)
    if not run_id:
        run_id = os.environ[RUN_ID_ENV] = new_run_id()
    return run_id


def rows_path(results: Path, worker: str) -> Path:
    return results / rows_file_name(current_run_id(), worker)


def scratch_dir(results: Path, worker: str) -> Path:
    return results / ".scratch" / current_run_id() / worker / "current"


def inflight_path(results: Path, worker: str) -> Path:
    return results / ".inflight" / current_run_id() / f"{worker}.json"


#: The per-run folders under RESULTS that outlive a killed run: ``RESULTS/<folder>/<run id>/``.
RUN_FOLDERS = (".scratch", ".inflight")
#: Where pytest writes a run's JUnit file (``RESULTS/.staging/<run id>/``); see clear_staging.
STAGING = ".staging"


def staging_dir(results: Path, run_id: str) -> Path:
    """Where pytest writes the run's JUnit file; it moves to ``RESULTS/junit.xml`` only when
    cases ran (pytest writes one even when none did)."""
    return results / STAGING / run_id


def clear_staging(results: Path) -> None:
    """Remove ``RESULTS/.staging``. Called under the run's lock, when no other run can be
    writing there: what it holds is this run's, or a killed run's that nothing reads."""
    shutil.rmtree(results / STAGING, ignore_errors=True)


def manifest_path(results: Path, run_id: str) -> Path:
    return results / RUNS_DIR / f"{run_id}.json"


def write_manifest(results: Path, run_id: str, *, resume: bool, cases: list[str]) -> Path:
    """Record that run ``run_id`` is running ``cases``; atomic (temporary file, rename)."""
    path = manifest_path(results, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    manifest = {
        "run_id": run_id,
        "resume": resume,
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "pid": os.getpid(),
        "commit": _checkout_commit(),
        "command": os.environ.get(COMMAND_ENV) or " ".join(["pytest", *sys.argv[1:]]),
        "cases": cases,
    }
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(manifest), encoding="utf-8")
    os.replace(temporary, path)
    return path


def _checkout_commit() -> str | None:
    """The commit of the harness's checkout (``-dirty`` when it has local changes), or None
    outside a git checkout: the report names the code its rows came from."""
    root = str(Path(__file__).resolve().parent.parent)

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", root, *args], capture_output=True, text=True, timeout=10, check=True
        )
        return done.stdout.strip()

    try:
        head = git("rev-parse", "--short=12", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}-dirty" if dirty else head or None


# --------------------------------------------------------------------------- pytest side


class RunRecorder:
    """pytest plugin: records the collected cases in the run's manifest when cases are about
    to run (not for ``--collect-only`` or ``--fixtures``, whose sessions never reach the test
    loop). One process writes it: the first xdist worker, or the only process."""

    def __init__(self, results: Path, resume: bool):
        self.results = results
        self.resume = resume
        self.collected: list[str] = []

    @pytest.hookimpl(hookwrapper=True)
    def pytest_collection_modifyitems(self, session, config, items) -> Iterator[None]:
        # Before --resume deselects the finished cases: the manifest lists the whole run.
        self.collected = [case_id for case_id in map(case_id_of, items) if case_id]
        yield

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session) -> None:
        if session.config.option.collectonly or not session.items or not self.collected:
            return
        if os.environ.get("PYTEST_XDIST_WORKER", "gw0") != "gw0":
            return
        write_manifest(self.results, current_run_id(), resume=self.resume, cases=self.collected)


def configure(config: pytest.Config, results: Path, resume: bool) -> None:
    """Called from the plugin's ``pytest_configure``, in the controller and every worker."""
    from torch_onnx_conformance.conformance.limits import die_with_parent

    current_run_id()
    if any(getattr(config.option, name, False) for name in READ_ONLY_OPTIONS):
        os.environ[READ_ONLY_ENV] = "1"
    if hasattr(config, "workerinput"):
        die_with_parent()
    else:
        # Not an xdist worker of this run: a worker id or count in the environment was
        # inherited from an enclosing pytest-xdist run (a run started from a test), and would
        # make this process skip the manifest and size its memory cap for workers it lacks.
        # xdist sets both afresh in the workers it starts.
        for name in XDIST_WORKER_ENVS:
            os.environ.pop(name, None)
    config.pluginmanager.register(RunRecorder(results, resume), "conformance-runs")


# --------------------------------------------------------------------------- the run command


def rows_written(results: Path, run_id: str) -> bool:
    return any(results.glob(rows_file_name(run_id, "*")))


def remove_superseded(results: Path) -> list[Path]:
    """Delete what earlier runs wrote that the current results no longer use: their rows,
    scratch, in-flight markers, manifests, and the repro folders only their rows name."""
    manifests = read_manifests(results)
    current = {manifest["run_id"] for manifest in run_lineage(manifests)}
    superseded = [m["run_id"] for m in manifests if m["run_id"] not in current]
    if not superseded:
        return []
    kept_repros = {row.repro_dir for row in scan_rows([results]).rows if row.repro_dir}
    repros = (results / "repros").resolve()
    removed: list[Path] = []
    for run_id in superseded:
        files = sorted(results.glob(rows_file_name(run_id, "*")))
        for row in scan_rows(files).rows:
            if not row.repro_dir or row.repro_dir in kept_repros:
                continue
            folder = (results / row.repro_dir).resolve()
            # A row's repro path is data: only a folder inside RESULTS/repros is ours to delete.
            if folder.parent == repros and folder.is_dir() and not folder.is_symlink():
                shutil.rmtree(folder)
                removed.append(folder)
        for path in files:
            path.unlink(missing_ok=True)
            removed.append(path)
        for own in (results / folder / run_id for folder in RUN_FOLDERS):
            if own.is_dir():
                shutil.rmtree(own)
                removed.append(own)
        manifest_path(results, run_id).unlink(missing_ok=True)
    return removed


def remove_run_leftovers(results: Path, run_id: str) -> None:
    """A finished run's scratch and in-flight markers (its rows and manifest stay)."""
    for folder in RUN_FOLDERS:
        shutil.rmtree(results / folder / run_id, ignore_errors=True)
        with contextlib.suppress(OSError):
            (results / folder).rmdir()  # only when no other run has files there


class RunRefused(Exception):
    pass


class ResultsLock:
    """``flock`` on the results folder itself for one run: no lock file, so a run that ends
    before any case ran leaves the folder exactly as it found it. A refused run names the
    holder from ``/proc/locks`` (Linux); a folder this lock had to create is removed again by
    ``release(remove_created=True)`` while it is still empty."""

    def __init__(self, results: Path):
        self.results = results
        self._fd: int | None = None
        self._created = False

    def acquire(self) -> None:
        if not self.results.exists():
            self.results.mkdir(parents=True)
            self._created = True
        fd = os.open(self.results, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _lock_holder(os.fstat(fd).st_ino)
            os.close(fd)
            raise RunRefused(
                f"{self.results} is in use by another conformance run ({holder}); wait for it "
                "to finish or give this run another --results folder"
            ) from None
        self._fd = fd

    def release(self, *, remove_created: bool) -> None:
        if self._fd is None:
            return
        if remove_created and self._created:
            with contextlib.suppress(OSError):
                self.results.rmdir()  # only while still empty
        os.close(self._fd)
        self._fd = None


def _lock_holder(inode: int) -> str:
    """``pid N: <command line>`` of the process holding a flock on ``inode``."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/locks").read_text().splitlines():
            fields = line.split()
            if len(fields) > 5 and fields[1] == "FLOCK" and fields[5].endswith(f":{inode}"):
                pid = fields[4]
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                return f"pid {pid}: {command.decode(errors='replace').strip()}"
    return "holder unknown"


def case_id_of(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    for value in callspec.params.values():
        case_id = getattr(value, "id", None)
        if find_kind(case_id) is not None:
            return case_id
    return None
