"""The export as a list of stages: what ``export()`` runs between checking its arguments
(``exporter._validate``) and verifying, saving and reporting (``exporter._api``).

Read :data:`STEPS` first. Each step names its stage in the one stage vocabulary
(``exporter.stages``) and the function that does it, ``fn(request, state, record)``:

- ``request`` (``_validate.ExportRequest``): the checked arguments, frozen;
- ``state`` (:class:`ExportState`): what the steps before made, each step adding its part;
- ``record`` (``_record.ExportRecord``): what the report and the diagnostics read.

:func:`run` runs each function under ``record.stage(...)``, which times it and marks it ok or
failed (the error recorded); a step that does not apply to the request is marked skipped. What
follows a stage (recording its result, progress lines, warnings) is the step's ``then``, which
runs outside the stage's timing. The last step, ``finish``, is not a stage of the record.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import logging
import warnings
from collections.abc import Callable, Hashable, Mapping
from typing import Any

import onnx_ir as ir
import torch

from torch_onnx_conformance.exporter import (
    _caches,
    _capture,
    _capture_cache,
    _decompose,
    _dynamic_shapes,
    _opset_convert,
    _output_names,
    _passes,
    _translate,
    _translation_reuse,
    _validate,
)
from torch_onnx_conformance.exporter._errors import OnnxExporterError, UnsupportedOpError
from torch_onnx_conformance.exporter._program import ONNXProgram, has_no_data, input_plan
from torch_onnx_conformance.exporter._record import ExportRecord
from torch_onnx_conformance.exporter._validate import ExportRequest
from torch_onnx_conformance.exporter.ops import _opsets
from torch_onnx_conformance.exporter.stages import Stage


@dataclasses.dataclass
class ExportState:
    """What the steps hand on, in the order they make it."""

    #: capture: the model as an ExportedProgram (the model itself when it was one)
    captured: torch.export.ExportedProgram | None = None
    #: capture: a dim declared dynamic was held at its example size, so the ONNX model keeps
    #: no static dims it could contradict
    narrowed: bool = False
    #: decomposition: custom ops whose Python implementation could not be traced, and why
    untraceable: dict[str, str] = dataclasses.field(default_factory=dict)
    #: decomposition: the program translation reads
    decomposed: torch.export.ExportedProgram | None = None
    #: translation: the capture's symbols -> the user's axis names (``AxisNames.symbol_renames``)
    renames: dict[str, str] | None = None
    #: translation: the opset it runs at, a ``TrackedOpset`` when its result is kept for other
    #: opsets (``exporter._translation_reuse``)
    opset: int | None = None
    #: translation: the ONNX model, which optimize and finish change in place
    model: ir.Model | None = None
    #: translation: what export() hands back
    program: ONNXProgram | None = None


StepFn = Callable[[ExportRequest, ExportState, ExportRecord], None]


@dataclasses.dataclass(frozen=True)
class Step:
    #: the record's stage the step runs under; None: not a stage of the record
    stage: Stage | None
    run: StepFn
    #: whether the step does not apply to the request (the stage is then marked skipped)
    skip: Callable[[ExportRequest], bool] | None = None
    #: the note the record takes when the step is skipped
    skip_note: str | None = None
    #: what follows the stage, outside its timing and status, whether it ran or was skipped
    then: StepFn | None = None


def run(
    request: ExportRequest,
    record: ExportRecord,
    reuse: tuple[_capture_cache.CaptureCache, Hashable] | None = None,
) -> ONNXProgram:
    """Run :data:`STEPS` in order; an error propagates from the step that raised it.

    With ``reuse`` (a cache and the caller's key): a capture kept under the key stands for the
    capture and decomposition stages (:data:`CAPTURE_STAGES`), and otherwise what they make is
    kept under it once decomposition succeeded (``exporter._capture_cache``); so is their
    failure, which a later export under the key raises again."""
    state = ExportState()
    steps, signature, entry, choices = STEPS, None, None, None
    if reuse is not None:
        signature = _capture_cache.signature(request)
        kept = reuse[0].get(reuse[1], signature)
        if isinstance(kept, _capture_cache.CaptureFailure):
            _restore_fields(record, kept.record, "capture failure", request)
            raise kept.replay()
        if kept is not None:
            _restore(request, state, record, kept)
            steps = tuple(step for step in STEPS if step.stage not in CAPTURE_STAGES)
            entry = kept
    notes_before, errors_before = len(record.notes), len(record.errors)
    for step in steps:
        if step.stage is Stage.TRANSLATION and entry is not None:
            program = _translation_kept(request, state, record, entry)
            if program is not None:
                return program
        elif step.stage is None:
            choices = _untracked(state)
        try:  # inline, not a helper: a step's warnings count the frames up to the caller
            if step.skip is not None and step.skip(request):
                assert step.stage is not None, "only a stage can be skipped"
                record.status[step.stage.value] = "skipped"
                if step.skip_note:
                    record.notes.append(step.skip_note)
            elif step.stage is None:
                step.run(request, state, record)
            else:
                with record.stage(step.stage.value):
                    step.run(request, state, record)
            if step.then is not None:
                step.then(request, state, record)
        except OnnxExporterError as exc:
            if (
                reuse is not None
                and step.stage in CAPTURE_STAGES
                and _capture_cache.keeps_failure(exc)
            ):
                fields = _stage_fields(record, notes_before, errors_before)
                failure = _capture_cache.copy_error(exc)
                reuse[0].put(reuse[1], _capture_cache.CaptureFailure(failure, fields, signature))
            raise
        if reuse is not None and step.stage is Stage.DECOMPOSITION:
            entry = _kept(state, record, signature, notes_before, errors_before)
            reuse[0].put(reuse[1], entry)
    assert state.program is not None
    if choices is not None:
        depends_on = _translation_depends_on(request, state, record)
        _translation_reuse.keep(entry.translations, choices, depends_on, state.program)
    return state.program


#: The stages a capture kept by ``exporter._capture_cache`` stands for.
CAPTURE_STAGES = (Stage.CAPTURE, Stage.DECOMPOSITION)
#: The stages a translation kept by ``exporter._translation_reuse`` stands for (and finish).
TRANSLATION_STAGES = (Stage.TRANSLATION, Stage.OPTIMIZE)
#: The record's fields those stages set, besides their status, timing, notes and errors.
_CAPTURE_RECORD_FIELDS = (
    "capture_strategy",
    "capture_attempts",
    "dim_audit",
    "decomposition_reason",
    "captured_program",
    "exported_program",
)


def _stage_fields(record: ExportRecord, notes_before: int, errors_before: int) -> dict[str, Any]:
    """What the capture stages put into the record (``_CAPTURE_RECORD_FIELDS``, their status
    and timings, the notes and errors they added), to stand for them in a later export."""
    fields = {name: _own(getattr(record, name)) for name in _CAPTURE_RECORD_FIELDS}
    stages = [stage.value for stage in CAPTURE_STAGES]
    fields["status"] = {name: record.status[name] for name in stages if name in record.status}
    fields["timings"] = {name: record.timings[name] for name in stages if name in record.timings}
    fields["notes"] = list(record.notes[notes_before:])
    fields["errors"] = [dict(error) for error in record.errors[errors_before:]]
    return fields


def _kept(
    state: ExportState, record: ExportRecord, signature: tuple, notes_before: int, errors_before
) -> _capture_cache.Captured:
    """What capture and decomposition made, to stand for them in a later export."""
    return _capture_cache.Captured(
        captured=state.captured,
        decomposed=state.decomposed,
        narrowed=state.narrowed,
        untraceable=dict(state.untraceable),
        record=_stage_fields(record, notes_before, errors_before),
        signature=signature,
        fingerprint=_capture_cache.fingerprint(state.captured, state.decomposed),
    )


def _own(value: Any) -> Any:
    """A list as a copy of its own (the record appends to its lists); anything else, the
    programs included, as it is."""
    return list(value) if isinstance(value, list) else value


def _restore_fields(
    record: ExportRecord, fields: dict[str, Any], what: str, request: ExportRequest
) -> None:
    """The record as the capture stages left it (``_stage_fields``), their timings zero, and a
    note that says so."""
    for name in _CAPTURE_RECORD_FIELDS:
        setattr(record, name, _own(fields[name]))
    record.status.update(fields["status"])
    record.timings.update(dict.fromkeys(fields["timings"], 0.0))
    record.notes.extend(fields["notes"])
    record.errors.extend(dict(error) for error in fields["errors"])
    seconds = sum(fields["timings"].values())
    note = (
        f"{what} reused from an earlier export under the same capture_key ({seconds:.2f} s saved)"
    )
    record.notes.append(note)
    request.say(note)


def _restore(
    request: ExportRequest, state: ExportState, record: ExportRecord, kept: _capture_cache.Captured
) -> None:
    """A kept capture in place of the capture and decomposition stages: the state and record
    they made, their timings zero, the warning capture gave repeated, the dump written."""
    state.captured, state.decomposed = kept.captured, kept.decomposed
    state.narrowed, state.untraceable = kept.narrowed, dict(kept.untraceable)
    _restore_fields(record, kept.record, "capture and decomposition", request)
    message = _dynamic_shapes.specialized_dims_warning(record.dim_audit)
    if message:
        warnings.warn(message, UserWarning, stacklevel=4)
    _dump(request, state, record)


def _translation_kept(
    request: ExportRequest, state: ExportState, record: ExportRecord, entry
) -> ONNXProgram | None:
    """Before translating a kept capture: the program of an export kept at another opset that
    this opset would make alike (``exporter._translation_reuse``), at this opset, standing for
    translation, optimize and finish; otherwise None, and translation tracks its opset, so
    that what it makes is kept in turn."""
    if request.opset < _opsets.MIN_OPSET or request.registry.has_custom():
        return None
    state.renames = request.axis_names.symbol_renames(state.decomposed)
    depends_on = _translation_depends_on(request, state, record)
    kept = _translation_reuse.find(entry.translations, request.opset, depends_on)
    if kept is None:
        _translation_reuse.note_schema_lookups()
        choices = _translation_reuse.OpsetChoices()
        state.opset = _translation_reuse.TrackedOpset(request.opset, choices)
        return None
    for stage in TRANSLATION_STAGES:
        skipped = stage is Stage.OPTIMIZE and _not_optimized(request)
        record.status[stage.value] = "skipped" if skipped else "ok"
        if not skipped:
            record.timings[stage.value] = 0.0
    note = (
        f"translation reused from the export at opset {kept.opset} under the same "
        f"capture_key: every choice it made by the opset is the same at opset {request.opset}"
    )
    record.notes.append(note)
    request.say(note)
    graph_meta = {_translate.FX_VALUES_KEY: dict(kept.fx_values)}
    data = _translation_reuse.copy_at(kept, request.opset)
    return ONNXProgram.from_serialized(data, graph_meta, state.decomposed, record=record)


def _translation_depends_on(
    request: ExportRequest, state: ExportState, record: ExportRecord
) -> tuple:
    """What translation, optimize and finish read besides the capture and the opset."""
    output_names = request.output_names
    return (
        request.metadata,
        request.optimize,
        record.model_class,
        state.narrowed,
        tuple(sorted(state.renames.items())),
        None if request.input_names is None else tuple(request.input_names),
        output_names
        if output_names is None or isinstance(output_names, str)
        else tuple(output_names),
    )


def _untracked(state: ExportState) -> _translation_reuse.OpsetChoices | None:
    """After a tracked translation (and optimize), before finish: the model's opset numbers
    plain again, and the choices to keep its export by, unless it cannot be kept (weights
    without data, whose buffers each export computes, or a tracked number left in it)."""
    if not isinstance(state.opset, _translation_reuse.TrackedOpset):
        return None
    tracked, state.opset = state.opset, None
    clean = _translation_reuse.untrack(state.model)
    if not clean or state.program is None or state.program.meta_weights():
        return None
    return tracked.choices


# Warnings raised by a step's functions point at export()'s caller: the function, run(),
# export(), its caller (stacklevel 4); one more for each function in between.


# ------------------------------------------------------------------------------ capture
def _given_program(request: ExportRequest) -> bool:
    return isinstance(request.model, torch.export.ExportedProgram)


def capture(request: ExportRequest, state: ExportState, record: ExportRecord) -> None:
    """The model as a torch.export.ExportedProgram: the entry of capture, which spans

    - ``exporter._capture``: the strategies tried in order (torch.export non-strict, then
      strict), torch.export's suggested dynamic-shape fixes applied, a failure explained;
    - ``exporter._capture_patches``: rewrites of library code torch.export cannot capture as
      written (torchvision detection), applied while capturing; ``_validate`` resolves which;
    - ``exporter._capture_rewrites``: torch functions whose code reads tensor data, rewritten
      while capturing;
    - ``exporter._dynamic_shapes``: the user's dynamic_shapes in torch.export's form (made by
      ``_validate``) and, after capture, the audit of the dims declared dynamic.
    """
    state.captured, record.capture_strategy = _capture.capture(
        request.model,
        request.args,
        request.kwargs,
        request.capture_shapes,
        attempts=record.capture_attempts,
        patches=request.capture_patches,
        notes=record.notes,
    )


def _captured(request: ExportRequest, state: ExportState, record: ExportRecord) -> None:
    """Audit the captured program's dims, record it, and dump it when asked."""
    if _given_program(request):
        state.captured = request.model
    else:
        seconds = record.timings["capture"]
        request.say(f"captured with {record.capture_strategy} ({seconds:.2f} s)")
        record.dim_audit = _dynamic_shapes.audit_dims(state.captured, request.axis_names.declared)
        state.narrowed = any(a.status == _dynamic_shapes.HELD for a in record.dim_audit)
        message = _dynamic_shapes.specialized_dims_warning(record.dim_audit)
        if message:
            record.notes.append(message)
            warnings.warn(message, UserWarning, stacklevel=4)
    record.captured_program = state.captured
    _dump(request, state, record)


def _dump(request: ExportRequest, state: ExportState, record: ExportRecord) -> None:
    if request.dump_dir is not None:
        stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S-%f")
        record.dumped_program = request.dump_dir / f"onnx_export_{stamp}.pt2"
        torch.export.save(state.captured, record.dumped_program)


# ------------------------------------------------------------------------ decomposition
def decompose(request: ExportRequest, state: ExportState, record: ExportRecord) -> None:
    """The captured program with the ops the op library does not translate decomposed
    (``exporter._decompose``)."""
    state.decomposed, record.decomposition_reason = _decompose.decompose(
        state.captured, request.registry, record.notes, state.untraceable
    )


def _decomposed(request: ExportRequest, state: ExportState, record: ExportRecord) -> None:
    record.exported_program = state.decomposed
    reason = record.decomposition_reason
    request.say(f"decomposition {'ran: ' + reason if reason else 'skipped'}")


# -------------------------------------------------------------------------- translation
def translate(request: ExportRequest, state: ExportState, record: ExportRecord) -> None:
    """The decomposed program as an ONNX model, each FX node through the op library's
    translation (``exporter._translate``); every op without one is named at once."""
    decomposed = state.decomposed
    unsupported = _translate.find_unsupported(decomposed.graph_module, request.registry)
    if unsupported:
        record.unsupported = unsupported
        raise UnsupportedOpError(_unsupported_message(unsupported, state.untraceable), unsupported)
    if state.renames is None:
        state.renames = request.axis_names.symbol_renames(decomposed)
    model = _translate.translate_program(
        decomposed,
        request.registry,
        opset=request.opset if state.opset is None else state.opset,
        metadata=request.metadata,
        names=_translate.SymbolNames(state.renames),
        root_class=record.model_class,
    )
    _passes.finalize(model)
    if state.narrowed:
        _passes.forget_static_dims(model)
    state.model = record.model = model


def _translated(request: ExportRequest, state: ExportState, record: ExportRecord) -> None:
    """Check the model has outputs, wrap it as the program handed back, and say which
    weights it holds no data for."""
    request.say(f"translated to {len(state.model.graph)} ONNX nodes")
    _validate.check_outputs(state.model, state.decomposed)
    state.program = program = ONNXProgram(state.model, state.decomposed, record=record)
    computed = _compute_meta_buffers(request.model, program)
    if computed:
        message = (
            f"computed {len(computed)} non-persistent buffers of the meta-device model on CPU "
            f"with the model's own initialisation ({', '.join(computed)}): checkpoints do not "
            f"hold them"
        )
        record.notes.append(message)
        logging.getLogger("exporter").info(message)
    meta_weights = program.meta_weights()
    if meta_weights:
        message = (
            f"{len(meta_weights)} weights are on the meta device or fake (e.g. {meta_weights[0]}): the "
            f"graph is exported without their data. Call apply_weights(state_dict or "
            f"safetensors path) before running, or save(path, weights=...)."
        )
        record.notes.append(message)
        warnings.warn(message, UserWarning, stacklevel=4)


def _compute_meta_buffers(model: Any, program: ONNXProgram) -> list[str]:
    """Fill the non-persistent buffers that a meta-device model left without data.

    Checkpoints do not hold them (rotary ``inv_freq``): the module computes them in its
    ``__init__``, which on the meta device computed nothing. A model that can initialise one
    module (transformers' ``_init_weights``, the path its own loading takes for them) runs it
    on a CPU copy of each owning module, the buffers first filled with NaN so that only values
    it really wrote are taken. Buffers it does not write stay without data, and
    ``apply_weights`` names them. The user's model is not changed.
    """
    initialise = getattr(model, "_init_weights", None)
    if not isinstance(model, torch.nn.Module) or not callable(initialise):
        return []
    missing = set(program.meta_weights())
    owners: dict[str, list[str]] = {}
    for name, buffer in model.named_buffers():
        module_name, _, attr = name.rpartition(".")
        owner = model.get_submodule(module_name)
        if (
            name in missing
            and has_no_data(buffer)
            and buffer.is_floating_point()
            and attr in owner._non_persistent_buffers_set
        ):
            owners.setdefault(module_name, []).append(attr)
    computed: dict[str, torch.Tensor] = {}
    for module_name, attrs in owners.items():
        try:
            owner = model.get_submodule(module_name)
            # tensors without data are shared, not copied: copying a fake tensor outside its
            # mode corrupts memory, and writing into one changes no data
            shared = {id(t): t for t in (*owner.parameters(), *owner.buffers()) if has_no_data(t)}
            module = copy.deepcopy(owner, memo=shared)
            for attr in attrs:
                meta = module._buffers[attr]
                module._buffers[attr] = torch.full(meta.shape, float("nan"), dtype=meta.dtype)
            with torch.no_grad():
                initialise(module)
        except Exception:  # noqa: BLE001 - what it could not compute stays missing, and is named
            continue
        for attr in attrs:
            value = module._buffers.get(attr)
            if (
                isinstance(value, torch.Tensor)
                and not has_no_data(value)
                and not value.isnan().any()
            ):
                computed[f"{module_name}.{attr}" if module_name else attr] = value
    program.apply_weights(computed, strict=False)
    return list(computed)


def _unsupported_message(
    unsupported: list[dict[str, Any]], untraceable: Mapping[str, str] | None = None
) -> str:
    """Every op without a translation; a custom op whose implementation could not be traced
    says why, with the overload to register a translation for."""
    by_target: dict[str, list[dict[str, Any]]] = {}
    for item in unsupported:
        by_target.setdefault(item["target"], []).append(item)
    from torch_onnx_conformance.exporter.ops import quantized_torchao

    lines = [f"{len(by_target)} ops have no ONNX translation (all of them are listed):"]
    for target, items in by_target.items():
        first = items[0]
        where = f" at {first['source']}" if first.get("source") else ""
        more = f" (+{len(items) - 1} more nodes)" if len(items) > 1 else ""
        lines.append(f"  - {target}: FX node {first['fx_node']}{where}{more}")
        hint = quantized_torchao.torchao_hint(target)
        if hint:
            lines.append(f"    left by {hint}")
        why = (untraceable or {}).get(target)
        if why:
            lines.append(
                f"    custom op {target}: {why}; register a translation for torch.ops.{target}"
            )
    lines.append(
        "Register a translation with custom_translation_table={op_overload: fn} or "
        "exporter.register(op_overload, fn)."
    )
    return "\n".join(lines)


# ----------------------------------------------------------------------------- optimize
def optimize(request: ExportRequest, state: ExportState, record: ExportRecord) -> None:
    """onnxscript's optimizer and our fusions (``exporter._passes``), the weights without data
    kept out of constant folding."""
    with state.program.meta_weights_as_inputs():
        _passes.optimize(state.model)


def _not_optimized(request: ExportRequest) -> bool:
    return not request.optimize


# ------------------------------------------------------------------------------- finish
def finish(request: ExportRequest, state: ExportState, record: ExportRecord) -> None:
    """Name the graph's inputs and outputs, drop the metadata when asked, and, last, convert
    to an opset older than the op library's (ONNX's version converter returns a new model)."""
    model, decomposed = state.model, state.decomposed
    plan = input_plan(decomposed)
    input_names, output_names = request.input_names, request.output_names
    if isinstance(request.model, torch.nn.Module) and input_names is None:
        input_names = _caches.graph_input_names(
            request.model, request.args, request.kwargs, model.graph, plan
        )
    _validate.apply_io_names(model, input_names, output_names, plan)
    if output_names is None:
        _output_names.name_outputs(model, decomposed)
    if not request.metadata:
        _passes.strip_metadata(model)
    state.program.model = _opset_convert.convert_down(model, request.opset)


#: The export, in order.
STEPS: tuple[Step, ...] = (
    Step(
        Stage.CAPTURE,
        capture,
        skip=_given_program,
        skip_note="model is an ExportedProgram: capture skipped",
        then=_captured,
    ),
    Step(Stage.DECOMPOSITION, decompose, then=_decomposed),
    Step(Stage.TRANSLATION, translate, then=_translated),
    Step(Stage.OPTIMIZE, optimize, skip=_not_optimized),
    Step(None, finish),
)
