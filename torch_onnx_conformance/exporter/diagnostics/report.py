"""``report=True``: one markdown file per export, on success and on failure at any stage.

``artifacts_dir/onnx_export_<YYYY-MM-DD_HH-MM-SS-ffffff>_<outcome>.md``, outcome being
``success`` or the stage that failed. Sections, always all present, under the ``##`` headings of
:data:`SECTIONS`. Each section renders on its own: one that raises shows its own error and the
others still appear, so a report is never lost to a bug in one part of it.

Markdown only: the caller (``exporter._api``) writes the repro folder beside the report
(``exporter.diagnostics.repro.write_export_repro``) and passes the line that names it.
"""

from __future__ import annotations

import datetime
import re
import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from torch_onnx_conformance.exporter import _errors
from torch_onnx_conformance.exporter._record import ExportRecord
from torch_onnx_conformance.exporter.stages import VERIFY_STAGES, Stage

if TYPE_CHECKING:
    import onnx_ir as ir

    from torch_onnx_conformance.exporter._program import ONNXProgram

#: The ONNX graph text stops after this many characters (a model's text can run to megabytes).
MAX_GRAPH_TEXT_CHARS = 200_000

SECTIONS = (
    "Status",
    "Errors",
    "Unsupported ops",
    "Exported program",
    "Dynamic dims",
    "Graph summary",
    "ONNX graph",
    "Accuracy",
    "Bisection",
    "Stage timings",
)

OK, FAILED, NOT_RUN = "✅", "❌", "⚪"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_STAGE_TITLES = {
    "decomposition": "Decomposition",
    "translation": "Translation to ONNX",
    "optimize": "Optimisation (onnxscript optimizer)",
    Stage.CHECKER: "onnx.checker.check_model(full_check=True)",
    Stage.LOAD: "onnxruntime load",
    Stage.RUN: "onnxruntime run",
    Stage.COMPARE: "Accuracy against the reference (example inputs)",
    Stage.SECOND_SHAPE: "Accuracy at a second shape (dynamic dims changed)",
}


def report_file_name(
    record: ExportRecord, error: BaseException | None, now: datetime.datetime
) -> str:
    return f"onnx_export_{now.strftime('%Y-%m-%d_%H-%M-%S-%f')}_{outcome(record, error)}.md"


def outcome(record: ExportRecord, error: BaseException | None) -> str:
    stage = record.failed_stage
    if stage:
        return stage
    if error is not None:
        return getattr(error, "stage", None) or "error"
    return "success"


