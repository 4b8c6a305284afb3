"""Random ops judged by distribution at an opset with onnxruntime's own generators (20) and at
one without them (23: the counter-based generator of torch_onnx_conformance/exporter/ops/random.py).

Each op is exported once and run in onnxruntime on an input large enough that one run gives
thousands of values; eager draws the same shapes, and ``compare_distributions`` (the project's
one rule for random outputs) must accept the two samples. Its bounds have a false-failure rate of
1e-6 per statistic, so these tests do not flake.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.defs
import pytest
import torch
from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

from tests.op_check import Lambda, run_onnx
from torch_onnx_conformance import exporter
from torch_onnx_conformance.exporter.diagnostics.compare import compare_distributions
from torch_onnx_conformance.exporter.ops import _kernels, random

OPSETS = (20, 23)
N = 4000
RANDOM_OPS = {"RandomUniform", "RandomUniformLike", "RandomNormal", "RandomNormalLike"}


def _pool(x):
    """4 channels of 30 x 30 values for fractional max pooling."""
    return x[:3600].reshape(1, 4, 30, 30)


CASES = {
    "rand_like": lambda x: torch.rand_like(x),
    "randn_like": lambda x: torch.randn_like(x),
    "rand": lambda x: torch.rand(N) + 0 * x,
    "randn": lambda x: torch.randn(40, 100) + 0 * x.reshape(40, 100),
    "rand_f64": lambda x: torch.rand(N, dtype=torch.float64),
    "randint": lambda x: torch.randint(-3, 7, (N,)),
    "randint_like": lambda x: torch.randint_like(x, 2, 9),
    "uniform": lambda x: x.clone().uniform_(-2, 3),
    "normal_tensor_float": lambda x: torch.normal(x, 2.0),
    "normal_float_float": lambda x: torch.normal(1.0, 0.5, (N,)),
    "exponential": lambda x: x.clone().exponential_(2.0),
    "log_normal": lambda x: x.clone().log_normal_(0.5, 0.3),
    "cauchy": lambda x: x.clone().cauchy_(1.0, 2.0),
    "geometric": lambda x: x.clone().geometric_(0.3),
    "bernoulli": lambda x: torch.bernoulli(x.sigmoid()),
    "bernoulli_p": lambda x: torch.bernoulli(x, 0.3),
    "multinomial": lambda x: torch.multinomial(x[:600].abs().reshape(100, 6), 4),
    "multinomial_replacement": lambda x: torch.multinomial(
        x[:60].abs().reshape(10, 6), 400, replacement=True
    ),
    "rrelu_training": lambda x: torch.nn.functional.rrelu(x, 0.1, 0.6, training=True),
    "dropout_training": lambda x: torch.nn.functional.dropout(x, 0.3, training=True),
    "fractional_max_pool2d": lambda x: torch.nn.functional.fractional_max_pool2d(
        _pool(x), 3, output_size=(12, 12)
    ),
}


@pytest.fixture(scope="module")
def x():
    return torch.randn(N, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("name", list(CASES))
def test_distribution_matches_eager(name, opset, x):
    fn = CASES[name]
    program = exporter.export(Lambda(fn).eval(), (x,), opset_version=opset)
    used = {node.op_type for node in program.model_proto.graph.node}
    if opset >= 22:
        # onnxruntime has no kernel for the generators' opset-22 revisions.
        assert not used & (RANDOM_OPS | {"Multinomial"})
    actual = [np.asarray(out) for out in run_onnx(program, (x,))]
    torch.manual_seed(1)
    outputs = fn(x)
    expected = [t.numpy() for t in (outputs if isinstance(outputs, tuple) else (outputs,))]
    result = compare_distributions([expected], [actual])
    assert result.ok, result.message


def test_native_generators_stay_where_onnxruntime_has_them(x):
    program = exporter.export(Lambda(CASES["randn_like"]).eval(), (x,), opset_version=20)
    assert "RandomNormalLike" in {n.op_type for n in program.model_proto.graph.node}


def test_counter_generator_draws_afresh_every_run(x):
    program = exporter.export(Lambda(CASES["rand_like"]).eval(), (x,), opset_version=23)
    first, second = run_onnx(program, (x,))[0], run_onnx(program, (x,))[0]
    assert not np.array_equal(first, second)
    assert 0 <= first.min() and first.max() < 1


# ------------------------------------------------------------------- the kernel knowledge
def _cpu_kernels() -> dict[str, list[tuple[int, int, set[str]]]]:
    """op -> [(first, last version, type names)] of onnxruntime's CPU kernels."""
    kernels: dict[str, list] = {}
    for k in ort_state.get_all_opkernel_def():
        if k.provider != "CPUExecutionProvider" or k.domain not in ("", "ai.onnx"):
            continue
        types = {t for ts in k.type_constraints.values() for t in ts}
        kernels.setdefault(k.op_name, []).append((*k.version_range, types))
    return kernels


_ORT_TYPE_NAMES = {torch.float32: "float", torch.float64: "double", torch.float16: "float16"}


def _runs(kernels, op: str, opset: int, dtype: torch.dtype | None = None) -> bool:
    """Whether a node of ``op`` in an ``opset`` model finds a kernel: onnxruntime matches the
    node's since-version, so an open-ended kernel ``N+`` serves since-version N only."""
    since = onnx.defs.get_schema(op, opset).since_version
    want = None if dtype is None else f"tensor({_ORT_TYPE_NAMES.get(dtype, str(dtype)[6:])})"
    for first, last, types in kernels.get(op, ()):
        ends = last if last < 2**31 - 1 else first
        if first <= since <= ends and (want is None or want in types):
            return True
    return False


@pytest.mark.parametrize("opset", range(17, 27))
def test_kernel_table_matches_onnxruntime(opset):
    kernels = _cpu_kernels()
    for op in sorted(RANDOM_OPS | {"Multinomial"}):
        assert _kernels.has_kernel(op, opset=opset) == _runs(kernels, op, opset), (op, opset)
    if _kernels.has_kernel("RandomUniform", opset=opset):
        return  # the counter-based generator is not used at this opset
    for op, dtypes in random.COUNTER_KERNELS.items():
        for dtype in dtypes:
            assert _runs(kernels, op, opset, dtype), f"no {op}({dtype}) kernel at opset {opset}"


@pytest.mark.parametrize("shape", [(0, 3), (), (2, 0, 5)])
def test_counter_generator_handles_empty_and_scalar_shapes(shape):
    x = torch.zeros(shape)
    program = exporter.export(
        Lambda(lambda t: (torch.rand_like(t), torch.randn_like(t))).eval(), (x,), opset_version=23
    )
    uniform, normal = run_onnx(program, (x,))
    assert uniform.shape == shape and normal.shape == shape
