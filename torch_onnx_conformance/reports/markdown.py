"""Markdown tables that render on GitHub and stay readable as plain text."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

_BACKTICK_RUN = re.compile(r"`+")


@dataclasses.dataclass
class Table:
    headers: list[str]
    rows: list[list[str]] = dataclasses.field(default_factory=list)
    #: Per-column alignment: "l", "r" or "c"; defaults to left.
    align: list[str] | None = None

    def add(self, *cells: str) -> None:
        if len(cells) != len(self.headers):
            raise ValueError(
                f"row has {len(cells)} cells but the table has {len(self.headers)} columns"
            )
        self.rows.append(list(cells))

    def render(self) -> str:
        align = self.align or ["l"] * len(self.headers)
        rule = {"l": "---", "r": "---:", "c": ":---:"}
        lines = [
            _row([text(h) for h in self.headers]),
            _row([rule[a] for a in align]),
        ]
        lines.extend(_row(cells) for cells in self.rows)
        return "\n".join(lines)


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def text(value: object) -> str:
    """A plain table cell: pipes escaped, line breaks flattened."""
    return " ".join(str(value).split()).replace("|", "\\|")


def code(value: object) -> str:
    """A table cell shown as code, so ``<N>``, ``__name__`` and ``*`` print as written."""
    content = " ".join(str(value).split())
    if not content:
        return ""
    longest = max((len(run) for run in _BACKTICK_RUN.findall(content)), default=0)
    fence = "`" * (longest + 1)
    padded = f" {content} " if content.startswith("`") or content.endswith("`") else content
    # GitHub splits table cells on "|" even inside code spans unless it is escaped.
    return f"{fence}{padded.replace('|', chr(92) + '|')}{fence}"


def heading(level: int, title: str) -> str:
    return f"{'#' * level} {title}"


def details(summary: str, body: str) -> str:
    """A collapsed section (GitHub renders markdown inside it after a blank line)."""
    return f"<details><summary>{summary}</summary>\n\n{body.rstrip()}\n\n</details>"


def document(*blocks: str | None) -> str:
    """Join non-empty blocks with blank lines, ending in one newline."""
    return "\n\n".join(block for block in blocks if block) + "\n"