def reserve_report_path(
    record: ExportRecord,
    folder: str | Path,
    error: BaseException | None = None,
    now: datetime.datetime | None = None,
) -> Path:
    """A report path in ``folder`` (created) that no earlier report has taken."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / report_file_name(record, error, now or datetime.datetime.now())
    counter = 1
    while path.exists():  # two exports within a microsecond: keep both
        path = path.with_name(f"{path.stem.rsplit('~', 1)[0]}~{counter}.md")
        counter += 1
    return path


def repro_folder(report_path: Path) -> Path:
    """The repro folder that goes with a report: its name with ``_repro``."""
    return report_path.with_name(report_path.stem + "_repro")


def write_report(
    record: ExportRecord,
    folder: str | Path,
    *,
    program: ONNXProgram | None = None,
    error: BaseException | None = None,
    repro_note: str | None = None,
    path: Path | None = None,
    placement_provider: str | None = None,
) -> Path:
    """Write the markdown report of one export and return its path (``path``, or a fresh one
    in ``folder``). ``repro_note`` names the repro folder the caller wrote, if any;
    ``placement_provider`` ("cuda") adds the predicted placement on that provider."""
    now = datetime.datetime.now()
    if path is None:
        path = reserve_report_path(record, folder, error, now)
    parts = [_section(None, lambda: _header(record, error, now, repro_note))]
    renderers: dict[str, Callable[[], str]] = {
        "Status": lambda: _status(record, error),
        "Errors": lambda: _errors_section(record, error),
        "Unsupported ops": lambda: _unsupported(record),
        "Exported program": lambda: _exported_program(record, program),
        "Dynamic dims": lambda: _dims_audit(record, error),
        "Graph summary": lambda: _graph_summary(record, program),
        "ONNX graph": lambda: _graph_text(record, program),
        "Accuracy": lambda: _accuracy(record, error),
        "Bisection": lambda: _bisection(record, error),
        "Stage timings": lambda: _timings(record),
    }
    for title in SECTIONS:
        parts.append(_section(title, renderers[title]))
    if placement_provider is not None:
        title = f"{placement_provider.upper()} placement"
        parts.append(_section(title, lambda: _placement(program, placement_provider)))
    path.write_text("\n\n".join(parts) + "\n", encoding="utf-8")
    return path


def _placement(program: ONNXProgram | None, provider: str) -> str:
    """Which nodes onnxruntime would run on ``provider`` and which it leaves to CPU, with the
    Memcpy nodes it adds (predicted by torch_onnx_conformance/exporter/diagnostics/placement.py, no GPU needed)."""
    if program is None:
        return "_No ONNX model: nothing to place._"
    from torch_onnx_conformance.exporter.diagnostics.placement import predict

    return predict(program.model_proto, provider).markdown()


def _dims_audit(record: ExportRecord, error: BaseException | None = None) -> str:
    from torch_onnx_conformance.exporter._dynamic_shapes import specialized_dims_table

    table = specialized_dims_table(getattr(record, "dim_audit", []))
    if table:
        return table
    if record.status.get("capture") != "failed":
        return "_No dim was declared dynamic, and no guard held one._"
    # Capture failed: there is no captured program to audit, but its error may name the dims
    # a guard held; the section says what the error says, never that nothing held.
    messages = [str(error)] if error is not None else []
    messages += [str(entry.get("message", "")) for entry in record.errors]
    named = list(
        dict.fromkeys(
            line.strip()
            for message in messages
            for line in message.splitlines()
            if " dim " in line and ("guard" in line or "static" in line or "constant" in line)
        )
    )
    if named:
        return (
            "_Capture failed, so no captured program was audited; its error names these dims:_\n\n"
            + _fence("\n".join(named), "text")
        )
    return "_Capture failed before any dim could be audited: see Errors above._"


def _section(title: str | None, render: Callable[[], str]) -> str:
    heading = f"## {title}\n\n" if title else ""
    try:
        body = render()
    except Exception as exc:  # noqa: BLE001 - one broken section must not lose the report
        body = f"_This section could not be rendered: {type(exc).__name__}: {exc}_\n\n" + _fence(
            traceback.format_exc(), "text"
        )
    return heading + body.rstrip()


def _fence(text: str, lang: str = "") -> str:
    text = _ANSI.sub("", text).rstrip()
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return f"{ticks}{lang}\n{text}\n{ticks}"


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: list[list[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines.extend("| " + " | ".join(_cell(c) for c in row) + " |" for row in rows)
    return "\n".join(lines)


# -------------------------------------------------------------------------------- header
def _versions() -> str:
    import importlib.metadata as md

    found = []
    for dist in ("torch", "onnx", "onnxruntime", "onnxscript", "onnx-ir"):
        try:
            found.append(f"{dist} {md.version(dist)}")
        except md.PackageNotFoundError:
            continue
    return ", ".join(found)


def _header(
    record: ExportRecord,
    error: BaseException | None,
    now: datetime.datetime,
    repro_note: str | None,
) -> str:
    result = outcome(record, error)
    lines = [
        f"# ONNX export report: {record.model_class or 'model'}",
        "",
        f"- Outcome: **{result}**"
        + (
            ""
            if result == "success"
            else f" ({OK if error is None else FAILED} export "
            f"{'returned a model' if error is None else 'raised'})"
        ),
        f"- Written: {now.isoformat(sep=' ', timespec='seconds')}",
        f"- Opset: {record.opset or 'not reached'}",
        f"- Versions: {_versions()}",
    ]
    if error is not None:
        lines.append(f"- Error: `{type(error).__name__}`: {_first_line(error)}")
    if repro_note:
        lines.append(f"- Repro: {repro_note}")
    if record.dumped_program is not None:
        lines.append(f"- Exported program saved: {_load_instructions(record)}")
    for note in record.notes:
        lines.append(f"- Note: {note}")
    return "\n".join(lines)


def _load_instructions(record: ExportRecord) -> str:
    """How to load the dumped program in a fresh process: custom ops exist only once the
    module that registers them is imported, so that import comes first."""
    from torch_onnx_conformance.exporter.diagnostics.repro import custom_op_modules

    path = record.dumped_program
    imports = custom_op_modules(record.captured_program) if record.captured_program else None
    statements = [f"import {module}" for module in (imports.modules if imports else [])]
    statements += ["import torch", f"program = torch.export.load({str(path)!r})"]
    text = f"`{path}`; load it with `{'; '.join(statements)}`"
    if imports and imports.unknown:
        names = ", ".join(f"`{q}`" for q in imports.unknown)
        text += f" after registering the custom ops {names} (import the code that defines them)"
    return text


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return _cell(text[0]) if text else ""


# -------------------------------------------------------------------------------- status
def _mark(state: str | None) -> str:
    return {"ok": OK, "failed": FAILED}.get(state or "", NOT_RUN)


def _status(record: ExportRecord, error: BaseException | None) -> str:
    from torch_onnx_conformance.exporter import _capture

    lines = []
    reached_failure = record.failed_stage or (None if error is None else "arguments")
    capture_state = record.status.get("capture")
    attempts = {a.strategy: a for a in record.capture_attempts}
    for name in list(_capture.STRATEGIES) + [a for a in attempts if a not in _capture.STRATEGIES]:
        attempt = attempts.get(name)
        if capture_state == "skipped":
            lines.append(
                f"- {NOT_RUN} Capture with {name}: skipped (the model is an ExportedProgram)"
            )
        elif attempt is None:
            why = (
                "an earlier strategy succeeded"
                if capture_state == "ok"
                else "capture was not reached"
            )
            lines.append(f"- {NOT_RUN} Capture with {name}: not tried ({why})")
        elif attempt.ok:
            lines.append(f"- {OK} Capture with {name} ({attempt.seconds:.2f} s)")
        else:
            lines.append(
                f"- {FAILED} Capture with {name}: {type(attempt.error).__name__}: "
                f"{_first_line(attempt.error)}"
            )
    verification = record.verification
    for stage in ("decomposition", "translation", "optimize", *VERIFY_STAGES):
        state = record.status.get(stage)
        title = _STAGE_TITLES[stage]
        if stage == "decomposition" and state == "ok":
            reason = record.decomposition_reason
            lines.append(
                f"- {OK} {title}: ran because {reason}"
                if reason
                else f"- {NOT_RUN} {title}: skipped, not needed (every op of the captured "
                f"program has a translation and no in-place op is observable)"
            )
        elif state == "skipped":
            why = ""
            if stage == "optimize":
                why = "optimize=False"
            elif verification is not None:
                why = verification.skipped.get(stage, "")
            lines.append(f"- {NOT_RUN} {title}: skipped" + (f" ({why})" if why else ""))
        elif state in ("ok", "failed"):
            detail = ""
            if state == "failed" and verification is not None and stage == "checker":
                detail = f": {_cell(verification.checker)[:300]}"
            lines.append(f"- {_mark(state)} {title}{detail}")
        elif (
            stage in VERIFY_STAGES
            and verification is None
            and not reached_failure
            and not record.verify_requested
        ):
            lines.append(f"- {NOT_RUN} {title}: not run (pass verify=True)")
        else:
            lines.append(
                f"- {NOT_RUN} {title}: not reached"
                + (f" (the export failed at {reached_failure})" if reached_failure else "")
            )
    return "\n".join(lines)


# -------------------------------------------------------------------------------- errors
def _errors_section(record: ExportRecord, error: BaseException | None) -> str:
    blocks = []
    for attempt in record.capture_attempts:
        if attempt.ok:
            continue
        blocks.append(
            _error_block(
                f"capture with {attempt.strategy}",
                type(attempt.error).__name__,
                str(attempt.error),
                _source_of(attempt.error, attempt.traceback),
                attempt.traceback,
            )
        )
    seen = set()
    for item in record.errors:
        if item["stage"] == "capture" and record.capture_attempts:
            continue  # the CaptureError summary repeats the per-strategy errors above
        key = (item["type"], item["message"])
        seen.add(key)
        blocks.append(
            _error_block(
                item["stage"],
                item["type"],
                item["message"],
                item.get("source") or _source_of(None, item["traceback"]),
                item["traceback"],
            )
        )
    if (
        error is not None
        and (type(error).__name__, str(error)) not in seen
        and not any(item["type"] == type(error).__name__ for item in record.errors)
    ):
        text = "".join(traceback.format_exception(error))
        blocks.append(
            _error_block(
                getattr(error, "stage", "export"),
                type(error).__name__,
                str(error),
                _source_of(error, text),
                text,
            )
        )
    if not blocks:
        return "No errors."
    return "\n\n".join(blocks)


# Model libraries (torchvision, transformers) count as user code, as in _errors.user_source_line;
# the exporter's own machinery and its backends do not. torch and the exporter are told by their
# package folders (_errors._LIBRARY_PARTS): a "/exporter/" substring also matched the user's own
# folders of that name (tests/exporter/ lost every source line).
_LIBRARY_PATHS = (
    *_errors._LIBRARY_PARTS,
    "/contextlib.py",
    "/onnx/",
    "/onnxruntime/",
    "/onnxscript/",
    "/onnx_ir/",
    "/numpy/",
    "/sympy/",
    "/_pytest/",
    "/pluggy/",
)


def _is_user_line(line: str | None) -> bool:
    return bool(line) and not any(part in line.split(" in ", 1)[0] for part in _LIBRARY_PATHS)


def _source_of(error: BaseException | None, trace: str | None) -> str | None:
    source = getattr(error, "source", None)
    if source:
        return source
    line = _errors.user_source_line(trace)
    return line if _is_user_line(line) else None


def _call_site() -> str | None:
    """The user's line that called export(): the innermost frame outside the libraries."""
    for frame in reversed(traceback.extract_stack()):
        text = f"{frame.filename}:{frame.lineno} in {frame.name}: {(frame.line or '').strip()}"
        if _is_user_line(text):
            return text
    return None


