"""``export()``: the drop-in for ``torch.onnx.export(model, args, kwargs, dynamo=True)``."""

from __future__ import annotations

import copy
import datetime
import io
import logging
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from exporter import (
    _caches,
    _capture,
    _capture_patches,
    _decompose,
    _dtypes,
    _dynamic_shapes,
    _opset_convert,
    _output_names,
    _passes,
    _translate,
    _validate,
)
from exporter._errors import InvalidExportArgumentsError, OnnxExporterError, UnsupportedOpError
from exporter._program import ONNXProgram, has_no_data, input_plan
from exporter._record import ExportRecord
from exporter.ops._registry import Registry


def export(
    model: torch.nn.Module | torch.export.ExportedProgram,
    args: tuple[Any, ...] | torch.Tensor = (),
    f: str | os.PathLike | io.BytesIO | None = None,
    *,
    kwargs: dict[str, Any] | None = None,
    export_params: bool = True,
    verbose: bool | None = None,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    opset_version: int | None = None,
    dynamo: bool = True,
    external_data: bool = True,
    dynamic_shapes: Any = None,
    custom_translation_table: Mapping[Any, Callable[..., Any]] | None = None,
    report: bool = False,
    placement_provider: str | None = None,
    optimize: bool = True,
    verify: bool | str = False,
    profile: bool = False,
    dump_exported_program: bool = False,
    artifacts_dir: str | os.PathLike = ".",
    keep_initializers_as_inputs: bool = False,
    dynamic_axes: Mapping[str, Any] | None = None,
    metadata: bool = True,
    capture_patches: Sequence[str] | None = None,
    **legacy: Any,
) -> ONNXProgram:
    """Export a PyTorch model to ONNX with our own op library.

    Same parameters and behaviour as ``torch.onnx.export(..., dynamo=True)``, plus:
    ``metadata=False`` leaves out the debug metadata props (most of the graph's bytes), and
    ``verify="strict"`` raises :class:`OnnxVerificationError` instead of warning, and
    ``capture_patches`` names model-side rewrites that let torch.export capture code it cannot
    capture as written (see ``exporter._capture_patches``); by default those made for the
    model's kind apply (torchvision detection models), ``capture_patches=()`` turns them off.
    ``placement_provider="cuda"`` (with ``report=True``) adds a "CUDA placement" section to the
    report: which nodes onnxruntime's CUDA provider would leave to CPU and the Memcpy nodes it
    would add, predicted on any machine (``conformance/placement.py``).
    Without ``output_names``, outputs are named after what forward() returned (``logits``,
    ``last_hidden_state``, ``present.0.key``, ``output.0``; see ``exporter._output_names``);
    ``output_names="fx"`` keeps torch.onnx's FX names (``layer_norm_2``, ``add``).
    """
    record = ExportRecord(model_class=type(model).__name__, verify_requested=bool(verify))
    eager_model = model if isinstance(model, torch.nn.Module) else None
    args_tuple: tuple[Any, ...] = ()
    kwargs = {} if kwargs is None else kwargs
    program: ONNXProgram | None = None
    error: BaseException | None = None
    report_dir = Path(artifacts_dir)
    try:
        if not isinstance(model, torch.export.ExportedProgram):
            # An ExportedProgram was captured with whatever flattening was registered then
            # (transformers' own exporter registers its own); registering ours now would
            # change how its caller flattens caches from here on.
            _caches.register(args, kwargs)
            _caches.check_keyed_inputs(args if isinstance(args, tuple) else (args,), kwargs)
        _validate.check_legacy(legacy)
        args_tuple, kwargs = _validate.check_inputs(model, args, kwargs, dynamo)
        opset = _opset_convert.check(opset_version)
        if opset_version is None:
            opset = _dtypes.default_opset_for(model, args_tuple, kwargs, opset)
        record.opset = opset
        _validate.check_verify(verify)
        _check_placement_provider(placement_provider, report)
        if report or dump_exported_program or profile:
            why = "dump_exported_program" if dump_exported_program else "the report"
            _validate.check_artifacts_dir(report_dir, why)
        _validate.check_destination(f)
        _validate.check_bytesio_size(f, _validate.weight_bytes(model), "the weights alone take")
        _validate.check_names(input_names, "input_names")
        output_names = _output_names.requested(output_names)
        _validate.check_names(output_names, "output_names")
        _validate.check_names_disjoint(input_names, output_names)
        registry = _validate.registry_with(custom_translation_table)
        record.registry = registry
        _validate.check_patches(capture_patches)
        if dynamic_axes is not None:
            if dynamic_shapes is not None:
                raise InvalidExportArgumentsError(
                    "pass either dynamic_shapes or the legacy dynamic_axes, not both"
                )
            if isinstance(model, torch.export.ExportedProgram):
                raise InvalidExportArgumentsError(
                    "dynamic_axes cannot apply to an ExportedProgram: its shapes are fixed"
                )
            dynamic_shapes = _dynamic_shapes.from_dynamic_axes(
                model, args_tuple, kwargs, dict(dynamic_axes), input_names, output_names
            )
        dynamic_shapes = _dynamic_shapes.keyed_by_input_names(
            model, args_tuple, kwargs, dynamic_shapes, input_names
        )
        if isinstance(model, torch.nn.Module) and model.training:
            warnings.warn(
                "Exporting a model in training mode: dropout and batch-norm statistics follow "
                "training behaviour. Call model.eval() first unless that is what you want.",
                UserWarning,
                stacklevel=2,
            )
        program = _export(
            model,
            args_tuple,
            kwargs,
            dynamic_shapes,
            registry,
            opset,
            record,
            optimize=optimize,
            metadata=metadata,
            verbose=verbose,
            input_names=input_names,
            output_names=output_names,
            dump_dir=report_dir if dump_exported_program else None,
            patches=capture_patches,
        )
        if verify:
            from exporter.diagnostics import verify as _verify

            _verify.verify_program(
                program,
                eager_model,
                args_tuple,
                kwargs,
                dynamic_shapes=dynamic_shapes,
                record=record,
                strict=(verify == "strict"),
            )
        if f is not None:
            _save_to(program, f, export_params, keep_initializers_as_inputs, external_data)
        return program
    except BaseException as exc:
        error = exc
        raise
    finally:
        if report:
            _write_report(record, report_dir, program, error, placement_provider)


