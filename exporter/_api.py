"""``export()``: the drop-in for ``torch.onnx.export(model, args, kwargs, dynamo=True)``."""

from __future__ import annotations

import datetime
import io
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from exporter import _capture, _decompose, _dynamic_shapes, _passes, _translate
from exporter._errors import InvalidExportArgumentsError, OnnxExporterError, UnsupportedOpError
from exporter._program import ONNXProgram
from exporter._record import ExportRecord
from exporter.ops import _opsets
from exporter.ops._registry import DEFAULT_REGISTRY, Registry, custom_translation

_LEGACY_IGNORED = (
    "training",
    "operator_export_type",
    "do_constant_folding",
    "custom_opsets",
    "export_modules_as_functions",
    "autograd_inlining",
)


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
    optimize: bool = True,
    verify: bool | str = False,
    profile: bool = False,
    dump_exported_program: bool = False,
    artifacts_dir: str | os.PathLike = ".",
    keep_initializers_as_inputs: bool = False,
    dynamic_axes: Mapping[str, Any] | None = None,
    metadata: bool = True,
    capture_patches: Sequence[str] = (),
    **legacy: Any,
) -> ONNXProgram:
    """Export a PyTorch model to ONNX with our own op library.

    Same parameters and behaviour as ``torch.onnx.export(..., dynamo=True)``, plus:
    ``metadata=False`` leaves out the debug metadata props (most of the graph's bytes), and
    ``verify="strict"`` raises :class:`OnnxVerificationError` instead of warning, and
    ``capture_patches=["torchvision-detection"]`` opts into model-side rewrites that let
    torch.export capture code it cannot capture as written (see ``exporter._capture_patches``).
    """
    record = ExportRecord(model_class=type(model).__name__)
    eager_model = model if isinstance(model, torch.nn.Module) else None
    args_tuple: tuple[Any, ...] = ()
    kwargs = {} if kwargs is None else kwargs
    program: ONNXProgram | None = None
    error: BaseException | None = None
    report_dir = Path(artifacts_dir)
    try:
        _check_legacy(legacy)
        args_tuple, kwargs = _check_inputs(model, args, kwargs, dynamo)
        opset = _check_opset(opset_version)
        record.opset = opset
        if report or dump_exported_program or profile:
            _check_artifacts_dir(report_dir)
        _check_destination(f)
        _check_names(input_names, "input_names")
        _check_names(output_names, "output_names")
        registry = _registry_with(custom_translation_table)
        record.registry = registry
        _check_patches(capture_patches)
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
            patches=tuple(capture_patches),
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
            _write_report(record, report_dir, program, error, eager_model, args_tuple, kwargs)


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
    patches: tuple[str, ...] = (),
) -> ONNXProgram:
    say = print if verbose else (lambda *a, **k: None)
    names = _dynamic_shapes.AxisNames()
    narrowed: list[str] = []
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
            )
        record.capture_strategy = strategy
        say(f"[exporter] captured with {strategy} ({record.timings['capture']:.2f} s)")
        narrowed = _dynamic_shapes.narrowed_dims(captured)
        if narrowed:
            message = (
                f"torch.export held dynamic dims at their example size while tracing: "
                f"{', '.join(narrowed)}. They stay dynamic in the ONNX graph, but a guard in "
                "the model or in an op's meta function assumed that size; check other sizes "
                "with export(..., verify=True), which runs a second shape."
            )
            record.notes.append(message)
            warnings.warn(message, UserWarning, stacklevel=3)
    record.captured_program = captured
    if dump_dir is not None:
        stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S-%f")
        torch.export.save(captured, dump_dir / f"onnx_export_{stamp}.pt2")
    with record.stage("decomposition"):
        decomposed, reason = _decompose.decompose(captured, registry)
    record.decomposition_reason = reason
    record.exported_program = decomposed
    say(f"[exporter] decomposition {'ran: ' + reason if reason else 'skipped'}")
    with record.stage("translation"):
        unsupported = _translate.find_unsupported(decomposed.graph_module, registry)
        if unsupported:
            record.unsupported = unsupported
            raise UnsupportedOpError(_unsupported_message(unsupported), unsupported)
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
    if optimize:
        with record.stage("optimize"):
            _passes.optimize(model_ir)
    else:
        record.status["optimize"] = "skipped"
    _rename_io(model_ir, input_names, output_names)
    if not metadata:
        _passes.strip_metadata(model_ir)
    return ONNXProgram(model_ir, decomposed, record=record)


