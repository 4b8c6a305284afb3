"""Result rows: the one record every conformance case ends as.

A run appends one JSON line per finished case (pass, fail, crash or timeout alike);
every report is a pure function of these rows.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

STATUSES = ("pass", "fail", "xfail", "xpass", "skip", "crash", "timeout", "vacuous")
STAGES = ("export", "checker", "load", "run", "compare", "second-shape")
#: Statuses that count as a success in pass-rate tables.
PASSING = ("pass",)


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
        return json.dumps(dataclasses.asdict(self), sort_keys=True, default=_json_default)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CaseResult:
        known = {f.name for f in dataclasses.fields(cls)}
        extra = dict(data.get("extra") or {})
        extra.update({k: v for k, v in data.items() if k not in known})
        return cls(**{k: v for k, v in data.items() if k in known and k != "extra"}, extra=extra)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj
    if hasattr(obj, "item"):
        return obj.item()
    return str(obj)


def append_row(path: str | os.PathLike, row: CaseResult) -> None:
    """Append one row and flush it to disk at once, so a killed run keeps it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = row.to_json() + "\n"
    # One write of one line with O_APPEND: concurrent xdist workers never interleave.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)


def read_rows(paths: Iterable[str | os.PathLike]) -> list[CaseResult]:
    """Read rows from JSONL files (or directories of them). A torn last line is skipped.

    When the same id appears more than once (a resumed or re-run case), the last row wins.
    """
    by_id: dict[str, CaseResult] = {}
    for path in _expand(paths):
        for row in _iter_file(path):
            by_id[row.id] = row
    return list(by_id.values())


def _expand(paths: Iterable[str | os.PathLike]) -> Iterator[Path]:
    for p in paths:
        p = Path(p)
        if p.is_dir():
            yield from sorted(p.rglob("*.jsonl"))
        elif p.exists():
            yield p


def _iter_file(path: Path) -> Iterator[CaseResult]:
    with path.open(encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                yield CaseResult.from_dict(json.loads(line))
            except (json.JSONDecodeError, TypeError):
                continue  # a line torn by a killed writer


def finished_ids(paths: Iterable[str | os.PathLike]) -> set[str]:
    """Ids of the cases that already have a row (used by ``--resume``)."""
    return {row.id for row in read_rows(paths)}
