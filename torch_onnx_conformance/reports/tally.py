"""Counting helpers shared by every report: case keys, axis orders, pass fractions."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from torch_onnx_conformance.reports.rows import PASSING, STAGES, STATUSES, UNEXPECTED, CaseResult

T = TypeVar("T")

# Axis values in the order a reader expects; anything unknown follows, sorted.
PREFERRED_ORDER: dict[str, tuple[str, ...]] = {
    "exporter": ("ours", "torch-dynamo", "torch-script"),
    "dtype": ("f32", "f16", "bf16", "i64", "b8"),
    "shapes": ("static", "dynamic"),
    "provider": ("cpu", "cuda", "reference"),
    "kind": ("op", "model"),
    "status": STATUSES,
    "stage": STAGES,
    "optimize": (True, False),
}

#: The exporter every latency ratio is taken against.
REFERENCE_EXPORTER = "torch-dynamo"


def is_pass(row: CaseResult) -> bool:
    return row.status in PASSING


def is_unexpected(row: CaseResult) -> bool:
    """A result no expectation predicted: a failure, crash or timeout, or an xfail that passed."""
    return row.status in UNEXPECTED


def ran(rows: Iterable[CaseResult]) -> list[CaseResult]:
    """The rows whose case ran: a skip (eager rejects the sample, no dim to make dynamic)
    judges no exporter, so it is in no denominator."""
    return [row for row in rows if row.status != "skip"]


#: The words every report uses for ``subject_passes``.
PASSING_DEFINITION = (
    "An op (model) passes when at least one of its cases ran and every case that ran passed; "
    "an xfail is not a pass, a skip is not counted."
)


def subject_passes(rows: Iterable[CaseResult]) -> bool | None:
    """THE definition of "this op (model) passes", used by every report: at least one of its
    cases ran and every case that ran passed (an xfail is not a pass). None when none ran."""
    counted = ran(rows)
    if not counted:
        return None
    return all(is_pass(row) for row in counted)


def subjects_passing(rows: Iterable[CaseResult]) -> tuple[int, int]:
    """(subjects that pass, subjects with a case that ran), by ``subject_passes``."""
    verdicts = [subject_passes(group) for group in group_by(rows, lambda r: r.subject).values()]
    judged = [verdict for verdict in verdicts if verdict is not None]
    return sum(judged), len(judged)


def ordered(values: Iterable[T], axis: str) -> list[T]:
    """Distinct values in the axis' preferred order, unknown ones after, sorted."""
    preferred = PREFERRED_ORDER.get(axis, ())
    distinct = set(values)
    known = [v for v in preferred if v in distinct]
    rest = sorted((v for v in distinct if v not in preferred), key=str)
    return known + rest


def axis_value(row: CaseResult, axis: str) -> object:
    return getattr(row, axis)


def case_key(row: CaseResult) -> str:
    """The case id without its exporter field: the same case under another exporter."""
    parts = row.id.split("::")
    positions = [i for i, part in enumerate(parts) if i >= 2 and part == row.exporter]
    if not positions:
        return row.id
    del parts[positions[-1]]
    return "::".join(parts)


def group_by(
    rows: Iterable[CaseResult], key: Callable[[CaseResult], T]
) -> dict[T, list[CaseResult]]:
    groups: dict[T, list[CaseResult]] = {}
    for row in rows:
        groups.setdefault(key(row), []).append(row)
    return groups


def pass_count(rows: Sequence[CaseResult]) -> tuple[int, int]:
    """(passed, counted): skipped cases did not run, so they are not in the denominator.

    Every table that shows a pass fraction also shows the skip count beside it.
    """
    counted = ran(rows)
    return sum(1 for row in counted if is_pass(row)), len(counted)


def fraction(passed: int, total: int) -> str:
    """``passed/total``, compact, for wide tables."""
    return f"{passed}/{total}"


def percent(passed: int, total: int) -> str:
    if total == 0:
        return "–"
    value = 100.0 * passed / total
    rounded = round(value)
    # Never print 0% for "some passed" or 100% for "not all passed".
    if (rounded == 0 and passed) or (rounded == 100 and passed != total):
        return f"{value:.1f}%"
    return f"{rounded}%"


def fraction_with_percent(passed: int, total: int) -> str:
    """``passed/total (pct%)``, the headline number format."""
    return f"{passed}/{total} ({percent(passed, total)})"


def status_counts(rows: Iterable[CaseResult]) -> Counter[str]:
    return Counter(row.status for row in rows)


