"""Basic slicing against eager torch: slice with steps and out-of-range bounds, select, narrow,
diagonals, and the scatters that write slices back; static and dynamic."""

from __future__ import annotations

import torch

from tests.op_check import check_op, dynamic, tensor_maker

r = tensor_maker(seed_stride=17, seed_counts_rank=True)


def test_slice_steps_negative_and_clamped_bounds():
    x = r(6, 8)
    check_op(
        lambda x: (x[1:5:2], x[:, -3:], x[-100:100, 2:-1], x[::3, ::2]),
        (x,),
        dynamic_shapes=dynamic(x),
        second_args=(r(9, 7),),
    )


def test_select_and_narrow_follow_a_dynamic_size():
    x = r(5, 6, 4)
    check_op(
        lambda x: (x[2], x[:, -1], x.narrow(1, 1, 3), x.narrow(0, 0, x.shape[0] - 1)),
        (x,),
        dynamic_shapes=dynamic(x),
        second_args=(r(7, 6, 3),),
    )


def test_diagonals_with_offsets():
    x = r(4, 5)
    check_op(
        lambda x: (
            torch.diagonal(x),
            torch.diagonal(x, offset=1),
            torch.diagonal(x, offset=-2),
            torch.diag(x[0]),
            torch.diag_embed(x, offset=1),
            torch.diagflat(x[:2, :2]),
        ),
        (x,),
    )


def test_scatters_write_slices_back():
    x, row, col, diag = r(4, 6), r(6), r(4, 2), r(4)
    check_op(
        lambda x, row, col, diag: (
            torch.select_scatter(x, row, 0, 2),
            torch.slice_scatter(x, col, 1, 1, 5, 2),
            torch.diagonal_scatter(x, diag),
        ),
        (x, row, col, diag),
    )
