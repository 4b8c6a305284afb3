"""Recurrent layers kept whole: aten.lstm / gru / rnn_tanh / rnn_relu (.input overloads) as
ONNX LSTM / GRU / RNN nodes, one node per layer (both directions in one node).

Why the shape kernels below exist: torch's Python decomposition of these ops (a Python loop
over time steps) is also their Meta kernel and the rule fake tensors use for their shapes.
torch.export keeps the op whole in the graph but still runs that loop on fake tensors, and
iterating a tensor guards its length, so the time axis became static (capture fails with a
dynamic time dim; run_decompositions silently bakes the example length). While our exporter
runs (``exporter.is_in_onnx_export()``), a call that only computes metadata (fake tensors, no
tracer recording the decomposition) gets the output shapes directly instead. Every other call,
in every other program (eager, torch.compile, torch.onnx), still runs torch's own kernel.

Layout notes. torch stacks gates as LSTM (i, f, g, o) and GRU (r, z, n); ONNX wants LSTM
(i, o, f, c) and GRU (z, r, h), so weight rows are gathered into ONNX order (constant-folded
for parameters). torch's GRU applies the reset gate after the recurrent matmul, which is
ONNX's ``linear_before_reset=1``. The nodes run time-major (layout 0): batch_first inputs and
outputs are transposed around them, and the states keep torch's (layers * dirs, batch, hidden)
layout, which is ONNX's per layer. onnxruntime's kernels are float32-only, so other float
dtypes compute in float32. Training-mode dropout between layers is applied as torch does.

LSTM projections (proj_size > 0) have no ONNX form: those layers run as a Scan over time
steps with the cell written out (one Scan per layer and direction).
"""

from __future__ import annotations

import torch

from torch_onnx_conformance.exporter import _flags
from torch_onnx_conformance.exporter.ops import _subgraph
from torch_onnx_conformance.exporter.ops import nn as nn_ops
from torch_onnx_conformance.exporter.ops._nn_helpers import compute_dtype
from torch_onnx_conformance.exporter.ops._registry import translates

aten = torch.ops.aten
i64 = torch.int64

#: onnxruntime's CPU LSTM/GRU/RNN kernels compute in float32 only ("does not support double
#: yet"): float64 and float16/bfloat16 layers compute in float32 and cast back.
_RNN_DTYPES = frozenset({torch.float32})


# ------------------------------------------------------------------ metadata-only kernels
def _output_like(input, state, bidirectional, batch_first):
    directions = 2 if bidirectional else 1
    time, batch = (input.shape[1], input.shape[0]) if batch_first else input.shape[:2]
    out = input.new_empty((time, batch, directions * state.shape[2]))
    # torch computes time-major and hands batch_first results back as a transposed view.
    return out.transpose(0, 1) if batch_first else out


def _lstm_shapes(input, hx, params, has_biases, num_layers, dropout, train, bidir, batch_first):
    h0, c0 = hx
    return (
        _output_like(input, h0, bidir, batch_first),
        h0.new_empty(h0.shape),
        c0.new_empty(c0.shape),
    )


def _rnn_shapes(input, hx, params, has_biases, num_layers, dropout, train, bidir, batch_first):
    return _output_like(input, hx, bidir, batch_first), hx.new_empty(hx.shape)


def _metadata_only(args) -> bool:
    """True for a call whose result is only metadata: fake tensors, nobody tracing its body."""
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.fx.experimental.proxy_tensor import get_proxy_mode
    from torch.utils import _pytree as pytree

    if not _flags.is_in_onnx_export() or get_proxy_mode() is not None:
        return False
    tensors = [a for a in pytree.tree_leaves(args) if isinstance(a, torch.Tensor)]
    return bool(tensors) and all(isinstance(t, FakeTensor) for t in tensors)


def _shape_first(original, shapes):
    def kernel(*args, **kwargs):
        if not kwargs and len(args) == 9 and _metadata_only(args):
            return shapes(*args)
        return original(*args, **kwargs)

    kernel._exporter_shape_first = True  # marks our wrapper, so a module reload skips it
    kernel.__wrapped__ = original
    return kernel


