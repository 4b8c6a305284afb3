"""Running one case, op or model, through one loop: eager -> export -> onnx.checker -> session
-> run -> compare, and for dynamic cases the same again at a second shape.

``run_case`` takes any ``conformance.case.Case``; what differs between an OpInfo sample and a zoo
model is in the ``Prepared`` object its ``prepare()`` returns. It never raises for a failure of
the thing under test: every outcome, including "the sample is not valid for eager", comes back as
a ``CaseOutcome`` (a result row). It announces each stage before entering it, so that a parent process can
attribute a crash or a hang. A model case whose eager outputs are near-constant
(``model_zoo.vacuity``) that would otherwise pass is ``vacuous``: a comparison against them
proves nothing.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch_onnx_conformance.conformance.case import (
    Case,
    CaseSetupError,
    Prepared,
    Skip,
    StageFailed,
)
from torch_onnx_conformance.conformance.errors import error_text, root_cause, signature_of
from torch_onnx_conformance.exporter.stages import Stage
from torch_onnx_conformance.reports.rows import CaseResult


class CaseOutcome(CaseResult):
    """A case's result row as the runner fills it: the case's identity, then what running it
    found. Crash and timeout, and the verdict against the expectations, are the parent's."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _record_failure(outcome: CaseOutcome, failure: StageFailed) -> None:
    """A stage's failure as the outcome: ``fail``, or ``crash`` with an ``oom:`` signature when
    the case ran out of the memory its process may use (the harness's per-case limit), which
    says nothing about the exporter's correctness and must not read as a wrong result. A case
    whose own setup failed says so first in its signature."""
    error = failure.error
    out_of_memory = isinstance(error, BaseException) and isinstance(root_cause(error), MemoryError)
    outcome.status = "crash" if out_of_memory else "fail"
    outcome.stage = str(failure.stage)
    outcome.error = error_text(error)
    outcome.error_signature = signature_of(error)
    if out_of_memory:
        outcome.error_signature = f"oom: {outcome.error_signature}"
    elif isinstance(error, CaseSetupError):
        outcome.error_signature = f"{type(error).__name__}: {outcome.error_signature}"


def run_case(
    case: Case, scratch: Path, *, announce: Callable[[str], None] = lambda stage: None
) -> CaseOutcome:
    """Run one case, writing its artifacts into ``scratch`` (replaced) as soon as they exist."""
    outcome = CaseOutcome(**case.row_identity(), status="pass")
    # CPU seconds, unlike wall time, stay meaningful on a loaded machine: the run budget uses them.
    cpu_started = time.process_time()
    prepared = None
    try:
        prepared = case.prepare(outcome)
        _run(prepared, scratch, announce, outcome)
    except StageFailed as failure:
        _record_failure(outcome, failure)
    except Skip as skip:
        outcome.status = "skip"
        outcome.error = str(skip)
    if prepared is not None:
        prepared.conclude(outcome)
    outcome.extra["cpu_s"] = round(time.process_time() - cpu_started, 4)
    return outcome


def _run(prepared: Prepared, scratch: Path, announce, outcome: CaseOutcome) -> None:
    import onnx

    from torch_onnx_conformance.conformance.repro import claim_export, update_meta, write_artifacts

    # Inputs and expected outputs go to disk before the export, so that even an export that
    # kills the process leaves them behind for the repro directory.
    write_artifacts(
        scratch,
        meta=prepared.meta,
        feeds=prepared.feeds,
        expected=prepared.expected,
        feeds2=prepared.feeds2,
        expected2=prepared.expected2,
    )

    announce(Stage.EXPORT)
    started = time.perf_counter()
    try:
        model = prepared.export(scratch / "model.onnx")
    except Exception as exc:
        raise StageFailed(Stage.EXPORT, exc) from exc
    finally:
        outcome.export_s = time.perf_counter() - started
    claim_export(scratch)
    header = (
        model if isinstance(model, onnx.ModelProto) else onnx.load(model, load_external_data=False)
    )
    outcome.node_count = len(header.graph.node)
    outcome.extra["model_opset"] = next(
        (o.version for o in header.opset_import if o.domain in ("", "ai.onnx")), None
    )
    del header

    announce(Stage.CHECKER)
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as exc:
        raise StageFailed(Stage.CHECKER, exc) from exc

    announce(Stage.LOAD)
    started = time.perf_counter()
    try:
        session = prepared.open_session(model)
    except Exception as exc:
        raise StageFailed(Stage.LOAD, exc) from exc
    outcome.session_create_s = time.perf_counter() - started
    if getattr(session, "placement", None):  # CUDA rows: predicted and real placement
        outcome.extra["placement"] = session.placement

    announce(Stage.RUN)
    started = time.perf_counter()
    try:
        prepared.before_run(session, prepared.feeds)
        actual = session.run(prepared.feeds)
    except StageFailed:
        raise
    except Exception as exc:
        raise StageFailed(Stage.RUN, exc) from exc
    outcome.run_s = time.perf_counter() - started
    prepared.after_run(session, prepared.feeds, outcome)

    announce(Stage.COMPARE)
    result = prepared.compare(prepared.expected, actual, session)
    _record_measures(outcome, result)
    if not result.ok:
        raise StageFailed(Stage.COMPARE, result.message)
    prepared.after_compare(session, outcome)

    if not prepared.dynamic:
        return
    specialised = prepared.specialised(session, False)
    if specialised:
        outcome.extra["specialised_dims"] = specialised
    if prepared.feeds2 is None:
        update_meta(scratch, second_shape=prepared.no_second_shape)
        raise Skip(f"second shape: {prepared.no_second_shape}")
    _run_second_shape(prepared, session, announce, outcome)


def _run_second_shape(prepared: Prepared, session, announce, outcome: CaseOutcome) -> None:
    """The second-shape stage: a dimension asked to be dynamic but fixed in the ONNX model fails
    it before running. Only the dims the second shape grows must be dynamic: a plan that grows
    fewer dims was chosen because eager itself ties the others to a fixed size."""
    from torch_onnx_conformance.conformance.flat_io import shapes_text

    announce(Stage.SECOND_SHAPE)
    feeds2, what = prepared.feeds2, prepared.second_what
    specialised = prepared.specialised(session, True)
    if specialised:
        feeds_phrase = "the second shape feeds" if what == "second shape" else f"the {what} are"
        raise StageFailed(
            Stage.SECOND_SHAPE,
            "export specialised dimension(s) asked to be dynamic: "
            + "; ".join(specialised)
            + f"; {feeds_phrase} {shapes_text(feeds2)}",
        )
    started = time.perf_counter()
    try:
        actual2 = session.run(feeds2)
    except Exception as exc:
        raise StageFailed(Stage.SECOND_SHAPE, exc) from exc
    outcome.run_s += time.perf_counter() - started
    result2 = prepared.compare(prepared.expected2, actual2, session)
    _record_measures(outcome, result2)
    if not result2.ok:
        raise StageFailed(Stage.SECOND_SHAPE, f"{result2.message} ({what}: {shapes_text(feeds2)})")


def _record_measures(outcome: CaseOutcome, result) -> None:
    """The worst errors over every comparison of the case."""
    from torch_onnx_conformance.exporter.diagnostics.compare import max_or_none

    outcome.max_abs = max_or_none(outcome.max_abs, result.max_abs)
    outcome.max_rel = max_or_none(outcome.max_rel, result.max_rel)
    scale = max_or_none(outcome.extra.get("max_rel_scale"), result.max_rel_scale)
    if scale is not None:
        outcome.extra["max_rel_scale"] = scale
