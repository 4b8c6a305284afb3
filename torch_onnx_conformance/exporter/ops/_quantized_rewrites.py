"""Rewrites of a QDQ graph into the form onnxruntime's QDQ fusions take, computing the same.

onnxruntime turns ``DequantizeLinear -> Gemm`` into QGemm only when every input of the Gemm
comes through a DequantizeLinear (its selector counts the Gemm's inputs): a float bias, which
PT2E leaves unquantized (X86InductorQuantizer quantizes a linear's input and weight, not its
bias), keeps the Gemm in float, and the int8 weight is dequantized on every run (a
1000x1280 classifier: about 9 ms of mobilenet_v2's 22 at one thread). ``Gemm(A, B, C)`` with
the bias added after the product, ``Add(Gemm(A, B), C)``, is the same sum (``beta`` 1), and
onnxruntime then fuses the Gemm into QGemm with a float output and adds the bias in float.
Its Conv rule quantizes a float bias itself, so convolutions need nothing.

An embedding table stored as int4 blocks (torchao's IntxWeightOnlyConfig on nn.Embedding) is
``Gather(DequantizeLinear(table), ids)``: onnxruntime dequantizes the whole table on every run
to read a few rows. ``com.microsoft.GatherBlockQuantized(table, ids, scales, zero_points)``
gathers the int4 rows and dequantizes only those (the same values: each row's blocks with
their own scales).

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


#: onnxruntime's GatherBlockQuantized: int4/uint4 tables, blocks of 16 or more (a power of
#: two) along the last axis (contrib_defs.cc).
_GATHER_BLOCK_TYPES = (ir.DataType.INT4, ir.DataType.UINT4)


class _GatherBlockQuantized(pattern.RewriteRuleClassBase):
    """``Gather(DequantizeLinear(table, scales[, zero_points]), ids)`` on axis 0, the table a
    2-D int4 initializer blocked along its last axis: ``com.microsoft.GatherBlockQuantized``,
    which dequantizes only the rows gathered."""

    def __init__(self):
        super().__init__("Gather-of-blocked-int4-DequantizeLinear")

    def pattern(self, op, table, scales, ids):
        dequantized = op.DequantizeLinear(table, scales, _allow_other_inputs=True)
        return op.Gather(dequantized, ids, _outputs=["out"])

    def check(self, context, table, scales, ids, out, **_):
        gather = out.producer()
        dq = gather.inputs[0].producer()
        zero_points = dq.inputs[2] if len(dq.inputs) > 2 else None
        fail = pattern.MatchResult().fail
        if len(dq.inputs) > 3 or (
            gather.attributes.get("axis") and gather.attributes["axis"].as_int()
        ):
            return fail("not a Gather along axis 0 of a DequantizeLinear", gather)
        if table.const_value is None or table.dtype not in _GATHER_BLOCK_TYPES:
            return fail("the table is not a constant int4/uint4 tensor", table)
        if table.shape is None or len(table.shape) != 2 or scales.const_value is None:
            return fail("the table is not a 2-D initializer with constant scales", table)
        block = dq.attributes.get("block_size")
        axis = dq.attributes.get("axis")
        block = block.as_int() if block is not None else 0
        if block < 16 or block & (block - 1) or (axis is not None and axis.as_int() not in (1, -1)):
            return fail("not blocked along the last axis in blocks of 16, 32, ... ", dq)
        if zero_points is not None and zero_points.const_value is None:
            return fail("the zero points are computed", zero_points)
        if len(dq.outputs[0].uses()) != 1:
            return fail("the dequantized table has other users", dq)
        return pattern.MatchResult()

    def rewrite(self, op, table, scales, ids, out, **_):
        dq = out.producer().inputs[0].producer()
        block = dq.attributes["block_size"].as_int()
        zero_points = dq.inputs[2] if len(dq.inputs) > 2 else None
        inputs = [table, ids, scales] + ([zero_points] if zero_points is not None else [])
        return op.GatherBlockQuantized(
            *inputs,
            _domain="com.microsoft",
            gather_axis=0,
            quantize_axis=1,
            block_size=block,
            bits=4,
        )


def rules() -> list:
    """The rewrites, for ``pattern.RewriteRuleSet``."""
    return [_GemmBiasAfter.rule(), _GatherBlockQuantized.rule()]
