"""Custom ops: translations given as onnxscript code or as ctx-style functions, kept as functions."""

from __future__ import annotations

import onnx
import onnxscript
import pytest
import torch
from onnxscript import opset18 as op

import exporter
from exporter.ops import Registry, register


@torch.library.custom_op("customtest::scaled_add", mutates_args=())
def scaled_add(x: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
    return x + y * scale


@scaled_add.register_fake
def _(x, y, scale):
    return torch.empty_like(x)


class UsesCustomOp(torch.nn.Module):
    def forward(self, x, y):
        return torch.ops.customtest.scaled_add(x, y, 3.0) + 1.0


SCALED_ADD = torch.ops.customtest.scaled_add.default
CUSTOM_OPSET = onnxscript.values.Opset("com.example", 1)


def onnxscript_builders(x, y, scale):
    # A plain Python function building nodes with onnxscript's opset builders.
    return op.Add(x, op.Mul(y, op.Constant(value_float=scale)))


@onnxscript.script(CUSTOM_OPSET)
def scaled_add_function(x, y, scale: float):  # no return annotation: must not crash the export
    return op.Add(x, op.Mul(y, op.CastLike(scale, y)))


def ctx_style(ctx, x, y, scale):
    return ctx.op.Add(x, ctx.op.Mul(y, ctx.scalar_like(scale, y)))


def _check(program, x, y):
    proto = program.model_proto
    onnx.checker.check_model(proto, full_check=True)
    (got,) = program(x, y)
    torch.testing.assert_close(got, x + y * 3.0 + 1.0, rtol=1e-6, atol=1e-6)
    return proto


@pytest.mark.parametrize(
    "translation", [onnxscript_builders, ctx_style], ids=["onnxscript-builders", "ctx"]
)
def test_custom_translation_inline(translation):
    x, y = torch.rand(2, 3), torch.rand(2, 3)
    program = exporter.export(
        UsesCustomOp(), (x, y), custom_translation_table={SCALED_ADD: translation}
    )
    proto = _check(program, x, y)
    assert {n.op_type for n in proto.graph.node} >= {"Add", "Mul"}


@pytest.mark.parametrize("optimize", [False, True])
def test_onnxscript_function_is_kept_as_a_function(optimize):
    x, y = torch.rand(2, 3), torch.rand(2, 3)
    program = exporter.export(
        UsesCustomOp(),
        (x, y),
        optimize=optimize,
        custom_translation_table={SCALED_ADD: scaled_add_function},
    )
    proto = _check(program, x, y)
    assert [f.name for f in proto.functions] == ["scaled_add_function"]
    call = [n for n in proto.graph.node if n.op_type == "scaled_add_function"]
    assert len(call) == 1 and call[0].domain == "com.example"
    assert {i.domain: i.version for i in proto.opset_import}.get("com.example") == 1


def test_custom_domain_node_gets_its_opset_import():
    def emit_custom(ctx, x, y, scale):
        return ctx.op.ScaledAdd(x, y, scale=scale, _domain="com.vendor", _version=2)

    program = exporter.export(
        UsesCustomOp(),
        (torch.rand(2, 3), torch.rand(2, 3)),
        optimize=False,
        custom_translation_table={SCALED_ADD: emit_custom},
    )
    imports = {i.domain: i.version for i in program.model_proto.opset_import}
    assert imports.get("com.vendor") == 2


def test_public_registration_api():
    registry = Registry()
    register(SCALED_ADD, onnxscript_builders, registry=registry)
    translation = registry.get(SCALED_ADD)
    assert translation.custom and translation.style == "onnxscript"
    register(SCALED_ADD, ctx_style, registry=registry)
    assert registry.get(SCALED_ADD).style == "ctx"


def test_custom_translation_overrides_builtin():
    class AddModel(torch.nn.Module):
        def forward(self, x):
            return torch.sigmoid(x)

    def sigmoid_override(ctx, x):
        return ctx.op.HardSigmoid(x)

    x = torch.rand(4)
    program = exporter.export(
        AddModel(),
        (x,),
        optimize=False,
        custom_translation_table={torch.ops.aten.sigmoid.default: sigmoid_override},
    )
    assert [n.op_type for n in program.model.graph] == ["HardSigmoid"]


@torch.library.custom_op("customtest::halves_swapped", mutates_args=())
def halves_swapped(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat([b, a], dim=-1)


@halves_swapped.register_fake
def _(x):
    return torch.empty_like(x)


class SwapsHalves(torch.nn.Module):
    def forward(self, x):
        return torch.ops.customtest.halves_swapped(x) * 2.0


def split_by_count(x):
    # Variadic outputs sized by the num_outputs attribute, indexed like a list.
    pieces = op.Split(x, axis=-1, num_outputs=2)
    return op.Concat(pieces[1], pieces[0], axis=-1)


def split_by_sizes(x):
    # Variadic outputs sized by the length of the split input.
    first, second = op.Split(x, op.Constant(value_ints=[2, 2]), axis=-1)
    return op.Concat(second, first, axis=-1)


@pytest.mark.parametrize("translation", [split_by_count, split_by_sizes])
def test_onnxscript_variadic_outputs_follow_the_call(translation):
    x = torch.rand(3, 4)
    program = exporter.export(
        SwapsHalves(),
        (x,),
        custom_translation_table={torch.ops.customtest.halves_swapped.default: translation},
    )
    onnx.checker.check_model(program.model_proto, full_check=True)
    (got,) = program(x)
    torch.testing.assert_close(got, torch.cat([x[:, 2:], x[:, :2]], dim=-1) * 2.0)


def test_onnxscript_variadic_output_without_a_count_is_a_clear_error():
    def split_unsized(x):
        return op.Split(x, axis=-1)[0]

    with pytest.raises(Exception, match="num_outputs"):
        exporter.export(
            SwapsHalves(),
            (torch.rand(3, 4),),
            custom_translation_table={torch.ops.customtest.halves_swapped.default: split_unsized},
        )