def _install_shape_kernels() -> None:
    """Wrap torch's Python kernels of the recurrent ops: the Meta kernel (capture runs it) and
    the decomposition-table entry (fake tensors use it for shapes while run_decompositions
    re-traces a graph that keeps the op whole); the Autograd and CompositeImplicitAutograd
    kernels too, since torch.export turns the latter into a fake rule for ops it preserves."""
    from torch._decomp import decomposition_table

    for op, shapes in (
        (aten.lstm.input, _lstm_shapes),
        (aten.gru.input, _rnn_shapes),
        (aten.rnn_tanh.input, _rnn_shapes),
        (aten.rnn_relu.input, _rnn_shapes),
    ):
        for key, kernel in list(op.py_kernels.items()):
            if callable(kernel) and not getattr(kernel, "_exporter_shape_first", False):
                op.py_kernels[key] = _shape_first(kernel, shapes)
        op._dispatch_cache.clear()
        decomposition = decomposition_table.get(op)
        if decomposition is not None and not getattr(decomposition, "_exporter_shape_first", False):
            decomposition_table[op] = _shape_first(decomposition, shapes)


_install_shape_kernels()


# ------------------------------------------------------------------------------ helpers
class _Layer:
    """Weights of one layer and direction, in torch's order."""

    def __init__(self, params, has_biases, has_projection):
        params = list(params)
        self.w_ih, self.w_hh = params[0], params[1]
        rest = params[2:]
        self.b_ih, self.b_hh = (rest[0], rest[1]) if has_biases else (None, None)
        rest = rest[2:] if has_biases else rest
        self.w_hr = rest[0] if has_projection else None


def _split_params(params, has_biases, has_projection, num_layers, directions):
    per = 2 + (2 if has_biases else 0) + (1 if has_projection else 0)
    if len(params) != per * num_layers * directions:
        raise ValueError(
            f"recurrent op: expected {per * num_layers * directions} weight tensors for "
            f"{num_layers} layer(s) x {directions} direction(s) (has_biases={has_biases}), got "
            f"{len(params)}; pass the module's own _flat_weights"
        )
    return [
        [
            _Layer(
                params[(layer * directions + d) * per : (layer * directions + d + 1) * per],
                has_biases,
                has_projection,
            )
            for d in range(directions)
        ]
        for layer in range(num_layers)
    ]


def _static_dim(ctx, value, axis, what):
    shape = ctx.shape(value)
    size = None if shape is None else shape[axis]
    if not isinstance(size, int):
        raise ValueError(
            f"recurrent op: the {what} size must be static (it comes from the weights), got "
            f"{size!r}"
        )
    return size


def _gate_rows(ctx, w, order, hidden, work):
    """Rows of a stacked-gate weight (gates x hidden, ...) reordered to ONNX's gate order."""
    rows = [g * hidden + j for g in order for j in range(hidden)]
    return ctx.op.Gather(ctx.cast(w, work), ctx.const(rows, i64), axis=0)


def _stack_directions(ctx, values):
    """(rows, cols) per direction -> (directions, rows, cols)."""
    parts = [ctx.op.Unsqueeze(v, ctx.const([0], i64)) for v in values]
    return parts[0] if len(parts) == 1 else ctx.op.Concat(*parts, axis=0)


def _onnx_weights(ctx, layer_dirs, order, hidden, work):
    w = _stack_directions(ctx, [_gate_rows(ctx, d.w_ih, order, hidden, work) for d in layer_dirs])
    r = _stack_directions(ctx, [_gate_rows(ctx, d.w_hh, order, hidden, work) for d in layer_dirs])
    if layer_dirs[0].b_ih is None:
        return w, r, None
    biases = [
        ctx.op.Concat(
            _gate_rows(ctx, d.b_ih, order, hidden, work),
            _gate_rows(ctx, d.b_hh, order, hidden, work),
            axis=0,
        )
        for d in layer_dirs
    ]
    b = ctx.op.Concat(*[ctx.op.Unsqueeze(x, ctx.const([0], i64)) for x in biases], axis=0)
    return w, r, b


def _layer_states(ctx, state, layer, directions, work):
    """torch's (layers * dirs, batch, hidden) state -> this layer's (dirs, batch, hidden)."""
    start = layer * directions
    return ctx.op.Slice(
        ctx.cast(state, work),
        ctx.const([start], i64),
        ctx.const([start + directions], i64),
        ctx.const([0], i64),
    )


def _merge_directions(ctx, y, width):
    """ONNX Y (time, dirs, batch, hidden) -> torch's time-major (time, batch, dirs * hidden)."""
    return ctx.op.Reshape(ctx.op.Transpose(y, perm=[0, 2, 1, 3]), ctx.const([0, 0, width], i64))


