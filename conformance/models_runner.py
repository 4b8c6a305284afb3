"""Running one model case: build -> eager -> vacuity -> export -> onnx.checker -> session ->
run -> compare, and for dynamic cases the run and compare again at the case's second inputs.

``run_model_case`` never raises for a failure of the thing under test: every outcome comes back
as a ``ModelOutcome``. It announces each stage before entering it, so that a parent process can
attribute a crash or a hang. A case whose eager outputs are near-constant (``model_zoo.vacuity``)
that would otherwise pass is ``vacuous``: a comparison against them proves nothing.
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conformance.models_cases import ModelCaseId, find_case, parse_model_id
from conformance.runner import CaseOutcome, error_text, signature_of

#: Vacuity descriptions kept in a row, at most (decoder caches have dozens of outputs).
MAX_DESCRIBED_OUTPUTS = 8
#: An exporter cannot be asked to match eager more closely than eager matches exact arithmetic:
#: the tolerance relative to the output scale is at least this many times eager's own error
#: against a float64 run of the same model (deep BatchNorm stacks amplify rounding: regnet_x_400mf
#: measured 1.8e-3 in float32 eager). Capped, so that a model whose float64 run takes other
#: discrete decisions (top-k, NMS) cannot loosen its tolerance into meaninglessness.
NOISE_FACTOR = 4.0
NOISE_RTOL_CAP = 1e-2


@dataclasses.dataclass
class ModelOutcome(CaseOutcome):
    latency_ms: float | None = None


class StageFailed(Exception):
    def __init__(self, stage: str, error: BaseException | str):
        super().__init__(stage)
        self.stage = stage
        self.error = error


class ModelSetupError(RuntimeError):
    """The zoo case itself failed (build or eager run): a bug in the case, not the exporter."""


def run_model_case(
    case_id: str,
    scratch: Path,
    *,
    announce: Callable[[str], None] = lambda stage: None,
    release_memory: bool = True,
) -> ModelOutcome:
    """Run one model case, writing its artifacts into ``scratch`` (replaced).

    ``release_memory=False`` skips dropping torch's caches afterwards, for a process that
    exits after the case anyway."""
    key = parse_model_id(case_id)
    _quiet_torch_logs()
    outcome = ModelOutcome(status="pass")
    cpu_started = time.process_time()
    try:
        _run(key, scratch, announce, outcome)
    except StageFailed as failure:
        outcome.status = "fail"
        outcome.stage = failure.stage
        outcome.error = error_text(failure.error)
        outcome.error_signature = signature_of(failure.error)
        if isinstance(failure.error, ModelSetupError):
            outcome.error_signature = f"ModelSetupError: {outcome.error_signature}"
    finally:
        if release_memory:
            _release_memory()
    if outcome.status == "pass" and outcome.extra.get("vacuous"):
        outcome.status = "vacuous"
        outcome.stage = "compare"
        outcome.error = (
            "eager outputs are near-constant, so matching them proves nothing: "
            + "; ".join(_describe_line(d) for d in outcome.extra.get("vacuity", []))
        )
        outcome.error_signature = "vacuous: near-constant eager outputs"
    outcome.extra["cpu_s"] = round(time.process_time() - cpu_started, 4)
    return outcome


def _run(key: ModelCaseId, scratch: Path, announce, outcome: ModelOutcome) -> None:
    import onnx
    import torch

    from conformance import flat_io
    from conformance.exporters import export_model
    from conformance.repro import write_artifacts
    from conformance.session import ModelSession
    from exporter.diagnostics.compare import (
        SCALE,
        compare_outputs,
        default_tolerance,
        max_or_none,
    )
    from model_zoo import vacuity

    case = find_case(key.model)
    started = time.perf_counter()
    torch.manual_seed(0)
    try:
        module, args, kwargs = case.build()
        second = case.second_inputs(args, kwargs) if key.dynamic else None
    except Exception as exc:
        raise StageFailed("export", _setup_error("building the model case", exc)) from exc
    if key.dtype == "f16":
        module = module.to(torch.float16)
        args, kwargs = flat_io.cast_floats((args, kwargs), torch.float16)
        if second is not None:
            second = flat_io.cast_floats(second, torch.float16)
    expected = _eager(module, args, kwargs, "the example inputs")
    expected2 = _eager(module, *second, "the second inputs") if second is not None else None
    outcome.extra["build_s"] = round(time.perf_counter() - started, 4)

    override = case.tolerance(key.dtype)
    if override is not None:
        rtol, atol = override.rtol, override.atol
        outcome.extra["tolerance_source"] = f"model_zoo/tolerances.toml: {override.reason}"
    else:
        rtol, atol = default_tolerance("model", key.dtype)
        outcome.extra["tolerance_source"] = "default"
    noise = max_or_none(
        _eager_noise(module, args, kwargs, expected),
        _eager_noise(module, *second, expected2) if second is not None else None,
    )
    if noise is not None:
        outcome.extra["eager_noise"] = noise
        floor = min(NOISE_FACTOR * noise, NOISE_RTOL_CAP)
        if floor > rtol:
            rtol = floor
            outcome.extra["tolerance_source"] += (
                f"; rtol raised to {NOISE_FACTOR:g} x the model's own float rounding noise "
                f"(eager vs float64 error/scale {noise:.2g})"
            )
    outcome.rtol, outcome.atol = rtol, atol

    if vacuity.is_vacuous(expected) or (expected2 is not None and vacuity.is_vacuous(expected2)):
        outcome.extra["vacuous"] = True
        described = [
            d for outs in (expected, expected2) if outs is not None for d in _vacuity(outs)
        ]
        outcome.extra["vacuity"] = described[:MAX_DESCRIBED_OUTPUTS]

    dynamic_shapes = case.dynamic_shapes if key.dynamic else None
    inputs = flat_io.flat_inputs(module, args, kwargs, case.dynamic_shapes)
    feeds = flat_io.feeds(inputs)
    expected_np = [flat_io.to_numpy(t) for t in flat_io.flat_outputs(expected)]
    feeds2 = expected2_np = None
    if second is not None:
        inputs2 = flat_io.flat_inputs(module, *second, case.dynamic_shapes)
        feeds2 = flat_io.feeds(inputs2)
        expected2_np = [flat_io.to_numpy(t) for t in flat_io.flat_outputs(expected2)]
        outcome.extra["second_inputs"] = flat_io.shapes_text(feeds2)
    # Inputs and expected outputs go to disk before the export, so that even an export that
    # kills the process leaves them behind for the repro directory.
    write_artifacts(
        scratch,
        meta={
            "id": key.id,
            "model": key.model,
            "provider": key.provider,
            "rtol": rtol,
            "atol": atol,
            "rule": SCALE,
            "dynamic_axes": flat_io.dynamic_axes(inputs) if key.dynamic else {},
            "rerun": rerun_command(key),
        },
        feeds=feeds,
        expected=expected_np,
        feeds2=feeds2,
        expected2=expected2_np,
    )

    announce("export")
    path = scratch / "model.onnx"
    table = (
        case.custom_translation_table_factory() if case.custom_translation_table_factory else None
    )
    if case.capture and key.exporter == "ours":
        outcome.extra["capture"] = case.capture
    started = time.perf_counter()
    try:
        export_model(
            key.exporter,
            module,
            flat_io.clone_tree(args),
            flat_io.clone_tree(kwargs),
            inputs=inputs,
            dynamic_shapes=dynamic_shapes,
            opset=key.opset,
            optimize=key.optimize,
            path=path,
            custom_translation_table=table,
            capture=case.capture if key.exporter == "ours" else None,
        )
    except Exception as exc:
        raise StageFailed("export", exc) from exc
    finally:
        outcome.export_s = time.perf_counter() - started
    header = onnx.load(str(path), load_external_data=False)
    outcome.node_count = len(header.graph.node)
    outcome.extra["model_opset"] = next(
        (o.version for o in header.opset_import if o.domain in ("", "ai.onnx")), None
    )
    del header

    announce("checker")
    try:
        onnx.checker.check_model(str(path), full_check=True)
    except Exception as exc:
        raise StageFailed("checker", exc) from exc

    announce("load")
    started = time.perf_counter()
    try:
        session = ModelSession(path, key.provider)
    except Exception as exc:
        raise StageFailed("load", exc) from exc
    outcome.session_create_s = time.perf_counter() - started

    announce("run")
    missing = session.missing_inputs(feeds)
    if missing:
        raise StageFailed(
            "run",
            f"the ONNX model declares inputs {missing} that are not among the model's "
            f"flattened inputs {list(feeds)} (the exporter ignored input_names)",
        )
    started = time.perf_counter()
    try:
        actual = session.run(feeds)
    except Exception as exc:
        raise StageFailed("run", exc) from exc
    outcome.run_s = time.perf_counter() - started
    try:
        latency = session.latency_ms(feeds)
        if latency is not None:
            outcome.latency_ms, outcome.extra["latency_wall_ms"] = latency
    except Exception as exc:  # noqa: BLE001 - it ran once already; timing is a by-product
        outcome.extra["latency_error"] = error_text(exc)

    announce("compare")
    result = (
        _compare_with(case.compare, expected_np, actual)
        if case.compare
        else compare_outputs(
            expected_np,
            actual,
            rtol=rtol,
            atol=atol,
            rule=SCALE,
            declared_shapes=session.output_shapes,
        )
    )
    _record(outcome, result)
    if not result.ok:
        raise StageFailed("compare", result.message)

    if second is None:
        return
    announce("second-shape")
    specialised = [
        f"{item.name} dim {dim} ('{axis}') fixed to {session.input_shapes[item.name][dim]}"
        for item in inputs
        if item.name in session.input_shapes
        for dim, axis in item.axes.items()
        if dim < len(session.input_shapes[item.name])
        and isinstance(session.input_shapes[item.name][dim], int)
    ]
    if specialised:
        outcome.extra["specialised_dims"] = specialised
        raise StageFailed(
            "second-shape",
            "export specialised dimension(s) asked to be dynamic: "
            + "; ".join(specialised)
            + f"; the second inputs are {flat_io.shapes_text(feeds2)}",
        )
    started = time.perf_counter()
    try:
        actual2 = session.run(feeds2)
    except Exception as exc:
        raise StageFailed("second-shape", exc) from exc
    outcome.run_s += time.perf_counter() - started
    result2 = (
        _compare_with(case.compare, expected2_np, actual2)
        if case.compare
        else compare_outputs(
            expected2_np,
            actual2,
            rtol=rtol,
            atol=atol,
            rule=SCALE,
            declared_shapes=session.output_shapes,
        )
    )
    _record(outcome, result2)
    if not result2.ok:
        raise StageFailed(
            "second-shape",
            f"{result2.message} (second inputs: {flat_io.shapes_text(feeds2)})",
        )


def _compare_with(compare, expected, actual):
    """A case's own comparison (``ModelCase.compare``: problems, empty when equal)."""
    from exporter.diagnostics.compare import Comparison

    problems = compare(expected, actual)
    return Comparison(not problems, "; ".join(problems), details=list(problems))


