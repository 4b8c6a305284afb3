"""`python -m torch_onnx_conformance run --help`: the harness's own options first, all of them."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from torch_onnx_conformance.conformance import plugin
from torch_onnx_conformance.conformance.__main__ import RUN_OPTIONS, run_help

ROOT = Path(__file__).resolve().parents[2]


class _Recorder:
    """Records every option name the plugin registers and whether its help is shown."""

    def __init__(self):
        self.shown: list[str] = []
        self.hidden: list[str] = []

    def getgroup(self, *args, **kwargs):
        return self

    def addoption(self, *names, **attrs):
        (self.hidden if attrs.get("help") == argparse.SUPPRESS else self.shown).extend(names)


def test_help_lists_every_harness_option_before_pointing_at_pytest():
    recorder = _Recorder()
    plugin.pytest_addoption(recorder)
    text = run_help()
    pointer = text.index("pytest's own options: python -m torch_onnx_conformance run --help-pytest")
    for name in [*recorder.shown, *(flag for flag, _, _ in RUN_OPTIONS)]:
        assert f"  {name} " in text[:pointer] or f"  {name}\n" in text[:pointer], name
    for name in recorder.hidden:  # the harness's own test hooks stay out of the user's help
        assert name not in text
    assert "--reports-out DIR" in text and "--results RESULTS" in text and "--resume" in text
    assert len(text.splitlines()) < 80  # pytest's 500 lines are one option away


def test_run_help_command_prints_it_and_touches_nothing(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "torch_onnx_conformance", "run", "--help"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(
        "usage: python -m torch_onnx_conformance run [OPTIONS] [PYTEST ARGS]"
    )
    assert "run options (taken before pytest starts):" in done.stdout
