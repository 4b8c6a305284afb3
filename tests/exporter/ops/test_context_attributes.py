"""The builder's attribute conversion gives what onnx_ir's ``convert_attribute`` gives."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from torch_onnx_conformance.exporter.ops._context import _attribute

VALUES = [
    1,
    True,
    -2.5,
    "linear",
    [1, 2, 3],
    (3, 4),
    [True, 1],
    [0.5, 1.0],
    ["a", "b"],
    [],
    ir.DataType.FLOAT,
    [ir.DataType.FLOAT, ir.DataType.INT64],
    ir.tensor(np.ones(2, np.float32)),
    ir.AttrInt64("name", 3),
    np.int64(3),
    [np.int64(1)],
    [1, 2.0],
    [2.0, 1],
]


def _converted(value):
    try:
        return ir.convenience.convert_attribute("name", value)
    except Exception as error:  # noqa: BLE001 - the error is what is compared
        return error


@pytest.mark.parametrize("value", VALUES, ids=[repr(v)[:24] for v in VALUES])
def test_attribute_matches_onnx_ir(value):
    expected = _converted(value)
    if isinstance(expected, Exception):
        with pytest.raises(type(expected)):
            _attribute("name", value)
        return
    got = _attribute("name", value)
    assert type(got) is type(expected)
    assert (got.name, got.type) == (expected.name, expected.type)
    if got.type == ir.AttributeType.TENSOR:
        np.testing.assert_array_equal(got.value.numpy(), expected.value.numpy())
    else:
        assert got.value == expected.value
        assert type(got.value) is type(expected.value)


def test_lists_of_mixed_types_are_refused_as_onnx_ir_refuses_them():
    with pytest.raises(TypeError, match="Unsupported attribute type"):
        _attribute("name", [1, "a"])
