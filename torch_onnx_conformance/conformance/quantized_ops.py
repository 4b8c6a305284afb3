"""Hand-written op infos for the quantization ops PyTorch's OpInfo database lacks: PT2E's
``quantized_decomposed`` quantize/dequantize (per tensor with every overload, per channel, per
token, per channel group) and choose_qparams, as op cases beside the OpInfo ones
(``op_cases.op_infos`` lists both); and ATen's fake-quantize family (QAT), named after its ops
(``fake_quantize_per_tensor_affine.uint8``, ``--ops '*fake_quantize*'``).

Each entry is one op and one quantization scheme, named ``quantized_decomposed.<op>.<scheme>``
(``--ops 'quantized_decomposed.*'``), with at most ``op_cases.DEFAULT_SAMPLES`` samples so that
the default run takes all of them: int8, uint8, int4 (PT2E's convention: int8 storage with the
range -8..7; ONNX's INT4 type is not involved, so every opset runs it), ranges narrower than the
dtype, inputs exactly on half steps (ties round half to even in torch and in ONNX), nonzero
zero points, int32 (bias) dequantization, and the ``.tensor``/``.tensor2`` overloads whose
parameters are graph inputs (dynamic quantization). Per-channel scales and zero points are
constants of the module, as in a converted PT2E model.

An info has what the harness reads of an OpInfo (``name``, ``variant_test_name``, ``op``,
``sample_inputs``, ``supported_dtypes``, ``inplace_variant``, ``has_nondeterministic_output``).
Samples draw their values from torch's global generator, which ``op_cases`` seeds per op.
Quantized outputs are judged by ``compare.compare_codes`` (``[codes]`` in ``tolerances.toml``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import torch

PREFIX = "quantized_decomposed."


@dataclasses.dataclass(frozen=True)
class Sample:
    """An OpInfo ``SampleInput``'s shape: the first argument, the others, the keywords."""

    input: Any
    args: tuple = ()
    kwargs: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class QuantOpInfo:
    name: str
    variant_test_name: str
    op: Callable
    samples: Callable[[], list[Sample]]
    inplace_variant = None
    has_nondeterministic_output = False

    def supported_dtypes(self, device: str) -> set:
        # The case dtype is the float side: quantize's input, dequantize's output.
        return {torch.float32}

    def sample_inputs(self, device: str, dtype, requires_grad: bool = False) -> list[Sample]:
        return self.samples()


@functools.cache
def _qd():
    import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers the library)

    return torch.ops.quantized_decomposed


# --------------------------------------------------------------------- callables
def _overload(name: str, overload: str = "default") -> Callable:
    """A callable for ``torch.ops.quantized_decomposed.<name>.<overload>`` that registers the
    library on its first call (in the case's process)."""

    def call(*args):
        return getattr(getattr(_qd(), name), overload)(*args)

    call.__name__ = call.__qualname__ = f"{name}_{overload}"
    return call


quantize_per_tensor = _overload("quantize_per_tensor")
quantize_per_tensor_tensor = _overload("quantize_per_tensor", "tensor")
quantize_per_tensor_tensor2 = _overload("quantize_per_tensor", "tensor2")
dequantize_per_tensor = _overload("dequantize_per_tensor")
dequantize_per_tensor_tensor = _overload("dequantize_per_tensor", "tensor")
dequantize_per_tensor_tensor2 = _overload("dequantize_per_tensor", "tensor2")
choose_qparams = _overload("choose_qparams", "tensor")
choose_qparams_symmetric = _overload("choose_qparams_symmetric", "tensor")
choose_qparams_per_token = _overload("choose_qparams_per_token")
choose_qparams_per_token_asymmetric = _overload("choose_qparams_per_token_asymmetric")
quantize_per_token = _overload("quantize_per_token")
dequantize_per_token = _overload("dequantize_per_token")


# Per-channel parameters arrive as tuples of numbers (baked into the module, like a converted
# PT2E model's constants) and become tensors here.
def _channel_params(scales, zero_points):
    return (
        torch.tensor(scales, dtype=torch.float32),
        torch.tensor(zero_points, dtype=torch.int64),
    )


def quantize_per_channel(x, scales, zero_points, *args):
    return _qd().quantize_per_channel(x, *_channel_params(scales, zero_points), *args)


def dequantize_per_channel(q, scales, zero_points, *args):
    return _qd().dequantize_per_channel(q, *_channel_params(scales, zero_points), *args)


def quantize_per_channel_group(x, scales, zero_points, *args):
    return _qd().quantize_per_channel_group(x, *_channel_params(scales, zero_points), *args)


