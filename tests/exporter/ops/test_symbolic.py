"""Arithmetic on symbolic sizes against eager torch: with dynamic shapes the graph computes sizes
with Python operators and torch.sym_* on SymInts; each must give the same shapes and values at a
second input shape. item() turns a tensor value into a scalar the graph computes with."""

from __future__ import annotations

import torch

from tests.op_check import check_op, dynamic, tensor_maker

r = tensor_maker(seed_stride=53, seed_counts_rank=True)


def test_size_arithmetic_reshapes_and_fills():
    x = r(6, 4)
    check_op(
        lambda x: (
            x.reshape(x.shape[0] // 2, x.shape[1] * 2),
            torch.zeros(x.shape[0] % 4 + x.shape[1]),
            torch.full((x.shape[0] - x.shape[1] + 10,), 1.0),
            x * (x.shape[0] / x.shape[1]),
            x + x.shape[0] ** 2,
        ),
        (x,),
        dynamic_shapes=dynamic(x),
        second_args=(r(8, 3),),
    )


def test_sym_min_max_float_int():
    x = r(5, 3)
    check_op(
        lambda x: (
            torch.ones(torch.sym_max(x.shape[0], x.shape[1])),
            x[: torch.sym_min(x.shape[0], x.shape[1])],
            x * torch.sym_float(x.shape[0]),
            torch.arange(torch.sym_int(x.shape[1] * 1.0)),
        ),
        (x,),
        dynamic_shapes=dynamic(x),
        second_args=(r(2, 6),),
    )


def test_item_scales_a_tensor():
    x, s = r(3, 4), torch.tensor(2.5)
    check_op(lambda x, s: x * s.item() + 1, (x, s))
