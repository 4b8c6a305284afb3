"""Capture-time rewrites of library functions whose checks read tensor data in Python or C++.

A few torch functions validate their inputs by reading tensor values: ``F.gaussian_nll_loss``
branches on ``torch.any(var < 0)``, ``torch.cov`` (and ``torch.corrcoef``, which calls it)
compares reduced weights with ``at::equal`` inside its C++ composite kernel, and
``torch.narrow`` with a 0-d tensor ``start`` reads it with ``item()`` inside an op that
torch.export keeps whole, so the unbacked symbol it creates belongs to no graph node. All three
fail at capture (``GuardOnDataDependentSymNode``, ``DataDependentOutputException``,
``PendingUnbackedSymbolNotFound``) although the computations themselves are traceable.

``data_dependent_rewrites()`` is a ``TorchFunctionMode`` active only while our capture runs.
It answers those calls with equivalent code that computes the same values with tensor ops:

- a check that would raise becomes ``torch._assert_async`` (an assertion node in the exported
  program, checked when the program runs in torch; ONNX has no assertions, so the ONNX model
  skips it, as it skips every runtime assertion);
- ``cov``'s "degrees of freedom <= 0" clamp becomes ``clamp_min(0)`` (eager also warns; the
  warning is not reproduced);
- ``narrow``'s tensor ``start`` is read with ``item()`` in the traced code, as ATen does, so
  the symbol is bound by the ``item`` node.

Nothing is patched: library functions are untouched, and the mode sees only calls made while
capture runs. Calls made from C++ composite kernels (rare for these functions) are not seen.

The mode is not free: every torch function call of a capture (torch.export's own included)
passes through it, 5 to 10 % of a capture that rewrites nothing. So capture first runs without
it, and keeps that program when no node of it came from a function the mode rewrites
(:func:`calls_rewritten`, from the ``torch_fn`` that torch.export records on every node: the
function the model called, as the mode would have seen it); otherwise, or when that capture
fails (each of the rewrites exists because capture fails without it), it captures again with
the mode, and the program is the one the mode made.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode


def _cov(
    input: torch.Tensor,
    *,
    correction: int = 1,
    fweights: torch.Tensor | None = None,
    aweights: torch.Tensor | None = None,
) -> torch.Tensor:
    """torch.cov as ATen's composite computes it, with data checks as assertions."""
    if input.dim() > 2:
        raise RuntimeError(
            "cov(): expected input to have two or fewer dimensions but got an input with "
            f"{input.dim()} dimensions"
        )
    if input.dtype == torch.bool:
        raise RuntimeError("cov(): bool dtype is not supported for input")
    observations = input if input.dim() == 2 else input.reshape(1, -1)
    count = observations.shape[1]
    weights = None
    if fweights is not None:
        if fweights.dim() > 1 or fweights.dtype.is_floating_point or fweights.is_complex():
            raise RuntimeError(
                "cov(): expected fweights to be a 0-d or 1-d tensor of integral dtype"
            )
        torch._check(fweights.numel() == count, lambda: "cov(): fweights size mismatch")
        torch._assert_async(torch.all(fweights >= 0), "cov(): fweights cannot be negative")
        weights = fweights
    if aweights is not None:
        if aweights.dim() > 1 or not aweights.dtype.is_floating_point:
            raise RuntimeError(
                "cov(): expected aweights to be a 0-d or 1-d tensor of floating dtype"
            )
        torch._check(aweights.numel() == count, lambda: "cov(): aweights size mismatch")
        torch._assert_async(torch.all(aweights >= 0), "cov(): aweights cannot be negative")
        weights = aweights if weights is None else weights * aweights
    if weights is None:
        weight_sum = torch.scalar_tensor(count, dtype=torch.int64, device=input.device)
        mean = observations.sum(1) / weight_sum
    else:
        weight_sum = weights.sum()
        torch._assert_async(weight_sum != 0, "cov(): weights sum to zero, can't be normalized")
        mean = (observations * weights).sum(1) / weight_sum
    if weights is not None and correction != 0 and aweights is not None:
        norm_factor = weight_sum - correction * (weights * aweights).sum() / weight_sum
    else:
        norm_factor = weight_sum - correction
    # ATen zeroes a non-positive factor (and warns); clamp_min keeps NaN as ATen does.
    norm_factor = norm_factor.clamp_min(0)
    centered = observations - mean.unsqueeze(1)
    weighted = centered if weights is None else centered * weights
    product = torch.mm(centered, weighted.t().conj())
    return torch.true_divide(product, norm_factor).squeeze()


