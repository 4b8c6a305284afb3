"""``verify=True``: does the ONNX model compute what the user's eager module computes?

Stages (``exporter.stages``), each recorded into ``ExportRecord.status``: ``checker`` (the real
``onnx.checker.check_model(full_check=True)``), ``load``, ``run``, ``compare`` (values,
shapes and dtypes against the EAGER module on the example inputs) and ``second-shape``
(the same on generated inputs where every dynamic dimension has another size). When outputs
diverge, :mod:`exporter.diagnostics.bisect` names the first divergent FX node.

The reference is the user's module rather than the exported program, so that capture and
decomposition bugs show too; the second shape is what catches silently specialised dimensions.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import onnx_ir as ir
import torch
from torch.utils import _pytree as pytree

from torch_onnx_conformance.exporter._errors import OnnxCheckerError, OnnxVerificationError
from torch_onnx_conformance.exporter._record import ExportRecord
from torch_onnx_conformance.exporter.diagnostics.compare import (
    ArrayComparison,
    Comparison,
    compare_arrays,
    max_or_none,
    resolve_tolerance,
)
from torch_onnx_conformance.exporter.diagnostics.second_shape import (
    SECOND_SHAPE_DELTAS,
    grow_tensor,
    plan_second_shape,
    requested_dynamic_axes,
    tensor_leaf_positions,
)
from torch_onnx_conformance.exporter.stages import Stage


class OnnxVerificationWarning(UserWarning):
    """``verify=True`` found the ONNX model disagreeing with the eager module."""


#: What each run's ``Comparison.label`` says its inputs were.
EXAMPLE_INPUTS = "example inputs"
SECOND_SHAPE_INPUTS = "second shape"


@dataclasses.dataclass
class FailingCase:
    """Inputs and expected outputs of the runs, kept for a repro directory."""

    feeds: dict[str, np.ndarray]
    expected: list[np.ndarray]
    feeds2: dict[str, np.ndarray] | None = None
    expected2: list[np.ndarray] | None = None


@dataclasses.dataclass
class VerificationResult:
    reference: str
    rtol: float | None
    atol: float | None
    checker: str = "not run"  # "ok" or the checker's message
    ort_load_error: str | None = None
    #: One comparison per set of inputs: the example inputs, then the second shape when it ran.
    runs: list[Comparison] = dataclasses.field(default_factory=list)
    #: Dynamic axes asked for in dynamic_shapes that the ONNX model has fixed.
    specialised: list[str] = dataclasses.field(default_factory=list)
    #: Why a stage was skipped, by stage name.
    skipped: dict[str, str] = dataclasses.field(default_factory=dict)
    #: What the second-shape inputs changed: "x dim 0: 2 -> 3".
    changed_dims: list[str] = dataclasses.field(default_factory=list)
    bisection: Any = None  # bisect.BisectionResult
    bisection_error: str | None = None
    repro_dir: Any = None  # Path, set when a repro directory was written
    case: FailingCase | None = dataclasses.field(default=None, repr=False)
    #: (args, kwargs) of the second-shape run, for bisecting a failure there.
    second_inputs: Any = dataclasses.field(default=None, repr=False)
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def checker_ok(self) -> bool:
        return self.checker == "ok"

    @property
    def outputs_ok(self) -> bool:
        return (
            self.ort_load_error is None
            and not self.specialised
            and all(run.ok for run in self.runs)
        )

    @property
    def ok(self) -> bool:
        return self.checker_ok and self.outputs_ok

    def problems(self) -> list[str]:
        found = []
        if self.checker not in ("ok", "not run"):
            found.append(f"onnx.checker: {self.checker}")
        if self.ort_load_error:
            found.append(f"onnxruntime could not load the model: {self.ort_load_error}")
        found.extend(f"dynamic axis specialised: {s}" for s in self.specialised)
        for run in self.runs:
            found.extend(f"{run.label} ({run.shapes_text()}): {p}" for p in run.problems)
        return found

    def summary(self) -> str:
        if self.ok:
            runs = "; ".join(f"{r.label} ({r.shapes_text()})" for r in self.runs)
            return f"ONNX model matches {self.reference} on {runs}"
        lines = [f"ONNX model does not match {self.reference}:"]
        lines.extend(f"  - {p}" for p in self.problems())
        if self.bisection is not None:
            lines.append("bisection: " + self.bisection.summary().replace("\n", "\n  "))
        elif self.bisection_error:
            lines.append(f"bisection failed: {self.bisection_error}")
        return "\n".join(lines)


# ------------------------------------------------------------------------------ comparison
def compare_output(
    index: int,
    name: str,
    expected: np.ndarray,
    actual: np.ndarray,
    *,
    rtol: float | None,
    atol: float | None,
) -> ArrayComparison:
    """Shape, dtype and values of one output against its expected array (``rtol``/``atol``
    default by the expected dtype)."""
    expected, actual = np.asarray(expected), np.asarray(actual)
    e_dtype, a_dtype = str(expected.dtype), str(actual.dtype)
    r, a = resolve_tolerance("export", e_dtype, rtol, atol)
    values = compare_arrays(expected, actual, rtol=r, atol=a, histogram=True)
    problems = [f"dtype {a_dtype} != expected {e_dtype}"] if e_dtype != a_dtype else []
    if not values.ok:
        problems.append(values.message)
    return dataclasses.replace(
        values,
        ok=not problems,
        message="; ".join(problems) if problems else values.message,
        total=int(expected.size),
        index=index,
        name=name,
        expected_shape=tuple(expected.shape),
        actual_shape=tuple(actual.shape),
        expected_dtype=e_dtype,
        actual_dtype=a_dtype,
        rtol=r,
        atol=a,
    )


# ---------------------------------------------------------------------------- the reference
def _eager_outputs(
    reference: Any,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    program: torch.export.ExportedProgram | None,
) -> list[np.ndarray]:
    """Run the reference on copies of the inputs and flatten its outputs like the ONNX graph."""
    from torch_onnx_conformance.exporter._dtypes import to_numpy as _to_numpy

    args_copy, kwargs_copy = pytree.tree_map_only(
        torch.Tensor, torch.clone, (tuple(args), dict(kwargs))
    )
    buffers = _snapshot_buffers(reference)
    try:
        with torch.no_grad():
            out = reference(*args_copy, **kwargs_copy)
    finally:
        _restore_buffers(reference, buffers)
    leaves = pytree.tree_leaves(out)
    if program is not None:
        from torch.export import graph_signature as gs

        specs = [
            s for s in program.graph_signature.output_specs if s.kind == gs.OutputKind.USER_OUTPUT
        ]
        if len(specs) == len(leaves):
            # Constant outputs (None, Python numbers) do not become ONNX graph outputs.
            leaves = [
                leaf
                for leaf, s in zip(leaves, specs)
                if not isinstance(s.arg, gs.ConstantArgument) and leaf is not None
            ]
    result = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            leaf = leaf.detach()
            result.append(_to_numpy(torch.view_as_real(leaf) if leaf.is_complex() else leaf))
        elif isinstance(leaf, bool):  # SymBool outputs: a 0-d bool in ONNX
            result.append(np.asarray(leaf, dtype=np.bool_))
        elif isinstance(leaf, int):  # SymInt outputs: a 0-d int64 in ONNX
            result.append(np.asarray(leaf, dtype=np.int64))
        elif isinstance(leaf, float):
            result.append(np.asarray(leaf, dtype=np.float32))
    return result


def _snapshot_buffers(module: Any) -> dict[str, torch.Tensor]:
    """Buffers before an eager run: verifying must not change the user's model."""
    if not isinstance(module, torch.nn.Module):
        return {}
    return {name: b.detach().clone() for name, b in module.named_buffers()}


