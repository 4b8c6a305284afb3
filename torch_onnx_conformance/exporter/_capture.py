"""Capture: nn.Module -> torch.export.ExportedProgram, trying strategies in order."""

from __future__ import annotations

import contextlib
import dataclasses
import re
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch

from torch_onnx_conformance.exporter._errors import CaptureError
from torch_onnx_conformance.exporter._flags import onnx_export_flag


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


def _lazy_graph_modules(strict: bool) -> contextlib.AbstractContextManager:
    """torch's lazy GraphModule code generation while capturing non-strict (what torch.compile
    uses; strict capture, through dynamo, reads attributes a lazy module does not have yet):
    each of torch.export's passes after tracing (higher-order-op replacement, runtime
    assertions, placeholder naming) recompiles the graph module it changed, generating and
    compiling its Python ``forward``, which nothing runs: the graph is what is translated. A
    lazy graph module generates its code when first called or read instead. The captured
    program is the same; over the zoo the capture took 7-12% less time. Where this torch
    lacks the switch, capture runs as before."""
    if strict:
        return contextlib.nullcontext()
    try:
        from torch.fx._lazy_graph_module import _use_lazy_graph_module
    except ImportError:
        return contextlib.nullcontext()
    return _use_lazy_graph_module(True)


def _export(strict: bool) -> Callable[..., torch.export.ExportedProgram]:
    def run(model, args, kwargs, dynamic_shapes):
        with _size_oblivious(), _lazy_graph_modules(strict):
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


#: How many times capture applies torch.export's suggested fixes and tries again.
MAX_REFINEMENTS = 3

_FIX_LINE = re.compile(r"^\s+(\S+) = (.+)$")


def _suggested_fixes(exc: BaseException) -> list[str]:
    """The ``name = expr`` lines under "Suggested fixes:" of a constraint violation."""
    if "Constraints violated" not in str(exc):
        return []
    _, _, tail = str(exc).partition("Suggested fixes:")
    fixes = []
    for line in tail.splitlines()[1:]:
        if not _FIX_LINE.match(line):
            break
        fixes.append(line.strip())
    return fixes


def _describe_dim(dim: Any) -> str:
    # torch's own spelling: Dim('n', min=4) shows the range a fix narrowed, a derived dim its
    # expression, a hint DimHint(DYNAMIC).
    return "static" if dim is None else repr(dim)


def _changed_dims(before: Any, after: Any, path: str = "") -> list[str]:
    """``dynamic_shapes[..] axis: old -> new`` for each axis spec a refinement changed."""
    if isinstance(before, dict) and isinstance(after, dict):
        return [
            change
            for key in dict.fromkeys([*before, *after])
            for change in _changed_dims(before.get(key), after.get(key), f"{path}[{key!r}]")
        ]
    if isinstance(before, (list, tuple)) and isinstance(after, (list, tuple)):
        return [
            change
            for i, (b, a) in enumerate(zip(before, after))
            for change in _changed_dims(b, a, f"{path}[{i}]")
        ]
    old, new = _describe_dim(before), _describe_dim(after)
    return [] if old == new else [f"dynamic_shapes{path}: {old} -> {new}"]


def refine_from_suggested_fixes(exc: BaseException, dynamic_shapes: Any) -> tuple[Any, list[str]]:
    """torch.export's suggested fixes applied to ``dynamic_shapes``, and the dims they changed.

    Returns ``(None, [])`` when the error carries no fix that applies, as torch.onnx does before
    it retries."""
    fixes = _suggested_fixes(exc)
    if not fixes or dynamic_shapes is None:
        return None, []
    from torch.export.dynamic_shapes import refine_dynamic_shapes_from_suggested_fixes

    try:
        refined = refine_dynamic_shapes_from_suggested_fixes(
            "Suggested fixes:\n" + "\n".join(fixes), dynamic_shapes
        )
    except Exception:  # noqa: BLE001 - a fix torch cannot apply leaves the error as it was
        return None, []
    changes = _changed_dims(dynamic_shapes, refined)
    return (refined, changes) if changes else (None, [])


