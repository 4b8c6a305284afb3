"""Running one op case: eager -> export -> onnx.checker -> session -> run -> compare, and for
dynamic cases the same again at a second shape.

``run_op_case`` never raises for a failure of the thing under test: every outcome, including
"the sample is not valid for eager", comes back as a ``CaseOutcome``. It announces each stage
before entering it, so that a parent process can attribute a crash or a hang.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conformance import planted as planted_cases
from conformance.cases import OpCase

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
        outcome.status = "fail"
        outcome.stage = failure.stage
        outcome.error = error_text(failure.error)
        outcome.error_signature = signature_of(failure.error)
    except _Skip as skip:
        outcome.status = "skip"
        outcome.error = str(skip)
    outcome.extra["cpu_s"] = round(time.process_time() - cpu_started, 4)
    return outcome


class _Skip(Exception):
    """The case cannot be judged (invalid sample, nothing dynamic); not a failure."""


def _run(case: OpCase, scratch: Path, announce, policy, outcome: CaseOutcome) -> None:
    import onnx
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
    outcome.extra["model_opset"] = next(
        (o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None
    )
    (scratch / "model.onnx").write_bytes(model.SerializeToString())

    announce("checker")
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as exc:
        raise _StageFailed("checker", exc) from exc

    announce("load")
    started = time.perf_counter()
    try:
        session = Session(model, case.provider)
    except Exception as exc:
        raise _StageFailed("load", exc) from exc
    outcome.session_create_s = time.perf_counter() - started

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
    if specialised:
        raise _StageFailed(
            "second-shape",
            "export specialised dimension(s) asked to be dynamic: "
            + "; ".join(specialised)
            + f"; the second shape feeds {_shapes_text(feeds2)}",
        )
    started = time.perf_counter()
    try:
        actual2 = session.run(feeds2)
    except Exception as exc:
        raise _StageFailed("second-shape", exc) from exc
    outcome.run_s += time.perf_counter() - started
    result2 = compare(expected2_np, actual2)
    outcome.max_abs = max_or_none(outcome.max_abs, result2.max_abs)
    outcome.max_rel = max_or_none(outcome.max_rel, result2.max_rel)
    if not result2.ok:
        raise _StageFailed(
            "second-shape", f"{result2.message} (second shape: {_shapes_text(feeds2)})"
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


def _ranks(outputs) -> list:
    return [t.dim() if hasattr(t, "dim") else type(t).__name__ for t in outputs]


def _shapes_text(feeds: dict) -> str:
    return ", ".join(f"{name}{list(value.shape)}" for name, value in feeds.items())


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
