"""Expected failures as data: one TOML file per exporter, ``expectations/<exporter>.toml``.

An ``[[expectation]]`` entry is a condition over a case's facts: it names the op (or model) and,
only where the failure depends on them, the opsets, dtypes, shape modes, providers or samples it
holds for. A failure that does not depend on the opset is written once and holds at every opset::

    [[expectation]]
    op = "nn.functional.grid_sample"     # glob over the op name (model cases: model = "...")
    opset = "<20"                        # only where the failure depends on it
    match = { max_ndim = 5 }             # optional: sample facts, keys below
    status = "xfail"
    stage = "export"
    reason = "5-D GridSample needs opset 20: GridSample-16 is 4-D only"
    link = "https://github.com/..."

Condition keys, at the top of an entry or inside ``match`` (the same key in both is an error):
op, model, family, exporter, opset, provider, dtype, shapes, sample, optimize (case fields);
signature (glob over the sample's input signature), max_ndim, n_tensors, has_scalar, has_empty
(sample facts); error (glob over the error signature, judged only for failures). A string is a
glob, a list means any of its values. The integer facts (opset, sample, max_ndim, n_tensors)
also take a range: ``"20"``, ``">=22"``, ``">22"``, ``"<=19"``, ``"<20"`` or ``"17-19"``
(inclusive). An ``id`` glob over the whole case id still works and may be combined with them.

``status`` is ``xfail``, or ``skip`` for cases that crash, hang or give random values; ``stage``
the stage the case fails at; every entry needs a ``reason`` that names the cause.

A failure is expected when an entry matches the case and its stage (if given) is the stage the
case failed at. A pass matched by an xfail entry is an unexpected pass: the case fails, so that
stale entries cannot pile up. ``--update-expectations`` writes ``<exporter>.proposed.toml``:
entries every covered case contradicts are dropped, and new failures are added as conditions, one
per op (model), stage and error signature, narrowed to the samples, shape modes, dtypes,
providers and opsets the run's rows show it depends on (an opset range only when the rows show
the failure at some opsets and a pass at others).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import itertools
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from torch_onnx_conformance.conformance.case import (
    DTYPES,
    EXPORTERS,
    KINDS,
    PROVIDERS,
    SHAPES,
    kind_of,
    row_facts,
)
from torch_onnx_conformance.exporter.stages import CASE_STAGES, stage_named

#: The harness's own expectations files (``--expectations-dir`` names another folder).
EXPECTATIONS_DIR = Path(__file__).with_name("expectations")
#: How the signature of a row the harness (not the exporter) failed begins; no expectation covers it.
HARNESS_ERROR = "HarnessError:"
STATUSES = ("xfail", "skip")
FAILURE_STATUSES = ("fail", "crash", "timeout")
#: Condition keys an entry may write at its top level (the case's own fields, and the error).
CONDITION_KEYS = (
    "op",
    "model",
    "family",
    "exporter",
    "opset",
    "provider",
    "dtype",
    "shapes",
    "sample",
    "optimize",
    "error",
)
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
#: Integer facts, which also take a range ("<20", ">=22", "17-19").
RANGE_KEYS = ("opset", "sample", "max_ndim", "n_tensors")
#: Facts with a closed vocabulary: a value that is no glob must be one of these.
_VOCABULARY = {"dtype": DTYPES, "shapes": SHAPES, "provider": PROVIDERS, "exporter": EXPORTERS}
ENTRY_KEYS = ("id", "match", "status", "stage", "reason", "link", "signature", *CONDITION_KEYS)
#: An expectation names the stage a result row records.
STAGES = tuple(stage.value for stage in CASE_STAGES)

HEADER = """\
# Expected failures for this exporter: data, read by torch_onnx_conformance/conformance/expectations.py (see its
# docstring for the fields). Regenerate a proposal from a run with --update-expectations; review
# the .proposed.toml it writes, then replace this file with it.
"""

_RANGE = re.compile(r"^\s*(?:(>=|<=|>|<|==)?\s*(\d+)|(\d+)\s*-\s*(\d+))\s*$")
_GLOB_CHARS = set("*?[")


@dataclasses.dataclass(frozen=True)
class IntRange:
    """An inclusive range of integers; ``None`` is open."""

    low: int | None
    high: int | None

    def __contains__(self, value: object) -> bool:
        if isinstance(value, bool) or not isinstance(value, int):
            return False
        return (self.low is None or value >= self.low) and (self.high is None or value <= self.high)


def parse_range(text: str) -> IntRange:
    """``"20"``, ``">=22"``, ``">22"``, ``"<=19"``, ``"<20"``, ``"==20"`` or ``"17-19"``."""
    found = _RANGE.match(text)
    if not found:
        raise ValueError(
            f"{text!r} is not a range; write N, >=N, >N, <=N, <N or A-B (inclusive), "
            'e.g. opset = ">=22" or opset = "17-19"'
        )
    op, number, low, high = found.groups()
    if low is not None:
        low_i, high_i = int(low), int(high)
        if low_i > high_i:
            raise ValueError(
                f"{text!r} is an empty range: {low_i} > {high_i}; write {high_i}-{low_i}"
            )
        return IntRange(low_i, high_i)
    n = int(number)
    return {
        None: IntRange(n, n),
        "==": IntRange(n, n),
        ">=": IntRange(n, None),
        ">": IntRange(n + 1, None),
        "<=": IntRange(None, n),
        "<": IntRange(None, n - 1),
    }[op]


def _check_condition(key: str, value: Any, where: str) -> None:
    """A clear error for a value the key cannot hold (a bad range, a misspelt dtype)."""
    values = value if isinstance(value, list) else [value]
    if not values:
        raise ValueError(f"{where}: {key} = [] matches nothing; leave the key out to match any")
    for one in values:
        if isinstance(one, list | dict):
            raise ValueError(f"{where}: {key} takes a value or a list of values, got {value!r}")
        if key in RANGE_KEYS:
            if isinstance(one, bool) or not isinstance(one, int | str):
                raise ValueError(f"{where}: {key} takes an integer or a range, got {one!r}")
            if isinstance(one, str):
                try:
                    parse_range(one)
                except ValueError as exc:
                    raise ValueError(f"{where}: {key}: {exc}") from None
        elif key in _VOCABULARY and isinstance(one, str) and not _GLOB_CHARS & set(one):
            if one not in _VOCABULARY[key]:
                raise ValueError(
                    f"{where}: {key} = {one!r} is none of {_VOCABULARY[key]} (or a glob)"
                )


@dataclasses.dataclass(frozen=True)
class Expectation:
    index: int
    status: str
    id: str | None = None
    #: Every condition, whether the file wrote it at the top of the entry or inside ``match``.
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
            if not _value_matches(facts.get(key), wanted, ranged=key in RANGE_KEYS):
                return False
        return True

    def to_toml_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self.id is not None:
            data["id"] = self.id
        rest = {}
        for key, value in self.match.items():
            if key in CONDITION_KEYS:
                data[key] = value
            else:
                rest[key] = value
        if rest:
            data["match"] = rest
        data["status"] = self.status
        if self.stage:
            data["stage"] = self.stage
        data["reason"] = self.reason
        data["link"] = self.link
        if self.signature:
            data["signature"] = self.signature
        return data


def _value_matches(actual: Any, wanted: Any, *, ranged: bool = False) -> bool:
    if isinstance(wanted, list):
        return any(_value_matches(actual, w, ranged=ranged) for w in wanted)
    if ranged and isinstance(wanted, str):
        return actual in parse_range(wanted)
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
        top = {key: raw[key] for key in CONDITION_KEYS if key in raw}
        if "id" not in raw and "match" not in raw and not top:
            raise ValueError(
                f"{where}: needs a condition (op, model, ...), an id glob or a match table "
                "(use id = '*' for all)"
            )
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
        twice = set(match) & set(top)
        if twice:
            raise ValueError(
                f"{where}: {sorted(twice)} given both in the entry and in its match table; "
                "write each condition once"
            )
        conditions = {**top, **match}
        for key, value in conditions.items():
            _check_condition(key, value, where)
        if not raw.get("reason"):
            raise ValueError(f"{where}: every entry needs a reason")
        entries.append(
            Expectation(
                index=index,
                status=raw["status"],
                id=raw.get("id"),
                match=conditions,
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


def judge_outcome(entries, facts: dict[str, Any], status: str, outcome: dict[str, Any]) -> Verdict:
    """The expectations' verdict on a case's outcome. A harness error (its signature starts
    with ``HARNESS_ERROR``) judges no exporter: no entry covers it, it fails as what it is."""
    signature = outcome.get("error_signature")
    if str(signature or "").startswith(HARNESS_ERROR):
        return Verdict(
            status, "fail", None, "conformance harness error (not the exporter's): fix the harness"
        )
    return judge(entries, facts, status, outcome.get("stage"), signature)


# --------------------------------------------------------------------------- proposals


@dataclasses.dataclass
class Proposal:
    entries: list[Expectation]
    dropped: list[Expectation]
    added: list[Expectation]


#: The case fields a proposed entry may narrow, in the order they are preferred when several
#: would each do: an opset range first (the rows show the failure at some opsets and a pass at
#: others), then a shape mode, the samples, and the rest.
_NARROWING_AXES = ("opset", "shapes", "sample", "dtype", "provider", "optimize", "exporter")


@dataclasses.dataclass(frozen=True)
class _Outcome:
    facts: dict[str, Any]
    status: str  # pass, fail, crash, timeout
    stage: str | None
    signature: str | None
    headline: str = ""  # the first line of the message as raised, numbers kept


def propose(entries: Sequence[Expectation], rows: Iterable) -> Proposal:
    """The expectations a run suggests: drop entries every covered case contradicts (it passed
    or failed elsewhere) and add entries for the failures nothing covers.

    ``rows`` are ``reports.rows.CaseResult`` of the cases the run covered (ops or models): a
    row's matcher facts come from its id and, for an op, the sample facts it kept. New failures
    are grouped by op (model), stage and error signature; each group becomes one entry narrowed
    only as far as the run's other rows of that op (passes, other failures) require.
    """
    confirmed: set[int] = set()
    contradicted: set[int] = set()
    outcomes: list[_Outcome] = []
    new_failures: list[_Outcome] = []
    for row in rows:
        if row.status in ("skip", "vacuous"):
            continue
        outcome_status = "fail" if row.status == "xfail" else row.status
        if outcome_status == "xpass":
            outcome_status = "pass"
        facts = row_facts(row.id, (row.extra or {}).get("sample"))
        outcome = _Outcome(
            facts, outcome_status, row.stage, row.error_signature or None, _headline(row)
        )
        outcomes.append(outcome)
        verdict = judge(entries, facts, outcome_status, row.stage, row.error_signature)
        if verdict.item == "xfail" and verdict.entry is not None:
            confirmed.add(verdict.entry.index)
            continue
        if verdict.entry is not None:
            contradicted.add(verdict.entry.index)
        if outcome_status in FAILURE_STATUSES:
            new_failures.append(outcome)
    stale = contradicted - confirmed
    kept = [e for e in entries if e.index not in stale]
    dropped = [e for e in entries if e.index in stale]
    added = _group_new_failures(new_failures, outcomes)
    return Proposal(kept + added, dropped, added)


def _headline(row) -> str:
    from torch_onnx_conformance.reports.signatures import error_headline

    return error_headline(row.error) or row.error_signature or ""


def _subject(facts: dict[str, Any]) -> tuple[str, str]:
    """The case's kind and what it tests: the fact named like the kind (its op, its model)."""
    kind = kind_of(facts["id"]).name
    return kind, facts[kind]


