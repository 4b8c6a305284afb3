"""Argument checks of ``export()``: every bad input is an InvalidExportArgumentsError that names
the value and says what to do, raised before any work starts (or, for the graph's names, before
the model is handed back).

``validate`` runs them all and returns the :class:`ExportRequest` the pipeline's stages read
(``exporter._pipeline``)."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import io
import logging
import os
import tempfile
import types
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.utils import _pytree as pytree

from torch_onnx_conformance.exporter import (
    _caches,
    _dtypes,
    _dynamic_shapes,
    _opset_convert,
    _output_names,
)
from torch_onnx_conformance.exporter._errors import InvalidExportArgumentsError
from torch_onnx_conformance.exporter._program import PROTOBUF_LIMIT_BYTES
from torch_onnx_conformance.exporter.ops._registry import (
    DEFAULT_REGISTRY,
    Registry,
    custom_translation,
)

if TYPE_CHECKING:
    from torch_onnx_conformance.exporter._record import ExportRecord

LEGACY_IGNORED = (
    "training",
    "operator_export_type",
    "do_constant_folding",
    "custom_opsets",
    "export_modules_as_functions",
    "autograd_inlining",
)

VERIFY_VALUES = (False, True, "strict")


# ------------------------------------------------------------------ the request
@dataclasses.dataclass(frozen=True)
class ExportRequest:
    """What ``export()`` was asked to do: every argument checked and its defaults resolved, the
    one input of the pipeline's stages. (``report``, ``placement_provider`` and
    ``artifacts_dir`` stay with ``export()``, which writes the report even when the arguments
    fail their checks.)"""

    model: torch.nn.Module | torch.export.ExportedProgram
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    opset: int
    #: the op library with ``custom_translation_table`` added
    registry: Registry
    #: as the user declared them, ``dynamic_axes`` converted and ``input_names`` keys resolved:
    #: what verify's second shape reads
    dynamic_shapes: Any
    #: ``dynamic_shapes`` as torch.export takes them (axis names as Dim.DYNAMIC); None for an
    #: ExportedProgram, which is not captured again
    capture_shapes: Any
    #: the axis names the user gave, which name the ONNX model's dims
    axis_names: _dynamic_shapes.AxisNames
    #: the model-side rewrites capture applies (``exporter._capture_patches``), defaults resolved
    capture_patches: tuple[str, ...]
    input_names: Sequence[str] | None
    output_names: Sequence[str] | None
    optimize: bool
    metadata: bool
    verbose: bool | None
    verify: bool | str
    #: where the model is saved (None: not saved), and how
    f: str | os.PathLike | io.BytesIO | None
    export_params: bool
    keep_initializers_as_inputs: bool
    external_data: bool
    #: where ``dump_exported_program=True`` writes the captured program; None when not asked
    dump_dir: Path | None

    def say(self, message: str) -> None:
        """A progress line, printed when ``verbose=True``."""
        if self.verbose:
            print(f"[exporter] {message}")


def validate(arguments: Mapping[str, Any], record: ExportRecord) -> ExportRequest:
    """``export()``'s arguments, by parameter name, checked in the order their errors come and
    resolved into the request. The record takes what is known as soon as it is (the opset, the
    registry, the capture patches), so that the report of a later argument error names it."""
    given = types.SimpleNamespace(**arguments)
    model = given.model
    args, kwargs = _checked_inputs(given)
    opset = _opset_convert.check(given.opset_version)
    if given.opset_version is None:
        opset = _dtypes.default_opset_for(model, args, kwargs, opset)
    record.opset = opset
    check_verify(given.verify)
    check_placement_provider(given.placement_provider, given.report)
    if given.report or given.dump_exported_program or given.profile:
        why = "dump_exported_program" if given.dump_exported_program else "the report"
        check_artifacts_dir(Path(given.artifacts_dir), why)
    check_destination(given.f)
    check_bytesio_size(given.f, weight_bytes(model), "the weights alone take")
    check_names(given.input_names, "input_names")
    output_names = _output_names.requested(given.output_names)
    check_names(output_names, "output_names")
    check_names_disjoint(given.input_names, output_names)
    registry = registry_with(given.custom_translation_table)
    record.registry = registry
    check_patches(given.capture_patches)
    dynamic_shapes = _declared_shapes(given, args, kwargs)
    if isinstance(model, torch.nn.Module) and model.training:
        warnings.warn(
            "Exporting a model in training mode: dropout and batch-norm statistics follow "
            "training behaviour. Call model.eval() first unless that is what you want.",
            UserWarning,
            stacklevel=3,
        )
    patches = _capture_patches(given, record)
    capture_shapes, axis_names = None, _dynamic_shapes.AxisNames()
    if not isinstance(model, torch.export.ExportedProgram):
        capture_shapes, axis_names = _dynamic_shapes.normalize(model, args, kwargs, dynamic_shapes)
    return ExportRequest(
        model=model,
        args=args,
        kwargs=kwargs,
        opset=opset,
        registry=registry,
        dynamic_shapes=dynamic_shapes,
        capture_shapes=capture_shapes,
        axis_names=axis_names,
        capture_patches=patches,
        input_names=given.input_names,
        output_names=output_names,
        optimize=given.optimize,
        metadata=given.metadata,
        verbose=given.verbose,
        verify=given.verify,
        f=given.f,
        export_params=given.export_params,
        keep_initializers_as_inputs=given.keep_initializers_as_inputs,
        external_data=given.external_data,
        dump_dir=Path(given.artifacts_dir) if given.dump_exported_program else None,
    )


def _checked_inputs(given: types.SimpleNamespace) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The example inputs as a tuple and a dict, after the checks of the inputs themselves."""
    args, kwargs = given.args, {} if given.kwargs is None else given.kwargs
    if not isinstance(given.model, torch.export.ExportedProgram):
        # An ExportedProgram was captured with whatever flattening was registered then
        # (transformers' own exporter registers its own); registering ours now would
        # change how its caller flattens caches from here on.
        _caches.register(args, kwargs)
        _caches.check_keyed_inputs(args if isinstance(args, tuple) else (args,), kwargs)
    check_legacy(given.legacy)
    return check_inputs(given.model, args, kwargs, given.dynamo)


