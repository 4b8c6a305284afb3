"""Every bad input to export() gets a clear error that names what was wrong and what to do."""

from __future__ import annotations

import re

import pytest
import torch

from torch_onnx_conformance import exporter
from torch_onnx_conformance.exporter import InvalidExportArgumentsError, UnsupportedOpError


class AddOne(torch.nn.Module):
    def forward(self, x):
        return x + 1


class TwoIn(torch.nn.Module):
    def forward(self, x, y):
        return x + y


X = torch.randn(3, 4)


def _raises(exc_type, pattern, fn, *args, **kwargs):
    with pytest.raises(exc_type, match=pattern) as info:
        fn(*args, **kwargs)
    return info.value


def test_model_not_a_module():
    _raises(
        InvalidExportArgumentsError,
        "must be a torch.nn.Module or a torch.export",
        exporter.export,
        lambda x: x + 1,
        (X,),
    )


def test_script_module_rejected():
    scripted = torch.jit.script(AddOne())
    _raises(
        InvalidExportArgumentsError,
        "TorchScript module.*original nn.Module",
        exporter.export,
        scripted,
        (X,),
    )


def test_args_not_a_tuple():
    _raises(
        InvalidExportArgumentsError,
        r"args must be a tuple.*args=\(x,\)",
        exporter.export,
        AddOne(),
        [X],
    )


def test_bare_tensor_args_is_wrapped_like_torch_onnx():
    program = exporter.export(AddOne(), X)
    assert len(program.model.graph.inputs) == 1


def test_kwargs_not_a_dict():
    _raises(
        InvalidExportArgumentsError,
        "kwargs must be a dict",
        exporter.export,
        AddOne(),
        (X,),
        kwargs=[1],
    )


def test_numpy_input_is_named():
    import numpy as np

    _raises(
        InvalidExportArgumentsError,
        r"inputs\[0\]\[0\] is a ndarray.*torch.from_numpy",
        exporter.export,
        AddOne(),
        (np.ones((3, 4), np.float32),),
    )


@pytest.mark.parametrize("opset", [6, 27, "20", 20.0])
def test_opset_out_of_range_or_wrong_type(opset):
    _raises(
        InvalidExportArgumentsError,
        "opset_version",
        exporter.export,
        AddOne(),
        (X,),
        opset_version=opset,
    )


def test_extra_input_names_are_unused_with_a_warning():
    # torch.onnx zips the names with the graph inputs and ignores the rest; we say so
    with pytest.warns(UserWarning, match=r"input_names has 2 names but the graph has 1 input"):
        program = exporter.export(AddOne().eval(), (X,), input_names=["a", "b"])
    assert [v.name for v in program.model.graph.inputs] == ["a"]


def test_extra_output_names_are_unused_with_a_warning():
    with pytest.warns(UserWarning, match=r"extra names \['b', 'c'\] are not used"):
        program = exporter.export(AddOne().eval(), (X,), output_names=["a", "b", "c"])
    assert [v.name for v in program.model.graph.outputs] == ["a"]


def test_duplicate_input_names():
    _raises(
        InvalidExportArgumentsError,
        r"input_names has duplicates: \['a'\]",
        exporter.export,
        TwoIn(),
        (X, X),
        input_names=["a", "a"],
    )


def test_names_must_be_strings():
    _raises(
        InvalidExportArgumentsError,
        "input_names must be a list of strings",
        exporter.export,
        AddOne(),
        (X,),
        input_names="x",
    )


def test_dynamic_shapes_wrong_length():
    _raises(
        InvalidExportArgumentsError,
        "dynamic_shapes has 1 entries but forward.* 2 inputs",
        exporter.export,
        TwoIn(),
        (X, X),
        dynamic_shapes=({0: "b"},),
    )


def test_dynamic_shapes_axis_out_of_range():
    _raises(
        InvalidExportArgumentsError,
        r"names axis 5 but the input tensor has shape \(3, 4\)",
        exporter.export,
        AddOne(),
        (X,),
        dynamic_shapes=({5: "b"},),
    )


def test_dynamic_shapes_unknown_key():
    _raises(
        InvalidExportArgumentsError,
        r"keys \['z'\] that are not inputs of forward",
        exporter.export,
        TwoIn(),
        (X, X),
        dynamic_shapes={"z": {0: "b"}},
    )


def test_dynamic_shapes_tree_mismatch_for_dict_input():
    class DictIn(torch.nn.Module):
        def forward(self, d):
            return d["a"] + 1

    _raises(
        InvalidExportArgumentsError,
        r"must be a dict with keys among \['a'\]",
        exporter.export,
        DictIn(),
        ({"a": X},),
        dynamic_shapes=({"b": {0: "n"}},),
    )


