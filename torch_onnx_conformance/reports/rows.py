"""Result rows: the one record every conformance case ends as.

A run appends one JSON line per finished case (pass, fail, crash or timeout alike);
every report is a pure function of these rows.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from torch_onnx_conformance.exporter.stages import CASE_STAGES, FORMER_NAMES

STATUSES = ("pass", "fail", "xfail", "xpass", "skip", "crash", "timeout", "vacuous")
#: The stages a case can fail at: the exporter's one stage vocabulary, as plain names.
STAGES = tuple(stage.value for stage in CASE_STAGES)
#: Statuses that count as a success in pass-rate tables.
PASSING = ("pass",)
#: Statuses no expectation predicted: what a triage starts from.
UNEXPECTED = ("fail", "crash", "timeout", "xpass")
#: Exit code of a run or report build whose rows cover only part of the collected cases
#: (pytest itself uses 0 to 5).
INCOMPLETE_EXIT_CODE = 6


@dataclasses.dataclass
class CaseResult:
    """One conformance case's outcome.

    ``id`` is the stable, greppable case id, for example
    ``op::nn.functional.conv2d::s003::f32::dynamic::opset20::cpu::ours`` or
    ``model::torchvision/resnet18::f32::static::opset20::cpu::ours::opt``.
    """

    id: str
    kind: str  # "op" or "model"
    subject: str  # OpInfo name (with variant, "name.variant") or zoo model name
    family: str  # op family ("elementwise", "nn", ...) or model family ("torchvision", ...)
    dtype: str  # short dtype: f32, f16, bf16, i64, b8
    shapes: str  # "static" or "dynamic"
    opset: int
    provider: str  # cpu, cuda, reference
    exporter: str  # ours, torch-dynamo, torch-script
    status: str  # one of STATUSES
    sample: int | None = None
    optimize: bool | None = None
    stage: str | None = None  # one of STAGES when status is not pass
    error_signature: str | None = None
    error: str | None = None
    max_abs: float | None = None
    max_rel: float | None = None
    rtol: float | None = None
    atol: float | None = None
    export_s: float | None = None
    run_s: float | None = None
    node_count: int | None = None
    session_create_s: float | None = None
    latency_ms: float | None = None
    expectation: str | None = None  # reason of the matching expectation entry, if any
    repro_dir: str | None = None
    versions: dict[str, str] = dataclasses.field(default_factory=dict)
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> str:
        # The fields as they are: json walks the nested dicts itself (dataclasses.asdict's deep
        # copy of them cost half a millisecond a row); a dataclass inside goes through asdict.
        fields = {field.name: getattr(self, field.name) for field in _FIELDS}
        return json.dumps(fields, sort_keys=True, default=_json_default)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CaseResult:
        known = {f.name for f in dataclasses.fields(cls)}
        extra = dict(data.get("extra") or {})
        extra.update({k: v for k, v in data.items() if k not in known})
        if data.get("stage") in FORMER_NAMES:
            data = {**data, "stage": FORMER_NAMES[data["stage"]].value}
        return cls(**{k: v for k, v in data.items() if k in known and k != "extra"}, extra=extra)


_FIELDS = dataclasses.fields(CaseResult)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if hasattr(obj, "item"):
        return obj.item()
    return str(obj)


#: A rows file is fsynced at most this often (and by the first row): a killed process keeps
#: every row it wrote anyway (each is one ``write`` into the kernel's cache); what fsync adds is
#: a machine that loses power losing at most this much of a run, which ``--resume`` reruns.
#: Once per row it cost milliseconds per case on a filesystem mounted with online discard.
SYNC_INTERVAL_S = 1.0
_last_sync: dict[str, float] = {}


def append_row(path: str | os.PathLike, row: CaseResult) -> None:
    """Append one row as one whole line, so a killed run keeps every row it wrote; fsynced
    at most every ``SYNC_INTERVAL_S`` seconds.

    A file that ends without a newline holds the fragment of a writer killed mid-line; the row
    then starts on a line of its own instead of being glued onto the fragment.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (row.to_json() + "\n").encode("utf-8")
    # One write of one line with O_APPEND: concurrent xdist workers never interleave.
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line
        os.write(fd, line)
        now = time.monotonic()
        if now - _last_sync.get(str(path), -SYNC_INTERVAL_S) >= SYNC_INTERVAL_S:
            os.fsync(fd)
            _last_sync[str(path)] = now
    finally:
        os.close(fd)


