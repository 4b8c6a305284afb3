"""Small hand-written models, each aimed at one thing exporters get wrong.

Nested inputs (the seeds' MLP), control flow (`torch.cond`, `while_loop`, `scan`), a custom
op, in-place ops and buffer mutation, recurrent layers with a dynamic time axis, awkward
output trees, bool and int64 inputs, and the composite ops (attention and the norms).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch._higher_order_ops import scan, while_loop

from torch_onnx_conformance.model_zoo._common import generator_for, randint, randn, seed_for
from torch_onnx_conformance.model_zoo.init import reinit_
from torch_onnx_conformance.model_zoo.registry import Inputs, ModelCase, register

FAMILY = "synthetic"


def _case(
    name: str,
    module_class: Callable[[], nn.Module],
    make_inputs: Callable[[Mapping[str, int], torch.Generator], Inputs],
    sizes: Mapping[str, int],
    second_sizes: Mapping[str, int],
    dynamic_shapes: Any,
    tier: str = "default",
    notes: str = "",
    **extra: Any,
) -> ModelCase:
    full_name = f"synthetic/{name}"

    def make_module() -> nn.Module:
        module = module_class()
        reinit_(module, seed_for(full_name))
        return module.eval()

    def inputs(axis_sizes: Mapping[str, int]) -> Inputs:
        return make_inputs(axis_sizes, generator_for(full_name, axis_sizes))

    return register(
        ModelCase(
            name=full_name,
            family=FAMILY,
            tier=tier,
            make_module=make_module,
            make_inputs=inputs,
            sizes=dict(sizes),
            second_sizes=dict(second_sizes),
            dynamic_shapes=dynamic_shapes,
            notes=notes,
            **extra,
        )
    )


# --- the seeds' MLPs -------------------------------------------------------------------------


class SeedMLPDictList(nn.Module):
    """The MLP from the torch.onnx docs that takes a tensor, a dict and a list."""

    def __init__(self) -> None:
        super().__init__()
        self.fc0 = nn.Linear(8, 8, bias=True)
        self.fc1 = nn.Linear(8, 4, bias=True)
        self.fc2 = nn.Linear(4, 2, bias=True)
        self.fc3 = nn.Linear(2, 2, bias=True)
        self.fc_combined = nn.Linear(8 + 8 + 8, 8, bias=True)

    def forward(
        self, tensor_x: torch.Tensor, input_dict: dict[str, torch.Tensor], input_list: list
    ) -> torch.Tensor:
        combined = torch.cat([tensor_x, input_dict["tensor_x"], input_list[0]], dim=1)
        combined = torch.sigmoid(self.fc_combined(combined))
        combined = torch.sigmoid(self.fc0(combined))
        combined = torch.sigmoid(self.fc1(combined))
        combined = torch.sigmoid(self.fc2(combined))
        return self.fc3(combined)


class SeedMLP(nn.Module):
    """The plain MLP from the torch.onnx docs."""

    def __init__(self) -> None:
        super().__init__()
        self.fc0 = nn.Linear(8, 8, bias=True)
        self.fc1 = nn.Linear(8, 4, bias=True)
        self.fc2 = nn.Linear(4, 2, bias=True)
        self.fc3 = nn.Linear(2, 2, bias=True)

    def forward(self, tensor_x: torch.Tensor) -> torch.Tensor:
        tensor_x = torch.sigmoid(self.fc0(tensor_x))
        tensor_x = torch.sigmoid(self.fc1(tensor_x))
        tensor_x = torch.sigmoid(self.fc2(tensor_x))
        return self.fc3(tensor_x)


def _rand(generator: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.rand(shape, generator=generator)


_case(
    "mlp_dict_list",
    SeedMLPDictList,
    lambda s, g: (
        (
            _rand(g, s["batch_size"], 8),
            {"tensor_x": _rand(g, s["batch_size"], 8)},
            [_rand(g, s["batch_size"], 8)],
        ),
        {},
    ),
    sizes={"batch_size": 97},
    second_sizes={"batch_size": 64},
    dynamic_shapes=({0: "batch_size"}, {"tensor_x": {0: "batch_size"}}, [{0: "batch_size"}]),
    tier="smoke",
    notes="The torch.onnx docs' example: positional tensor, dict and list inputs.",
)

_case(
    "mlp",
    SeedMLP,
    lambda s, g: ((_rand(g, s["batch_size"], 8),), {}),
    sizes={"batch_size": 97},
    second_sizes={"batch_size": 64},
    dynamic_shapes=({0: "batch_size"},),
    tier="smoke",
)


# --- control flow ----------------------------------------------------------------------------


class CondModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def positive(x: torch.Tensor) -> torch.Tensor:
            return torch.sin(self.linear(x))

        def negative(x: torch.Tensor) -> torch.Tensor:
            return torch.cos(self.linear(x)) * 2.0

        return torch.cond(x.sum() > 0, positive, negative, (x,))


def _signed_by_parity(generator: torch.Generator, batch: int, width: int) -> torch.Tensor:
    # An even batch takes the positive branch and an odd one the negative branch, so the second
    # inputs (batch + 1) exercise the branch the exporter did not see at capture time.
    sign = 1.0 if batch % 2 == 0 else -1.0
    return sign * (torch.rand((batch, width), generator=generator) + 0.1)


_case(
    "cond",
    CondModel,
    lambda s, g: ((_signed_by_parity(g, s["batch"], 8),), {}),
    sizes={"batch": 4},
    second_sizes={"batch": 5},
    dynamic_shapes=({0: "batch"},),
    notes="torch.cond on a data-dependent predicate; the second inputs take the other branch.",
)


class WhileLoopModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
        def keep_going(i: torch.Tensor, _state: torch.Tensor, limit: torch.Tensor) -> torch.Tensor:
            return i < limit

        def step(
            i: torch.Tensor, state: torch.Tensor, limit: torch.Tensor
        ) -> tuple[torch.Tensor, ...]:
            return i + 1, torch.tanh(self.linear(state)) + state, limit.clone()

        start = torch.zeros((), dtype=torch.int64)
        _, state, _ = while_loop(keep_going, step, (start, x, steps))
        return state


_case(
    "while_loop",
    WhileLoopModel,
    lambda s, g: (
        (randn(g, s["batch"], 8), torch.tensor(2 + s["batch"] % 2, dtype=torch.int64)),
        {},
    ),
    sizes={"batch": 4},
    second_sizes={"batch": 5},
    dynamic_shapes=({0: "batch"}, None),
    notes="while_loop with a trip count read from an int64 input (2 at the example inputs, "
    "3 at the second inputs).",
)


class ScanModel(nn.Module):
    """An Elman-style recurrence written with `scan` over the time axis."""

    def __init__(self) -> None:
        super().__init__()
        self.input_proj = nn.Linear(8, 16)
        self.recurrent = nn.Linear(16, 16, bias=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        projected = self.input_proj(x)
        recurrent_weight = self.recurrent.weight

        def combine(carry: torch.Tensor, x_t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            next_carry = torch.tanh(x_t + carry @ recurrent_weight.t())
            return next_carry, next_carry * 2.0

        init = torch.zeros(x.shape[0], 16, dtype=x.dtype)
        final, outputs = scan(combine, init, projected, dim=1)
        return final, outputs


_case(
    "scan",
    ScanModel,
    lambda s, g: ((randn(g, s["batch"], s["time"], 8),), {}),
    sizes={"batch": 2, "time": 5},
    second_sizes={"batch": 3, "time": 7},
    dynamic_shapes=({0: "batch", 1: "time"},),
    notes="scan over a dynamic time axis (torch._higher_order_ops.scan).",
)


# --- custom op with a custom translation -----------------------------------------------------


@torch.library.custom_op("zoo::scaled_add", mutates_args=())
def scaled_add(x: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
    return x + y * scale


@scaled_add.register_fake
def _scaled_add_fake(x: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.empty_like(x)


def scaled_add_translation_table() -> dict[Any, Callable[..., Any]]:
    """``{op overload: translation}`` for ``zoo::scaled_add``, built with onnxscript opsets."""
    from onnxscript import opset18 as op

    def translate_scaled_add(x: Any, y: Any, scale: float) -> Any:
        scale_like_y = op.CastLike(op.Constant(value_float=scale), y)
        return op.Add(x, op.Mul(y, scale_like_y))

    return {torch.ops.zoo.scaled_add.default: translate_scaled_add}


class CustomOpModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.relu(scaled_add(self.linear(x), y, 0.5))


_case(
    "custom_op",
    CustomOpModel,
    lambda s, g: ((randn(g, s["batch"], 8), randn(g, s["batch"], 8)), {}),
    sizes={"batch": 3},
    second_sizes={"batch": 5},
    dynamic_shapes=({0: "batch"}, {0: "batch"}),
    notes="Calls the custom op zoo::scaled_add; needs custom_translation_table_factory().",
    custom_translation_table_factory=scaled_add_translation_table,
)


# --- in-place ops and buffer mutation --------------------------------------------------------


class InPlaceOps(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.linear(x)
        hidden.add_(1.0)
        hidden.mul_(0.5)
        hidden[:, 0] = 0.0
        hidden[:, 1:3] += x[:, :2]
        hidden.clamp_(min=-1.0)
        return hidden.relu_()


_case(
    "inplace_ops",
    InPlaceOps,
    lambda s, g: ((randn(g, s["batch"], 8),), {}),
    sizes={"batch": 4},
    second_sizes={"batch": 6},
    dynamic_shapes=({0: "batch"},),
    notes="add_, mul_, clamp_, relu_ and slice assignment on intermediates (inputs untouched).",
)


class RunningMeanBuffer(nn.Module):
    """BatchNorm-like running statistic, updated in forward with ``copy_``.

    The update mixes the current batch into a fixed prior rather than into its own last value,
    so repeated calls on the same inputs give the same outputs (eager stays comparable) while
    the buffer is still mutated by every forward.
    """

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)
        self.register_buffer("prior_mean", torch.linspace(-0.5, 0.5, 8))
        self.register_buffer("running_mean", torch.zeros(8))
        self.register_buffer("calls", torch.zeros((), dtype=torch.int64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.linear(x)
        self.running_mean.copy_(0.9 * self.prior_mean + 0.1 * hidden.mean(dim=0))
        self.calls.add_(1)
        return hidden - self.running_mean


_case(
    "mutated_buffer",
    RunningMeanBuffer,
    lambda s, g: ((randn(g, s["batch"], 8),), {}),
    sizes={"batch": 4},
    second_sizes={"batch": 6},
    dynamic_shapes=({0: "batch"},),
    notes="Forward mutates two buffers (copy_ of a running mean, add_ on a call counter); the "
    "output depends on the mutated running mean.",
)


# --- recurrent layers with a dynamic time axis -----------------------------------------------


class BidirectionalLSTM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(8, 16, num_layers=2, bidirectional=True, batch_first=True)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        output, (hidden, cell) = self.rnn(x)
        return output, hidden, cell


class BidirectionalGRU(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.GRU(8, 16, num_layers=2, bidirectional=True, batch_first=True)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        output, hidden = self.rnn(x)
        return output, hidden


_RNN_NOTES = (
    "Bidirectional, 2 layers, batch_first, dynamic batch and time; an exporter that bakes the "
    "time length into the graph fails at the second inputs."
)
_case(
    "lstm_bidirectional",
    BidirectionalLSTM,
    lambda s, g: ((randn(g, s["batch"], s["time"], 8),), {}),
    sizes={"batch": 2, "time": 7},
    second_sizes={"batch": 3, "time": 11},
    dynamic_shapes=({0: "batch", 1: "time"},),
    tier="smoke",
    notes=_RNN_NOTES,
)
_case(
    "gru_bidirectional",
    BidirectionalGRU,
    lambda s, g: ((randn(g, s["batch"], s["time"], 8),), {}),
    sizes={"batch": 2, "time": 7},
    second_sizes={"batch": 3, "time": 11},
    dynamic_shapes=({0: "batch", 1: "time"},),
    notes=_RNN_NOTES,
)


# --- output trees ----------------------------------------------------------------------------


class TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(8, 16)
        self.head_a = nn.Linear(16, 4)
        self.head_b = nn.Linear(16, 3)

    def heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        features = torch.relu(self.body(x))
        return features, self.head_a(features), self.head_b(features)


class DictOutput(TwoHeads):
    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        features, logits, scores = self.heads(x)
        return {"logits": logits, "scores": scores.softmax(-1), "features": features}


class NestedTupleOutput(TwoHeads):
    def forward(self, x: torch.Tensor) -> tuple[Any, ...]:
        features, logits, scores = self.heads(x)
        return logits, (scores, (features, features.sum(-1)))


class NoneInOutput(TwoHeads):
    def forward(self, x: torch.Tensor) -> tuple[Any, ...]:
        features, logits, scores = self.heads(x)
        return logits, None, (scores, None), features


for _name, _module_class, _notes in (
    ("dict_output", DictOutput, "Returns a dict of three tensors."),
    ("nested_tuple_output", NestedTupleOutput, "Returns (t, (t, (t, t)))."),
    ("none_in_output", NoneInOutput, "Returns (t, None, (t, None), t)."),
):
    _case(
        _name,
        _module_class,
        lambda s, g: ((randn(g, s["batch"], 8),), {}),
        sizes={"batch": 3},
        second_sizes={"batch": 5},
        dynamic_shapes=({0: "batch"},),
        notes=_notes,
    )


# --- bool and int64 inputs -------------------------------------------------------------------


class BoolMaskInput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.linear(x).masked_fill(~keep.unsqueeze(-1), -1.0)
        kept = keep.sum(dim=1, keepdim=True).clamp_min(1).to(x.dtype)
        pooled = torch.where(keep.unsqueeze(-1), hidden, torch.zeros_like(hidden)).sum(1) / kept
        return hidden, pooled


class Int64IndexInput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(50, 8)
        self.linear = nn.Linear(8, 8)

    def forward(
        self, values: torch.Tensor, positions: torch.Tensor, token_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        gathered = torch.gather(values, 1, positions.unsqueeze(-1).expand(-1, -1, values.size(-1)))
        embedded = self.embedding(token_ids)
        return self.linear(gathered + embedded), torch.index_select(values, 1, positions[0])


_case(
    "bool_mask_input",
    BoolMaskInput,
    lambda s, g: (
        (
            randn(g, s["batch"], s["sequence"], 8),
            torch.rand((s["batch"], s["sequence"]), generator=g) > 0.3,
        ),
        {},
    ),
    sizes={"batch": 2, "sequence": 6},
    second_sizes={"batch": 3, "sequence": 9},
    dynamic_shapes=({0: "batch", 1: "sequence"}, {0: "batch", 1: "sequence"}),
    notes="A bool mask input used by masked_fill, where and a sum.",
)

_case(
    "int64_index_input",
    Int64IndexInput,
    lambda s, g: (
        (
            randn(g, s["batch"], 10, 8),
            randint(g, 10, s["batch"], s["picks"]),
            randint(g, 50, s["batch"], s["picks"]),
        ),
        {},
    ),
    sizes={"batch": 2, "picks": 4},
    second_sizes={"batch": 3, "picks": 6},
    dynamic_shapes=(
        {0: "batch"},
        {0: "batch", 1: "picks"},
        {0: "batch", 1: "picks"},
    ),
    notes="int64 index inputs for gather, index_select and an embedding lookup.",
)


# --- composite ops: attention and norms ------------------------------------------------------


class MaskedAttention(nn.Module):
    def __init__(self, causal: bool) -> None:
        super().__init__()
        self.causal = causal
        self.qkv = nn.Linear(16, 48)
        self.out = nn.Linear(16, 16)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, sequence, _ = x.shape
        return x.view(batch, sequence, 2, 8).transpose(1, 2)

    def forward(self, x: torch.Tensor, key_padding: torch.Tensor | None = None) -> torch.Tensor:
        query, key, value = (self.split_heads(t) for t in self.qkv(x).chunk(3, dim=-1))
        if self.causal:
            attended = F.scaled_dot_product_attention(query, key, value, is_causal=True)
        else:
            attn_mask = key_padding[:, None, None, :]
            attended = F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask)
        batch, _, sequence, _ = attended.shape
        return self.out(attended.transpose(1, 2).reshape(batch, sequence, 16))


def _key_padding(generator: torch.Generator, batch: int, sequence: int) -> torch.Tensor:
    keep = torch.rand((batch, sequence), generator=generator) > 0.3
    keep[:, 0] = True  # a fully masked row would make softmax NaN in every runtime
    return keep


_case(
    "attention_masked",
    lambda: MaskedAttention(causal=False),
    lambda s, g: (
        (randn(g, s["batch"], s["sequence"], 16), _key_padding(g, s["batch"], s["sequence"])),
        {},
    ),
    sizes={"batch": 2, "sequence": 5},
    second_sizes={"batch": 3, "sequence": 8},
    dynamic_shapes=({0: "batch", 1: "sequence"}, {0: "batch", 1: "sequence"}),
    notes="scaled_dot_product_attention with a bool key-padding mask, 2 heads.",
)
_case(
    "attention_causal",
    lambda: MaskedAttention(causal=True),
    lambda s, g: ((randn(g, s["batch"], s["sequence"], 16),), {}),
    sizes={"batch": 2, "sequence": 5},
    second_sizes={"batch": 3, "sequence": 8},
    dynamic_shapes=({0: "batch", 1: "sequence"},),
    notes="scaled_dot_product_attention with is_causal=True, 2 heads.",
)


class SequenceNorm(nn.Module):
    """Linear, then the norm over the feature axis of a (batch, sequence, features) tensor."""

    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 16)
        self.norm = norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.linear(x))


class ImageNorm(nn.Module):
    """Conv, then the norm over a (batch, channels, height, width) tensor."""

    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.conv(x))


def _sequence_inputs(s: Mapping[str, int], g: torch.Generator) -> Inputs:
    return (randn(g, s["batch"], s["sequence"], 8),), {}


def _image_inputs(s: Mapping[str, int], g: torch.Generator) -> Inputs:
    return (randn(g, s["batch"], 3, s["height"], s["width"]),), {}


for _name, _factory, _notes in (
    ("layer_norm", lambda: SequenceNorm(nn.LayerNorm(16)), "nn.LayerNorm after a Linear."),
    ("rms_norm", lambda: SequenceNorm(nn.RMSNorm(16)), "nn.RMSNorm after a Linear."),
):
    _case(
        _name,
        _factory,
        _sequence_inputs,
        sizes={"batch": 2, "sequence": 5},
        second_sizes={"batch": 3, "sequence": 7},
        dynamic_shapes=({0: "batch", 1: "sequence"},),
        notes=_notes,
    )

for _name, _factory, _notes in (
    ("group_norm", lambda: ImageNorm(nn.GroupNorm(4, 8)), "nn.GroupNorm(4 groups)."),
    ("batch_norm", lambda: ImageNorm(nn.BatchNorm2d(8)), "nn.BatchNorm2d in eval mode."),
    (
        "instance_norm",
        lambda: ImageNorm(nn.InstanceNorm2d(8, affine=True)),
        "nn.InstanceNorm2d, affine, no running stats.",
    ),
):
    _case(
        _name,
        _factory,
        _image_inputs,
        sizes={"batch": 2, "height": 6, "width": 5},
        second_sizes={"batch": 3, "height": 9, "width": 7},
        dynamic_shapes=({0: "batch", 2: "height", 3: "width"},),
        notes=_notes,
    )
