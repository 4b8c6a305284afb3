"""FFT and STFT against eager torch at opsets 17 (DFT axis attribute) and 20+ (axis input)."""

from __future__ import annotations

import pytest
import torch

from tests.op_check import case_params, check_op, dynamic, tensor_maker

r = tensor_maker(low=-3, high=3)

TOL = {"rtol": 1e-4, "atol": 1e-4}

# Inputs are drawn at import: a fixed seed keeps every run on the same cases.
torch.manual_seed(0)

CASES = [
    ("fft", lambda x: torch.fft.fft(x), (r(4, 6),), (r(3, 9),)),
    (
        "fft_n_pad_ortho",
        lambda x: torch.fft.fft(x, n=10, dim=0, norm="ortho"),
        (r(6, 3),),
        (r(8, 2),),
    ),
    ("fft_n_trim_forward", lambda x: torch.fft.fft(x, n=4, norm="forward"), (r(3, 7),), (r(2, 5),)),
    ("ifft", lambda x: torch.fft.ifft(x).resolve_conj(), (r(5, 6),), (r(2, 7),)),
    ("fft_of_complex", lambda x: torch.fft.fft(torch.fft.fft(x, dim=0)), (r(3, 8),), (r(2, 5),)),
    ("fft2", lambda x: torch.fft.fft2(x), (r(2, 4, 6),), (r(3, 5, 3),)),
    ("ifftn_s", lambda x: torch.fft.ifftn(x, s=(3, 5)), (r(4, 6),), (r(5, 2),)),
    ("fftn_all", lambda x: torch.fft.fftn(x, norm="ortho"), (r(3, 4, 5),), (r(2, 6, 3),)),
    ("rfft", lambda x: torch.fft.rfft(x), (r(3, 8),), (r(2, 11),)),
    ("rfft_odd_n", lambda x: torch.fft.rfft(x, n=9, dim=0), (r(6, 2),), (r(12, 3),)),
    ("rfft2", lambda x: torch.fft.rfft2(x, norm="forward"), (r(2, 6, 5),), (r(3, 4, 7),)),
    ("rfftn", lambda x: torch.fft.rfftn(x, dim=(0, 2)), (r(4, 3, 6),), (r(5, 2, 9),)),
    ("irfft", lambda x: torch.fft.irfft(torch.fft.rfft(x)), (r(3, 8),), (r(2, 10),)),
    ("irfft_n_odd", lambda x: torch.fft.irfft(torch.fft.rfft(x), n=7), (r(3, 8),), (r(2, 6),)),
    ("irfft_real_input", lambda x: torch.fft.irfft(x, norm="ortho"), (r(4, 5),), (r(3, 8),)),
    ("irfftn", lambda x: torch.fft.irfftn(torch.fft.rfftn(x), s=x.shape), (r(4, 6),), None),
    (
        "irfft2_dims",
        lambda x: torch.fft.irfft2(torch.fft.rfft2(x, dim=(0, 1)), dim=(0, 1)),
        (r(4, 6, 2),),
        (r(6, 4, 3),),
    ),
    ("hfft", lambda x: torch.fft.hfft(torch.fft.rfft(x)), (r(2, 8),), (r(3, 6),)),
    ("hfft_n", lambda x: torch.fft.hfft(x, n=9), (r(2, 5),), None),
    ("ihfft", lambda x: torch.fft.ihfft(x).resolve_conj(), (r(2, 8),), (r(3, 7),)),
    ("ihfftn", lambda x: torch.fft.ihfftn(x, norm="ortho").resolve_conj(), (r(4, 6),), None),
    ("hfftn", lambda x: torch.fft.hfftn(torch.fft.rfftn(x)), (r(4, 6),), None),
    ("fftshift", lambda x: torch.fft.fftshift(x), (r(5, 4),), (r(6, 7),)),
    ("ifftshift_dim", lambda x: torch.fft.ifftshift(x, dim=1), (r(5, 7),), (r(3, 4),)),
    ("fftshift_complex", lambda x: torch.fft.fftshift(torch.fft.fft(x)), (r(2, 5),), (r(3, 6),)),
    ("fftfreq", lambda x: x + torch.fft.fftfreq(5, d=0.5), (r(5),), None),
    ("rfftfreq", lambda x: x + torch.fft.rfftfreq(8), (r(5),), None),
    ("long_odd_length", lambda x: torch.fft.rfft(x), (r(2, 1000),), None),
    ("stft", lambda x: torch.stft(x, 16, return_complex=True), (r(64),), (r(100),)),
    (
        "stft_window_hop",
        lambda x, w: torch.stft(x, 16, hop_length=5, win_length=12, window=w, return_complex=True),
        (r(2, 80), torch.hann_window(12)),
        None,
    ),
    (
        "stft_not_centered_normalized",
        lambda x: torch.stft(
            x, 8, hop_length=3, center=False, normalized=True, return_complex=True
        ),
        (r(40),),
        (r(31),),
    ),
    (
        "stft_two_sided",
        lambda x: torch.stft(x, 8, onesided=False, return_complex=True),
        (r(2, 32),),
        None,
    ),
    (
        "istft_roundtrip",
        lambda x, w: torch.istft(
            torch.stft(x, 16, hop_length=4, window=w, return_complex=True),
            16,
            hop_length=4,
            window=w,
        ),
        (r(2, 100), torch.hann_window(16)),
        None,
    ),
    (
        "istft_1d_length_normalized",
        lambda x: torch.istft(
            torch.stft(x, 8, normalized=True, return_complex=True),
            8,
            normalized=True,
            length=70,
        ),
        (r(64),),
        (r(90),),
    ),
    (
        "stft_real_pairs",
        lambda x: torch.view_as_real(torch.stft(x, 8, return_complex=True)),
        (r(32),),
        None,
    ),
]


