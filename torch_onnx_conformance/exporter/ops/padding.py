"""Padding: constant, reflect, replicate (ONNX Pad) and circular (Slice + Concat).

torch lists pads from the last dim backwards, (left, right) per dim; negative pads crop. Crops
become a Slice first, so Pad only ever sees non-negative amounts, whatever the mode.
"""

from __future__ import annotations

import onnx_ir as ir
import torch

from torch_onnx_conformance.exporter.ops import _kernels
from torch_onnx_conformance.exporter.ops import _shape as S
from torch_onnx_conformance.exporter.ops._registry import translates

aten = torch.ops.aten

_ONNX_MODE = {"constant": "constant", "reflect": "reflect", "replicate": "edge"}
# aten._pad_enum's integer modes (torch/csrc/api/include/torch/enum.h order)
_ENUM_MODE = {0: "constant", 1: "reflect", 2: "replicate", 3: "circular"}


def _per_axis(ctx, x, pad) -> dict[int, tuple[S.Size, S.Size]]:
    rank = S.rank_of(ctx, x)
    if len(pad) % 2 or len(pad) // 2 > rank:
        raise ValueError(
            f"pad has {len(pad)} entries; it needs (left, right) pairs for at most {rank} dims"
        )
    return {
        rank - 1 - i: (S.as_size(ctx, pad[2 * i]), S.as_size(ctx, pad[2 * i + 1]))
        for i in range(len(pad) // 2)
    }


def _crop(ctx, x, pads: dict[int, tuple[S.Size, S.Size]]):
    """Apply the negative (static) pads as a Slice; return the rest as non-negative pads."""
    starts, ends, axes, rest = [], [], [], {}
    for axis_, (left, right) in pads.items():
        cut_left = S.is_static(left) and left < 0
        cut_right = S.is_static(right) and right < 0
        if cut_left or cut_right:
            starts.append(-left if cut_left else 0)
            ends.append(right if cut_right else S.INT64_MAX)
            axes.append(axis_)
        rest[axis_] = (0 if cut_left else left, 0 if cut_right else right)
    if axes:
        x = ctx.op.Slice(x, starts, ends, axes)
    return x, rest


def _is_zero(size) -> bool:
    return S.is_static(size) and size == 0


def pad_nd(ctx, x, pad, mode: str, value=None):
    rank = S.rank_of(ctx, x)
    pads = _per_axis(ctx, x, pad)
    if mode == "replicate" and any(
        S.is_static(p) and p < 0 for pair in pads.values() for p in pair
    ):
        return _replicate_by_index(ctx, x, pads)
    x, pads = _crop(ctx, x, pads)
    pads = {a: p for a, p in pads.items() if not (_is_zero(p[0]) and _is_zero(p[1]))}
    if not pads:
        return ctx.op.Identity(x)
    if mode == "circular":
        return _circular(ctx, x, pads)
    if mode not in _ONNX_MODE:
        raise ValueError(
            f"unknown padding mode {mode!r}; expected one of {sorted([*_ONNX_MODE, 'circular'])}"
        )
    dtype = ctx.dtype(x)
    run = _kernels.kernel_dtype("Pad", dtype)
    fill = None
    if mode == "constant":
        fill = (
            ctx.cast(value, run)
            if isinstance(value, ir.Value)
            else ctx.const(0 if value is None else value, run)
        )
    x = ctx.cast(x, run)
    if ctx.has("Pad-axes"):
        axes = sorted(pads)
        amounts = S.concat_sizes(ctx, [pads[a][0] for a in axes] + [pads[a][1] for a in axes])
        padded = ctx.op.Pad(x, amounts, fill, axes, mode=_ONNX_MODE[mode])
    else:
        full = [pads.get(a, (0, 0))[0] for a in range(rank)] + [
            pads.get(a, (0, 0))[1] for a in range(rank)
        ]
        padded = ctx.op.Pad(x, S.concat_sizes(ctx, full), fill, mode=_ONNX_MODE[mode])
    return ctx.cast(padded, dtype)


def _replicate_by_index(ctx, x, pads):
    """Replicate padding as out[i] = x[clamp(i - left, 0, size - 1)] along each padded axis.

    Used when a pad is negative: the crop can remove the very edge that gets replicated, so
    torch's clamped-index definition is followed literally.
    """
    zero, one = ctx.const(0, torch.int64), ctx.const(1, torch.int64)
    # A gather along one axis leaves the others' sizes alone: read them all from the input.
    sizes = {axis_: S.dim_size(ctx, x, axis_) for axis_ in pads}
    for axis_, (left, right) in sorted(pads.items()):
        size = sizes[axis_]
        count = S.add(ctx, S.add(ctx, size, left), right)
        steps = ctx.op.Sub(ctx.op.Range(zero, S.as_0d(ctx, count), one), S.as_0d(ctx, left))
        last = S.as_0d(ctx, S.sub(ctx, size, 1))
        index = ctx.op.Max(ctx.op.Min(steps, last), zero)
        x = ctx.op.Gather(x, index, axis=axis_)
    return x


def _circular(ctx, x, pads):
    for axis_, (left, right) in sorted(pads.items()):
        parts = []
        if not _is_zero(left):
            parts.append(ctx.op.Slice(x, S.as_1d(ctx, S.sub(ctx, 0, left)), [S.INT64_MAX], [axis_]))
        parts.append(x)
        if not _is_zero(right):
            parts.append(ctx.op.Slice(x, [0], S.as_1d(ctx, right), [axis_]))
        x = ctx.op.Concat(*parts, axis=axis_)
    return x


@translates(aten.constant_pad_nd.default)
def constant_pad_nd(ctx, self, pad, value=0):
    return pad_nd(ctx, self, pad, "constant", value)


@translates(aten.pad.default)
def pad_(ctx, self, pad, mode="constant", value=None):
    return pad_nd(ctx, self, pad, mode, value)


@translates(aten._pad_enum.default)
def pad_enum(ctx, self, pad, mode, value=None):
    return pad_nd(ctx, self, pad, _ENUM_MODE[mode], value)


@translates(aten._pad_circular.default)
def pad_circular(ctx, self, pad):
    return pad_nd(ctx, self, pad, "circular")


@translates(
    aten.reflection_pad1d.default, aten.reflection_pad2d.default, aten.reflection_pad3d.default
)
def reflection_pad(ctx, self, padding):
    return pad_nd(ctx, self, padding, "reflect")


@translates(
    aten.replication_pad1d.default, aten.replication_pad2d.default, aten.replication_pad3d.default
)
def replication_pad(ctx, self, padding):
    return pad_nd(ctx, self, padding, "replicate")
