"""A harness you can trust: planted faults and ordinary mistakes, and what they must not cost.

End-to-end tests run ``python -m torch_onnx_conformance run`` on planted cases (``torch_onnx_conformance/conformance/planted.py``)
into temporary folders and check what is on disk afterwards: nothing lost after a kill and
``--resume``, nothing written by a run that ran no case, nothing another run owns deleted.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from torch_onnx_conformance.conformance import limits, runs
from torch_onnx_conformance.reports.__main__ import main as reports_main
from torch_onnx_conformance.reports.rows import (
    INCOMPLETE_EXIT_CODE,
    CaseResult,
    append_row,
    repair_torn_tails,
    scan_rows,
)

ROOT = Path(__file__).resolve().parents[2]


def _row(case_id: str, status: str = "pass", **fields) -> CaseResult:
    """A row under any id: the storage layer keeps rows whatever their ids say."""
    row = CaseResult(
        id=case_id,
        kind="op",
        subject="x",
        family="x",
        dtype="f32",
        shapes="static",
        opset=20,
        provider="cpu",
        exporter="ours",
        status=status,
    )
    return dataclasses.replace(row, **fields)


def _case(name: str, opset: int = 20) -> str:
    return f"op::planted.{name}::s000::f32::static::opset{opset}::cpu::ours"


# --------------------------------------------------------------------------- rows


def test_a_row_appended_after_a_torn_line_is_kept_and_resume_cuts_the_fragment(tmp_path):
    rows = tmp_path / "rows.jsonl"
    append_row(rows, _row("op::a"))
    with rows.open("ab") as handle:
        handle.write(_row("op::b").to_json().encode()[:40])  # a writer killed mid-line
    append_row(rows, _row("op::c"))
    found = scan_rows([rows])
    assert sorted(row.id for row in found.rows) == ["op::a", "op::c"]
    assert found.invalid == [f"{rows}:2: not JSON"]

    with rows.open("ab") as handle:
        handle.write(b'{"id": "op::d", "sta')
    repaired = repair_torn_tails([rows])
    assert repaired == [f"{rows}:4: dropped a torn last line (20 bytes)"]
    assert rows.read_bytes().endswith(b"\n")
    assert sorted(row.id for row in scan_rows([rows]).rows) == ["op::a", "op::c"]


def test_rows_are_fsynced_once_per_interval_and_every_row_is_written(tmp_path, monkeypatch):
    from torch_onnx_conformance.reports import rows as rows_module

    synced = []
    monkeypatch.setattr(rows_module.os, "fsync", lambda fd: synced.append(fd))
    monkeypatch.setattr(rows_module, "_last_sync", {})
    clock = iter([100.0, 100.2, 100.4, 101.3, 101.5])
    monkeypatch.setattr(rows_module.time, "monotonic", lambda: next(clock))
    path = tmp_path / "rows.jsonl"
    for name in "abcde":
        append_row(path, _row(f"op::{name}"))
    assert len(synced) == 2  # the first row, then the first one a whole interval later
    assert [row.id for row in scan_rows([path]).rows] == [f"op::{n}" for n in "abcde"]


def test_a_row_holds_its_nested_values_as_json_does():
    @dataclasses.dataclass
    class Facts:
        rank: int
        names: tuple

    row = _row("op::n", extra={"facts": Facts(2, ("a", "b")), "seen": [{"x": 1.5}]})
    data = json.loads(row.to_json())
    assert data["extra"] == {"facts": {"rank": 2, "names": ["a", "b"]}, "seen": [{"x": 1.5}]}
    assert data == json.loads(json.dumps(dataclasses.asdict(row), default=str))


BAD_LINES = {
    b"null": "not a JSON object but NoneType",
    b"42": "not a JSON object but int",
    b'"text"': "not a JSON object but str",
    b"[1, 2]": "not a JSON object but list",
    json.dumps({**json.loads(_row("op::x").to_json()), "status": 3}).encode(): "status 3 is not",
    json.dumps(
        {k: v for k, v in json.loads(_row("op::y").to_json()).items() if k != "status"}
    ).encode(): "no 'status'",
    json.dumps({**json.loads(_row("op::z").to_json()), "opset": "20"}).encode(): "wrong type",
    b'{"id": "op::\xff\xfe", "status": "pass"}': "not UTF-8",
    b"{not json": "not JSON",
}


def test_invalid_rows_are_skipped_and_named_by_file_and_line(tmp_path, capsys):
    results = tmp_path / "results"
    results.mkdir()
    lines = [_row("op::good1").to_json().encode(), *BAD_LINES, _row("op::good2").to_json()]
    path = results / "w.jsonl"
    path.write_bytes(
        b"\n".join(line if isinstance(line, bytes) else line.encode() for line in lines) + b"\n"
    )
    found = scan_rows([results])
    assert sorted(row.id for row in found.rows) == ["op::good1", "op::good2"]
    for number, why in enumerate(BAD_LINES.values(), 2):
        assert any(p.startswith(f"{path}:{number}: ") and why in p for p in found.invalid), (
            number,
            found.invalid,
        )
    # reports build reads the same folder without crashing, names each line and reports 2 rows
    assert reports_main(["build", str(results), "--out", str(tmp_path / "out"), "--no-charts"]) == 0
    err = capsys.readouterr().err
    assert f"skipped {path}:2: not a JSON object but NoneType" in err
    assert "**2 cases**" in (tmp_path / "out" / "summary.md").read_text()


# --------------------------------------------------------------------------- completeness


def test_a_report_with_missing_rows_says_incomplete_everywhere(tmp_path, capsys):
    results = tmp_path / "results"
    run_id = "20260101T000000000000-1"
    cases = ["op::a", "op::b", "op::c"]
    runs.write_manifest(results, run_id, resume=False, cases=cases)
    for case_id in cases[:2]:
        append_row(results / f"{run_id}.gw0.jsonl", _row(case_id))
    out = tmp_path / "out"
    code = reports_main(["build", str(results), "--out", str(out), "--no-charts"])
    assert code == INCOMPLETE_EXIT_CODE
    assert "incomplete: 2 of 3 cases have results" in capsys.readouterr().err
    summary = (out / "summary.md").read_text()
    assert "**incomplete: 2 of 3 cases have results**" in summary
    assert "1 cases without a result (<code>--resume</code> runs them)" in summary
    assert "\n- `op::c`\n" in summary and "`op::a`" not in summary


def test_shards_built_together_count_every_shards_cases(tmp_path):
    for shard, cases in (("a", ["op::a1", "op::a2"]), ("b", ["op::b1", "op::b2"])):
        results = tmp_path / shard
        run_id = f"2026010{len(shard)}T000000000000-{shard}"
        runs.write_manifest(results, run_id, resume=False, cases=cases)
        for case_id in cases if shard == "a" else cases[:1]:
            append_row(results / f"{run_id}.gw0.jsonl", _row(case_id))
    found = scan_rows([tmp_path / "a", tmp_path / "b"])
    assert found.missing == ["op::b2"]
    assert found.completeness() == "incomplete: 3 of 4 cases have results"


def test_only_the_newest_fresh_run_and_its_resumes_count(tmp_path):
    results = tmp_path / "results"
    old, fresh, resumed = (f"2026010{n}T000000000000-1" for n in (1, 2, 3))
    runs.write_manifest(results, old, resume=False, cases=["op::a", "op::old"])
    append_row(results / f"{old}.gw0.jsonl", _row("op::old"))
    append_row(results / f"{old}.gw0.jsonl", _row("op::a", "fail"))
    runs.write_manifest(results, fresh, resume=False, cases=["op::a", "op::b"])
    append_row(results / f"{fresh}.gw0.jsonl", _row("op::a"))
    runs.write_manifest(results, resumed, resume=True, cases=["op::a", "op::b"])
    append_row(results / f"{resumed}.main.jsonl", _row("op::b"))
    found = scan_rows([results])
    assert {row.id: row.status for row in found.rows} == {"op::a": "pass", "op::b": "pass"}
    assert found.completeness() is None


# --------------------------------------------------------------------------- ownership


def test_a_fresh_run_removes_only_what_earlier_runs_wrote(tmp_path):
    results = tmp_path / "results"
    old, new = "20260101T000000000000-1", "20260102T000000000000-1"
    runs.write_manifest(results, old, resume=False, cases=["op::a"])
    (results / "repros" / "op__a").mkdir(parents=True)
    (results / "repros" / "op__shared").mkdir(parents=True)
    append_row(results / f"{old}.gw0.jsonl", _row("op::a", "fail", repro_dir="repros/op__a"))
    append_row(results / f"{old}.gw0.jsonl", _row("op::s", "fail", repro_dir="repros/op__shared"))
    (results / ".scratch" / old / "gw0").mkdir(parents=True)
    mine = [results / "notes.jsonl", results / "repros" / "mine.txt", results / "my.json"]
    for path in mine:
        path.write_text("user data\n")
    runs.write_manifest(results, new, resume=False, cases=["op::s"])
    append_row(results / f"{new}.gw0.jsonl", _row("op::s", "fail", repro_dir="repros/op__shared"))

    runs.remove_superseded(results)
    assert not (results / f"{old}.gw0.jsonl").exists()
    assert not (results / "repros" / "op__a").exists()
    assert not (results / ".scratch" / old).exists()
    assert not runs.manifest_path(results, old).exists()
    assert (results / "repros" / "op__shared").is_dir()  # the new run's repro of the same case
    assert (results / f"{new}.gw0.jsonl").exists()
    assert all(path.read_text() == "user data\n" for path in mine)


def test_a_second_run_into_a_locked_folder_is_refused_naming_the_holder(tmp_path):
    first = runs.ResultsLock(tmp_path / "results")
    first.acquire()
    try:
        second = runs.ResultsLock(tmp_path / "results")
        with pytest.raises(
            runs.RunRefused, match=rf"in use by another conformance run \(pid {os.getpid()}: "
        ):
            second.acquire()
    finally:
        first.release(remove_created=True)
    assert not (tmp_path / "results").exists()  # nothing ran: the folders it made are gone


# --------------------------------------------------------------------------- limits


def test_memory_limit_takes_sizes_fractions_and_none():
    gib = 2**30
    assert limits.parse_memory("6G") == 6 * gib
    assert limits.parse_memory("512MiB") == 512 * 2**20
    assert limits.parse_memory("0.25", ram=16 * gib) == 4 * gib
    assert limits.parse_memory("none") is None
    with pytest.raises(ValueError, match="expected a size like 6G"):
        limits.parse_memory("lots")
    environ = {"PYTEST_XDIST_WORKER_COUNT": "2"}
    ram = limits.total_ram_bytes()
    expected = max(int(ram * limits.DEFAULT_RAM_FRACTION / 2), limits.MIN_DEFAULT_BYTES)
    assert limits.case_memory_limit(environ) == expected
    assert limits.case_memory_limit({limits.MEMORY_ENV: "3G"}) == 3 * gib


# --------------------------------------------------------------------------- end to end

PYTHON = sys.executable


def _run_command(results: Path, reports: Path, *args: str) -> list[str]:
    return [
        *(
            PYTHON,
            "-m",
            "torch_onnx_conformance",
            "run",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
        ),
        *("--results", str(results), "--reports-out", str(reports), *args),
    ]


def _conformance(results: Path, reports: Path, *args: str, timeout: float = 300):
    return subprocess.run(
        _run_command(results, reports, *args),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _snapshot(folder: Path) -> dict[str, str]:
    """Every path under ``folder`` with its content hash and modification time."""
    state = {}
    for path in sorted(folder.rglob("*")):
        stat = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
        state[str(path.relative_to(folder))] = f"{digest}:{stat.st_mtime_ns}"
    return state


@pytest.fixture
def earlier_run(tmp_path):
    """A finished run in ``tmp/results`` (rows, manifest, a repro), a user's own file there, and
    a copy of reports/latest in ``tmp/reports``."""
    results, reports = tmp_path / "results", tmp_path / "reports"
    run_id = "20260101T000000000000-1"
    runs.write_manifest(results, run_id, resume=False, cases=[_case("pass")])
    append_row(results / f"{run_id}.gw0.jsonl", _row(_case("pass")))
    (results / "repros" / "op__x").mkdir(parents=True)
    (results / "repros" / "op__x" / "repro.py").write_text("print('x')\n")
    (results / "notes.txt").write_text("mine\n")
    reports.mkdir()
    for name in ("summary.md", "ops.md"):
        (reports / name).write_bytes((ROOT / "reports" / "latest" / name).read_bytes())
    return results, reports


INFORMATION_RUNS = {
    "help": (("--help",), 0),
    "collect-only": (("--collect-only", "-n", "0", "--planted", "pass"), 0),
    "fixtures": (("--fixtures", "-n", "0", "--planted", "pass"), 0),
    "markers": (("--markers", "-n", "0", "--planted", "pass"), 0),
    "usage error (4)": (("-n", "0", "--planted", "pass", "--opset", "99"), 4),
    "nothing selected (5)": (("-n", "0", "--planted", "pass", "-k", "no_such_case"), 5),
}


@pytest.mark.parametrize("what", list(INFORMATION_RUNS))
def test_runs_that_run_no_case_touch_no_file(earlier_run, tmp_path, what):
    results, reports = earlier_run
    args, code = INFORMATION_RUNS[what]
    before = _snapshot(tmp_path)
    proc = _conformance(results, reports, *args)
    assert proc.returncode == code, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert _snapshot(tmp_path) == before


def test_a_collection_error_exit_2_touches_no_file(earlier_run, tmp_path):
    results, reports = earlier_run
    broken = tmp_path / "tests_elsewhere" / "test_broken.py"
    broken.parent.mkdir()
    broken.write_text("this is not python\n")
    before = _snapshot(tmp_path)
    proc = _conformance(
        results, reports, "-n", "0", "-p", "torch_onnx_conformance.conformance.plugin", str(broken)
    )
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert _snapshot(tmp_path) == before


def test_collecting_real_op_cases_writes_not_even_the_sample_cache(tmp_path):
    results = tmp_path / "results"
    proc = _conformance(results, tmp_path / "reports", "--collect-only", "-n", "0", "--ops", "abs")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "op::abs::s000::f32::static::opset20::cpu::ours" in proc.stdout
    assert list(tmp_path.iterdir()) == []


def test_a_fresh_run_into_a_missing_folder_that_runs_nothing_leaves_no_folder(tmp_path):
    proc = _conformance(
        tmp_path / "results", tmp_path / "reports", "-n", "0", "--planted", "pass", "-k", "nothing"
    )
    assert proc.returncode == 5
    assert list(tmp_path.iterdir()) == []


def _descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_gone(pids: set[int], timeout: float = 30) -> set[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = {pid for pid in pids if _alive(pid)}
        if not left:
            return left
        time.sleep(0.2)
    return {pid for pid in pids if _alive(pid)}


def _rows_written(results: Path) -> int:
    return sum(len(path.read_bytes().splitlines()) for path in results.glob("*.jsonl"))


SLOW_RUN = ("--planted", "pass", "--planted", "slow", "--shapes", "static")
SLOW_RUN += ("--opset", "18", "--opset", "19", "--opset", "20", "--case-timeout", "60")
SLOW_CASES = {_case(name, opset) for name in ("pass", "slow") for opset in (18, 19, 20)}


def _start_and_kill(tmp_path: Path, workers: str, victim: str):
    """Start a slow planted run, wait for its first row, kill ``victim`` (parent, controller
    or tree) with SIGKILL; return the folders and the run's processes before the kill."""
    results, reports = tmp_path / "results", tmp_path / "reports"
    parent = subprocess.Popen(
        _run_command(results, reports, "-n", workers, *SLOW_RUN),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 240
    while _rows_written(results) < 1:
        assert parent.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline, "no row within 240 s"
        time.sleep(0.2)
    tree = _descendants(parent.pid)
    children = Path(f"/proc/{parent.pid}/task/{parent.pid}/children").read_text().split()
    controller = int(children[0])  # pytest, the one process the parent starts
    if victim == "parent":
        os.kill(parent.pid, signal.SIGKILL)
    elif victim == "controller":
        os.kill(controller, signal.SIGKILL)
    elif victim == "terminate":
        os.kill(parent.pid, signal.SIGTERM)
    else:
        for pid in (parent.pid, *tree):
            os.kill(pid, signal.SIGKILL)
    parent.wait(timeout=120)
    return results, reports, parent, tree


def _resume_completes(results: Path, reports: Path) -> None:
    proc = _conformance(results, reports, "-n", "0", *SLOW_RUN, "--resume")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    found = scan_rows([results])
    assert {row.id for row in found.rows} == SLOW_CASES
    assert all(row.status == "pass" for row in found.rows)
    assert found.completeness() is None and not found.invalid
    # The killed run's JUnit staging was inside RESULTS (never the system's temporary folder),
    # and the resumed run, holding the folder's lock, cleared it.
    assert not (results / ".staging").exists(), sorted((results / ".staging").rglob("*"))
    summary = (reports / "summary.md").read_text()
    assert "incomplete" not in summary and "**6 cases**" in summary


@pytest.mark.slow
@pytest.mark.parametrize("victim", ["parent", "tree"])
def test_a_killed_run_leaves_no_orphan_and_resume_loses_nothing(tmp_path, victim):
    results, reports, _, tree = _start_and_kill(tmp_path, "1", victim)
    assert not _wait_gone(tree), "processes of the killed run are still alive"
    _resume_completes(results, reports)


@pytest.mark.slow
@pytest.mark.parametrize("victim", ["controller", "terminate"])
def test_a_killed_controller_gives_an_incomplete_report_and_exit_code(tmp_path, victim):
    """SIGKILL on pytest, or SIGTERM on the run (passed on to pytest's process group)."""
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "junit.xml").write_text("<testsuites/>")  # an earlier run's
    results, reports, parent, tree = _start_and_kill(tmp_path, "1", victim)
    assert parent.returncode == INCOMPLETE_EXIT_CODE
    assert not (results / "junit.xml").exists()
    assert not _wait_gone(tree)
    summary = (reports / "summary.md").read_text()
    done = len(scan_rows([results]).rows)
    assert done < 6 and f"**incomplete: {done} of 6 cases have results**" in summary
    assert "cases without a result (<code>--resume</code> runs them)" in summary
    _resume_completes(results, reports)


