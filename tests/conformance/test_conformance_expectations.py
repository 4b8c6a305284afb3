"""Expected failures as data: loading, matching, verdicts and ``--update-expectations`` proposals."""

from __future__ import annotations

import pytest

from conformance import expectations as ex
from conformance.case import row_facts
from conformance.expectations import tomllib
from reports.rows import CaseResult

CONV = "op::nn.functional.conv2d::s003::f32::dynamic::opset20::cpu::ours"
ABS = "op::abs::s000::f32::static::opset20::cpu::ours"
NONZERO = "op::nonzero::s002::f32::static::opset20::cpu::ours"


def _write(tmp_path, text: str):
    path = tmp_path / "ours.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _facts(case_id, **sample):
    return row_facts(case_id, sample)


def test_shipped_expectation_files_are_valid():
    for exporter in ("ours", "torch-dynamo", "torch-script"):
        ex.load_expectations(ex.Path(ex.__file__).with_name("expectations") / f"{exporter}.toml")


def test_missing_file_means_no_expectations(tmp_path):
    assert ex.load_expectations(tmp_path / "nope.toml") == []


@pytest.mark.parametrize(
    ("entry", "complaint"),
    [
        ('id = "*"\nstatus = "maybe"\nreason = "r"', "status must be one of"),
        ('status = "xfail"\nreason = "r"', "needs an id glob or a match table"),
        ('id = "*"\nstatus = "xfail"\nstage = "late"\nreason = "r"', "stage must be one of"),
        (
            'id = "*"\nstatus = "xfail"\nreason = "r"\nmatch = { colour = "red" }',
            "unknown match keys",
        ),
        ('id = "*"\nstatus = "xfail"', "needs a reason"),
        ('id = "*"\nstatus = "xfail"\nreason = "r"\nowner = "me"', "unknown keys"),
    ],
)
def test_bad_entries_are_rejected_with_the_reason(tmp_path, entry, complaint):
    path = _write(tmp_path, f"[[expectation]]\n{entry}\n")
    with pytest.raises(ValueError, match=complaint):
        ex.load_expectations(path)


def test_an_entry_written_with_a_former_stage_name_reads_as_the_current_one(tmp_path):
    path = _write(
        tmp_path,
        '[[expectation]]\nid = "op::abs::*"\nstatus = "xfail"\nstage = "ort_load"\nreason = "r"\n',
    )
    (entry,) = ex.load_expectations(path)
    assert entry.stage == "load"
    assert ex.judge([entry], _facts(ABS), "fail", "load", "x").status == "xfail"


def test_id_glob_and_declarative_matcher(tmp_path):
    path = _write(
        tmp_path,
        '[[expectation]]\nid = "op::nonzero::*"\nmatch = { has_scalar = true, dtype = ["f32", "f16"] }\n'
        'status = "xfail"\nstage = "compare"\nreason = "0-d input"\nlink = "https://example.org/1"\n',
    )
    (entry,) = ex.load_expectations(path)
    assert entry.matches(_facts(NONZERO, has_scalar=True))
    assert not entry.matches(_facts(NONZERO, has_scalar=False))
    assert not entry.matches(_facts(ABS, has_scalar=True))
    assert entry.link == "https://example.org/1"


def test_error_matcher_is_judged_only_for_failures(tmp_path):
    path = _write(
        tmp_path,
        '[[expectation]]\nid = "op::abs::*"\nmatch = { error = "*NOT_IMPLEMENTED*" }\n'
        'status = "xfail"\nstage = "load"\nreason = "no kernel"\n',
    )
    entries = ex.load_expectations(path)
    facts = _facts(ABS)
    assert ex.judge(entries, facts, "fail", "load", "Fail: NOT_IMPLEMENTED Abs").status == "xfail"
    assert ex.judge(entries, facts, "fail", "load", "InvalidGraph: bad").status == "fail"
    # A pass contradicts the entry whatever its error pattern says.
    assert ex.judge(entries, facts, "pass", None, None).status == "xpass"