def _declared_shapes(given: types.SimpleNamespace, args: tuple[Any, ...], kwargs: Any) -> Any:
    """``dynamic_shapes``, or the legacy ``dynamic_axes`` converted, in forward()'s terms."""
    model, dynamic_shapes = given.model, given.dynamic_shapes
    if given.dynamic_axes is not None:
        if dynamic_shapes is not None:
            raise InvalidExportArgumentsError(
                "pass either dynamic_shapes or the legacy dynamic_axes, not both"
            )
        if isinstance(model, torch.export.ExportedProgram):
            raise InvalidExportArgumentsError(
                "dynamic_axes cannot apply to an ExportedProgram: its shapes are fixed"
            )
        dynamic_shapes = _dynamic_shapes.from_dynamic_axes(
            model, args, kwargs, dict(given.dynamic_axes), given.input_names, given.output_names
        )
    return _dynamic_shapes.keyed_by_input_names(
        model, args, kwargs, dynamic_shapes, given.input_names
    )


def _capture_patches(given: types.SimpleNamespace, record: ExportRecord) -> tuple[str, ...]:
    """The capture patches to apply: as given, or those made for the model's kind, said."""
    from torch_onnx_conformance.exporter._capture_patches import resolve

    patches, note = resolve(given.capture_patches, given.model)
    record.capture_patches = list(patches)
    if note:
        record.notes.append(note)
        logging.getLogger("exporter").info(note)
        if given.verbose:
            print(f"[exporter] {note}")
    return patches


