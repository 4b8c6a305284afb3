"""Every command in README.md's fenced shell blocks, and its own Python snippet, is run here.

Each command has an entry in ``COMMANDS`` saying how: a smoke variant that runs by default (the
same command narrowed to one op or one test, what the tox env runs spelled out from tox.ini),
and for commands that take hours or a GPU, the full command, marked ``slow`` and run only with
``README_FULL=1`` (it installs torch from the network into a fresh clone's ``.tox``). A README
command without an entry fails ``test_every_readme_command_has_a_test``.
"""

from __future__ import annotations

import configparser
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: Below this line the lead describes the layout; its Python block is an illustration.
OWN_PART_END = "<!-- layout and details below are written by the lead -->"
FULL = os.environ.get("README_FULL") == "1"
ONE_OP = [
    "torch_onnx_conformance/conformance/test_ops.py",
    "--ops",
    "abs",
    "--samples",
    "1",
    "-n",
    "1",
]


def fenced_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, re.MULTILINE | re.DOTALL)


def shell_commands(text: str) -> list[str]:
    commands = []
    for block in fenced_blocks(text, "sh"):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                commands.append(line.strip())
    return commands


def tox_env_command(env: str) -> list[str]:
    """What ``tox -e ENV -- ARGS`` runs, from tox.ini, without ``{posargs}``."""
    config = configparser.ConfigParser(interpolation=None)
    config.read(ROOT / "tox.ini")
    (command,) = [
        line for line in config[f"testenv:{env}"]["commands"].splitlines() if line.strip()
    ]
    words = shlex.split(command)
    assert words[-1] == "{posargs}", command
    words = words[:-1]
    if words[0] == "python":
        return [sys.executable, *words[1:]]
    return [sys.executable, "-m", *words]  # pytest


def tox_args(command: str, env: str) -> list[str]:
    """The arguments after ``--`` of a ``tox -e ENV -- ...`` README command."""
    words = shlex.split(command)
    assert words[:3] == ["tox", "-e", env], command
    return words[4:] if len(words) > 3 else []


def _run(argv: list[str], cwd: Path, timeout: float = 900, **env: str):
    done = subprocess.run(
        argv,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "HF_HUB_OFFLINE": "1", **env},
    )
    assert done.returncode == 0, f"{shlex.join(argv)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def narrowed(args: list[str], narrow: list[str]) -> list[str]:
    """``args`` with each ``--option value`` of ``narrow`` replacing the command's own (options
    such as --ops append, so adding one would widen the run), other words appended."""
    args = list(args)
    words = iter(narrow)
    for word in words:
        if word.startswith("--") and word in args and word not in ("--resume",):
            value = next(words)
            args[args.index(word) + 1] = value
        else:
            args.append(word)
    return args


def _with_folders(args: list[str], tmp: Path) -> list[str]:
    """The run's results and reports go to the test's folder, not the checkout's."""
    args = narrowed(args, ["--results", str(tmp / "results")])
    return [*args, "--reports-out", str(tmp / "reports")]


def conformance_smoke(command: str, narrow: list[str]) -> Callable[[Path], None]:
    def check(tmp: Path) -> None:
        args = _with_folders(narrowed(tox_args(command, "conformance"), narrow), tmp)
        _run([*tox_env_command("conformance"), *args], ROOT)
        summary = (tmp / "reports" / "summary.md").read_text(encoding="utf-8")
        assert "## Unexpected results" in summary

    return check


def pytest_smoke(command: str, tests: str, narrow: list[str] = ()) -> Callable[[Path], None]:
    """The env's pytest command with ``tests`` (a file) in place of its ``tests`` folder."""

    def check(tmp: Path) -> None:
        base = tox_env_command("py")
        base[base.index("tests")] = tests
        args = [*tox_args(command, "py"), *narrow, "-p", "no:cacheprovider"]
        _run([*base, *args], ROOT)

    return check


def fresh_clone_tox(env: str) -> Callable[[Path], None]:
    """The README's two first commands, as written, in a fresh clone (network, hours)."""

    def check(tmp: Path) -> None:
        clone = tmp / "clone"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        command = f"python3 -m pip install tox && python3 -m tox -e {env}"
        _run(["bash", "-c", command], clone, timeout=6 * 3600)

    return check


def pip_install_and_snippet(tmp: Path) -> None:
    """``pip install .`` without its dependencies (they are this interpreter's), then the
    README's snippet from an empty folder, importing only the installed copy."""
    target = tmp / "site"
    _run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "-q",
         "--target", str(target), "."],
        ROOT,
    )  # fmt: skip
    assert (
        target / "torch_onnx_conformance" / "conformance" / "tolerances.toml"
    ).is_file()  # package data shipped
    work = tmp / "work"
    work.mkdir()
    (snippet,) = fenced_blocks(README.read_text(encoding="utf-8").split(OWN_PART_END)[0], "python")
    done = _run([sys.executable, "-c", snippet], work, PYTHONPATH=str(target))
    assert "torch.Size([5, 8])" in done.stdout
    assert "export report written to" in done.stdout
    assert (work / "model.onnx").is_file() and list(work.glob("onnx_export_*_success.md"))