def _group_new_failures(
    failures: Sequence[_Outcome], outcomes: Sequence[_Outcome]
) -> list[Expectation]:
    """One entry per op (model), status kind, stage and error signature."""
    groups: dict[tuple, list[_Outcome]] = {}
    for failure in failures:
        skip = failure.status in ("crash", "timeout")  # a crash would waste a shard every run
        key = (_subject(failure.facts), skip, failure.stage, failure.signature or "")
        groups.setdefault(key, []).append(failure)
    added = []
    for ((kind, subject), skip, stage, signature), members in sorted(
        groups.items(), key=lambda item: (item[0][0], item[0][2] or "", item[0][3])
    ):
        ids = {m.facts["id"] for m in members}
        peers = [
            o for o in outcomes if _subject(o.facts) == (kind, subject) and o.facts["id"] not in ids
        ]
        statuses = sorted({m.status for m in members})
        # The message as raised (numbers kept); the signature below is the masked match.
        example = members[0].headline or signature or "no message"
        reason = f"{'/'.join(statuses)} at {stage}: {example}"
        for conditions in _narrow(kind, subject, members, peers):
            added.append(
                Expectation(
                    index=-1,
                    status="skip" if skip else "xfail",
                    match=conditions,
                    stage=stage,
                    reason=("to review, name the cause: " + reason)[:300],
                    link="",
                    signature=signature or None,
                )
            )
    return added


