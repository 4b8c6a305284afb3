"""Advanced indexing, gather/scatter, masks and nonzero against eager torch: static, dynamic at a
second shape, data-dependent output sizes, dtypes, opset-dependent paths."""

from __future__ import annotations

import pytest
import torch

from tests.op_check import check_op, dynamic, static_and_dynamic, tensor_maker

r = tensor_maker()

torch.manual_seed(0)  # the cases below draw their inputs at import time


def idx(high, *shape):
    return torch.randint(0, high, shape)


modes = static_and_dynamic


def run_case(fn, args, second, **kw):
    if second is None:
        check_op(fn, args, **kw)
    else:
        check_op(fn, args, dynamic_shapes=dynamic(*args), second_args=second, **kw)


def put(x, indices, values, accumulate=False):
    return torch.ops.aten.index_put(x, list(indices), values, accumulate)


INDEX_CASES = [
    ("one_tensor", lambda x, i: x[:, i], (r(3, 5), idx(5, 2, 2)), (r(4, 6), idx(6, 3, 2))),
    ("negative", lambda x: x[torch.tensor([-1, 0, -2])], (r(4, 3),), (r(5, 2),)),
    ("none_and_tensor", lambda x, i: x[None, i, None], (r(4, 3), idx(4, 3)), (r(5, 2), idx(5, 2))),
    (
        "broadcast_pair",
        lambda x, i, j: x[i, j],
        (r(4, 5), idx(4, 3, 1), idx(5, 1, 2)),
        (r(6, 7), idx(6, 2, 1), idx(7, 1, 3)),
    ),
    (
        "adjacent_inner",
        lambda x, i, j: x[:, i, j],
        (r(2, 4, 5, 3), idx(4, 3), idx(5, 3)),
        (r(3, 5, 6, 2), idx(5, 4), idx(6, 4)),
    ),
    # Non-adjacent index groups: broadcast dims move to the front (numpy's transpose rule).
    (
        "non_adjacent",
        lambda x, i, j: x[i, :, j],
        (r(4, 3, 5), idx(4, 2), idx(5, 2)),
        (r(5, 2, 6), idx(5, 3), idx(6, 3)),
    ),
    (
        "bool_mask_rows",
        lambda x, m: x[m],
        (r(5, 3), r(5, dtype=torch.bool)),
        (r(7, 2), r(7, dtype=torch.bool)),
    ),
    ("bool_mask_full", lambda x: x[x > 0], (r(3, 4),), (r(5, 2),)),
    ("bool_mask_inner", lambda x, m: x[:, m], (r(2, 5, 3), r(5, 3, dtype=torch.bool)), None),
    ("int32_index", lambda x, i: x[i], (r(5, 2), idx(5, 3).int()), None),
    (
        "unsafe_index",
        lambda x, i: torch.ops.aten._unsafe_index(x, [None, i]),
        (r(3, 4), idx(4, 5)),
        (r(2, 6), idx(6, 3)),
    ),
    ("int64_data", lambda x, i: x[i], (r(5, 2, dtype=torch.int64), idx(5, 4)), None),
    ("bool_data", lambda x, i: x[:, i], (r(3, 5, dtype=torch.bool), idx(5, 4)), None),
]

INDEX_PUT_CASES = [
    (
        "put_one",
        lambda x, i, v: put(x, (i,), v),
        (r(5, 3), torch.tensor([0, 3]), r(2, 3)),
        (r(6, 2), torch.tensor([1, 5]), r(2, 2)),
    ),
    (
        "put_accumulate_dups",
        lambda x, i, v: put(x, (i,), v, True),
        (r(5, 3), torch.tensor([1, 1, 4]), r(3, 3)),
        (r(6, 2), torch.tensor([0, 0, 0]), r(3, 2)),
    ),
    (
        "put_broadcast_scalar",
        lambda x, i: put(x, (None, i), torch.tensor(2.0)),
        (r(3, 4), torch.tensor([0, 2])),
        (r(5, 6), torch.tensor([1, 3])),
    ),
    (
        "put_adjacent_inner",
        lambda x, i, j, v: put(x, (None, i, j), v, True),
        (r(2, 4, 5), idx(4, 3), idx(5, 3), r(2, 3)),
        None,
    ),
    (
        "put_non_adjacent",
        lambda x, i, j, v: put(x, (i, None, j), v),
        (r(4, 3, 5), torch.tensor([0, 3]), torch.tensor([4, 1]), r(2, 3)),
        None,
    ),
    ("put_mask_scalar", lambda x: put(x, (x > 0,), torch.tensor(0.0)), (r(3, 4),), (r(5, 2),)),
    (
        "put_mask_rows",
        lambda x, m: put(x, (m,), torch.tensor([9.0, 8.0, 7.0])),
        (r(4, 3), r(4, dtype=torch.bool)),
        (r(6, 3), r(6, dtype=torch.bool)),
    ),
    (
        "put_mask_values",
        lambda x, m, v: put(x, (m,), v),
        (r(4, 3), torch.tensor([True, False, True, False]), r(2, 3)),
        None,
    ),
    (
        "put_setitem",
        lambda x: x.clone().__setitem__((slice(None), torch.tensor([1])), 5.0) or x,
        (r(3, 4),),
        None,
    ),
    (
        "put_int",
        lambda x, i, v: put(x, (i,), v, True),
        (r(5, dtype=torch.int32), idx(5, 4), r(4, dtype=torch.int32)),
        None,
    ),
    # Exactly representable values: the sum is the same whatever the accumulation dtype.
    (
        "put_f16_accumulate",
        lambda x, i, v: put(x, (i,), v, True),
        (torch.arange(5.0).half(), torch.tensor([0, 2, 2]), torch.tensor([0.5, 0.25, 1.0]).half()),
        None,
    ),
    (
        "put_bool_accumulate",
        lambda x, i, v: put(x, (i,), v, True),
        (r(5, dtype=torch.bool), torch.tensor([0, 2]), r(2, dtype=torch.bool)),
        None,
    ),
]