def _restore_buffers(module: Any, saved: dict[str, torch.Tensor]) -> None:
    if not saved:
        return
    with torch.no_grad():
        for name, b in module.named_buffers():
            if name in saved and b.shape == saved[name].shape:
                b.copy_(saved[name])


# --------------------------------------------------------------------------- onnx.checker
def run_checker(proto_or_model: Any) -> str:
    """'ok', or the message of ``onnx.checker.check_model(full_check=True)``."""
    import os
    import tempfile

    import onnx

    from torch_onnx_conformance.exporter._program import fits_one_protobuf

    try:
        if isinstance(proto_or_model, ir.Model) and not fits_one_protobuf(proto_or_model):
            # Over protobuf's 2 GiB limit: the checker reads the model from disk instead.
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "model.onnx")
                ir.save(proto_or_model, path, external_data="model.onnx.data")
                onnx.checker.check_model(path, full_check=True)
        else:
            proto = proto_or_model
            if isinstance(proto, ir.Model):
                proto = ir.serde.serialize_model(proto)
            onnx.checker.check_model(proto, full_check=True)
    except Exception as exc:  # noqa: BLE001 - every checker complaint is a finding
        return f"{type(exc).__name__}: {str(exc).strip()}"
    return "ok"


# ------------------------------------------------------------------------------ the stages
@dataclasses.dataclass
class _Verify:
    """One ``verify_program`` call: what its stages share."""

    program: Any
    eager_model: Any
    reference: Any
    args: tuple
    kwargs: dict[str, Any]
    dynamic_shapes: Any
    record: ExportRecord
    result: VerificationResult

    @contextlib.contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        """Add the block's time to the record's and the result's timing of ``stage``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            timings, seconds = self.record.timings, self.result.seconds
            timings[stage] = timings.get(stage, 0.0) + elapsed
            seconds[stage] = seconds.get(stage, 0.0) + elapsed

    def skip(self, stages: Sequence[Stage], reason: str) -> None:
        for stage in stages:
            self.record.status[stage] = "skipped"
            self.result.skipped[stage] = reason


def _start(
    program: Any,
    eager_model: Any,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    dynamic_shapes: Any,
    record: ExportRecord | None,
    rtol: float | None,
    atol: float | None,
) -> _Verify:
    """The reference to compare with and an empty result, attached to the program and record.
    Without ``eager_model`` the reference is the exported program's module, on its example
    inputs when none are given."""
    record = record if record is not None else getattr(program, "record", None)
    # Without a record (a program built by hand) the statuses and errors are thrown away.
    record = record if record is not None else ExportRecord()
    source_program = record.captured_program or program.exported_program
    if eager_model is not None:
        reference, reference_name = eager_model, "the eager module"
    elif source_program is not None:
        reference = source_program.module()
        reference_name = (
            "exported_program.module() (the model was an ExportedProgram, so "
            "there is no eager module to compare with)"
        )
        if not args and not kwargs and source_program.example_inputs is not None:
            args, kwargs = source_program.example_inputs
    else:
        raise ValueError("verify needs the eager module or the ONNXProgram's exported_program")
    result = VerificationResult(reference=reference_name, rtol=rtol, atol=atol)
    program.verification = record.verification = result
    return _Verify(
        program,
        eager_model,
        reference,
        tuple(args),
        dict(kwargs or {}),
        dynamic_shapes,
        record,
        result,
    )


def verify_program(
    program: Any,
    eager_model: Any,
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    *,
    dynamic_shapes: Any = None,
    record: ExportRecord | None = None,
    strict: bool = False,
    rtol: float | None = None,
    atol: float | None = None,
    registry: Any = None,
    bisect_on_mismatch: bool = True,
) -> VerificationResult:
    """Check, load, run and compare ``program`` with ``eager_model``; see the module docstring.

    ``rtol``/``atol`` default per output dtype (``diagnostics.compare.TOLERANCES``). With
    ``eager_model=None`` (the export started from an ExportedProgram) the reference is
    ``exported_program.module()``.
    Warns with :class:`OnnxVerificationWarning` on any problem; ``strict=True`` raises
    :class:`OnnxVerificationError` (or :class:`OnnxCheckerError` when only the checker failed).
    """
    v = _start(program, eager_model, args, kwargs or {}, dynamic_shapes, record, rtol, atol)
    result = v.result
    _checker(v)
    expected = _reference_outputs(v)
    if expected is None:
        message = f"verify could not run: {result.skipped[Stage.COMPARE]}"
        if strict:
            raise OnnxVerificationError(message)
        warnings.warn(message, OnnxVerificationWarning, stacklevel=3)
        return result
    if _load(v):
        first, actual = _run(v)
        if actual is not None:
            _compare(v, first, expected, actual)
            _second_shape_stage(v)
    if not result.outputs_ok and bisect_on_mismatch and result.ort_load_error is None:
        with v.timed("bisection"):
            _bisect_first_failure(v, registry)
    _record_problems(v.record, result)
    if not result.ok:
        message = result.summary()
        if strict:
            if result.outputs_ok:
                raise OnnxCheckerError(message)
            raise OnnxVerificationError(message)
        warnings.warn(message, OnnxVerificationWarning, stacklevel=3)
    return result


def _checker(v: _Verify) -> None:
    """The checker stage: ``onnx.checker`` with ``full_check=True``."""
    with v.timed(Stage.CHECKER):
        v.result.checker = run_checker(v.program.model)
        v.record.status[Stage.CHECKER] = "ok" if v.result.checker_ok else "failed"
    if not v.result.checker_ok:
        v.record.add_error(Stage.CHECKER, OnnxCheckerError(v.result.checker))


def _reference_outputs(v: _Verify) -> list[np.ndarray] | None:
    """The reference's outputs on the example inputs (timed as part of ``compare``); None, with
    every later stage skipped, when the reference raises."""
    with v.timed(Stage.COMPARE):
        try:
            expected = _eager_outputs(v.reference, v.args, v.kwargs, v.program.exported_program)
        except Exception as exc:  # noqa: BLE001 - without a reference there is nothing to compare
            reason = f"the reference raised on the example inputs: {type(exc).__name__}: {exc}"
            v.skip((Stage.LOAD, Stage.RUN, Stage.COMPARE, Stage.SECOND_SHAPE), reason)
            v.record.add_error(Stage.COMPARE, exc)
            return None
    v.result.case = FailingCase(_feeds(v.program, v.args, v.kwargs), expected)
    return expected


def _load(v: _Verify) -> bool:
    """The load stage: an onnxruntime session. False, with the later stages skipped, when
    onnxruntime cannot load the model."""
    with v.timed(Stage.LOAD):
        try:
            v.program.initialize_inference_session()
            v.record.status[Stage.LOAD] = "ok"
        except Exception as exc:  # noqa: BLE001 - recorded and reported, never lost
            v.result.ort_load_error = f"{type(exc).__name__}: {str(exc).strip()}"
            v.record.status[Stage.LOAD] = "failed"
            v.record.add_error(Stage.LOAD, exc)
    if v.result.ort_load_error is None:
        return True
    v.skip((Stage.RUN, Stage.COMPARE, Stage.SECOND_SHAPE), "onnxruntime could not load the model")
    return False


def _run(v: _Verify) -> tuple[Comparison, list[np.ndarray] | None]:
    """The run stage: the model on the example inputs. Its outputs, or None, with compare and
    the second shape skipped, when onnxruntime raised."""
    with v.timed(Stage.RUN):
        first, actual = _run_model(v, v.args, v.kwargs, second_shape=False)
        v.result.runs.append(first)
        v.record.status[Stage.RUN] = "ok" if actual is not None else "failed"
    if actual is None:
        reason = "onnxruntime failed on the example inputs"
        v.skip((Stage.COMPARE, Stage.SECOND_SHAPE), reason)
    return first, actual


def _compare(
    v: _Verify, first: Comparison, expected: list[np.ndarray], actual: list[np.ndarray]
) -> None:
    """The compare stage: each output on the example inputs against the reference's."""
    with v.timed(Stage.COMPARE):
        _compare_outputs(v, first, expected, actual)
        v.record.status[Stage.COMPARE] = "ok" if first.ok else "failed"


