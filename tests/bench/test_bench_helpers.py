"""The arithmetic the benches print their figures with (the benches themselves are timed by
hand, never in a unit test)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def ort_latency():
    return _load("ort_latency")


@pytest.fixture(scope="module")
def suite_throughput():
    return _load("suite_throughput")


def test_latency_summary_gives_the_transformers_median_apart_and_the_worst_model(ort_latency):
    ratios = {
        "torchvision/resnet18": 1.2,
        "torchvision/squeezenet1_0": 1.1,
        "transformers/bert": 0.9,
        "transformers/gpt2": 0.7,
        "transformers/llama": 0.8,
    }
    lines = ort_latency.summary_lines("ORT_ENABLE_ALL", ratios)
    assert lines == [
        "median ratio ours/torch.onnx at ORT_ENABLE_ALL, all models: 0.90 over 5 models",
        "median ratio ours/torch.onnx at ORT_ENABLE_ALL, transformers: 0.80 over 3 models",
        "worst model at ORT_ENABLE_ALL: torchvision/resnet18 1.20",
    ]


def test_latency_summary_of_no_models_is_empty(ort_latency):
    assert ort_latency.summary_lines("ORT_ENABLE_BASIC", {}) == []


def test_throughput_sample_is_every_nth_op_from_the_first(suite_throughput):
    names = [f"op{i:02d}" for i in range(25)]
    assert suite_throughput.sample_ops(names, 12) == ["op00", "op12", "op24"]
    assert suite_throughput.sample_ops(names, 1) == names


def test_throughput_summary_reads_case_cpu_and_export_time_from_rows(suite_throughput, tmp_path):
    rows = [
        {"status": "pass", "export_s": 0.5, "extra": {"cpu_s": 1.0}},
        {"status": "fail", "export_s": None, "extra": {"cpu_s": 3.0}},
    ]
    # Rows come from every worker's file of the run.
    for i, row in enumerate(rows):
        (tmp_path / f"run.gw{i}.jsonl").write_text(json.dumps(row) + "\n")
    run = {"rows": suite_throughput.read_rows(tmp_path), "wall": 10.0, "load": (1.0, 2.0)}
    summary = suite_throughput.summarize(run, workers=2)
    assert summary["cases"] == 2 and summary["passed"] == 1
    assert summary["cases_per_s"] == pytest.approx(0.2)
    assert summary["in_case_cpu"] == pytest.approx(4.0)
    assert summary["cases_per_cpu_s"] == pytest.approx(0.5)
    assert summary["export_wall"] == pytest.approx(0.5)
    assert summary["overhead"] == pytest.approx(16.0)  # two workers for 10 s, 4 s in cases
