"""Capture: nn.Module -> torch.export.ExportedProgram, trying strategies in order."""

from __future__ import annotations

import contextlib
import dataclasses
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import torch

from exporter._errors import CaptureError
from exporter._flags import onnx_export_flag


@dataclasses.dataclass
class Attempt:
    strategy: str
    seconds: float
    error: BaseException | None = None
    traceback: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@contextlib.contextmanager
def _size_oblivious() -> Iterator[None]:
    # Keeps torch.export from specialising dynamic dims whose example size is 0 or 1.
    try:
        from torch.fx.experimental import _config as fx_config
    except ImportError:  # pragma: no cover - older torch
        yield
        return
    with fx_config.patch(backed_size_oblivious=True):
        yield


def _export(strict: bool) -> Callable[..., torch.export.ExportedProgram]:
    def run(model, args, kwargs, dynamic_shapes):
        with _size_oblivious():
            # A guard on a dynamic dim becomes a runtime assertion instead of a specialised
            # size, so a meta function's check does not freeze a dim the graph handles.
            return torch.export.export(
                model,
                args,
                kwargs=kwargs,
                dynamic_shapes=dynamic_shapes,
                strict=strict,
                prefer_deferred_runtime_asserts_over_guards=True,
            )

    return run


STRATEGIES: dict[str, Callable[..., torch.export.ExportedProgram]] = {
    "torch.export(strict=False)": _export(strict=False),
    "torch.export(strict=True)": _export(strict=True),
}


def capture(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    dynamic_shapes: Any,
    *,
    strategies: list[str] | None = None,
    attempts: list[Attempt] | None = None,
    patches: list[str] | tuple[str, ...] = (),
) -> tuple[torch.export.ExportedProgram, str]:
    """Run strategies until one captures. ``attempts`` collects every try for the report.

    ``patches`` names opt-in model-side rewrites (``exporter._capture_patches``) that stay
    active while each strategy runs.
    """
    from exporter._capture_patches import CAPTURE_PATCHES
    from exporter._capture_rewrites import data_dependent_rewrites
    from exporter.ops._fake_kernels import installed as fake_kernels_installed

    attempts = [] if attempts is None else attempts
    suffix = f" with patches {list(patches)}" if patches else ""
    for name in strategies or list(STRATEGIES):
        start = time.perf_counter()
        try:
            with (
                onnx_export_flag(),
                fake_kernels_installed(),
                data_dependent_rewrites(),
                contextlib.ExitStack() as stack,
            ):
                for patch in patches:
                    stack.enter_context(CAPTURE_PATCHES[patch]())
                program = STRATEGIES[name](model, args, kwargs, dynamic_shapes)
        except Exception as exc:  # every strategy failure is recorded, none is lost
            attempts.append(
                Attempt(name + suffix, time.perf_counter() - start, exc, traceback.format_exc())
            )
            continue
        attempts.append(Attempt(name + suffix, time.perf_counter() - start))
        return program, name + suffix
    lines = [f"Capture failed: every strategy was tried ({len(attempts)})."]
    for a in attempts:
        first = str(a.error).strip().splitlines()
        lines.append(f"  - {a.strategy}: {type(a.error).__name__}: {first[0] if first else ''}")
    lines.append(
        "Fix the first error, or pass export(..., report=True) for the full tracebacks of each "
        "strategy."
    )
    raise CaptureError("\n".join(lines), [(a.strategy, a.error) for a in attempts]) from (
        attempts[0].error if attempts else None
    )
