"""Deterministic re-initialisation of zoo models.

Random-init models from torchvision and transformers can produce outputs that make a
comparison pass without testing anything: a zero-initialised classifier head gives all zeros,
and deep BatchNorm stacks whose running statistics (0 mean, unit variance) do not match the
activations shrink the output to 1e-9 or less. Two steps avoid that:

* `reinit_` draws every parameter from a seeded generator with fan-in scaling, so a layer keeps
  its input's scale; norm gains sit near one and biases are small but non-zero, so no output is
  an exact constant by construction.
* `calibrate_batch_norm_` sets each BatchNorm's running statistics to the statistics of the
  activations it actually sees on the example inputs (one eval-mode pass, in order), so in eval
  mode every BatchNorm outputs roughly unit-scale values whatever came before it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

_BIAS_STD = 0.02
_FREE_PARAMETER_STD = 0.02
_NORM_GAIN_RANGE = (0.75, 1.25)
_RUNNING_VAR_RANGE = (0.5, 1.5)
_RUNNING_MEAN_STD = 0.1
_MIN_CALIBRATED_VAR = 1e-4

_CONV_TYPES = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
_CONV_TRANSPOSE_TYPES = (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
_BATCH_NORM_TYPES = (nn.modules.batchnorm._BatchNorm,)


def reinit_(module: nn.Module, seed: int = 0) -> nn.Module:
    """Re-initialise every parameter (and BatchNorm running statistics) of ``module`` in place.

    The result depends only on ``seed`` and the module's structure. Rules, by the module that
    owns the parameter:

    * convolutions: He-normal, std = sqrt(2 / fan_in) (most are followed by a ReLU-like unit);
    * linear layers and any other >= 2-D parameter whose name contains "weight" (LSTM/GRU,
      attention in-projections): std = sqrt(1 / fan_in), fan_in = numel / size(0);
    * embeddings: N(0, 1), the padding row kept at zero;
    * norms (any module whose class name contains "Norm"): gain U(0.75, 1.25), bias N(0, 0.02);
      BatchNorm running mean N(0, 0.1) and running variance U(0.5, 1.5);
    * biases everywhere: N(0, 0.02);
    * every other parameter (class tokens, position tables, layer scales): N(0, 0.02).
    """
    generator = torch.Generator().manual_seed(seed)
    for _, submodule in module.named_modules():
        for name, parameter in submodule.named_parameters(recurse=False):
            with torch.no_grad():
                parameter.copy_(_draw(submodule, name, parameter, generator))
        if isinstance(submodule, _BATCH_NORM_TYPES) and submodule.track_running_stats:
            _set_running_stats(submodule, generator)
    return module


def calibrate_batch_norm_(
    module: nn.Module, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None
) -> nn.Module:
    """Set every reached BatchNorm's running statistics to those of its input on one eval pass.

    BatchNorms run in order, each seeing activations already produced by calibrated layers, so
    the eval-mode output keeps a healthy scale through any depth. BatchNorms not reached by
    the pass keep the values `reinit_` gave them. The module is left in eval mode.
    """
    module.eval()
    handles = [
        submodule.register_forward_pre_hook(_match_running_stats_to_input)
        for submodule in module.modules()
        if isinstance(submodule, _BATCH_NORM_TYPES) and submodule.track_running_stats
    ]
    try:
        with torch.no_grad():
            module(*args, **(kwargs or {}))
    finally:
        for handle in handles:
            handle.remove()
    return module


def _draw(
    owner: nn.Module, name: str, parameter: torch.Tensor, generator: torch.Generator
) -> torch.Tensor:
    shape = parameter.shape
    if name == "bias" or name.startswith("bias_"):
        return _normal(shape, _BIAS_STD, generator)
    if isinstance(owner, _CONV_TYPES + _CONV_TRANSPOSE_TYPES) and name == "weight":
        return _normal(shape, math.sqrt(2.0 / _fan_in(parameter)), generator)
    if isinstance(owner, nn.Embedding) and name == "weight":
        weight = _normal(shape, 1.0, generator)
        if owner.padding_idx is not None:
            weight[owner.padding_idx] = 0
        return weight
    if _is_norm(owner) and name == "weight" and parameter.dim() == 1:
        low, high = _NORM_GAIN_RANGE
        return torch.rand(shape, generator=generator) * (high - low) + low
    if "weight" in name and parameter.dim() >= 2:
        return _normal(shape, math.sqrt(1.0 / _fan_in(parameter)), generator)
    return _normal(shape, _FREE_PARAMETER_STD, generator)


def _set_running_stats(norm: nn.Module, generator: torch.Generator) -> None:
    low, high = _RUNNING_VAR_RANGE
    with torch.no_grad():
        norm.running_mean.copy_(_normal(norm.running_mean.shape, _RUNNING_MEAN_STD, generator))
        norm.running_var.copy_(
            torch.rand(norm.running_var.shape, generator=generator) * (high - low) + low
        )


def _match_running_stats_to_input(norm: nn.Module, inputs: tuple[Any, ...]) -> None:
    activation = inputs[0]
    reduce_dims = [dim for dim in range(activation.dim()) if dim != 1]
    if activation.numel() == activation.shape[1]:
        # One value per channel (a 1x1 map of one image): its own mean would erase the channel
        # and its variance is 0, so the floor would amplify rounding 100x (SSDlite's extra
        # blocks: eager float32 and ONNX then disagree on detections). Keep the scale only.
        norm.running_mean.zero_()
        norm.running_var.fill_(float(activation.pow(2).mean().clamp_min(_MIN_CALIBRATED_VAR)))
        return
    mean = activation.mean(dim=reduce_dims)
    var = activation.var(dim=reduce_dims, unbiased=False).clamp_min(_MIN_CALIBRATED_VAR)
    norm.running_mean.copy_(mean)
    norm.running_var.copy_(var)


def _is_norm(module: nn.Module) -> bool:
    return "Norm" in type(module).__name__


def _fan_in(parameter: torch.Tensor) -> int:
    return max(1, parameter.numel() // max(1, parameter.shape[0]))


def _normal(shape: torch.Size, std: float, generator: torch.Generator) -> torch.Tensor:
    return torch.randn(shape, generator=generator) * std
