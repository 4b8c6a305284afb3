"""A model prepared for quantization-aware training with PT2E (``prepare_qat_pt2e``,
X86InductorQuantizer's QAT scheme), exported as it trains: its fake quantizers are
``fused_moving_avg_obs_fake_quant`` (observer and fake quantize in one op)."""

from __future__ import annotations

import collections
import functools

import numpy as np
import pytest
import torch

from tests.op_check import run_onnx
from torch_onnx_conformance import exporter
from torch_onnx_conformance.exporter._errors import TranslationError

pt2e = pytest.importorskip("torchao.quantization.pt2e.quantize_pt2e")
torchao_pt2e = pytest.importorskip("torchao.quantization.pt2e")
x86 = pytest.importorskip("torchao.quantization.pt2e.quantizer.x86_inductor_quantizer")


def r_input(*shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(sum(shape))) * 2


class ConvLinear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.fc = torch.nn.Linear(4 * 4 * 4, 5)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))


@functools.cache
def _prepared(observers: bool) -> tuple[torch.fx.GraphModule, torch.Tensor]:
    torch.manual_seed(0)
    example = torch.randn(2, 3, 6, 6)
    captured = torch.export.export(ConvLinear(), (example,)).module()
    quantizer = x86.X86InductorQuantizer()
    quantizer.set_global(x86.get_default_x86_inductor_quantization_config(is_qat=True))
    prepared = pt2e.prepare_qat_pt2e(captured, quantizer)
    for _ in range(3):  # training steps move the observers' running min/max
        prepared(torch.randn(2, 3, 6, 6))
    torchao_pt2e.move_exported_model_to_eval(prepared)
    if not observers:
        prepared.apply(torchao_pt2e.disable_observer)
    return prepared, example


def test_with_observers_off_each_fake_quantizer_is_a_qdq_pair_matching_eager():
    model, x = _prepared(observers=False)
    program = exporter.export(model, (x,))
    counts = collections.Counter(node.op_type for node in program.model.graph)
    # the input, the conv's weight (per channel), the relu's output, the linear's weight
    assert counts["QuantizeLinear"] == counts["DequantizeLinear"] == 4, counts
    np.testing.assert_allclose(
        run_onnx(program, (x,))[0], model(x).detach().numpy(), rtol=1e-5, atol=1e-6
    )


def test_with_observers_on_the_export_says_to_turn_them_off():
    model, x = _prepared(observers=True)
    with pytest.raises(TranslationError, match="disable_observer"):
        exporter.export(model, (x,))


class FusedObserver(torch.nn.Module):
    """What a fused fake quantizer calls, with its observer off (buffers as in torchao's)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("observer_on", torch.tensor([0]))
        self.register_buffer("fake_quant_on", torch.tensor([1]))
        self.register_buffer("running_min", torch.tensor([-1.5]))
        self.register_buffer("running_max", torch.tensor([2.0]))
        self.register_buffer("scale", torch.tensor([1.0]))
        self.register_buffer("zero_point", torch.tensor([0], dtype=torch.int32))

    def forward(self, x):
        return torch.fused_moving_avg_obs_fake_quant(
            x, self.observer_on, self.fake_quant_on, self.running_min, self.running_max,
            self.scale, self.zero_point, 0.01, 0, 255, 0, False, False,
        )  # fmt: skip


def test_the_fused_observer_exports_with_a_dynamic_batch():
    # the fake-quantize ops have CPU kernels only: the exporter's Meta kernels let torch.export
    # trace them with symbolic sizes
    model, x = FusedObserver().eval(), r_input(4, 8)
    program = exporter.export(model, (x,), dynamic_shapes=({0: torch.export.Dim("batch")},))
    grown = r_input(7, 8)
    np.testing.assert_array_equal(run_onnx(program, (grown,))[0], model(grown).numpy())