def check_legacy(legacy: dict[str, Any]) -> None:
    unknown = set(legacy) - set(LEGACY_IGNORED)
    if unknown:
        raise TypeError(f"export() got unexpected keyword arguments {sorted(unknown)}")
    for name in legacy:
        warnings.warn(
            f"export(): {name} is a TorchScript-exporter option and is ignored",
            UserWarning,
            stacklevel=6,  # export()'s caller's caller, as before export() became a pipeline
        )


def check_inputs(
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
        and (_fits(model, args[:-1], args[-1]) or not _fits(model, args, {}))
    ):
        # torch.onnx's convention: a trailing dict in args holds the keyword inputs (an empty
        # trailing dict passes a dict as the last positional input). Unlike torch.onnx we keep
        # the dict positional when only that binds to forward().
        kwargs = args[-1]
        args = args[:-1]
    check_leaves((args, kwargs))
    return args, kwargs


def _fits(model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    try:
        inspect.signature(model.forward).bind(*args, **kwargs)
    except TypeError:
        return False
    return True


def check_leaves(tree: Any, path: str = "inputs") -> None:
    if isinstance(tree, torch.Tensor) or tree is None or isinstance(tree, (bool, int, float, str)):
        return
    if isinstance(tree, (list, tuple)):
        for i, item in enumerate(tree):
            check_leaves(item, f"{path}[{i}]")
        return
    if isinstance(tree, dict):
        for k, v in tree.items():
            check_leaves(v, f"{path}[{k!r}]")
        return
    if pytree._get_node_type(tree) in pytree.SUPPORTED_NODES:
        return  # a registered container (e.g. a transformers Cache or ModelOutput)
    if isinstance(tree, (torch.dtype, torch.device, torch.memory_format, torch.layout)):
        return
    from torch_onnx_conformance.exporter import _caches

    if _caches.is_cache(tree):
        raise InvalidExportArgumentsError(
            f"{path} is a transformers {type(tree).__name__}, which the exporter cannot flatten "
            f"into graph inputs: its layers keep state beyond their key and value tensors "
            f"(quantized or offloaded layers). Pass a DynamicCache, a StaticCache or an "
            f"EncoderDecoderCache holding the same keys and values."
        )
    import numpy as np

    hint = " Convert it with torch.from_numpy()." if isinstance(tree, np.ndarray) else ""
    raise InvalidExportArgumentsError(
        f"{path} is a {type(tree).__name__}, which torch.export cannot take as an input; use "
        f"tensors, Python scalars, or lists/tuples/dicts of them.{hint}"
    )


def check_patches(patches: Any) -> None:
    from torch_onnx_conformance.exporter._capture_patches import CAPTURE_PATCHES

    if patches is None:  # the default: the patches made for the model's kind apply
        return
    if isinstance(patches, str) or not all(isinstance(p, str) for p in patches):
        raise InvalidExportArgumentsError(
            f"capture_patches must be a list of names, got {patches!r}"
        )
    unknown = [p for p in patches if p not in CAPTURE_PATCHES]
    if unknown:
        raise InvalidExportArgumentsError(
            f"unknown capture_patches {unknown}; available: {sorted(CAPTURE_PATCHES)}"
        )


def check_placement_provider(provider: str | None, report: bool) -> None:
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


def check_verify(verify: Any) -> None:
    if not any(verify is v or (isinstance(v, str) and verify == v) for v in VERIFY_VALUES):
        raise InvalidExportArgumentsError(
            f"verify={verify!r} is not one of False, True or 'strict' (strict raises on a "
            f"mismatch instead of warning)"
        )


def check_artifacts_dir(path: Path, why: str) -> None:
    if path.exists() and not path.is_dir():
        raise InvalidExportArgumentsError(f"artifacts_dir {path} exists and is not a folder")
    if not path.exists():
        if not path.parent.exists():
            raise InvalidExportArgumentsError(
                f"artifacts_dir {path}: its parent folder {path.parent} does not exist; create "
                f"it or choose another artifacts_dir"
            )
        try:
            path.mkdir()
        except OSError as exc:
            raise InvalidExportArgumentsError(
                f"cannot create artifacts_dir {path} for {why}: {exc.strerror}; choose a "
                f"writable artifacts_dir"
            ) from None
    try:
        # a real write: permission bits say nothing for root or on read-only mounts
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise InvalidExportArgumentsError(
            f"artifacts_dir {path} is not writable ({exc.strerror}), and {why} writes there; "
            f"choose a writable artifacts_dir"
        ) from None


def check_destination(f: Any) -> None:
    if f is None or isinstance(f, io.BytesIO):
        return
    if not isinstance(f, (str, os.PathLike)):
        raise InvalidExportArgumentsError(f"f must be a path or io.BytesIO, got {type(f).__name__}")
    parent = Path(f).parent
    if not parent.exists():
        raise InvalidExportArgumentsError(
            f"cannot write {f}: folder {parent} does not exist; create it first"
        )
    if Path(f).is_dir():
        raise InvalidExportArgumentsError(f"f={str(f)!r} is a folder; name the .onnx file")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InvalidExportArgumentsError(
            f"cannot write {f}: folder {parent} is not writable; choose another path"
        )


def check_names(names: Any, what: str) -> None:
    if names is None:
        return
    if isinstance(names, str) or not all(isinstance(n, str) for n in names):
        raise InvalidExportArgumentsError(f"{what} must be a list of strings, got {names!r}")
    if any(not n.strip() for n in names):
        raise InvalidExportArgumentsError(
            f"{what} has an empty name at position {[n.strip() for n in names].index('')} "
            f"({list(names)!r}); ONNX values need a non-empty name"
        )
    duplicates = sorted({n for n in names if list(names).count(n) > 1})
    if duplicates:
        raise InvalidExportArgumentsError(f"{what} has duplicates: {duplicates}")


def check_names_disjoint(input_names: Any, output_names: Any) -> None:
    shared = sorted(set(input_names or ()) & set(output_names or ()))
    if shared:
        raise InvalidExportArgumentsError(
            f"{shared} are both in input_names and output_names; an ONNX graph needs distinct "
            f"names for its inputs and outputs, rename one of them"
        )


def check_bytesio_size(f: Any, size: int, what: str) -> None:
    """Fail before the work when protobuf cannot hold the model in one buffer."""
    if isinstance(f, io.BytesIO) and size >= PROTOBUF_LIMIT_BYTES:
        raise InvalidExportArgumentsError(
            f"{what} about {size / 2**30:.2f} GiB, over protobuf's 2 GiB limit, so the model "
            f"cannot be written into an io.BytesIO; pass a file path as f, and the weights go "
            f"to an external .data file"
        )


def weight_bytes(model: Any) -> int:
    """Bytes of a module's parameters and buffers (shared ones once): the model's least size."""
    if isinstance(model, torch.export.ExportedProgram):
        tensors = list(model.state_dict.values()) + list(model.constants.values())
    elif isinstance(model, torch.nn.Module):
        tensors = list(model.parameters()) + list(model.buffers())
    else:
        return 0
    unique = {id(t): t for t in tensors if isinstance(t, torch.Tensor)}
    return sum(t.numel() * t.element_size() for t in unique.values())


# --------------------------------------------------------------- translations
def registry_with(table: Mapping[Any, Callable[..., Any]] | None) -> Registry:
    if table is None or (isinstance(table, Mapping) and not table):
        return DEFAULT_REGISTRY
    if not isinstance(table, Mapping):
        raise InvalidExportArgumentsError(
            f"custom_translation_table must be a dict {{OpOverload: function}}, got "
            f"{type(table).__name__}"
        )
    registry = DEFAULT_REGISTRY.copy()
    for key, fn in table.items():
        target = _translation_target(key)
        try:
            registry.add(target, custom_translation(target, _checked_translation(target, fn)))
        except TypeError as exc:
            raise InvalidExportArgumentsError(str(exc)) from None
    return registry


def _translation_target(key: Any) -> Any:
    """The FX target a custom_translation_table key names; a key no graph can contain is an error."""
    if isinstance(key, str):
        return _overload_named(key)
    if isinstance(key, (torch._ops.OpOverload, torch._ops.HigherOrderOperator)):
        return key
    if isinstance(key, torch._ops.OpOverloadPacket):
        return key  # custom_translation says which overload to use
    if callable(key) and getattr(key, "__module__", None) in ("_operator", "operator"):
        return key  # FX graphs call operator.* for symbolic int arithmetic
    raise InvalidExportArgumentsError(
        f"custom_translation_table key {key!r} names no op that can appear in an exported "
        f"graph; use an ATen overload such as torch.ops.aten.add.Tensor (or the string "
        f"'aten::add.Tensor')"
    )


def _overload_named(name: str) -> torch._ops.OpOverload:
    namespace, sep, rest = name.partition("::")
    op_name, _, overload = rest.partition(".")
    packet = getattr(getattr(torch.ops, namespace, None), op_name, None) if sep else None
    if not isinstance(packet, torch._ops.OpOverloadPacket):
        raise InvalidExportArgumentsError(
            f"custom_translation_table key {name!r} names no registered op; write "
            f"'namespace::op.overload' (e.g. 'aten::add.Tensor') or pass the OpOverload"
        )
    overload = overload or "default"
    if overload not in packet.overloads():
        raise InvalidExportArgumentsError(
            f"custom_translation_table key {name!r}: {namespace}::{op_name} has no overload "
            f"{overload!r}; its overloads are {sorted(packet.overloads())}"
        )
    return getattr(packet, overload)


def _checked_translation(target: Any, fn: Any) -> Any:
    """``fn`` wrapped so that a result other than ONNX values fails the export by name."""
    import onnxscript

    if not callable(fn) or isinstance(fn, onnxscript.values.OnnxFunction):
        return fn  # custom_translation rejects non-callables; OnnxFunctions return values

    @functools.wraps(fn)
    def checked(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        if not _are_values(result):
            raise InvalidExportArgumentsError(
                f"the custom translation {getattr(fn, '__qualname__', fn)!r} for {target} "
                f"returned {type(result).__name__} ({result!r:.80}); a translation must return "
                f"the ONNX values it built (one value, or a tuple of them)"
            )
        return result

    return checked


def _are_values(result: Any) -> bool:
    import onnx_ir as ir

    if isinstance(result, ir.Value):
        return True
    if isinstance(result, (list, tuple)):
        return all(r is None or isinstance(r, ir.Value) or _are_values(r) for r in result)
    return False


# ---------------------------------------------------------------- graph names
def apply_io_names(
    model: Any,
    input_names: Sequence[str] | None,
    output_names: Sequence[str] | None,
    plan: Sequence[Any] | None,
) -> None:
    """Name the graph's inputs and outputs, in torch.onnx's flattened order.

    ``input_names`` name the graph inputs in order, as torch.onnx does. Going past it: when
    there is one name per flattened input, baked-in inputs (static Python scalars, None) included,
    each name goes to its own input and the baked ones are skipped. Names beyond the graph's
    inputs or outputs are not used (torch.onnx ignores them silently; we warn).

    A returned weight becomes an output through an Identity, so the weight keeps its name
    (``apply_weights`` finds it by its state-dict name); bisection's FX-node-to-value map
    follows every value renamed here.
    """
    from torch_onnx_conformance.exporter import _metadata
    from torch_onnx_conformance.exporter._passes import alias_output

    graph = model.graph
    if input_names is None and output_names is None:
        return  # nothing to rename
    before = {v.name: v for v in _all_values(graph)}
    if input_names is not None and plan is not None:
        graph_count = sum(not entry.baked for entry in plan)
        if len(input_names) == len(plan) and len(plan) != graph_count:
            input_names = [n for n, entry in zip(input_names, plan) if not entry.baked]
    check_names_disjoint(input_names, output_names)
    taken = dict(before)
    for what, names, values in (
        ("input_names", input_names, list(graph.inputs)),
        ("output_names", output_names, list(graph.outputs)),
    ):
        if names is None:
            continue
        if len(names) > len(values):
            warnings.warn(
                f"{what} has {len(names)} names but the graph has {len(values)} "
                f"{what.split('_')[0]}s ({[v.name for v in values]}); the extra names "
                f"{list(names[len(values) :])} are not used. (Static Python scalars and None "
                f"inputs are baked into the graph and get no input.)",
                UserWarning,
                stacklevel=5,  # export()'s caller, through the pipeline
            )
        for index, (name, value) in enumerate(zip(names, values)):
            if value.name == name:
                continue
            if what == "output_names" and value.is_initializer():
                value = alias_output(graph, index)  # a returned weight keeps its name
            other = taken.get(name)
            if other is not None and other is not value:
                if other in graph.inputs or other in graph.outputs:
                    raise InvalidExportArgumentsError(
                        f"{what} gives {name!r} to graph {what.split('_')[0]} {value.name!r}, "
                        f"but {name!r} already names another graph input or output; choose "
                        f"distinct names"
                    )
                other.name = f"{name}__renamed"  # an inner value: free the name the user asked for
                taken[other.name] = other
            taken.pop(value.name, None)
            value.metadata_props.setdefault(_metadata.ORIGINAL_NAME, value.name or "")
            value.name = name
            taken[name] = value
    _follow_renames(graph, before)


def _follow_renames(graph: Any, before: Mapping[str, Any]) -> None:
    """Point bisection's FX-node-to-value map (``FX_VALUES_KEY``) at the values' new names."""
    from torch_onnx_conformance.exporter._translate import FX_VALUES_KEY

    fx_values = graph.meta.get(FX_VALUES_KEY)
    for node, name in (fx_values or {}).items():
        if name in before:
            fx_values[node] = before[name].name


def _all_values(graph: Any) -> list[Any]:
    import onnx_ir as ir

    values = list(graph.inputs) + list(graph.initializers.values())
    for node in ir.traversal.RecursiveGraphIterator(graph):
        values.extend(node.outputs)
    return values


def check_outputs(model: Any, program: torch.export.ExportedProgram) -> None:
    """A graph without outputs computes nothing: say what forward() returned instead.

    Returned None and Python numbers get no graph output, which shifts the positions of the
    outputs after them: a warning names them, as torch.onnx's log does.
    """
    from torch.export import graph_signature as gs

    returned = [
        spec.arg.value if isinstance(spec.arg, gs.ConstantArgument) else spec.arg
        for spec in program.graph_signature.output_specs
        if spec.kind == gs.OutputKind.USER_OUTPUT
    ]
    if len(model.graph.outputs):
        dropped = [
            f"output {i} ({value!r})"
            for i, value in enumerate(returned)
            if not isinstance(value, gs.TensorArgument | gs.SymIntArgument | gs.SymFloatArgument)
            and not isinstance(value, gs.SymBoolArgument)
        ]
        if dropped:
            warnings.warn(
                f"forward() returns {', '.join(dropped)}, which ONNX cannot hold: the graph has "
                f"no output for them, so its outputs are the other {len(model.graph.outputs)} "
                f"in order",
                UserWarning,
                stacklevel=5,  # export()'s caller, through the pipeline
            )
        return
    what = "nothing" if not returned or returned == [None] else f"only constants {returned!r}"
    raise InvalidExportArgumentsError(
        f"forward() returned {what}, so the ONNX model would have no outputs; return the "
        f"tensors the model computes (a constant result needs no model)"
    )


def meta_parameters(model: Any) -> list[str]:
    """Names of parameters and buffers on the meta device (no data to export)."""
    if not isinstance(model, torch.nn.Module):
        return []
    named = list(model.named_parameters()) + list(model.named_buffers())
    return [name for name, t in named if t.is_meta]
