"""Dynamic shapes for op cases: how each exporter is asked for them, and which asked-for
dimensions the ONNX model fixed. Which dimensions are dynamic and how the second input set grows
is ``exporter.diagnostics.second_shape``'s, shared with ``verify=True``.
"""

from __future__ import annotations

import torch

from torch_onnx_conformance.exporter.diagnostics.second_shape import dynamic_dims, specialised_dims


def dynamic_shapes_spec(inputs: tuple[torch.Tensor, ...]) -> tuple:
    """``dynamic_shapes`` for a ``forward(*tensors)`` module: one extra tuple level because the
    tensors are collected by a single varargs parameter."""
    auto = torch.export.Dim.AUTO
    return (tuple({d: auto for d in dynamic_dims(t)} for t in inputs),)


def dynamic_axes(input_names: list[str], inputs: tuple[torch.Tensor, ...]) -> dict:
    """The TorchScript exporter's spelling of the same request."""
    return {
        name: {d: f"{name}_dim{d}" for d in dynamic_dims(t)}
        for name, t in zip(input_names, inputs)
        if dynamic_dims(t)
    }


def specialised_inputs(
    onnx_input_shapes: dict[str, list[int | str | None]],
    input_names: list[str],
    inputs: tuple[torch.Tensor, ...],
    among: set | None = None,
) -> list[str]:
    """Dimensions that were asked to be dynamic but have a fixed size in the ONNX model
    (only those in ``among``, ``(input index, dim)`` pairs, when given): every dimension
    ``dynamic_dims`` offers is asked for (``second_shape.specialised_dims`` judges)."""
    requested = {
        name: {d: None for d in dynamic_dims(tensor) if among is None or (i, d) in among}
        for i, (name, tensor) in enumerate(zip(input_names, inputs))
    }
    return specialised_dims(onnx_input_shapes, requested)
