"""``export()``: the drop-in for ``torch.onnx.export(model, args, kwargs, dynamo=True)``.

It reads as its steps: check the arguments into a request (``exporter._validate.validate``), run
the export's stages on it (``exporter._pipeline``: the list ``STEPS``), then verify, save and
write the report."""

from __future__ import annotations

import io
import logging
import os
import warnings
from collections.abc import Callable, Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from torch_onnx_conformance.exporter import _capture_cache, _pipeline, _validate
from torch_onnx_conformance.exporter._capture_cache import CaptureCache
from torch_onnx_conformance.exporter._errors import OnnxExporterError
from torch_onnx_conformance.exporter._program import ONNXProgram
from torch_onnx_conformance.exporter._record import ExportRecord


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
    capture_cache: CaptureCache | None = None,
    capture_key: Hashable | None = None,
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
    would add, predicted on any machine (``torch_onnx_conformance/exporter/diagnostics/placement.py``).
    Without ``output_names``, outputs are named after what forward() returned (``logits``,
    ``last_hidden_state``, ``present.0.key``, ``output.0``; see ``exporter._output_names``);
    ``output_names="fx"`` keeps torch.onnx's FX names (``layer_norm_2``, ``add``).
    ``capture_cache=CaptureCache()`` with ``capture_key``: exports of the same model and inputs
    under one key capture once, and translate at each opset or copy a translation whose opset
    choices their opset makes alike (``exporter._capture_cache``, ``_translation_reuse``).
    """
    arguments = dict(locals())  # every parameter by name, for _validate: nothing else is set yet
    record = ExportRecord(model_class=type(model).__name__, verify_requested=bool(verify))
    report_dir = Path(artifacts_dir)
    program: ONNXProgram | None = None
    error: BaseException | None = None
    try:
        _capture_cache.check_arguments(capture_cache, capture_key, model)
        request = _validate.validate(arguments, record)
        reuse = None if capture_cache is None else (capture_cache, capture_key)
        program = _pipeline.run(request, record, reuse)
        if request.verify:
            from torch_onnx_conformance.exporter.diagnostics import verify as _verify

            _verify.verify_program(
                program,
                request.model if isinstance(request.model, torch.nn.Module) else None,
                request.args,
                request.kwargs,
                dynamic_shapes=request.dynamic_shapes,
                record=record,
                strict=(request.verify == "strict"),
            )
        if request.f is not None:
            _save_to(program, request)
        return program
    except BaseException as exc:
        error = exc
        raise
    finally:
        if report:
            _write_report(record, report_dir, program, error, placement_provider)


def _save_to(program: ONNXProgram, request: _validate.ExportRequest) -> None:
    f = request.f
    if isinstance(f, io.BytesIO):
        program._require_weights("write the model into the io.BytesIO")
        from torch_onnx_conformance.exporter._program import serialized_size_estimate

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
        include_initializers=request.export_params,
        keep_initializers_as_inputs=request.keep_initializers_as_inputs,
        external_data=request.external_data,
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
        from torch_onnx_conformance.exporter.diagnostics import report as _report
        from torch_onnx_conformance.exporter.diagnostics import repro as _repro

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


__all__ = ["export", "CaptureCache", "OnnxExporterError"]
