"""``python -m reports build RESULTS... --out DIR``: rebuild every report from result rows."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports", description=__doc__)
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
    build.add_argument(
        "--out", required=True, type=Path, help="directory to write the reports into"
    )
    build.add_argument("--no-charts", action="store_true", help="skip the PNG charts")
    args = parser.parse_args(argv)

    missing = [str(path) for path in args.results if not path.exists()]
    if missing:
        parser.error(
            f"result path(s) not found: {', '.join(missing)}. Pass the JSONL files or the "
            "--results directory of a conformance run (default: results/)."
        )

    from reports.build import build_from_paths
    from reports.rows import INCOMPLETE_EXIT_CODE
    from reports.tally import is_pass

    found, written = build_from_paths(args.results, args.out, charts=not args.no_charts)
    rows = found.rows
    if not rows:
        print(
            "warning: no result rows found in "
            + ", ".join(str(p) for p in args.results)
            + "; the reports say so. Did the conformance run select any case?",
            file=sys.stderr,
        )
    passed = sum(1 for row in rows if is_pass(row))
    print(f"{len(rows)} cases, {passed} passed; wrote {len(written)} files to {args.out}")
    print(f"summary: {args.out / 'summary.md'}")
    completeness = found.completeness()
    if completeness:
        print(
            f"{completeness}: {len(found.missing)} collected cases never finished", file=sys.stderr
        )
        return INCOMPLETE_EXIT_CODE
    return 0


if __name__ == "__main__":
    sys.exit(main())
