"""Expected failures as data: loading, matching, verdicts and ``--update-expectations`` proposals."""

from __future__ import annotations

import pytest

from torch_onnx_conformance.conformance import expectations as ex
from torch_onnx_conformance.conformance.case import row_facts
from torch_onnx_conformance.conformance.expectations import tomllib
from torch_onnx_conformance.reports.rows import CaseResult

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
        ('status = "xfail"\nreason = "r"', "needs a condition"),
        ('op = "abs"\nopset = ">=2x"\nstatus = "xfail"\nreason = "r"', "'>=2x' is not a range"),
        ('op = "abs"\nopset = "19-17"\nstatus = "xfail"\nreason = "r"', "empty range"),
        ('op = "abs"\nopset = 2.5\nstatus = "xfail"\nreason = "r"', "integer or a range"),
        ('op = "abs"\nsample = ["<3", "x"]\nstatus = "xfail"\nreason = "r"', "sample: 'x'"),
        ('op = "abs"\ndtype = "float32"\nstatus = "xfail"\nreason = "r"', "dtype = 'float32'"),
        ('op = "abs"\nopset = []\nstatus = "xfail"\nreason = "r"', "matches nothing"),
        (
            'op = "abs"\nmatch = { op = "sub" }\nstatus = "xfail"\nreason = "r"',
            "both in the entry and in its match table",
        ),
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
    facts = row_facts(case_id)
    return CaseResult(
        id=case_id,
        kind="op",
        subject=facts["op"],
        family="x",
        dtype=facts["dtype"],
        shapes=facts["shapes"],
        opset=facts["opset"],
        provider=facts["provider"],
        exporter=facts["exporter"],
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
    # One condition per op: nothing else of these ops ran, so nothing narrows them.
    added = {e.match["op"]: e for e in proposal.added}
    assert set(added) == {"nonzero", "cumsum"}
    assert all(e.id is None and set(e.match) == {"op"} for e in proposal.added)
    assert added["nonzero"].status == "xfail" and added["nonzero"].stage == "compare"
    assert added["nonzero"].signature == "shape mismatch"
    assert "name the cause" in added["nonzero"].reason
    # Crashers are proposed as skips: a crash would waste a shard every run.
    assert added["cumsum"].status == "skip"

    target = ex.proposed_path(path)
    assert target.name == "ours.proposed.toml"
    ex.write_expectations(target, proposal.entries)
    reloaded = ex.load_expectations(target)
    assert [(e.id, e.match) for e in reloaded] == [(e.id, e.match) for e in proposal.entries]
    written = {e.get("op"): e for e in tomllib.loads(target.read_text())["expectation"]}
    assert written["nonzero"]["signature"] == "shape mismatch"


def test_a_failure_that_moved_stage_replaces_its_entry(tmp_path):
    path = _write(
        tmp_path,
        f'[[expectation]]\nid = "{CONV}"\nstatus = "xfail"\nstage = "export"\nreason = "old"\n',
    )
    entries = ex.load_expectations(path)
    proposal = ex.propose(entries, [_row(CONV, "fail", "compare", "mismatch")])
    assert [e.reason for e in proposal.dropped] == ["old"]
    (added,) = proposal.added
    assert (added.match, added.stage) == ({"op": "nn.functional.conv2d"}, "compare")
    # The new entry covers the failure the next time round.
    facts = _facts(CONV)
    assert ex.judge(proposal.entries, facts, "fail", "compare", "mismatch").status == "xfail"


# --------------------------------------------------------------------------- conditions


def _case(op="abs", sample=0, shapes="static", opset=20, dtype="f32", provider="cpu"):
    return f"op::{op}::s{sample:03d}::{dtype}::{shapes}::opset{opset}::{provider}::ours"


@pytest.mark.parametrize(
    ("text", "inside", "outside"),
    [
        ("20", [20], [19, 21]),
        ("==20", [20], [19, 21]),
        (">=22", [22, 26], [21]),
        (">22", [23], [22]),
        ("<=19", [17, 19], [20]),
        ("<20", [17, 19], [20]),
        ("17-19", [17, 18, 19], [16, 20]),
        (" 17 - 19 ", [17, 19], [20]),
    ],
)
def test_ranges(text, inside, outside):
    found = ex.parse_range(text)
    assert all(n in found for n in inside)
    assert not any(n in found for n in outside)
    assert "20" not in found and True not in found  # only integers are in a range


def test_an_entry_without_an_opset_holds_at_every_opset(tmp_path):
    path = _write(
        tmp_path,
        '[[expectation]]\nop = "allclose"\nstatus = "xfail"\nstage = "export"\n'
        'reason = "returns a Python bool"\n',
    )
    entries = ex.load_expectations(path)
    for opset in (17, 18, 20, 23, 26):
        facts = _facts(_case("allclose", sample=8, opset=opset, shapes="dynamic"))
        assert ex.judge(entries, facts, "fail", "export", "x").status == "xfail"
    assert ex.judge(entries, _facts(_case("abs")), "fail", "export", "x").status == "fail"


def test_opset_range_and_other_conditions_select_cases(tmp_path):
    path = _write(
        tmp_path,
        '[[expectation]]\nop = "nn.functional.grid_sample"\nopset = "<20"\n'
        "match = { max_ndim = 5 }\n"
        'status = "xfail"\nstage = "export"\nreason = "5-D GridSample needs opset 20"\n'
        '[[expectation]]\nop = "nn.functional.*"\nopset = [">=24", 22]\nshapes = "dynamic"\n'
        'dtype = ["f16", "bf16"]\nsample = "1-2"\nprovider = "cpu"\n'
        'status = "xfail"\nstage = "compare"\nreason = "r"\n',
    )
    grid, other = ex.load_expectations(path)
    grid_case = "nn.functional.grid_sample"
    assert grid.matches(_facts(_case(grid_case, opset=17), max_ndim=5))
    assert grid.matches(_facts(_case(grid_case, opset=19), max_ndim=5))
    assert not grid.matches(_facts(_case(grid_case, opset=20), max_ndim=5))
    assert not grid.matches(_facts(_case(grid_case, opset=17), max_ndim=4))
    relu = "nn.functional.relu"
    assert other.matches(_facts(_case(relu, 1, "dynamic", 22, "f16")))
    assert other.matches(_facts(_case(relu, 2, "dynamic", 26, "bf16")))
    assert not other.matches(_facts(_case(relu, 2, "dynamic", 23, "bf16")))  # opset
    assert not other.matches(_facts(_case(relu, 3, "dynamic", 24, "bf16")))  # sample
    assert not other.matches(_facts(_case(relu, 1, "static", 24, "bf16")))  # shapes
    assert not other.matches(_facts(_case(relu, 1, "dynamic", 24, "f32")))  # dtype
    # The canonical form writes the case fields at the top, sample facts under match.
    assert grid.to_toml_dict()["opset"] == "<20"
    assert grid.to_toml_dict()["match"] == {"max_ndim": 5}


def test_stale_detection_per_condition(tmp_path):
    path = _write(
        tmp_path,
        '[[expectation]]\nop = "bernoulli"\nopset = ">=22"\nstatus = "xfail"\nstage = "load"\n'
        'reason = "no RandomUniformLike(22) kernel"\n'
        '[[expectation]]\nop = "abs"\nopset = "<20"\nstatus = "xfail"\nstage = "export"\n'
        'reason = "needs opset 20"\n',
    )
    entries = ex.load_expectations(path)
    rows = [
        _row(_case("bernoulli", opset=23), "xpass"),  # inside its range: contradicts it
        _row(_case("bernoulli", opset=20), "pass"),  # outside: says nothing about it
        _row(_case("abs", opset=20), "pass"),  # outside the abs entry's range
    ]
    proposal = ex.propose(entries, rows)
    assert [e.reason for e in proposal.dropped] == ["no RandomUniformLike(22) kernel"]
    assert [e.reason for e in proposal.entries] == ["needs opset 20"]
    assert proposal.added == []


def _propose_added(rows):
    return ex.propose([], rows).added


def test_a_failure_at_every_opset_is_proposed_once_without_an_opset():
    rows = [
        _row(_case("equal", sample, shapes, opset), "fail", "export", "DataDependent: equal")
        for sample in (0, 2)
        for shapes in ("static", "dynamic")
        for opset in (17, 20, 23)
    ]
    (entry,) = _propose_added(rows)
    assert entry.match == {"op": "equal"}
    assert (entry.status, entry.stage, entry.signature) == (
        "xfail",
        "export",
        "DataDependent: equal",
    )


def test_an_opset_range_is_proposed_only_where_rows_show_a_pass_at_other_opsets():
    sig = "Unsupported: 5-D GridSample"
    failing = [
        _row(_case("grid", s, "static", o), "fail", "export", sig) for s in (0, 1) for o in (17, 18)
    ]
    passing = [_row(_case("grid", s, "static", o), "pass") for s in (0, 1) for o in (20, 23)]
    (below,) = _propose_added(failing + passing)
    assert below.match == {"op": "grid", "opset": "<20"}
    # The same failure at the newest opsets only reads as a lower bound.
    late = [
        _row(_case("rand", 0, "static", o), "fail", "load", "NOT_IMPLEMENTED") for o in (23, 26)
    ]
    early = [_row(_case("rand", 0, "static", o), "pass") for o in (17, 20)]
    (above,) = _propose_added(late + early)
    assert above.match == {"op": "rand", "opset": ">=23"}
    # A failure between passes names the span.
    middle = [_row(_case("mid", 0, "static", o), "fail", "run", "x") for o in (20, 21)]
    ends = [_row(_case("mid", 0, "static", o), "pass") for o in (18, 23)]
    (span,) = _propose_added(middle + ends)
    assert span.match == {"op": "mid", "opset": "20-21"}
    for rows, entry in ((failing + passing, below), (late + early, above), (middle + ends, span)):
        assert _judged_as_proposed(rows, entry)


def _judged_as_proposed(rows, entry):
    """Every row is judged xfail (a failure) or pass by the proposed entry alone."""
    for row in rows:
        status = "pass" if row.status == "pass" else "fail"
        verdict = ex.judge([entry], _facts(row.id), status, row.stage, row.error_signature)
        if verdict.status != ("pass" if status == "pass" else "xfail"):
            return False
    return True


def test_samples_shapes_and_signatures_narrow_a_proposal():
    sig = "output count differs"
    rows = [
        _row(_case("chunk", 1, "dynamic", 20), "fail", "second-shape", sig),
        _row(_case("chunk", 2, "dynamic", 20), "fail", "second-shape", sig),
        _row(_case("chunk", 0, "dynamic", 20), "pass"),
        *(_row(_case("chunk", s, "static", 20), "pass") for s in (0, 1, 2)),
        _row(_case("chunk", 3, "static", 20), "fail", "export", "Guard"),
    ]
    by_stage = {e.stage: e for e in _propose_added(rows)}
    assert by_stage["second-shape"].match == {"op": "chunk", "sample": [1, 2], "shapes": "dynamic"}
    assert by_stage["export"].match == {"op": "chunk", "sample": 3}
    for entry in by_stage.values():
        assert not any(entry.matches(_facts(r.id)) for r in rows if r.status == "pass")


def test_failures_no_condition_can_tell_from_passes_get_one_entry_each():
    rows = [
        _row(_case("odd", 0, "static", 20), "fail", "compare", "x"),
        _row(_case("odd", 1, "dynamic", 20), "fail", "compare", "x"),
        _row(_case("odd", 0, "dynamic", 20), "pass"),
        _row(_case("odd", 1, "static", 20), "pass"),
    ]
    added = _propose_added(rows)
    assert sorted((e.match["sample"], e.match["shapes"]) for e in added) == [
        (0, "static"),
        (1, "dynamic"),
    ]
    for row in rows:
        status = "pass" if row.status == "pass" else "fail"
        verdict = ex.judge(added, _facts(row.id), status, row.stage, row.error_signature)
        assert verdict.status == ("pass" if status == "pass" else "xfail")


def test_rejudging_rows_of_an_earlier_run(tmp_path, capsys):
    path = _write(
        tmp_path,
        '[[expectation]]\nop = "grid"\nopset = "<20"\nstatus = "xfail"\nstage = "export"\n'
        'reason = "5-D needs opset 20"\n'
        '[[expectation]]\nop = "drop"\nstatus = "skip"\nreason = "random mask"\n',
    )
    entries = ex.load_expectations(path)
    failed_17 = _row(_case("grid", opset=17), "fail", "export", "5-D")  # now expected
    old_xfail = _row(_case("abs", opset=17), "xfail", "compare", "x")  # its entry is gone
    passed_20 = _row(_case("grid", opset=20), "pass")
    passed_18 = _row(_case("grid", opset=18), "pass")  # inside the range: an unexpected pass
    skipped = _row(_case("grid", sample=1, opset=17), "skip")
    ran_drop = _row(_case("drop"), "fail", "compare", "x")
    judged = [
        ex.rejudge(r, entries)
        for r in (failed_17, old_xfail, passed_20, passed_18, skipped, ran_drop)
    ]
    assert [r.status for r in judged] == ["xfail", "fail", "pass", "xpass", "skip", "skip"]
    assert judged[0].expectation == "5-D needs opset 20"
    assert judged[1].expectation is None

    rows_file = tmp_path / "rows.jsonl"
    rows_file.write_text("".join(r.to_json() + "\n" for r in (failed_17, passed_20)))
    out = tmp_path / "out"
    code = ex._rejudge_main(
        [str(rows_file), "--out", str(out), "--expectations-dir", str(tmp_path)]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "opset 17 ours: 1 cases, xfail 1, unexpected 0" in printed
    assert "opset 20 ours: 1 cases, pass 1, unexpected 0" in printed
    from torch_onnx_conformance.reports.rows import read_rows

    assert [r.status for r in read_rows([out / "rejudged.jsonl"])] == ["xfail", "pass"]


def test_the_fewest_conditions_that_tell_failures_from_passes_are_proposed():
    # A shard ran sample 1 at opset 23 only; at 17 both samples pass. The opset alone tells
    # them apart, so the entry names no sample (a sample list would be an accident of sharding).
    rows = [
        _row(_case("bernoulli", 1, "static", 23), "fail", "load", "NOT_IMPLEMENTED"),
        _row(_case("bernoulli", 0, "static", 17), "pass"),
        _row(_case("bernoulli", 1, "static", 17), "pass"),
        _row(_case("bernoulli", 0, "dynamic", 17), "pass"),
    ]
    (entry,) = _propose_added(rows)
    assert entry.match == {"op": "bernoulli", "opset": ">=23"}
    assert _judged_as_proposed(rows, entry)
