"""Exporter adapters: one call signature for our exporter and torch.onnx's two exporters.

Op cases (``export_case``): each adapter takes a ``forward(*tensors)`` module, its tensors, whether to export with dynamic
shapes and the target opset, and returns the ONNX model plus the names of its inputs in the order
of the tensors.

Model cases (``export_model``): all three take the model's real ``(args, kwargs)`` and the
harness's input names, and write ``path`` (external data beside it for big models). ``ours`` and
``torch-dynamo`` get the case's dynamic shapes tree with user axis names as it is;
``torch-script`` gets the same request as ``dynamic_axes`` keyed by input name, and ``optimize``
becomes its constant folding switch.

torch.onnx appears here only as the exporter we compare against, run as shipped (no capture
patches: they are ours).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import io
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx
import torch

from torch_onnx_conformance.conformance import flat_io, shapes
from torch_onnx_conformance.conformance.flat_io import FlatInput


@dataclasses.dataclass
class Exported:
    model: onnx.ModelProto
    #: Names of the graph inputs, in the order of the module's tensors. An exporter may drop an
    #: unused input from the graph; the runner feeds only the names the graph declares.
    input_names: list[str]


def input_names_for(inputs: tuple) -> list[str]:
    return [f"input_{i}" for i in range(len(inputs))]


#: How many captures a case process keeps for the next cases of the same base (their other
#: opsets: ``case.base_id``); 0 turns the reuse off. Only our exporter takes them: torch.onnx's
#: exporters capture for themselves.
CAPTURE_CACHE_ENV = "CONFORMANCE_CAPTURE_CACHE"
DEFAULT_CAPTURE_CACHE = 4


@functools.cache
def capture_cache():
    """This process's ``exporter.CaptureCache`` (its size from ``CONFORMANCE_CAPTURE_CACHE``)."""
    from torch_onnx_conformance import exporter

    text = os.environ.get(CAPTURE_CACHE_ENV, str(DEFAULT_CAPTURE_CACHE))
    try:
        size = int(text)
    except ValueError:
        raise ValueError(
            f"{CAPTURE_CACHE_ENV}={text!r}: expected a count of captures, e.g. 4 or 0"
        ) from None
    return exporter.CaptureCache(maxsize=max(size, 0))


def export_ours(
    module, inputs: tuple, *, dynamic: bool, opset: int, capture_key: str | None = None
) -> Exported:
    """Our export; cases under one ``capture_key`` (the same module and inputs) capture once
    per process and translate that capture at their own opset."""
    from torch_onnx_conformance import exporter

    names = input_names_for(inputs)
    reuse = {}
    if capture_key is not None and capture_cache().maxsize:
        reuse = {"capture_cache": capture_cache(), "capture_key": capture_key}
    program = exporter.export(
        module,
        inputs,
        dynamic_shapes=shapes.dynamic_shapes_spec(inputs) if dynamic else None,
        input_names=names,
        opset_version=opset,
        **reuse,
    )
    return Exported(program.model_proto, names)


def export_torch_dynamo(module, inputs: tuple, *, dynamic: bool, opset: int) -> Exported:
    names = input_names_for(inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            module,
            inputs,
            dynamo=True,
            dynamic_shapes=shapes.dynamic_shapes_spec(inputs) if dynamic else None,
            input_names=names,
            opset_version=opset,
            verbose=False,
        )
    return Exported(program.model_proto, names)


def export_torch_script(module, inputs: tuple, *, dynamic: bool, opset: int) -> Exported:
    names = input_names_for(inputs)
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            inputs,
            buffer,
            dynamo=False,
            input_names=names,
            dynamic_axes=shapes.dynamic_axes(names, inputs) if dynamic else None,
            opset_version=opset,
            verbose=False,
        )
    return Exported(onnx.load_from_string(buffer.getvalue()), names)


EXPORTERS: dict[str, Callable[..., Exported]] = {
    "ours": export_ours,
    "torch-dynamo": export_torch_dynamo,
    "torch-script": export_torch_script,
}


def export_case(
    exporter_name: str,
    module,
    inputs: tuple,
    *,
    dynamic: bool,
    opset: int,
    capture_key: str | None = None,
):
    """``capture_key``: what names the module and inputs across opsets (``export_ours``)."""
    try:
        adapter = EXPORTERS[exporter_name]
    except KeyError:
        raise ValueError(
            f"unknown exporter {exporter_name!r}; choose one of {', '.join(EXPORTERS)}"
        ) from None
    if adapter is export_ours:
        return adapter(module, inputs, dynamic=dynamic, opset=opset, capture_key=capture_key)
    return adapter(module, inputs, dynamic=dynamic, opset=opset)


def export_model(
    exporter_name: str,
    module: torch.nn.Module,
    args: tuple,
    kwargs: dict[str, Any],
    *,
    inputs: list[FlatInput],
    dynamic_shapes: Any,
    opset: int,
    optimize: bool,
    path: Path,
    custom_translation_table: dict | None = None,
    capture: str | None = None,
) -> list[str]:
    """Export into ``path``; returns the names of the capture rewrites ours applied (the
    torchvision-detection patches it picks by default), empty for the other exporters."""
    names = [item.name for item in inputs]
    if exporter_name == "torch-script":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                module,
                args,
                str(path),
                kwargs=kwargs or None,
                dynamo=False,
                input_names=names,
                dynamic_axes=flat_io.dynamic_axes(inputs) if dynamic_shapes is not None else None,
                opset_version=opset,
                do_constant_folding=optimize,
                verbose=False,
            )
        return []
    # ours and torch.onnx's dynamo exporter take the same call.
    request = dict(
        kwargs=kwargs,
        dynamic_shapes=dynamic_shapes,
        input_names=names,
        opset_version=opset,
        optimize=optimize,
        custom_translation_table=custom_translation_table,
    )
    if exporter_name == "ours":
        from torch_onnx_conformance import exporter

        patches: contextlib.AbstractContextManager = contextlib.nullcontext()
        if capture is not None:
            if "capture_patches" in inspect.signature(exporter.export).parameters:
                request["capture_patches"] = [capture]
            else:
                patches = _capture_patch(capture)()
        with patches:
            program = exporter.export(module, args, **request)
    elif exporter_name == "torch-dynamo":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = torch.onnx.export(module, args, dynamo=True, verbose=False, **request)
    else:
        raise ValueError(
            f"unknown exporter {exporter_name!r}; choose one of ours, torch-dynamo, torch-script"
        )
    program.save(str(path))
    record = getattr(program, "record", None)
    return list(getattr(record, "capture_patches", None) or [])


def _capture_patch(name: str) -> Callable[[], contextlib.AbstractContextManager]:
    from torch_onnx_conformance.exporter._capture_patches import CAPTURE_PATCHES

    try:
        return CAPTURE_PATCHES[name]
    except KeyError:
        raise ValueError(
            f"the model case asks for capture strategy {name!r}, which the exporter does not "
            f"offer; known: {', '.join(CAPTURE_PATCHES)}"
        ) from None
