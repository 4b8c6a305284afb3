"""Vacuity: is an eager output informative enough for a comparison to mean anything?

A comparison ``|actual - expected| <= atol + rtol * |expected|`` passes for any exporter when
the expected output is all zeros, tiny next to ``atol``, or one value repeated (an exporter
that folds the model to a constant matches it). Such a case is reported as ``vacuous``,
never as a pass.

The rule, per output tensor (``None`` and non-tensor outputs are ignored):

* floating or complex tensors: let ``scale = max |x|`` over the finite elements and
  ``spread = std(x)`` (population std over the finite elements). The tensor is informative
  when ``scale > abs_threshold`` and, for more than one element, ``spread > rel_threshold *
  scale``. A one-element tensor is informative when its magnitude exceeds ``abs_threshold``.
* integer and bool tensors: informative when they hold at least two distinct values, or one
  element that is non-zero.
* empty tensors are never informative.

``is_vacuous(outputs)`` is True when no output tensor is informative: one informative output
(for example logits next to a constant mask) is enough for the comparison to test something.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.utils._pytree as pytree

DEFAULT_REL_THRESHOLD = 1e-4
DEFAULT_ABS_THRESHOLD = 1e-6


def output_scale(tensor: torch.Tensor) -> float:
    """The largest finite magnitude in ``tensor`` (0.0 when it has no finite element).

    This is the denominator for errors reported relative to the output's size.
    """
    values = _finite_values(tensor)
    if values.numel() == 0:
        return 0.0
    if not (values.is_floating_point() or values.is_complex()):
        values = values.to(torch.float64)
    return float(values.abs().max())


def output_spread(tensor: torch.Tensor) -> float:
    """Population standard deviation of the finite elements (0.0 for fewer than two)."""
    values = _finite_values(tensor)
    if values.numel() < 2:
        return 0.0
    if values.is_complex():
        values = torch.view_as_real(values)
    return float(values.to(torch.float64).std(unbiased=False))


def is_informative(
    tensor: torch.Tensor,
    rel_threshold: float = DEFAULT_REL_THRESHOLD,
    abs_threshold: float = DEFAULT_ABS_THRESHOLD,
) -> bool:
    """Whether a comparison against ``tensor`` can fail for a wrong result (see module doc)."""
    if tensor.numel() == 0:
        return False
    if not (tensor.is_floating_point() or tensor.is_complex()):
        if tensor.numel() == 1:
            return bool(tensor.reshape(()) != 0)
        flat = tensor.reshape(-1)
        return bool((flat != flat[0]).any())
    scale = output_scale(tensor)
    if scale <= abs_threshold:
        return False
    if _finite_values(tensor).numel() == 1:
        return True
    return output_spread(tensor) > rel_threshold * scale


def is_vacuous(
    outputs: Any,
    rel_threshold: float = DEFAULT_REL_THRESHOLD,
    abs_threshold: float = DEFAULT_ABS_THRESHOLD,
) -> bool:
    """True when no tensor in the (nested) ``outputs`` is informative; see the module doc."""
    tensors = [leaf for leaf in pytree.tree_leaves(outputs) if isinstance(leaf, torch.Tensor)]
    return not any(is_informative(t, rel_threshold, abs_threshold) for t in tensors)


def describe(outputs: Any) -> list[dict[str, Any]]:
    """Per-output scale and spread, for messages that explain a vacuity verdict."""
    rows = []
    for path, leaf in pytree.tree_flatten_with_path(outputs)[0]:
        if isinstance(leaf, torch.Tensor):
            rows.append(
                {
                    "path": pytree.keystr(path),
                    "shape": tuple(leaf.shape),
                    "dtype": str(leaf.dtype).removeprefix("torch."),
                    "scale": output_scale(leaf) if leaf.is_floating_point() else None,
                    "spread": output_spread(leaf) if leaf.is_floating_point() else None,
                    "informative": is_informative(leaf),
                }
            )
    return rows


def _finite_values(tensor: torch.Tensor) -> torch.Tensor:
    flat = tensor.detach().reshape(-1)
    if flat.is_floating_point() or flat.is_complex():
        return flat[torch.isfinite(flat)]
    return flat
