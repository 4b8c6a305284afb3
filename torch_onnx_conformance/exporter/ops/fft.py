"""Fourier transforms through ONNX DFT and STFT: the torch.fft family, its ATen primitives
(_fft_r2c, _fft_c2r, _fft_c2c), fftshift/fftfreq and stft.

Complex tensors travel as real tensors with a trailing dimension of 2 (real, imaginary), which
is also DFT's layout; a real signal gets a trailing dimension of 1. A tensor's *logical* dims
(the torch ones) therefore index the ONNX tensor directly. ONNX's inverse DFT divides by the
signal length; torch's normalisation modes are applied on top as one scale factor. Inverse
real transforms (irfft, hfft) complete the Hermitian half-spectrum and take the real part of
a full inverse DFT, which is exact and independent of onesided-inverse support.
"""

from __future__ import annotations

import math
from typing import Any

import onnx_ir as ir
import torch

from torch_onnx_conformance.exporter.ops import _shape as S
from torch_onnx_conformance.exporter.ops._registry import translates

aten = torch.ops.aten
i64 = torch.int64

# torch's integer normalisation codes of the _fft_* primitives.
_NONE, _BY_ROOT_N, _BY_N = 0, 1, 2


# -------------------------------------------------------------------------------- layout
def _is_complex(ctx, x: ir.Value) -> bool:
    meta = ctx.meta(x)
    return isinstance(meta, torch.Tensor) and meta.dtype.is_complex


def _logical_rank(ctx, x: ir.Value) -> int:
    return ctx.rank(x)  # FX metadata: the torch rank, without the trailing pair dim


#: onnxruntime's float32 DFT loses up to 1e-2 against torch on lengths that are not powers of
#: two (7e-3 at n=1000, where pocketfft stays at 2e-5); transforms run in float64 and round once.
_WORK = torch.float64


def _as_signal(ctx, x: ir.Value) -> tuple[ir.Value, bool]:
    """The DFT layout of ``x`` ([..., 1] for real, [..., 2] for complex) in the work dtype."""
    work = _WORK
    if _is_complex(ctx, x):
        return ctx.cast(x, work), True
    rank = _logical_rank(ctx, x)
    return ctx.op.Unsqueeze(ctx.cast(x, work), ctx.const([rank], i64)), False


def _real_part(ctx, x: ir.Value, rank: int) -> ir.Value:
    """Real parts of a [..., 2] tensor of logical rank ``rank``."""
    return ctx.op.Squeeze(
        ctx.op.Slice(x, ctx.const([0], i64), ctx.const([1], i64), ctx.const([rank], i64)),
        ctx.const([rank], i64),
    )


def _conj(ctx, x: ir.Value) -> ir.Value:
    return ctx.op.Mul(x, ctx.const([1.0, -1.0], ctx.dtype(x)))


def _dims(dim: Any, rank: int, default: list[int] | None = None) -> list[int]:
    if dim is None:
        dims = default if default is not None else list(range(rank))
    else:
        dims = [dim] if isinstance(dim, int) else list(dim)
    return [S.axis(d, rank) for d in dims]


def _ints(ctx, n: int | ir.Value) -> ir.Value:
    """A 1-D int64 [n]."""
    if isinstance(n, ir.Value):
        return ctx.op.Reshape(ctx.cast(n, i64), ctx.const([1], i64))
    return ctx.const([int(n)], i64)


def _resize(ctx, x: ir.Value, ax: int, current: int | ir.Value, size: Any, rank: int) -> ir.Value:
    """Trim or zero-pad axis ``ax`` of a signal ([..., 1|2] of ONNX rank ``rank``) to ``size``."""
    if size is None or (isinstance(size, int) and isinstance(current, int) and size == current):
        return x
    target = _ints(ctx, size)
    x = ctx.op.Slice(x, ctx.const([0], i64), target, ctx.const([ax], i64))
    if isinstance(size, int) and isinstance(current, int) and size < current:
        return x
    missing = ctx.op.Max(ctx.op.Sub(target, _ints(ctx, current)), ctx.const([0], i64))
    zeros = ctx.const([0] * rank, i64)
    before = ctx.const([0] * rank, i64)
    after = ctx.op.ScatterElements(zeros, ctx.const([ax], i64), missing, axis=0)
    return ctx.op.Pad(x, ctx.op.Concat(before, after, axis=0))