def test_a_concurrent_run_is_refused_and_the_first_loses_nothing(tmp_path):
    results, reports = tmp_path / "results", tmp_path / "reports"
    first = subprocess.Popen(
        _run_command(results, reports, "-n", "0", *SLOW_RUN),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not results.exists():
        assert time.monotonic() < deadline and first.poll() is None
        time.sleep(0.1)
    second = _conformance(results, tmp_path / "other", "-n", "0", "--planted", "pass")
    assert second.returncode == runs.REFUSED_EXIT_CODE, second.stderr
    assert f"is in use by another conformance run (pid {first.pid}: " in second.stderr
    assert "conformance run" in second.stderr.split(f"pid {first.pid}: ")[1]
    assert not (tmp_path / "other").exists()
    output, _ = first.communicate(timeout=300)
    assert first.returncode == 0, output[-2000:]
    assert {row.id for row in scan_rows([results]).rows} == SLOW_CASES


def test_a_huge_allocation_costs_one_row_and_nothing_else(tmp_path):
    results, reports = tmp_path / "results", tmp_path / "reports"
    proc = _conformance(
        results,
        reports,
        *("-n", "0", "--planted", "huge_alloc", "--planted", "pass", "--shapes", "static"),
        *("--case-memory", "4G"),
    )
    rows = {row.id: row for row in scan_rows([results]).rows}
    huge = rows[_case("huge_alloc")]
    assert (huge.status, huge.stage) == ("crash", "export"), proc.stdout[-2000:]
    assert huge.error_signature.startswith("oom: MemoryError")
    assert rows[_case("pass")].status == "pass"
    assert proc.returncode == 1


# --------------------------------------------------------------------------- safe save


@pytest.fixture(scope="module")
def linear_program():
    import torch

    from torch_onnx_conformance import exporter

    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64).eval()
    return model, exporter.export(model, (torch.rand(2, 64),))


