"""Dynamic shapes for op cases: which dimensions are dynamic, and the second input set.

Every dimension of size >= 2 is dynamic (sizes 0 and 1 are specialised by ``torch.export``). The
second input set grows each dynamic dimension; dimensions that share a size across the inputs
grow together, because ops usually need them to agree (matmul's inner dimension, a broadcast).
"""

from __future__ import annotations

import torch

#: The smallest size ``torch.export`` keeps symbolic.
MIN_DYNAMIC_SIZE = 2


def dynamic_dims(tensor: torch.Tensor) -> list[int]:
    return [d for d, size in enumerate(tensor.shape) if size >= MIN_DYNAMIC_SIZE]


def has_dynamic_dims(inputs: tuple[torch.Tensor, ...]) -> bool:
    return any(dynamic_dims(t) for t in inputs)


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


def grown_inputs(
    inputs: tuple[torch.Tensor, ...], delta: int, generator: torch.Generator
) -> tuple[torch.Tensor, ...]:
    """Inputs with each dynamic dimension grown by ``delta``.

    The original values fill the leading block, so index tensors stay in range and masks keep
    their pattern; new float elements are drawn uniformly between the tensor's finite min and
    max (domains such as "positive" survive), new integer and bool elements are drawn from the
    tensor's own values.
    """
    return tuple(_grow(t, delta, generator) for t in inputs)


def _grow(tensor: torch.Tensor, delta: int, generator: torch.Generator) -> torch.Tensor:
    dims = dynamic_dims(tensor)
    if not dims:
        return tensor.clone()
    shape = [size + delta if d in dims else size for d, size in enumerate(tensor.shape)]
    grown = _fill(tensor, shape, generator)
    grown[tuple(slice(0, size) for size in tensor.shape)] = tensor
    return grown


def _fill(tensor: torch.Tensor, shape: list[int], generator: torch.Generator) -> torch.Tensor:
    flat = tensor.reshape(-1)
    if flat.numel() == 0 or 0 in shape:
        return torch.zeros(shape, dtype=tensor.dtype)
    if tensor.is_floating_point():
        finite = flat[torch.isfinite(flat)].double()
        low, high = (finite.min().item(), finite.max().item()) if finite.numel() else (-1.0, 1.0)
        values = torch.rand(shape, generator=generator, dtype=torch.float64)
        return (low + (high - low) * values).to(tensor.dtype)
    picks = torch.randint(0, flat.numel(), shape, generator=generator)
    return flat[picks].clone()


def specialised_inputs(
    onnx_input_shapes: dict[str, list[int | str | None]],
    input_names: list[str],
    inputs: tuple[torch.Tensor, ...],
) -> list[str]:
    """Dimensions that were asked to be dynamic but have a fixed size in the ONNX model."""
    found = []
    for name, tensor in zip(input_names, inputs):
        shape = onnx_input_shapes.get(name)
        if shape is None:
            continue
        for d in dynamic_dims(tensor):
            if d < len(shape) and isinstance(shape[d], int):
                found.append(f"{name} dim {d} fixed to {shape[d]}")
    return found
