"""The GitHub workflows are valid, audited, and plan the conformance matrix the issue asks for.

Both tools run offline: check-jsonschema ships the GitHub workflow schema (`--builtin-schema
vendor.github-workflows`) and `zizmor --offline` skips the audits that would call GitHub's API.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
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


def test_matrix_covers_every_opset_provider_and_shard(planner):
    entries = planner.plan(include_gpu=True)
    cells = {(e["opset"], e["provider"], e["gpu"], e["shard"], e["shards"]) for e in entries}
    assert len(cells) == len(entries), "two matrix entries would run the same shard"

    expected = set()
    for opset in (17, 18, 20, 23):
        expected |= {
            (opset, "cpu", "none", i, planner.CPU_SHARDS) for i in range(planner.CPU_SHARDS)
        }
        for label in planner.GPU_RUNNER_LABELS:
            expected |= {
                (opset, "cuda", label, i, planner.GPU_SHARDS) for i in range(planner.GPU_SHARDS)
            }
    assert cells == expected


def test_cpu_entries_use_hosted_runners_and_cuda_entries_their_gpu_label(planner):
    for entry in planner.plan(include_gpu=True):
        if entry["provider"] == "cpu":
            assert entry["runs-on"] == ["ubuntu-latest"]
        else:
            assert entry["runs-on"][0] == "self-hosted"
            assert entry["runs-on"][-1] == entry["gpu"]
            assert entry["gpu"] in planner.GPU_RUNNER_LABELS


def test_fork_pull_requests_get_no_gpu_entries(planner):
    entries = planner.plan(include_gpu=False)
    assert entries
    assert {entry["provider"] for entry in entries} == {"cpu"}


def test_planner_writes_the_matrix_to_github_output(tmp_path):
    output = tmp_path / "github_output"
    completed = subprocess.run(
        [sys.executable, str(REPO_ROOT / ".ci" / "conformance_matrix.py"), "--no-gpu"],
        env={"GITHUB_OUTPUT": str(output), "PATH": ""},
        capture_output=True,
        text=True,
        check=True,
    )
    written = output.read_text(encoding="utf-8")
    assert written.startswith("matrix={")
    assert written.strip() == f"matrix={completed.stdout.strip()}"
    assert '"provider": "cuda"' not in written