def _export(
    model: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    dynamic_shapes: Any,
    registry: Registry,
    opset: int,
    record: ExportRecord,
    *,
    optimize: bool,
    metadata: bool,
    verbose: bool | None,
    input_names: Sequence[str] | None,
    output_names: Sequence[str] | None,
    dump_dir: Path | None,
    patches: Sequence[str] | None = (),
) -> ONNXProgram:
    say = print if verbose else (lambda *a, **k: None)
    patches, patches_note = _capture_patches.resolve(patches, model)
    record.capture_patches = list(patches)
    if patches_note:
        record.notes.append(patches_note)
        logging.getLogger("exporter").info(patches_note)
        say(f"[exporter] {patches_note}")
    names = _dynamic_shapes.AxisNames()
    narrowed = False
    if isinstance(model, torch.export.ExportedProgram):
        captured = model
        record.status["capture"] = "skipped"
        record.notes.append("model is an ExportedProgram: capture skipped")
    else:
        converted, names = _dynamic_shapes.normalize(model, args, kwargs, dynamic_shapes)
        with record.stage("capture"):
            captured, strategy = _capture.capture(
                model,
                args,
                kwargs,
                converted,
                attempts=record.capture_attempts,
                patches=patches,
                notes=record.notes,
            )
        record.capture_strategy = strategy
        say(f"[exporter] captured with {strategy} ({record.timings['capture']:.2f} s)")
        record.dim_audit = _dynamic_shapes.audit_dims(captured, names.declared)
        narrowed = any(a.status == _dynamic_shapes.HELD for a in record.dim_audit)
        message = _dynamic_shapes.specialized_dims_warning(record.dim_audit)
        if message:
            record.notes.append(message)
            warnings.warn(message, UserWarning, stacklevel=3)
    record.captured_program = captured
    if dump_dir is not None:
        stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S-%f")
        record.dumped_program = dump_dir / f"onnx_export_{stamp}.pt2"
        torch.export.save(captured, record.dumped_program)
    with record.stage("decomposition"):
        untraceable: dict[str, str] = {}
        decomposed, reason = _decompose.decompose(captured, registry, record.notes, untraceable)
    record.decomposition_reason = reason
    record.exported_program = decomposed
    say(f"[exporter] decomposition {'ran: ' + reason if reason else 'skipped'}")
    with record.stage("translation"):
        unsupported = _translate.find_unsupported(decomposed.graph_module, registry)
        if unsupported:
            record.unsupported = unsupported
            raise UnsupportedOpError(_unsupported_message(unsupported, untraceable), unsupported)
        model_ir = _translate.translate_program(
            decomposed,
            registry,
            opset=opset,
            metadata=metadata,
            names=_translate.SymbolNames(names.symbol_renames(decomposed)),
            root_class=record.model_class,
        )
        _passes.finalize(model_ir)
        if narrowed:
            _passes.forget_static_dims(model_ir)
    record.model = model_ir
    say(f"[exporter] translated to {len(model_ir.graph)} ONNX nodes")
    _validate.check_outputs(model_ir, decomposed)
    program = ONNXProgram(model_ir, decomposed, record=record)
    computed = _compute_meta_buffers(model, program)
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
        warnings.warn(message, UserWarning, stacklevel=3)
    if optimize:
        with record.stage("optimize"), program.meta_weights_as_inputs():
            _passes.optimize(model_ir)
    else:
        record.status["optimize"] = "skipped"
    plan = input_plan(decomposed)
    if isinstance(model, torch.nn.Module) and input_names is None:
        input_names = _caches.graph_input_names(model, args, kwargs, model_ir.graph, plan)
    _validate.apply_io_names(model_ir, input_names, output_names, plan)
    if output_names is None:
        _output_names.name_outputs(model_ir, decomposed)
    if not metadata:
        _passes.strip_metadata(model_ir)
    # Last, after optimizing and naming: an opset older than the op library is reached by
    # ONNX's version converter, which returns a new model.
    program.model = _opset_convert.convert_down(model_ir, opset)
    return program


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
    from exporter.ops import quantized_torchao

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