def _error_block(stage: str, kind: str, message: str, source: str | None, trace: str | None) -> str:
    where = (
        f"User source line: {source}"
        if source
        else f"User source line: none in the traceback; export() was called at "
        f"{_call_site() or 'an unknown place'}"
    )
    lines = [f"### {stage}: {kind}", "", _fence(message, "text"), "", where]
    if trace and "Traceback (most recent call last)" in trace:
        lines += [
            "",
            "<details><summary>Traceback</summary>",
            "",
            _fence(trace, "text"),
            "",
            "</details>",
        ]
    return "\n".join(lines)


# ----------------------------------------------------------------------- unsupported ops
def _unsupported(record: ExportRecord) -> str:
    items = record.unsupported
    if not items:
        if record.status.get("translation") in ("ok", "failed") or record.model is not None:
            return "None: every FX node has a translation."
        return "Not checked: translation was not reached."
    by_target = Counter(item["target"] for item in items)
    summary = (
        f"{len(items)} FX nodes use {len(by_target)} ops that have no translation: "
        + ", ".join(f"`{t}` ({n})" for t, n in by_target.items())
    )
    rows = [
        [i + 1, f"`{item['target']}`", f"`{item['fx_node']}`", item.get("source") or "-"]
        for i, item in enumerate(items)
    ]
    hint = (
        "Register translations with `custom_translation_table={op_overload: fn}` or "
        "`exporter.register(op_overload, fn)`."
    )
    return (
        summary + "\n\n" + _table(["#", "ATen op", "FX node", "source line"], rows) + "\n\n" + hint
    )


