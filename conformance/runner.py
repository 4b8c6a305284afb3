"""Running one case: eager -> export -> onnx.checker -> session -> run -> compare, and for
dynamic cases the same again at a second shape.

``run_op_case`` (an OpInfo sample) and ``run_model_case`` (a zoo model, with a vacuity check
of its eager outputs and its own build stage) never raise for a failure of the thing under test:
every outcome, including "the sample is not valid for eager", comes back as a ``CaseOutcome``
(``ModelOutcome`` for models). Both announce each stage before entering it, so that a parent
process can attribute a crash or a hang. A model case whose eager outputs are near-constant
(``model_zoo.vacuity``) that would otherwise pass is ``vacuous``: a comparison against them
proves nothing.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import gc
import re
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conformance import planted as planted_cases
from conformance.cases import OpCase
from conformance.model_cases import ModelCaseId, find_case, parse_model_id

MAX_ERROR_CHARS = 4000
#: The op cases' comparison policy: per-dtype tolerances, per-op overrides, shape-only ops.
OP_TOLERANCES_PATH = Path(__file__).with_name("tolerances.toml")


@dataclasses.dataclass
class CaseOutcome:
    status: str  # pass | fail | skip  (crash and timeout are decided by the parent)
    stage: str | None = None
    error: str | None = None
    error_signature: str | None = None
    max_abs: float | None = None
    max_rel: float | None = None
    rtol: float | None = None
    atol: float | None = None
    export_s: float | None = None
    run_s: float | None = None
    session_create_s: float | None = None
    node_count: int | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class _StageFailed(Exception):
    def __init__(self, stage: str, error: BaseException | str):
        super().__init__(stage)
        self.stage = stage
        self.error = error


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def root_cause(error: BaseException) -> BaseException:
    """The innermost explicitly chained cause (``raise ... from``). Exporters wrap the real
    error in a generic per-stage message; the cause is what tells failures apart, and it reads
    the same whichever exporter wrapped it."""
    seen = {id(error)}
    while error.__cause__ is not None and id(error.__cause__) not in seen:
        error = error.__cause__
        seen.add(id(error))
    return error


def signature_of(error: BaseException | str) -> str:
    """A normalised error signature: ``reports.normalise_error`` of the root cause, or for an
    unsupported-op error, of the ops it lists (its message starts with a count only)."""
    from reports import normalise_error

    if isinstance(error, BaseException):
        unsupported = getattr(error, "unsupported", None)
        if unsupported and isinstance(unsupported, list):
            targets = sorted(
                {str(u.get("target", u)) if isinstance(u, dict) else str(u) for u in unsupported}
            )
            return f"{type(error).__name__}: no translation for {', '.join(targets)}"[:200]
        error = root_cause(error)
        return _ANSI.sub(
            "", normalise_error(f"{type(error).__name__}: {_ANSI.sub('', str(error))}")
        )
    return normalise_error(_ANSI.sub("", error))


def error_text(error: BaseException | str) -> str:
    """The error as recorded in a row: the root cause, then the exception that wrapped it."""
    if isinstance(error, BaseException):
        text = "".join(traceback.format_exception_only(type(error), error)).strip()
        cause = root_cause(error)
        if cause is not error:
            cause_text = "".join(traceback.format_exception_only(type(cause), cause)).strip()
            # The cause first: a long wrapper message must not truncate it away.
            text = f"{cause_text}\n[raised as] {text}"
    else:
        text = str(error)
    text = _ANSI.sub("", text)
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


def _record_failure(outcome, failure: _StageFailed) -> None:
    """A stage's failure as the outcome: ``fail``, or ``crash`` with an ``oom:`` signature when
    the case ran out of the memory its process may use (the harness's per-case limit), which
    says nothing about the exporter's correctness and must not read as a wrong result."""
    error = failure.error
    out_of_memory = isinstance(error, BaseException) and isinstance(root_cause(error), MemoryError)
    outcome.status = "crash" if out_of_memory else "fail"
    outcome.stage = failure.stage
    outcome.error = error_text(error)
    outcome.error_signature = signature_of(error)
    if out_of_memory:
        outcome.error_signature = f"oom: {outcome.error_signature}"


def run_op_case(
    case: OpCase,
    scratch: Path,
    *,
    announce: Callable[[str], None] = lambda stage: None,
    tolerances_path: str | None = None,
) -> CaseOutcome:
    """Run one case, writing its artifacts into ``scratch`` (replaced) as soon as they exist."""
    from exporter.diagnostics.compare import load_policy

    policy = load_policy(tolerances_path or OP_TOLERANCES_PATH)
    outcome = CaseOutcome(status="pass")
    # CPU seconds, unlike wall time, stay meaningful on a loaded machine: the run budget uses them.
    cpu_started = time.process_time()
    try:
        _run(case, scratch, announce, policy, outcome)
    except _StageFailed as failure:
        _record_failure(outcome, failure)
    except _Skip as skip:
        outcome.status = "skip"
        outcome.error = str(skip)
    outcome.extra["cpu_s"] = round(time.process_time() - cpu_started, 4)
    return outcome


class _Skip(Exception):
    """The case cannot be judged (invalid sample, nothing dynamic); not a failure."""


def _run(case: OpCase, scratch: Path, announce, policy, outcome: CaseOutcome) -> None:
    import torch

    from conformance import exporters, shapes
    from conformance.flat_io import to_numpy
    from conformance.modules import clone_tensors
    from conformance.repro import update_meta, write_artifacts
    from conformance.session import Session
    from exporter.diagnostics import second_shape
    from exporter.diagnostics.compare import ELEMENT, compare_outputs, max_or_none

    torch.manual_seed(case.seed)
    module, inputs, facts, shape_only, planted = _build(case, policy)
    outcome.extra["sample"] = facts
    tolerance = policy.tolerance(case.op, case.dtype)
    outcome.rtol, outcome.atol = tolerance.rtol, tolerance.atol
    sign_invariant = policy.sign_invariant(case.op)
    outcome.extra["tolerance_source"] = tolerance.source
    if shape_only:
        outcome.extra["shape_only"] = True
    dynamic = case.shapes == "dynamic"
    if dynamic and not second_shape.has_dynamic_dims(inputs):
        raise _Skip("dynamic: no input dimension >= 2 to make dynamic (same as static)")

    expected = _eager(module, inputs, case.seed, "the sample")

    inputs2 = expected2 = grown = None
    second_shape_note = None
    if dynamic:
        inputs2, expected2, grown, second_shape_note = _second_shape(
            module, inputs, expected, case.seed, outcome
        )

    # Artifacts go to disk before the export, so that even an export that crashes the process
    # leaves its inputs behind for the repro directory.
    input_names = exporters.input_names_for(inputs)
    feeds = {name: to_numpy(t) for name, t in zip(input_names, inputs)}
    expected_np = [to_numpy(t) for t in expected]
    feeds2 = expected2_np = None
    if inputs2 is not None:
        feeds2 = {name: to_numpy(t) for name, t in zip(input_names, inputs2)}
        expected2_np = [to_numpy(t) for t in expected2]
    write_artifacts(
        scratch,
        meta={
            "id": case.id,
            "provider": case.provider,
            "rule": ELEMENT,
            "rtol": tolerance.rtol,
            "atol": tolerance.atol,
            "ort_optimization": "disable_all",
            "rerun": f"python -m conformance repro '{case.id}'",
            "shape_only": shape_only,
            "sign_invariant": sign_invariant,
            "sample": facts,
        },
        feeds=feeds,
        expected=expected_np,
        feeds2=feeds2,
        expected2=expected2_np,
    )

    announce("export")
    started = time.perf_counter()
    try:
        exported = _export(case, module, clone_tensors(inputs), dynamic, planted)
    except Exception as exc:
        raise _StageFailed("export", exc) from exc
    finally:
        outcome.export_s = time.perf_counter() - started
    model = exported.model
    outcome.node_count = len(model.graph.node)
    outcome.extra["model_opset"] = _default_domain_opset(model)
    (scratch / "model.onnx").write_bytes(model.SerializeToString())

    session = _check_and_load(model, lambda: Session(model, case.provider), announce, outcome)

    announce("run")
    fault = planted_cases.runtime_fault(planted)
    started = time.perf_counter()
    try:
        if fault is not None:
            fault()
        actual = session.run(feeds)
    except Exception as exc:
        raise _StageFailed("run", exc) from exc
    outcome.run_s = time.perf_counter() - started

    announce("compare")
    compare = functools.partial(
        compare_outputs,
        rtol=tolerance.rtol,
        atol=tolerance.atol,
        shape_only=shape_only,
        sign_invariant=sign_invariant,
    )
    result = compare(expected_np, actual)
    outcome.max_abs, outcome.max_rel = result.max_abs, result.max_rel
    if not result.ok:
        raise _StageFailed("compare", result.message)

    if not dynamic:
        return
    specialised = shapes.specialised_inputs(session.input_shapes, input_names, inputs)
    if specialised:
        outcome.extra["specialised_dims"] = specialised
    if inputs2 is None:
        update_meta(scratch, second_shape=second_shape_note)
        raise _Skip(f"second shape: {second_shape_note}")

    announce("second-shape")
    # Only the dims the second shape grows must be dynamic: a plan that grows fewer dims was
    # chosen because eager itself ties the others to a fixed size.
    specialised = shapes.specialised_inputs(session.input_shapes, input_names, inputs, grown)

    def record(result2) -> None:
        outcome.max_abs = max_or_none(outcome.max_abs, result2.max_abs)
        outcome.max_rel = max_or_none(outcome.max_rel, result2.max_rel)

    _run_second_inputs(
        session, feeds2, expected2_np, specialised, compare, record, outcome, "second shape"
    )


def _second_shape(module, inputs, expected, seed: int, outcome: CaseOutcome):
    """The second input set: the first growth plan (``second_shape.growth_plans``) and delta for which
    eager accepts the inputs and returns outputs of the same count and ranks (a graph has a
    fixed number of outputs, so a shape that changes it can never match). Returns the inputs,
    eager's outputs, the grown ``(input, dim)`` pairs, and otherwise why no plan worked."""
    import torch

    from exporter.diagnostics import second_shape

    note = None
    ranks = _ranks(expected)
    for sizes in second_shape.growth_plans(inputs):
        for delta in second_shape.SECOND_SHAPE_DELTAS:
            generator = torch.Generator().manual_seed(seed)
            candidate = second_shape.grown_inputs(inputs, delta, generator, sizes)
            try:
                expected2 = _eager(module, candidate, seed, "the second shape")
            except _Skip as rejected:
                note = note or str(rejected)
                continue
            if _ranks(expected2) != ranks:
                note = note or (
                    f"eager returns {len(expected2)} outputs at the second shape, "
                    f"{len(expected)} at the first: the output count depends on a dynamic size"
                )
                continue
            outcome.extra["second_shape_delta"] = delta
            if sizes is not None:
                outcome.extra["second_shape_grows_sizes"] = sorted(sizes)
            return candidate, expected2, second_shape.grown_dims(inputs, sizes), None
    return None, None, None, note


def _run_second_inputs(
    session, feeds2, expected2, specialised, compare, record, outcome: CaseOutcome, what: str
) -> None:
    """The second-shape stage after its inputs are built, shared by op and model cases: a
    dimension asked to be dynamic but fixed in the ONNX model fails it before running; ``what``
    names the second inputs in messages ("second shape" for ops, "second inputs" for models)."""
    from conformance.flat_io import shapes_text

    if specialised:
        feeds_phrase = (
            "the second shape feeds" if what == "second shape" else "the second inputs are"
        )
        raise _StageFailed(
            "second-shape",
            "export specialised dimension(s) asked to be dynamic: "
            + "; ".join(specialised)
            + f"; {feeds_phrase} {shapes_text(feeds2)}",
        )
    started = time.perf_counter()
    try:
        actual2 = session.run(feeds2)
    except Exception as exc:
        raise _StageFailed("second-shape", exc) from exc
    outcome.run_s += time.perf_counter() - started
    result2 = compare(expected2, actual2)
    record(result2)
    if not result2.ok:
        raise _StageFailed("second-shape", f"{result2.message} ({what}: {shapes_text(feeds2)})")


def _default_domain_opset(model) -> int | None:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)