def _save_to(
    program: ONNXProgram,
    f: Any,
    export_params: bool,
    keep_initializers_as_inputs: bool,
    external_data: bool,
) -> None:
    if isinstance(f, io.BytesIO):
        program._require_weights("write the model into the io.BytesIO")
        from exporter._program import serialized_size_estimate

        _validate.check_bytesio_size(
            f, serialized_size_estimate(program.model), "the model serializes to"
        )
        warnings.warn(
            "Saving the model into an io.BytesIO is deprecated, as in torch.onnx: pass a file "
            "path (a model over 2 GiB cannot be held in one buffer).",
            DeprecationWarning,
            stacklevel=3,
        )
        f.write(program.model_proto.SerializeToString())
        return
    program.save(
        f,
        include_initializers=export_params,
        keep_initializers_as_inputs=keep_initializers_as_inputs,
        external_data=external_data,
    )


def _check_placement_provider(provider: str | None, report: bool) -> None:
    if provider is None:
        return
    if provider not in ("cuda", "cpu"):
        raise ValueError(
            f"placement_provider={provider!r}: choose 'cuda' (or 'cpu'), or leave it None"
        )
    if not report:
        raise ValueError(
            "placement_provider adds a section to the export report: pass report=True with it"
        )


def _write_report(
    record: ExportRecord,
    folder: Path,
    program: ONNXProgram | None,
    error: BaseException | None,
    placement_provider: str | None = None,
) -> None:
    """Write the repro folder (when there is something to reproduce) and the markdown report,
    then say where: printed, and on failure also as a note on the exception. A failure here
    never masks the export's own outcome."""
    try:
        from exporter.diagnostics import report as _report
        from exporter.diagnostics import repro as _repro

        path = _report.reserve_report_path(record, folder, error)
        try:
            repro_note = _repro.write_export_repro(
                record, program, error, _report.repro_folder(path), _report.outcome(record, error)
            )
        except Exception as exc:  # noqa: BLE001 - the report itself matters more
            repro_note = f"could not be written: {type(exc).__name__}: {exc}"
        _report.write_report(
            record,
            folder,
            program=program,
            error=error,
            repro_note=repro_note,
            path=path,
            placement_provider=placement_provider,
        )
    except Exception as exc:  # noqa: BLE001 - the report is best-effort by contract
        warnings.warn(
            f"could not write the export report: {type(exc).__name__}: {exc}", stacklevel=3
        )
        return
    if program is not None:
        program.report_path = path
    logging.getLogger("exporter").info("export report: %s", path)
    print(f"[exporter] export report written to {path}")
    if error is not None:
        error.add_note(f"export report: {path}")


__all__ = ["export", "OnnxExporterError"]
