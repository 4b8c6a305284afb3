"""Rewrites of a QDQ graph into the form onnxruntime's QDQ fusions take, computing the same.

onnxruntime turns ``DequantizeLinear -> Gemm`` into QGemm only when every input of the Gemm
comes through a DequantizeLinear (its selector counts the Gemm's inputs): a float bias, which
PT2E leaves unquantized (X86InductorQuantizer quantizes a linear's input and weight, not its
bias), keeps the Gemm in float, and the int8 weight is dequantized on every run (a
1000x1280 classifier: about 9 ms of mobilenet_v2's 22 at one thread). ``Gemm(A, B, C)`` with
the bias added after the product, ``Add(Gemm(A, B), C)``, is the same sum (``beta`` 1), and
onnxruntime then fuses the Gemm into QGemm with a float output and adds the bias in float.
Its Conv rule quantizes a float bias itself, so convolutions need nothing.

Applied by the optimize step (``exporter._fusions``) at every opset.
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript.rewriter import pattern


def _dequantized(value: ir.Value | None) -> bool:
    producer = None if value is None else value.producer()
    return (
        producer is not None
        and producer.op_type == "DequantizeLinear"
        and producer.domain in ("", "ai.onnx")
    )


class _GemmBiasAfter(pattern.RewriteRuleClassBase):
    """``Gemm(DQ(a), DQ(b), C)`` with a bias C that is not dequantized: ``Add(Gemm(DQ(a),
    DQ(b)), C)``, the form onnxruntime fuses into QGemm."""

    def __init__(self):
        super().__init__("Gemm-bias-after-QDQ")

    def pattern(self, op, a, b, c):
        return op.Gemm(a, b, c, _outputs=["out"])

    def check(self, context, a, b, c, out, **_):
        gemm = out.producer()
        if not (_dequantized(a) and _dequantized(b)):
            return pattern.MatchResult().fail("an operand is not dequantized", [a, b])
        if _dequantized(c):
            return pattern.MatchResult().fail("the bias is dequantized already", c)
        beta = gemm.attributes.get("beta")
        if beta is not None and beta.as_float() != 1.0:
            return pattern.MatchResult().fail("beta is not 1", c)
        return pattern.MatchResult()

    def rewrite(self, op, a, b, c, out, **_):
        attributes = {
            name: attr.value
            for name, attr in out.producer().attributes.items()
            if name in ("alpha", "transA", "transB")
        }
        return op.Add(op.Gemm(a, b, **attributes), c)


def rules() -> list:
    """The rewrites, for ``pattern.RewriteRuleSet``."""
    return [_GemmBiasAfter.rule()]