def _narrow(
    kind: str, subject: str, members: Sequence[_Outcome], peers: Sequence[_Outcome]
) -> list[dict[str, Any]]:
    """Conditions covering every member and no peer: the subject, narrowed on the fewest axes
    whose values tell the members from every peer (the first such set in ``_NARROWING_AXES``
    order). Members no set of axis values can tell from their peers get one entry each."""
    values = {axis: {m.facts.get(axis) for m in members} for axis in _NARROWING_AXES}
    telling = [
        axis
        for axis in _NARROWING_AXES
        if any(p.facts.get(axis) not in values[axis] for p in peers)
    ]
    for size in range(len(telling) + 1):
        for axes in itertools.combinations(telling, size):
            if all(any(p.facts.get(a) not in values[a] for a in axes) for p in peers):
                seen = {a: {o.facts.get(a) for o in (*members, *peers)} for a in axes}
                return [{kind: subject, **{a: _axis_value(a, values[a], seen[a]) for a in axes}}]
    return [
        {kind: subject, **{axis: m.facts[axis] for axis in _NARROWING_AXES if axis in m.facts}}
        for m in sorted(members, key=lambda m: m.facts["id"])
    ]


def _axis_value(axis: str, values: set, seen: set) -> Any:
    """One value, a list, or (opsets) the range the failing opsets make among those seen."""
    ordered = sorted(values)
    if axis == "opset":
        others = sorted(seen - values)
        if others and max(ordered) < others[0]:
            return f"<{others[0]}"
        if others and min(ordered) > others[-1]:
            return f">={min(ordered)}"
        if not any(min(ordered) < o < max(ordered) for o in others):
            return f"{min(ordered)}-{max(ordered)}"
    return ordered[0] if len(ordered) == 1 else ordered