def test_verdicts(tmp_path):
    path = _write(
        tmp_path,
        '[[expectation]]\nid = "op::nn.functional.conv2d::*"\nstatus = "xfail"\nstage = "compare"\n'
        'reason = "known"\n'
        '[[expectation]]\nid = "op::abs::*"\nstatus = "skip"\nreason = "crashes ORT"\n',
    )
    entries = ex.load_expectations(path)
    conv = _facts(CONV)
    assert ex.judge(entries, conv, "fail", "compare", "x") == ex.Verdict(
        "xfail", "xfail", entries[0], "expected: known"
    )
    unexpected_pass = ex.judge(entries, conv, "pass", None, None)
    assert (unexpected_pass.status, unexpected_pass.item) == ("xpass", "fail")
    moved = ex.judge(entries, conv, "fail", "export", "x")
    assert (moved.status, moved.item) == ("fail", "fail")
    assert "expects a failure at compare" in moved.message
    crash = ex.judge(entries, conv, "crash", "compare", "x")
    assert (crash.status, crash.item) == ("crash", "xfail")
    assert ex.judge(entries, _facts(NONZERO), "fail", "run", "x").item == "fail"
    assert ex.skip_entry(entries, _facts(ABS)) is entries[1]
    assert ex.skip_entry(entries, conv) is None


def _row(case_id, status, stage=None, signature=None):
    return CaseResult(
        id=case_id,
        kind="op",
        subject="x",
        family="x",
        dtype="f32",
        shapes="static",
        opset=20,
        provider="cpu",
        exporter="ours",
        status=status,
        stage=stage,
        error_signature=signature,
    )


def test_proposal_drops_stale_entries_and_adds_new_failures(tmp_path):
    path = _write(
        tmp_path,
        '[[expectation]]\nid = "op::abs::*"\nstatus = "xfail"\nstage = "compare"\nreason = "fixed since"\n'
        '[[expectation]]\nid = "op::nn.functional.conv2d::*"\nstatus = "xfail"\nstage = "compare"\n'
        'reason = "still failing"\n'
        '[[expectation]]\nid = "op::unrelated::*"\nstatus = "xfail"\nreason = "not run this time"\n',
    )
    entries = ex.load_expectations(path)
    rows = [
        _row(ABS, "xpass"),
        _row(CONV, "xfail", "compare", "AssertionError: <N> elements"),
        _row(NONZERO, "fail", "compare", "shape mismatch"),
        _row("op::cumsum::s000::f32::static::opset20::cpu::ours", "crash", "run", "SIGSEGV"),
        _row("op::sub::s000::f32::static::opset20::cpu::ours", "pass"),
    ]
    proposal = ex.propose(entries, rows)
    assert [e.reason for e in proposal.dropped] == ["fixed since"]
    kept = [e.reason for e in proposal.entries if e.index >= 0]
    assert kept == ["still failing", "not run this time"]
    added = {e.id: e for e in proposal.added}
    assert set(added) == {NONZERO, "op::cumsum::s000::f32::static::opset20::cpu::ours"}
    assert added[NONZERO].status == "xfail" and added[NONZERO].stage == "compare"
    assert added[NONZERO].signature == "shape mismatch"
    # Crashers are proposed as skips: a crash would waste a shard every run.
    assert added["op::cumsum::s000::f32::static::opset20::cpu::ours"].status == "skip"

    target = ex.proposed_path(path)
    assert target.name == "ours.proposed.toml"
    ex.write_expectations(target, proposal.entries)
    reloaded = ex.load_expectations(target)
    assert [e.id for e in reloaded] == [e.id for e in proposal.entries]
    written = {e["id"]: e for e in tomllib.loads(target.read_text())["expectation"]}
    assert written[NONZERO]["signature"] == "shape mismatch"


def test_a_failure_that_moved_stage_replaces_its_entry(tmp_path):
    path = _write(
        tmp_path,
        f'[[expectation]]\nid = "{CONV}"\nstatus = "xfail"\nstage = "export"\nreason = "old"\n',
    )
    entries = ex.load_expectations(path)
    proposal = ex.propose(entries, [_row(CONV, "fail", "compare", "mismatch")])
    assert [e.reason for e in proposal.dropped] == ["old"]
    (added,) = proposal.added
    assert (added.id, added.stage) == (CONV, "compare")
    # The new entry covers the failure the next time round.
    facts = _facts(CONV)
    assert ex.judge(proposal.entries, facts, "fail", "compare", "mismatch").status == "xfail"
