"""torch.prims ops against eager torch, called directly as torch's reference decompositions emit
them: elementwise prims (no promotion), iota, full_like, scalar_tensor and view_of."""

from __future__ import annotations

import torch

from tests.op_check import check_op, dynamic, tensor_maker

prims = torch.ops.prims
r = tensor_maker(seed_stride=43, seed_counts_rank=True)


def test_elementwise_prims():
    x, y = r(3, 4), r(3, 4, seed=1)
    check_op(
        lambda x, y: (prims.cbrt(x), prims.div(x, y)),
        (x, y),
        rtol=1e-5,
        atol=1e-5,
    )


def test_integer_prims_div_truncates():
    x, y = r(6, dtype=torch.int64, low=-20, high=20), torch.tensor([3, -2, 5, -7, 4, 1])
    check_op(lambda x, y: prims.div(x, y), (x, y), rtol=0, atol=0)


def test_iota_and_fills_follow_a_dynamic_size():
    x = r(5, 2)
    check_op(
        lambda x: (
            prims.iota(
                x.shape[0], start=2, step=3, dtype=torch.int64, device=x.device, requires_grad=False
            ),
            prims.full_like(x, 1.5, dtype=x.dtype, device=x.device, requires_grad=False),
            x + prims.scalar_tensor(4.0, dtype=torch.float32, device=x.device),
            prims.view_of(x) * 2,
        ),
        (x,),
        dynamic_shapes=dynamic(x),
        second_args=(r(7, 3),),
    )
