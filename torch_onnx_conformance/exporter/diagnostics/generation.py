"""Greedy generation driven by an exported decoder: the check that prefill and decode in one
graph, with the cache the graph returns fed back in, pick the same tokens as eager.

A step is a call ``(input_ids, attention_mask, past_key_values, **extra) -> output`` whose output
holds the logits and the updated cache: a transformers ``ModelOutput`` (``.logits``,
``.past_key_values``, or ``.cache_params`` for mamba) or a tuple whose first tensor is the
logits and which holds one cache. Mamba-style models take their cache as ``cache_params``
(``cache_argument``); their graph decodes one token at a time, so their check starts from a
cache an eager prefill filled and feeds the prompt's last token.
The ONNX side calls the program with the same keywords and rebuilds its flat outputs with
``ONNXProgram.unflatten_outputs``, so the cache it feeds back is the one the graph computed.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch.utils import _pytree as pytree

from torch_onnx_conformance.exporter import _caches

#: How many tokens the check generates after the prompt.
NEW_TOKENS = 8
#: Where a ModelOutput holds the cache: attention models, then mamba-style ones.
_CACHE_FIELDS = ("past_key_values", "cache_params")


@dataclasses.dataclass
class GreedyCheck:
    """Tokens eager and ONNX picked, one row per batch item; ``problem`` is None when equal."""

    eager: torch.Tensor
    onnx: torch.Tensor
    problem: str | None


def empty_cache_like(cache: Any, batch: int | None = None) -> Any:
    """A cache of ``cache``'s layout (layer types, heads, head size) holding no tokens, for a
    prefill through a graph whose past length is an input; ``batch`` rows (default: as given).
    A StaticCache keeps its full length, zeros, with its write position at 0."""
    _caches.register(cache)
    leaves, spec = pytree.tree_flatten(cache)
    tensors = leaves[:-1] if _caches.is_static(cache) else leaves
    if not tensors or not all(isinstance(t, torch.Tensor) and t.dim() >= 2 for t in tensors):
        raise ValueError(
            f"{type(cache).__name__} does not flatten to key/value tensors; pass a filled "
            "transformers DynamicCache or StaticCache to copy the layout from"
        )
    rows = leaves[0].shape[0] if batch is None else batch
    if _caches.is_static(cache):  # full-length tensors, nothing written: position 0
        empty = [
            torch.zeros_like(leaf[:1]).expand(rows, *leaf.shape[1:]).contiguous()
            if leaf.dim()
            else torch.zeros_like(leaf)
            for leaf in leaves
        ]
        return pytree.tree_unflatten(empty, spec)
    empty = [
        leaf[:1].expand(rows, *leaf.shape[1:]).narrow(-2, 0, 0).contiguous() for leaf in leaves
    ]
    return pytree.tree_unflatten(empty, spec)


def logits_and_cache(output: Any) -> tuple[torch.Tensor, Any]:
    """The logits and the cache of a step's output (see the module docstring)."""
    for field in _CACHE_FIELDS:
        if hasattr(output, "logits") and getattr(output, field, None) is not None:
            return output.logits, getattr(output, field)
    if isinstance(output, (tuple, list)):
        tensors = [item for item in output if isinstance(item, torch.Tensor)]
        caches = [item for item in output if _caches.is_cache(item)]
        if tensors and len(caches) == 1:
            return tensors[0], caches[0]
    raise ValueError(
        f"a step returned {type(output).__name__}; greedy generation needs the logits and one "
        f"cache (a ModelOutput with .logits and .past_key_values or .cache_params, or a tuple "
        f"(logits, cache))"
    )


def greedy_tokens(
    step: Callable[..., Any],
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    past_key_values: Any,
    new_tokens: int = NEW_TOKENS,
    *,
    cache_argument: str = "past_key_values",
    **extra: Any,
) -> torch.Tensor:
    """``new_tokens`` tokens per row, each the argmax of the last position's logits: a prefill
    of the prompt on ``past_key_values``, then one-token decodes on the cache each step returns.
    """
    picked = []
    ids, mask, cache = input_ids, attention_mask, past_key_values
    for _ in range(new_tokens):
        logits, cache = logits_and_cache(
            step(input_ids=ids, attention_mask=mask, **{cache_argument: cache}, **extra)
        )
        ids = logits[:, -1].argmax(-1, keepdim=True).to(input_ids.dtype)
        picked.append(ids)
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
    return torch.cat(picked, dim=1)


def check_greedy(
    model: torch.nn.Module,
    onnx: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    past_key_values: Any,
    new_tokens: int = NEW_TOKENS,
    *,
    cache_argument: str = "past_key_values",
    **extra: Any,
) -> GreedyCheck:
    """Greedy tokens from eager ``model`` and from its ONNX export, from the same prompt and
    starting cache (``empty_cache_like`` for a prefill from nothing).

    ``onnx`` is an ``ONNXProgram`` of ``model``, or any callable taking the step's keywords and
    returning the graph's flat outputs (a session fed by name): those are rebuilt into the form
    eager returns for the same inputs.
    """
    with torch.no_grad():
        eager = greedy_tokens(
            model,
            input_ids,
            attention_mask,
            copy.deepcopy(past_key_values),  # eager caches grow in place
            new_tokens,
            cache_argument=cache_argument,
            **extra,
        )

    def onnx_step(**inputs: Any) -> Any:
        flat = onnx(**inputs)
        if hasattr(onnx, "unflatten_outputs"):
            return onnx.unflatten_outputs(flat)
        with torch.no_grad():
            spec = pytree.tree_flatten(model(**copy.deepcopy(inputs)))[1]
        return pytree.tree_unflatten([torch.as_tensor(out) for out in flat], spec)

    picked = greedy_tokens(
        onnx_step,
        input_ids,
        attention_mask,
        past_key_values,
        new_tokens,
        cache_argument=cache_argument,
        **extra,
    )
    problem = None
    if not torch.equal(eager, picked):
        row, column = (eager != picked).nonzero()[0].tolist()
        problem = (
            f"greedy generation differs at new token {column} of row {row}: eager picked "
            f"{eager[row, column].item()}, ONNX {picked[row, column].item()} (eager "
            f"{eager[row].tolist()}, ONNX {picked[row].tolist()})"
        )
    return GreedyCheck(eager, picked, problem)