def _check_supported(name, dropout, num_layers):
    if not isinstance(num_layers, int) or num_layers < 1:
        raise ValueError(f"{name}: num_layers must be a positive int, got {num_layers!r}")
    if not isinstance(dropout, (int, float)) or not 0 <= dropout <= 1:
        raise ValueError(f"{name}: dropout must be a number in [0, 1], got {dropout!r}")


def _between_layers(ctx, x, dropout, train, layer, num_layers):
    """torch applies dropout to every layer's output but the last, in training mode only."""
    if train and dropout > 0 and layer < num_layers - 1:
        return nn_ops.dropout(ctx, x, float(dropout), True)
    return x


def _run_layers(ctx, input, batch_first, num_layers, dropout, train, layer_fn, out_width):
    """Stack layers: time-major in, torch's layout out; returns (output, per-layer states)."""
    work = compute_dtype(ctx.dtype(input), _RNN_DTYPES)
    x = ctx.cast(input, work)
    if batch_first:
        x = ctx.op.Transpose(x, perm=[1, 0, 2])
    states = []
    for layer in range(num_layers):
        y, layer_states = layer_fn(layer, x, work)
        x = _between_layers(
            ctx, _merge_directions(ctx, y, out_width), dropout, train, layer, num_layers
        )
        states.append(layer_states)
    if batch_first:
        x = ctx.op.Transpose(x, perm=[1, 0, 2])
    return ctx.cast(x, ctx.dtype(input)), states


def _concat_states(ctx, states, dtype):
    return ctx.cast(states[0] if len(states) == 1 else ctx.op.Concat(*states, axis=0), dtype)


# --------------------------------------------------------------------------------- LSTM
_LSTM_ORDER = [0, 3, 1, 2]  # torch (i, f, g, o) -> ONNX (i, o, f, c)


@translates(aten.lstm.input)
def lstm(
    ctx, input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first
):
    _check_supported("lstm", dropout, num_layers)
    h0, c0 = hx
    directions = 2 if bidirectional else 1
    hidden = _static_dim(ctx, c0, 2, "LSTM hidden")
    out_size = _static_dim(ctx, h0, 2, "LSTM output (proj_size or hidden)")
    has_projection = out_size != hidden
    layers = _split_params(params, has_biases, has_projection, num_layers, directions)

    def one_layer(layer, x, work):
        init_h = _layer_states(ctx, h0, layer, directions, work)
        init_c = _layer_states(ctx, c0, layer, directions, work)
        if has_projection:
            return _projected_lstm_layer(ctx, x, layers[layer], init_h, init_c, work)
        w, r, b = _onnx_weights(ctx, layers[layer], _LSTM_ORDER, hidden, work)
        y, y_h, y_c = ctx.op.LSTM(
            x,
            w,
            r,
            b,
            None,
            init_h,
            init_c,
            hidden_size=hidden,
            direction="bidirectional" if bidirectional else "forward",
            _outputs=3,
        )
        return y, (y_h, y_c)

    output, states = _run_layers(
        ctx, input, batch_first, num_layers, dropout, train, one_layer, directions * out_size
    )
    dtype = ctx.dtype(input)
    h_n = _concat_states(ctx, [s[0] for s in states], dtype)
    c_n = _concat_states(ctx, [s[1] for s in states], dtype)
    return output, h_n, c_n


def _projected_lstm_layer(ctx, x, layer_dirs, init_h, init_c, work):
    """One layer of an LSTM with projections: a Scan per direction over the time steps."""
    ys, hs, cs = [], [], []
    for d, weights in enumerate(layer_dirs):
        h = ctx.op.Squeeze(
            ctx.op.Slice(init_h, ctx.const([d], i64), ctx.const([d + 1], i64), ctx.const([0], i64)),
            ctx.const([0], i64),
        )
        c = ctx.op.Squeeze(
            ctx.op.Slice(init_c, ctx.const([d], i64), ctx.const([d + 1], i64), ctx.const([0], i64)),
            ctx.const([0], i64),
        )
        y, h_last, c_last = _projected_lstm_scan(ctx, x, weights, h, c, work, reverse=d == 1)
        ys.append(ctx.op.Unsqueeze(y, ctx.const([1], i64)))
        hs.append(ctx.op.Unsqueeze(h_last, ctx.const([0], i64)))
        cs.append(ctx.op.Unsqueeze(c_last, ctx.const([0], i64)))
    y = ys[0] if len(ys) == 1 else ctx.op.Concat(*ys, axis=1)
    h = hs[0] if len(hs) == 1 else ctx.op.Concat(*hs, axis=0)
    c = cs[0] if len(cs) == 1 else ctx.op.Concat(*cs, axis=0)
    return y, (h, c)


