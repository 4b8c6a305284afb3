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

import dataclasses
import re
import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir
import torch
from torch.utils import _pytree as pytree

from exporter._errors import OnnxCheckerError, OnnxVerificationError
from exporter._record import ExportRecord
from exporter.diagnostics.compare import compare_arrays, resolve_tolerance
from exporter.diagnostics.second_shape import MIN_DYNAMIC_SIZE, SECOND_SHAPE_DELTAS, grow_tensor
from exporter.stages import Stage


class OnnxVerificationWarning(UserWarning):
    """``verify=True`` found the ONNX model disagreeing with the eager module."""


@dataclasses.dataclass
class OutputComparison:
    index: int
    name: str
    ok: bool
    message: str
    expected_shape: tuple[int, ...] | None = None
    actual_shape: tuple[int, ...] | None = None
    expected_dtype: str | None = None
    actual_dtype: str | None = None
    max_abs: float | None = None
    max_rel: float | None = None
    mismatched: int = 0
    total: int = 0
    #: Counts of |actual - expected| per ERROR_BIN_LABELS bucket (finite elements only).
    histogram: list[int] | None = None
    rtol: float = 0.0
    atol: float = 0.0


@dataclasses.dataclass
class RunComparison:
    """The ONNX model against the reference on one set of inputs."""

    label: str  # "example inputs" or "second shape", for display only
    input_shapes: list[tuple[str, tuple[int, ...]]]
    outputs: list[OutputComparison] = dataclasses.field(default_factory=list)
    error: str | None = None  # onnxruntime or the reference raised; or output counts differ
    #: The run on the generated second-shape inputs (else the example inputs).
    second_shape: bool = False
    #: onnxruntime raised, so there are no outputs to compare.
    runtime_failed: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None and all(o.ok for o in self.outputs)

    @property
    def failed_stage(self) -> str | None:
        """The ExportRecord stage this run failed, or None when it passed."""
        if self.ok:
            return None
        if self.second_shape:
            return Stage.SECOND_SHAPE
        return Stage.RUN if self.runtime_failed else Stage.COMPARE

    def shapes_text(self) -> str:
        return ", ".join(f"{n}{list(s)}" for n, s in self.input_shapes) or "no inputs"

    def problems(self) -> list[str]:
        if self.error is not None:
            return [self.error]
        return [f"output {o.index} ({o.name}): {o.message}" for o in self.outputs if not o.ok]


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
    runs: list[RunComparison] = dataclasses.field(default_factory=list)
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
            found.extend(f"{run.label} ({run.shapes_text()}): {p}" for p in run.problems())
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
) -> OutputComparison:
    """Shape, dtype and values of one output against its expected array (``rtol``/``atol``
    default by the expected dtype)."""
    expected, actual = np.asarray(expected), np.asarray(actual)
    e_dtype, a_dtype = str(expected.dtype), str(actual.dtype)
    r, a = resolve_tolerance("export", e_dtype, rtol, atol)
    values = compare_arrays(expected, actual, rtol=r, atol=a, histogram=True)
    result = OutputComparison(
        index=index,
        name=name,
        ok=True,
        message="",
        expected_shape=tuple(expected.shape),
        actual_shape=tuple(actual.shape),
        expected_dtype=e_dtype,
        actual_dtype=a_dtype,
        max_abs=values.max_abs,
        max_rel=values.max_rel,
        mismatched=values.mismatched,
        total=int(expected.size),
        histogram=values.histogram,
        rtol=r,
        atol=a,
    )
    problems = []
    if e_dtype != a_dtype:
        problems.append(f"dtype {a_dtype} != expected {e_dtype}")
    if not values.ok:
        problems.append(values.message)
    result.ok = not problems
    result.message = "; ".join(problems) if problems else values.message
    return result


# ---------------------------------------------------------------------------- the reference
def _eager_outputs(
    reference: Any,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    program: torch.export.ExportedProgram | None,
) -> list[np.ndarray]:
    """Run the reference on copies of the inputs and flatten its outputs like the ONNX graph."""
    from exporter._program import _to_numpy

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


# ------------------------------------------------------------------------- dynamic shapes
def _tensor_leaf_positions(
    args: Sequence[Any], kwargs: dict[str, Any]
) -> tuple[list[Any], Any, list[int]]:
    leaves, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    return leaves, spec, [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]


