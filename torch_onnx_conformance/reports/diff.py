"""Status changes between two runs: ``python -m torch_onnx_conformance.reports.diff OLD NEW``.

OLD and NEW are results folders or rows files (what ``python -m torch_onnx_conformance.reports`` reads). Prints one line
per case whose status differs (``old -> new``, the new stage and error signature when it does
not pass), then the cases only one side ran (not with ``--changed-only``), then a count. Exits 0 when every case both sides
ran has the same status, 1 otherwise: a refactor that must keep behaviour checks with it.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

from torch_onnx_conformance.reports.rows import CaseResult, read_rows


@dataclasses.dataclass
class StatusDiff:
    changed: list[tuple[CaseResult, CaseResult]]
    only_old: list[str]
    only_new: list[str]
    same: int


def diff_rows(old: Sequence[CaseResult], new: Sequence[CaseResult]) -> StatusDiff:
    before = {row.id: row for row in old}
    after = {row.id: row for row in new}
    changed = [
        (before[case_id], after[case_id])
        for case_id in sorted(before.keys() & after.keys())
        if before[case_id].status != after[case_id].status
    ]
    return StatusDiff(
        changed=changed,
        only_old=sorted(before.keys() - after.keys()),
        only_new=sorted(after.keys() - before.keys()),
        same=len(before.keys() & after.keys()) - len(changed),
    )


def render(diff: StatusDiff, *, changed_only: bool = False) -> list[str]:
    lines = []
    for old, new in diff.changed:
        where = f" at {new.stage}" if new.stage else ""
        why = f": {new.error_signature}" if new.error_signature and new.status != "pass" else ""
        lines.append(f"{new.id}: {old.status} -> {new.status}{where}{why}")
    if not changed_only:
        lines += [f"{case_id}: only in OLD" for case_id in diff.only_old]
        lines += [f"{case_id}: only in NEW" for case_id in diff.only_new]
    lines.append(
        f"{diff.same} same status, {len(diff.changed)} changed, "
        f"{len(diff.only_old)} only in OLD, {len(diff.only_new)} only in NEW"
    )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m torch_onnx_conformance.reports.diff",
        description="Print the cases whose status differs between two runs' result rows.",
    )
    parser.add_argument("old", type=Path, help="results folder or rows file of the earlier run")
    parser.add_argument("new", type=Path, help="results folder or rows file of the later run")
    parser.add_argument(
        "--changed-only",
        action="store_true",
        help="list only the status changes, not the cases one side ran (a targeted run against "
        "a full one); their counts are still printed",
    )
    options = parser.parse_args(argv)
    for path in (options.old, options.new):
        if not path.exists():
            parser.error(f"{path}: no such results folder or rows file")
    diff = diff_rows(read_rows([options.old]), read_rows([options.new]))
    print("\n".join(render(diff, changed_only=options.changed_only)))
    return 1 if diff.changed else 0


if __name__ == "__main__":
    sys.exit(main())