@dataclasses.dataclass
class RowsRead:
    """What a results folder holds: the rows (last one per id wins), the lines that are not
    valid rows (as ``file:line: why``), and the case ids the newest run collected, if known."""

    rows: list[CaseResult]
    invalid: list[str]
    expected: list[str] | None = None
    #: The manifests of the runs whose rows these are, oldest first (commit, command, start).
    runs: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    @property
    def missing(self) -> list[str]:
        """Collected case ids that have no row: the run stopped before they finished."""
        have = {row.id for row in self.rows}
        return [case_id for case_id in dict.fromkeys(self.expected or ()) if case_id not in have]

    def completeness(self) -> str | None:
        """``incomplete: N of M cases have results`` when rows are missing, else None."""
        missing = self.missing
        if not missing:
            return None
        total = len(dict.fromkeys(self.expected or ()))
        return f"incomplete: {total - len(missing)} of {total} cases have results"


def scan_rows(paths: Iterable[str | os.PathLike]) -> RowsRead:
    """Read rows from JSONL files or results folders, never failing on a bad line.

    A folder written by ``python -m torch_onnx_conformance run`` is read through its run manifests: only
    the newest fresh run and the ``--resume`` runs after it count (see ``run_lineage``).
    """
    by_id: dict[str, CaseResult] = {}
    invalid: list[str] = []
    expected: list[str] | None = None
    runs: list[dict[str, Any]] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            files, run_expected = folder_files(p)
            if run_expected is not None:  # shards built together: every shard's cases count
                expected = [*(expected or []), *run_expected]
            runs += run_lineage(read_manifests(p))
        else:
            files = [p] if p.exists() else []
        for path in files:
            for row in _iter_file(path, invalid):
                by_id[row.id] = row
    return RowsRead(list(by_id.values()), invalid, expected, runs)


def read_rows(paths: Iterable[str | os.PathLike]) -> list[CaseResult]:
    """The valid rows of ``scan_rows``; each invalid line is named on stderr.

    When the same id appears more than once (a resumed or re-run case), the last row wins.
    """
    found = scan_rows(paths)
    report_invalid(found.invalid)
    return found.rows


def report_invalid(invalid: Sequence[str], stream=None) -> None:
    stream = sys.stderr if stream is None else stream
    for problem in invalid:
        print(f"warning: skipped {problem}", file=stream)


# --------------------------------------------------------------------------- run manifests

#: Where ``python -m torch_onnx_conformance run`` keeps one manifest per run: ``RESULTS/runs/<id>.json``.
#: Not a hidden folder: CI uploads RESULTS without hidden files, and the merged report needs the
#: manifests to tell a complete shard from one that was cut short.
RUNS_DIR = "runs"


def rows_file_name(run_id: str, worker: str) -> str:
    """A run's rows file for one worker; the run id prefix says which run owns it."""
    return f"{run_id}.{worker}.jsonl"