def rerun_command(key: ModelCaseId) -> str:
    """The pytest command line that selects exactly this case."""
    return (
        f"python -m pytest conformance/test_models.py --tier full --models '{key.model}' "
        f"--dtype {key.dtype} --shapes {key.shapes} --opset {key.opset} --provider "
        f"{key.provider} --exporter {key.exporter} --optimize {'on' if key.optimize else 'off'}"
    )


def _record(outcome: ModelOutcome, result) -> None:
    from exporter.diagnostics.compare import max_or_none

    outcome.max_abs = max_or_none(outcome.max_abs, result.max_abs)
    outcome.max_rel = max_or_none(outcome.max_rel, result.max_rel)
    scale = max_or_none(outcome.extra.get("max_rel_scale"), result.max_rel_scale)
    if scale is not None:
        outcome.extra["max_rel_scale"] = scale


def _eager(module, args: tuple, kwargs: dict, what: str) -> Any:
    """Eager outputs on a copy of the module and of the inputs: a model that mutates buffers or
    its inputs must not change what the exporter sees."""
    import torch

    from conformance.flat_io import clone_tree

    torch.manual_seed(0)
    try:
        with torch.no_grad():
            return copy.deepcopy(module)(*clone_tree(args), **clone_tree(kwargs))
    except Exception as exc:
        raise StageFailed("export", _setup_error(f"running eager at {what}", exc)) from exc