@pytest.mark.parametrize(("fn", "args", "second"), modes(INDEX_CASES + INDEX_PUT_CASES))
def test_advanced_indexing(fn, args, second):
    run_case(fn, args, second)


def scatter_case_inputs(shape, dim, index_shape, high=None):
    high = high or shape[dim]
    return r(*shape), dim, idx(high, *index_shape), r(*index_shape)


GATHER_SCATTER_CASES = [
    ("gather", lambda x, i: x.gather(1, i), (r(3, 5), idx(5, 3, 4)), (r(4, 6), idx(6, 4, 2))),
    ("gather_neg_dim_small_index", lambda x, i: x.gather(-2, i), (r(4, 5), idx(4, 2, 3)), None),
    ("gather_0d", lambda x: x.gather(0, torch.tensor(0)), (torch.tensor(3.0),), None),
    (
        "scatter_src_larger",
        lambda x, i, s: x.scatter(0, i, s),
        (r(4, 3), torch.tensor([[0, 1], [3, 2]]), r(3, 3)),
        None,
    ),
    (
        "scatter_value",
        lambda x, i: x.scatter(1, i, -2.5),
        (r(3, 4), idx(4, 3, 2)),
        (r(5, 6), idx(6, 5, 3)),
    ),
    (
        "scatter_reduce_multiply",
        lambda x, i, s: x.scatter(1, i, s, reduce="multiply"),
        (r(3, 4), idx(4, 3, 4), r(3, 4)),
        None,
    ),
    (
        "scatter_add",
        lambda x, i, s: x.scatter_add(0, i, s),
        (r(3, 4), idx(3, 5, 4), r(5, 4)),
        (r(4, 2), idx(4, 6, 2), r(6, 2)),
    ),
    (
        "scatter_add_f16",
        lambda x, i, s: x.scatter_add(0, i, s),
        (r(3, 4, dtype=torch.float16), idx(3, 2, 4), r(2, 4, dtype=torch.float16)),
        None,
    ),
    ("index_select", lambda x, i: x.index_select(1, i), (r(3, 5), idx(5, 7)), (r(4, 6), idx(6, 2))),
    ("index_select_0d", lambda x: x.index_select(0, torch.tensor([0])), (torch.tensor(2.0),), None),
    (
        "index_add_alpha",
        lambda x, i, s: x.index_add(0, i, s, alpha=2.0),
        (r(4, 3), torch.tensor([0, 2, 2]), r(3, 3)),
        None,
    ),
    (
        "index_copy",
        lambda x, i, s: x.index_copy(1, i, s),
        (r(3, 5), torch.tensor([4, 0]), r(3, 2)),
        None,
    ),
    ("index_fill", lambda x: x.index_fill(1, torch.tensor([0, -1]), -1.0), (r(3, 4),), (r(2, 6),)),
    (
        "index_fill_tensor_int",
        lambda x: x.index_fill(0, torch.tensor([1]), torch.tensor(7)),
        (r(3, 2, dtype=torch.int64),),
        None,
    ),
    ("take", lambda x, i: x.take(i), (r(3, 4), idx(12, 2, 3)), (r(2, 5), idx(10, 4, 2))),
    # torch.export specialises take_along_dim's broadcast: static only.
    ("take_along_dim", lambda x, i: torch.take_along_dim(x, i, 1), (r(3, 4), idx(4, 1, 2)), None),
    ("take_along_flat", lambda x, i: torch.take_along_dim(x, i), (r(3, 4), idx(12, 5)), None),
    (
        "put_accumulate",
        lambda x, i, s: x.put(i, s, accumulate=True),
        (r(3, 4), torch.tensor([0, -1, 0]), r(3)),
        None,
    ),
]


@pytest.mark.parametrize(("fn", "args", "second"), modes(GATHER_SCATTER_CASES))
def test_gather_scatter(fn, args, second):
    run_case(fn, args, second)


@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
def test_scatter_reduce(reduce, include_self, opset):
    x, i, s = r(4, 3), torch.tensor([[0, 1, 1], [3, 1, 0]]), r(2, 3)
    fn = lambda x, i, s: x.scatter_reduce(0, i, s, reduce, include_self=include_self)  # noqa: E731
    check_op(fn, (x, i, s), opset=opset)


