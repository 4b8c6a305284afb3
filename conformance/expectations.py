"""Expected failures as data: one TOML file per exporter, ``expectations/<exporter>.toml``.

Each ``[[expectation]]`` entry names the cases it covers by an ``id`` glob (fnmatch over the case
id) and/or a declarative ``match`` table, and says ``status`` (``xfail``, or ``skip`` for cases
that crash, hang or give random values), the failing ``stage``, a ``reason`` and a ``link``::

    [[expectation]]
    id = "op::nonzero::*"
    match = { has_scalar = true }       # optional; keys below
    status = "xfail"
    stage = "compare"
    reason = "0-d input: NonZero gives (0, 1) where torch gives (0, 0)"
    link = "https://github.com/..."

``match`` keys: op, dtype, shapes, opset, provider, exporter, sample (case fields); signature
(glob over the sample's input signature), max_ndim, n_tensors, has_scalar, has_empty (sample
facts); error (glob over the error signature, judged only for failures). A value is a glob for
strings, equality otherwise, and a list means any of its values.

A failure is expected when an entry matches the case and its stage (if given) is the stage the
case failed at. A pass matched by an xfail entry is an unexpected pass: the case fails, so that
stale entries cannot pile up. ``--update-expectations`` writes ``<exporter>.proposed.toml``:
stale entries dropped, new failures added with their stage and error signature.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from conformance.case import row_facts
from exporter.stages import CASE_STAGES, stage_named

STATUSES = ("xfail", "skip")
FAILURE_STATUSES = ("fail", "crash", "timeout")
MATCH_KEYS = (
    "op",
    "dtype",
    "shapes",
    "opset",
    "provider",
    "exporter",
    "sample",
    "signature",
    "max_ndim",
    "n_tensors",
    "has_scalar",
    "has_empty",
    "error",
    # model cases (expectations/models-<exporter>.toml)
    "model",
    "family",
    "optimize",
)
ENTRY_KEYS = ("id", "match", "status", "stage", "reason", "link", "signature")
#: An expectation names the stage a result row records.
STAGES = tuple(stage.value for stage in CASE_STAGES)

HEADER = """\
# Expected failures for this exporter: data, read by conformance/expectations.py (see its
# docstring for the fields). Regenerate a proposal from a run with --update-expectations; review
# the .proposed.toml it writes, then replace this file with it.
"""


@dataclasses.dataclass(frozen=True)
class Expectation:
    index: int
    status: str
    id: str | None = None
    match: dict[str, Any] = dataclasses.field(default_factory=dict)
    stage: str | None = None
    reason: str = ""
    link: str = ""
    signature: str | None = None  # the error signature seen when the entry was proposed

    def matches(self, facts: dict[str, Any], error_signature: str | None = None) -> bool:
        if self.id is not None and not fnmatch.fnmatchcase(facts["id"], self.id):
            return False
        for key, wanted in self.match.items():
            if key == "error":
                if error_signature is not None and not _value_matches(error_signature, wanted):
                    return False
                continue
            if not _value_matches(facts.get(key), wanted):
                return False
        return True

    def to_toml_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self.id is not None:
            data["id"] = self.id
        if self.match:
            data["match"] = dict(self.match)
        data["status"] = self.status
        if self.stage:
            data["stage"] = self.stage
        data["reason"] = self.reason
        data["link"] = self.link
        if self.signature:
            data["signature"] = self.signature
        return data


def _value_matches(actual: Any, wanted: Any) -> bool:
    if isinstance(wanted, list):
        return any(_value_matches(actual, w) for w in wanted)
    if isinstance(wanted, str):
        return actual is not None and fnmatch.fnmatchcase(str(actual), wanted)
    return actual == wanted


def load_expectations(path: Path) -> list[Expectation]:
    """Entries of one expectations file; a missing file means no expectations."""
    path = Path(path)
    if not path.exists():
        return []
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not valid TOML: {exc}") from exc
    unknown_tables = set(data) - {"expectation"}
    if unknown_tables:
        raise ValueError(
            f"{path}: unknown top-level keys {sorted(unknown_tables)}; use [[expectation]]"
        )
    entries = []
    for index, raw in enumerate(data.get("expectation", [])):
        where = f"{path}: [[expectation]] #{index + 1}"
        unknown = set(raw) - set(ENTRY_KEYS)
        if unknown:
            raise ValueError(f"{where}: unknown keys {sorted(unknown)}; allowed: {ENTRY_KEYS}")
        if raw.get("status") not in STATUSES:
            raise ValueError(
                f"{where}: status must be one of {STATUSES}, got {raw.get('status')!r}"
            )
        if "id" not in raw and "match" not in raw:
            raise ValueError(f"{where}: needs an id glob or a match table (use id = '*' for all)")
        stage = None
        if raw.get("stage") is not None:
            try:
                stage = stage_named(raw["stage"]).value
            except ValueError:
                stage = None
            if stage not in STAGES:
                raise ValueError(f"{where}: stage must be one of {STAGES}, got {raw['stage']!r}")
        match = raw.get("match", {})
        bad_keys = set(match) - set(MATCH_KEYS)
        if bad_keys:
            raise ValueError(
                f"{where}: unknown match keys {sorted(bad_keys)}; allowed: {MATCH_KEYS}"
            )
        if not raw.get("reason"):
            raise ValueError(f"{where}: every entry needs a reason")
        entries.append(
            Expectation(
                index=index,
                status=raw["status"],
                id=raw.get("id"),
                match=dict(match),
                stage=stage,
                reason=raw["reason"],
                link=raw.get("link", ""),
                signature=raw.get("signature"),
            )
        )
    return entries


def skip_entry(entries: Sequence[Expectation], facts: dict[str, Any]) -> Expectation | None:
    """The skip entry covering a case, if any (judged before the case runs)."""
    for entry in entries:
        if entry.status == "skip" and entry.matches(facts):
            return entry
    return None


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What an outcome means once the expectations are applied."""

    status: str  # the row status: pass, fail, xfail, xpass, skip, crash, timeout
    item: str  # what the pytest item does: pass, fail, xfail, skip
    entry: Expectation | None = None
    message: str = ""