def _eager_noise(module, args: tuple, kwargs: dict, expected: Any) -> float | None:
    """Eager's own rounding error: max over float outputs of ``max |y - y64| / max |y64|``
    against a float64 run; None when the float64 run fails or gives other shapes."""
    import torch

    from conformance.flat_io import cast_floats, clone_tree, flat_outputs
    from model_zoo.vacuity import output_scale

    torch.manual_seed(0)
    try:
        with torch.no_grad():
            exact = copy.deepcopy(module).double()(
                *cast_floats(clone_tree(args), torch.float64),
                **cast_floats(clone_tree(kwargs), torch.float64),
            )
    except Exception:  # noqa: BLE001 - some models cannot run in float64; no floor then
        return None
    ours, reference = flat_outputs(expected), flat_outputs(exact)
    if len(ours) != len(reference):
        return None
    worst = 0.0
    for value, exact_value in zip(ours, reference):
        if not value.is_floating_point():
            continue
        if value.shape != exact_value.shape:
            return None
        scale = output_scale(exact_value)
        if scale == 0.0 or value.numel() == 0:
            continue
        finite = torch.isfinite(exact_value) & torch.isfinite(value)
        if not finite.any():
            continue
        error = (value.double()[finite] - exact_value[finite]).abs().max().item()
        worst = max(worst, error / scale)
    return worst


def _setup_error(what: str, exc: BaseException) -> ModelSetupError:
    error = ModelSetupError(f"the model case failed {what}: {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error


def _vacuity(outputs: Any) -> list[dict[str, Any]]:
    from model_zoo import vacuity

    return vacuity.describe(outputs)


def _describe_line(entry: dict[str, Any]) -> str:
    scale, spread = entry.get("scale"), entry.get("spread")
    numbers = f" scale {scale:.3g}, spread {spread:.3g}" if scale is not None else ""
    return f"output{entry['path']} {entry['dtype']}{list(entry['shape'])}{numbers}"


def _quiet_torch_logs() -> None:
    """torch.export logs every failed guard at ERROR level with a long stack; the row already
    records the error, and the log would flood the terminal of a run over many models."""
    import logging

    import torch

    torch._logging.set_logs(all=logging.CRITICAL)


def _release_memory() -> None:
    """Models are big and the child is reused: drop compiled-graph caches between cases."""
    try:
        import torch

        torch._dynamo.reset()
    except Exception:  # noqa: BLE001, S110 - best effort
        pass
    gc.collect()