def _second_shape_stage(v: _Verify) -> None:
    """The second-shape stage: the same comparison where every dynamic dimension has another
    size. A bug in generating those inputs skips the stage, never fails the export."""
    with v.timed(Stage.SECOND_SHAPE):
        try:
            _second_shape(v)
        except Exception as exc:  # noqa: BLE001 - a verify bug must not fail the export
            v.skip(
                (Stage.SECOND_SHAPE,),
                f"generating the second-shape inputs failed: {type(exc).__name__}: {exc}",
            )


def _second_shape(v: _Verify) -> None:
    """Plan the second shape (``delta`` 1, then 2 when the reference rejects the sizes), grow
    the inputs, run the reference and the model on them and compare."""
    program, result, status = v.program, v.result, v.record.status
    leaves, spec, positions = tensor_leaf_positions(v.args, v.kwargs)
    tensors = [(p, leaves[p]) for p in positions]
    requested = requested_dynamic_axes(v.eager_model, v.args, v.kwargs, v.dynamic_shapes)
    eager_errors = []
    generator = torch.Generator().manual_seed(0)
    for delta in SECOND_SHAPE_DELTAS:
        plan = plan_second_shape(program.model, program.exported_program, tensors, requested, delta)
        if plan is None:
            v.skip(
                (Stage.SECOND_SHAPE,),
                "the ONNX graph's inputs do not line up with the tensor inputs",
            )
            return
        result.specialised = plan.specialised
        if not plan.new_shapes:
            v.skip((Stage.SECOND_SHAPE,), "the model has no dynamic dimensions")
            return
        new_leaves = list(leaves)
        for pos, shape in plan.new_shapes.items():
            new_leaves[pos] = grow_tensor(leaves[pos], shape, generator)
        new_args, new_kwargs = pytree.tree_unflatten(new_leaves, spec)
        try:
            expected = _eager_outputs(v.reference, new_args, new_kwargs, program.exported_program)
        except Exception as exc:  # noqa: BLE001 - the reference rejects this size; try another
            eager_errors.append(f"+{delta}: {type(exc).__name__}: {str(exc).strip()[:300]}")
            continue
        result.changed_dims = plan.changed
        run, actual = _run_model(v, new_args, new_kwargs, second_shape=True)
        if actual is not None:
            _compare_outputs(v, run, expected, actual)
        result.runs.append(run)
        result.case.feeds2 = _feeds(program, new_args, new_kwargs)
        result.case.expected2 = expected
        result.second_inputs = (new_args, new_kwargs)
        status[Stage.SECOND_SHAPE] = "ok" if run.ok and not plan.specialised else "failed"
        return
    # The reference itself cannot run at other sizes.
    reason = "the reference raised at every generated size (" + "; ".join(eager_errors) + ")"
    if result.specialised:
        status[Stage.SECOND_SHAPE] = "failed"
        result.skipped[Stage.SECOND_SHAPE] = (
            reason + ": the model itself does not support other sizes of the requested axes"
        )
    else:
        v.skip((Stage.SECOND_SHAPE,), reason)


