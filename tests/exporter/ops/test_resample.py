"""Resampling against eager torch: interpolate in each mode (Resize), antialiased resize,
grid_sample and affine_grid, static and at a second input shape."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.op_check import check_op, dynamic, tensor_maker

r = tensor_maker(seed_stride=47, seed_counts_rank=True)
TOL = {"rtol": 1e-4, "atol": 1e-4}


@pytest.mark.parametrize(
    "mode, align_corners",
    [("nearest", None), ("bilinear", False), ("bilinear", True), ("bicubic", False)],
)
def test_interpolate_2d_by_scale_dynamic(mode, align_corners):
    x = r(2, 3, 5, 6)
    check_op(
        lambda x: F.interpolate(x, scale_factor=2, mode=mode, align_corners=align_corners),
        (x,),
        dynamic_shapes=dynamic(x),
        second_args=(r(3, 2, 4, 7),),
        **TOL,
    )


def test_interpolate_to_sizes_1d_and_3d():
    check_op(lambda x: F.interpolate(x, size=9, mode="linear"), (r(2, 3, 5),), **TOL)
    check_op(
        lambda x: F.interpolate(x, size=(3, 5, 4), mode="trilinear"), (r(1, 2, 2, 3, 4),), **TOL
    )


def test_antialiased_downsample():
    check_op(
        lambda x: F.interpolate(x, size=(4, 3), mode="bilinear", antialias=True),
        (r(1, 3, 9, 8),),
        **TOL,
    )


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
def test_grid_sample(mode, padding_mode):
    x, grid = r(2, 3, 5, 6), r(2, 4, 3, 2, seed=1) * 0.8
    check_op(
        lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode=padding_mode, align_corners=False),
        (x, grid),
        **TOL,
    )


@pytest.mark.parametrize("align_corners", [False, True])
def test_affine_grid_feeds_grid_sample(align_corners):
    theta = torch.tensor([[[0.9, -0.2, 0.1], [0.3, 1.1, -0.05]]])
    x = r(1, 2, 4, 5)
    check_op(
        lambda x, t: F.grid_sample(
            x,
            F.affine_grid(t, [1, 2, 3, 4], align_corners=align_corners),
            align_corners=align_corners,
        ),
        (x, theta),
        **TOL,
    )