def requested_dynamic_axes(
    model: Any, args: Sequence[Any], kwargs: dict[str, Any], dynamic_shapes: Any
) -> dict[int, dict[int, str]]:
    """Which (tensor leaf position, axis) dynamic_shapes asks to be dynamic, with a label."""
    if dynamic_shapes is None or model is None:
        return {}
    from exporter._dynamic_shapes import _bind

    leaves, _, _ = _tensor_leaf_positions(args, kwargs)
    position = {id(leaf): i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)}
    found: dict[int, dict[int, str]] = {}

    def label(s: Any) -> str | None:
        if s is None or s == torch.export.Dim.STATIC:
            return None
        if isinstance(s, str):
            return s
        if s == torch.export.Dim.AUTO:
            return "Dim.AUTO"
        if s == torch.export.Dim.DYNAMIC:
            return "Dim.DYNAMIC"
        return getattr(s, "__name__", None) or str(s)

    def walk(spec: Any, value: Any) -> None:
        if spec is None:
            return
        if isinstance(value, torch.Tensor):
            items = (
                spec.items()
                if isinstance(spec, dict)
                else enumerate(spec if isinstance(spec, (list, tuple)) else [])
            )
            for axis, s in items:
                name = label(s)
                if name is not None and isinstance(axis, int) and id(value) in position:
                    found.setdefault(position[id(value)], {})[axis % value.dim()] = name
        elif isinstance(value, dict) and isinstance(spec, dict):
            for k, v in value.items():
                walk(spec.get(k), v)
        elif isinstance(value, (list, tuple)) and isinstance(spec, (list, tuple)):
            for s, v in zip(spec, value):
                walk(s, v)

    try:
        params = _bind(model, tuple(args), dict(kwargs))
    except Exception:  # noqa: BLE001 - export validated this already; nothing to add here
        return {}
    if isinstance(dynamic_shapes, dict):
        for k, v in params.items():
            walk(dynamic_shapes.get(k), v)
    elif isinstance(dynamic_shapes, (list, tuple)):
        for s, v in zip(dynamic_shapes, params.values()):
            walk(s, v)
    return found


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _parse_dim(text: str) -> Any:
    import sympy
    from sympy.parsing.sympy_parser import parse_expr

    local = {n: sympy.Symbol(n, integer=True) for n in _NAME.findall(text)}
    try:
        return parse_expr(text, local_dict=local)
    except Exception:  # noqa: BLE001 - a name sympy cannot read is treated as a bare symbol
        return sympy.Symbol(text, integer=True)


@dataclasses.dataclass
class _Plan:
    new_shapes: dict[int, list[int]]  # tensor leaf position -> new shape
    changed: list[str]
    specialised: list[str]