@pytest.mark.parametrize(("fn", "args", "second", "shapes"), case_params(CASES))
def test_fft(fn, args, second, shapes):
    if shapes == "dynamic":
        check_op(fn, args, dynamic_shapes=dynamic(*args), second_args=second, **TOL)
    else:
        check_op(fn, args, **TOL)


@pytest.mark.parametrize("opset", [17, 20, 23])
@pytest.mark.parametrize("transform", ["fft", "rfft", "irfft", "fftn", "stft"])
def test_dft_axis_attribute_and_input(opset, transform):
    """DFT's axis is an attribute at opset 17 and an input from opset 20."""
    fn = {
        "fft": lambda t: torch.fft.fft(t, dim=0),
        "rfft": lambda t: torch.fft.rfft(t, norm="ortho"),
        "irfft": lambda t: torch.fft.irfft(torch.fft.rfft(t), n=t.shape[-1]),
        "fftn": lambda t: torch.fft.fftn(t),
        "stft": lambda t: torch.stft(t, 8, return_complex=True),
    }[transform]
    program = check_op(fn, (r(6, 10),), opset=opset, **TOL)
    dft_nodes = [n for n in program.model_proto.graph.node if n.op_type in ("DFT", "STFT")]
    assert dft_nodes
    for node in dft_nodes:
        if node.op_type == "DFT":
            has_axis_attribute = any(a.name == "axis" for a in node.attribute)
            assert has_axis_attribute == (opset < 20)


def test_stft_with_a_window_and_a_dynamic_signal():
    length = torch.export.Dim("length", min=16)

    def fn(x, w):
        return torch.stft(x, 16, hop_length=5, win_length=12, window=w, return_complex=True)

    window = torch.hann_window(12)
    check_op(
        fn,
        (r(2, 80), window),
        dynamic_shapes=(({1: length}, None),),
        second_args=(r(2, 50), window),
        **TOL,
    )


def test_float32_transform_stays_accurate_on_awkward_lengths():
    """Odd lengths go through onnxruntime's slow path, which must not cost accuracy."""
    x = r(1, 997)
    check_op(torch.fft.fft, (x,), rtol=1e-5, atol=5e-5)
