"""Graph rewrites into fused standard ops: RMSNormalization, RotaryEmbedding and grouped-query
Attention (opset 23), and Gelu's tanh approximation (opset 20); below opset 23, RMSNorm in the
form onnxruntime fuses itself (SimplifiedLayerNormalization).

Models reach the exporter decomposed: transformers' RMSNorm is written as
pow/mean/add/rsqrt/mul, its rotary embedding as ``x * cos + rotate_half(x) * sin`` (or, in
Cohere, GLM and GPT-J, with each even/odd pair turned: the interleaved form), its
grouped-query attention repeats key and value heads (unsqueeze/expand/reshape) before the
attention, and GPT-2's gelu is the tanh formula. onnxruntime runs each of those as one kernel when the graph names the fused op, so
the optimize step rewrites the decomposed forms with onnxscript's pattern rewriter.

Every rule checks what the fused op assumes before it fires (the reduced axis is the last one,
the scale covers only that axis, the cosine table repeats each angle where the rotation pairs
elements (as halves, or side by side when interleaved), the repeated heads are
each key head copied consecutively); a graph it cannot prove that for is left as it is.

Before them, at every opset, two simplifications that constant folding leaves to us: a Where on
a constant condition of one value (the guard for fully masked attention rows, when the mask is a
constant) and an Attention mask that is a constant masking nothing.
onnxruntime 1.31's CPU provider has kernels for all three ops (RotaryEmbedding without batch
broadcasting of its caches, which is why the rewrite expands them to the batch).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import onnx_ir as ir
import onnx_ir.passes.common as common
from onnxscript.rewriter import pattern

from torch_onnx_conformance.exporter import _dtypes, _passes, _translation_reuse
from torch_onnx_conformance.exporter.ops import _kernels, _opsets, _quantized_rewrites

_INT64_MAX = np.iinfo(np.int64).max


def _ints(value: ir.Value | None) -> list[int] | None:
    """The integer values of a constant input, or None when it is not a constant."""
    if value is None:
        return None
    tensor = ir.convenience.get_const_tensor(value)
    if tensor is None:
        return None
    array = tensor.numpy()
    if array.dtype.kind not in "iu":
        return None
    return [int(v) for v in array.reshape(-1)]


def _scalar_float(value: ir.Value | None) -> float | None:
    tensor = None if value is None else ir.convenience.get_const_tensor(value)
    if tensor is None or tensor.numpy().size != 1:
        return None
    return float(tensor.numpy().reshape(-1)[0])


def _dims(value: ir.Value) -> tuple | None:
    return None if value.shape is None else tuple(value.shape)


def _is_last_axis(axes: list[int] | None, rank: int) -> bool:
    return axes is not None and len(axes) == 1 and axes[0] in (-1, rank - 1)


def _runs(op_type: str, *values: ir.Value) -> bool:
    """Whether onnxruntime has a kernel for ``op_type`` on the dtypes of ``values`` (bfloat16,
    for one, it runs none of the fused ops in)."""
    return all(_kernels.has_kernel(op_type, _dtypes.to_torch(v.dtype)) for v in values)


def _fail(message: str, *values) -> pattern.MatchResult:
    return pattern.MatchResult().fail(message, list(values))


# --- RMSNormalization ------------------------------------------------------------------------


class _RMSNorm(pattern.RewriteRuleClassBase):
    """scale * (x * 1/sqrt(mean(x*x, last axis) + eps)), with the optional float32 casts around
    the normalisation that transformers writes for half-precision inputs."""

    def __init__(self, square: str):
        super().__init__(f"RMSNormalization-{square}")
        self._square = square

    def pattern(self, op, x, axes, eps, scale):
        # (A tag variable for each OrValue: onnxscript 0.7 cannot clone one without, and
        # commute=True clones.)
        work = pattern.OrValue([op.Cast(x, _outputs=["widened"]), x], tag_var="cast_in")
        squared = op.Mul(work, work) if self._square == "mul" else op.Pow(work, pattern.Var("two"))
        mean = op.ReduceMean(squared, axes, _outputs=["mean"])
        inverse_rms = op.Reciprocal(op.Sqrt(op.Add(mean, eps)))
        normalized = op.Mul(work, inverse_rms)
        normalized = pattern.OrValue(
            [op.Cast(normalized, _outputs=["narrowed"]), normalized], tag_var="cast_out"
        )
        return op.Mul(scale, normalized)

    def check(self, context, x, axes, eps, scale, mean, two=None, widened=None, **_):
        dims = _dims(x)
        if dims is None or not _runs("RMSNormalization", x, scale):
            return _fail("input of unknown rank, or a dtype onnxruntime has no kernel for", x)
        if widened is not None and widened.dtype != ir.DataType.FLOAT:
            return _fail("the input is cast to something other than float32", widened)
        if self._square == "pow" and _scalar_float(two) != 2.0:
            return _fail("Pow exponent is not 2", two)
        if not _is_last_axis(_ints(axes), len(dims)):
            return _fail("the mean is not over the last axis alone", axes)
        keepdims = mean.producer().attributes.get("keepdims")
        if keepdims is not None and keepdims.as_int() != 1:
            return _fail("the mean drops the reduced axis", mean)
        if _scalar_float(eps) is None:
            return _fail("epsilon is not a constant scalar", eps)
        scale_dims = _dims(scale)
        if scale_dims is None or len(scale_dims) != 1 or scale_dims[0] != dims[-1]:
            return _fail("the scale does not cover exactly the last axis", scale)
        return pattern.MatchResult()

    def rewrite(self, op, x, eps, scale, widened=None, **_):
        # Statistics in the precision the written-out form computes them in, float32 at least.
        work = (widened if widened is not None else x).dtype
        return op.RMSNormalization(
            x,
            scale,
            axis=-1,
            epsilon=_scalar_float(eps),
            stash_type=work if work == ir.DataType.DOUBLE else ir.DataType.FLOAT,
        )


class _RMSNormDivided(_RMSNorm):
    """Below opset 23, the same normalisation written as onnxruntime's SimplifiedLayerNormFusion
    matches it: Pow(x, 2), ReduceMean, Add, Sqrt, Div(x, ...), Mul(scale). transformers' rsqrt
    reaches the graph as Reciprocal and Mul, and x * x as Mul: both forms onnxruntime runs as
    six kernels instead of one."""

    def __init__(self, square: str):
        pattern.RewriteRuleClassBase.__init__(self, f"RMSNorm-divided-{square}")
        self._square = square

    def rewrite(self, op, x, axes, eps, scale, widened=None, narrowed=None, **_):
        dtype = (widened if widened is not None else x).dtype
        work = op.Cast(x, to=dtype) if widened is not None else x
        two = op.Constant(value=ir.tensor(np.array(2, dtype=dtype.numpy())))
        mean = op.ReduceMean(op.Pow(work, two), axes, keepdims=1)
        normalized = op.Div(work, op.Sqrt(op.Add(mean, eps)))
        if narrowed is not None:
            normalized = op.Cast(normalized, to=narrowed.dtype)
        return op.Mul(scale, normalized)


# --- RotaryEmbedding -------------------------------------------------------------------------

#: Ops that map each element of their (first) input to one output element.
_ELEMENTWISE_UNARY = frozenset({"Cos", "Sin", "Cast", "Neg", "Identity"})
_ELEMENTWISE_BINARY = frozenset({"Mul", "Div", "Add", "Sub"})


def _pairs_repeat(value: ir.Value, half: int, interleaved: bool, depth: int = 8) -> bool:
    """Whether the last axis of ``value`` provably holds each of ``half`` values twice: as two
    equal halves [t, t] (rotate-half tables), or ``interleaved`` as equal neighbours
    [t0, t0, t1, t1, ...].

    A constant is compared; a computed value is followed through the ops that keep the last
    axis elementwise, down to where the repeat is made: transformers' ``cat((freqs, freqs), -1)``
    (a Concat of one value with itself) or ``repeat_interleave(freqs, 2, -1)`` (a Reshape of
    ``freqs`` unsqueezed and expanded to two along a new last axis).
    """
    dims = _dims(value)
    if dims is None or not dims or dims[-1] not in (1, 2 * half):
        return False
    if dims[-1] == 1:
        return True  # broadcast along the last axis
    tensor = ir.convenience.get_const_tensor(value)
    if tensor is not None:
        array = tensor.numpy()
        a, b = (
            (array[..., 0::2], array[..., 1::2])
            if interleaved
            else (array[..., :half], array[..., half:])
        )
        return bool(np.array_equal(a, b, equal_nan=True))
    node = value.producer()
    if node is None or depth == 0 or node.domain not in ("", "ai.onnx"):
        return False
    if node.op_type == "Concat" and not interleaved:
        axis = node.attributes["axis"].as_int()
        a, b = node.inputs
        return axis in (-1, len(dims) - 1) and a is b and _dims(a) is not None
    if node.op_type == "Reshape" and interleaved:
        return _each_repeated_twice(node.inputs[0], dims)
    if node.op_type in _ELEMENTWISE_UNARY:
        return _pairs_repeat(node.inputs[0], half, interleaved, depth - 1)
    if node.op_type in _ELEMENTWISE_BINARY:
        return all(
            _broadcast_scalar(v) or _pairs_repeat(v, half, interleaved, depth - 1)
            for v in node.inputs
        )
    if node.op_type == "Unsqueeze":
        axes = _ints(node.inputs[1])
        rank = len(dims)
        touches_last = axes is None or any(a in (-1, rank - 1) for a in axes)
        return not touches_last and _pairs_repeat(node.inputs[0], half, interleaved, depth - 1)
    return False


def _each_repeated_twice(wide: ir.Value, merged_dims: tuple) -> bool:
    """Whether ``wide``, reshaped to ``merged_dims``, is Expand(Unsqueeze(t, new last axis)) to
    two along that axis: the reshape then puts each value of t twice, side by side."""
    node = wide.producer()
    if node is None or node.op_type != "Expand" or node.domain not in ("", "ai.onnx"):
        return False
    narrow = node.inputs[0].producer()
    if narrow is None or narrow.op_type != "Unsqueeze" or narrow.domain not in ("", "ai.onnx"):
        return False
    source = narrow.inputs[0]
    src, dims = _dims(source), _dims(wide)
    if src is None or dims is None or len(dims) != len(src) + 1:
        return False
    if _ints(narrow.inputs[1]) not in ([len(src)], [-1]):
        return False
    return dims == (*src, 2) and tuple(merged_dims) == (*src[:-1], 2 * src[-1])


def _broadcast_scalar(value: ir.Value) -> bool:
    dims = _dims(value)
    return dims is not None and all(d == 1 for d in dims)


def _size_of(op, x: ir.Value, axis: int) -> ir.Value:
    """A 1-element Shape of ``x`` at ``axis``, read from a graph input with the same symbolic
    dim where there is one, so that every use reads the same value (CSE then keeps one)."""
    dim = x.shape[axis]
    graph = x.graph
    for value in graph.inputs if graph is not None else ():
        if value.shape is not None and dim in tuple(value.shape):
            i = tuple(value.shape).index(dim)
            return op.Shape(value, start=i, end=i + 1)
    return op.Shape(x, start=axis, end=axis + 1)


_SLICE_PARTS = ("start", "end", "axes", "steps")


def _slice(op, x, name: str):
    """A Slice of ``x`` whose starts, ends, axes and steps bind as ``<part>_<name>``."""
    return op.Slice(x, *(pattern.Var(f"{part}_{name}") for part in _SLICE_PARTS))


def _unit_slices(bound: dict, names: tuple[str, ...]) -> list[list[list[int] | None]]:
    """Per slice name, its constant [starts, ends, axes, steps] (None where not constant)."""
    return [[_ints(bound[f"{part}_{name}"]) for part in _SLICE_PARTS] for name in names]


def _to_end(end: list[int] | None, size: int) -> bool:
    return end is not None and len(end) == 1 and end[0] >= size


class _Rotary(pattern.RewriteRuleClassBase):
    """x * cos + rotated(x) * sin on a (batch, heads, seq, head_size) x: what both rotary forms
    share (the tables, the fused op); each form says how x is rotated and how the tables repeat
    their values."""

    interleaved: bool

    def check_rotation(self, x: ir.Value, size: int, bound: dict) -> str | None:
        """Why the rotation is not this form's, or None when it is."""
        raise NotImplementedError

    def check(self, context, x, cos, sin, **bound):
        dims = _dims(x)
        if dims is None or len(dims) != 4 or not _runs("RotaryEmbedding", x):
            return _fail("input is not 4-D or of a dtype onnxruntime has no kernel for", x)
        size = dims[3]
        if not isinstance(size, int) or size % 2:
            return _fail("head size is not a known even number", x)
        why_not = self.check_rotation(x, size, bound)
        if why_not is not None:
            return _fail(why_not, x)
        for table in (cos, sin):
            table_dims = _dims(table)
            if (
                table_dims is None
                or len(table_dims) != 4
                or table_dims[1] != 1
                or table_dims[2] != dims[2]
                or table_dims[3] != size
                or table_dims[0] not in (1, dims[0])
                or table.dtype != x.dtype
            ):
                return _fail("cos/sin are not (batch or 1, 1, seq, head_size) tables", table)
            if not _pairs_repeat(table, size // 2, self.interleaved):
                return _fail("cos/sin do not repeat each angle the way the rotation pairs", table)
        return pattern.MatchResult()

    def rewrite(self, op, x, cos, sin, **_):
        size = x.shape[3]
        # One angle per rotated pair: the first half of a rotate-half table, every other entry
        # of an interleaved one.
        start, end, step = (0, size, 2) if self.interleaved else (0, size // 2, 1)

        def cache(table):
            angles = op.Slice(
                table,
                op.Constant(value_ints=[start]),
                op.Constant(value_ints=[end]),
                op.Constant(value_ints=[3]),
                op.Constant(value_ints=[step]),
            )
            cache = op.Squeeze(angles, op.Constant(value_ints=[1]))
            batch = x.shape[0]
            if table.shape[0] == batch:
                return cache
            # onnxruntime wants one cache row per batch entry, not a broadcast row.
            if isinstance(batch, int):
                rows = op.Constant(value_ints=[batch, 1, 1])
            else:
                rows = op.Concat(_size_of(op, x, 0), op.Constant(value_ints=[1, 1]), axis=0)
            return op.Expand(cache, rows)

        return op.RotaryEmbedding(x, cache(cos), cache(sin), interleaved=int(self.interleaved))


class _RotateHalf(_Rotary):
    """rotated(x) = cat(-x[..., h:], x[..., :h]): llama and most transformers models."""

    interleaved = False

    def __init__(self):
        super().__init__("RotaryEmbedding-rotate-half")

    def pattern(self, op, x, cos, sin):
        rotated = op.Concat(
            op.Neg(_slice(op, x, "second")), _slice(op, x, "first"), _outputs=["rotated"]
        )
        return op.Add(op.Mul(x, cos), op.Mul(rotated, sin))

    def check_rotation(self, x, size, bound):
        half = size // 2
        first, second = _unit_slices(bound, ("first", "second"))
        for (start, end, axes, steps), want_start, want_end in (
            (first, 0, half),
            (second, half, size),
        ):
            if None in (start, end, axes, steps) or not _is_last_axis(axes, 4) or steps != [1]:
                return "a half is not a unit-step slice of the last axis"
            if start != [want_start] or not (
                end == [want_end] or (want_end == size and _to_end(end, size))
            ):
                return "the slices are not the two halves of the last axis"
        if bound["rotated"].producer().attributes["axis"].as_int() not in (-1, 3):
            return "the halves are not joined on the last axis"
        return None


class _RotateInterleaved(_Rotary):
    """rotated(x) = stack((-x[..., 1::2], x[..., ::2]), -1).flatten(-2): each even/odd pair
    turned on its own (transformers' Cohere and GLM, GPT-J's rotate_every_two)."""

    interleaved = True

    def __init__(self):
        super().__init__("RotaryEmbedding-interleaved")

    def pattern(self, op, x, cos, sin, stack_axis_odd, stack_axis_even, target):
        stacked = op.Concat(
            op.Unsqueeze(op.Neg(_slice(op, x, "odd")), stack_axis_odd),
            op.Unsqueeze(_slice(op, x, "even"), stack_axis_even),
            _outputs=["stacked"],
        )
        rotated = op.Reshape(stacked, target, _outputs=["rotated"])
        return op.Add(op.Mul(x, cos), op.Mul(rotated, sin))

    def check_rotation(self, x, size, bound):
        even, odd = _unit_slices(bound, ("even", "odd"))
        for (start, end, axes, steps), want_start in ((even, 0), (odd, 1)):
            if None in (start, end, axes, steps) or not _is_last_axis(axes, 4) or steps != [2]:
                return "a slice is not every other element of the last axis"
            if start != [want_start] or not _to_end(end, size):
                return "the slices are not the even and odd elements of the last axis"
        for name in ("stack_axis_odd", "stack_axis_even"):
            if _ints(bound[name]) not in ([4], [-1]):
                return "the halves are not stacked on a new last axis"
        if bound["stacked"].producer().attributes["axis"].as_int() not in (-1, 4):
            return "the halves are not joined on the new last axis"
        if _dims(bound["stacked"]) != (*_dims(x)[:3], size // 2, 2):
            return "the stacked pairs do not have x's leading sizes"
        if _dims(bound["rotated"]) != _dims(x):
            return "the pairs are not flattened back to x's shape"
        return None


class _ShapeOfStackedPairs(pattern.RewriteRuleClassBase):
    """Shape(stack((-x[..., 1::2], x[..., ::2]), -1)) over the leading axes is a Shape of x:
    the interleaved rotation is fusable only once nothing else reads its stacked pairs (a
    dynamic flatten reads its target sizes from them)."""

    def __init__(self):
        super().__init__("Shape-of-stacked-pairs", remove_nodes=False)

    def pattern(self, op, x, stack_axis_odd, stack_axis_even):
        stacked = op.Concat(
            op.Unsqueeze(op.Neg(_slice(op, x, "odd")), stack_axis_odd),
            op.Unsqueeze(_slice(op, x, "even"), stack_axis_even),
            _outputs=["stacked"],
        )
        return op.Shape(stacked, _outputs=["sizes"])

    def check(self, context, x, stacked, sizes, **_):
        dims, pairs = _dims(x), _dims(stacked)
        span = None if pairs is None else _shape_span(sizes, len(pairs))
        if dims is None or span is None or span[1] > len(dims) - 1:
            return _fail("not a read of leading sizes of the stacked pairs", sizes)
        if any(pairs[i] != dims[i] for i in range(*span)):
            return _fail("the stacked pairs and x differ in the sizes read", sizes)
        return pattern.MatchResult()

    def rewrite(self, op, x, stacked, sizes, **_):
        start, end = _shape_span(sizes, len(_dims(stacked)))
        return op.Shape(x, start=start, end=end)


# --- grouped-query Attention -----------------------------------------------------------------


def _repeated_heads(expanded: ir.Value, merged: ir.Value, source: ir.Value) -> int | None:
    """The repeat count when Reshape(Expand(Unsqueeze(source, 2))) copies each head of the
    (batch, heads, seq, size) ``source`` consecutively (repeat_interleave on dim 1), else None."""
    src, wide, out = _dims(source), _dims(expanded), _dims(merged)
    if src is None or wide is None or out is None or (len(src), len(wide), len(out)) != (4, 5, 4):
        return None
    groups = wide[2]
    if not isinstance(groups, int) or not isinstance(src[1], int):
        return None
    if (wide[0], wide[1], wide[3], wide[4]) != src:
        return None
    if out != (src[0], src[1] * groups, src[2], src[3]):
        return None
    return groups


def _shape_span(sizes: ir.Value, rank: int) -> tuple[int, int] | None:
    """The [start, end) axes a Shape node reads of a value of ``rank`` (None if it reads none)."""
    attributes = sizes.producer().attributes
    start = attributes["start"].as_int() if "start" in attributes else 0
    end = attributes["end"].as_int() if "end" in attributes else rank
    start, end = (max(0, min(rank, i + rank if i < 0 else i)) for i in (start, end))
    return (start, end) if start < end else None


class _ShapeBeforeRepeat(pattern.RewriteRuleClassBase):
    """Shape(Expand(Unsqueeze(k, 2))) over dims other than the new one is a Shape of k: reading
    sizes from k lets the repeat go once Attention takes k itself (a dynamic reshape target
    reads them from the repeated value)."""

    def __init__(self):
        super().__init__("Shape-before-repeat", remove_nodes=False)

    def pattern(self, op, k, axes, target):
        wide = op.Expand(op.Unsqueeze(k, axes), target, _outputs=["wide"])
        return op.Shape(wide, _outputs=["sizes"])

    def check(self, context, k, axes, wide, sizes, **_):
        span = self._span(wide, sizes)
        if _ints(axes) != [2] or span is None:
            return _fail("not a read of sizes that the repeat leaves alone", sizes)
        src, dims = _dims(k), _dims(wide)
        start, end = span
        if src is None or any(dims[i] != src[i if i < 2 else i - 1] for i in range(start, end)):
            return _fail("the repeat changes the sizes read", sizes)
        return pattern.MatchResult()

    @staticmethod
    def _span(wide, sizes) -> tuple[int, int] | None:
        span = _shape_span(sizes, 5)
        if span is None or span[0] <= 2 < span[1]:
            return None
        return span

    def rewrite(self, op, k, wide, sizes, **_):
        start, end = self._span(wide, sizes)
        shift = 0 if end <= 2 else 1
        return op.Shape(k, start=start - shift, end=end - shift)


class _GroupedQueryAttention(pattern.RewriteRuleClassBase):
    """Attention on key/value heads repeated to the query's head count: Attention takes the
    fewer key/value heads directly."""

    def __init__(self):
        super().__init__("Attention-grouped-query")

    def pattern(self, op, q, k, v, k_axes, v_axes, k_shape, v_shape, k_merged, v_merged):
        k_wide = op.Expand(op.Unsqueeze(k, k_axes), k_shape, _outputs=["k_wide"])
        v_wide = op.Expand(op.Unsqueeze(v, v_axes), v_shape, _outputs=["v_wide"])
        k_all = op.Reshape(k_wide, k_merged, _outputs=["k_all"])
        v_all = op.Reshape(v_wide, v_merged, _outputs=["v_all"])
        return op.Attention(q, k_all, v_all, _allow_other_inputs=True, _outputs=["out"])

    def check(self, context, q, k, v, k_axes, v_axes, k_wide, v_wide, k_all, v_all, out, **_):
        node = out.producer()
        if len(node.inputs) > 4 or len(node.outputs) != 1:
            return _fail("attention with a past cache or extra outputs", out)
        if _ints(k_axes) != [2] or _ints(v_axes) != [2]:
            return _fail("heads are not repeated on a new axis after the head axis", k, v)
        k_groups = _repeated_heads(k_wide, k_all, k)
        v_groups = _repeated_heads(v_wide, v_all, v)
        if k_groups is None or k_groups != v_groups:
            return _fail("key and value heads are not repeated alike", k, v)
        if _dims(k)[1] != _dims(v)[1]:
            return _fail("key and value have different head counts", k, v)
        return pattern.MatchResult()

    def rewrite(self, op, q, k, v, out, **_):
        node = out.producer()
        return op.Attention(q, k, v, *node.inputs[3:], **node.attributes)


# --- Gelu, tanh approximation ----------------------------------------------------------------


class _TanhGelu(pattern.RewriteRuleClassBase):
    """0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3))): GPT-2's gelu_new, written out."""

    _CONSTANTS = {"half": 0.5, "cubic": 0.044715, "sqrt_2_pi": (2.0 / np.pi) ** 0.5, "one": 1.0}

    def __init__(self):
        super().__init__("Gelu-tanh")

    def pattern(self, op, x, half, three, cubic, sqrt_2_pi, one):
        inner = op.Mul(op.Add(x, op.Mul(op.Pow(x, three), cubic)), sqrt_2_pi)
        return op.Mul(op.Mul(x, half), op.Add(op.Tanh(inner), one))

    def check(self, context, x, three, **constants):
        if not _runs("Gelu", x) or _dims(x) is None:
            return _fail("a dtype onnxruntime has no Gelu kernel for", x)
        if _scalar_float(three) != 3.0:
            return _fail("the power is not a cube", three)
        for name, want in self._CONSTANTS.items():
            value = _scalar_float(constants[name])
            if value is None or not np.isclose(value, want, rtol=1e-6, atol=0):
                return _fail(f"{name} is not {want}", constants[name])
        return pattern.MatchResult()

    def rewrite(self, op, x, **_):
        return op.Gelu(x, approximate="tanh")


# --- masks decided at export time --------------------------------------------------------------


def _constant_array(value: ir.Value | None) -> np.ndarray | None:
    tensor = None if value is None else ir.convenience.get_const_tensor(value)
    return None if tensor is None else tensor.numpy()


class _DecidedWhere(pattern.RewriteRuleClassBase):
    """Where on a constant condition that is all true or all false is one of its branches
    (the guard for fully masked attention rows, when the mask is a constant)."""

    def __init__(self):
        super().__init__("Where-decided")

    def pattern(self, op, condition, a, b):
        return op.Where(condition, a, b, _outputs=["out"])

    def check(self, context, condition, a, b, out, **_):
        flags = _constant_array(condition)
        if flags is None or flags.size == 0 or (flags.any() and not flags.all()):
            return _fail("the condition is not a constant of one value", condition)
        chosen = a if flags.all() else b
        if _dims(chosen) is None or _dims(chosen) != _dims(out) or chosen.dtype != out.dtype:
            return _fail("the chosen branch does not have the result's shape", chosen)
        return pattern.MatchResult()

    def rewrite(self, op, condition, a, b, **_):
        return op.Identity(a if _constant_array(condition).all() else b)


class _OpenMaskAttention(pattern.RewriteRuleClassBase):
    """Attention with a constant mask that masks nothing (all true, or all zeros when
    additive) is Attention without a mask."""

    def __init__(self):
        super().__init__("Attention-open-mask")

    def pattern(self, op, q, k, v, mask):
        return op.Attention(q, k, v, mask, _outputs=["out"])

    def check(self, context, mask, out, **_):
        values = _constant_array(mask)
        if len(out.producer().outputs) != 1 or values is None:
            return _fail("not a single-output attention with a constant mask", mask)
        open_value = True if values.dtype == np.bool_ else 0
        if not np.all(values == open_value):
            return _fail("the mask masks something", mask)
        return pattern.MatchResult()

    def rewrite(self, op, q, k, v, out, **_):
        return op.Attention(q, k, v, **out.producer().attributes)


# --- entry point ------------------------------------------------------------------------------

#: Rules for every opset, before the fusions (and QDQ graphs into onnxruntime's fusable form).
_SIMPLIFICATIONS = [_DecidedWhere.rule(), _OpenMaskAttention.rule(), *_quantized_rewrites.rules()]

#: Per fused op, the rule sets that make it, applied one after the other.
_RULES: list[tuple[str, Callable[[], list[list]]]] = [
    ("Gelu", lambda: [[_TanhGelu.rule()]]),
    ("RMSNormalization", lambda: [[_RMSNorm.rule("mul"), _RMSNorm.rule("pow")]]),
    (
        "RotaryEmbedding",
        lambda: [[_ShapeOfStackedPairs.rule()], [_RotateHalf.rule(), _RotateInterleaved.rule()]],
    ),
    # Sizes read off the stacked pairs, or off the repeated key/value, move to the value they
    # came from first: a value still read elsewhere is not removable.
    ("Attention", lambda: [[_ShapeBeforeRepeat.rule()], [_GroupedQueryAttention.rule()]]),
]

#: Per fused op, for the opsets without it: rules into the form onnxruntime's own fusions
#: recognise, so that it runs one kernel all the same.
_ONNXRUNTIME_FORMS: list[tuple[str, Callable[[], list]]] = [
    ("RMSNormalization", lambda: [_RMSNormDivided.rule("mul"), _RMSNormDivided.rule("pow")]),
]


@functools.cache
def _rule_sets() -> tuple:
    """The rule sets of :func:`fuse`, built once (commuting the patterns costs as much as
    applying them to a small model): the simplifications, then per fused op its sets in
    order, then per op the onnxruntime forms."""
    return (
        _passes.rule_set(_SIMPLIFICATIONS),
        [
            (op_type, [_passes.rule_set(rules, commute=True) for rules in rule_sets()])
            for op_type, rule_sets in _RULES
        ],
        [
            (op_type, _passes.rule_set(rules(), commute=True))
            for op_type, rules in _ONNXRUNTIME_FORMS
        ],
    )


def onnx_opset(model: ir.Model) -> int | None:
    return model.opset_imports.get("", model.opset_imports.get("ai.onnx"))


def _apply_where(opset: int, model: ir.Model, op_type: str, rule_sets, *, has: bool) -> int | None:
    """Apply ``rule_sets`` in order where the opset has ``op_type`` (``has``) or lacks it (not
    ``has``); the count of the last set's rewrites, None where they do not apply.

    With a tracked opset (``exporter._translation_reuse``), the choice is noted only where it
    made a difference: where the sets applied and rewrote or removed something, or where they
    did not apply and would have (tried on a copy of the model). Another opset, which would
    choose otherwise, makes the same model as long as the choice made none."""
    tracked = isinstance(opset, _translation_reuse.TrackedOpset)
    applies = _opsets.has(op_type, _translation_reuse.plain(opset)) == has
    could = tracked and any(rule_set.may_change(model) for rule_set in rule_sets)
    if not applies:
        if could and _would_change(model, rule_sets):
            _opsets.has(op_type, opset)  # noted: the choice matters
        return None
    removes = could and _cleanup_removes(model, rule_sets)
    counts = [rule_set.apply_to_model(model) for rule_set in rule_sets]
    if could and (removes or any(counts)):
        _opsets.has(op_type, opset)  # noted: the choice matters
    return counts[-1]


def _cleanup_removes(model: ir.Model, rule_sets) -> bool:
    """Whether a set's own removal of unused nodes would remove anything from ``model``."""
    return any(rs.remove_unused_nodes for rs in rule_sets) and _passes.may_remove_unused(model)


def _would_change(model: ir.Model, rule_sets) -> bool:
    """Whether applying ``rule_sets`` to ``model`` would rewrite or remove anything (tried
    on a copy)."""
    if _cleanup_removes(model, rule_sets):
        return True
    copy = model.clone()
    return any(rule_set.apply_to_model(copy) for rule_set in rule_sets)


def fuse(model: ir.Model) -> dict[str, int]:
    """Rewrite the decomposed forms into the fused ops the model's opset has; returns how many
    of each were made."""
    opset = onnx_opset(model)
    counts: dict[str, int] = {}
    if opset is None:
        return counts
    simplifications, fusions, onnxruntime_forms = _rule_sets()
    counts["simplified"] = simplifications.apply_to_model(model)
    for op_type, rule_sets in fusions:
        made = _apply_where(opset, model, op_type, rule_sets, has=True)
        if made is not None:
            counts[op_type] = made
    for op_type, rule_set in onnxruntime_forms:
        made = _apply_where(opset, model, op_type, [rule_set], has=False)
        if made is not None:
            counts[f"{op_type} for onnxruntime"] = made
    if any(counts.values()):
        # The rewrites compute the rotary caches from constant tables (fold them), once per
        # use, while q and k of every layer share them (CSE). After the removal of unused
        # nodes, lifting the constants, merging equal initializers and CSE leave none:
        # each only moves uses onto a value that stays (the initializer lifted or kept, the
        # first of two equal nodes, whose inputs are the second's), and adds no input or
        # output to a node; a second removal after them (onnxscript's optimizer runs one)
        # would find nothing to remove, no trailing empty input, no unused optional output.
        _passes.fold_constants(model)
        ir.passes.Sequential(
            common.RemoveUnusedNodesPass(),
            common.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0),
            common.DeduplicateInitializersPass(),
            common.CommonSubexpressionEliminationPass(),
            common.NameFixPass(),
        )(model)
    return counts