def judge(
    entries: Sequence[Expectation],
    facts: dict[str, Any],
    status: str,
    stage: str | None,
    error_signature: str | None,
) -> Verdict:
    """Apply the expectations to one outcome (``status`` from the run: pass/fail/skip/crash/
    timeout)."""
    if status == "skip":
        return Verdict("skip", "skip")
    xfails = [e for e in entries if e.status == "xfail"]
    if status == "pass":
        covering = [e for e in xfails if e.matches(facts)]
        if covering:
            entry = covering[0]
            return Verdict(
                "xpass",
                "fail",
                entry,
                f"unexpected pass: expectation #{entry.index + 1} ({entry.reason}) says this case "
                f"fails at {entry.stage or 'some stage'}. Drop the entry "
                "(--update-expectations proposes it).",
            )
        return Verdict("pass", "pass")
    covering = [e for e in xfails if e.matches(facts, error_signature)]
    for entry in covering:
        if entry.stage is None or entry.stage == stage:
            row_status = "xfail" if status == "fail" else status
            return Verdict(row_status, "xfail", entry, f"expected: {entry.reason}")
    if covering:
        entry = covering[0]
        return Verdict(
            status,
            "fail",
            entry,
            f"expectation #{entry.index + 1} ({entry.reason}) expects a failure at {entry.stage}, "
            f"but the case failed at {stage}",
        )
    return Verdict(status, "fail")


# --------------------------------------------------------------------------- proposals


@dataclasses.dataclass
class Proposal:
    entries: list[Expectation]
    dropped: list[Expectation]
    added: list[Expectation]


def propose(entries: Sequence[Expectation], rows: Iterable) -> Proposal:
    """The expectations a run suggests: drop entries every covered case contradicts (it passed
    or failed elsewhere) and add an entry for each failure nothing covers.

    ``rows`` are ``reports.rows.CaseResult`` of the cases the run covered (ops or models): a
    row's matcher facts come from its id and, for an op, the sample facts it kept.
    """
    confirmed: set[int] = set()
    contradicted: set[int] = set()
    new_failures = []
    for row in rows:
        if row.status in ("skip", "vacuous"):
            continue
        outcome_status = "fail" if row.status == "xfail" else row.status
        if outcome_status == "xpass":
            outcome_status = "pass"
        facts = row_facts(row.id, (row.extra or {}).get("sample"))
        verdict = judge(entries, facts, outcome_status, row.stage, row.error_signature)
        if verdict.item == "xfail" and verdict.entry is not None:
            confirmed.add(verdict.entry.index)
            continue
        if verdict.entry is not None:
            contradicted.add(verdict.entry.index)
        if outcome_status in FAILURE_STATUSES:
            new_failures.append(row)
    stale = contradicted - confirmed
    kept = [e for e in entries if e.index not in stale]
    dropped = [e for e in entries if e.index in stale]
    added = []
    for row in sorted(new_failures, key=lambda r: r.id):
        hang_or_crash = row.status in ("crash", "timeout")
        added.append(
            Expectation(
                index=-1,
                status="skip" if hang_or_crash else "xfail",
                id=row.id,
                stage=row.stage,
                # The message as raised (numbers kept); the signature below is the masked match.
                reason=f"{row.status} at {row.stage}: {_headline(row) or 'no message'}"[:300],
                link="",
                signature=row.error_signature or None,
            )
        )
    return Proposal(kept + added, dropped, added)


def _headline(row) -> str:
    from reports.signatures import error_headline

    return error_headline(row.error) or row.error_signature or ""


def proposed_path(path: Path) -> Path:
    return Path(path).with_suffix(".proposed.toml")


def write_expectations(path: Path, entries: Sequence[Expectation]) -> None:
    import tomli_w

    body = tomli_w.dumps({"expectation": [e.to_toml_dict() for e in entries]}) if entries else ""
    Path(path).write_text(HEADER + "\n" + body, encoding="utf-8")
