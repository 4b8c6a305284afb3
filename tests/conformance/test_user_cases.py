"""Users' own models: the README's "Test your own models" commands, run as written in a fresh
folder that holds folders named like the harness's packages, and the case-file API beneath.

The section's ``bash`` blocks are run here, block by block, with the console script
``onnx-conformance`` on PATH (the installed one beside this interpreter, else a stand-in that
starts ``conformance.__main__:main`` the way a console script does: ``sys.path[0]`` is not the
current folder).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch

from torch_onnx_conformance.conformance import model_cases, user_cases

ROOT = Path(__file__).resolve().parents[2]
SECTION = "### Test your own models"
#: The exit code each block of the section ends with, in order: files written; the run with a
#: planted failure; its repro; the run with the failure expected and options from pyproject.
BLOCK_EXIT_CODES = [0, 1, 1, 0]
SHADOWING = ("reports", "exporter", "conformance", "model_zoo")


def section_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = min(i for i in (text.find("\n## ", start), text.find("\n### ", start + 1)) if i > 0)
    return re.findall(r"^```bash\n(.*?)^```", text[start:end], re.MULTILINE | re.DOTALL)


def _console_script(bin_dir: Path) -> Path:
    installed = Path(sys.executable).with_name("onnx-conformance")
    if installed.exists():
        return installed.parent
    bin_dir.mkdir()
    shim = bin_dir / "onnx-conformance"
    code = (
        "import sys; from torch_onnx_conformance.conformance.__main__ import main; sys.exit(main())"
    )
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -P -c "{code}" "$@"\n')
    shim.chmod(0o755)
    return bin_dir


def _bash(script: str, folder: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-c", script],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


@pytest.mark.slow
def test_the_suites_readme_points_users_to_their_own_cases():
    # torch_onnx_conformance/conformance/README.md's section names the README's walk-through, the --cases forms, the
    # pyproject table and its keys, and the modules behind them, all as they are
    from torch_onnx_conformance.conformance.__main__ import PROJECT_KEYS

    text = (ROOT / "torch_onnx_conformance" / "conformance" / "README.md").read_text(
        encoding="utf-8"
    )
    start = text.index("\n## Your own models\n")
    section = text[start : text.index("\n## ", start + 1)]
    assert 'README.md "Test your own models"' in section and SECTION in (
        ROOT / "README.md"
    ).read_text(encoding="utf-8")
    assert "`--cases FILE|MODULE|FOLDER`" in section and "`[tool.onnx-conformance]`" in section
    for module in ("user_cases.py", "transformers_folder.py"):
        assert (
            f"`{module}`" in section
            and (ROOT / "torch_onnx_conformance" / "conformance" / module).is_file()
        )
    for key in ("cases", "opsets", "expectations", "results", "reports-out"):
        assert f"`{key}`" in section and key in PROJECT_KEYS


def test_readme_section_runs_as_written_beside_shadowing_folders(tmp_path):
    folder = tmp_path / "project"
    folder.mkdir()
    for name in SHADOWING:  # importing any of them would fail the run
        (folder / name).mkdir()
        (folder / name / "__init__.py").write_text(f"raise ImportError('the user folder {name}')\n")
    bin_dir = _console_script(tmp_path / "bin")
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "HF_HUB_OFFLINE": "1",
    }
    blocks = section_blocks()
    assert len(blocks) == len(BLOCK_EXIT_CODES)

    def run_block(index: int) -> str:
        done = _bash(blocks[index], folder, env)
        output = done.stdout + done.stderr
        assert done.returncode == BLOCK_EXIT_CODES[index], f"block {index}:\n{output[-4000:]}"
        return output

    run_block(0)
    run_block(1)
    summary = (folder / "out/reports/summary.md").read_text(encoding="utf-8")
    unexpected = summary.split("## Unexpected results", 1)[1]
    for shapes in ("static", "dynamic"):
        for opset in (18, 23):
            assert f"model::mine/branchy::f32::{shapes}::opset{opset}::cpu::ours::opt" in unexpected
    assert "mine/cnn" not in unexpected.split("\n## ", 1)[0]
    junit = ET.parse(folder / "out/results/junit.xml").getroot()
    suite = junit if junit.tag == "testsuite" else junit.find("testsuite")
    assert (int(suite.get("tests")), int(suite.get("failures"))) == (8, 4)
    case_dir = (
        folder / "out/results/repros/model__mine_branchy__f32__static__opset18__cpu__ours__opt"
    )
    rerun = json.loads((case_dir / "case.json").read_text())["rerun"]
    assert "--cases=" in rerun and str(folder / "cases.py") in rerun

    output = run_block(2)
    assert (
        "model::mine/branchy::f32::static::opset18::cpu::ours::opt: fail at stage export" in output
    )
    assert (case_dir / "repro.py").exists()

    # The saved rerun command, from the same folder, selects exactly that case again.
    done = _bash(f"{rerun} -n 0 --results out/rerun", folder, env)
    assert done.returncode == 1, done.stdout[-3000:]
    assert "1 failed" in done.stdout

    output = run_block(3)  # all 8 cases again, from pyproject.toml; branchy's 4 now expected
    assert "8 cases, 4 passed" in output, output[-3000:]
    assert "torch.cond would" in (folder / "out/reports/models.md").read_text(encoding="utf-8")
    for name in SHADOWING:  # nothing was written into the user's folders
        assert [p.name for p in (folder / name).iterdir()] == ["__init__.py"]


# --------------------------------------------------------------------------- the case-file API


def _write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_a_case_file_that_fails_to_import_names_its_file_and_line(tmp_path):
    bad = _write(tmp_path / "bad.py", "import torch\n\n\ndef model_cases():\n    return [nope]\n")
    with pytest.raises(ValueError, match=rf"{re.escape(str(bad))}:5: NameError: name 'nope'"):
        model_cases.use_extra_case_files([str(bad)])
    syntax = _write(tmp_path / "syntax.py", "def model_cases(:\n")
    with pytest.raises(ValueError, match=rf"{re.escape(str(syntax))}:1: SyntaxError"):
        model_cases.use_extra_case_files([str(syntax)])
    with pytest.raises(ValueError, match="no such file, and not a module name"):
        model_cases.use_extra_case_files([str(tmp_path / "missing.py")])
    model_cases.use_extra_case_files([])


def test_module_cases_load_with_the_cwd_last_on_the_path(tmp_path, monkeypatch):
    _write(
        tmp_path / "my_cases_mod.py",
        """
        import torch
        from torch_onnx_conformance.conformance.user_cases import ModelCase

        def model_cases():
            return [ModelCase("mod/id", lambda: (torch.nn.Identity(), (torch.ones(2),), {}))]
        """,
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    try:
        model_cases.use_extra_case_files(["my_cases_mod"])
        assert sys.path[-1] == str(tmp_path)
        case = model_cases.find_case("mod/id")
        assert case.static_only  # no dynamic_shapes: no dynamic cases are collected
        selected = model_cases.collect(
            tier="default",
            names=None,
            dtypes=["f32"],
            shapes=["static", "dynamic"],
            opsets=[18],
            providers=["cpu"],
            exporters=["ours"],
            optimize=[True],
            shard=None,
        )
        assert [key.id for key, _ in selected] == [
            "model::mod/id::f32::static::opset18::cpu::ours::opt"
        ]
    finally:
        model_cases.use_extra_case_files([])
        sys.modules.pop("my_cases_mod", None)


def test_second_inputs_grow_every_named_axis_and_keep_value_ranges():
    case = user_cases.ModelCase(
        "grow/kw",
        lambda: (
            torch.nn.Identity(),
            (),
            {"x": torch.randn(2, 3), "ids": torch.randint(5, 9, (2, 4)), "w": torch.ones(3)},
        ),
        dynamic_shapes={"x": {0: "batch"}, "ids": {0: "batch", 1: "seq"}, "w": None},
        grow={"seq": 3},
    ).runner_case()
    module, args, kwargs = case.build()
    new_args, new = case.second_inputs(args, kwargs)
    assert new_args == ()
    assert new["x"].shape == (3, 3) and new["ids"].shape == (3, 7)
    assert new["w"] is kwargs["w"]
    assert (
        new["ids"].dtype == torch.int64 and 5 <= int(new["ids"].min()) <= int(new["ids"].max()) <= 8
    )
    assert case.tolerance() is None
    with pytest.raises(ValueError, match="give both rtol and atol"):
        user_cases.ModelCase("t/x", case.build, rtol=1e-3)


def test_a_model_off_the_cpu_is_moved_for_the_cpu_provider_or_refused():
    _, _, _, moved = user_cases.on_cpu(torch.nn.Linear(2, 2), (torch.ones(1, 2),), {})
    assert moved == []
    with pytest.raises(ValueError, match="on the meta device"):
        user_cases.on_cpu(torch.nn.Linear(2, 2).to("meta"), (torch.ones(1, 2),), {})
    if torch.cuda.is_available():
        module, args, kwargs, moved = user_cases.on_cpu(
            torch.nn.Linear(2, 2).cuda(), (torch.ones(1, 2, device="cuda"),), {"y": None}
        )
        assert moved == ["module from cuda:0", "inputs from cuda:0"]
        assert next(module.parameters()).device.type == args[0].device.type == "cpu"


# --------------------------------------------------------------------------- the GitHub Action

ACTION = ROOT / "action.yml"
EXAMPLE = ROOT / "examples" / "onnx-conformance"
EXAMPLE_WORKFLOW = EXAMPLE / ".github" / "workflows" / "conformance.yml"


@pytest.mark.parametrize(
    ("path", "schema"),
    [(ACTION, "vendor.github-actions"), (EXAMPLE_WORKFLOW, "vendor.github-workflows")],
    ids=["action", "example-workflow"],
)
def test_action_and_example_workflow_pass_the_schema_and_zizmor(path, schema):
    from tests.conformance.test_workflows import _assert_succeeds, _executable

    _assert_succeeds([_executable("check-jsonschema"), "--builtin-schema", schema, str(path)])
    _assert_succeeds([_executable("zizmor"), "--offline", "--no-progress", str(path)])


def _action_step_env(inputs: dict[str, str], step: dict) -> dict[str, str]:
    """A step's ``env:`` as GitHub Actions fills it from the action's inputs."""

    def fill(value: str) -> str:
        return re.sub(r"\$\{\{\s*inputs\.([\w-]+)\s*\}\}", lambda m: inputs[m.group(1)], value)

    return {name: fill(str(value)) for name, value in step.get("env", {}).items()}


@pytest.mark.slow
def test_the_actions_run_step_runs_the_example_project(tmp_path):
    """The action's run step, as the example workflow calls it (shard 0 of 2), in a copy of the
    example beside folders named like the harness's packages; then its failing step."""
    import shutil

    import yaml

    action = yaml.safe_load(ACTION.read_text(encoding="utf-8"))
    (call,) = [
        step
        for step in yaml.safe_load(EXAMPLE_WORKFLOW.read_text(encoding="utf-8"))["jobs"][
            "conformance"
        ]["steps"]
        if "torch-onnx-conformance" in step.get("uses", "")
    ]
    inputs = {name: str(spec.get("default", "")) for name, spec in action["inputs"].items()}
    inputs.update({name: str(value) for name, value in call["with"].items()})
    inputs["shard-index"] = "0"  # ${{ matrix.shard }}
    steps = {step.get("id") or step.get("name"): step for step in action["runs"]["steps"]}

    project = tmp_path / "project"
    shutil.copytree(EXAMPLE, project)
    for name in SHADOWING:
        (project / name).mkdir()
        (project / name / "__init__.py").write_text(
            f"raise ImportError('the user folder {name}')\n"
        )
    github_output, summary = tmp_path / "output", tmp_path / "summary.md"
    env = {
        **os.environ,
        "PATH": f"{_console_script(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "HF_HUB_OFFLINE": "1",
        "GITHUB_OUTPUT": str(github_output),
        "GITHUB_STEP_SUMMARY": str(summary),
        **_action_step_env(inputs, steps["run"]),
    }
    done = _bash(steps["run"]["run"], project, env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert github_output.read_text() == "exit-code=0\n", done.stdout[-3000:] + done.stderr[-3000:]
    assert "## Unexpected results" in summary.read_text(encoding="utf-8")
    rows = (project / "onnx-conformance" / "results").glob("*.jsonl")
    ids = {json.loads(line)["id"] for path in rows for line in path.read_text().splitlines()}
    assert ids and all(
        i.startswith(("model::example/cnn::", "model::example/tagger::")) for i in ids
    )
    assert len(ids) < 8  # one shard of the 2 models x 2 opsets x 2 shape modes
    assert (project / "onnx-conformance" / "results" / "junit.xml").exists()

    fail = steps["Fail on unexpected results"]
    for code, expected in (("0", 0), ("1", 1)):
        done = _bash(fail["run"], project, {**env, "CODE": code})
        assert done.returncode == expected


def test_zoo_cases_run_beside_the_users_only_with_zoo(tmp_path):
    cases = _write(
        tmp_path / "cases.py",
        """
        import torch
        from torch_onnx_conformance.conformance.user_cases import ModelCase

        def model_cases():
            return [ModelCase("mine/id", lambda: (torch.nn.Identity(), (torch.ones(2),), {}))]
        """,
    )
    key = model_cases.ModelCaseId("mine/id", "f32", "static", 18, "cpu", "ours", True)
    try:
        model_cases.use_extra_case_files([str(cases)])
        assert [case.name for case in model_cases.all_cases("smoke")] == ["mine/id"]
        assert "--zoo" not in model_cases.rerun_command(key)
        model_cases.use_extra_case_files([str(cases)], zoo=True)
        names = [case.name for case in model_cases.all_cases("smoke")]
        assert names[0] == "mine/id" and len(names) > 1
        assert model_cases.find_case(names[1]).name == names[1]
        assert model_cases.rerun_command(key).split(" --tier")[0].endswith(" --zoo")
    finally:
        model_cases.use_extra_case_files([])
