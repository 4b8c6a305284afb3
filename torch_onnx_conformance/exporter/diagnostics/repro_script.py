"""Re-run a failing ONNX model: python repro.py [--provider cpu|cuda|reference]

Needs numpy and onnxruntime (onnx for --provider reference, ml_dtypes for bfloat16 arrays).
Exits 0 when every output matches the expected outputs saved next to this script, else 1. The
comparison rule is compare.py beside this script; case.json says which rule and tolerances apply.
Nothing here unpickles: arrays load with allow_pickle=False.
"""

import argparse
import importlib.util
import json
import pathlib
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
CASE = json.loads((HERE / "case.json").read_text(encoding="utf-8"))


def load_compare():
    # By path: `python -I repro.py` leaves this folder off sys.path.
    spec = importlib.util.spec_from_file_location("repro_compare", HERE / "compare.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while building
    spec.loader.exec_module(module)
    return module


def load(name):
    with np.load(HERE / name, allow_pickle=False) as data:
        arrays = {key: data[key] for key in data.files}
    for key in CASE.get("bfloat16", {}).get(name, []):
        import ml_dtypes

        arrays[key] = arrays[key].view(ml_dtypes.bfloat16)
    return arrays


def run(provider, feeds):
    model = HERE / "model.onnx"
    if provider == "reference":
        from onnx.reference import ReferenceEvaluator

        return [np.asarray(o) for o in ReferenceEvaluator(str(model)).run(None, feeds)]
    import onnxruntime as ort

    options = ort.SessionOptions()
    if CASE.get("ort_optimization") == "disable_all":
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    wanted = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}[provider]
    providers = [wanted] + (["CPUExecutionProvider"] if provider != "cpu" else [])
    session = ort.InferenceSession(str(model), options, providers=providers)
    declared = {i.name for i in session.get_inputs()}
    return [
        np.asarray(o) for o in session.run(None, {k: v for k, v in feeds.items() if k in declared})
    ]


def main():
    parser = argparse.ArgumentParser(description=CASE.get("id", "repro"))
    parser.add_argument(
        "--provider", default=CASE.get("provider", "cpu"), choices=["cpu", "cuda", "reference"]
    )
    provider = parser.parse_args().provider
    print(f"case: {CASE.get('id', '?')}")
    for key in ("status", "stage", "error", "note"):
        if CASE.get(key):
            print(f"{key}: {str(CASE[key])[:500]}")
    if not (HERE / "model.onnx").exists():
        print("no model.onnx here: the export itself failed, so there is nothing to run")
        if CASE.get("rerun"):
            print(f"re-run the export with: {CASE['rerun']}")
        return 1
    compare = load_compare()
    all_ok = True
    for suffix, label in (("", "example inputs"), ("2", "second shape")):
        if not (HERE / f"inputs{suffix}.npz").exists():
            continue
        feeds = load(f"inputs{suffix}.npz")
        saved = load(f"expected{suffix}.npz")
        expected = [saved[f"output_{i}"] for i in range(len(saved))]
        shapes = ", ".join(f"{k}{list(v.shape)}" for k, v in feeds.items())
        print(f"--- {label}: {shapes}")
        try:
            actual = run(provider, feeds)
        except Exception as exc:
            print(f"MISMATCH: {provider} failed: {type(exc).__name__}: {exc}")
            all_ok = False
            continue
        result = compare.compare_outputs(
            expected,
            actual,
            rtol=CASE["rtol"],
            atol=CASE["atol"],
            rule=CASE.get("rule", compare.ELEMENT),
            tolerances=CASE.get("tolerances"),
            shape_only=bool(CASE.get("shape_only")),
            sign_invariant=CASE.get("sign_invariant") or (),
            code_tie_fraction=CASE.get("code_tie_fraction"),
        )
        if not result.details:
            print(f"MISMATCH: {result.message}")
        for ok, line in zip(result.detail_ok, result.details):
            print(("ok       " if ok else "MISMATCH ") + line)
        all_ok = all_ok and result.ok
    print("result: " + ("all outputs match" if all_ok else "MISMATCH"))
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