def _check_and_load(model, load: Callable[[], Any], announce, outcome: CaseOutcome):
    """The checker and load stages, shared by op and model cases: ``model`` is a proto or a
    file path (for models with external data); ``load()`` opens the session."""
    import onnx

    announce("checker")
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as exc:
        raise _StageFailed("checker", exc) from exc

    announce("load")
    started = time.perf_counter()
    try:
        session = load()
    except Exception as exc:
        raise _StageFailed("load", exc) from exc
    outcome.session_create_s = time.perf_counter() - started
    return session


def _ranks(outputs) -> list:
    return [t.dim() if hasattr(t, "dim") else type(t).__name__ for t in outputs]


def _build(case: OpCase, policy):
    """(module, inputs, sample facts, shape_only, planted name) for a case."""
    planted = planted_cases.planted_name(case.op)
    if planted is not None:
        module, inputs = planted_cases.build_planted(planted)
        facts = {"index": 0, "signature": "float32[3,4]", "max_ndim": 2, "planted": planted}
        return module, inputs, facts, False, planted
    from conformance.opinfo_cases import build_op_call

    try:
        call = build_op_call(case.op, case.sample, case.dtype)
    except LookupError as exc:
        raise _Skip(str(exc)) from exc
    shape_only = call.nondeterministic or policy.is_shape_only(case.op)
    return call.module, call.inputs, call.facts, shape_only, None