def dequantize_per_channel_group(q, scales, zero_points, *args):
    return _qd().dequantize_per_channel_group(q, *_channel_params(scales, zero_points), *args)


# ------------------------------------------------------------------------ values
INT8 = (-128, 127, torch.int8)
UINT8 = (0, 255, torch.uint8)
INT4 = (-8, 7, torch.int8)  # PT2E's int4: int8 storage, range -8..7
NARROW_INT8 = (-127, 127, torch.int8)  # symmetric weights
UINT4 = (0, 15, torch.uint8)
INT32 = (-(2**31), 2**31 - 1, torch.int32)  # a bias: activation scale x weight scale, zp 0
EPS = float(torch.finfo(torch.float32).eps)


def _floats(*shape: int, spread: float = 3.0) -> torch.Tensor:
    return torch.randn(shape) * spread


def _codes(low: int, high: int, dtype: torch.dtype, *shape: int) -> torch.Tensor:
    return torch.randint(low, high + 1, shape, dtype=torch.int64).to(dtype)


def _half_steps(scale: float, count: int) -> torch.Tensor:
    """Values k/2 steps of ``scale`` (float32-exact for the scales used): every other one a tie
    between two codes, on both signs."""
    return (torch.arange(-count, count, dtype=torch.float32) * 0.5 * scale).reshape(8, -1)


def _channel_values(count: int, low: float, high: float) -> tuple[float, ...]:
    return tuple(float(v) for v in torch.linspace(low, high, count, dtype=torch.float32))


def _per_tensor_samples(low, high, dtype, scale, zero_point, *, quantize: bool) -> Callable:
    def samples():
        make = (lambda *s: _floats(*s)) if quantize else (lambda *s: _codes(low, high, dtype, *s))
        params = (scale, zero_point, low, high, dtype)
        return [Sample(make(4, 16), params), Sample(make(), params), Sample(make(0, 8), params)]

    return samples


def _per_channel_samples(low, high, dtype, zero_point, *, quantize: bool) -> Callable:
    """A conv weight ``[8, 3, 3, 3]`` along axis 0, an activation ``[2, 5, 4, 3]`` along axis 1,
    a linear weight ``[6, 10]`` along its last axis. Zero points step from ``zero_point`` by
    channel, except for int32 (a bias: zero points 0, as ONNX requires for int32)."""
    step = 0 if dtype == torch.int32 else 1

    def samples():
        found = []
        for shape, axis in (((8, 3, 3, 3), 0), ((2, 5, 4, 3), 1), ((6, 10), -1)):
            channels = shape[axis]
            scales = _channel_values(channels, 0.01, 0.08)
            zps = tuple(zero_point + step * (k % 3) for k in range(channels))
            value = _floats(*shape) if quantize else _codes(low, high, dtype, *shape)
            found.append(Sample(value, (scales, zps, axis, low, high, dtype)))
        return found

    return samples


def _ties_samples():
    # Scales whose float32 inverse gives torch's x * (1/scale) the same tie as ONNX's x / scale
    # (0.5, 0.25 exactly; 0.1 checked): ties must round half to even in both, exactly.
    return [
        Sample(_half_steps(0.5, 64), (0.5, 0, *INT8)),
        Sample(_half_steps(0.25, 64), (0.25, 101, *UINT8)),
        Sample(_half_steps(0.1, 64), (0.1, -3, *INT8)),
    ]


def _tensor_qparams_samples(*, quantize: bool, bounds_too: bool) -> Callable:
    """Parameters as graph inputs, as dynamic quantization computes them: a float64 ``[1]``
    scale and int64 ``[1]`` zero point (choose_qparams' outputs), and 0-d float32 ones."""

    def samples():
        found = []
        for scale, zp, (low, high, dtype) in (
            (torch.tensor([0.04], dtype=torch.float64), torch.tensor([10]), UINT8),
            (torch.tensor(0.03), torch.tensor(-2), INT8),
        ):
            value = _floats(4, 16) if quantize else _codes(low, high, dtype, 4, 16)
            bounds = (torch.tensor(low), torch.tensor(high)) if bounds_too else (low, high)
            found.append(Sample(value, (scale, zp, *bounds, dtype)))
        return found

    return samples


def _choose_samples(low, high, dtype) -> Callable:
    def samples():
        # an all-positive input (the range widens to hold 0) and one across 0
        return [
            Sample(_floats(4, 16) + 0.5, (low, high, EPS, dtype)),
            Sample(torch.rand(3, 8) * 4.0 + 1.0, (low, high, EPS, dtype)),
        ]

    return samples