# ------------------------------------------------------------------ running and comparing
def _run_onnx(program: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> list[np.ndarray]:
    from torch_onnx_conformance.exporter import _dtypes

    session = program._session
    outputs = _dtypes.run_session(session, program._feeds(session, args, kwargs))
    return [_dtypes.to_numpy(o) for o in outputs]


def _run_model(
    v: _Verify, args: Sequence[Any], kwargs: dict[str, Any], *, second_shape: bool
) -> tuple[Comparison, list[np.ndarray] | None]:
    """Run the ONNX model on one set of inputs: the run's (empty) comparison and the outputs,
    None when onnxruntime raised. The comparison's stage is the one a failure belongs to:
    ``second-shape`` on the second shape, else ``run`` when onnxruntime raised and ``compare``
    otherwise."""
    from torch_onnx_conformance.exporter._program import flatten_inputs

    graph = v.program.model.graph
    input_names = [value.name or f"input_{i}" for i, value in enumerate(graph.inputs)]
    shapes = [tuple(t.shape) for t in flatten_inputs(args, kwargs) if isinstance(t, torch.Tensor)]
    run = Comparison(
        True,
        label=SECOND_SHAPE_INPUTS if second_shape else EXAMPLE_INPUTS,
        input_shapes=list(zip(input_names, shapes)),
        stage=Stage.SECOND_SHAPE if second_shape else Stage.COMPARE,
    )
    try:
        return run, _run_onnx(v.program, args, kwargs)
    except Exception as exc:  # noqa: BLE001 - an onnxruntime failure is the finding
        run.stage = Stage.SECOND_SHAPE if second_shape else Stage.RUN
        run.fail_with([f"onnxruntime failed: {type(exc).__name__}: {str(exc).strip()}"])
        return run, None


def _compare_outputs(
    v: _Verify, run: Comparison, expected: list[np.ndarray], actual: list[np.ndarray]
) -> None:
    """Each output of ``run`` against the reference's (``compare_output``)."""
    names = [o.name or f"output_{i}" for i, o in enumerate(v.program.model.graph.outputs)]
    if len(actual) != len(expected):
        run.fail_with(
            [
                f"output count differs: the reference returns {len(expected)} tensors, "
                f"the ONNX model {len(actual)} ({names})"
            ]
        )
        return
    for i, (want, got) in enumerate(zip(expected, actual)):
        name = names[i] if i < len(names) else f"output_{i}"
        one = compare_output(i, name, want, got, rtol=v.result.rtol, atol=v.result.atol)
        run.outputs.append(one)
        run.add_detail(one.ok, f"output {i} ({name}): {one.message}")
        run.max_abs = max_or_none(run.max_abs, one.max_abs)
        run.max_rel = max_or_none(run.max_rel, one.max_rel)
    run.fail_with([line for line, ok in zip(run.details, run.detail_ok) if not ok])


def _feeds(program: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, np.ndarray]:
    # baked scalars have no graph input: the program skips them the way __call__ does
    return program.feeds(args, kwargs)


# ------------------------------------------------------------------------ after the stages
def _bisect_first_failure(v: _Verify, registry: Any) -> None:
    """Name the first divergent FX node of the first failing run (on its inputs)."""
    from torch_onnx_conformance.exporter.diagnostics import bisect

    program, result, args, kwargs = v.program, v.result, v.args, v.kwargs
    failing = next((r for r in result.runs if not r.ok), None)
    if failing is None or program.exported_program is None:
        return
    if failing.stage == Stage.SECOND_SHAPE:
        args, kwargs = result.second_inputs
        expected = result.case.expected2
    else:
        expected = result.case.expected
    r, a = resolve_tolerance("export", "float32", result.rtol, result.atol)
    try:
        result.bisection = bisect.bisect(
            program, args, kwargs, rtol=r, atol=a, registry=registry, reference_outputs=expected
        )
        result.bisection.inputs = f"{failing.label} {failing.shapes_text()}"
    except Exception as exc:  # noqa: BLE001 - diagnostics must not replace the finding
        result.bisection_error = f"{type(exc).__name__}: {exc}"


def _record_problems(record: ExportRecord, result: VerificationResult) -> None:
    source = None
    if result.bisection is not None and result.bisection.first is not None:
        source = result.bisection.first.source
    found: dict[str, list[str]] = {}
    found.setdefault(Stage.SECOND_SHAPE, []).extend(
        f"dynamic axis specialised: {s}" for s in result.specialised
    )
    for run in result.runs:
        if not run.ok:
            found.setdefault(run.stage, []).extend(run.problems)
    for stage, problems in found.items():
        if problems:
            error = OnnxVerificationError("\n".join(problems))
            error.source = source
            record.add_error(stage, error)