# ---------------------------------------------------------------------- exported program
def _exported_program(record: ExportRecord, program: ONNXProgram | None) -> str:
    translated = record.exported_program
    if translated is None and program is not None:
        translated = program.exported_program
    captured = record.captured_program
    if translated is None and captured is None:
        return "Not available: capture did not produce a program."
    parts = []
    if translated is not None:
        label = "after decomposition" if record.decomposition_reason else "as captured"
        parts.append(
            f"The program that was translated ({label}):\n\n" + _fence(str(translated), "python")
        )
    if captured is not None and captured is not translated:
        parts.append(
            "<details><summary>The program as captured, before decomposition"
            "</summary>\n\n" + _fence(str(captured), "python") + "\n\n</details>"
        )
    return "\n\n".join(parts)


# ------------------------------------------------------------------------- graph summary
def _dims(value: ir.Value) -> str:
    if value.shape is None:
        return "unknown"
    dims = [getattr(d, "value", d) for d in value.shape]
    return "[" + ", ".join(str(d) if d is not None else "?" for d in dims) + "]"


def _dynamic(value: ir.Value) -> str:
    if value.shape is None:
        return "-"
    names = [
        str(getattr(d, "value", d))
        for d in value.shape
        if not isinstance(getattr(d, "value", d), int)
    ]
    return ", ".join(names) or "static"


