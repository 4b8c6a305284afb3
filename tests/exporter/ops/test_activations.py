"""Activation functions against eager torch: parameters, dtypes, 0-d/empty, dynamic shapes, and
the opset-dependent choices (Gelu from opset 20, Mish from opset 18)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tests.op_check import Lambda, check_op, dynamic, tensor_maker
from torch_onnx_conformance import exporter

r = tensor_maker(scale=3, seed_stride=11)

DYN = torch.export.Dim.DYNAMIC
NAN, INF = math.nan, math.inf


ACTIVATIONS = {
    "relu": F.relu,
    "relu6": F.relu6,
    "leaky_relu": F.leaky_relu,
    "leaky_relu_slope": lambda x: F.leaky_relu(x, 0.2),
    "elu": F.elu,
    "elu_alpha": lambda x: F.elu(x, 0.5),
    "selu": F.selu,
    "celu": F.celu,
    "celu_alpha": lambda x: F.celu(x, 2.0),
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "hardswish": F.hardswish,
    "hardsigmoid": F.hardsigmoid,
    "hardtanh": F.hardtanh,
    "hardtanh_bounds": lambda x: F.hardtanh(x, -2.0, 0.5),
    "mish": F.mish,
    "softplus": F.softplus,
    "softplus_beta": lambda x: F.softplus(x, beta=2.0, threshold=5.0),
    "softsign": F.softsign,
    "tanhshrink": F.tanhshrink,
    "hardshrink": F.hardshrink,
    "hardshrink_lambda": lambda x: F.hardshrink(x, 1.5),
    "softshrink": F.softshrink,
    "softshrink_lambda": lambda x: F.softshrink(x, 1.0),
    "threshold": lambda x: F.threshold(x, 0.5, -2.0),
    "logsigmoid": F.logsigmoid,
    "rrelu_eval": lambda x: F.rrelu(x, 0.1, 0.3, training=False),
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "glu": F.glu,
    "glu_dim0": lambda x: F.glu(x, 0),
    "prelu_shared": lambda x: F.prelu(x, torch.tensor([0.25], dtype=x.dtype)),
    "elu_module": torch.nn.ELU(alpha=1.3),
    "selu_inplace": lambda x: F.selu(x.clone(), inplace=True),
    "relu_inplace": lambda x: torch.relu_(x * 1),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation(name, dtype):
    x = r(4, 6, dtype=dtype)
    t = 1e-5 if dtype is torch.float32 else 2e-3
    check_op(ACTIVATIONS[name], (x,), rtol=t, atol=t)


SPECIAL = torch.tensor(
    [0.0, -0.0, 1e-8, -1e-8, 30.0, -30.0, 100.0, -100.0, INF, -INF, NAN, 0.5, -0.5, 1.5, -1.5]
)


@pytest.mark.parametrize("name", sorted(set(ACTIVATIONS) - {"glu", "glu_dim0"}))
def test_activation_special_values(name):
    x = SPECIAL
    if name == "gelu":
        # torch's CPU gelu returns nan at +inf; the ONNX Gelu op and the formula return inf.
        x = x[x.abs() != INF]
    check_op(ACTIVATIONS[name], (x,), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "name", ["relu", "gelu", "silu", "mish", "softplus", "logsigmoid", "hardswish", "elu"]
)
def test_activation_0d_and_empty(name):
    check_op(ACTIVATIONS[name], (torch.tensor(-0.75),))
    check_op(ACTIVATIONS[name], (torch.zeros(2, 0),))


@pytest.mark.parametrize(
    "name",
    [
        "gelu",
        "gelu_tanh",
        "silu",
        "hardswish",
        "mish",
        "softplus_beta",
        "softshrink",
        "glu",
        "glu_dim0",
        "prelu_shared",
        "logsigmoid",
        "threshold",
    ],
)
def test_activation_dynamic(name):
    x = r(4, 6)
    check_op(ACTIVATIONS[name], (x,), dynamic_shapes=dynamic(x), second_args=(r(6, 2, seed=3),))


@pytest.mark.parametrize(
    "dtype", [torch.int64, torch.int32, torch.int8, torch.uint8], ids=["i64", "i32", "i8", "u8"]
)
def test_relu_family_on_ints(dtype):
    x = torch.tensor([[-3, 0, 2, 7], [9, -1, 4, 5]]).to(dtype)
    if dtype is torch.uint8:
        x = x.abs()
    check_op(lambda t: (F.relu(t), F.hardtanh(t, 0, 4), F.threshold(t, 1, 0)), (x,), rtol=0, atol=0)


# ----------------------------------------------------------------------------- gelu opsets
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("opset", [17, 20, 23])
def test_gelu_across_opsets(opset, approximate):
    x = r(3, 5)
    program = check_op(
        lambda t: F.gelu(t, approximate=approximate),
        (x,),
        opset=opset,
        dynamic_shapes=dynamic(x),
        second_args=(r(2, 7, seed=4),),
    )
    ops = [n.op_type for n in program.model_proto.graph.node]
    if opset >= 20:
        assert ops == ["Gelu"], ops
        (node,) = program.model_proto.graph.node
        assert node.attribute[0].s.decode() == approximate
    else:
        assert "Gelu" not in ops and ("Erf" in ops or "Tanh" in ops), ops


@pytest.mark.parametrize("opset", [17, 20, 23])
def test_gelu_float16_across_opsets(opset):
    x = r(3, 5, dtype=torch.float16)
    check_op(F.gelu, (x,), opset=opset, rtol=2e-3, atol=2e-3)
    check_op(lambda t: F.gelu(t, approximate="tanh"), (x,), opset=opset, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("opset", [17, 18, 20])
def test_mish_across_opsets(opset):
    program = check_op(F.mish, (r(3, 5),), opset=opset)
    ops = [n.op_type for n in program.model_proto.graph.node]
    assert ("Mish" in ops) == (opset >= 18), ops


def test_one_onnx_op_per_activation():
    expected = {
        F.hardswish: "HardSwish",
        F.hardsigmoid: "HardSigmoid",
        F.selu: "Selu",
        F.celu: "Celu",
        F.elu: "Elu",
        F.leaky_relu: "LeakyRelu",
        F.relu: "Relu",
        F.relu6: "Clip",
    }
    for fn, op_type in expected.items():
        program = exporter.export(Lambda(fn), (r(2, 3),), optimize=False)
        ops = [n.op_type for n in program.model_proto.graph.node if n.op_type != "Constant"]
        assert ops == [op_type], (fn.__name__, ops)


# -------------------------------------------------------------------------------- prelu
@pytest.mark.parametrize(
    ("shape", "channels"),
    [((2, 3, 4, 5), 3), ((2, 3, 4, 5), 1), ((4, 6), 6), ((5,), 1), ((), 1), ((2, 3, 4), 3)],
)
def test_prelu_weights(shape, channels):
    weight = torch.linspace(0.1, 0.5, channels)
    check_op(lambda x, w: F.prelu(x, w), (r(*shape), weight))


def test_prelu_module_dynamic():
    module = torch.nn.PReLU(3)
    with torch.no_grad():
        module.weight.copy_(torch.tensor([0.1, 0.2, 0.3]))
    x = r(2, 3, 4)
    check_op(module, (x,), dynamic_shapes=({0: DYN, 2: DYN},), second_args=(r(5, 3, 2),))


def test_prelu_float16():
    check_op(
        lambda x, w: F.prelu(x, w),
        (r(2, 3, 4, dtype=torch.float16), torch.tensor([0.1, 0.2, 0.3], dtype=torch.float16)),
        rtol=2e-3,
        atol=2e-3,
    )


# ------------------------------------------------------------------------- other details
def test_rrelu_training_draws_slopes_in_range():
    x = -torch.rand(200) - 0.5
    program = exporter.export(Lambda(lambda t: F.rrelu(t, 0.1, 0.3, training=True)), (x,))
    (got,) = program(x)
    slopes = torch.as_tensor(got) / x
    assert slopes.min() >= 0.1 - 1e-6 and slopes.max() <= 0.3 + 1e-6
    assert slopes.std() > 0.01  # random per element, not one shared slope


def test_log_sigmoid_forward_buffer():
    check_op(lambda x: torch.ops.aten.log_sigmoid_forward(x), (r(3, 4),))


def test_softplus_threshold_returns_input():
    x = torch.tensor([19.0, 21.0, 50.0, -50.0])
    check_op(lambda t: F.softplus(t), (x,), rtol=0, atol=1e-6)
    check_op(lambda t: F.softplus(t, beta=0.5, threshold=3.0), (x,), rtol=1e-6, atol=1e-6)


def test_activations_in_a_model():
    model = torch.nn.Sequential(
        torch.nn.Linear(6, 8),
        torch.nn.GELU(),
        torch.nn.Linear(8, 8),
        torch.nn.SiLU(),
        torch.nn.Linear(8, 4),
        torch.nn.Hardswish(),
    )
    x = r(3, 6)
    check_op(model, (x,), dynamic_shapes=({0: DYN},), second_args=(r(7, 6),), rtol=1e-4, atol=1e-5)