# ------------------------------------------------------------------------------ transforms
def _dft(ctx, x: ir.Value, ax: int, *, inverse: bool = False, onesided: bool = False) -> ir.Value:
    if ctx.has("DFT-axis-input"):
        out = ctx.op.DFT(x, None, ctx.const(ax, i64), inverse=int(inverse), onesided=int(onesided))
    else:
        out = ctx.op.DFT(x, axis=ax, inverse=int(inverse), onesided=int(onesided))
    out.dtype = x.dtype
    return out


def _scale(ctx, x: ir.Value, lengths: list[int | ir.Value], power: float) -> ir.Value:
    """x * (prod lengths) ** power; nothing when the factor is 1."""
    if power == 0:
        return x
    dtype = ctx.dtype(x)
    if all(isinstance(n, int) for n in lengths):
        factor = float(math.prod(lengths)) ** power
        return x if factor == 1 else ctx.op.Mul(x, ctx.const(factor, dtype))
    total = ctx.const(1.0, dtype)
    for n in lengths:
        n_value = (
            ctx.const(float(n), dtype)
            if isinstance(n, int)
            else ctx.op.Reshape(ctx.cast(n, dtype), ctx.const([], i64))
        )
        total = ctx.op.Mul(total, n_value)
    return ctx.op.Mul(x, ctx.op.Pow(total, ctx.const(power, dtype)))


def _norm_power(normalization: int, forward: bool) -> float:
    """Exponent of n in the output scale, given that ONNX's inverse DFT already divides by n."""
    torch_power = {_NONE: 0.0, _BY_ROOT_N: -0.5, _BY_N: -1.0}[normalization]
    return torch_power if forward else torch_power + 1.0


def _c2c(ctx, signal, dims, lengths, normalization, forward):
    for ax in dims:
        signal = _dft(ctx, signal, ax, inverse=not forward)
    return _scale(ctx, signal, lengths, _norm_power(normalization, forward))


def _r2c(ctx, signal, dims, lengths, normalization, onesided):
    """Real signal [..., 1] to spectrum [..., 2]; the last of ``dims`` is halved if onesided."""
    last = dims[-1]
    signal = _dft(ctx, signal, last, onesided=onesided)
    for ax in dims[:-1]:
        signal = _dft(ctx, signal, ax)
    return _scale(ctx, signal, lengths, _norm_power(normalization, True))