def _graph_summary(record: ExportRecord, program: ONNXProgram | None) -> str:
    import onnx_ir as ir

    model = program.model if program is not None else record.model
    if model is None:
        return "Not available: translation did not produce an ONNX model."
    graph = model.graph
    histogram: Counter[str] = Counter()
    nodes = 0
    for node in ir.traversal.RecursiveGraphIterator(graph):
        nodes += 1
        histogram[f"{node.domain}::{node.op_type}" if node.domain else node.op_type] += 1
    weights = sum(
        v.const_value.nbytes for v in graph.initializers.values() if v.const_value is not None
    )
    lines = [
        f"- Nodes: {nodes} (main graph {len(graph)}), model functions: {len(model.functions)}",
        f"- Initializers: {len(graph.initializers)} ({weights / 2**20:.2f} MiB)",
        f"- Opset imports: {dict(graph.opset_imports)}",
        "",
        "### Inputs and outputs",
        "",
        _table(
            ["kind", "name", "dtype", "shape", "dynamic dims"],
            [
                ["input", f"`{v.name}`", v.dtype.name if v.dtype else "?", _dims(v), _dynamic(v)]
                for v in graph.inputs
            ]
            + [
                ["output", f"`{v.name}`", v.dtype.name if v.dtype else "?", _dims(v), _dynamic(v)]
                for v in graph.outputs
            ],
        ),
        "",
        "### Op histogram",
        "",
        _table(["op", "count"], [[f"`{op}`", n] for op, n in histogram.most_common()]),
    ]
    return "\n".join(lines)


def _graph_text(record: ExportRecord, program: ONNXProgram | None) -> str:
    """The ONNX graph as onnx_ir prints it (small constants inline, where a wrong value
    shows), collapsed; cut at MAX_GRAPH_TEXT_CHARS."""
    model = program.model if program is not None else record.model
    if model is None:
        return "Not available: translation did not produce an ONNX model."
    text = "\n\n".join([str(model.graph), *(str(f) for f in model.functions.values())])
    cut = ""
    if len(text) > MAX_GRAPH_TEXT_CHARS:
        text = text[:MAX_GRAPH_TEXT_CHARS]
        cut = (
            f"\n\n_Cut at {MAX_GRAPH_TEXT_CHARS} characters; "
            "`onnx_program.model.graph` prints the whole graph._"
        )
    return (
        f"<details><summary>The graph as text ({len(model.graph)} nodes in the main graph)"
        f"</summary>\n\n{_fence(text, 'text')}{cut}\n\n</details>"
    )


# ------------------------------------------------------------------------------ accuracy
def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def _not_verified(record: ExportRecord, error: BaseException | None) -> str:
    """Why there is no verification: not asked for, or the export stopped before it."""
    if not record.verify_requested:
        return "Not run: pass `verify=True` to compare the ONNX model with the eager module."
    stage = outcome(record, error)
    if stage == "success":
        return "Not run: verification was requested but produced no result."
    return f"Not run: `verify=True` was requested, but the export failed at {stage} before it."