def _plan_second_shape(
    model: ir.Model,
    program: torch.export.ExportedProgram | None,
    tensors: list[tuple[int, torch.Tensor]],
    requested: dict[int, dict[int, str]],
    delta: int,
) -> _Plan | None:
    """New sizes for every dimension the ONNX graph declares symbolic (dims sharing a name move
    together, expressions follow their symbols) and every requested-dynamic dimension."""
    import sympy

    inputs = list(model.graph.inputs)
    if program is not None:
        from exporter._program import input_plan

        # dynamic scalar inputs are graph inputs too; only tensors have dims to grow
        fed = [entry for entry in input_plan(program) if not entry.baked]
        if len(fed) == len(inputs):
            inputs = [value for value, entry in zip(inputs, fed) if entry.tensor]
    if len(inputs) != len(tensors):
        return None
    ranges = _symbol_ranges(program, [t for _, t in tensors], inputs)
    exprs: dict[tuple[int, int], Any] = {}
    examples: dict[Any, int] = {}
    for (pos, tensor), value in zip(tensors, inputs):
        shape = value.shape
        if shape is None:
            continue
        for axis, dim in enumerate(shape):
            if axis >= tensor.dim():
                continue
            text = getattr(dim, "value", dim)
            if isinstance(text, str):
                expr = _parse_dim(text)
                exprs[(pos, axis)] = expr
                if isinstance(expr, sympy.Symbol):
                    examples.setdefault(expr, int(tensor.shape[axis]))
    # Symbols seen only inside expressions: solve for their example value.
    for (pos, axis), expr in exprs.items():
        for sym in expr.free_symbols - set(examples):
            size = dict(tensors)[pos].shape[axis]
            solutions = [s for s in sympy.solve(sympy.Eq(expr, size), sym) if s.is_integer]
            if solutions:
                examples[sym] = int(solutions[0])
    new_values = {}
    for sym, old in examples.items():
        low, high = ranges.get(str(sym), (0, None))
        if low == high:
            # A range narrowed to the example size by a deferred guard (see
            # _dynamic_shapes.audit_dims): the graph keeps the dim symbolic, so test it.
            low, high = 0, None
        low = max(low, MIN_DYNAMIC_SIZE)
        grown = max(old + delta, low)
        if high is None or grown <= high:
            new_values[sym] = grown
        elif old - delta >= low:
            new_values[sym] = old - delta
    new_shapes: dict[int, list[int]] = {}
    changed, specialised = [], []
    names = {pos: (v.name or f"input {i}") for i, ((pos, _), v) in enumerate(zip(tensors, inputs))}
    for (pos, axis), expr in exprs.items():
        try:
            size = int(expr.xreplace(new_values))
        except TypeError:
            continue  # a symbol we could not give a value: keep the example size
        old = int(dict(tensors)[pos].shape[axis])
        if size != old and size >= 0:
            new_shapes.setdefault(pos, list(dict(tensors)[pos].shape))[axis] = size
            changed.append(f"{names[pos]} dim {axis} ({expr}): {old} -> {size}")
    for pos, axes in requested.items():
        if pos not in names:
            continue
        tensor = dict(tensors)[pos]
        for axis, label in axes.items():
            if (pos, axis) in exprs or axis >= tensor.dim():
                continue
            old = int(tensor.shape[axis])
            specialised.append(
                f"{names[pos]} dim {axis} was requested dynamic ({label}) but the ONNX model "
                f"fixes it to {old}"
            )
            new_shapes.setdefault(pos, list(tensor.shape))[axis] = max(
                old + delta, MIN_DYNAMIC_SIZE
            )
            changed.append(
                f"{names[pos]} dim {axis} ({label}, fixed in ONNX): {old} -> "
                f"{new_shapes[pos][axis]}"
            )
    return _Plan(new_shapes, changed, specialised)


def _symbol_ranges(
    program: torch.export.ExportedProgram | None,
    tensors: list[torch.Tensor],
    inputs: list[ir.Value],
) -> dict[str, tuple[int, int | None]]:
    """ONNX dim name -> (min, max) from torch.export's range constraints."""
    if program is None:
        return {}
    from exporter._dynamic_shapes import user_input_nodes

    user = [n for n in user_input_nodes(program) if isinstance(n.meta.get("val"), torch.Tensor)]
    if len(user) != len(inputs):
        return {}
    ranges = {}
    constraints = {str(k): v for k, v in program.range_constraints.items()}
    for node, value in zip(user, inputs):
        fake = node.meta["val"]
        for axis, dim in enumerate(value.shape or ()):
            name = getattr(dim, "value", dim)
            if not isinstance(name, str) or axis >= fake.dim():
                continue
            size = fake.shape[axis]
            if isinstance(size, torch.SymInt) and size.node.expr.is_Symbol:
                vr = constraints.get(str(size.node.expr))
                if vr is not None:
                    ranges[name] = (_finite_int(vr.lower) or 0, _finite_int(vr.upper))
    return ranges


def _finite_int(bound: Any) -> int | None:
    """A range bound as an int; None for torch's int_oo / sympy infinities."""
    try:
        value = int(bound)
    except (TypeError, ValueError, OverflowError, AttributeError):
        return None
    return value if abs(value) < 2**62 else None


# ------------------------------------------------------------------------------ the stages
def run_checker(proto_or_model: Any) -> str:
    """'ok', or the message of ``onnx.checker.check_model(full_check=True)``."""
    import os
    import tempfile

    import onnx

    from exporter._program import fits_one_protobuf

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


