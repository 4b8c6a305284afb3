"""``python -m torch_onnx_conformance.reports build RESULTS... --out DIR [--html SITE]``: rebuild every report from
result rows; ``--html`` also writes the static dashboard (matrix, diff against ``--baseline``,
history carried through ``--history``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m torch_onnx_conformance.reports", description=__doc__
    )
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser(
        "build",
        help="build summary.md, ops.md, models.md and charts from result rows",
    )
    build.add_argument(
        "results",
        nargs="+",
        type=Path,
        help="JSONL result files, or directories searched for *.jsonl",
    )
    build.add_argument("--out", type=Path, help="directory to write the markdown reports into")
    build.add_argument("--no-charts", action="store_true", help="skip the PNG charts")
    build.add_argument(
        "--html",
        type=Path,
        metavar="SITE",
        help="also write the static dashboard (index.html and its data) into this directory",
    )
    build.add_argument(
        "--baseline",
        nargs="+",
        type=Path,
        metavar="ROWS",
        help="an earlier run's rows files or results folder: the dashboard's diff view",
    )
    build.add_argument(
        "--history",
        type=Path,
        metavar="HISTORY_JSONL",
        help="the history.jsonl of an earlier dashboard (and its history-cases.json beside it); "
        "SITE/history.jsonl gets its lines and one for this run (a missing file starts anew)",
    )
    args = parser.parse_args(argv)
    if args.out is None and args.html is None:
        parser.error("give --out DIR (markdown reports), --html SITE (dashboard), or both")
    if (args.baseline or args.history) and args.html is None:
        parser.error("--baseline and --history feed the dashboard: add --html SITE")

    missing = [str(path) for path in [*args.results, *(args.baseline or [])] if not path.exists()]
    if missing:
        parser.error(
            f"result path(s) not found: {', '.join(missing)}. Pass the JSONL files or the "
            "--results directory of a conformance run (default: results/)."
        )

    from torch_onnx_conformance.reports.build import build_from_paths
    from torch_onnx_conformance.reports.rows import INCOMPLETE_EXIT_CODE
    from torch_onnx_conformance.reports.tally import is_pass

    found, written = build_from_paths(
        args.results,
        args.out,
        charts=not args.no_charts,
        html=args.html,
        baseline=args.baseline,
        history=args.history,
    )
    rows = found.rows
    if not rows:
        print(
            "warning: no result rows found in "
            + ", ".join(str(p) for p in args.results)
            + "; the reports say so. Did the conformance run select any case?",
            file=sys.stderr,
        )
    passed = sum(1 for row in rows if is_pass(row))
    where = " and ".join(str(path) for path in (args.out, args.html) if path is not None)
    print(f"{len(rows)} cases, {passed} passed; wrote {len(written)} files to {where}")
    if args.out is not None:
        print(f"summary: {args.out / 'summary.md'}")
    if args.html is not None:
        print(f"dashboard: {args.html / 'index.html'}")
    completeness = found.completeness()
    if completeness:
        print(
            f"{completeness}: {len(found.missing)} collected cases never finished", file=sys.stderr
        )
        return INCOMPLETE_EXIT_CODE
    return 0


if __name__ == "__main__":
    sys.exit(main())
