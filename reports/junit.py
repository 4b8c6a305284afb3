"""JUnit XML from result rows: a testsuite per op or model, a testcase per case.

Built from the rows rather than by pytest's own writer, so the properties survive xdist
(workers' ``record_property`` calls do not reach the controller's XML) and merged shards.
"""

from __future__ import annotations

import copy
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence

from reports.rows import CaseResult
from reports.tally import group_by, signature_of

ERROR_STATUSES = ("crash", "timeout")
FAILURE_STATUSES = ("fail", "xpass", "vacuous")
SKIPPED_STATUSES = ("xfail", "skip")
PROPERTY_FIELDS = (
    "dtype",
    "shapes",
    "opset",
    "provider",
    "exporter",
    "stage",
    "max_abs",
    "max_rel",
    "export_s",
    "run_s",
)
OPTIONAL_PROPERTY_FIELDS = (
    "status",
    "sample",
    "optimize",
    "error_signature",
    "expectation",
    "rtol",
    "atol",
    "node_count",
    "session_create_s",
    "latency_ms",
    "repro_dir",
)

# Characters XML 1.0 cannot hold (terminal escapes in error text would make the file unparsable).
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")
_UNSAFE_FILE_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
_MAX_MESSAGE_CHARS = 500


def xml_text(value: object) -> str:
    return _XML_INVALID.sub("?", str(value))


def safe_file_stem(name: str) -> str:
    """A file name stem made of ``[A-Za-z0-9._-]``; never empty, never hidden."""
    stem = _UNSAFE_FILE_CHARS.sub("_", name).lstrip(".") or "_"
    return stem[:150]


def unique_file_stems(names: Sequence[str]) -> dict[str, str]:
    """Map each name to a distinct safe stem, numbering names that sanitise alike."""
    stems: dict[str, str] = {}
    taken: set[str] = set()
    for name in sorted(set(names)):
        base = safe_file_stem(name)
        stem, counter = base, 2
        while stem.lower() in taken:  # case-insensitive file systems fold case
            stem, counter = f"{base}-{counter}", counter + 1
        taken.add(stem.lower())
        stems[name] = stem
    return stems


def case_time(row: CaseResult) -> float:
    return sum(value for value in (row.export_s, row.run_s) if value is not None)


def testcase(row: CaseResult) -> ET.Element:
    element = ET.Element(
        "testcase",
        {
            "classname": xml_text(row.subject),
            "name": xml_text(row.id),
            "time": _seconds(case_time(row)),
        },
    )
    properties = ET.SubElement(element, "properties")
    for field in PROPERTY_FIELDS:
        _add_property(properties, field, getattr(row, field))
    for field in OPTIONAL_PROPERTY_FIELDS:
        value = getattr(row, field)
        if value is not None and value != "":
            _add_property(properties, field, value)
    if "max_rel_scale" in row.extra:
        _add_property(properties, "max_rel_scale", row.extra["max_rel_scale"])

    outcome = _outcome(row)
    if outcome is not None:
        tag, message = outcome
        child = ET.SubElement(
            element, tag, {"message": xml_text(message[:_MAX_MESSAGE_CHARS]), "type": row.status}
        )
        if tag != "skipped" and row.error:
            child.text = xml_text(row.error)
    return element


def _outcome(row: CaseResult) -> tuple[str, str] | None:
    where = f" at {row.stage}" if row.stage else ""
    signature = signature_of(row)
    detail = f": {signature}" if signature else ""
    if row.status in ERROR_STATUSES:
        return "error", f"{row.status}{where}{detail}"
    if row.status == "xpass":
        reason = f" (expected to fail: {row.expectation})" if row.expectation else ""
        return "failure", f"unexpectedly passed{reason}"
    if row.status == "vacuous":
        return (
            "failure",
            f"vacuous: the eager output is near-constant, so a match proves nothing{detail}",
        )
    if row.status in FAILURE_STATUSES:
        return "failure", f"{row.status}{where}{detail}"
    if row.status in SKIPPED_STATUSES:
        reason = row.expectation or signature or "no reason recorded"
        return "skipped", f"{row.status}{where}: {reason}"
    if row.status == "pass":
        return None
    return "error", f"unknown status {row.status!r}{where}{detail}"


def testsuite(name: str, rows: Sequence[CaseResult]) -> ET.Element:
    cases = [testcase(row) for row in sorted(rows, key=lambda r: r.id)]
    suite = ET.Element("testsuite", {"name": xml_text(name), **_counts(cases)})
    suite.extend(cases)
    return suite


def testsuites(name: str, suites: Sequence[ET.Element]) -> ET.Element:
    cases = [case for suite in suites for case in suite.iter("testcase")]
    root = ET.Element("testsuites", {"name": name, **_counts(cases)})
    root.extend(suites)
    return root


def _counts(cases: Sequence[ET.Element]) -> dict[str, str]:
    def count(tag: str) -> str:
        return str(sum(1 for case in cases if case.find(tag) is not None))

    return {
        "tests": str(len(cases)),
        "failures": count("failure"),
        "errors": count("error"),
        "skipped": count("skipped"),
        "time": _seconds(sum(float(case.get("time", "0")) for case in cases)),
    }


INCOMPLETE_FILE = "junit/incomplete.xml"


def junit_documents(
    rows: Sequence[CaseResult], missing: Sequence[str] = ()
) -> dict[str, ET.Element]:
    """Every JUnit file the rows call for, keyed by path relative to the report dir.

    ``junit/ops/<op>.xml`` and ``junit/models/<model>.xml`` hold one ``<testsuite>`` each;
    ``junit/ops.xml`` and ``junit/models.xml`` hold all suites of their kind.
    ``junit/incomplete.xml`` has an erroring case per collected case without a row, so CI
    never reads a run that stopped half-way as green.
    """
    documents: dict[str, ET.Element] = {}
    if missing:
        cases = []
        for case_id in missing:
            case = ET.Element("testcase", {"classname": "incomplete", "name": xml_text(case_id)})
            ET.SubElement(
                case, "error", {"message": "no result: the run stopped before this case finished"}
            )
            cases.append(case)
        suite = ET.Element("testsuite", {"name": "incomplete", **_counts(cases)})
        suite.extend(cases)
        documents[INCOMPLETE_FILE] = suite
    for kind, folder in (("op", "ops"), ("model", "models")):
        by_subject = group_by((row for row in rows if row.kind == kind), lambda r: r.subject)
        if not by_subject:
            continue
        stems = unique_file_stems(list(by_subject))
        suites = []
        for subject in sorted(by_subject):
            suite = testsuite(subject, by_subject[subject])
            suites.append(suite)
            documents[f"junit/{folder}/{stems[subject]}.xml"] = suite
        # Copies: indenting a shared element for one file would disturb the other.
        combined = [copy.deepcopy(suite) for suite in suites]
        documents[f"junit/{folder}.xml"] = testsuites(folder, combined)
    return documents


def to_bytes(element: ET.Element) -> bytes:
    element = copy.deepcopy(element)
    ET.indent(element)
    return ET.tostring(element, encoding="utf-8", xml_declaration=True) + b"\n"


def _add_property(properties: ET.Element, name: str, value: object) -> None:
    text = "" if value is None else xml_text(value)
    ET.SubElement(properties, "property", {"name": name, "value": text})


def _seconds(value: float) -> str:
    return f"{value:.3f}"