def _run_onnx(program: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> list[np.ndarray]:
    from exporter import _dtypes

    session = program._session
    outputs = _dtypes.run_session(session, program._feeds(session, args, kwargs))
    return [_dtypes.to_numpy(o) for o in outputs]


def _compare_run(
    program: Any,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    expected: list[np.ndarray],
    *,
    second_shape: bool,
    rtol: float | None,
    atol: float | None,
) -> RunComparison:
    from exporter._program import flatten_inputs

    input_names = [v.name or f"input_{i}" for i, v in enumerate(program.model.graph.inputs)]
    shapes = [tuple(t.shape) for t in flatten_inputs(args, kwargs) if isinstance(t, torch.Tensor)]
    label = "second shape" if second_shape else "example inputs"
    run = RunComparison(label, list(zip(input_names, shapes)), second_shape=second_shape)
    try:
        actual = _run_onnx(program, args, kwargs)
    except Exception as exc:  # noqa: BLE001 - an onnxruntime failure is the finding
        run.error = f"onnxruntime failed: {type(exc).__name__}: {str(exc).strip()}"
        run.runtime_failed = True
        return run
    names = [v.name or f"output_{i}" for i, v in enumerate(program.model.graph.outputs)]
    if len(actual) != len(expected):
        run.error = (
            f"output count differs: the reference returns {len(expected)} tensors, "
            f"the ONNX model {len(actual)} ({names})"
        )
    for i, (want, got) in enumerate(zip(expected, actual)):
        run.outputs.append(
            compare_output(
                i, names[i] if i < len(names) else f"output_{i}", want, got, rtol=rtol, atol=atol
            )
        )
    return run


def _feeds(program: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, np.ndarray]:
    # baked scalars have no graph input: the program skips them the way __call__ does
    return program.feeds(args, kwargs)


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
    kwargs = dict(kwargs or {})
    record = record if record is not None else getattr(program, "record", None)
    status: dict[str, str] = record.status if record is not None else {}
    timings: dict[str, float] = record.timings if record is not None else {}
    source_program = getattr(record, "captured_program", None) or program.exported_program
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
            args, kwargs = tuple(args), dict(kwargs or {})
    else:
        raise ValueError("verify needs the eager module or the ONNXProgram's exported_program")
    result = VerificationResult(reference=reference_name, rtol=rtol, atol=atol)
    program.verification = result
    if record is not None:
        record.verification = result

    def timed(stage: str, start: float) -> None:
        elapsed = time.perf_counter() - start
        timings[stage] = timings.get(stage, 0.0) + elapsed
        result.seconds[stage] = result.seconds.get(stage, 0.0) + elapsed

    start = time.perf_counter()
    result.checker = run_checker(program.model)
    status[Stage.CHECKER] = "ok" if result.checker_ok else "failed"
    timed(Stage.CHECKER, start)
    if not result.checker_ok and record is not None:
        record.add_error(Stage.CHECKER, OnnxCheckerError(result.checker))

    start = time.perf_counter()
    try:
        expected = _eager_outputs(reference, args, kwargs, program.exported_program)
    except Exception as exc:  # noqa: BLE001 - without a reference there is nothing to compare
        expected = None
        reason = f"the reference raised on the example inputs: {type(exc).__name__}: {exc}"
        for stage in (Stage.LOAD, Stage.RUN, Stage.COMPARE, Stage.SECOND_SHAPE):
            status[stage] = "skipped"
            result.skipped[stage] = reason
        if record is not None:
            record.add_error(Stage.COMPARE, exc)
    timed(Stage.COMPARE, start)
    if expected is None:
        message = f"verify could not run: {result.skipped[Stage.COMPARE]}"
        if strict:
            raise OnnxVerificationError(message)
        warnings.warn(message, OnnxVerificationWarning, stacklevel=3)
        return result
    result.case = FailingCase(_feeds(program, args, kwargs), expected)

    start = time.perf_counter()
    try:
        program.initialize_inference_session()
        status[Stage.LOAD] = "ok"
    except Exception as exc:  # noqa: BLE001 - recorded and reported, never lost
        result.ort_load_error = f"{type(exc).__name__}: {str(exc).strip()}"
        status[Stage.LOAD] = "failed"
        if record is not None:
            record.add_error(Stage.LOAD, exc)
    timed(Stage.LOAD, start)

    if result.ort_load_error is None:
        start = time.perf_counter()
        first = _compare_run(
            program, args, kwargs, expected, second_shape=False, rtol=rtol, atol=atol
        )
        result.runs.append(first)
        ran = not first.runtime_failed
        status[Stage.RUN] = "ok" if ran else "failed"
        status[Stage.COMPARE] = ("ok" if first.ok else "failed") if ran else "skipped"
        if not ran:
            result.skipped[Stage.COMPARE] = "onnxruntime failed on the example inputs"
        timed(Stage.RUN, start)
        if ran:
            start = time.perf_counter()
            try:
                _second_shape(
                    program,
                    reference,
                    args,
                    kwargs,
                    dynamic_shapes,
                    eager_model,
                    result,
                    status,
                    rtol=rtol,
                    atol=atol,
                )
            except Exception as exc:  # noqa: BLE001 - a verify bug must not fail the export
                status[Stage.SECOND_SHAPE] = "skipped"
                result.skipped[Stage.SECOND_SHAPE] = (
                    f"generating the second-shape inputs failed: {type(exc).__name__}: {exc}"
                )
            timed(Stage.SECOND_SHAPE, start)
        else:
            status[Stage.SECOND_SHAPE] = "skipped"
            result.skipped[Stage.SECOND_SHAPE] = "onnxruntime failed on the example inputs"
    else:
        for stage in (Stage.RUN, Stage.COMPARE, Stage.SECOND_SHAPE):
            status[stage] = "skipped"
            result.skipped[stage] = "onnxruntime could not load the model"

    if not result.outputs_ok and bisect_on_mismatch and result.ort_load_error is None:
        start = time.perf_counter()
        _bisect_first_failure(program, result, args, kwargs, registry, rtol, atol)
        timed("bisection", start)

    if record is not None:
        _record_problems(record, result)
    if not result.ok:
        message = result.summary()
        if strict:
            if result.outputs_ok:
                raise OnnxCheckerError(message)
            raise OnnxVerificationError(message)
        warnings.warn(message, OnnxVerificationWarning, stacklevel=3)
    return result


def _second_shape(
    program: Any,
    reference: Any,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    dynamic_shapes: Any,
    eager_model: Any,
    result: VerificationResult,
    status: dict[str, str],
    *,
    rtol: float | None,
    atol: float | None,
) -> None:
    leaves, spec, positions = _tensor_leaf_positions(args, kwargs)
    tensors = [(p, leaves[p]) for p in positions]
    requested = requested_dynamic_axes(eager_model, args, kwargs, dynamic_shapes)
    eager_errors = []
    generator = torch.Generator().manual_seed(0)
    for delta in SECOND_SHAPE_DELTAS:
        plan = _plan_second_shape(
            program.model, program.exported_program, tensors, requested, delta
        )
        if plan is None:
            status[Stage.SECOND_SHAPE] = "skipped"
            result.skipped[Stage.SECOND_SHAPE] = (
                "the ONNX graph's inputs do not line up with the tensor inputs"
            )
            return
        result.specialised = plan.specialised
        if not plan.new_shapes:
            status[Stage.SECOND_SHAPE] = "skipped"
            result.skipped[Stage.SECOND_SHAPE] = "the model has no dynamic dimensions"
            return
        new_leaves = list(leaves)
        for pos, shape in plan.new_shapes.items():
            new_leaves[pos] = grow_tensor(leaves[pos], shape, generator)
        new_args, new_kwargs = pytree.tree_unflatten(new_leaves, spec)
        try:
            expected = _eager_outputs(reference, new_args, new_kwargs, program.exported_program)
        except Exception as exc:  # noqa: BLE001 - the reference rejects this size; try another
            eager_errors.append(f"+{delta}: {type(exc).__name__}: {str(exc).strip()[:300]}")
            continue
        result.changed_dims = plan.changed
        run = _compare_run(
            program, new_args, new_kwargs, expected, second_shape=True, rtol=rtol, atol=atol
        )
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
        status[Stage.SECOND_SHAPE] = "skipped"
        result.skipped[Stage.SECOND_SHAPE] = reason


def _bisect_first_failure(
    program: Any,
    result: VerificationResult,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    registry: Any,
    rtol: float | None,
    atol: float | None,
) -> None:
    from exporter.diagnostics import bisect

    failing = next((r for r in result.runs if not r.ok), None)
    if failing is None or program.exported_program is None:
        return
    if failing.second_shape:
        args, kwargs = result.second_inputs
        expected = result.case.expected2
    else:
        expected = result.case.expected
    r, a = resolve_tolerance("export", "float32", rtol, atol)
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
        if run.failed_stage is not None:
            found.setdefault(run.failed_stage, []).extend(run.problems())
    for stage, problems in found.items():
        if problems:
            error = OnnxVerificationError("\n".join(problems))
            error.source = source
            record.add_error(stage, error)