@pytest.mark.parametrize("reduce", ["mean", "amax"])
def test_scatter_reduce_int(reduce):
    x = r(5, dtype=torch.int64)
    s = torch.tensor([-7, 4, 3, -2])
    fn = lambda x, i, s: x.scatter_reduce(0, i, s, reduce, include_self=False)  # noqa: E731
    check_op(fn, (x, torch.tensor([1, 1, 3, 1]), s))


def test_index_reduce_dynamic():
    fn = lambda x, i, s: x.index_reduce(0, i, s, "amax")  # noqa: E731
    args = (r(4, 3), torch.tensor([0, 2, 2]), r(3, 3))
    check_op(
        fn,
        args,
        dynamic_shapes=dynamic(*args),
        second_args=(r(6, 2), torch.tensor([5, 5, 0, 1]), r(4, 2)),
    )


MASK_CASES = [
    ("masked_fill_scalar", lambda x: x.masked_fill(x < 0, 1.5), (r(3, 4),), (r(5, 2),)),
    (
        "masked_fill_tensor_broadcast",
        lambda x, m: x.masked_fill(m, torch.tensor(-1.0)),
        (r(3, 4), r(4, dtype=torch.bool)),
        (r(5, 6), r(6, dtype=torch.bool)),
    ),
    (
        "masked_fill_bool",
        lambda x, m: x.masked_fill(m, True),
        (r(3, 4, dtype=torch.bool), r(3, 4, dtype=torch.bool)),
        None,
    ),
    ("masked_fill_int16", lambda x: x.masked_fill(x > 0, 3), (r(3, 4, dtype=torch.int16),), None),
    (
        "masked_scatter",
        lambda x, m, s: x.masked_scatter(m, s),
        (r(3, 4), r(3, 4, dtype=torch.bool), r(12)),
        (r(5, 2), r(5, 2, dtype=torch.bool), r(10)),
    ),
    (
        "masked_scatter_broadcast",
        lambda x, m, s: x.masked_scatter(m, s),
        (r(3, 4), r(4, dtype=torch.bool), r(3, 4)),
        None,
    ),
    (
        "masked_select",
        lambda x, m: x.masked_select(m),
        (r(3, 4), r(3, 4, dtype=torch.bool)),
        (r(5, 2), r(5, 2, dtype=torch.bool)),
    ),
    (
        "masked_select_broadcast",
        lambda x, m: x.masked_select(m),
        (r(3, 4), r(4, dtype=torch.bool)),
        (r(2, 5), r(5, dtype=torch.bool)),
    ),
    ("nonzero", lambda x: torch.nonzero(x > 0), (r(3, 4),), (r(5, 2),)),
    (
        "nonzero_f64",
        lambda x: torch.nonzero(x),
        (torch.tensor([0.0, 1e-300, -2.0]).double(),),
        None,
    ),
    ("nonzero_int8", lambda x: torch.nonzero(x), (r(6, dtype=torch.int8),), None),
    (
        "argwhere",
        lambda x: torch.argwhere(x),
        (r(2, 3, dtype=torch.int64),),
        (r(3, 4, dtype=torch.int64),),
    ),
    ("nonzero_tuple", lambda x: torch.nonzero(x > 0, as_tuple=True), (r(3, 4),), (r(2, 5),)),
    (
        "nonzero_static_pad",
        lambda x: torch.nonzero_static(x > 0, size=20, fill_value=-7),
        (r(3, 4),),
        None,
    ),
    ("nonzero_static_cut", lambda x: torch.nonzero_static(x, size=2), (torch.ones(3, 2),), None),
]


@pytest.mark.parametrize(("fn", "args", "second"), modes(MASK_CASES))
def test_masks_and_nonzero(fn, args, second):
    run_case(fn, args, second)


@pytest.mark.parametrize("value", [0.0, 2.5])
def test_nonzero_of_scalar_has_zero_columns(value):
    # torch: shape (1, 0) for a nonzero scalar and (0, 0) for zero.
    check_op(lambda x: torch.nonzero(x), (torch.tensor(value),))


def test_index_with_dynamic_index_length():
    fn = lambda x, i: x[i] * 2  # noqa: E731
    args = (r(6, 3), idx(6, 4))
    check_op(fn, args, dynamic_shapes=dynamic(*args), second_args=(r(8, 5), idx(8, 9)))


def test_masked_index_ops_ignore_masked_junk_indices():
    x = r(5, 5)
    mask = torch.rand(5, 6) > 0.5
    rows, cols = torch.arange(5).view(5, 1), torch.arange(6).view(1, 6)  # col 5 out of range
    check_op(
        lambda x, m, i, j: torch.ops.aten._unsafe_masked_index(x, m, [i, j], 0.5),
        (x, mask, rows, cols),
    )
    check_op(
        lambda x, m, i, j, v: torch.ops.aten._unsafe_masked_index_put_accumulate(x, m, [i, j], v),
        (x, mask, rows, cols, r(5, 6)),
    )