def pip_install_fresh_venv(tmp: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", str(tmp / "venv")], check=True)
    pip = tmp / "venv" / "bin" / "python"
    command = shlex.split(PIP_INSTALL)
    _run([str(pip), *command[1:]], ROOT, timeout=3600)
    _run(
        [str(pip), "-c", "import torch_onnx_conformance.exporter, torch; print(torch.__version__)"],
        tmp,
    )


def repro_smoke(command: str) -> Callable[[Path], None]:
    def check(tmp: Path) -> None:
        words = shlex.split(command)
        words[words.index("--results") + 1] = str(tmp / "results")
        done = _run([sys.executable, *words[1:]], ROOT)
        assert ": pass" in done.stdout and "repro directory:" in done.stdout

    return check


def matrix_plan(command: str) -> Callable[[Path], None]:
    def check(tmp: Path) -> None:
        done = _run([sys.executable, *shlex.split(command)[1:]], ROOT)
        assert '"gpu": "gpu-a100"' in done.stdout

    return check


def _cuda_available() -> bool:
    import onnxruntime

    return "CUDAExecutionProvider" in onnxruntime.get_available_providers()


def cuda_smoke(command: str) -> Callable[[Path], None]:
    def check(tmp: Path) -> None:
        if not _cuda_available():
            pytest.skip("needs onnxruntime-gpu and a GPU")
        conformance_smoke(command, ONE_OP)(tmp)

    return check


def gpu_env_setup(tmp: Path) -> None:
    """Building the tox env and swapping in onnxruntime-gpu change the machine's .tox: they
    run only where a person set them up, by hand, as the README says."""
    pytest.skip("sets up .tox/torch for a GPU: run by hand on a GPU machine")


PIP_INSTALL = "python3 -m pip install . --extra-index-url https://download.pytorch.org/whl/cpu"
REPRO = (
    "python -m torch_onnx_conformance repro 'op::abs::s000::f32::static::opset20::cpu::ours' "
    "--results /tmp/conformance-repro"
)
TOX_CONFORMANCE = "python3 -m pip install tox && python3 -m tox -e conformance"
TOX_PY = "python3 -m pip install tox && python3 -m tox -e py"
COMPARE = "tox -e conformance -- --exporter ours --exporter torch-dynamo"
CONV = "tox -e conformance -- --ops 'nn.functional.conv*' --dtype f16 --samples all"
SHARD = "tox -e conformance -- --shard 2/4 --results results/ --resume"
PY_K = "tox -e py -- -k dynamic_shapes -x"
MATRIX = 'python .ci/conformance_matrix.py --gpu-runners "gpu-a100"'
GPU_SETUP = ("tox -e conformance --notest", ".ci/install-onnxruntime-gpu .tox/torch/bin/python")
CUDA_RUN = "tox -e conformance -- --provider cuda"

#: README command -> (smoke check, full check or None). Smoke checks narrow the command to one
#: op or one test; full checks run it as written.
COMMANDS: dict[str, tuple[Callable[[Path], None], Callable[[Path], None] | None]] = {
    TOX_CONFORMANCE: (conformance_smoke("tox -e conformance", ONE_OP), fresh_clone_tox("conformance")),
    TOX_PY: (pytest_smoke("tox -e py", "tests/reports", ["-k", "fixture_reads"]), fresh_clone_tox("py")),
    PIP_INSTALL: (pip_install_and_snippet, pip_install_fresh_venv),
    REPRO: (repro_smoke(REPRO), None),
    COMPARE: (conformance_smoke(COMPARE, ONE_OP), None),
    # f16 conv_transpose* fail by a few f16 ulps (no expectation covers f16): README says so.
    CONV: (conformance_smoke(CONV, ["--ops", "nn.functional.conv1d", "--samples", "1", "-n", "1"]), None),
    SHARD: (conformance_smoke(SHARD, ["--ops", "abs", "--samples", "2", "-n", "1"]), None),
    PY_K: (pytest_smoke(PY_K, "tests/exporter/test_errors.py"), None),
    MATRIX: (matrix_plan(MATRIX), None),
    CUDA_RUN: (cuda_smoke(CUDA_RUN), None),
    **{command: (gpu_env_setup, None) for command in GPU_SETUP},
}  # fmt: skip


def test_smoke_variants_narrow_by_replacing_options():
    args = ["--ops", "nn.functional.conv*", "--dtype", "f16", "--samples", "all"]
    assert narrowed(args, ["--ops", "nn.functional.conv1d", "--samples", "1", "-n", "1"]) == [
        "--ops", "nn.functional.conv1d", "--dtype", "f16", "--samples", "1", "-n", "1",
    ]  # fmt: skip


def test_every_readme_command_has_a_test():
    text = README.read_text(encoding="utf-8")
    assert set(shell_commands(text)) == set(COMMANDS)
    assert len(fenced_blocks(text.split(OWN_PART_END)[0], "python")) == 1


def _id(command: str) -> str:
    # Not the command text: `-k dynamic_shapes` in a README command would select its own test.
    return f"readme{list(COMMANDS).index(command)}"


@pytest.mark.slow
@pytest.mark.parametrize("command", list(COMMANDS), ids=_id)
def test_readme_command_smoke(command, tmp_path):
    smoke, _ = COMMANDS[command]
    smoke(tmp_path)


@pytest.mark.slow
@pytest.mark.skipif(not FULL, reason="full README commands take hours: README_FULL=1 runs them")
@pytest.mark.parametrize("command", [c for c, (_, full) in COMMANDS.items() if full], ids=_id)
def test_readme_command_full(command, tmp_path):
    if shutil.which("git") is None:
        pytest.skip("needs git")
    _, full = COMMANDS[command]
    full(tmp_path)
