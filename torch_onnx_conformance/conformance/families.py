"""Op families: coarse groups of OpInfo names, for the pass-rate-by-family chart."""

from __future__ import annotations

_PREFIX_FAMILIES = (
    ("nn.functional.", "nn"),
    ("linalg.", "linalg"),
    ("fft.", "fft"),
    ("special.", "special"),
    ("signal.", "signal"),
    ("masked.", "masked"),
    ("sparse.", "sparse"),
    ("_refs.", "refs"),
    ("torch.ops.aten.", "aten"),
    ("quantized_decomposed.", "quantized"),
)

_NAMED_FAMILIES = {
    "reduction": (
        "sum nansum prod mean nanmean amax amin max min aminmax std var std_mean var_mean norm "
        "logsumexp all any argmax argmin count_nonzero median nanmedian mode renorm dist gradient"
    ),
    "scan": "cumsum cumprod cummax cummin logcumsumexp cumulative_trapezoid trapezoid trapz",
    "matmul": (
        "matmul mm bmm addmm addmv addbmm baddbmm addr mv dot vdot inner outer ger einsum "
        "tensordot kron chain_matmul __rmatmul__ cross"
    ),
    "sort": "sort argsort msort topk kthvalue searchsorted bucketize unique unique_consecutive",
    "indexing": (
        "gather scatter scatter_add scatter_reduce index_select index_add index_copy index_fill "
        "index_put index_reduce take take_along_dim masked_fill masked_scatter masked_select "
        "where nonzero nonzero_static argwhere __getitem__ put diagonal_scatter select_scatter "
        "slice_scatter as_strided_scatter isin _unsafe_masked_index "
        "_unsafe_masked_index_put_accumulate _segment_reduce"
    ),
    "shape": (
        "reshape reshape_as view view_as permute transpose swapaxes swapdims t squeeze unsqueeze "
        "expand expand_as flatten unflatten cat concat concatenate stack hstack vstack dstack "
        "column_stack row_stack split split_with_sizes tensor_split hsplit vsplit dsplit chunk "
        "unbind narrow narrow_copy select movedim moveaxis flip fliplr flipud roll rot90 repeat "
        "tile repeat_interleave broadcast_to broadcast_tensors atleast_1d atleast_2d atleast_3d "
        "diag diagonal diag_embed diagflat tril triu as_strided as_strided_copy contiguous clone "
        "ravel block_diag meshgrid unfold unfold_copy view_copy T H mT mH pad constant_pad_nd "
        "squeeze_copy alias_copy diagonal_copy expand_copy permute_copy t_copy transpose_copy "
        "unbind_copy unsqueeze_copy split_with_sizes_copy unsafe_chunk unsafe_split _chunk_cat "
        "slice resize_ resize_as_ sum_to_size broadcast_shapes cartesian_prod combinations "
        "unravel_index diff resize resize_as"
    ),
    "factory": (
        "arange linspace logspace zeros ones full eye empty empty_like zeros_like ones_like "
        "full_like new_zeros new_ones new_full new_empty new_empty_strided empty_strided "
        "empty_permuted scalar_tensor tril_indices triu_indices zero"
    ),
    "random": (
        "bernoulli normal multinomial rand_like randn_like randint_like randint randn uniform "
        "cauchy exponential geometric log_normal"
    ),
    "comparison": (
        "eq ne lt le gt ge equal isclose allclose isnan isinf isfinite isposinf isneginf isreal "
        "maximum minimum fmax fmin clamp_max clamp_min"
    ),
    "logical": (
        "logical_and logical_or logical_xor logical_not bitwise_and bitwise_or bitwise_xor "
        "bitwise_not bitwise_left_shift bitwise_right_shift __and__ __or__ __xor__"
    ),
    "normalization": (
        "softmax log_softmax _softmax_backward_data native_batch_norm _native_batch_norm_legit "
        "_batch_norm_with_update native_layer_norm native_group_norm"
    ),
    "linalg": (
        "cholesky_inverse cholesky_solve geqrf logdet lu lu_solve lu_unpack matrix_exp ormqr "
        "pca_lowrank pinverse svd svd_lowrank triangular_solve"
    ),
    "fft": "stft istft",
    "statistics": "quantile nanquantile histc histogram histogramdd bincount cov corrcoef trace",
    "nn": (
        "grid_sampler_2d grid_sampler_3d _upsample_bilinear2d_aa cdist "
        "max_pool2d_with_indices_backward native_dropout_backward"
    ),
    "conversion": (
        "to type_as double float half bfloat16 int long short bool byte char cdouble cfloat "
        "chalf view_as_real view_as_complex resolve_conj resolve_neg to_sparse item"
    ),
    # ATen's fake-quantize family (torch_onnx_conformance/conformance/quantized_ops.py; quantized_decomposed.* by prefix)
    "quantized": (
        "fake_quantize_per_tensor_affine fake_quantize_per_tensor_affine_cachemask "
        "_fake_quantize_per_tensor_affine_cachemask_tensor_qparams fake_quantize_per_channel_affine "
        "fake_quantize_per_channel_affine_cachemask _fake_quantize_learnable_per_tensor_affine "
        "_fake_quantize_learnable_per_channel_affine"
    ),
    # OpInfo entries that test a mechanism rather than an op.
    "other": "hash_tensor jiterator_2inputs_2outputs jiterator_4inputs_with_extra_args torch",
}

_BY_NAME = {name: family for family, names in _NAMED_FAMILIES.items() for name in names.split()}


def op_family(op_name: str) -> str:
    """Family of a case's op name (``name``, ``name.variant`` or the in-place ``name_``)."""
    for prefix, family in _PREFIX_FAMILIES:
        if op_name.startswith(prefix):
            return family
    base = op_name.split(".", 1)[0]
    if base.endswith("_") and not base.endswith("__"):
        base = base[:-1]
    if base in _BY_NAME:
        return _BY_NAME[base]
    return "elementwise"
