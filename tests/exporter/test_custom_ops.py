"""Custom ops: translations given as onnxscript code or as ctx-style functions, kept as functions."""

from __future__ import annotations

import onnx
import onnxscript
import pytest
import torch
from onnxscript import opset18 as op

from torch_onnx_conformance import exporter
from torch_onnx_conformance.exporter.ops import Registry, register


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


# ---------------------------------------------------------------- traced through the implementation
@torch.library.custom_op("customtest::experts_matmul", mutates_args=())
def experts_matmul(x: torch.Tensor, weights: torch.Tensor, gates: torch.Tensor) -> torch.Tensor:
    # MoE-like: every expert's product, weighted by its gate, summed over the experts.
    out = torch.zeros(x.shape[0], weights.shape[2], dtype=x.dtype)
    for expert in range(weights.shape[0]):
        out = out + gates[:, expert : expert + 1] * (x @ weights[expert])
    return out


@experts_matmul.register_fake
def _(x, weights, gates):
    return x.new_empty(x.shape[0], weights.shape[2])


class Experts(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weights = torch.nn.Parameter(torch.randn(3, 4, 5))
        self.router = torch.nn.Linear(4, 3)

    def forward(self, x):
        gates = self.router(x).softmax(-1)
        return torch.ops.customtest.experts_matmul(x, self.weights, gates).relu()


def test_custom_op_without_a_translation_is_traced_through_its_implementation(caplog):
    model, x = Experts().eval(), torch.randn(6, 4)
    with caplog.at_level("INFO", logger="exporter"):
        program = exporter.export(model, (x,), dynamic_shapes=({0: "tokens"},))
    onnx.checker.check_model(program.model_proto, full_check=True)
    note = "traced custom op customtest.experts_matmul.default through its Python implementation"
    assert any(n.startswith(note) for n in program.record.notes)
    assert note in caplog.text
    assert {n.op_type for n in program.model.graph} >= {"MatMul", "Softmax"}
    assert all(n.domain in ("", "ai.onnx") for n in program.model.graph)
    with torch.no_grad():
        for rows in (6, 9):  # the token dim stays dynamic through the traced loop
            x = torch.randn(rows, 4)
            torch.testing.assert_close(program(x)[0], model(x), rtol=1e-5, atol=1e-5)


@torch.library.custom_op("customtest::cpu_only_softplus", mutates_args=(), device_types="cpu")
def cpu_only_softplus(x: torch.Tensor) -> torch.Tensor:
    return torch.log1p(torch.exp(x))


@cpu_only_softplus.register_fake
def _(x):
    return torch.empty_like(x)


def test_custom_op_with_a_cpu_kernel_is_traced_through_it():
    class Softplus(torch.nn.Module):
        def forward(self, x):
            return torch.ops.customtest.cpu_only_softplus(x) * 2.0

    x = torch.randn(3, 4)
    program = exporter.export(Softplus().eval(), (x,))
    torch.testing.assert_close(program(x)[0], torch.nn.functional.softplus(x) * 2.0)


def test_a_registered_translation_wins_over_tracing():
    def one_custom_node(ctx, x, weights, gates):
        return ctx.op.ExpertsMatmul(x, weights, gates, _domain="com.example", _version=1)

    program = exporter.export(
        Experts().eval(),
        (torch.randn(6, 4),),
        optimize=False,
        custom_translation_table={torch.ops.customtest.experts_matmul.default: one_custom_node},
    )
    assert "ExpertsMatmul" in [n.op_type for n in program.model.graph]
    assert "MatMul" not in [n.op_type for n in program.model.graph]
    assert not any("traced custom op" in n for n in program.record.notes)


@torch.library.custom_op("customtest::doubled_until_large", mutates_args=())
def doubled_until_large(x: torch.Tensor) -> torch.Tensor:
    while x.sum() < 100:  # how often it runs depends on the values: no graph can follow it
        x = x * 2
    return x


@doubled_until_large.register_fake
def _(x):
    return torch.empty_like(x)


def test_custom_op_whose_implementation_cannot_be_traced_names_op_and_remedy():
    class Doubles(torch.nn.Module):
        def forward(self, x):
            return torch.ops.customtest.halves_swapped(torch.ops.customtest.doubled_until_large(x))

    with pytest.raises(exporter.UnsupportedOpError) as info:
        exporter.export(Doubles().eval(), (torch.rand(2, 4) + 0.1,))
    message = str(info.value)
    # the op that cannot be traced is listed with every other op without a translation
    assert message.startswith("1 ops have no ONNX translation")
    assert "  - customtest.doubled_until_large.default: FX node" in message
    assert "tracing it through its Python implementation failed (GuardOnDataDependent" in message
    assert "register a translation for torch.ops.customtest.doubled_until_large.default" in message


transformers = pytest.importorskip("transformers")
try:
    import transformers.integrations.moe  # noqa: F401 - registers transformers' custom ops
except ImportError:
    pass
_GROUPED_MM = getattr(getattr(torch.ops, "transformers", None), "grouped_mm_fallback", None)
needs_grouped_mm = pytest.mark.skipif(
    _GROUPED_MM is None, reason="this transformers has no transformers::grouped_mm_fallback"
)


@needs_grouped_mm
def test_branch_free_grouped_mm_equals_the_library_kernel_with_an_empty_group():
    from torch_onnx_conformance.exporter._decompose import traceable_implementation

    stand_in, how = traceable_implementation(_GROUPED_MM.default)
    assert how == "a branch-free equivalent of its implementation"
    rows, weight = torch.randn(7, 4), torch.randn(3, 4, 5)
    for offs in ([2, 2, 7], [0, 5, 7], [3, 7, 7]):
        offs = torch.tensor(offs)
        torch.testing.assert_close(stand_in(rows, weight, offs), _GROUPED_MM(rows, weight, offs))


def _qwen2_moe_config():
    return transformers.Qwen2MoeConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        moe_intermediate_size=16,
        shared_expert_intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=64,
    )


def _mixtral_config():
    return transformers.MixtralConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=64,
    )


@needs_grouped_mm
@pytest.mark.parametrize(
    "config", [_qwen2_moe_config, _mixtral_config], ids=["qwen2-moe", "mixtral"]
)
def test_moe_model_exports_without_a_custom_translation(config):
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config()).eval()
    program = exporter.export(
        model,
        (),
        kwargs={"input_ids": torch.randint(0, 128, (2, 7)), "use_cache": False},
        dynamic_shapes={"input_ids": {0: "batch", 1: "sequence"}, "use_cache": None},
    )
    assert any("grouped_mm_fallback" in n for n in program.record.notes)
    for shape in ((2, 7), (3, 11)):  # the exported shape and another
        inputs = {"input_ids": torch.randint(0, 128, shape), "use_cache": False}
        with torch.no_grad():
            expected = model(**inputs).logits
        torch.testing.assert_close(program(**inputs)[0], expected, rtol=1e-4, atol=1e-4)
