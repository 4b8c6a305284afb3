"""Bad input is a clear error naming the value and what to do, never a silently wrong model.

Each case here is one where torch.onnx 2.14 returns a model (or runs a call) that computes or
declares something else, so ours is asserted alone.
"""

from __future__ import annotations

import io
import warnings

import pytest
import torch

from torch_onnx_conformance import exporter
from torch_onnx_conformance.exporter import InvalidExportArgumentsError


class Add(torch.nn.Module):
    def forward(self, x, b):
        return x + b


class Outer(torch.nn.Module):
    def forward(self, x, y):
        return x[:, None] * y


X = torch.randn(2, 3)
Y = torch.randn(2, 3)


def test_one_axis_name_on_dims_of_the_same_size_is_kept():
    program = exporter.export(
        Add().eval(), (X, Y), dynamic_shapes=({0: "batch"}, {0: "batch"}), verify="strict"
    )
    assert [str(v.shape[0]) for v in program.model.graph.inputs] == ["batch", "batch"]


def test_output_name_equal_to_an_input_name():
    # torch.onnx writes a graph whose input and output share a name
    with pytest.raises(InvalidExportArgumentsError, match=r"\['a'\] are both in input_names"):
        exporter.export(Add().eval(), (X, Y), input_names=["a", "b"], output_names=["a"])


def test_output_name_equal_to_a_default_input_name():
    # before: the input was silently renamed x__renamed
    with pytest.raises(InvalidExportArgumentsError, match=r"'x' already names another graph"):
        exporter.export(Add().eval(), (X, Y), output_names=["x"])


@pytest.mark.parametrize("what", ["input_names", "output_names"])
def test_empty_name(what):
    with pytest.raises(InvalidExportArgumentsError, match=rf"{what} has an empty name"):
        exporter.export(Add().eval(), (X, Y), **{what: [""]})


@pytest.mark.parametrize("value", ["yes", "Strict", 1, None])
def test_verify_value_other_than_the_documented_ones(value):
    with pytest.raises(InvalidExportArgumentsError, match=r"verify=.* is not one of False, True"):
        exporter.export(Add().eval(), (X, Y), verify=value)


def _subtract(ctx, x, y, **_):
    return ctx.op.Sub(x, y)


def test_translation_table_string_key_names_its_overload():
    program = exporter.export(
        Add().eval(), (X, Y), custom_translation_table={"aten::add.Tensor": _subtract}
    )
    torch.testing.assert_close(program(X, Y)[0], X - Y)  # the custom translation was used


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("aten::no_such_op.Tensor", "names no registered op"),
        ("aten::add.NoSuchOverload", "has no overload 'NoSuchOverload'"),
        ("add", "names no registered op"),
        (torch.add, "names no op that can appear in an exported graph"),
    ],
)
def test_translation_table_key_that_names_no_op(key, message):
    with pytest.raises(InvalidExportArgumentsError, match=message):
        exporter.export(Add().eval(), (X, Y), custom_translation_table={key: _subtract})


def test_translation_that_returns_something_other_than_values():
    def returns_a_number(ctx, x, y, **_):
        return 3

    with pytest.raises(InvalidExportArgumentsError, match="returned int .* must return the ONNX"):
        exporter.export(
            Add().eval(),
            (X, Y),
            custom_translation_table={torch.ops.aten.add.Tensor: returns_a_number},
        )


class ReturnsNothing(torch.nn.Module):
    def forward(self, x):
        x.add(1)


class ReturnsANumber(torch.nn.Module):
    def forward(self, x):
        return 3


@pytest.mark.parametrize(
    ("model", "message"),
    [(ReturnsNothing(), "returned nothing"), (ReturnsANumber(), r"returned only constants \[3\]")],
)
def test_forward_without_tensor_outputs(model, message):
    # torch.onnx returns a model with 0 outputs for the first
    with pytest.raises(InvalidExportArgumentsError, match=message):
        exporter.export(model.eval(), (X,))


def test_apply_weights_names_a_weight_of_the_wrong_shape_or_dtype():
    linear = torch.nn.Linear(3, 4).eval()
    program = exporter.export(linear, (X,))
    with pytest.raises(InvalidExportArgumentsError, match=r"'weight' has shape \(3, 4\).*\(4, 3\)"):
        program.apply_weights({"weight": torch.randn(3, 4)})
    with pytest.raises(InvalidExportArgumentsError, match=r"'bias' has dtype torch.float64"):
        program.apply_weights({"bias": torch.randn(4, dtype=torch.float64)})
    torch.testing.assert_close(program(X)[0], linear(X))  # a refused call changed nothing


def test_meta_device_model_without_weights_applied(tmp_path):
    with torch.device("meta"):
        meta_linear = torch.nn.Linear(3, 4).eval()
    with pytest.warns(UserWarning, match="weights are on the meta device"):
        program = exporter.export(meta_linear, (torch.randn(2, 3, device="meta"),))
    with pytest.raises(InvalidExportArgumentsError, match="weight, bias are on the meta device"):
        program(X)
    with pytest.raises(InvalidExportArgumentsError, match="call apply_weights"):
        program.save(tmp_path / "model.onnx")
    assert not list(tmp_path.iterdir())
    real = torch.nn.Linear(3, 4).eval()
    program.apply_weights(real.state_dict())
    torch.testing.assert_close(program(X)[0], real(X))


def test_dump_exported_program_into_an_unwritable_folder():
    # /proc refuses new files even to root, where permission bits would say "writable"
    with pytest.raises(InvalidExportArgumentsError, match=r"artifacts_dir /proc is not writable"):
        exporter.export(Add().eval(), (X, Y), dump_exported_program=True, artifacts_dir="/proc")


def test_model_over_two_gib_into_bytesio_fails_before_capture(monkeypatch):
    # meta weights carry their size without their bytes: 2.2 GiB of them, no memory spent
    with torch.device("meta"):
        big = torch.nn.Linear(24 * 1024, 24 * 1024).eval()

    def no_capture(*args, **kwargs):
        raise AssertionError("capture ran although the weights alone exceed 2 GiB")

    monkeypatch.setattr(exporter._capture, "capture", no_capture)
    with pytest.raises(InvalidExportArgumentsError, match=r"weights alone take about 2\.\d+ GiB"):
        exporter.export(big, (torch.randn(1, 24 * 1024, device="meta"),), io.BytesIO())


def test_meta_weights_into_bytesio_name_the_weights():
    with torch.device("meta"):
        meta_linear = torch.nn.Linear(3, 4).eval()
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(InvalidExportArgumentsError, match="weight, bias are on the meta"):
            exporter.export(meta_linear, (torch.randn(2, 3, device="meta"),), buffer)
    assert not buffer.getvalue()


def test_serialized_size_estimate_is_close_to_the_real_size():
    from torch_onnx_conformance.exporter._program import serialized_size_estimate

    program = exporter.export(torch.nn.Linear(64, 32).eval(), (torch.randn(2, 64),))
    real = len(program.model_proto.SerializeToString())
    estimate = serialized_size_estimate(program.model)
    assert real <= estimate <= real + 4096