_DATA_DEPENDENT = re.compile(r"data-dependent expression (.*?) \(unhinted")
_RANGE_CONFLICT = "conflicts between user-specified ranges and inferred ranges"
_MAX_EXPRESSION_CHARS = 160
_MAX_ATTEMPT_CHARS = 240


def _user_frame(exc: BaseException) -> str | None:
    """The innermost frame of the user's code (model libraries included) in ``exc``'s trace."""
    from torch_onnx_conformance.exporter._errors import _LIBRARY_PARTS

    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if not f.filename.startswith("<")  # code torch generated, not the user's file
        and not any(part in f.filename for part in _LIBRARY_PARTS)
    ]
    if not frames:
        return None
    frame = frames[-1]
    return f"{frame.filename}:{frame.lineno} in {frame.name}: {(frame.line or '').strip()}"


def _failed_condition(exc: BaseException) -> Any:
    """The sympy condition of the data-dependent guard behind ``exc`` (None when there is
    none): torch raises GuardOnDataDependentSymNode, which export may wrap."""
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, GuardOnDataDependentSymNode):
            return exc.cond
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


_RELATIONS = {
    "Eq": "==",
    "Ne": "!=",
    "StrictLessThan": "<",
    "LessThan": "<=",
    "StrictGreaterThan": ">",
    "GreaterThan": ">=",
}