def _reverse_time(ctx, x):
    return ctx.op.Slice(
        x,
        ctx.const([-1], i64),
        ctx.const([-(2**63)], i64),
        ctx.const([0], i64),
        ctx.const([-1], i64),
    )


def _projected_lstm_scan(ctx, x, weights, h, c, work, reverse):
    """Scan over time of torch's projected LSTM cell; x is (time, batch, input)."""
    hidden = _static_dim(ctx, weights.w_hh, 0, "LSTM gates") // 4
    w_hh_t = ctx.op.Transpose(ctx.cast(weights.w_hh, work), perm=[1, 0])
    w_hr_t = ctx.op.Transpose(ctx.cast(weights.w_hr, work), perm=[1, 0])
    # The input half of every step's gates at once, outside the loop.
    gates_x = ctx.op.MatMul(x, ctx.op.Transpose(ctx.cast(weights.w_ih, work), perm=[1, 0]))
    if weights.b_ih is not None:
        bias = ctx.op.Add(ctx.cast(weights.b_ih, work), ctx.cast(weights.b_hh, work))
        gates_x = ctx.op.Add(gates_x, bias)
    if reverse:
        gates_x = _reverse_time(ctx, gates_x)
    split = ctx.const([hidden] * 4, i64)

    def step(b, states, slices):
        h_prev, c_prev = states
        gates = b.op.Add(slices[0], b.op.MatMul(h_prev, w_hh_t))
        in_gate, forget_gate, cell_gate, out_gate = b.op.Split(gates, split, axis=1, _outputs=4)
        c_next = b.op.Add(
            b.op.Mul(b.op.Sigmoid(forget_gate), c_prev),
            b.op.Mul(b.op.Sigmoid(in_gate), b.op.Tanh(cell_gate)),
        )
        h_next = b.op.MatMul(b.op.Mul(b.op.Sigmoid(out_gate), b.op.Tanh(c_next)), w_hr_t)
        return [h_next, c_next], [h_next]

    h_last, c_last, y = _subgraph.scan_along(
        ctx, [gates_x], 0, [h, c], step, [work, work], [work], "lstm_projection_step"
    )
    if reverse:
        y = _reverse_time(ctx, y)
    return y, h_last, c_last


# ---------------------------------------------------------------------------- GRU / RNN
_GRU_ORDER = [1, 0, 2]  # torch (r, z, n) -> ONNX (z, r, h)

#: aten op name -> (ONNX op, gate order, ONNX attributes for one direction)
_SIMPLE = {
    "gru": ("GRU", _GRU_ORDER, {"linear_before_reset": 1}),
    "rnn_tanh": ("RNN", [0], {"activations": ["Tanh"]}),
    "rnn_relu": ("RNN", [0], {"activations": ["Relu"]}),
}


def _simple_rnn(
    name,
    ctx,
    input,
    hx,
    params,
    has_biases,
    num_layers,
    dropout,
    train,
    bidirectional,
    batch_first,
):
    onnx_op, order, attrs = _SIMPLE[name]
    _check_supported(name, dropout, num_layers)
    directions = 2 if bidirectional else 1
    hidden = _static_dim(ctx, hx, 2, f"{name} hidden")
    layers = _split_params(params, has_biases, False, num_layers, directions)
    attrs = {k: v * directions if k == "activations" else v for k, v in attrs.items()}

    def one_layer(layer, x, work):
        w, r, b = _onnx_weights(ctx, layers[layer], order, hidden, work)
        init_h = _layer_states(ctx, hx, layer, directions, work)
        direction = "bidirectional" if bidirectional else "forward"
        return getattr(ctx.op, onnx_op)(
            x,
            w,
            r,
            b,
            None,
            init_h,
            hidden_size=hidden,
            direction=direction,
            _outputs=2,
            **attrs,
        )

    output, states = _run_layers(
        ctx, input, batch_first, num_layers, dropout, train, one_layer, directions * hidden
    )
    return output, _concat_states(ctx, states, ctx.dtype(input))


@translates(aten.gru.input)
def gru(ctx, *args, **kwargs):
    return _simple_rnn("gru", ctx, *args, **kwargs)


@translates(aten.rnn_tanh.input)
def rnn_tanh(ctx, *args, **kwargs):
    return _simple_rnn("rnn_tanh", ctx, *args, **kwargs)


@translates(aten.rnn_relu.input)
def rnn_relu(ctx, *args, **kwargs):
    return _simple_rnn("rnn_relu", ctx, *args, **kwargs)
