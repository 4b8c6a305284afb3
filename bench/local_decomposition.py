"""One op without a translation in a big graph: decomposing that op alone against re-tracing
the whole program (issue 28, item 1).

    python bench/local_decomposition.py [--model swin_t] [--drop aten.roll.default] [--repeat 3]

Captures a torchvision model (``weights=None``) once, then takes the translation of one op it
holds away (``--drop``, an op ``torch.export.default_decompositions`` can lower) and times, in
turn in this one process, what the exporter does for it (``decompose_locally``: that op's nodes
traced alone and spliced in) against ``run_decompositions`` over the whole program, the step
the exporter took before. Prints each try's wall seconds, the medians and their ratio, how many
nodes each result holds, and the load average at the start and the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings


def _captured(name: str):
    import torch
    import torchvision

    from torch_onnx_conformance.exporter import _capture

    model = getattr(torchvision.models, name)(weights=None).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program, _ = _capture.capture(model, (torch.randn(1, 3, 224, 224),), {}, None)
    return program


def _op(qualified: str):
    import torch

    namespace, packet, overload = qualified.split(".")
    return getattr(getattr(getattr(torch.ops, namespace), packet), overload)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="swin_t")
    parser.add_argument("--drop", default="aten.roll.default")
    parser.add_argument("--repeat", type=int, default=3)
    options = parser.parse_args()
    print(f"load average at start: {os.getloadavg()}")

    from torch_onnx_conformance.exporter import _decompose, _validate

    program = _captured(options.model)
    dropped = _op(options.drop)
    registry = _validate.registry_with(None).copy()
    registry._table.pop(dropped)
    table = _decompose.decomposition_table(registry)
    if dropped not in table:
        parser.error(f"{options.drop} has no decomposition in torch.export's table")
    held = sum(node.target is dropped for node in program.graph.nodes)
    total = len(program.graph.nodes)
    print(f"{options.model}: {total} nodes, {held} of them {options.drop} (translation dropped)")

    local, whole = [], []
    for attempt in range(options.repeat):
        start = time.perf_counter()
        locally = _decompose.decompose_locally(program, registry)
        local.append(time.perf_counter() - start)
        start = time.perf_counter()
        retraced = _decompose._run_decompositions(program, table)
        whole.append(time.perf_counter() - start)
        print(f"try {attempt + 1}: local {local[-1]:.3f} s, whole program {whole[-1]:.3f} s")
    assert locally is not None, "the local decomposition gave up"
    assert not any(node.target is dropped for node in locally.graph.nodes)
    print(
        f"nodes after: local {len(locally.graph.nodes)}, whole program {len(retraced.graph.nodes)}"
    )
    median_local, median_whole = statistics.median(local), statistics.median(whole)
    print(
        f"median: local {median_local:.3f} s, whole program {median_whole:.3f} s, "
        f"local / whole = {median_local / median_whole:.3f}"
    )
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