def read_manifests(results: Path) -> list[dict[str, Any]]:
    """Every readable run manifest of a results folder, oldest first (run ids sort by time)."""
    manifests = []
    for path in sorted((results / RUNS_DIR).glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("run_id") == path.stem:
            manifests.append(data)
    return manifests


def run_lineage(manifests: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs whose rows make up the current results: the newest fresh run and every
    ``--resume`` run after it. Earlier runs are superseded (and deleted by the next run)."""
    start = 0
    for index, manifest in enumerate(manifests):
        if not manifest.get("resume"):
            start = index
    return list(manifests[start:])


def folder_files(folder: Path) -> tuple[list[Path], list[str] | None]:
    """The rows files of a results folder that make up its current results, and the case ids
    its newest run collected (None for a folder without run manifests)."""
    manifests = read_manifests(folder)
    if not manifests:
        return sorted(folder.rglob("*.jsonl")), None
    lineage = run_lineage(manifests)
    files = [
        path
        for manifest in lineage
        for path in sorted(folder.glob(rows_file_name(manifest["run_id"], "*")))
    ]
    cases = lineage[-1].get("cases")
    return files, list(cases) if isinstance(cases, list) else None


# --------------------------------------------------------------------------- validation

_TEXT_FIELDS = ("id", "kind", "subject", "family", "dtype", "shapes", "provider", "exporter")
_NUMBER_FIELDS = (
    "max_abs",
    "max_rel",
    "rtol",
    "atol",
    "export_s",
    "run_s",
    "session_create_s",
    "latency_ms",
)


def row_problem(data: Any) -> str | None:
    """Why ``data`` (one decoded JSON line) is not a valid row, or None when it is."""
    if not isinstance(data, dict):
        return f"not a JSON object but {type(data).__name__}"
    if "status" not in data:
        return "no 'status'"
    if data["status"] not in STATUSES:
        return f"status {data['status']!r} is not one of {', '.join(STATUSES)}"
    missing = [name for name in (*_TEXT_FIELDS, "opset") if name not in data]
    if missing:
        return f"missing {', '.join(missing)}"
    wrong = [name for name in _TEXT_FIELDS if not isinstance(data[name], str)]
    if not isinstance(data["opset"], int) or isinstance(data["opset"], bool):
        wrong.append("opset")
    wrong += [
        name
        for name in _NUMBER_FIELDS
        if data.get(name) is not None
        and (not isinstance(data[name], (int, float)) or isinstance(data[name], bool))
    ]
    if any(not isinstance(data.get(name) or {}, dict) for name in ("versions", "extra")):
        wrong.append("versions/extra")
    if wrong:
        return f"wrong type for {', '.join(wrong)}"
    return None


def _iter_file(path: Path, invalid: list[str]) -> Iterator[CaseResult]:
    try:
        content = path.read_bytes()
    except OSError as error:
        invalid.append(f"{path}: unreadable ({error.strerror})")
        return
    lines = content.split(b"\n")
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        torn = number == len(lines)  # no newline after it: a writer was killed mid-line
        where = f"{path}:{number}"
        try:
            data = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            invalid.append(f"{where}: not UTF-8")
            continue
        except json.JSONDecodeError:
            invalid.append(f"{where}: " + ("torn last line" if torn else "not JSON"))
            continue
        problem = row_problem(data)
        if problem is None:
            try:
                yield CaseResult.from_dict(data)
                continue
            except TypeError as error:
                problem = str(error)
        invalid.append(f"{where}: {problem}")


def repair_torn_tails(paths: Iterable[str | os.PathLike]) -> list[str]:
    """Cut a torn last line (no newline after it) off each rows file; returns what was cut.

    Used before ``--resume`` appends: the fragment belongs to a case without a finished row,
    which the resumed run runs again.
    """
    repaired = []
    for p in paths:
        p = Path(p)
        for path in folder_files(p)[0] if p.is_dir() else [p]:
            try:
                with path.open("r+b") as handle:
                    content = handle.read()
                    if not content or content.endswith(b"\n"):
                        continue
                    keep = content.rfind(b"\n") + 1
                    handle.truncate(keep)
                    os.fsync(handle.fileno())
            except OSError:
                continue
            line = content.count(b"\n", 0, keep) + 1
            repaired.append(
                f"{path}:{line}: dropped a torn last line ({len(content) - keep} bytes)"
            )
    return repaired


def finished_ids(paths: Iterable[str | os.PathLike]) -> set[str]:
    """Ids of the cases that already have a row (used by ``--resume``)."""
    return {row.id for row in read_rows(paths)}
