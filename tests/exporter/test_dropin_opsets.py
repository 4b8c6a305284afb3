"""opset_version: every opset onnxruntime runs is accepted, like torch.onnx accepts them.

17 to 26 are translated directly (26 is the newest opset onnxruntime 1.31 runs); older ones are
translated at 17 without the operators they lack and taken down with ONNX's version converter,
with a warning. A conversion the converter cannot do is an error naming the opset: torch.onnx
then hands back a model at opset 18 instead, which is not what was asked for.
"""

from __future__ import annotations

import warnings

import onnx
import pytest
import torch

from torch_onnx_conformance import exporter
from torch_onnx_conformance.exporter._errors import InvalidExportArgumentsError
from torch_onnx_conformance.exporter._opset_convert import OpsetConversionError


class Block(torch.nn.Module):
    """Conv, Gemm, LayerNormalization, Gelu, SiLU, Softmax and reductions: ops whose ONNX
    form changes between opsets."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.linear = torch.nn.Linear(4, 5)
        self.norm = torch.nn.LayerNorm(5)

    def forward(self, x):
        h = self.norm(self.linear(self.conv(x).mean((-1, -2))))
        h = torch.nn.functional.gelu(h) + torch.nn.functional.silu(h)
        return torch.softmax(h, -1).amax(0)


def _block():
    torch.manual_seed(0)
    return Block().eval(), (torch.randn(2, 3, 8, 8),)


def _opset_of(proto: onnx.ModelProto) -> int:
    return next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))


@pytest.mark.parametrize("opset", [17, 18, 20, 21, 23, 24, 25, 26])
def test_translated_opsets_run_and_match_eager(opset):
    model, args = _block()
    program = exporter.export(model, args, opset_version=opset, verify="strict")
    assert _opset_of(program.model_proto) == opset
    onnx.checker.check_model(program.model_proto, full_check=True)
    torch.testing.assert_close(program(*args)[0], model(*args))


@pytest.mark.parametrize("opset", [14, 15, 16])
def test_older_opsets_are_converted_down_with_a_warning_and_verified(opset):
    model, args = _block()
    with pytest.warns(UserWarning, match=f"opset_version {opset} is older than opset 17"):
        program = exporter.export(model, args, opset_version=opset, verify="strict")
    assert _opset_of(program.model_proto) == opset
    ops = {node.op_type for node in program.model_proto.graph.node}
    assert "LayerNormalization" not in ops and "Gelu" not in ops
    torch.testing.assert_close(program(*args)[0], model(*args))


@pytest.mark.parametrize("opset", [18, 23, 24, 25])
def test_torch_onnx_side_by_side(opset):
    """Where torch.onnx 2.14.1 exports this block correctly, ours agrees with it and eager."""
    model, args = _block()
    expected = model(*args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = torch.onnx.export(model, args, dynamo=True, opset_version=opset, verbose=False)
    assert _opset_of(theirs.model_proto) == opset
    torch.testing.assert_close(theirs(*args)[0], expected)
    ours = exporter.export(model, args, opset_version=opset)
    torch.testing.assert_close(ours(*args)[0], expected)


def test_opset_the_converter_cannot_reach_is_an_error_naming_it():
    model, args = _block()
    with (
        pytest.warns(UserWarning, match="converted down"),
        pytest.raises(OpsetConversionError, match="down to opset 13.*No Adapter"),
    ):
        exporter.export(model, args, opset_version=13)


@pytest.mark.parametrize("opset", [6, 27])
def test_opsets_onnxruntime_cannot_run_are_refused(opset):
    model, args = _block()
    with pytest.raises(InvalidExportArgumentsError, match=f"opset_version {opset} .*7 to 26"):
        exporter.export(model, args, opset_version=opset)


class CumProdAndHash(torch.nn.Module):
    def forward(self, x, ints):
        return x.cumprod(1), ints.cumprod(0), torch.ops.aten.hash_tensor(x.double(), [1])


@pytest.mark.parametrize(("opset", "newest_ops"), [(25, False), (26, True)])
def test_opset_26_uses_cumprod_and_bitcast(opset, newest_ops):
    x = torch.tensor([[1.5, -0.0, float("inf"), 2.0], [float("nan"), 2.0, -3.25, 1e-310]])
    args = (x, torch.arange(1, 7))
    program = exporter.export(CumProdAndHash(), args, opset_version=opset)
    ops = {node.op_type for node in program.model_proto.graph.node}
    assert ({"CumProd", "BitCast"} <= ops) is newest_ops
    got = program(*args)
    expected = CumProdAndHash()(*args)
    torch.testing.assert_close(got[0], expected[0], equal_nan=True)
    torch.testing.assert_close(got[1], expected[1])
    assert torch.equal(got[2], expected[2])
