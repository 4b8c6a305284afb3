"""nn.LSTM / nn.GRU / nn.RNN export as ONNX LSTM / GRU / RNN nodes, with dynamic batch and time."""

from __future__ import annotations

import collections

import pytest
import torch
from torch.export import Dim

from tests.op_check import check_op, run_onnx
from torch_onnx_conformance import exporter

INPUT, HIDDEN = 4, 5
DYNAMIC_INPUT = {0: Dim.DYNAMIC, 1: Dim.DYNAMIC}


def _op_counts(program) -> collections.Counter:
    return collections.Counter(node.op_type for node in program.model.graph)


def _sequences(batch_first, batch, time, seed=0):
    g = torch.Generator().manual_seed(seed)
    shape = (batch, time, INPUT) if batch_first else (time, batch, INPUT)
    return torch.randn(shape, generator=g)


def _states(layers, directions, batch, width, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(layers * directions, batch, width, generator=g)


class LstmWithStates(torch.nn.Module):
    def __init__(self, rnn):
        super().__init__()
        self.rnn = rnn

    def forward(self, x, h0, c0):
        return self.rnn(x, (h0, c0))


class WithState(torch.nn.Module):
    def __init__(self, rnn):
        super().__init__()
        self.rnn = rnn

    def forward(self, x, h0):
        return self.rnn(x, h0)


def _case(kind, layers, bidirectional, batch_first, with_states, dynamic, **extra):
    torch.manual_seed(0)
    rnn = getattr(torch.nn, kind)(
        INPUT,
        HIDDEN,
        num_layers=layers,
        bidirectional=bidirectional,
        batch_first=batch_first,
        **extra,
    )
    directions = 2 if bidirectional else 1
    out_width = extra.get("proj_size") or HIDDEN

    def inputs(batch, time, seed):
        x = _sequences(batch_first, batch, time, seed)
        if not with_states:
            return (x,)
        states = [_states(layers, directions, batch, out_width, seed + 1)]
        if kind == "LSTM":
            states.append(_states(layers, directions, batch, HIDDEN, seed + 2))
        return (x, *states)

    wrapper = LstmWithStates if kind == "LSTM" else WithState
    module = wrapper(rnn) if with_states else rnn
    args = inputs(3, 7, 0)
    if not dynamic:
        return module, args, None, None
    batch_axis = 0 if batch_first else 1
    x_dims = {batch_axis: Dim("batch"), 1 - batch_axis: Dim("time")}
    state_dims = {1: Dim("batch")}
    dynamic_shapes = (x_dims, *[state_dims] * (len(args) - 1))
    return module, args, dynamic_shapes, inputs(2, 5, 10)


GRID = [
    pytest.param(
        kind,
        layers,
        bidir,
        bf,
        states,
        dynamic,
        id=f"{kind}-L{layers}-"
        f"{'bi' if bidir else 'uni'}-{'bf' if bf else 'tf'}-"
        f"{'h0' if states else 'noh0'}-{'dyn' if dynamic else 'static'}",
    )
    for kind in ("LSTM", "GRU")
    for layers, bidir, bf, states, dynamic in [
        (1, False, False, False, False),
        (1, False, True, True, True),
        (2, True, False, True, False),
        (2, True, True, False, True),
        (2, True, False, True, True),
        (1, True, True, True, False),
    ]
]


@pytest.mark.parametrize("kind,layers,bidirectional,batch_first,with_states,dynamic", GRID)
def test_recurrent_layer(kind, layers, bidirectional, batch_first, with_states, dynamic):
    module, args, dynamic_shapes, second = _case(
        kind, layers, bidirectional, batch_first, with_states, dynamic
    )
    program = check_op(module, args, dynamic_shapes=dynamic_shapes, second_args=second)
    counts = _op_counts(program)
    assert counts[kind] == layers, counts
    assert sum(counts.values()) < 40 * layers, counts  # whole layers, not unrolled steps


def test_static_lstm_is_small_after_optimization():
    torch.manual_seed(0)
    rnn = torch.nn.LSTM(INPUT, HIDDEN, num_layers=2, bidirectional=True).eval()
    program = exporter.export(rnn, (_sequences(False, 3, 7),))
    counts = _op_counts(program)
    assert counts["LSTM"] == 2 and sum(counts.values()) <= 20, counts


@pytest.mark.parametrize("nonlinearity", ["tanh", "relu"])
def test_rnn_dynamic(nonlinearity):
    torch.manual_seed(0)
    rnn = torch.nn.RNN(INPUT, HIDDEN, num_layers=2, nonlinearity=nonlinearity, bidirectional=True)
    program = check_op(
        rnn,
        (_sequences(False, 3, 7),),
        dynamic_shapes=(DYNAMIC_INPUT,),
        second_args=(_sequences(False, 2, 4, seed=3),),
    )
    assert _op_counts(program)["RNN"] == 2


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_without_biases(kind):
    torch.manual_seed(0)
    rnn = getattr(torch.nn, kind)(INPUT, HIDDEN, bias=False, batch_first=True)
    program = check_op(rnn, (_sequences(True, 3, 7),))
    assert _op_counts(program)[kind] == 1


@pytest.mark.parametrize("opset", [17, 23])
def test_opsets(opset):
    module, args, dynamic_shapes, second = _case("LSTM", 2, True, True, True, True)
    check_op(module, args, opset=opset, dynamic_shapes=dynamic_shapes, second_args=second)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_dtypes(dtype):
    torch.manual_seed(0)
    rnn = torch.nn.GRU(INPUT, HIDDEN, num_layers=2).to(dtype)
    x = _sequences(False, 3, 7).to(dtype)
    tolerance = 1e-5 if dtype == torch.float64 else 2e-3  # float64 runs in float32
    check_op(rnn, (x,), rtol=tolerance, atol=tolerance)


def test_unbatched_input():
    torch.manual_seed(0)
    rnn = torch.nn.LSTM(INPUT, HIDDEN, bidirectional=True)
    check_op(
        rnn,
        (torch.randn(7, INPUT),),
        dynamic_shapes=({0: Dim.DYNAMIC},),
        second_args=(torch.randn(4, INPUT),),
    )


@pytest.mark.parametrize("bidirectional", [False, True])
def test_lstm_projection_runs_as_scan(bidirectional):
    module, args, dynamic_shapes, second = _case(
        "LSTM", 2, bidirectional, True, True, True, proj_size=3
    )
    program = check_op(module, args, dynamic_shapes=dynamic_shapes, second_args=second)
    assert _op_counts(program)["Scan"] == 2 * (2 if bidirectional else 1)


def test_training_dropout_between_layers():
    # p = 1 is deterministic: the second layer sees zeros, in torch and in the ONNX graph.
    torch.manual_seed(0)
    rnn = torch.nn.GRU(INPUT, HIDDEN, num_layers=2, dropout=1.0)
    program = exporter.export(rnn.train(), (_sequences(False, 3, 7),))
    expected = rnn(_sequences(False, 3, 7))
    got = run_onnx(program, (_sequences(False, 3, 7),))
    for g, e in zip(got, expected):
        torch.testing.assert_close(torch.from_numpy(g), e, rtol=1e-5, atol=1e-5)


def test_decomposition_keeps_time_dynamic():
    """A program that needs run_decompositions (an observable in-place op) keeps both the GRU
    whole and its time axis symbolic, so a reshape by the time size is right at a new length."""

    class Flatten(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = torch.nn.GRU(INPUT, HIDDEN, batch_first=True)

        def forward(self, x):
            out, h = self.rnn(x)
            flat = out.reshape(out.shape[0], out.shape[1] * out.shape[2])
            view = flat.view(-1)
            flat.add_(1)
            return view, h

    torch.manual_seed(0)
    program = check_op(
        Flatten(),
        (_sequences(True, 3, 7),),
        dynamic_shapes=(DYNAMIC_INPUT,),
        second_args=(_sequences(True, 2, 5, seed=4),),
    )
    assert _op_counts(program)["GRU"] == 1


def test_torch_kernels_untouched_outside_export():
    """Outside our export torch's own decomposition still computes values, not just shapes."""
    torch.manual_seed(0)
    rnn = torch.nn.LSTM(INPUT, HIDDEN)
    x = _sequences(False, 3, 7)
    decomposition = torch._decomp.decomposition_table[torch.ops.aten.lstm.input]
    params = [p.detach() for p in rnn._flat_weights]
    zeros = torch.zeros(1, 3, HIDDEN)
    out, h, c = decomposition(x, [zeros, zeros], params, True, 1, 0.0, False, False, False)
    expected, (h_ref, c_ref) = rnn(x)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(h, h_ref, rtol=1e-5, atol=1e-5)