@pytest.mark.parametrize("planted", ["model.onnx", "model.onnx.data"])
def test_save_never_writes_through_a_planted_symlink(tmp_path, linear_program, planted):
    _, program = linear_program
    victim = tmp_path / "elsewhere" / "precious.txt"
    victim.parent.mkdir()
    victim.write_text("do not overwrite\n")
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / planted).symlink_to(victim)
    with pytest.raises(FileExistsError, match=rf"{planted} is a symbolic link .*precious.txt"):
        program.save(folder / "model.onnx", external_data=True)
    assert victim.read_text() == "do not overwrite\n"
    assert sorted(p.name for p in folder.iterdir()) == [planted]  # no half-written leftovers


def test_save_renames_into_place_with_data_beside_the_model(tmp_path, linear_program):
    import onnx
    import onnxruntime
    import torch

    model, program = linear_program
    (tmp_path / "model.onnx").write_bytes(b"an older model")
    program.save(tmp_path / "model.onnx", external_data=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx", "model.onnx.data"]
    proto = onnx.load(tmp_path / "model.onnx", load_external_data=False)
    locations = {
        entry.value
        for tensor in proto.graph.initializer
        for entry in tensor.external_data
        if entry.key == "location"
    }
    assert locations == {"model.onnx.data"}
    session = onnxruntime.InferenceSession(
        tmp_path / "model.onnx", providers=["CPUExecutionProvider"]
    )
    x = torch.rand(2, 64)
    (got,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    torch.testing.assert_close(torch.from_numpy(got), model(x).detach(), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_resume_repairs_a_torn_line_and_skips_invalid_rows_by_file_and_line(tmp_path):
    results, reports = tmp_path / "results", tmp_path / "reports"
    planted = ("-n", "0", "--planted", "pass", "--planted", "wrong", "--shapes", "static")
    first = _conformance(results, reports, *planted)
    assert first.returncode == 1, first.stdout[-2000:] + first.stderr[-2000:]
    (rows_file,) = results.glob("*.jsonl")
    kept = [line for line in rows_file.read_bytes().splitlines() if b"planted.wrong" in line]
    # The pass row is lost to garbage: invalid lines, then a torn last line.
    rows_file.write_bytes(b"\n".join([*kept, b"null", b"42", b"\xff\xfe", b'{"id": "op::t']))
    second = _conformance(results, reports, *planted, "--resume")
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    assert "INTERNALERROR" not in second.stdout + second.stderr
    assert f"--resume: {rows_file}:5: dropped a torn last line" in second.stderr
    assert f"skipped {rows_file}:2: not a JSON object but NoneType" in second.stderr
    assert f"skipped {rows_file}:4: not UTF-8" in second.stderr
    assert " 1 passed, " in second.stdout, second.stdout[-1500:]
    found = scan_rows([results])
    assert {row.id: row.status for row in found.rows} == {
        _case("pass"): "pass",
        _case("wrong"): "fail",
    }
    assert found.completeness() is None


def _model_case(fault: str) -> str:
    return f"model::planted/{fault}::f32::static::opset20::cpu::ours::opt"


@pytest.mark.slow
def test_planted_model_faults_each_cost_one_row_and_the_run_goes_on(tmp_path):
    results, reports = tmp_path / "results", tmp_path / "reports"
    faults = ("pass", "segfault", "sigkill", "huge_alloc")
    proc = _conformance(
        results,
        reports,
        *(
            "-n",
            "0",
            "--model-cases",
            str(ROOT / "torch_onnx_conformance" / "conformance" / "planted.py"),
        ),
        *(
            "--shapes",
            "static",
            "--case-memory",
            "4G",
            "torch_onnx_conformance/conformance/test_models.py",
        ),
        *(arg for fault in faults for arg in ("--models", f"planted/{fault}")),
        timeout=600,
    )
    found = scan_rows([results])
    outcome = {row.id: (row.status, row.stage) for row in found.rows}
    assert outcome == {
        _model_case("pass"): ("pass", None),
        _model_case("segfault"): ("crash", "export"),
        _model_case("sigkill"): ("crash", "export"),
        _model_case("huge_alloc"): ("crash", "export"),
    }, proc.stdout[-3000:]
    rows = {row.id: row for row in found.rows}
    assert "SIGSEGV" in rows[_model_case("segfault")].error
    assert "SIGKILL" in rows[_model_case("sigkill")].error
    assert "MemoryError" in rows[_model_case("huge_alloc")].error_signature
    assert proc.returncode == 1 and found.completeness() is None


def test_the_run_keeps_pytests_cache_out_of_the_checkout_unless_asked_for():
    from torch_onnx_conformance.conformance.__main__ import build_pytest_command

    plain = build_pytest_command(["--planted", "pass"], None)
    assert plain[plain.index("no:cacheprovider") - 1] == "-p"
    assert "no:cacheprovider" not in build_pytest_command(["--lf"], None)
