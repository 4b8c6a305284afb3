"""Neural-network layers and matrix products against eager torch.

Covers the opset-dependent choices (LayerNormalization from 17, GroupNormalization from 21,
RMSNormalization from 23), dynamic shapes checked at a second shape, the multi-output ATen
forms (native_layer_norm, native_group_norm, the batch-norm family), and end-to-end exports of
resnet18, mobilenet_v3_small and tiny BERT / GPT-2 (marked slow).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.op_check import check_op, dims, dynamic, op_types, tensor_maker

r = tensor_maker(seed_stride=7, seed_counts_rank=True)

aten = torch.ops.aten
DYN = torch.export.Dim.DYNAMIC


# ------------------------------------------------------------------------ matrix products
MATMUL_CASES = {
    "mm": (torch.mm, [(3, 4), (4, 5)]),
    "bmm": (torch.bmm, [(2, 3, 4), (2, 4, 5)]),
    "matmul_1d_1d": (torch.matmul, [(4,), (4,)]),
    "matmul_1d_2d": (torch.matmul, [(4,), (4, 5)]),
    "matmul_2d_1d": (torch.matmul, [(3, 4), (4,)]),
    "matmul_3d_1d": (torch.matmul, [(2, 3, 4), (4,)]),
    "matmul_1d_3d": (torch.matmul, [(4,), (2, 4, 5)]),
    "matmul_broadcast": (torch.matmul, [(2, 1, 3, 4), (5, 4, 6)]),
    "mv": (torch.mv, [(3, 4), (4,)]),
    "dot": (torch.dot, [(5,), (5,)]),
    "vdot": (torch.vdot, [(5,), (5,)]),
    "outer": (torch.outer, [(3,), (4,)]),
    "addmm": (lambda a, b, c: torch.addmm(a, b, c, beta=0.5, alpha=2.0), [(5,), (3, 4), (4, 5)]),
    "addmm_beta0": (lambda a, b, c: torch.addmm(a, b, c, beta=0), [(3, 5), (3, 4), (4, 5)]),
    "baddbmm": (
        lambda a, b, c: torch.baddbmm(a, b, c, beta=2, alpha=0.5),
        [(2, 3, 5), (2, 3, 4), (2, 4, 5)],
    ),
    "addbmm": (torch.addbmm, [(3, 5), (2, 3, 4), (2, 4, 5)]),
    "addmv": (lambda a, b, c: torch.addmv(a, b, c, alpha=3), [(3,), (3, 4), (4,)]),
    "addr": (lambda a, b, c: torch.addr(a, b, c, beta=2), [(3, 4), (3,), (4,)]),
    "linear": (F.linear, [(2, 3, 4), (5, 4), (5,)]),
    "linear_2d": (F.linear, [(3, 4), (5, 4), (5,)]),
    "linear_no_bias": (F.linear, [(3, 4), (5, 4)]),
    "linear_1d_weight": (F.linear, [(3, 4), (4,)]),
    "linear_empty_k": (F.linear, [(3, 0), (5, 0), (5,)]),
    "bilinear": (F.bilinear, [(3, 4), (3, 5), (6, 4, 5), (6,)]),
    "einsum_implicit": (lambda a, b: torch.einsum("ij,jk", a, b), [(3, 4), (4, 5)]),
    "einsum_uppercase": (lambda a, b: torch.einsum("bIj,bjK->bIK", a, b), [(2, 3, 4), (2, 4, 5)]),
    "einsum_ellipsis_sum": (lambda a, b: torch.einsum("...ik,...j->ij", a, b), [(1, 2, 3), (3,)]),
    "einsum_ellipsis_keep": (
        lambda a, b: torch.einsum("...ij,...jk->...ik", a, b),
        [(2, 3, 4), (4, 5)],
    ),
    "einsum_trace": (lambda a: torch.einsum("ii", a), [(4, 4)]),
    "tensordot": (
        lambda a, b: torch.tensordot(a, b, dims=([1, 2], [0, 1])),
        [(2, 3, 4), (3, 4, 5)],
    ),
}


@pytest.mark.parametrize("name", list(MATMUL_CASES))
def test_matrix_products(name):
    fn, shapes = MATMUL_CASES[name]
    check_op(fn, [r(*s, seed=i) for i, s in enumerate(shapes)], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "dtype", [torch.int64, torch.int32, torch.int8, torch.float64, torch.float16]
)
def test_matmul_dtypes(dtype):
    a = (r(3, 4) * 4).to(dtype)
    b = (r(4, 5, seed=1) * 4).to(dtype)
    tol = 1e-2 if dtype == torch.float16 else 1e-5
    check_op(torch.matmul, [a, b], rtol=tol, atol=tol)
    check_op(lambda x, y, z: torch.addmm(x, y, z), [(r(5) * 4).to(dtype), a, b], rtol=tol, atol=tol)


def test_linear_uses_gemm_and_dynamic_batch():
    model = torch.nn.Linear(4, 3)
    x = r(2, 4)
    program = check_op(model, [x], dynamic_shapes=({0: DYN},), second_args=[r(5, 4, seed=1)])
    assert "Gemm" in op_types(program)


def test_matmul_dynamic():
    a, b = r(2, 3, 4), r(2, 4, 5, seed=1)
    check_op(
        torch.matmul,
        [a, b],
        dynamic_shapes=dynamic(a, b),
        second_args=[r(3, 6, 4, seed=2), r(3, 4, 2, seed=3)],
        rtol=1e-4,
    )


def test_einsum_dynamic():
    a, b = r(2, 3, 4), r(2, 4, 5, seed=1)
    check_op(
        lambda x, y: torch.einsum("bij,bjk->bik", x, y),
        [a, b],
        dynamic_shapes=dynamic(a, b),
        second_args=[r(3, 2, 4, seed=2), r(3, 4, 6, seed=3)],
        rtol=1e-4,
    )


# --------------------------------------------------------------------------- normalisation
@pytest.mark.parametrize("opset", [17, 20, 23])
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm(opset, affine):
    x = r(2, 5, 6)
    w, b = r(5, 6, seed=1), r(5, 6, seed=2)
    fn = (
        (lambda x, w, b: F.layer_norm(x, (5, 6), w, b, 1e-3))
        if affine
        else (lambda x, w, b: F.layer_norm(x, (6,)) + 0 * w.sum() + 0 * b.sum())
    )
    program = check_op(
        fn,
        [x, w, b],
        opset=opset,
        rtol=1e-4,
        atol=1e-5,
        dynamic_shapes=dims({0: DYN}, None, None),
        second_args=[r(4, 5, 6, seed=3), w, b],
    )
    assert "LayerNormalization" in op_types(program)


def test_norms_over_a_dynamic_last_dim():
    x = r(2, 3, 6)
    for fn in (lambda x: F.layer_norm(x, x.shape[-1:]), lambda x: F.rms_norm(x, x.shape[-1:])):
        for opset in (17, 23):
            check_op(
                fn,
                [x],
                opset=opset,
                dynamic_shapes=dims({0: DYN, 2: DYN}),
                second_args=[r(3, 3, 9, seed=1)],
                rtol=1e-4,
                atol=1e-5,
            )


def test_native_layer_norm_statistics():
    x, w, b = r(3, 4, 5), r(5, seed=1), r(5, seed=2)
    check_op(
        lambda x, w, b: aten.native_layer_norm(x, [5], w, b, 1e-5), [x, w, b], rtol=1e-4, atol=1e-5
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.float64])
def test_layer_norm_dtypes(dtype):
    x = r(2, 3, 8, dtype=dtype)
    tol = 1e-5 if dtype == torch.float64 else 2e-2
    check_op(lambda x: F.layer_norm(x, (8,)), [x], rtol=tol, atol=tol)
    # The statistics outputs come in the stash type and are cast to torch's dtype.
    check_op(lambda x: aten.native_layer_norm(x, [8], None, None, 1e-5), [x], rtol=tol, atol=tol)


@pytest.mark.parametrize("opset", [17, 20, 21, 23])
def test_group_norm(opset):
    x, w, b = r(2, 6, 4, 5), r(6, seed=1), r(6, seed=2)
    program = check_op(
        lambda x, w, b: F.group_norm(x, 3, w, b, 1e-4),
        [x, w, b],
        opset=opset,
        rtol=1e-4,
        atol=1e-4,
        dynamic_shapes=dims({0: DYN, 2: DYN, 3: DYN}, None, None),
        second_args=[r(3, 6, 7, 2, seed=3), w, b],
    )
    ops = op_types(program)
    if opset >= 21:
        assert "GroupNormalization" in ops
    else:
        assert "InstanceNormalization" in ops and "GroupNormalization" not in ops


@pytest.mark.parametrize("opset", [17, 21])
def test_native_group_norm_statistics(opset):
    x, w, b = r(2, 6, 7), r(6, seed=1), r(6, seed=2)
    check_op(
        lambda x, w, b: aten.native_group_norm(x, w, b, 2, 6, 7, 2, 1e-5),
        [x, w, b],
        opset=opset,
        rtol=1e-4,
        atol=1e-5,
    )


def test_group_norm_without_affine_and_empty_batch():
    check_op(lambda x: F.group_norm(x, 2), [r(3, 4, 5)], opset=21, rtol=1e-4, atol=1e-5)
    check_op(lambda x: F.group_norm(x, 2), [r(0, 4, 5)], opset=17)
    # From opset 21 GroupNormalization, whose function body onnxruntime cannot run when empty.
    check_op(lambda x: F.group_norm(x, 2), [r(0, 4, 5)], opset=23)


@pytest.mark.parametrize("opset", [17, 20, 23])
@pytest.mark.parametrize("with_weight", [True, False])
def test_rms_norm(opset, with_weight):
    x, w = r(2, 5, 8), r(8, seed=1)
    fn = (
        (lambda x, w: F.rms_norm(x, (8,), w, 1e-5))
        if with_weight
        else (lambda x, w: F.rms_norm(x, (8,)) + 0 * w.sum())
    )
    program = check_op(
        fn,
        [x, w],
        opset=opset,
        rtol=1e-4,
        atol=1e-5,
        dynamic_shapes=dims({0: DYN, 1: DYN}, None),
        second_args=[r(3, 2, 8, seed=2), w],
    )
    assert ("RMSNormalization" in op_types(program)) == (opset >= 23)


def test_rms_norm_half_precision():
    check_op(
        lambda x: F.rms_norm(x, (4, 8)),
        [r(2, 4, 8, dtype=torch.float16)],
        opset=23,
        rtol=1e-2,
        atol=1e-2,
    )


class _BatchNorm(torch.nn.Module):
    def __init__(self, channels, training):
        super().__init__()
        self.bn = torch.nn.BatchNorm2d(channels)
        with torch.no_grad():
            self.bn.weight.copy_(r(channels, seed=5))
            self.bn.bias.copy_(r(channels, seed=6))
            self.bn.running_mean.copy_(r(channels, seed=7))
            self.bn.running_var.copy_(r(channels, seed=8).abs() + 0.5)
        self.training_mode = training

    def forward(self, x):
        return F.batch_norm(
            x,
            self.bn.running_mean.clone(),
            self.bn.running_var.clone(),
            self.bn.weight,
            self.bn.bias,
            training=self.training_mode,
        )


@pytest.mark.parametrize("training", [False, True])
def test_batch_norm(training):
    x = r(2, 3, 4, 5)
    check_op(
        _BatchNorm(3, training),
        [x],
        rtol=1e-4,
        atol=1e-5,
        dynamic_shapes=({0: DYN, 2: DYN},),
        second_args=[r(4, 3, 2, 5, seed=1)],
    )


def test_batch_norm_core_forms():
    x, w, b = r(4, 3, 5), r(3, seed=1), r(3, seed=2)
    mean, var = r(3, seed=3), r(3, seed=4).abs() + 0.5
    check_op(
        lambda x, w, b, m, v: aten._native_batch_norm_legit_no_training(x, w, b, m, v, 0.1, 1e-5)[
            0
        ],
        [x, w, b, mean, var],
        rtol=1e-4,
        atol=1e-5,
    )
    check_op(
        lambda x, w, b, m, v: aten._native_batch_norm_legit(
            x, w, b, m.clone(), v.clone(), True, 0.1, 1e-5
        ),
        [x, w, b, mean, var],
        rtol=1e-4,
        atol=1e-5,
    )
    check_op(
        lambda x, w, b, m, v: aten._native_batch_norm_legit_functional(
            x, w, b, m, v, True, 0.1, 1e-5
        ),
        [x, w, b, mean, var],
        rtol=1e-4,
        atol=1e-5,
    )
    check_op(
        lambda x, w, b: aten._native_batch_norm_legit.no_stats(x, w, b, True, 0.1, 1e-5),
        [x, w, b],
        rtol=1e-4,
        atol=1e-5,
    )


def test_instance_norm():
    x, w, b = r(2, 3, 4, 5), r(3, seed=1), r(3, seed=2)
    check_op(
        lambda x, w, b: F.instance_norm(x, weight=w, bias=b),
        [x, w, b],
        rtol=1e-4,
        atol=1e-5,
        dynamic_shapes=dims({0: DYN, 2: DYN, 3: DYN}, None, None),
        second_args=[r(1, 3, 6, 2, seed=3), w, b],
    )


# ----------------------------------------------------------------------------------- softmax
SOFTMAX_CASES = {
    "softmax": lambda x: F.softmax(x, -1),
    "softmax_dim0": lambda x: F.softmax(x, 0),
    "log_softmax": lambda x: F.log_softmax(x, 1),
    "softmax_dtype": lambda x: F.softmax(x, -1, dtype=torch.float64),
    "softmin": lambda x: F.softmin(x, -1),
    "core_softmax": lambda x: aten._softmax(x, -1, False),
    "core_log_softmax": lambda x: aten._log_softmax(x, 0, False),
}


@pytest.mark.parametrize("name", list(SOFTMAX_CASES))
def test_softmax(name):
    x = r(3, 4, 5)
    check_op(
        SOFTMAX_CASES[name],
        [x],
        rtol=1e-5,
        atol=1e-6,
        dynamic_shapes=dims({0: DYN, 1: DYN, 2: DYN}),
        second_args=[r(2, 6, 3, seed=1)],
    )


def test_softmax_edge_cases():
    check_op(lambda x: F.softmax(x, 0), [torch.tensor(3.0)])
    check_op(lambda x: F.log_softmax(x, 0), [torch.tensor(3.0)])
    check_op(lambda x: F.softmax(x, 1), [r(0, 3)])
    check_op(lambda x: F.softmax(x, -1), [r(2, 5, dtype=torch.float16)], rtol=1e-3, atol=1e-3)
    # bfloat16 cannot cross the numpy boundary of the test harness; it computes inside.
    check_op(lambda x: F.softmax(x.to(torch.bfloat16), -1).float(), [r(2, 5)], rtol=1e-2, atol=1e-2)


def test_safe_softmax_zeroes_fully_masked_rows():
    x = r(3, 4)
    x[1] = float("-inf")
    check_op(lambda x: aten._safe_softmax(x, -1), [x])


# ----------------------------------------------------------------------------------- dropout
def test_dropout_eval_is_identity():
    x = r(3, 4)
    for fn in (
        lambda x: F.dropout(x, 0.5, training=False),
        lambda x: F.dropout2d(x.unsqueeze(0), 0.5, training=False),
        lambda x: F.alpha_dropout(x, 0.5, training=False),
        lambda x: F.feature_alpha_dropout(x.unsqueeze(0), 0.5, training=False),
        lambda x: aten.native_dropout(x, 0.5, False),
    ):
        check_op(fn, [x])


def test_dropout_training_keeps_scaled_values():
    x = r(64, 64).abs() + 1.0
    program = check_op(lambda x: F.dropout(x, 0.25, training=True), [x], compare_values=False)
    from tests.op_check import run_onnx

    (out,) = run_onnx(program, [x])
    out = torch.from_numpy(out)
    kept = out != 0
    torch.testing.assert_close(out[kept], x[kept] / 0.75)
    assert 0.6 < kept.float().mean().item() < 0.9
    program = check_op(lambda x: aten.native_dropout(x, 0.25, True), [x], compare_values=False)
    out, mask = (torch.from_numpy(v) for v in run_onnx(program, [x]))
    assert mask.dtype == torch.bool and torch.equal(out != 0, mask)


# --------------------------------------------------------------------------------- embedding
def test_embedding_dynamic():
    w = r(10, 4)
    idx = torch.tensor([[1, 2, 9], [0, 0, 5]])
    check_op(
        F.embedding,
        [idx, w],
        dynamic_shapes=dims({0: DYN, 1: DYN}, None),
        second_args=[torch.tensor([[3], [4], [7]]), w],
    )


def test_embedding_max_norm():
    w = r(10, 4) * 3
    idx = torch.tensor([[1, 2, 9], [1, 0, 5]])
    check_op(lambda i, w: F.embedding(i, w.clone(), max_norm=1.5), [idx, w], rtol=1e-5)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [None, 1, -1])
def test_embedding_bag(mode, padding_idx):
    w = r(6, 3)
    idx = torch.tensor([4, 1, 1, 0, 4, 5, 2])
    offsets = torch.tensor([0, 3, 3, 6])  # an empty bag in the middle
    check_op(
        lambda i, o, w: F.embedding_bag(i, w, o, mode=mode, padding_idx=padding_idx),
        [idx, offsets, w],
        rtol=1e-5,
    )


@pytest.mark.parametrize("opset", [17, 18])
def test_embedding_bag_options(opset):
    w = r(6, 3)
    idx = torch.tensor([4, 1, 1, 0, 4, 5])
    offsets = torch.tensor([0, 2, 6])
    psw = r(6, seed=3)
    check_op(
        lambda i, o, w, p: F.embedding_bag(
            i, w, o, mode="sum", per_sample_weights=p, include_last_offset=True
        ),
        [idx, offsets, w, psw],
        opset=opset,
    )
    check_op(lambda i, o, w: F.embedding_bag(i, w, o, mode="max"), [idx, offsets, w], opset=opset)


def test_one_hot_of_a_scalar():
    check_op(lambda x: F.one_hot(x, 4), [torch.tensor(2)])


def test_one_hot():
    check_op(
        lambda x: F.one_hot(x, 5),
        [torch.tensor([[0, 3], [4, 1]])],
        dynamic_shapes=dims({0: DYN, 1: DYN}),
        second_args=[torch.tensor([[2, 2, 1]])],
    )


# ---------------------------------------------------------------------------------- shuffles
@pytest.mark.parametrize("shape", [(2, 8, 3, 4), (8, 3, 4), (2, 2, 8, 3, 4)])
def test_pixel_shuffle_roundtrip(shape):
    x = r(*shape)
    check_op(lambda x: F.pixel_shuffle(x, 2), [x])
    check_op(lambda x: F.pixel_unshuffle(x, 2), [F.pixel_shuffle(x, 2)])
    check_op(lambda x: F.pixel_shuffle(x.to(torch.int64), 2), [x])


def test_pixel_shuffle_dynamic():
    x = r(2, 8, 3, 4)
    check_op(
        lambda x: F.pixel_shuffle(x, 2),
        [x],
        dynamic_shapes=dims({0: DYN, 2: DYN, 3: DYN}),
        second_args=[r(3, 8, 5, 2, seed=1)],
    )
    y = r(2, 3, 4, 6)
    check_op(
        lambda x: F.pixel_unshuffle(x, 2),
        [y],
        dynamic_shapes=dims({0: DYN, 2: DYN}),
        second_args=[r(3, 3, 8, 6, seed=1)],
    )


def test_channel_shuffle():
    x = r(2, 6, 3, 2)
    check_op(
        lambda x: F.channel_shuffle(x, 3),
        [x],
        dynamic_shapes=dims({0: DYN, 2: DYN}),
        second_args=[r(1, 6, 5, 2, seed=1)],
    )


# ----------------------------------------------------------------------------- end to end
def _reinit(model, seed=0):
    """Small random weights and non-trivial running stats, so outputs carry signal."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.05)
        for name, b in model.named_buffers():
            if name.endswith("running_var"):
                b.copy_(torch.rand(b.shape, generator=g) + 0.5)
            elif name.endswith("running_mean"):
                b.copy_(torch.randn(b.shape, generator=g) * 0.1)
    return model.eval()


