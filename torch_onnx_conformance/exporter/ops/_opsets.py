"""Which ONNX operators a target opset offers: the one place where translations choose by opset.

A translation asks ``ctx.has("Gelu")`` instead of comparing opset numbers itself, so the
opset story of the whole op library reads from this table.
"""

from __future__ import annotations

from torch_onnx_conformance.exporter import DEFAULT_OPSET  # noqa: F401 - the op library's default opset, kept light

#: The oldest opset the op library translates to; ``export`` reaches older ones with ONNX's
#: version converter (``torch_onnx_conformance/exporter/_opset_convert.py``).
MIN_OPSET = 17
#: The newest opset onnxruntime 1.31 runs.
MAX_OPSET = 26

#: ONNX operator (or behaviour) -> first default-domain opset that has it.
INTRODUCED_IN: dict[str, int] = {
    "LayerNormalization": 17,
    "DFT": 17,
    "STFT": 17,
    "BlackmanWindow": 17,
    "Col2Im": 18,
    "ReduceMax-axes-input": 18,  # ReduceMax/Min/Prod/L1/L2/LogSum*/SumSquare take axes as an input
    "ScatterND-reduction-max": 18,
    "Split-num_outputs": 18,
    "BitwiseAnd": 18,
    "BitwiseOr": 18,
    "BitwiseXor": 18,
    "BitwiseNot": 18,
    "Mish": 18,
    "Pad-axes": 18,
    "DeformConv": 19,
    "Cast-float8": 19,  # float8 types, and Cast's saturate attribute for them
    "Gelu": 20,
    "GridSample-nd": 20,
    "AffineGrid": 20,
    "DFT-axis-input": 20,
    "ReduceMax-bool": 20,
    "IsNaN-bf16": 20,
    "IsInf-f16": 20,  # IsInf accepts float16 and bfloat16 from opset 20
    "GroupNormalization": 21,
    "Cast-int4": 21,
    "QuantizeLinear-16bit": 21,  # Q/DQ on int16/uint16 (and int4, block_size)
    "Attention": 23,
    "RMSNormalization": 23,
    "RotaryEmbedding": 23,
    # Swish (24) is left out on purpose: onnxruntime 1.31 has no kernel for it and runs it
    # only at opset 24, by expanding its function body; Sigmoid * x runs everywhere.
    "CumProd": 26,
    "BitCast": 26,
}


def has(feature: str, opset: int) -> bool:
    """True when ``feature`` (a key of INTRODUCED_IN) exists at ``opset``."""
    try:
        return opset >= INTRODUCED_IN[feature]
    except KeyError:
        raise KeyError(
            f"Unknown ONNX feature {feature!r}; add it to torch_onnx_conformance/exporter/ops/_opsets.py INTRODUCED_IN"
        ) from None