def _eager(module, inputs: tuple, seed: int, what: str) -> tuple:
    import torch

    from conformance.modules import clone_tensors

    torch.manual_seed(seed)
    try:
        with torch.no_grad():
            return module(*clone_tensors(inputs))
    except Exception as exc:
        raise _Skip(
            f"eager rejects {what}: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
            if str(exc)
            else f"eager rejects {what}: {type(exc).__name__}"
        ) from exc


def _export(case: OpCase, module, inputs: tuple, dynamic: bool, planted: str | None):
    from conformance import exporters

    if planted is not None:
        return planted_cases.fake_export(planted, inputs, dynamic=dynamic, opset=case.opset)
    return exporters.export_case(case.exporter, module, inputs, dynamic=dynamic, opset=case.opset)


# --------------------------------------------------------------------------- model cases

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
        _run_model(key, scratch, announce, outcome)
    except _StageFailed as failure:
        _record_failure(outcome, failure)
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


def _run_model(key: ModelCaseId, scratch: Path, announce, outcome: ModelOutcome) -> None:
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
        raise _StageFailed("export", _setup_error("building the model case", exc)) from exc
    if key.dtype == "f16":
        module = module.to(torch.float16)
        args, kwargs = flat_io.cast_floats((args, kwargs), torch.float16)
        if second is not None:
            second = flat_io.cast_floats(second, torch.float16)
    expected = _eager_model(module, args, kwargs, "the example inputs")
    expected2 = _eager_model(module, *second, "the second inputs") if second is not None else None
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
        raise _StageFailed("export", exc) from exc
    finally:
        outcome.export_s = time.perf_counter() - started
    header = onnx.load(str(path), load_external_data=False)
    outcome.node_count = len(header.graph.node)
    outcome.extra["model_opset"] = _default_domain_opset(header)
    del header

    session = _check_and_load(
        str(path), lambda: ModelSession(path, key.provider), announce, outcome
    )

    announce("run")
    missing = session.missing_inputs(feeds)
    if missing:
        raise _StageFailed(
            "run",
            f"the ONNX model declares inputs {missing} that are not among the model's "
            f"flattened inputs {list(feeds)} (the exporter ignored input_names)",
        )
    started = time.perf_counter()
    try:
        actual = session.run(feeds)
    except Exception as exc:
        raise _StageFailed("run", exc) from exc
    outcome.run_s = time.perf_counter() - started
    try:
        latency = session.latency_ms(feeds)
        if latency is not None:
            outcome.latency_ms, outcome.extra["latency_wall_ms"] = latency
    except Exception as exc:  # noqa: BLE001 - it ran once already; timing is a by-product
        outcome.extra["latency_error"] = error_text(exc)

    announce("compare")

    def compare(expected, actual):
        if case.compare:
            return _compare_with(case.compare, expected, actual)
        return compare_outputs(
            expected,
            actual,
            rtol=rtol,
            atol=atol,
            rule=SCALE,
            declared_shapes=session.output_shapes,
        )

    result = compare(expected_np, actual)
    _record_model_result(outcome, result)
    if not result.ok:
        raise _StageFailed("compare", result.message)
    if case.greedy_prompt is not None and key.dynamic and key.dtype == "f32":
        _check_greedy(case, module, session, outcome)

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
    _run_second_inputs(
        session,
        feeds2,
        expected2_np,
        specialised,
        compare,
        lambda result2: _record_model_result(outcome, result2),
        outcome,
        "second inputs",
    )