class _LastHiddenState(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def _vision(name):
    import torchvision

    return _reinit(getattr(torchvision.models, name)(weights=None))


def _text(name):
    import transformers

    if name == "bert":
        config = transformers.BertConfig(
            vocab_size=100,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=64,
        )
        model = transformers.BertModel(config)
    else:
        config = transformers.GPT2Config(
            vocab_size=100,
            n_embd=32,
            n_layer=2,
            n_head=2,
            n_positions=64,
            bos_token_id=0,
            eos_token_id=0,
        )
        model = transformers.GPT2Model(config)
    return _LastHiddenState(_reinit(model))


def _text_inputs(batch, seq, seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 100, (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    mask[0, seq - 2 :] = 0  # some padding, so the attention mask matters
    return [ids, mask]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_small"])
@pytest.mark.parametrize("shapes", ["static", "dynamic"])
def test_vision_model(name, shapes):
    model = _vision(name)
    x = r(2, 3, 64, 64)
    if shapes == "static":
        check_op(model, [x], rtol=1e-4, atol=1e-4)
    else:
        check_op(
            model,
            [x],
            dynamic_shapes=({0: torch.export.Dim("batch", max=64)},),
            second_args=[r(3, 3, 64, 64, seed=1)],
            rtol=1e-4,
            atol=1e-4,
        )


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bert", "gpt2"])
@pytest.mark.parametrize("shapes", ["static", "dynamic"])
def test_text_model(name, shapes):
    model = _text(name)
    args = _text_inputs(2, 8, seed=0)
    if shapes == "static":
        check_op(model, args, rtol=1e-4, atol=1e-4)
    else:
        batch = torch.export.Dim("batch", max=64)
        seq = torch.export.Dim("sequence", min=2, max=64)
        dims = ({0: batch, 1: seq}, {0: batch, 1: seq})
        check_op(
            model,
            args,
            dynamic_shapes=dims,
            second_args=_text_inputs(3, 11, seed=1),
            rtol=1e-4,
            atol=1e-4,
        )


# ------------------------------------------------------------------- backward (core ATen)
def test_layer_and_group_norm_backward():
    x, w, b = r(3, 4, 5), r(5, seed=1), r(5, seed=2)
    _, mean, rstd = aten.native_layer_norm(x, [5], w, b, 1e-5)
    check_op(
        lambda g, x, m, s, w, b: aten.native_layer_norm_backward(
            g, x, [5], m, s, w, b, [True, True, True]
        ),
        [r(3, 4, 5, seed=3), x, mean, rstd, w, b],
        rtol=1e-4,
        atol=1e-4,
    )
    x, w, b = r(2, 6, 7), r(6, seed=1), r(6, seed=2)
    _, mean, rstd = aten.native_group_norm(x, w, b, 2, 6, 7, 3, 1e-5)
    check_op(
        lambda g, x, m, s, w: aten.native_group_norm_backward(
            g, x, m, s, w, 2, 6, 7, 3, [True, True, True]
        ),
        [r(2, 6, 7, seed=3), x, mean, rstd, w],
        rtol=1e-4,
        atol=1e-4,
    )


@pytest.mark.parametrize("padding_idx,scale_by_freq", [(2, False), (-1, True)])
def test_embedding_dense_backward(padding_idx, scale_by_freq):
    grad, indices = r(2, 3, 4), torch.tensor([[0, 2, 2], [5, 1, 2]])
    check_op(
        lambda g, i: aten.embedding_dense_backward(g, i, 6, padding_idx, scale_by_freq),
        [grad, indices],
        rtol=1e-5,
        atol=1e-6,
    )


AUTO = torch.export.Dim.AUTO


@pytest.mark.parametrize(
    "a, b, second",
    [
        (r(2, 3), r(4, 5), (r(3, 2), r(5, 6))),
        (r(2, 3, 2), r(4), (r(3, 2, 4), r(5))),  # ranks differ: b is padded in front
        (torch.randint(0, 5, (2, 3)), torch.randint(0, 5, (3, 2)), None),
        (r(2, 2) > 0, r(3, 2) > 0, None),
        (r(), r(), None),
    ],
    ids=["float_dynamic", "rank_padding_dynamic", "int64", "bool", "scalars"],
)
def test_kron_keeps_every_dim_dynamic(a, b, second):
    spec = None
    if second is not None:
        spec = (tuple({d: AUTO for d in range(t.dim())} for t in (a, b)),)
    check_op(lambda x, y: torch.kron(x, y), (a, b), dynamic_shapes=spec, second_args=second)