def _accuracy(record: ExportRecord, error: BaseException | None) -> str:
    from torch_onnx_conformance.exporter.diagnostics.compare import ERROR_BIN_LABELS

    verification = record.verification
    if verification is None:
        return _not_verified(record, error)
    v = verification
    tolerance = (
        "per output dtype (see the tables)"
        if v.rtol is None or v.atol is None
        else f"rtol={v.rtol:g}, atol={v.atol:g}"
    )
    lines = [
        f"- Reference: {v.reference}",
        f"- Tolerance: {tolerance}",
        f"- onnx.checker (full check): {v.checker}",
    ]
    if v.ort_load_error:
        lines.append(f"- onnxruntime load failed: {v.ort_load_error}")
    for spec in v.specialised:
        lines.append(f"- {FAILED} Specialised dynamic dimension: {spec}")
    for stage, why in v.skipped.items():
        lines.append(f"- {NOT_RUN} {_STAGE_TITLES.get(stage, stage)} skipped: {why}")
    if v.repro_dir is not None:
        lines.append(f"- Repro directory: `{v.repro_dir}`")
    for run in v.runs:
        lines += ["", f"### {run.label}: {run.shapes_text()}", ""]
        if run.stage == Stage.SECOND_SHAPE and v.changed_dims:
            lines += ["Changed: " + "; ".join(v.changed_dims), ""]
        if not run.outputs:
            if not run.ok:  # the run failed as a whole: onnxruntime raised, the counts differ
                lines += [f"{FAILED} {run.message}", ""]
            continue
        rows = [
            [
                f"`{o.name}`",
                f"{o.expected_dtype}{list(o.expected_shape or ())}",
                f"{o.actual_dtype}{list(o.actual_shape or ())}",
                _fmt(o.max_abs),
                _fmt(o.max_rel),
                f"{o.mismatched}/{o.total}",
                f"{o.rtol:g} / {o.atol:g}",
                (OK if o.ok else FAILED) + ("" if o.ok else " " + o.message),
            ]
            for o in run.outputs
        ]
        lines.append(
            _table(
                [
                    "output",
                    "expected",
                    "actual",
                    "max abs err",
                    "max rel err",
                    "elements off",
                    "rtol / atol",
                    "result",
                ],
                rows,
            )
        )
        hist_rows = [[f"`{o.name}`", *o.histogram] for o in run.outputs if o.histogram]
        if hist_rows:
            lines += [
                "",
                "Absolute error histogram (element counts):",
                "",
                _table(["output", *ERROR_BIN_LABELS], hist_rows),
            ]
    return "\n".join(lines)


def _bisection(record: ExportRecord, error: BaseException | None) -> str:
    verification = record.verification
    if verification is None:
        return _not_verified(record, error)
    if verification.bisection_error:
        return f"{FAILED} The bisection itself failed: {verification.bisection_error}"
    b = verification.bisection
    if b is None:
        if verification.outputs_ok:
            return "Not needed: the outputs match."
        return "Not run: onnxruntime could not run the model, so there are no values to compare."
    lines = []
    if b.first is not None:
        f = b.first
        lines += [
            f"First divergent FX node: **`{f.fx_node}`**",
            "",
            f"- ATen op: `{f.aten_op}`",
            f"- Translation: `{f.translation or 'unknown'}`",
            f"- User source line: {f.source or 'not found'}",
            f"- ONNX value: `{f.onnx_value}`: {f.comparison.message}",
        ]
        if f.uncompared_inputs:
            lines.append(f"- Inputs without an ONNX value to compare: {f.uncompared_inputs}")
    else:
        lines.append(
            f"No divergent node: the {b.compared} compared ONNX values match the exported program."
        )
    if b.program_vs_reference:
        lines.append(f"- Exported program vs reference outputs: {b.program_vs_reference}")
    lines += [f"- Note: {n}" for n in b.notes]
    on = f" with the {b.inputs}" if b.inputs else ""
    lines.append(
        f"- Compared {b.compared} of {b.candidates} FX nodes on the {b.model_used}{on} "
        f"in {b.seconds:.2f} s; {b.divergent_count} diverge."
    )
    if b.divergent:
        rows = [
            [f"`{c.fx_node}`", f"`{c.target}`", _fmt(c.max_abs), _fmt(c.max_rel), c.message]
            for c in b.divergent
        ]
        lines += [
            "",
            "Divergent nodes in order (first ones):",
            "",
            _table(["FX node", "op", "max abs err", "max rel err", "detail"], rows),
        ]
    return "\n".join(lines)


# ------------------------------------------------------------------------------- timings
def _timings(record: ExportRecord) -> str:
    if not record.timings and not record.capture_attempts:
        return "No stage ran."
    rows = [
        [f"capture: {a.strategy}", f"{a.seconds:.3f}", OK if a.ok else FAILED]
        for a in record.capture_attempts
    ]
    for stage, seconds in record.timings.items():
        state = record.status.get(stage)
        if stage == "decomposition" and state == "ok" and not record.decomposition_reason:
            mark = f"{NOT_RUN} skipped"
        else:
            mark = _mark(state) if state else ""
        rows.append([stage, f"{seconds:.3f}", mark])
    total = sum(record.timings.values())
    rows.append(["**total**", f"{total:.3f}", ""])
    return _table(["stage", "seconds", "status"], rows)