def _unsupported_message(unsupported: list[dict[str, Any]]) -> str:
    by_target: dict[str, list[dict[str, Any]]] = {}
    for item in unsupported:
        by_target.setdefault(item["target"], []).append(item)
    lines = [f"{len(by_target)} ops have no ONNX translation (all of them are listed):"]
    for target, items in by_target.items():
        first = items[0]
        where = f" at {first['source']}" if first.get("source") else ""
        more = f" (+{len(items) - 1} more nodes)" if len(items) > 1 else ""
        lines.append(f"  - {target}: FX node {first['fx_node']}{where}{more}")
    lines.append(
        "Register a translation with custom_translation_table={op_overload: fn} or "
        "exporter.register(op_overload, fn)."
    )
    return "\n".join(lines)


# ------------------------------------------------------------------ validation
def _check_legacy(legacy: dict[str, Any]) -> None:
    unknown = set(legacy) - set(_LEGACY_IGNORED)
    if unknown:
        raise TypeError(f"export() got unexpected keyword arguments {sorted(unknown)}")
    for name in legacy:
        warnings.warn(
            f"export(): {name} is a TorchScript-exporter option and is ignored",
            UserWarning,
            stacklevel=3,
        )


def _check_inputs(
    model: Any, args: Any, kwargs: Any, dynamo: bool
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if not dynamo:
        raise InvalidExportArgumentsError(
            "exporter.export always uses torch.export; for the TorchScript exporter call "
            "torch.onnx.export(..., dynamo=False)"
        )
    if isinstance(model, torch.jit.ScriptModule | torch.jit.ScriptFunction):
        raise InvalidExportArgumentsError(
            "model is a TorchScript module; export the original nn.Module instead"
        )
    if not isinstance(model, torch.nn.Module | torch.export.ExportedProgram):
        raise InvalidExportArgumentsError(
            f"model must be a torch.nn.Module or a torch.export.ExportedProgram, got "
            f"{type(model).__name__}; wrap a function in an nn.Module whose forward calls it"
        )
    if isinstance(args, torch.Tensor):
        args = (args,)
    if not isinstance(args, tuple):
        raise InvalidExportArgumentsError(
            f"args must be a tuple of example inputs, got {type(args).__name__}; for one "
            f"input write args=(x,)"
        )
    if not isinstance(kwargs, dict):
        raise InvalidExportArgumentsError(
            f"kwargs must be a dict of keyword inputs, got {type(kwargs).__name__}"
        )
    if (
        not kwargs
        and args
        and isinstance(args[-1], dict)
        and isinstance(model, torch.nn.Module)
        and not _fits(model, args, {})
        and _fits(model, args[:-1], args[-1])
    ):
        # torch.onnx's convention: a trailing dict in args holds the keyword inputs. We apply it
        # only when the inputs do not fit forward() as given, so a dict input stays an input.
        kwargs = args[-1]
        args = args[:-1]
    _check_leaves((args, kwargs))
    return args, kwargs


def _fits(model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    import inspect

    try:
        inspect.signature(model.forward).bind(*args, **kwargs)
    except TypeError:
        return False
    return True


def _check_leaves(tree: Any, path: str = "inputs") -> None:
    if isinstance(tree, torch.Tensor) or tree is None or isinstance(tree, (bool, int, float, str)):
        return
    if isinstance(tree, (list, tuple)):
        for i, item in enumerate(tree):
            _check_leaves(item, f"{path}[{i}]")
        return
    if isinstance(tree, dict):
        for k, v in tree.items():
            _check_leaves(v, f"{path}[{k!r}]")
        return
    from torch.utils import _pytree as pytree

    if pytree._get_node_type(tree) in pytree.SUPPORTED_NODES:
        return  # a registered container (e.g. a transformers Cache or ModelOutput)
    if isinstance(tree, (torch.dtype, torch.device, torch.memory_format, torch.layout)):
        return
    import numpy as np

    hint = " Convert it with torch.from_numpy()." if isinstance(tree, np.ndarray) else ""
    raise InvalidExportArgumentsError(
        f"{path} is a {type(tree).__name__}, which torch.export cannot take as an input; use "
        f"tensors, Python scalars, or lists/tuples/dicts of them.{hint}"
    )


def _check_patches(patches: Any) -> None:
    from exporter._capture_patches import CAPTURE_PATCHES

    if isinstance(patches, str) or not all(isinstance(p, str) for p in patches):
        raise InvalidExportArgumentsError(
            f"capture_patches must be a list of names, got {patches!r}"
        )
    unknown = [p for p in patches if p not in CAPTURE_PATCHES]
    if unknown:
        raise InvalidExportArgumentsError(
            f"unknown capture_patches {unknown}; available: {sorted(CAPTURE_PATCHES)}"
        )


def _check_opset(opset_version: Any) -> int:
    if opset_version is None:
        return _opsets.DEFAULT_OPSET
    if not isinstance(opset_version, int) or isinstance(opset_version, bool):
        raise InvalidExportArgumentsError(
            f"opset_version must be an int, got {type(opset_version).__name__}"
        )
    if not _opsets.MIN_OPSET <= opset_version <= _opsets.MAX_OPSET:
        raise InvalidExportArgumentsError(
            f"opset_version {opset_version} is not supported; choose one from "
            f"{_opsets.MIN_OPSET} to {_opsets.MAX_OPSET} (default {_opsets.DEFAULT_OPSET})"
        )
    return opset_version


def _check_artifacts_dir(path: Path) -> None:
    if path.exists() and not path.is_dir():
        raise InvalidExportArgumentsError(f"artifacts_dir {path} exists and is not a folder")
    if not path.exists():
        if not path.parent.exists():
            raise InvalidExportArgumentsError(
                f"artifacts_dir {path}: its parent folder {path.parent} does not exist; create "
                f"it or choose another artifacts_dir"
            )
        path.mkdir()


def _check_destination(f: Any) -> None:
    if f is None or isinstance(f, io.BytesIO):
        return
    if not isinstance(f, (str, os.PathLike)):
        raise InvalidExportArgumentsError(f"f must be a path or io.BytesIO, got {type(f).__name__}")
    parent = Path(f).parent
    if not parent.exists():
        raise InvalidExportArgumentsError(
            f"cannot write {f}: folder {parent} does not exist; create it first"
        )


def _check_names(names: Any, what: str) -> None:
    if names is None:
        return
    if isinstance(names, str) or not all(isinstance(n, str) for n in names):
        raise InvalidExportArgumentsError(f"{what} must be a list of strings, got {names!r}")
    duplicates = sorted({n for n in names if list(names).count(n) > 1})
    if duplicates:
        raise InvalidExportArgumentsError(f"{what} has duplicates: {duplicates}")


def _registry_with(table: Mapping[Any, Callable[..., Any]] | None) -> Registry:
    if not table:
        return DEFAULT_REGISTRY
    if not isinstance(table, Mapping):
        raise InvalidExportArgumentsError(
            f"custom_translation_table must be a dict {{OpOverload: function}}, got "
            f"{type(table).__name__}"
        )
    registry = DEFAULT_REGISTRY.copy()
    for target, fn in table.items():
        try:
            registry.add(target, custom_translation(target, fn))
        except TypeError as exc:
            raise InvalidExportArgumentsError(str(exc)) from None
    return registry


def _rename_io(
    model: Any, input_names: Sequence[str] | None, output_names: Sequence[str] | None
) -> None:
    from exporter import _metadata

    graph = model.graph
    for what, names, values in (
        ("input_names", input_names, graph.inputs),
        ("output_names", output_names, graph.outputs),
    ):
        if names is None:
            continue
        if len(names) > len(values):
            raise InvalidExportArgumentsError(
                f"{what} has {len(names)} names but the model has {len(values)} "
                f"{what.split('_')[0]}s ({[v.name for v in values]}); remove the extra names"
            )
        taken = {v.name: v for v in _all_values(graph)}
        for name, value in zip(names, values):
            if value.name == name:
                continue
            other = taken.get(name)
            if other is not None and other is not value:
                other.name = f"{name}__renamed"  # free the name the user asked for
                taken[other.name] = other
            taken.pop(value.name, None)
            value.metadata_props.setdefault(_metadata.ORIGINAL_NAME, value.name or "")
            value.name = name
            taken[name] = value


def _all_values(graph: Any) -> list[Any]:
    import onnx_ir as ir

    values = list(graph.inputs) + list(graph.initializers.values())
    for node in ir.traversal.RecursiveGraphIterator(graph):
        values.extend(node.outputs)
    return values


def _save_to(
    program: ONNXProgram,
    f: Any,
    export_params: bool,
    keep_initializers_as_inputs: bool,
    external_data: bool,
) -> None:
    if isinstance(f, io.BytesIO):
        f.write(program.model_proto.SerializeToString())
        return
    program.save(
        f,
        include_initializers=export_params,
        keep_initializers_as_inputs=keep_initializers_as_inputs,
        external_data=external_data,
    )


def _write_report(
    record: ExportRecord,
    folder: Path,
    program: ONNXProgram | None,
    error: BaseException | None,
    eager_model: Any,
    args: Any,
    kwargs: Any,
) -> None:
    """Write the markdown report; a failure here never masks the export's own outcome."""
    try:
        from exporter.diagnostics import report as _report

        path = _report.write_report(record, folder, program=program, error=error)
        if program is not None:
            program.report_path = path
    except Exception as exc:  # noqa: BLE001 - the report is best-effort by contract
        warnings.warn(
            f"could not write the export report: {type(exc).__name__}: {exc}", stacklevel=3
        )


__all__ = ["export", "OnnxExporterError"]
