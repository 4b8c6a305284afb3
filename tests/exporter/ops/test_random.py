"""Random ops: shapes and dtypes against eager torch, plus the properties their draws must have.

Values cannot match torch's generator. Besides shape/dtype, each distribution is checked for
what any correct sampler guarantees (ranges, permutations, no repeats without replacement) and
for loose moments on many draws (bounds far outside sampling noise, so the tests don't flake).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.op_check import Lambda, case_params, check_op, dynamic, run_onnx, tensor_maker
from torch_onnx_conformance import exporter

r = tensor_maker(low=-3, high=3)

# Inputs are drawn at import: a fixed seed keeps every run on the same cases.
torch.manual_seed(0)

CASES = [
    ("rand", lambda x: torch.rand(3, 4) + x, (r(3, 4),), None),
    ("rand_symbolic", lambda x: torch.rand(x.shape[0], 2), (r(5, 3),), (r(7, 3),)),
    ("rand_f64", lambda x: torch.rand(3, dtype=torch.float64), (r(2),), None),
    ("randn", lambda x: torch.randn(2, x.shape[1]), (r(3, 4),), (r(3, 6),)),
    ("rand_like", lambda x: torch.rand_like(x), (r(3, 4),), (r(5, 2),)),
    ("randn_like_f16", lambda x: torch.randn_like(x), (r(3, 4, dtype=torch.float16),), None),
    ("randint", lambda x: torch.randint(0, 7, (4, x.shape[0])), (r(3),), (r(6),)),
    ("randint_high", lambda x: torch.randint(5, (3,), dtype=torch.int32), (r(2),), None),
    ("randint_like", lambda x: torch.randint_like(x, 3, 9), (r(3, 4),), (r(2, 2),)),
    ("randperm", lambda x: torch.randperm(x.shape[0]), (r(6),), (r(9),)),
    ("bernoulli", lambda x: torch.bernoulli(x.sigmoid()), (r(3, 4),), (r(5, 2),)),
    ("bernoulli_p", lambda x: torch.bernoulli(x, 0.3), (r(3, 4),), (r(2, 2),)),
    (
        "bernoulli_tensor_p",
        lambda x, p: torch.ops.aten.bernoulli.Tensor(x, p),
        (r(3, 4), torch.rand(3, 4)),
        None,
    ),
    ("multinomial", lambda x: torch.multinomial(x, 3), (torch.rand(2, 6),), (torch.rand(4, 5),)),
    (
        "multinomial_replacement",
        lambda x: torch.multinomial(x, 8, replacement=True),
        (torch.rand(6),),
        None,
    ),
    ("normal_tensor_float", lambda m: torch.normal(m, 2.0), (r(3, 4),), (r(2, 5),)),
    ("normal_float_tensor", lambda s: torch.normal(1.0, s.abs()), (r(3, 4),), None),
    ("normal_tensor_tensor", lambda m, s: torch.normal(m, s.abs()), (r(3, 1), r(1, 4)), None),
    ("normal_float_float", lambda x: torch.normal(1.0, 2.0, (2, 3)) + x, (r(2, 3),), None),
    ("normal_inplace", lambda x: x.clone().normal_(), (r(3, 4),), None),
    ("uniform", lambda x: x.clone().uniform_(-2, 3), (r(3, 4),), (r(4, 4),)),
    ("exponential", lambda x: x.clone().exponential_(), (r(3, 4),), None),
    ("log_normal", lambda x: x.clone().log_normal_(), (r(3, 4),), None),
    ("cauchy", lambda x: x.clone().cauchy_(), (r(3, 4),), None),
    ("geometric", lambda x: x.clone().geometric_(0.3), (r(3, 4),), None),
    ("random_to", lambda x: x.clone().random_(10), (r(3, 4, dtype=torch.int64),), None),
]


@pytest.mark.parametrize(("fn", "args", "second", "shapes"), case_params(CASES))
def test_random_shapes_and_dtypes(fn, args, second, shapes):
    if shapes == "dynamic":
        check_op(fn, args, dynamic_shapes=dynamic(*args), second_args=second, compare_values=False)
    else:
        check_op(fn, args, compare_values=False)


def draws(fn, *args):
    program = exporter.export(Lambda(fn), args, optimize=False)
    return [np.asarray(out) for out in run_onnx(program, args)]


def test_uniform_family_ranges():
    x = torch.zeros(20000)
    u, n, ints, perm = draws(
        lambda t: (
            torch.rand_like(t),
            torch.randn_like(t),
            torch.randint_like(t, 2, 5),
            torch.randperm(t.shape[0]),
        ),
        x,
    )
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.02
    assert abs(n.mean()) < 0.05 and abs(n.std() - 1) < 0.05
    assert set(np.unique(ints).tolist()) == {2, 3, 4}
    assert sorted(perm.tolist()) == list(range(20000))


def test_bernoulli_and_multinomial_properties():
    p = torch.full((20000,), 0.25)
    (coins,) = draws(lambda t: torch.bernoulli(t), p)
    assert set(np.unique(coins).tolist()) <= {0.0, 1.0} and abs(coins.mean() - 0.25) < 0.02
    weights = torch.tensor([[0.0, 1.0, 1.0, 0.0, 2.0, 1.0]]).repeat(200, 1)
    (picked,) = draws(lambda w: torch.multinomial(w, 4), weights)
    assert picked.shape == (200, 4)
    assert all(len(set(row)) == 4 for row in picked.tolist())  # without replacement
    assert not np.isin(picked, [0, 3]).any()  # zero-probability classes never come out
    (repeated,) = draws(lambda w: torch.multinomial(w, 50, replacement=True), weights[:1, :])
    assert not np.isin(repeated, [0, 3]).any()


def test_distribution_transforms():
    x = torch.zeros(20000)
    exp, geo = draws(lambda t: (t.clone().exponential_(2.0), t.clone().geometric_(0.5)), x)
    assert exp.min() > 0 and abs(exp.mean() - 0.5) < 0.03
    assert geo.min() >= 1 and abs(geo.mean() - 2.0) < 0.1
