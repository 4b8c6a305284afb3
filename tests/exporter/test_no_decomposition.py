"""No zoo model needs a decomposition: every op its captured program holds has a translation.

Capture only (no translation): each case is captured as the exporter captures it (its dynamic
axes, its capture patches, its custom translations) and the exporter's own judgement
(``_decompose.decomposition_reasons``) lists what would make ``run_decompositions`` run.
The smoke tier runs always; ``ZOO_TIER=default`` or ``ZOO_TIER=full`` (129 more models,
many minutes) runs those tiers too.
The transformers-auto generic types and the quantized cases are out of scope (``_in_scope``).

    python tests/exporter/test_no_decomposition.py [--tier full] [names...]

prints the list per case.
"""

from __future__ import annotations

import os
import sys
import warnings

import pytest
import torch

from tests.op_check import run_onnx
from torch_onnx_conformance import exporter, model_zoo

#: The tier whose cases run (a capture each: seconds on a quiet machine); the others are skipped.
TIER = os.environ.get("ZOO_TIER", "smoke")
_FAMILIES = ("torchvision-", "transformers-", "synthetic")


def _in_scope(case: model_zoo.ModelCase) -> bool:
    """The zoo's families but two: ``transformers-auto`` (305 generic model types, each a
    capture of many seconds: hours per run) and ``quantized`` (its library ops, torchao's
    among them, belong to the quantization tables)."""
    return case.family.startswith(_FAMILIES) and case.family != "transformers-auto"


def decomposition_reasons(case: model_zoo.ModelCase) -> list[str]:
    """What would make the exporter decompose the case's captured program (empty: nothing)."""
    from torch_onnx_conformance.exporter import (
        _capture,
        _capture_patches,
        _decompose,
        _dynamic_shapes,
        _validate,
    )

    module, args, kwargs = case.build()
    factory = case.custom_translation_table_factory
    registry = _validate.registry_with(factory() if factory else None)
    converted, _ = _dynamic_shapes.normalize(module, args, kwargs, case.export_dynamic_shapes())
    patches, _ = _capture_patches.resolve(None, module)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program, _ = _capture.capture(module, args, kwargs, converted, patches=patches)
    _decompose.functionalize_observed_writes(program)  # as decompose() does first
    return list(_decompose.decomposition_reasons(program, registry))


def _params():
    ran = model_zoo.TIERS.index(TIER)
    for case in model_zoo.cases("full"):
        if not _in_scope(case):
            continue
        marks = [] if case.tier == "smoke" else [pytest.mark.slow]
        if model_zoo.TIERS.index(case.tier) > ran:
            marks.append(pytest.mark.skip(reason=f"{case.tier} tier: set ZOO_TIER={case.tier}"))
        yield pytest.param(case.name, marks=marks, id=case.name)


class _SwinMask(torch.nn.Module):
    """torchvision's shifted-window mask: fills of slices of a fresh tensor, then reads it."""

    def forward(self, x):
        mask = x.new_zeros((x.shape[0], 6))
        count = 0
        for rows in ((0, -2), (-2, -1), (-1, None)):
            for cols in ((0, -3), (-3, None)):
                mask[rows[0] : rows[1], cols[0] : cols[1]] = count
                count += 1
        mask[1].add_(10.0)  # a select, written with another in-place op
        return x + mask


class _CacheUpdate(torch.nn.Module):
    """Reads a state, then overwrites it in place and reads it again (mamba's cache update)."""

    def forward(self, state, x):
        state = state.clone()
        total = torch.cat([state, x], -1).sum(-1, keepdim=True)
        state.copy_(x * 2)
        return state + total


class _ReturnsWritten(torch.nn.Module):
    """The written tensor is also returned: the output names its new value."""

    def forward(self, x):
        y = x * 1
        y[1:].zero_()
        return y, y.sum()


class _EarlierAlias(torch.nn.Module):
    """An alias taken before the write and read after it sees the write: not rewritten."""

    def forward(self, x):
        y = x * 1
        first = y[0]
        y[0:2].fill_(3.0)
        return first + y


class _WritesInput(torch.nn.Module):
    """A write into an input: returned as the input's mutation, the output reads the write."""

    def forward(self, x):
        x.add_(1.0)
        return x * 2


class _WritesBuffers(torch.nn.Module):
    """Writes into buffers, one of them twice and through a slice, read after each write."""

    def __init__(self):
        super().__init__()
        self.register_buffer("total", torch.zeros(3))
        self.register_buffer("calls", torch.zeros((), dtype=torch.int64))

    def forward(self, x):
        self.total.copy_(x.sum(0))
        first = self.total * 2
        self.total[1:].mul_(3.0)
        self.calls.add_(1)
        return first + self.total + self.calls


@pytest.mark.parametrize(
    ("model", "args", "rewritten"),
    [
        pytest.param(_SwinMask(), (torch.randn(5, 6),), True, id="fills-of-slices"),
        pytest.param(_CacheUpdate(), (torch.randn(2, 3), torch.randn(2, 3)), True, id="copy"),
        pytest.param(_ReturnsWritten(), (torch.randn(4, 3),), True, id="returned"),
        pytest.param(_EarlierAlias(), (torch.randn(4, 3),), False, id="earlier-alias"),
        pytest.param(_WritesInput(), (torch.randn(2, 3),), True, id="writes-input"),
        pytest.param(_WritesBuffers(), (torch.randn(2, 3),), True, id="writes-buffers"),
    ],
)
def test_observed_writes_are_rewritten_locally_where_sound(model, args, rewritten):
    program = exporter.export(model.eval(), tuple(a.clone() for a in args))
    assert (program.record.decomposition_reason is None) is rewritten
    expected = model(*[a.clone() for a in args])
    got = [torch.from_numpy(value) for value in run_onnx(program, args)]
    torch.testing.assert_close(got, list(torch.utils._pytree.tree_leaves(expected)))


@pytest.mark.parametrize("name", list(_params()))
def test_zoo_model_needs_no_decomposition(name):
    assert decomposition_reasons(model_zoo.get(name)) == []


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tier", default="default", choices=model_zoo.TIERS)
    parser.add_argument("names", nargs="*")
    options = parser.parse_args()
    selected = [
        case
        for case in model_zoo.cases(options.tier)
        if _in_scope(case) and (not options.names or case.name in options.names)
    ]
    for case in selected:
        try:
            reasons = decomposition_reasons(case)
        except Exception as exc:  # one case failing to capture must not end the listing
            reasons = [f"capture failed: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"]
        print(f"{case.name}: {'; '.join(reasons) or 'none'}", flush=True)
    sys.exit(0)
