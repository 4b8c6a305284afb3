"""Drop-in input conventions of torch.onnx.export(..., dynamo=True), side by side with torch.onnx.

Where torch.onnx behaves correctly both exporters run the same call and ours must match it (so a
torch bump shows drift); where torch.onnx is wrong, ours alone is asserted.
"""

from __future__ import annotations

import warnings

import onnx_ir as ir
import onnxruntime
import pytest
import torch
from torch.export import Dim

from torch_onnx_conformance import exporter


def _torch_onnx(model, args, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return torch.onnx.export(model, args, dynamo=True, verbose=False, **options)


def _ours(model, args, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return exporter.export(model, args, **options)


BOTH = pytest.mark.parametrize("export", [_ours, _torch_onnx], ids=["ours", "torch_onnx"])


def _inputs(program):
    return [(v.name, _dims(v)) for v in program.model.graph.inputs]


def _dims(value):
    return [d.value if isinstance(d, ir.SymbolicDim) else d for d in value.shape]


class Add(torch.nn.Module):
    def forward(self, x, b):
        return x + b


class Nested(torch.nn.Module):
    def forward(self, x, pair):
        return x + pair[0] * pair[1], x * 2


class DictLast(torch.nn.Module):
    def forward(self, x, d):
        return x + d["k"]


class Scale(torch.nn.Module):
    def forward(self, x, n: int):
        return x * n


X = torch.randn(2, 3)
Y = torch.randn(2, 3)


@BOTH
def test_trailing_dict_in_args_is_keyword_arguments(export):
    program = export(Add().eval(), (X, {"b": Y}))
    assert [name for name, _ in _inputs(program)] == ["x", "b"]
    torch.testing.assert_close(program(X, b=Y)[0], X + Y)


@BOTH
def test_empty_trailing_dict_passes_a_dict_positionally(export):
    program = export(DictLast().eval(), (X, {"k": Y}, {}))
    torch.testing.assert_close(program(X, {"k": Y})[0], X + Y)


def test_trailing_dict_that_only_binds_positionally_stays_an_input():
    # torch.onnx turns it into kwargs unconditionally and then fails to call forward(x, k=...)
    program = _ours(DictLast().eval(), (X, {"k": Y}))
    torch.testing.assert_close(program(X, {"k": Y})[0], X + Y)


@BOTH
def test_input_and_output_names_name_flattened_values_in_order(export):
    program = export(
        Nested().eval(), (X, (Y, Y)), input_names=["a", "p0", "p1"], output_names=["o1", "o2"]
    )
    assert [name for name, _ in _inputs(program)] == ["a", "p0", "p1"]
    assert [v.name for v in program.model.graph.outputs] == ["o1", "o2"]
    expected = Nested().eval()(X, (Y, Y))
    torch.testing.assert_close(tuple(program(X, (Y, Y))), expected)


class ReturnsItsMask(torch.nn.Module):
    def forward(self, x, mask):
        return x * mask, mask, mask


@pytest.mark.parametrize("input_names", [None, ["x", "mask"]])
def test_an_input_returned_as_it_is_keeps_its_name(input_names):
    # torch.onnx renames the input to mask_orig (and, given input_names, names the input and
    # the output both 'mask'); a caller feeds the names it exported with.
    program = _ours(ReturnsItsMask().eval(), (X, Y), input_names=input_names)
    assert [name for name, _ in _inputs(program)] == ["x", "mask"]
    outputs = [v.name for v in program.model.graph.outputs]
    assert outputs == ["output.0", "output.1", "output.2"], outputs  # named by position
    torch.testing.assert_close(tuple(program(X, Y)), (X * Y, Y, Y))
    session = onnxruntime.InferenceSession(
        ir.to_proto(program.model).SerializeToString(), providers=["CPUExecutionProvider"]
    )
    fed = session.run(None, {"x": X.numpy(), "mask": Y.numpy()})
    torch.testing.assert_close(torch.from_numpy(fed[2]), Y)


@BOTH
def test_dynamic_axes_keyed_by_input_names(export):
    program = export(
        Add().eval(),
        (X, Y),
        input_names=["a", "bb"],
        output_names=["out"],
        dynamic_axes={"a": {0: "batch"}, "bb": {0: "batch"}, "out": {0: "batch"}},
    )
    assert _inputs(program) == [("a", ["batch", 3]), ("bb", ["batch", 3])]
    x5, y5 = torch.randn(5, 3), torch.randn(5, 3)
    torch.testing.assert_close(program(x5, y5)[0], x5 + y5)


def test_dynamic_axes_name_flattened_nested_inputs():
    # torch.onnx: "Failed to convert 'dynamic_axes' to 'dynamic_shapes'" for nested inputs
    program = _ours(
        Nested().eval(),
        (X, (Y, Y)),
        input_names=["a", "p0", "p1"],
        dynamic_axes={"a": {0: "batch"}, "p0": {0: "batch"}, "p1": [0]},
    )
    assert [dims[0] for _, dims in _inputs(program)] == ["batch", "batch", "batch"]
    x5, y5 = torch.randn(5, 3), torch.randn(5, 3)
    torch.testing.assert_close(tuple(program(x5, (y5, y5))), Nested().eval()(x5, (y5, y5)))


def test_dynamic_axes_default_names_are_the_flattened_graph_input_names():
    program = _ours(Nested().eval(), (X, (Y, Y)), dynamic_axes={"x": [0], "pair_1": {0: "n"}})
    inputs = _inputs(program)
    assert [name for name, _ in inputs] == ["x", "pair_0", "pair_1"]
    assert isinstance(inputs[0][1][0], str) and inputs[2][1][0] == inputs[0][1][0]


class Reduce(torch.nn.Module):
    def forward(self, x, y):
        return x.sum(1, keepdim=True) + y.sum((1, 2))[:, None]


def test_dynamic_axes_keys_in_another_order_than_input_names():
    # torch.onnx pairs dynamic_axes with the inputs in the dict's order and fails to capture
    args = (torch.randn(4, 3), torch.randn(4, 5, 6))
    options = {"input_names": ["a", "b"], "dynamic_axes": {"b": {2: "k"}, "a": {1: "m"}}}
    program = _ours(Reduce().eval(), args, **options)
    assert _inputs(program) == [("a", [4, "m"]), ("b", [4, 5, "k"])]
    other = (torch.randn(4, 7), torch.randn(4, 5, 2))
    torch.testing.assert_close(program(*other)[0], Reduce().eval()(*other))
    with pytest.raises(Exception):  # noqa: B017 - any failure: torch.onnx's message varies
        _torch_onnx(Reduce().eval(), args, **options)


@BOTH
def test_dynamic_shapes_combined_with_input_names(export):
    program = export(
        Add().eval(),
        (X, Y),
        input_names=["A", "B"],
        dynamic_shapes={"x": {0: "batch"}, "b": {0: "batch"}},
    )
    assert _inputs(program) == [("A", ["batch", 3]), ("B", ["batch", 3])]


@BOTH
def test_baked_python_scalar_is_skipped_by_call(export):
    program = export(Scale().eval(), (X, 3))
    assert [name for name, _ in _inputs(program)] == ["x"]
    torch.testing.assert_close(program(X, 3)[0], X * 3)


def test_baked_python_scalar_is_skipped_by_verify_and_compute_values():
    program = _ours(Scale().eval(), (X, 3), verify="strict")
    assert program.verification.ok
    output = program.model.graph.outputs[0].name
    torch.testing.assert_close(program.compute_values([output], (X, 3))[0], X * 3)


def test_baked_scalar_called_with_another_value_names_the_argument():
    # torch.onnx silently computes with the exported value
    program = _ours(Scale().eval(), (X, 3))
    with pytest.raises(ValueError, match=r"input n \(args\[1\]\) was exported with the value 3"):
        program(X, 4)
    with pytest.raises(ValueError, match=r"kwargs\['n'\]"):
        program(X, n=4.5)


def test_input_names_may_name_every_flattened_input_including_baked_ones():
    program = _ours(Scale().eval(), (X, 3), input_names=["features", "factor"])
    assert [name for name, _ in _inputs(program)] == ["features"]


@BOTH
def test_dynamic_int_input_becomes_a_scalar_graph_input(export):
    program = export(Scale().eval(), (X, 3), dynamic_shapes=(None, Dim.DYNAMIC))
    inputs = list(program.model.graph.inputs)
    assert [v.name for v in inputs] == ["x", "n"]
    assert inputs[1].dtype == ir.DataType.INT64 and _dims(inputs[1]) == []
    torch.testing.assert_close(program(X, 5)[0], X * 5)


@BOTH
def test_static_int_input_is_baked(export):
    program = export(Scale().eval(), (X, 3), dynamic_shapes=(None, Dim.STATIC))
    assert [name for name, _ in _inputs(program)] == ["x"]
    torch.testing.assert_close(program(X, 3)[0], X * 3)


def test_dynamic_int_input_is_verified_and_computed():
    program = _ours(
        Scale().eval(), (X, 3), dynamic_shapes=({0: "batch"}, Dim.DYNAMIC), verify="strict"
    )
    assert program.verification.ok
    assert program.record.status["second-shape"] == "ok"  # the scalar is not a dim
    output = program.model.graph.outputs[0].name
    torch.testing.assert_close(program.compute_values([output], (X, 7))[0], X * 7)


def test_named_dim_on_an_int_input_says_what_to_use():
    with pytest.raises(exporter.InvalidExportArgumentsError, match="Dim.DYNAMIC or Dim.AUTO"):
        _ours(Scale().eval(), (X, 3), dynamic_shapes=(None, Dim("n")))


@BOTH
def test_renamed_axis_sharing_constraints_warns(export):
    with pytest.warns(UserWarning, match="axis name.*b2.*will not be used"):
        export(Add().eval(), (X, Y), dynamic_shapes=({0: "batch"}, {0: Dim("b2")}))


# ------------------------------------------------ warnings torch.onnx gives
def _export_warning_kept(export, model, args, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        if export is _ours:
            return exporter.export(model, args, **options)
        return torch.onnx.export(model, args, dynamo=True, verbose=False, **options)


@BOTH
def test_dynamic_axes_warns_as_a_user_warning(export):
    with pytest.warns(UserWarning, match="'dynamic_axes' is not recommended when dynamo=True"):
        _export_warning_kept(
            export, Add().eval(), (X, Y), input_names=["x", "b"], dynamic_axes={"x": [0], "b": [0]}
        )


@BOTH
def test_training_mode_warns(export):
    with pytest.warns(UserWarning, match="training mode"):
        _export_warning_kept(export, Add(), (X, Y))


@BOTH
def test_saving_into_bytesio_warns_deprecated(export):
    import io

    buffer = io.BytesIO()
    with pytest.warns(DeprecationWarning, match="BytesIO"):
        _export_warning_kept(export, Add().eval(), (X, Y), f=buffer)
    assert buffer.getvalue()


class ReturnsNone(torch.nn.Module):
    def forward(self, x):
        return x + 1, None, x * 2


def test_outputs_without_a_graph_output_are_named():
    # torch.onnx only logs "has None output"; a warning reaches the user
    with pytest.warns(UserWarning, match=r"returns output 1 \(None\).*outputs are the other 2"):
        program = exporter.export(ReturnsNone().eval(), (X,))
    torch.testing.assert_close(program(X), [X + 1, X * 2])


@BOTH
def test_tuple_dynamic_shapes_combined_with_input_names(export):
    program = export(
        Add().eval(), (X, Y), input_names=["A", "B"], dynamic_shapes=({0: "n"}, {0: "n"})
    )
    assert _inputs(program) == [("A", ["n", 3]), ("B", ["n", 3])]


def test_dynamic_shapes_keyed_by_input_names():
    # torch.onnx hands the dict to torch.export, which knows only forward()'s names
    program = _ours(
        Nested().eval(),
        (X, (Y, Y)),
        input_names=["a", "p0", "p1"],
        dynamic_shapes={"a": {0: "batch"}, "p0": {0: "batch"}, "p1": {0: Dim.DYNAMIC}},
    )
    assert [dims[0] for _, dims in _inputs(program)] == ["batch"] * 3
    x5, y5 = torch.randn(5, 3), torch.randn(5, 3)
    torch.testing.assert_close(tuple(program(x5, (y5, y5))), Nested().eval()(x5, (y5, y5)))


class OptionalMiddle(torch.nn.Module):
    def forward(self, x, mask, y):
        return x - y if mask is None else (x - y) * mask


def test_one_name_per_flattened_input_skips_the_none_one():
    # torch.onnx zips the names with the graph inputs: y would be called "mask"
    program = _ours(OptionalMiddle().eval(), (X, None, Y), input_names=["x", "mask", "y"])
    assert [name for name, _ in _inputs(program)] == ["x", "y"]
    torch.testing.assert_close(program(X, None, Y)[0], X - Y)