def _abbreviated(expr: Any, budget: int) -> str:
    """``expr`` printed in at most about ``budget`` characters: the outer structure is kept and
    long argument lists show their first terms and how many more there are."""
    text = str(expr)
    args = getattr(expr, "args", ())
    if len(text) <= budget or not args:
        return text if len(text) <= budget else f"{text[: max(budget - 1, 8)]}\u2026"
    name = type(expr).__name__
    if name in _RELATIONS and len(args) == 2:
        half = max(budget // 2 - 3, 12)
        return f"{_abbreviated(args[0], half)} {_RELATIONS[name]} {_abbreviated(args[1], half)}"
    shown = args[:2] if len(args) > 3 else args
    part = max((budget - len(name) - 24) // len(shown), 12)
    inner = [_abbreviated(a, part) for a in shown]
    if len(shown) < len(args):
        inner.append(f"\u2026 {len(args) - len(shown)} more terms")
    if name == "Add":
        return " + ".join(inner)
    return f"{name}({', '.join(inner)})"


def _short_expression(expr: str, condition: Any = None) -> str:
    """The failed guard's expression, short: abbreviated when long, with the symbols it
    reads named (``u``: values read from tensor data, ``s``: input sizes)."""
    if len(expr) <= _MAX_EXPRESSION_CHARS:
        return expr
    if condition is None:
        return f"{expr[: _MAX_EXPRESSION_CHARS - 1]}\u2026 ({len(expr)} characters)"
    symbols = sorted(str(s) for s in condition.free_symbols)
    data = [s for s in symbols if s.startswith("u")]
    sizes = [s for s in symbols if s.startswith("s")]
    read = []
    if data:
        read.append(f"{', '.join(data)} read from tensor data")
    if sizes:
        read.append(f"input sizes {', '.join(sizes)}")
    return (
        f"{_abbreviated(condition, _MAX_EXPRESSION_CHARS)} ({len(expr)} characters in full; "
        f"{'; '.join(read) or 'no symbols'})"
    )


def _relaxed(shapes: Any) -> Any:
    """``shapes`` with every Dim.DYNAMIC hint made Dim.AUTO, which lets a guard fix the dim."""
    if isinstance(shapes, dict):
        return {k: _relaxed(v) for k, v in shapes.items()}
    if isinstance(shapes, (list, tuple)):
        return type(shapes)(_relaxed(v) for v in shapes)
    return torch.export.Dim.AUTO if shapes is torch.export.Dim.DYNAMIC else shapes


def _guards_that_fixed_dims(model, args, kwargs, shapes, patches) -> list[str]:
    """Trace again with the dims free to specialise and name the guards that fixed them."""
    from torch_onnx_conformance.exporter._dynamic_shapes import HELD, audit_dims, user_input_nodes

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = _run(
                "torch.export(strict=False)",
                model,
                args,
                kwargs,
                _relaxed(shapes),
                patches,
                rewrites=True,
            )
    except Exception:  # noqa: BLE001 - the explanation is best-effort; the error stands
        return []
    every_dim = {
        (i, axis)
        for i, node in enumerate(user_input_nodes(program))
        if isinstance(node.meta.get("val"), torch.Tensor)
        for axis in range(node.meta["val"].dim())
    }
    return [str(a) for a in audit_dims(program, every_dim) if a.status == HELD]


def diagnose(
    exc: BaseException | None,
    model: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    shapes: Any,
    patches: list[str] | tuple[str, ...],
) -> list[str]:
    """Lines that explain a capture failure: the failing guard in short form, the user's line
    that raised it, and the remedies that exist for it."""
    from torch_onnx_conformance.exporter._capture_patches import patches_for

    if exc is None:
        return []
    text, where = str(exc), _user_frame(exc)
    lines: list[str] = []
    missing = [p for p in patches_for(model) if p not in patches]
    data_dependent = _DATA_DEPENDENT.search(text)
    if data_dependent:
        lines.append(
            "The guard that failed reads tensor data: "
            + _short_expression(data_dependent[1], _failed_condition(exc))
        )
        if where:
            lines.append(f"  at {where}")
        lines.append("What can fix it:")
        if missing:
            lines.append(
                f"  - export(..., capture_patches={missing}): rewrites of "
                f"{type(model).__name__}'s library code that torch.export can capture;"
            )
        lines += [
            "  - torch._check(...) on that line's condition, before it, to tell torch.export "
            "what holds (torch._check_is_size for a size), or torch.cond for a real branch;",
            "  - if the expression involves an input size, a Dim range in dynamic_shapes "
            '(Dim("n", min=..., max=...)) that decides it.',
        ]
    elif _RANGE_CONFLICT in text:
        lines.append("The model fixes dims declared dynamic:")
        lines += [f"  {line}" for line in text.splitlines()[1:] if line.startswith("- ")]
        guards = _guards_that_fixed_dims(model, args, kwargs, shapes, patches)
        lines += [f"  - {guard}" for guard in guards]
        lines.append(
            "What can fix it: change the guarded line so it does not compare the dim with a "
            "number, give the dim as None (static) or Dim.AUTO (static if the model needs it), "
            "or a Dim range the guard allows."
        )
    elif missing:
        lines.append(
            f"{type(model).__name__} is a model export(..., capture_patches={missing}) is made "
            "for; try it."
        )
    return lines


STRATEGIES: dict[str, Callable[..., torch.export.ExportedProgram]] = {
    "torch.export(strict=False)": _export(strict=False),
    "torch.export(strict=True)": _export(strict=True),
}


#: The strategies that first capture without the data-dependent rewrites and keep that
#: program unless a rewritten function was called (strict capture, tried after non-strict
#: failed, always runs with them).
_REWRITES_AFTER = frozenset({"torch.export(strict=False)"})


def _run(name, model, args, kwargs, shapes, patches, *, rewrites: bool):
    """One capture with strategy ``name``, the capture patches and our fake kernels in place,
    and the data-dependent rewrites when ``rewrites``."""
    from torch_onnx_conformance.exporter._capture_patches import CAPTURE_PATCHES
    from torch_onnx_conformance.exporter._capture_rewrites import data_dependent_rewrites
    from torch_onnx_conformance.exporter.ops._fake_kernels import (
        installed as fake_kernels_installed,
    )

    with (
        onnx_export_flag(),
        fake_kernels_installed(),
        data_dependent_rewrites() if rewrites else contextlib.nullcontext(),
        contextlib.ExitStack() as stack,
    ):
        for patch in patches:
            stack.enter_context(CAPTURE_PATCHES[patch]())
        return STRATEGIES[name](model, args, kwargs, shapes)


def _without_rewrites(name, model, args, kwargs, shapes, patches):
    """The program captured without the data-dependent rewrites when it is the one they make
    (no node of it came from a function they rewrite); None when it is not, or when that
    capture fails: the capture with them then decides, its error the one recorded."""
    from torch_onnx_conformance.exporter._capture_rewrites import calls_rewritten

    try:
        program = _run(name, model, args, kwargs, shapes, patches, rewrites=False)
    except Exception:  # noqa: BLE001 - the capture with the rewrites runs next and reports
        return None
    return None if calls_rewritten(program) else program


def capture(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    dynamic_shapes: Any,
    *,
    strategies: list[str] | None = None,
    attempts: list[Attempt] | None = None,
    patches: list[str] | tuple[str, ...] = (),
    notes: list[str] | None = None,
) -> tuple[torch.export.ExportedProgram, str]:
    """Run strategies until one captures. ``attempts`` collects every try for the report.

    ``patches`` names opt-in model-side rewrites (``exporter._capture_patches``) that stay
    active while each strategy runs. When torch.export rejects ``dynamic_shapes`` with suggested
    fixes, they are applied and the strategy runs again; the changed dims are warned about and
    appended to ``notes``.
    """
    attempts = [] if attempts is None else attempts
    suffix = f" with patches {list(patches)}" if patches else ""
    shapes, refinements = dynamic_shapes, 0
    # Capture without the data-dependent rewrites first (exporter._capture_rewrites), once.
    without_rewrites = True
    for name in strategies or list(STRATEGIES):
        while True:
            start = time.perf_counter()
            label = name + suffix + (" with refined dynamic_shapes" if refinements else "")
            try:
                program = None
                if without_rewrites and name in _REWRITES_AFTER:
                    without_rewrites = False
                    program = _without_rewrites(name, model, args, kwargs, shapes, patches)
                if program is None:
                    program = _run(name, model, args, kwargs, shapes, patches, rewrites=True)
            except Exception as exc:  # every strategy failure is recorded, none is lost
                attempts.append(
                    Attempt(label, time.perf_counter() - start, exc, traceback.format_exc())
                )
                refined, changes = (
                    refine_from_suggested_fixes(exc, shapes)
                    if refinements < MAX_REFINEMENTS
                    else (None, [])
                )
                if refined is None:
                    break
                shapes, refinements = refined, refinements + 1
                message = (
                    "torch.export rejected dynamic_shapes and suggested fixes, which were "
                    f"applied: {'; '.join(changes)}. Pass the refined dims yourself to silence "
                    "this warning."
                )
                if notes is not None:
                    notes.append(message)
                warnings.warn(message, UserWarning, stacklevel=5)  # export()'s caller
                continue
            attempts.append(Attempt(label, time.perf_counter() - start))
            return program, label
    lines = [f"Capture failed: every strategy was tried ({len(attempts)})."]
    for a in attempts:
        first = str(a.error).strip().splitlines()
        summary = first[0] if first else ""
        if len(summary) > _MAX_ATTEMPT_CHARS:  # a guard's expression can run to pages
            summary = f"{summary[:_MAX_ATTEMPT_CHARS]}\u2026 ({len(summary)} characters)"
        lines.append(f"  - {a.strategy}: {type(a.error).__name__}: {summary}")
    if attempts:
        lines += diagnose(attempts[0].error, model, args, kwargs, shapes, patches)
    lines.append(
        "Fix the first error, or pass export(..., report=True) for the full tracebacks of each "
        "strategy."
    )
    raise CaptureError("\n".join(lines), [(a.strategy, a.error) for a in attempts]) from (
        attempts[0].error if attempts else None
    )
