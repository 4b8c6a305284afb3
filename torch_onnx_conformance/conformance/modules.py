"""Turning a call (function, arguments) into an ``nn.Module`` whose inputs are exactly the tensors.

Tensors become graph inputs in pytree leaf order (so tensor lists are flattened); every other
argument (ints, floats, dtypes, strings, None, ...) is baked into the module as a constant, because
a Python scalar passed to ``torch.export`` would turn into a symbolic input. Outputs are flattened
to a tuple of tensors so that eager and ONNX outputs line up one to one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils import _pytree as pytree


class CallModule(torch.nn.Module):
    """``forward(*tensors)`` rebuilds the original call from the tensors and the baked constants."""

    def __init__(self, fn: Callable, spec: pytree.TreeSpec, leaves: list[Any], inplace: bool):
        super().__init__()
        self.fn = fn
        self.spec = spec
        self.is_tensor = [isinstance(leaf, torch.Tensor) for leaf in leaves]
        # Tensor slots hold None so the module keeps no copy of the inputs.
        self.constants = [None if t else leaf for t, leaf in zip(self.is_tensor, leaves)]
        self.inplace = inplace

    def forward(self, *tensors: torch.Tensor):
        supplied = iter(tensors)
        leaves = [next(supplied) if t else c for t, c in zip(self.is_tensor, self.constants)]
        args, kwargs = pytree.tree_unflatten(leaves, self.spec)
        if self.inplace:
            # The in-place variant mutates its first argument: mutate a copy and return it, so
            # the graph input itself is never written to.
            args = (args[0].clone(), *args[1:])
        return flatten_outputs(self.fn(*args, **kwargs))


_SYMBOLIC_DTYPES = {
    torch.SymBool: torch.bool,
    torch.SymInt: torch.int64,
    torch.SymFloat: torch.float32,
}


def split_call(args: tuple, kwargs: dict) -> tuple[pytree.TreeSpec, list[Any], tuple]:
    """Flatten ``(args, kwargs)``; returns the spec, the leaves (tensors cloned) and the tensors."""
    leaves, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    leaves = [leaf.clone() if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]
    tensors = tuple(leaf for leaf in leaves if isinstance(leaf, torch.Tensor))
    return spec, leaves, tensors


def flatten_outputs(result: Any) -> tuple[torch.Tensor, ...]:
    """Flatten any op result to tensors: None dropped, Python numbers made tensors, complex
    tensors viewed as real (ONNX has no complex outputs)."""
    flat = []
    for leaf in pytree.tree_leaves(result):
        if leaf is None:
            continue
        if isinstance(leaf, (bool, int, float)):
            leaf = torch.tensor(leaf)
        elif isinstance(leaf, (torch.SymBool, torch.SymInt, torch.SymFloat)):
            # While tracing with dynamic shapes a size is symbolic: same dtype as torch.tensor()
            # gives its concrete value in eager.
            leaf = torch.scalar_tensor(leaf, dtype=_SYMBOLIC_DTYPES[type(leaf)])
        if not isinstance(leaf, torch.Tensor):
            raise TypeError(f"the op returned a {type(leaf).__name__}, which is not a tensor")
        if leaf.is_complex():
            leaf = torch.view_as_real(leaf.resolve_conj())
        flat.append(leaf)
    return tuple(flat)


def clone_tensors(tensors: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    return tuple(t.clone() for t in tensors)
