"""Padding against eager torch: constant, reflect, replicate and circular, crops (negative pads),
and the same pads on a dynamic input checked at a second shape."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.op_check import check_op, dynamic, tensor_maker

r = tensor_maker(seed_stride=13, seed_counts_rank=True)


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
def test_pad_modes_static_and_dynamic(mode):
    x = r(2, 3, 6, 5)
    check_op(
        lambda x: F.pad(x, (1, 2, 2, 1), mode=mode),
        (x,),
        dynamic_shapes=dynamic(x),
        second_args=(r(3, 2, 7, 4),),
    )


def test_constant_pad_value_and_crop():
    # a negative pad crops that side; the positive side is filled with the value
    check_op(lambda x: F.pad(x, (-1, 2, 0, -2), value=-3.5), (r(3, 5, 6),))


def test_pad_1d_and_3d_reflect():
    check_op(lambda x: F.pad(x, (2, 1), mode="reflect"), (r(2, 3, 7),))
    check_op(lambda x: F.pad(x, (1, 1, 1, 0, 0, 1), mode="replicate"), (r(1, 2, 3, 4, 5),))


def test_integer_constant_pad_keeps_dtype():
    x = r(3, 4, dtype=torch.int64)
    check_op(lambda x: F.pad(x, (1, 1), value=7), (x,), rtol=0, atol=0)