def test_dynamic_shapes_and_dynamic_axes_together():
    _raises(
        InvalidExportArgumentsError,
        "either dynamic_shapes or the legacy dynamic_axes",
        exporter.export,
        AddOne(),
        (X,),
        dynamic_shapes=({0: "b"},),
        dynamic_axes={"x": {0: "b"}},
    )


def test_dynamic_axes_unknown_name():
    with pytest.warns(UserWarning, match="'dynamic_axes' is not recommended"):
        _raises(
            InvalidExportArgumentsError,
            r"dynamic_axes names \['nope'\]",
            exporter.export,
            AddOne(),
            (X,),
            dynamic_axes={"nope": {0: "b"}},
        )


def test_artifacts_dir_parent_missing(tmp_path):
    missing = tmp_path / "no" / "such" / "dir"
    _raises(
        InvalidExportArgumentsError,
        "parent folder .* does not exist",
        exporter.export,
        AddOne(),
        (X,),
        report=True,
        artifacts_dir=missing,
    )


def test_destination_folder_missing(tmp_path):
    _raises(
        InvalidExportArgumentsError,
        "folder .* does not exist; create it first",
        exporter.export,
        AddOne(),
        (X,),
        tmp_path / "missing" / "m.onnx",
    )


def test_custom_table_packet_key():
    _raises(
        InvalidExportArgumentsError,
        "OpOverloadPacket; use one overload.*aten.relu.default",
        exporter.export,
        AddOne(),
        (X,),
        custom_translation_table={torch.ops.aten.relu: lambda x: x},
    )


def test_custom_table_value_not_callable():
    _raises(
        InvalidExportArgumentsError,
        "must be a single callable, not a list",
        exporter.export,
        AddOne(),
        (X,),
        custom_translation_table={torch.ops.aten.relu.default: [lambda x: x]},
    )


def test_dynamo_false_points_to_torch_onnx():
    _raises(
        InvalidExportArgumentsError,
        r"torch.onnx.export\(..., dynamo=False\)",
        exporter.export,
        AddOne(),
        (X,),
        dynamo=False,
    )


def test_unknown_keyword():
    _raises(
        TypeError,
        r"unexpected keyword arguments \['fallback'\]",
        exporter.export,
        AddOne(),
        (X,),
        fallback=True,
    )


def test_capture_failure_lists_every_strategy():
    class DataDependent(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:  # data-dependent Python control flow cannot be captured
                return x + 1
            return x - 1

    err = _raises(
        exporter.CaptureError, "every strategy was tried", exporter.export, DataDependent(), (X,)
    )
    message = str(err)
    assert "torch.export(strict=False)" in message and "torch.export(strict=True)" in message
    assert len(err.attempts) == 2


def _mylib_ops():
    """Three custom ops without translations, their bodies in numpy so that no trace can
    follow them (a body in torch ops would be traced through)."""
    lib_name = "errtest"
    ops = []
    for name in ("alpha", "beta", "gamma"):
        qual = f"{lib_name}::{name}"
        if not hasattr(getattr(torch.ops, lib_name, object()), name):

            @torch.library.custom_op(qual, mutates_args=())
            def _op(x: torch.Tensor) -> torch.Tensor:
                return torch.from_numpy(x.numpy().copy())

            @_op.register_fake
            def _fake(x):
                return torch.empty_like(x)

        ops.append(getattr(getattr(torch.ops, lib_name), name).default)
    return ops


def test_unsupported_ops_are_all_listed_with_source_lines():
    alpha, beta, gamma = _mylib_ops()

    class ThreeUnsupported(torch.nn.Module):
        def forward(self, x):
            a = torch.ops.errtest.alpha(x)
            b = torch.ops.errtest.beta(a)
            return torch.ops.errtest.gamma(b)

    err = _raises(
        UnsupportedOpError,
        "3 ops have no ONNX translation",
        exporter.export,
        ThreeUnsupported(),
        (X,),
    )
    message = str(err)
    for name in ("errtest.alpha", "errtest.beta", "errtest.gamma"):
        assert name in message
    assert len(err.unsupported) == 3
    assert all("test_errors.py" in (u["source"] or "") for u in err.unsupported)
    assert re.search(r"test_errors\.py:\d+ in forward", message)


def test_translation_error_names_op_node_and_source():
    def broken(ctx, x, y, alpha=1):
        raise ValueError("planted failure")

    err = _raises(
        exporter.TranslationError,
        "planted failure",
        exporter.export,
        AddOne(),
        (X,),
        custom_translation_table={torch.ops.aten.add.Tensor: broken},
    )
    assert err.target == "aten.add.Tensor"
    assert err.fx_node == "add"
    assert "test_errors.py" in (err.source or "")