def _corrcoef(input: torch.Tensor) -> torch.Tensor:
    """torch.corrcoef as ATen's composite computes it, on top of ``_cov``."""
    if input.dim() > 2:
        raise RuntimeError(
            "corrcoef(): expected input to have two or fewer dimensions but got an input with "
            f"{input.dim()} dimensions"
        )
    c = _cov(input)
    if c.dim() == 0:
        return c / c  # NaN for a 0, inf or NaN variance, 1 otherwise
    d = c.diagonal()
    stddev = torch.sqrt(d.real if d.is_complex() else d)
    c = c / stddev.reshape(-1, 1)
    c = c / stddev.reshape(1, -1)
    if c.is_complex():
        return torch.complex(c.real.clip(-1, 1), c.imag.clip(-1, 1))
    return c.clip(-1, 1)


def _gaussian_nll_loss(
    input: torch.Tensor,
    target: torch.Tensor,
    var: torch.Tensor,
    full: bool = False,
    eps: float = 1e-6,
    reduction: str = "mean",
) -> torch.Tensor:
    """F.gaussian_nll_loss for a tensor ``var``, its negative-variance check an assertion."""
    torch._assert_async(torch.logical_not(torch.any(var < 0)), "var has negative entry/entries")
    if var.size() != input.size():
        if input.size()[:-1] == var.size():
            var = torch.unsqueeze(var, -1)
        elif (
            input.ndim == var.ndim
            and sum(y for x, y in zip(input.size(), var.size(), strict=True) if x != y) == 1
        ):
            pass
        else:
            raise ValueError("var is of incorrect size")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(reduction + " is not valid")
    var = var.clone()
    with torch.no_grad():
        var.clamp_(min=eps)
    loss = 0.5 * (torch.log(var) + (input - target) ** 2 / var)
    if full:
        loss += 0.5 * math.log(2 * math.pi)
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


def _narrow(input: torch.Tensor, dim: int, start: Any, length: int) -> torch.Tensor:
    if isinstance(start, torch.Tensor):
        if start.dim() != 0 or start.dtype.is_floating_point or start.is_complex():
            raise RuntimeError("start must be an 0-dim integral Tensor.")
        start = start.item()
    return torch.narrow(input, dim, start, length)


def _call_kwargs(fn: Callable[..., Any]) -> Callable[..., Any]:
    return lambda args, kwargs: fn(*args, **kwargs)


_REWRITES: dict[Any, Callable[[tuple, dict], Any]] = {
    torch.cov: _call_kwargs(_cov),
    torch.Tensor.cov: _call_kwargs(_cov),
    torch.corrcoef: _call_kwargs(_corrcoef),
    torch.Tensor.corrcoef: _call_kwargs(_corrcoef),
    F.gaussian_nll_loss: _call_kwargs(_gaussian_nll_loss),
    torch.narrow: _call_kwargs(_narrow),
    torch.Tensor.narrow: _call_kwargs(_narrow),
}


def _needs_rewrite(func: Any, args: tuple, kwargs: dict) -> bool:
    if func in (torch.narrow, torch.Tensor.narrow):
        start = args[2] if len(args) > 2 else kwargs.get("start")
        return isinstance(start, torch.Tensor)
    if func is F.gaussian_nll_loss:
        var = args[2] if len(args) > 2 else kwargs.get("var")
        return isinstance(var, torch.Tensor)
    return func in _REWRITES


#: The ``__name__`` of every function the mode rewrites (``torch_fn`` metadata names it so).
_REWRITTEN_NAMES = frozenset(func.__name__ for func in _REWRITES)


def calls_rewritten(program: torch.export.ExportedProgram) -> bool:
    """Whether a node of ``program`` (control-flow subgraphs included) came from a call of a
    function that :class:`DataDependentRewrites` rewrites, as its ``torch_fn`` metadata
    (``("narrow_1", "method_descriptor.narrow")``) names it. Any such call counts, whether the
    mode would have rewritten it or not (``narrow`` with an int start)."""
    for module in program.graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            torch_fn = node.meta.get("torch_fn")
            if torch_fn and torch_fn[1].rpartition(".")[2] in _REWRITTEN_NAMES:
                return True
    return False


class DataDependentRewrites(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _needs_rewrite(func, args, kwargs):
            return _REWRITES[func](args, kwargs)
        return func(*args, **kwargs)


@contextlib.contextmanager
def data_dependent_rewrites() -> Iterator[None]:
    with DataDependentRewrites():
        yield
