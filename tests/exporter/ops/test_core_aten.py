"""Every core ATen overload (torch.Tag.core) has a translation in our registry."""

from __future__ import annotations

import torch

from torch_onnx_conformance.exporter import DEFAULT_REGISTRY
from torch_onnx_conformance.exporter._decompose import decomposition_table
from torch_onnx_conformance.exporter._translate import lookup


def core_overloads() -> list[torch._ops.OpOverload]:
    # dir(torch.ops.aten) lists only the packets loaded so far; ask the dispatcher for all.
    names = sorted(
        {
            n.split("::", 1)[1].split(".")[0]
            for n in torch._C._dispatch_get_all_op_names()
            if n.startswith("aten::")
        }
    )
    found = []
    for name in names:
        packet = getattr(torch.ops.aten, name, None)
        if not isinstance(packet, torch._ops.OpOverloadPacket):
            continue
        for overload in packet.overloads():
            op = getattr(packet, overload)
            if torch.Tag.core in op.tags:
                found.append(op)
    return found


def test_walk_core_aten_overloads():
    core = core_overloads()
    assert len(core) >= 180, f"torch lists only {len(core)} core overloads"
    missing = sorted(str(op) for op in core if lookup(DEFAULT_REGISTRY, op) is None)
    assert not missing, f"{len(missing)} core ATen overloads have no translation: {missing}"


def test_translated_ops_are_never_decomposed():
    table = decomposition_table(DEFAULT_REGISTRY)
    kept = [op for op in table if op in DEFAULT_REGISTRY]
    assert not kept, f"ops with a translation are still in the decomposition table: {kept}"


def test_prims_introduced_by_decompositions_are_translated():
    # erfinv and cumprod decompose into prims.erf_inv and prims.prod in torch's tables; those
    # are exactly the ops torch.onnx cannot translate.
    for op in (torch.ops.prims.erf_inv.default, torch.ops.prims.prod.default):
        assert lookup(DEFAULT_REGISTRY, op) is not None, str(op)
