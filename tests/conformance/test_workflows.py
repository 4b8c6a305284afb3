"""The GitHub workflows are valid, audited, and plan the conformance matrix the issue asks for.

Both tools run offline: check-jsonschema ships the GitHub workflow schema (`--builtin-schema
vendor.github-workflows`) and `zizmor --offline` skips the audits that would call GitHub's API.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS_DIR = REPO_ROOT / ".github" / "workflows"
WORKFLOW_FILES = sorted([*WORKFLOWS_DIR.glob("*.yml"), *WORKFLOWS_DIR.glob("*.yaml")])


def _executable(name: str) -> str:
    # Prefer the copy installed next to this interpreter (the tox env), then PATH.
    beside_python = Path(sys.executable).parent / name
    if beside_python.is_file():
        return str(beside_python)
    found = shutil.which(name)
    if found is None:
        pytest.skip(
            f"{name} is not installed; it comes with the test extra: pip install -e '.[test]'"
        )
    return found


def _assert_succeeds(argv: list[str]) -> None:
    completed = subprocess.run(
        argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert completed.returncode == 0, (
        f"`{' '.join(argv)}` exited with {completed.returncode}\n"
        f"--- stdout ---\n{completed.stdout}\n--- stderr ---\n{completed.stderr}"
    )


def test_both_workflows_are_present():
    assert {path.name for path in WORKFLOW_FILES} >= {"ci.yml", "conformance.yml"}


@pytest.mark.parametrize("workflow", WORKFLOW_FILES, ids=lambda path: path.name)
def test_workflow_matches_github_schema(workflow: Path):
    checker = _executable("check-jsonschema")
    _assert_succeeds([checker, "--builtin-schema", "vendor.github-workflows", str(workflow)])


@pytest.mark.parametrize("workflow", WORKFLOW_FILES, ids=lambda path: path.name)
def test_workflow_passes_zizmor_offline_audit(workflow: Path):
    zizmor = _executable("zizmor")
    _assert_succeeds([zizmor, "--offline", "--no-progress", str(workflow)])


# ---------------------------------------------------------------------- the conformance matrix


def _load_matrix_planner():
    path = REPO_ROOT / ".ci" / "conformance_matrix.py"
    spec = importlib.util.spec_from_file_location("conformance_matrix", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def planner():
    return _load_matrix_planner()


GPU_LABELS = ("gpu-a100", "gpu-h100")


def test_matrix_covers_every_opset_provider_and_shard(planner):
    entries = planner.plan(gpu_labels=GPU_LABELS)
    cells = {(e["opset"], e["provider"], e["gpu"], e["shard"], e["shards"]) for e in entries}
    assert len(cells) == len(entries), "two matrix entries would run the same shard"

    # The CPU cells the issue asks for (#21): at least these opsets, every shard of each.
    assert {17, 18, 20, 21, 23, 26} <= set(planner.OPSETS)
    expected = set()
    for opset in planner.OPSETS:
        expected |= {
            (opset, "cpu", "none", i, planner.CPU_SHARDS) for i in range(planner.CPU_SHARDS)
        }
        for label in GPU_LABELS:
            expected |= {
                (opset, "cuda", label, i, planner.GPU_SHARDS) for i in range(planner.GPU_SHARDS)
            }
    assert cells == expected


def test_cpu_entries_use_hosted_runners_and_cuda_entries_their_gpu_label(planner):
    for entry in planner.plan(gpu_labels=GPU_LABELS):
        if entry["provider"] == "cpu":
            assert entry["runs-on"] == ["ubuntu-latest"]
        else:
            assert entry["runs-on"][0] == "self-hosted"
            assert entry["runs-on"][-1] == entry["gpu"]
            assert entry["gpu"] in GPU_LABELS


def _run_planner(tmp_path, *argv, variable=None):
    output = tmp_path / "github_output"
    env = {"GITHUB_OUTPUT": str(output), "PATH": ""}
    if variable is not None:
        env["CONFORMANCE_GPU_RUNNERS"] = variable
    completed = subprocess.run(
        [sys.executable, str(REPO_ROOT / ".ci" / "conformance_matrix.py"), *argv],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    return completed, output


def _providers(completed) -> set[str]:
    return {entry["provider"] for entry in json.loads(completed.stdout)["include"]}


@pytest.mark.parametrize("variable", [None, "", " , "])
def test_no_gpu_job_is_planned_without_the_repository_variable(tmp_path, variable):
    completed, output = _run_planner(tmp_path, variable=variable)
    assert completed.returncode == 0, completed.stderr
    assert _providers(completed) == {"cpu"}
    written = output.read_text(encoding="utf-8")
    assert written.strip() == f"matrix={completed.stdout.strip()}"
    assert '"provider": "cuda"' not in written


def test_the_repository_variable_names_the_gpu_runners(tmp_path):
    completed, _ = _run_planner(tmp_path, variable="gpu-a100, gpu-h100 gpu-a100")
    assert completed.returncode == 0, completed.stderr
    gpus = [e["gpu"] for e in json.loads(completed.stdout)["include"] if e["provider"] == "cuda"]
    assert sorted(set(gpus)) == ["gpu-a100", "gpu-h100"]
    assert len(gpus) == 2 * len(_load_matrix_planner().OPSETS) * 2


def test_fork_pull_requests_get_no_gpu_entries_even_with_the_variable(tmp_path):
    completed, _ = _run_planner(tmp_path, "--no-gpu", variable="gpu-a100")
    assert completed.returncode == 0, completed.stderr
    assert _providers(completed) == {"cpu"}


def test_a_malformed_runner_label_is_refused_by_name(tmp_path):
    completed, _ = _run_planner(tmp_path, variable="gpu-a100; rm -rf /")
    assert completed.returncode == 2
    assert "';'" in completed.stderr or "is not a runner label" in completed.stderr


def test_the_workflow_passes_the_repository_variable_to_the_planner():
    text = (WORKFLOWS_DIR / "conformance.yml").read_text(encoding="utf-8")
    assert "vars.CONFORMANCE_GPU_RUNNERS" in text
    assert "GPU_RUNNER_LABELS" not in text


def test_the_merge_job_publishes_pytests_junit_with_a_pinned_action():
    import yaml

    workflow = yaml.safe_load((WORKFLOWS_DIR / "conformance.yml").read_text(encoding="utf-8"))
    steps = workflow["jobs"]["merge"]["steps"]
    (publish,) = [s for s in steps if "action-junit-report" in s.get("uses", "")]
    action, _, ref = publish["uses"].partition("@")
    assert len(ref) == 40 and all(c in "0123456789abcdef" for c in ref), "pin by commit SHA"
    # The JUnit file each shard's pytest wrote (results/junit.xml, uploaded as results-*).
    assert publish["with"]["report_paths"] == "results-*/junit.xml"
    assert publish["with"]["job_summary"] is False  # the merged summary is the only one
    summaries = [s for s in steps if "GITHUB_STEP_SUMMARY" in s.get("run", "")]
    assert len(summaries) == 1
    uploads = [s for s in workflow["jobs"]["conformance"]["steps"] if "with" in s]
    assert any(s["with"].get("path") == "results/" for s in uploads)
