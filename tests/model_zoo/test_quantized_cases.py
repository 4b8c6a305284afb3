"""The quantized zoo's residual-add quantizer: on a residual block, X86InductorQuantizer's
conv+add pattern leaves the conv's output float (onnxruntime cannot fuse that conv); the
``_qadd`` quantizer quantizes the add's inputs, and every conv and the add fuse."""

from __future__ import annotations

import functools

import pytest
import torch
from torch import nn

import exporter
from exporter.diagnostics import ort_fusion
from exporter.diagnostics.compare import compare_in_steps
from model_zoo import quantized_cases

pytest.importorskip("torchao.quantization.pt2e.quantize_pt2e")


class ResidualBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(4, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1)
        self.conv3 = nn.Conv2d(4, 4, 1)

    def forward(self, x):
        y = self.conv2(torch.relu(self.conv1(x)))
        return self.conv3(torch.relu(y + x))  # conv3 quantizes the block's output


def _inputs(sizes):
    generator = torch.Generator().manual_seed(sizes.get("seed", 0))
    return (torch.randn(2, 4, 8, 8, generator=generator),), {}


@functools.cache
def _exported(residual_adds: bool):
    torch.manual_seed(0)
    name = f"test/residual_{residual_adds}"
    model = quantized_cases._pt2e(ResidualBlock(), name, _inputs, {}, residual_adds)
    (x,), _ = _inputs({"seed": 7})
    return model, x, exporter.export(model, (x,)).model_proto, quantized_cases._STEP[name]


def _unfused_convs(report) -> list[str]:
    return [line for line in report.unfused if "output is not quantized again" in line]


def test_the_inductor_scheme_leaves_the_conv_before_the_add_unfused():
    _, _, proto, _ = _exported(residual_adds=False)
    report = ort_fusion.check_fusion(proto, {})
    # conv1 fuses; conv2 (into the add) and conv3 (the model's output) stay float
    assert report.counts["QLinearConv"] == 1, report.summary()
    assert report.counts["QLinearAdd"] == 0, report.summary()
    assert len(_unfused_convs(report)) == 2, report.summary()


def test_quantized_residual_adds_fuse_every_conv_and_the_add():
    model, x, proto, step = _exported(residual_adds=True)
    report = ort_fusion.check_fusion(proto, {"QLinearConv": 2, "QLinearAdd": 1})
    assert report.ok, report.summary()
    # only conv3, whose float output is the model's output, stays float
    assert len(_unfused_convs(report)) == len(report.unfused) == 1, report.summary()
    import onnxruntime as ort

    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
    result = compare_in_steps(model(x).detach().numpy(), got, step=step)
    assert result.ok, result.message
