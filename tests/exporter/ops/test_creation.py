"""Tensor creation against eager torch: ranges, fills and their new_ variants, eye and triangle
indices, with sizes taken from a dynamic input so no size is baked into the graph."""

from __future__ import annotations

import torch

from tests.op_check import check_op, dynamic, tensor_maker

r = tensor_maker(seed_stride=23, seed_counts_rank=True)


def test_ranges_follow_a_dynamic_size():
    x = r(5, 3)
    check_op(
        lambda x: (
            torch.arange(x.shape[0]) + x[:, 0].long(),
            torch.arange(1, x.shape[0] * 2, 3, dtype=torch.float32),
            torch.arange(0.5, 3.0, 0.25),
        ),
        (x,),
        dynamic_shapes=dynamic(x),
        second_args=(r(8, 2),),
    )


def test_linspace_and_logspace():
    check_op(
        lambda x: (
            x + torch.linspace(-1.0, 2.0, 7),
            x + torch.logspace(-1.0, 1.0, 7, base=2.0),
            torch.linspace(0, 10, 5, dtype=torch.int64),
        ),
        (r(7),),
    )


def test_fills_and_new_variants_keep_dtype_and_dynamic_size():
    x = r(4, 3)
    check_op(
        lambda x: (
            torch.full((x.shape[0], 2), 2.5),
            torch.zeros(x.shape[1], dtype=torch.int32),
            torch.ones(x.shape, dtype=torch.bool),
            x.new_full((x.shape[0],), -1.0),
            x.new_zeros((2, x.shape[1])),
            x.new_ones(x.shape[0], dtype=torch.int64),
        ),
        (x,),
        dynamic_shapes=dynamic(x),
        second_args=(r(6, 5),),
    )


def test_eye_and_triangle_indices():
    x = r(4, 6)
    check_op(
        lambda x: (
            torch.eye(4) + x[:, :4],
            torch.eye(3, 5, dtype=torch.int64),
            torch.tril_indices(4, 3, offset=1),
            torch.triu_indices(3, 5, offset=-1),
        ),
        (x,),
    )


def test_empty_shapes_and_dtypes_only():
    # empty's values are undefined: only shape and dtype are compared
    x = r(3, 2)
    check_op(
        lambda x: (torch.empty(x.shape[0], 4), x.new_empty((2, x.shape[1]), dtype=torch.int32)),
        (x,),
        dynamic_shapes=dynamic(x),
        second_args=(r(5, 4),),
        compare_values=False,
    )