def stage_breakdown(rows: Iterable[CaseResult]) -> str:
    """Failing stages of the non-passing rows, most frequent first: ``export×3, compare×1``."""
    counts = Counter(row.stage for row in rows if not is_pass(row) and row.stage)
    order = {stage: i for i, stage in enumerate(STAGES)}
    ranked = sorted(counts.items(), key=lambda item: (-item[1], order.get(item[0], 99), item[0]))
    return ", ".join(f"{stage}×{count}" for stage, count in ranked)


def signature_of(row: CaseResult) -> str:
    """The row's error signature, derived from its error text when the writer left it out."""
    if row.error_signature:
        return row.error_signature
    if row.error:
        from torch_onnx_conformance.reports.signatures import normalise_error

        return normalise_error(row.error)
    return ""


def example_message(row: CaseResult) -> str:
    """The row's message as a reader needs it: its headline line exactly as raised (numbers,
    names and paths kept). Signatures group by masked text; an example is never masked."""
    from torch_onnx_conformance.reports.signatures import error_headline

    return error_headline(row.error) or row.error_signature or ""


def example_of(rows: Iterable[CaseResult], signature: str) -> CaseResult | None:
    """The first row (by id) whose signature is ``signature``: the example shown beside it."""
    matching = [row for row in rows if signature_of(row) == signature]
    return min(matching, key=lambda row: row.id) if matching else None


def cell_fraction(rows: Sequence[CaseResult]) -> str:
    """``passed/ran`` for a table cell, saying ``skip×N`` where no case ran (0/0 would read as
    a failure) and ``+N skip`` beside the fraction where some were skipped."""
    passed, counted = pass_count(rows)
    skipped = len(rows) - counted
    if not counted:
        return f"skip×{skipped}"
    return fraction(passed, counted) + (f" +{skipped} skip" if skipped else "")


def top_signature(rows: Iterable[CaseResult]) -> tuple[str, int] | None:
    """The most frequent error signature of the rows that ran and did not pass (skips are
    counted apart: they say nothing about an exporter)."""
    counts = Counter(signature_of(row) for row in ran(rows) if not is_pass(row))
    counts.pop("", None)
    if not counts:
        return None
    return min(counts.items(), key=lambda item: (-item[1], item[0]))


def scaled_error(row: CaseResult) -> float | None:
    """Max error relative to the output's scale, falling back to the plain max relative error."""
    value = row.extra.get("max_rel_scale")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return row.max_rel


def median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def varying_axes(rows: Sequence[CaseResult], axes: Sequence[str]) -> list[str]:
    """The axes among ``axes`` that take more than one value in ``rows``."""
    return [axis for axis in axes if len({axis_value(row, axis) for row in rows}) > 1]


def combo_label(values: Sequence[object], axes: Sequence[str]) -> str:
    parts = []
    for axis, value in zip(axes, values, strict=True):
        if axis == "opset":
            parts.append(f"opset{value}")
        elif axis == "optimize":
            parts.append({True: "opt", False: "noopt"}.get(value, "opt?"))
        else:
            parts.append(str(value))
    return " ".join(parts)


def combo_sort_key(values: Sequence[object], axes: Sequence[str]) -> tuple:
    key = []
    for axis, value in zip(axes, values, strict=True):
        preferred = PREFERRED_ORDER.get(axis, ())
        rank = preferred.index(value) if value in preferred else len(preferred)
        number = value if isinstance(value, int) and not isinstance(value, bool) else 0
        key.append((rank, number, str(value)))
    return tuple(key)


def status_cell(row: CaseResult) -> str:
    """``status`` for a pass, ``status@stage`` otherwise: ``fail@compare``."""
    if is_pass(row) or not row.stage:
        return row.status
    return f"{row.status}@{row.stage}"


def count_list(counts: Counter[str], axis: str) -> str:
    """``fail×2, xfail×1`` in the axis' preferred order."""
    return ", ".join(f"{value}×{counts[value]}" for value in ordered(counts, axis) if counts[value])


#: What an op (model) needs from its reader, most urgent first: a result no expectation
#: predicted; only failures the expectations predict; every case that ran passed; none ran.
VERDICTS = ("unexpected", "expected failures", "passing", "not run")


def subject_verdict(rows: Sequence[CaseResult]) -> str:
    if any(is_unexpected(row) for row in rows):
        return "unexpected"
    passes = subject_passes(rows)
    if passes is None:
        return "not run"
    return "passing" if passes else "expected failures"
