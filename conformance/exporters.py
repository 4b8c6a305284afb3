"""Exporter adapters: one call signature for our exporter and torch.onnx's two exporters.

Each adapter takes a ``forward(*tensors)`` module, its tensors, whether to export with dynamic
shapes and the target opset, and returns the ONNX model plus the names of its inputs in the order
of the tensors. torch.onnx appears here only as the exporter we compare against.
"""

from __future__ import annotations

import dataclasses
import io
import warnings
from collections.abc import Callable

import onnx

from conformance import shapes


@dataclasses.dataclass
class Exported:
    model: onnx.ModelProto
    #: Names of the graph inputs, in the order of the module's tensors. An exporter may drop an
    #: unused input from the graph; the runner feeds only the names the graph declares.
    input_names: list[str]


def input_names_for(inputs: tuple) -> list[str]:
    return [f"input_{i}" for i in range(len(inputs))]


def export_ours(module, inputs: tuple, *, dynamic: bool, opset: int) -> Exported:
    import exporter

    names = input_names_for(inputs)
    program = exporter.export(
        module,
        inputs,
        dynamic_shapes=shapes.dynamic_shapes_spec(inputs) if dynamic else None,
        input_names=names,
        opset_version=opset,
    )
    return Exported(program.model_proto, names)


def export_torch_dynamo(module, inputs: tuple, *, dynamic: bool, opset: int) -> Exported:
    import torch

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
    import torch

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


def export_case(exporter_name: str, module, inputs: tuple, *, dynamic: bool, opset: int):
    try:
        adapter = EXPORTERS[exporter_name]
    except KeyError:
        raise ValueError(
            f"unknown exporter {exporter_name!r}; choose one of {', '.join(EXPORTERS)}"
        ) from None
    return adapter(module, inputs, dynamic=dynamic, opset=opset)