def _per_token_samples(*, quantize: bool) -> Callable:
    """Tokens along the last axis: float64 ``[..., 1]`` scales and int64 zero points, as
    ``choose_qparams_per_token_asymmetric`` gives them (graph inputs: dynamic quantization)."""

    def samples():
        found = []
        for shape in ((4, 16), (2, 3, 8)):
            scales = torch.rand(*shape[:-1], 1, dtype=torch.float64) * 0.05 + 0.01
            zps = torch.randint(-20, 21, (*shape[:-1], 1))
            if quantize:
                found.append(Sample(_floats(*shape), (scales, zps, *INT8)))
            else:
                codes = _codes(*INT8, *shape)
                found.append(Sample(codes, (scales, zps, *INT8, torch.float32)))
        return found

    return samples


def _group_samples(*, quantize: bool) -> Callable:
    """8da4w-style int4 weights: groups along each row, one scale and zero point per group."""

    def samples():
        found = []
        for (rows, columns), group in (((4, 8), 4), ((6, 32), 16)):
            count = rows * columns // group
            scales = _channel_values(count, 0.05, 0.2)
            zps = tuple((k % 5) - 2 for k in range(count))
            if quantize:
                found.append(
                    Sample(_floats(rows, columns, spread=0.5), (scales, zps, *INT4, group))
                )
            else:
                codes = _codes(*INT4, rows, columns)
                found.append(Sample(codes, (scales, zps, *INT4, group, torch.float32)))
        return found

    return samples


def _token_qparams_samples():
    return [Sample(_floats(4, 16) + 0.5, (torch.int8,)), Sample(_floats(2, 3, 8), (torch.int8,))]


def _pair(kind: str, scheme: str, make: Callable, quantize_fn, dequantize_fn) -> list:
    """The quantize and the dequantize info of one scheme; ``make(quantize=...)`` gives the
    sample generator of each (float inputs, or codes)."""
    return [
        QuantOpInfo(PREFIX + "quantize_" + kind, scheme, quantize_fn, make(quantize=True)),
        QuantOpInfo(PREFIX + "dequantize_" + kind, scheme, dequantize_fn, make(quantize=False)),
    ]


def _infos() -> list[QuantOpInfo]:
    infos = []
    for scheme, bounds, scale, zp in (
        ("int8", INT8, 0.05, -3),
        ("uint8", UINT8, 0.04, 128),
        ("int4", INT4, 0.3, 1),
        ("narrow", NARROW_INT8, 0.05, 0),
        ("uint4", UINT4, 0.2, 8),
    ):
        make = functools.partial(_per_tensor_samples, *bounds, scale, zp)
        infos += _pair("per_tensor", scheme, make, quantize_per_tensor, dequantize_per_tensor)
    for variant, quantize_fn, dequantize_fn, bounds_too in (
        ("tensor", quantize_per_tensor_tensor, dequantize_per_tensor_tensor, False),
        ("tensor2", quantize_per_tensor_tensor2, dequantize_per_tensor_tensor2, True),
    ):
        make = functools.partial(_tensor_qparams_samples, bounds_too=bounds_too)
        infos += _pair("per_tensor", variant, make, quantize_fn, dequantize_fn)
    for scheme, bounds, zp in (
        ("int8", INT8, 0),
        ("uint8", UINT8, 120),
        ("int4", INT4, 0),
        ("narrow", NARROW_INT8, -1),
    ):
        make = functools.partial(_per_channel_samples, *bounds, zp)
        infos += _pair("per_channel", scheme, make, quantize_per_channel, dequantize_per_channel)
    infos += _pair(
        "per_token", "int8", _per_token_samples, quantize_per_token, dequantize_per_token
    )
    infos += _pair(
        "per_channel_group",
        "int4",
        _group_samples,
        quantize_per_channel_group,
        dequantize_per_channel_group,
    )
    bias = 0.05 * 0.01  # activation scale x weight scale
    infos += [
        QuantOpInfo(PREFIX + "quantize_per_tensor", "ties", quantize_per_tensor, _ties_samples),
        QuantOpInfo(
            PREFIX + "dequantize_per_tensor",
            "int32",
            dequantize_per_tensor,
            _per_tensor_samples(*INT32, bias, 0, quantize=False),
        ),
        QuantOpInfo(
            PREFIX + "dequantize_per_channel",
            "int32",
            dequantize_per_channel,
            _per_channel_samples(*INT32, 0, quantize=False),
        ),
        QuantOpInfo(PREFIX + "choose_qparams", "uint8", choose_qparams, _choose_samples(*UINT8)),
        QuantOpInfo(PREFIX + "choose_qparams", "int8", choose_qparams, _choose_samples(*INT8)),
        QuantOpInfo(
            PREFIX + "choose_qparams_symmetric",
            "int8",
            choose_qparams_symmetric,
            _choose_samples(*INT8),
        ),
        QuantOpInfo(
            PREFIX + "choose_qparams_per_token",
            "int8",
            choose_qparams_per_token,
            _token_qparams_samples,
        ),
        QuantOpInfo(
            PREFIX + "choose_qparams_per_token_asymmetric",
            "int8",
            choose_qparams_per_token_asymmetric,
            _token_qparams_samples,
        ),
    ]
    return infos


