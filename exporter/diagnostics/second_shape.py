"""The second input shape: which dimensions grow and how the inputs grow.

``verify=True`` and the conformance harness both run a dynamic export again at a second input
shape, because that is what catches a dimension the export silently fixed. This module is the one
place that decides the sizes and fills the grown inputs.

Every dimension of size >= ``MIN_DYNAMIC_SIZE`` may be dynamic (sizes 0 and 1 are specialised by
``torch.export``). For inputs without a declared dynamic spec (op cases), dimensions that share a
size across the inputs form a group and grow together, because ops usually need them to agree
(matmul's inner dimension, a broadcast); ``growth_plans`` lists the fallbacks (all groups but
one, then one group at a time) for ops whose other sizes are tied to something fixed (a weight's
channel count, an ``output_size``, the number of outputs of ``unbind``).
"""

from __future__ import annotations

import torch

#: The smallest size ``torch.export`` keeps symbolic.
MIN_DYNAMIC_SIZE = 2
#: Growth tried for dynamic dimensions, in order, until eager accepts the inputs.
SECOND_SHAPE_DELTAS = (1, 2)


def dynamic_dims(tensor: torch.Tensor) -> list[int]:
    return [d for d, size in enumerate(tensor.shape) if size >= MIN_DYNAMIC_SIZE]


def has_dynamic_dims(inputs: tuple[torch.Tensor, ...]) -> bool:
    return any(dynamic_dims(t) for t in inputs)


def size_groups(inputs: tuple[torch.Tensor, ...]) -> list[int]:
    """The sizes of the dynamic dimensions, one per group of equal-sized dimensions."""
    return sorted({t.shape[d] for t in inputs for d in dynamic_dims(t)})


def growth_plans(inputs: tuple[torch.Tensor, ...]) -> list[frozenset[int] | None]:
    """Which size groups a second shape grows, in the order to try: ``None`` (every group), then
    every group but one, then each group alone. Larger plans come first so that the second shape
    changes as many dimensions as eager allows."""
    groups = size_groups(inputs)
    plans: list[frozenset[int] | None] = [None]
    if len(groups) > 2:
        plans += [frozenset(groups) - {g} for g in groups]
    if len(groups) > 1:
        plans += [frozenset({g}) for g in groups]
    return plans


def grown_dims(inputs: tuple[torch.Tensor, ...], sizes: frozenset[int] | None) -> set:
    """``(input index, dim)`` of every dimension a plan grows."""
    return {
        (i, d)
        for i, t in enumerate(inputs)
        for d in dynamic_dims(t)
        if sizes is None or t.shape[d] in sizes
    }


def grown_inputs(
    inputs: tuple[torch.Tensor, ...],
    delta: int,
    generator: torch.Generator,
    sizes: frozenset[int] | None = None,
) -> tuple[torch.Tensor, ...]:
    """Inputs with each dynamic dimension (of a size in ``sizes``, when given) grown by ``delta``
    (filled by ``grow_tensor``)."""
    grown = []
    for tensor in inputs:
        dims = [d for d in dynamic_dims(tensor) if sizes is None or tensor.shape[d] in sizes]
        if not dims:
            grown.append(tensor.clone())
            continue
        shape = [size + delta if d in dims else size for d, size in enumerate(tensor.shape)]
        grown.append(grow_tensor(tensor, shape, generator))
    return tuple(grown)


def grow_tensor(tensor: torch.Tensor, shape: list[int], generator: torch.Generator) -> torch.Tensor:
    """A tensor of ``shape`` whose leading block is ``tensor``'s.

    The original values fill the leading block, so index tensors stay in range and masks keep
    their pattern; a tensor sorted along its last dimension stays sorted; new float elements are
    drawn uniformly between the tensor's finite min and max (domains such as "positive"
    survive); new integer, bool and complex elements are drawn from the tensor's own values.
    """
    flat = tensor.detach().reshape(-1)
    if flat.numel() == 0 or 0 in shape:
        grown = torch.zeros(shape, dtype=tensor.dtype)
    elif tensor.is_floating_point():
        finite = flat[torch.isfinite(flat)].double()
        low, high = (finite.min().item(), finite.max().item()) if finite.numel() else (-1.0, 1.0)
        values = torch.rand(shape, generator=generator, dtype=torch.float64)
        grown = (low + (high - low) * values).to(tensor.dtype)
    else:
        grown = flat[torch.randint(0, flat.numel(), shape, generator=generator)].clone()
    block = tuple(slice(0, min(a, b)) for a, b in zip(tensor.shape, shape))
    grown[block] = tensor.detach()[block]
    if _sorted_last_dim(tensor):
        # Sorted inputs are a precondition (searchsorted's boundaries, embedding_bag's offsets):
        # they stay sorted, like a positive domain stays positive.
        grown = torch.sort(grown, dim=-1, stable=True).values
    return grown


def _sorted_last_dim(tensor: torch.Tensor) -> bool:
    if tensor.dim() == 0 or tensor.shape[-1] < 2 or tensor.dtype is torch.bool:
        return False
    if tensor.is_complex():
        return False
    return bool((tensor[..., 1:] >= tensor[..., :-1]).all())
