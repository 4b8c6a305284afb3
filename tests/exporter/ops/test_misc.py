"""Translations with no family (torch_onnx_conformance/exporter/ops/misc.py) and the im2col empty-batch fix, against eager.

Fractional max pooling gets ``random_samples`` as an input so eager and ONNX see the same
window placement; segment_reduce covers every reduction with and without ``initial`` and
empty segments; the chunked linear cross entropy ops are called directly.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.op_check import check_op, tensor_maker

r = tensor_maker(seed_stride=1)

aten = torch.ops.aten
AUTO = torch.export.Dim.AUTO


def u(*shape, seed=1):
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed + sum(shape)))


@pytest.mark.parametrize(
    "shape, kernel, out",
    [((2, 3, 9, 8), [3, 2], [4, 3]), ((3, 9, 8), [2, 2], [1, 5]), ((1, 2, 5, 5), [2, 2], [4, 4])],
)
def test_fractional_max_pool2d(shape, kernel, out):
    samples = u(1 if len(shape) == 3 else shape[0], shape[-3], 2)
    check_op(lambda x, s: aten.fractional_max_pool2d(x, kernel, out, s), (r(*shape), samples))


def test_fractional_max_pool3d():
    check_op(
        lambda x, s: aten.fractional_max_pool3d(x, [2, 3, 2], [3, 4, 2], s),
        (r(2, 3, 7, 9, 5), u(2, 3, 3)),
    )


def test_fractional_max_pool3d_empty_batch():
    # A copied 0 beside -1 in a Reshape leaves -1 undetermined (ONNX rejects the model), and
    # onnxruntime's ArgMax keeps the reduced axis whole on an empty input.
    check_op(
        lambda x, s: aten.fractional_max_pool3d(x, [2, 2, 1], [2, 2, 2], s),
        (r(0, 1, 4, 5, 4), u(0, 1, 3)),
    )


def test_fractional_max_pool2d_dynamic_second_shape():
    check_op(
        lambda x, s: aten.fractional_max_pool2d(x, [3, 2], [4, 3], s),
        (r(2, 3, 9, 8), u(2, 3, 2)),
        dynamic_shapes=(({0: AUTO, 2: AUTO, 3: AUTO}, {0: AUTO}),),
        second_args=(r(3, 3, 11, 7), u(3, 3, 2)),
    )


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min", "prod"])
@pytest.mark.parametrize("initial", [None, 2.0])
@pytest.mark.parametrize("form", ["lengths", "offsets"])
def test_segment_reduce(reduce, initial, form):
    segments = (
        {"lengths": torch.tensor([0, 1, 2, 2])}
        if form == "lengths"
        else {"offsets": torch.tensor([0, 0, 1, 3, 5])}
    )
    key, value = next(iter(segments.items()))
    check_op(
        lambda x, seg: torch.segment_reduce(x, reduce, **{key: seg}, initial=initial),
        (r(5, 3), value),
    )


def test_segment_reduce_inner_axis():
    check_op(
        lambda x, lengths: torch.segment_reduce(x, "sum", lengths=lengths, axis=1),
        (r(2, 5, 3), torch.tensor([[2, 0, 3], [1, 4, 0]])),
    )


def test_batch_norm_with_update_functional_returns_running_stats():
    check_op(
        lambda x, w, b, rm, rv: aten._batch_norm_with_update_functional(x, w, b, rm, rv, 0.1, 1e-5),
        (r(4, 3, 5), r(3), r(3), r(3), u(3)),
        compare_values=True,
    )


@pytest.mark.parametrize("size", [[25, 5], [3, 4], [130]])
def test_resize_truncates_or_zero_fills(size):
    def fn(x):
        y = x.clone()
        y.resize_(size)
        return y if y.numel() <= x.numel() else y[: x.numel()]

    check_op(fn, (r(5, 5, 5),))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("target_kind", ["index", "probs"])
def test_linear_cross_entropy_chunked(reduction, target_kind):
    from torch.nn.modules.linear_cross_entropy_options import LinearCrossEntropyOptions

    target = (
        torch.tensor([0, 3, -100, 1, 2, 0, 1, 3])
        if target_kind == "index"
        else torch.softmax(r(8, 4), -1)
    )
    options = LinearCrossEntropyOptions(batch_chunk_size=3)
    check_op(
        lambda x, w, b, t, cw: F.linear_cross_entropy(
            x,
            w,
            t,
            linear_bias=b,
            weight=cw,
            reduction=reduction,
            options=options,
            label_smoothing=0.1 if reduction != "none" else 0.0,
        ),
        (r(8, 3), r(4, 3), r(4), target, u(4)),
        atol=1e-4,
    )


def test_unfold_empty_batch_passes_checker_after_optimization():
    check_op(
        lambda x: F.unfold(x, 2),
        (r(0, 1, 5, 5),),
        dynamic_shapes=(({2: AUTO, 3: AUTO},),),
        second_args=(r(0, 1, 6, 7),),
        optimize=True,
    )


def test_chunk_cat_pads_each_tensor_to_whole_chunks_at_a_second_shape():
    check_op(
        lambda a, b: aten._chunk_cat([a, b], 1, 3),
        (r(2, 5, 3), r(2, 4)),
        dynamic_shapes=(({1: AUTO, 2: AUTO}, {1: AUTO}),),
        second_args=(r(2, 7, 2), r(2, 9)),
    )