def _check_greedy(case, module, session, outcome) -> None:
    """A decoder's 8 greedy tokens driven through the graph (prefill on an empty cache, then
    decodes on the cache the graph returns) must equal eager's."""
    import torch

    from conformance import flat_io
    from exporter.diagnostics.generation import check_greedy

    def run_graph(**inputs):
        flat = flat_io.flat_inputs(module, (), inputs, case.dynamic_shapes)
        return [torch.from_numpy(out) for out in session.run(flat_io.feeds(flat))]

    try:
        check = check_greedy(module, run_graph, **case.greedy_prompt())
    except Exception as exc:
        raise _StageFailed("compare", f"greedy generation through the graph: {exc}") from exc
    outcome.extra["greedy_tokens"] = check.onnx.tolist()
    if check.problem:
        raise _StageFailed("compare", check.problem)


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


def _record_model_result(outcome: ModelOutcome, result) -> None:
    from exporter.diagnostics.compare import max_or_none

    outcome.max_abs = max_or_none(outcome.max_abs, result.max_abs)
    outcome.max_rel = max_or_none(outcome.max_rel, result.max_rel)
    scale = max_or_none(outcome.extra.get("max_rel_scale"), result.max_rel_scale)
    if scale is not None:
        outcome.extra["max_rel_scale"] = scale


def _eager_model(module, args: tuple, kwargs: dict, what: str) -> Any:
    """Eager outputs on a copy of the module and of the inputs: a model that mutates buffers or
    its inputs must not change what the exporter sees."""
    import torch

    from conformance.flat_io import clone_tree

    torch.manual_seed(0)
    try:
        with torch.no_grad():
            return copy.deepcopy(module)(*clone_tree(args), **clone_tree(kwargs))
    except Exception as exc:
        raise _StageFailed("export", _setup_error(f"running eager at {what}", exc)) from exc


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