def proposed_path(path: Path) -> Path:
    return Path(path).with_suffix(".proposed.toml")


def write_expectations(path: Path, entries: Sequence[Expectation]) -> None:
    import tomli_w

    body = tomli_w.dumps({"expectation": [e.to_toml_dict() for e in entries]}) if entries else ""
    Path(path).write_text(HEADER + "\n" + body, encoding="utf-8")


# --------------------------------------------------------------------------- re-judging rows


def rejudge(row, entries: Sequence[Expectation]):
    """The row as ``entries`` judge it: the outcome a run recorded (pass, or a failure at its
    stage), with the status and expectation these entries give. A case that did not run (a
    skip) stays a skip: there is no outcome to judge."""
    if row.status in ("skip", "vacuous"):
        return row
    facts = row_facts(row.id, (row.extra or {}).get("sample"))
    skip = skip_entry(entries, facts)
    if skip is not None:
        return dataclasses.replace(row, status="skip", expectation=skip.reason)
    outcome = {"xfail": "fail", "xpass": "pass"}.get(row.status, row.status)
    verdict = judge(entries, facts, outcome, row.stage, row.error_signature)
    reason = verdict.entry.reason if verdict.entry is not None and verdict.item == "xfail" else None
    return dataclasses.replace(row, status=verdict.status, expectation=reason)


def _rejudge_main(argv: Sequence[str] | None = None) -> int:
    """``python -m torch_onnx_conformance.conformance.expectations RESULTS... --out DIR``: the rows of earlier runs
    judged by today's expectation files, written to ``DIR/rejudged.jsonl`` (build reports from
    it with ``python -m torch_onnx_conformance.reports build DIR``), with the unexpected count per opset and exporter.
    Exit code 1 when any result is unexpected."""
    import argparse
    import collections

    from torch_onnx_conformance.reports.rows import UNEXPECTED, append_row, scan_rows

    parser = argparse.ArgumentParser(
        prog="python -m torch_onnx_conformance.conformance.expectations",
        description=_rejudge_main.__doc__,
    )
    parser.add_argument("results", nargs="+", type=Path, help="results folders or JSONL files")
    parser.add_argument("--out", required=True, type=Path, help="folder for rejudged.jsonl")
    parser.add_argument(
        "--expectations-dir",
        type=Path,
        default=EXPECTATIONS_DIR,
        help="the expectation files to judge by (default: this checkout's)",
    )
    args = parser.parse_args(argv)
    found = scan_rows(args.results)
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / "rejudged.jsonl"
    target.unlink(missing_ok=True)
    files: dict[tuple[str, str], list[Expectation]] = {}
    counts: dict[tuple[int, str], collections.Counter] = collections.defaultdict(
        collections.Counter
    )
    for row in found.rows:
        key = (row.kind, row.exporter)
        if key not in files:
            path = KINDS[row.kind].expectations_file(args.expectations_dir, row.exporter)
            files[key] = load_expectations(path)
        judged = rejudge(row, files[key])
        append_row(target, judged)
        counts[(row.opset, row.exporter)]["cases"] += 1
        counts[(row.opset, row.exporter)][judged.status] += 1
        if judged.status in UNEXPECTED:
            print(f"unexpected: {judged.id} {judged.status} at {judged.stage}")
    unexpected = 0
    for (opset, exporter), count in sorted(counts.items()):
        bad = sum(count[s] for s in UNEXPECTED)
        unexpected += bad
        shown = ", ".join(f"{s} {count[s]}" for s in ("pass", "xfail", "skip") if count[s])
        print(f"opset {opset} {exporter}: {count['cases']} cases, {shown}, unexpected {bad}")
    print(f"wrote {target}")
    return 1 if unexpected else 0


if __name__ == "__main__":
    import sys

    sys.exit(_rejudge_main())