# ----------------------------------------------------------- fake quantize (QAT)
def _fake_samples(*params, channel_params=None, scalar: bool = True) -> Callable:
    """``[4, 16]`` and ``[2, 3, 5]`` inputs (and a 0-d one when ``scalar``); per-channel
    parameters (``channel_params(channels)``) are along axis 1."""

    def samples():
        found = []
        shapes = [(4, 16), (2, 3, 5)] + ([()] if scalar else [])
        for shape in shapes:
            extra = () if channel_params is None else channel_params(shape[1])
            found.append(Sample(_floats(*shape), (*extra, *params)))
        return found

    return samples


def _channel_fake_params(channels: int, *, learnable: bool = False) -> tuple:
    scales = torch.linspace(0.02, 0.1, channels)
    if learnable:  # float zero points, rounded by the kernel (ties among them)
        return scales, torch.arange(channels, dtype=torch.float32) * 1.5 - 2.5, 1
    return scales, torch.arange(channels, dtype=torch.int32) * 3 - 2, 1


def _fake_infos() -> list[QuantOpInfo]:
    aten = torch.ops.aten
    on = torch.tensor([1])
    return [
        QuantOpInfo(
            "fake_quantize_per_tensor_affine",
            "uint8",
            torch.fake_quantize_per_tensor_affine,
            _fake_samples(0.05, 3, 0, 255),
        ),
        QuantOpInfo(
            "fake_quantize_per_tensor_affine",
            "narrow",
            torch.fake_quantize_per_tensor_affine,
            _fake_samples(0.1, 2, 0, 15),
        ),
        QuantOpInfo(
            "fake_quantize_per_tensor_affine",
            "tensor_qparams",
            torch.fake_quantize_per_tensor_affine,
            _fake_samples(torch.tensor([0.05]), torch.tensor([-3], dtype=torch.int32), -128, 127),
        ),
        QuantOpInfo(
            "fake_quantize_per_tensor_affine_cachemask",
            "uint8",
            aten.fake_quantize_per_tensor_affine_cachemask,
            _fake_samples(0.05, 3, 0, 255),
        ),
        QuantOpInfo(
            "_fake_quantize_per_tensor_affine_cachemask_tensor_qparams",
            "uint8",
            aten._fake_quantize_per_tensor_affine_cachemask_tensor_qparams,
            _fake_samples(torch.tensor([0.05]), torch.tensor([3], dtype=torch.int32), on, 0, 255),
        ),
        QuantOpInfo(
            "_fake_quantize_learnable_per_tensor_affine",
            "uint8",
            torch._fake_quantize_learnable_per_tensor_affine,
            _fake_samples(torch.tensor([0.05]), torch.tensor([2.5]), 0, 255, 1.0),
        ),
        QuantOpInfo(
            "fake_quantize_per_channel_affine",
            "int8",
            torch.fake_quantize_per_channel_affine,
            _fake_samples(-128, 127, channel_params=_channel_fake_params, scalar=False),
        ),
        QuantOpInfo(
            "fake_quantize_per_channel_affine_cachemask",
            "int8",
            aten.fake_quantize_per_channel_affine_cachemask,
            _fake_samples(-128, 127, channel_params=_channel_fake_params, scalar=False),
        ),
        QuantOpInfo(
            "_fake_quantize_learnable_per_channel_affine",
            "int8",
            torch._fake_quantize_learnable_per_channel_affine,
            _fake_samples(
                -128,
                127,
                1.0,
                channel_params=functools.partial(_channel_fake_params, learnable=True),
                scalar=False,
            ),
        ),
    ]


#: Every hand-written op info, in a stable order.
INFOS: tuple[QuantOpInfo, ...] = (*_infos(), *_fake_infos())
