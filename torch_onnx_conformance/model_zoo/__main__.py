"""Command line: list the zoo, or check that its cases build, run and capture.

    python -m torch_onnx_conformance.model_zoo list [--tier full] [--family synthetic]
    python -m torch_onnx_conformance.model_zoo check [--tier default] [--name 'torchvision/*'] [--capture]

``check`` builds each case, runs it eagerly at its inputs and second inputs, reports whether
the output is vacuous and, with ``--capture``, whether ``torch.export.export(strict=False)``
captures it with every named axis as ``Dim.DYNAMIC`` and whether the captured program matches
eager at the second inputs. One line per case; a failing case never stops the loop.
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
import time
import traceback
from typing import Any

import torch
import torch.utils._pytree as pytree

from torch_onnx_conformance.model_zoo import registry, vacuity


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m torch_onnx_conformance.model_zoo", description=__doc__.split("\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("list", "check"):
        command = commands.add_parser(name)
        command.add_argument("--tier", default="full" if name == "list" else "default")
        command.add_argument("--family", choices=registry.FAMILIES)
        command.add_argument("--name", default="*", help="glob over case names")
        if name == "check":
            command.add_argument("--capture", action="store_true", help="also torch.export")
    options = parser.parse_args(argv)
    selected = [
        case
        for case in registry.cases(options.tier, options.family)
        if fnmatch.fnmatchcase(case.name, options.name)
    ]
    if options.command == "list":
        for case in selected:
            axes = ",".join(sorted(case.axis_names))
            print(f"{case.name:50s} {case.family:28s} {case.tier:8s} {axes}")
        return 0
    failures = sum(not _check(case, options.capture) for case in selected)
    print(f"{len(selected) - failures}/{len(selected)} cases ok")
    return 1 if failures else 0


def _check(case: registry.ModelCase, capture: bool) -> bool:
    start = time.perf_counter()
    try:
        module, args, kwargs = case.build()
        second_args, second_kwargs = case.second_inputs(args, kwargs)
        with torch.no_grad():
            outputs = module(*args, **kwargs)
            second_outputs = module(*second_args, **second_kwargs)
    except Exception as error:  # noqa: BLE001 - one broken case must not stop the sweep
        print(f"{case.name:50s} BUILD-ERROR {_one_line(error)}")
        traceback.print_exc(limit=-3, file=sys.stderr)
        return False
    vacuous = vacuity.is_vacuous(outputs) or vacuity.is_vacuous(second_outputs)
    line = f"{case.name:50s} eager {time.perf_counter() - start:6.1f}s vacuous={vacuous}"
    ok = not vacuous
    if capture:
        start = time.perf_counter()
        try:
            program = torch.export.export(
                module, args, kwargs, dynamic_shapes=case.export_dynamic_shapes(), strict=False
            )
            line += f" capture ok {time.perf_counter() - start:5.1f}s"
            with torch.no_grad():
                replayed = program.module()(*second_args, **second_kwargs)
            line += f" second-inputs {_difference(second_outputs, replayed)}"
        except Exception as error:  # noqa: BLE001
            line += f" capture FAILED {type(error).__name__}: {_one_line(error)}"
            ok = False
    print(line, flush=True)
    return ok


def _difference(expected: Any, actual: Any) -> str:
    expected_leaves = pytree.tree_leaves(expected)
    actual_leaves = pytree.tree_leaves(actual)
    if len(expected_leaves) != len(actual_leaves):
        return f"mismatch: {len(expected_leaves)} vs {len(actual_leaves)} outputs"
    worst = 0.0
    for want, got in zip(expected_leaves, actual_leaves):
        if not isinstance(want, torch.Tensor):
            continue
        if want.shape != got.shape:
            return f"mismatch: shape {tuple(want.shape)} vs {tuple(got.shape)}"
        if want.numel():
            error = float((want.double() - got.double()).abs().max())
            worst = max(worst, error / max(vacuity.output_scale(want), 1e-12))
    return f"max error/scale {worst:.1e}"


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return (text[0] if text else type(error).__name__)[:240]


if __name__ == "__main__":
    sys.exit(main())
