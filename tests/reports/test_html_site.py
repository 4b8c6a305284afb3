"""The dashboard's files, without a browser: what ``--html`` writes and how it quotes text."""

from __future__ import annotations

import json
import re
from importlib import resources

from tests.reports.dashboard_rows import PLANTED, small_run
from torch_onnx_conformance.reports.__main__ import main
from torch_onnx_conformance.reports.html.site import repro_command
from torch_onnx_conformance.reports.rows import append_row


def load_payload(path):
    text = path.read_text(encoding="utf-8")
    match = re.fullmatch(r'window\.dashboardLoaded\("(\w+)",(.*)\);\n', text, re.S)
    assert match, text[:200]
    return match.group(1), json.loads(match.group(2))


def test_cli_writes_site_split_per_family(tmp_path, capsys):
    rows_file = tmp_path / "rows.jsonl"
    for row in small_run():
        append_row(rows_file, row)
    baseline = tmp_path / "old.jsonl"
    append_row(baseline, small_run()[0])
    site = tmp_path / "site"
    assert main(["build", str(rows_file), "--html", str(site), "--baseline", str(baseline)]) == 0
    assert f"dashboard: {site / 'index.html'}" in capsys.readouterr().out
    names = sorted(p.relative_to(site).as_posix() for p in site.rglob("*") if p.is_file())
    assert names == [
        "dashboard.css",
        "dashboard.js",
        "data/diff.js",
        "data/f0.js",
        "data/f1.js",
        "data/f2.js",
        "data/history.js",
        "data/index.js",
        "history-cases.json",
        "history.jsonl",
        "index.html",
    ]
    _, index = load_payload(site / "data" / "index.js")
    assert [(f["kind"], f["name"], f["file"]) for f in index["families"]] == [
        ("op", "elementwise", "f0"),
        ("op", "nn", "f1"),
        ("model", "torchvision", "f2"),
    ]
    assert index["diff"] == {"broken": 0, "changed": 0, "fixed": 0, "new": 6, "removed": 0}
    name, family = load_payload(site / "data" / "f1.js")
    assert name == "f1" and family["cases"][0]["m"] == f"RuntimeError: {PLANTED}"


def test_data_files_hold_no_markup(tmp_path):
    from torch_onnx_conformance.reports.html import build_site

    build_site(small_run(), tmp_path)
    for path in (tmp_path / "data").glob("*.js"):
        assert "<" not in path.read_text(encoding="utf-8"), path


def test_page_script_never_assigns_markup():
    static = resources.files("torch_onnx_conformance.reports.html").joinpath("static")
    script = static.joinpath("dashboard.js").read_text(encoding="utf-8")
    assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(", script)
    page = static.joinpath("index.html").read_text(encoding="utf-8")
    assert "script-src 'self'" in page and "http" not in page.replace("http-equiv", "")


def test_repro_command_quotes_the_id():
    assert repro_command("op::a b'c") == "python -m torch_onnx_conformance repro 'op::a b'\"'\"'c'"


def test_html_needs_an_output(tmp_path, capsys):
    import pytest

    with pytest.raises(SystemExit):
        main(["build", str(tmp_path)])
    assert "give --out DIR" in capsys.readouterr().err


def test_a_damaged_history_is_read_as_far_as_it_goes(tmp_path, capsys):
    from torch_onnx_conformance.reports.html import build_site

    old = tmp_path / "old"
    old.mkdir()
    (old / "history.jsonl").write_text('{"run": "r1", "cases": 1}\nnot json\n[1, 2]\n')
    rows = small_run()
    (old / "history-cases.json").write_text(
        json.dumps({"cases": {rows[0].id: ["fail", "r1"], rows[1].id: 7}})
    )
    build_site(rows, tmp_path / "new", history=old / "history.jsonl")
    err = capsys.readouterr().err
    assert "history.jsonl:2: not a history line" in err and "history.jsonl:3:" in err
    lines = (tmp_path / "new" / "history.jsonl").read_text().splitlines()
    assert [json.loads(line)["run"] for line in lines][0] == "r1" and len(lines) == 2
    _, index = load_payload(tmp_path / "new" / "data" / "index.js")
    assert index["diff"]["fixed"] == 1 and index["diff_against"].endswith("r1")