def _hermitian_full(ctx, half, ax, n):
    """Full spectrum of length ``n`` along ``ax`` from its first n//2+1 (Hermitian) entries."""
    if isinstance(n, int):
        kept_end, mirror_start = ctx.const([n // 2 + 1], i64), ctx.const([n - n // 2 - 1], i64)
    else:
        n1 = _ints(ctx, n)
        half_n = ctx.op.Div(n1, ctx.const([2], i64))
        kept_end = ctx.op.Add(half_n, ctx.const([1], i64))
        mirror_start = ctx.op.Sub(ctx.op.Sub(n1, half_n), ctx.const([1], i64))
    axes = ctx.const([ax], i64)
    kept = ctx.op.Slice(half, ctx.const([0], i64), kept_end, axes)
    # X[n-k] = conj(X[k]) for k = n - n//2 - 1 down to 1.
    mirrored = ctx.op.Slice(half, mirror_start, ctx.const([0], i64), axes, ctx.const([-1], i64))
    return ctx.op.Concat(kept, _conj(ctx, mirrored), axis=ax)


def _c2r(ctx, signal, dims, rank, last_size, lengths, normalization):
    """Half spectrum [..., 2] to a real signal whose last transformed axis has ``last_size``."""
    for ax in dims[:-1]:
        signal = _dft(ctx, signal, ax, inverse=True)
    last = dims[-1]
    signal = _dft(ctx, _hermitian_full(ctx, signal, last, last_size), last, inverse=True)
    real = _real_part(ctx, signal, rank)
    return _scale(ctx, real, lengths, _norm_power(normalization, False))


def _finish(ctx, value: ir.Value) -> ir.Value:
    """The result in torch's output dtype (complex outputs as their real pair dtype)."""
    return ctx.cast(value, ctx.out_dtype)


# ------------------------------------------------------------------------- ATen primitives
@translates(aten._fft_r2c.default)
def fft_r2c(ctx, self, dim, normalization, onesided):
    rank = _logical_rank(ctx, self)
    dims = _dims(dim, rank)
    signal, _ = _as_signal(ctx, self)
    lengths = [S.dim_size(ctx, self, ax) for ax in dims]
    return _finish(ctx, _r2c(ctx, signal, dims, lengths, normalization, onesided))


@translates(aten._fft_c2c.default)
def fft_c2c(ctx, self, dim, normalization, forward):
    rank = _logical_rank(ctx, self)
    dims = _dims(dim, rank)
    signal, _ = _as_signal(ctx, self)
    lengths = [S.dim_size(ctx, self, ax) for ax in dims]
    return _finish(ctx, _c2c(ctx, signal, dims, lengths, normalization, forward))


@translates(aten._fft_c2r.default)
def fft_c2r(ctx, self, dim, normalization, last_dim_size):
    rank = _logical_rank(ctx, self)
    dims = _dims(dim, rank)
    signal, _ = _as_signal(ctx, self)
    lengths = [S.dim_size(ctx, self, ax) for ax in dims[:-1]] + [last_dim_size]
    return _finish(ctx, _c2r(ctx, signal, dims, rank, last_dim_size, lengths, normalization))


# ---------------------------------------------------------------------- torch.fft functions
def _mode(norm: str | None, forward: bool) -> int:
    """torch.fft's norm string as the _fft_* normalisation code for this direction."""
    norm = norm or "backward"
    if norm == "ortho":
        return _BY_ROOT_N
    if norm not in ("forward", "backward"):
        raise ValueError(f"torch.fft norm must be 'forward', 'backward' or 'ortho', got {norm!r}")
    scaled_forward = norm == "forward"
    return _BY_N if scaled_forward == forward else _NONE


def _swapped(norm: str | None) -> str:
    return {"backward": "forward", "forward": "backward"}.get(norm or "backward", "ortho")


def _plan(ctx, self, s, dim, default_dims):
    """Dims to transform and their requested sizes (None: keep), torch.fft's defaults applied."""
    rank = _logical_rank(ctx, self)
    if dim is None and s is not None:
        dims = list(range(rank - len(s), rank))
    else:
        dims = _dims(dim, rank, default_dims)
    sizes = [None] * len(dims) if s is None else list(s)
    sizes = [None if isinstance(n, int) and n == -1 else n for n in sizes]
    return rank, dims, sizes


def _fftn(ctx, self, s, dim, norm, forward, default_dims=None):
    rank, dims, sizes = _plan(ctx, self, s, dim, default_dims)
    signal, is_complex = _as_signal(ctx, self)
    lengths = []
    for ax, n in zip(dims, sizes):
        current = S.dim_size(ctx, self, ax)
        signal = _resize(ctx, signal, ax, current, n, rank + 1)
        lengths.append(current if n is None else n)
    if not is_complex:
        # A real input is a complex one with zero imaginary parts: give DFT the pair layout.
        signal = ctx.op.Concat(
            signal, ctx.op.Mul(signal, ctx.const(0.0, ctx.dtype(signal))), axis=rank
        )
    return _c2c(ctx, signal, dims, lengths, _mode(norm, forward), forward)


def _rfftn(ctx, self, s, dim, norm, default_dims=None):
    rank, dims, sizes = _plan(ctx, self, s, dim, default_dims)
    signal, _ = _as_signal(ctx, self)
    lengths = []
    for ax, n in zip(dims, sizes):
        current = S.dim_size(ctx, self, ax)
        signal = _resize(ctx, signal, ax, current, n, rank + 1)
        lengths.append(current if n is None else n)
    return _r2c(ctx, signal, dims, lengths, _mode(norm, True), onesided=True)


def _irfftn(ctx, self, s, dim, norm, default_dims=None, conjugate=False):
    rank, dims, sizes = _plan(ctx, self, s, dim, default_dims)
    signal, is_complex = _as_signal(ctx, self)
    if not is_complex:
        signal = ctx.op.Concat(
            signal, ctx.op.Mul(signal, ctx.const(0.0, ctx.dtype(signal))), axis=rank
        )
    if conjugate:
        signal = _conj(ctx, signal)
    lengths = []
    for ax, n in zip(dims[:-1], sizes[:-1]):
        current = S.dim_size(ctx, self, ax)
        signal = _resize(ctx, signal, ax, current, n, rank + 1)
        lengths.append(current if n is None else n)
    last = dims[-1]
    half = S.dim_size(ctx, self, last)
    out_size = sizes[-1]
    if out_size is None:
        out_size = (
            2 * (half - 1)
            if isinstance(half, int)
            else ctx.op.Mul(ctx.op.Sub(half, ctx.const([1], i64)), ctx.const([2], i64))
        )
    # The half spectrum the output length needs: n//2 + 1 entries.
    needed = (
        out_size // 2 + 1
        if isinstance(out_size, int)
        else ctx.op.Add(ctx.op.Div(_ints(ctx, out_size), ctx.const([2], i64)), ctx.const([1], i64))
    )
    signal = _resize(ctx, signal, last, half, needed, rank + 1)
    lengths.append(out_size)
    return _c2r(ctx, signal, dims, rank, out_size, lengths, _mode(norm, False))


@translates(aten.fft_fft.default)
def fft_fft(ctx, self, n=None, dim=-1, norm=None):
    return _finish(ctx, _fftn(ctx, self, None if n is None else [n], [dim], norm, True))


@translates(aten.fft_ifft.default)
def fft_ifft(ctx, self, n=None, dim=-1, norm=None):
    return _finish(ctx, _fftn(ctx, self, None if n is None else [n], [dim], norm, False))


@translates(aten.fft_fft2.default)
def fft_fft2(ctx, self, s=None, dim=(-2, -1), norm=None):
    return _finish(ctx, _fftn(ctx, self, s, dim, norm, True))


@translates(aten.fft_ifft2.default)
def fft_ifft2(ctx, self, s=None, dim=(-2, -1), norm=None):
    return _finish(ctx, _fftn(ctx, self, s, dim, norm, False))


@translates(aten.fft_fftn.default)
def fft_fftn(ctx, self, s=None, dim=None, norm=None):
    return _finish(ctx, _fftn(ctx, self, s, dim, norm, True))


@translates(aten.fft_ifftn.default)
def fft_ifftn(ctx, self, s=None, dim=None, norm=None):
    return _finish(ctx, _fftn(ctx, self, s, dim, norm, False))


@translates(aten.fft_rfft.default)
def fft_rfft(ctx, self, n=None, dim=-1, norm=None):
    return _finish(ctx, _rfftn(ctx, self, None if n is None else [n], [dim], norm))


@translates(aten.fft_rfft2.default)
def fft_rfft2(ctx, self, s=None, dim=(-2, -1), norm=None):
    return _finish(ctx, _rfftn(ctx, self, s, dim, norm))


@translates(aten.fft_rfftn.default)
def fft_rfftn(ctx, self, s=None, dim=None, norm=None):
    return _finish(ctx, _rfftn(ctx, self, s, dim, norm))


@translates(aten.fft_irfft.default)
def fft_irfft(ctx, self, n=None, dim=-1, norm=None):
    return _finish(ctx, _irfftn(ctx, self, None if n is None else [n], [dim], norm))


@translates(aten.fft_irfft2.default)
def fft_irfft2(ctx, self, s=None, dim=(-2, -1), norm=None):
    return _finish(ctx, _irfftn(ctx, self, s, dim, norm))


@translates(aten.fft_irfftn.default)
def fft_irfftn(ctx, self, s=None, dim=None, norm=None):
    return _finish(ctx, _irfftn(ctx, self, s, dim, norm))


# hfft is the inverse real transform of the conjugate with the norm's direction swapped;
# ihfft is the conjugate of the forward real transform, likewise swapped.
@translates(aten.fft_hfft.default)
def fft_hfft(ctx, self, n=None, dim=-1, norm=None):
    return _finish(
        ctx, _irfftn(ctx, self, None if n is None else [n], [dim], _swapped(norm), conjugate=True)
    )


@translates(aten.fft_hfft2.default)
def fft_hfft2(ctx, self, s=None, dim=(-2, -1), norm=None):
    return _finish(ctx, _irfftn(ctx, self, s, dim, _swapped(norm), conjugate=True))


@translates(aten.fft_hfftn.default)
def fft_hfftn(ctx, self, s=None, dim=None, norm=None):
    return _finish(ctx, _irfftn(ctx, self, s, dim, _swapped(norm), conjugate=True))


@translates(aten.fft_ihfft.default)
def fft_ihfft(ctx, self, n=None, dim=-1, norm=None):
    return _finish(
        ctx, _conj(ctx, _rfftn(ctx, self, None if n is None else [n], [dim], _swapped(norm)))
    )


@translates(aten.fft_ihfft2.default)
def fft_ihfft2(ctx, self, s=None, dim=(-2, -1), norm=None):
    return _finish(ctx, _conj(ctx, _rfftn(ctx, self, s, dim, _swapped(norm))))


@translates(aten.fft_ihfftn.default)
def fft_ihfftn(ctx, self, s=None, dim=None, norm=None):
    return _finish(ctx, _conj(ctx, _rfftn(ctx, self, s, dim, _swapped(norm))))


# ------------------------------------------------------------------------- shifts and freqs
def _shift(ctx, self, dim, inverse):
    rank = _logical_rank(ctx, self)
    x = self
    for ax in _dims(dim, rank) if rank else []:
        n = S.dim_size(ctx, self, ax)
        # fftshift moves the last n//2 entries to the front; ifftshift the last (n+1)//2.
        if isinstance(n, int):
            split = ctx.const([n // 2 if inverse else (n + 1) // 2], i64)
        else:
            rounding = 0 if inverse else 1
            split = ctx.op.Div(ctx.op.Add(n, ctx.const([rounding], i64)), ctx.const([2], i64))
        axes = ctx.const([ax], i64)
        head = ctx.op.Slice(x, ctx.const([0], i64), split, axes)
        tail = ctx.op.Slice(x, split, ctx.const([2**62], i64), axes)
        x = ctx.op.Concat(tail, head, axis=ax)
    return x if x is not self else ctx.op.Identity(self)


@translates(aten.fft_fftshift.default)
def fft_fftshift(ctx, self, dim=None):
    return _shift(ctx, self, dim, inverse=False)


@translates(aten.fft_ifftshift.default)
def fft_ifftshift(ctx, self, dim=None):
    return _shift(ctx, self, dim, inverse=True)


def _frequencies(ctx, n, d, onesided):
    out = ctx.out_dtype
    work = torch.float64 if out is torch.float64 else torch.float32
    count = n // 2 + 1 if onesided else n
    k = ctx.op.Range(ctx.const(0, i64), ctx.const(count, i64), ctx.const(1, i64))
    if not onesided:
        # 0, 1, ..., (n-1)//2, then -(n//2), ..., -1.
        k = ctx.op.Where(
            ctx.op.Less(k, ctx.const((n + 1) // 2, i64)), k, ctx.op.Sub(k, ctx.const(n, i64))
        )
    return ctx.cast(ctx.op.Div(ctx.cast(k, work), ctx.const(float(n) * d, work)), out)


@translates(aten.fft_fftfreq.default)
def fft_fftfreq(ctx, n, d=1.0, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _frequencies(ctx, n, d, onesided=False)


@translates(aten.fft_rfftfreq.default)
def fft_rfftfreq(ctx, n, d=1.0, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _frequencies(ctx, n, d, onesided=True)


# ----------------------------------------------------------------------------------- stft
def _stft(
    ctx,
    self,
    n_fft,
    hop_length,
    win_length,
    window,
    normalized,
    onesided,
    return_complex,
    align_to_window=None,
):
    if align_to_window:
        raise NotImplementedError("stft: align_to_window=True is not supported; leave it unset")
    if _is_complex(ctx, self) and onesided:
        raise ValueError("stft: onesided output needs a real input and window")
    rank = _logical_rank(ctx, self)
    hop = n_fft // 4 if hop_length is None else hop_length
    win = n_fft if win_length is None else win_length
    signal, is_complex = _as_signal(ctx, self)
    work = ctx.dtype(signal)
    if onesided is None:
        onesided = not is_complex and not (window is not None and _is_complex(ctx, window))
    if rank == 1:
        signal = ctx.op.Unsqueeze(signal, ctx.const([0], i64))
    if window is None:
        window = ctx.op.Expand(ctx.const(1.0, work), ctx.const([win], i64))
    else:
        window = ctx.cast(window, work)
    if win < n_fft:
        # torch centres a shorter window inside the n_fft frame.
        left = (n_fft - win) // 2
        window = ctx.op.Pad(window, ctx.const([left, n_fft - win - left], i64))
    spectrum = ctx.op.STFT(
        signal, ctx.const(hop, i64), window, ctx.const(n_fft, i64), onesided=int(bool(onesided))
    )
    spectrum.dtype = signal.dtype
    # ONNX gives [batch, frames, bins, 2]; torch wants [batch, bins, frames, 2].
    spectrum = ctx.op.Transpose(spectrum, perm=[0, 2, 1, 3])
    if normalized:
        spectrum = ctx.op.Mul(spectrum, ctx.const(1.0 / math.sqrt(n_fft), work))
    if rank == 1:
        spectrum = ctx.op.Squeeze(spectrum, ctx.const([0], i64))
    return _finish(ctx, spectrum)


@translates(aten.stft.default)
def stft(
    ctx,
    self,
    n_fft,
    hop_length=None,
    win_length=None,
    window=None,
    normalized=False,
    onesided=None,
    return_complex=None,
    align_to_window=None,
):
    return _stft(
        ctx,
        self,
        n_fft,
        hop_length,
        win_length,
        window,
        normalized,
        onesided,
        return_complex,
        align_to_window,
    )


@translates(aten.stft.center)
def stft_center(
    ctx,
    self,
    n_fft,
    hop_length=None,
    win_length=None,
    window=None,
    center=True,
    pad_mode="reflect",
    normalized=False,
    onesided=None,
    return_complex=None,
    align_to_window=None,
):
    x = self
    if center:
        rank = _logical_rank(ctx, self)
        pad = n_fft // 2
        mode = {
            "reflect": "reflect",
            "replicate": "edge",
            "circular": "wrap",
            "constant": "constant",
        }.get(pad_mode)
        if mode is None:
            raise ValueError(f"stft: unsupported pad_mode {pad_mode!r}")
        pads = [0] * rank + [0] * rank
        pads[rank - 1] = pad
        pads[2 * rank - 1] = pad
        x = ctx.op.Pad(self, ctx.const(pads, i64), mode=mode)
        S.annotate(ctx, x, _padded_meta(ctx, self, pad))
    return _stft(
        ctx,
        x,
        n_fft,
        hop_length,
        win_length,
        window,
        normalized,
        onesided,
        return_complex,
        align_to_window,
    )


def _padded_meta(ctx, x, pad):
    meta = ctx.meta(x)
    shape = list(meta.shape)
    shape[-1] = shape[-1] + 2 * pad
    return meta.new_empty(shape)


# ---------------------------------------------------------------------------------- istft
@translates(aten.istft.default)
def istft(
    ctx,
    self,
    n_fft,
    hop_length=None,
    win_length=None,
    window=None,
    center=True,
    normalized=False,
    onesided=None,
    length=None,
    return_complex=False,
):
    """Inverse STFT: inverse real DFT per frame, windowed overlap-add, envelope division."""
    if return_complex or onesided is False:
        raise NotImplementedError("istft: only real, one-sided signals are supported")
    rank = _logical_rank(ctx, self)  # [B?, bins, frames]
    hop = n_fft // 4 if hop_length is None else hop_length
    win = n_fft if win_length is None else win_length
    spectrum, _ = _as_signal(ctx, self)
    if rank == 2:
        spectrum = ctx.op.Unsqueeze(spectrum, ctx.const([0], i64))
    spectrum = ctx.op.Transpose(spectrum, perm=[0, 2, 1, 3])  # [B, frames, bins, 2]
    if normalized:
        spectrum = ctx.op.Mul(spectrum, ctx.const(math.sqrt(n_fft), _WORK))
    bins = S.dim_size(ctx, self, rank - 2)
    spectrum = _resize(ctx, spectrum, 2, bins, n_fft // 2 + 1, 4)
    frames = _c2r(ctx, spectrum, [2], 3, n_fft, [n_fft], _BY_N)  # [B, frames, n_fft]
    if window is None:
        window = ctx.op.Expand(ctx.const(1.0, _WORK), ctx.const([win], i64))
    else:
        window = ctx.cast(window, _WORK)
    if win < n_fft:
        left = (n_fft - win) // 2
        window = ctx.op.Pad(window, ctx.const([left, n_fft - win - left], i64))
    frames = ctx.op.Mul(frames, window)
    # Overlap-add: sample t of frame f lands at f * hop + t.
    count = _ints(ctx, S.dim_size(ctx, self, rank - 1))
    frame_ids = ctx.op.Range(
        ctx.const(0, i64), ctx.op.Squeeze(count, ctx.const([0], i64)), ctx.const(1, i64)
    )
    offsets = ctx.op.Add(
        ctx.op.Unsqueeze(ctx.op.Mul(frame_ids, ctx.const(hop, i64)), ctx.const([1], i64)),
        ctx.const(list(range(n_fft)), i64),
    )  # [frames, n_fft]
    total = ctx.op.Add(
        ctx.op.Mul(ctx.op.Sub(count, ctx.const([1], i64)), ctx.const([hop], i64)),
        ctx.const([n_fft], i64),
    )
    flat_index = ctx.op.Reshape(offsets, ctx.const([-1], i64))
    batch = ctx.op.Shape(frames, start=0, end=1)
    index = ctx.op.Expand(
        ctx.op.Unsqueeze(flat_index, ctx.const([0], i64)),
        ctx.op.Concat(batch, ctx.const([1], i64), axis=0),
    )
    values = ctx.op.Reshape(frames, ctx.op.Concat(batch, ctx.const([-1], i64), axis=0))
    signal = ctx.op.ScatterElements(
        S.constant_of_shape(ctx, ctx.op.Concat(batch, total, axis=0), 0.0, _WORK),
        index,
        values,
        axis=1,
        reduction="add",
    )
    squares = ctx.op.Reshape(
        ctx.op.Expand(
            ctx.op.Mul(window, window), ctx.op.Concat(count, ctx.const([n_fft], i64), axis=0)
        ),
        ctx.const([-1], i64),
    )
    envelope = ctx.op.ScatterElements(
        S.constant_of_shape(ctx, total, 0.0, _WORK), flat_index, squares, axis=0, reduction="add"
    )
    start = n_fft // 2 if center else 0
    if length is not None:
        end = ctx.op.Add(ctx.const([start], i64), _ints(ctx, length))
    elif center:
        end = ctx.op.Sub(total, ctx.const([n_fft // 2], i64))
    else:
        end = total
    axes = ctx.const([1], i64)
    signal = ctx.op.Slice(signal, ctx.const([start], i64), end, axes)
    envelope = ctx.op.Slice(envelope, ctx.const([start], i64), end, ctx.const([0], i64))
    safe = ctx.op.Where(
        ctx.op.Greater(envelope, ctx.const(1e-11, _WORK)), envelope, ctx.const(1.0, _WORK)
    )
    signal = ctx.op.Div(signal, safe)
    if length is not None:
        # A requested length beyond the frames is zero-padded.
        have = ctx.op.Shape(signal, start=1, end=2)
        missing = ctx.op.Max(ctx.op.Sub(_ints(ctx, length), have), ctx.const([0], i64))
        signal = ctx.op.Pad(signal, ctx.op.Concat(ctx.const([0, 0, 0], i64), missing, axis=0))
    if rank == 2:
        signal = ctx.op.Squeeze(signal, ctx.const([0], i64))
    return _finish(ctx, signal)
