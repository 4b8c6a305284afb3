"""One-directory repros: a failing model, its inputs and expected outputs, and a script.

Layout (shared with the conformance harness's repro directories)::

    model.onnx            the ONNX model (plus model.onnx.data for models over 2 GiB)
    inputs.npz            graph inputs by name
    expected.npz          reference outputs as output_0, output_1, ...
    inputs2.npz           optional second input set (the second shape of a dynamic model)
    expected2.npz         its reference outputs
    weights.npz           when the export failed: the failing program's weights
    rerun_export.py       when the export failed: rebuilds that program and re-runs the export
    case.json             id, provider, rule, rtol/atol, notes; which arrays are bfloat16
    repro.py              numpy + onnxruntime only: runs the model, compares, exits 1 on mismatch
    compare.py            the comparison rule repro.py applies (torch_onnx_conformance/exporter/diagnostics/compare.py)

bfloat16 arrays are stored as uint16 (npz has no bfloat16) and listed in case.json.

Nothing in a repro directory runs code when it is loaded: arrays are npz files read with
``allow_pickle=False``, and no serialised program is written (a ``.pt2`` archive stores tensors
in torch's pickle-based format); a failed export carries its program as Python source in
``rerun_export.py`` instead.
"""

from __future__ import annotations

import dataclasses
import io
import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from torch_onnx_conformance.exporter._record import ExportRecord
from torch_onnx_conformance.exporter.diagnostics.compare import resolve_tolerance
from torch_onnx_conformance.exporter.stages import Stage

if TYPE_CHECKING:
    from torch_onnx_conformance.exporter._program import ONNXProgram
    from torch_onnx_conformance.exporter.diagnostics.verify import VerificationResult

MODEL_FILE = "model.onnx"
CASE_FILE = "case.json"
SCRIPT_FILE = "repro.py"
COMPARE_FILE = "compare.py"
RERUN_FILE = "rerun_export.py"
WEIGHTS_FILE = "weights.npz"
#: Models whose serialised size passes this go to an external data file (protobuf's limit is 2 GiB).
EXTERNAL_DATA_BYTES = 1536 * 1024 * 1024

#: The script and the comparison rule it imports, copied beside every repro's data.
SCRIPT_SOURCES = {
    SCRIPT_FILE: Path(__file__).with_name("repro_script.py"),
    COMPARE_FILE: Path(__file__).with_name("compare.py"),
}


#: Where rerun_export.py's template takes the failing program's code.
PROGRAM_CODE_MARKER = "# PROGRAM CODE\n"


def install_scripts(folder: Path) -> None:
    """Copy ``repro.py`` and the ``compare.py`` it judges outputs with into ``folder``."""
    for name, source in SCRIPT_SOURCES.items():
        shutil.copyfile(source, folder / name)


def save_arrays(path: Path, arrays: Mapping[str, np.ndarray], case: dict[str, Any]) -> None:
    path.write_bytes(arrays_bytes(path.name, arrays, case))


def arrays_bytes(file_name: str, arrays: Mapping[str, np.ndarray], case: dict[str, Any]) -> bytes:
    """The ``.npz`` bytes of ``arrays`` as ``file_name`` holds them: bfloat16 arrays stored as
    their uint16 bits, which ``case["bfloat16"][file_name]`` lists for the loader."""
    stored = {}
    for name, array in arrays.items():
        array = np.asarray(array)
        if array.dtype.name == "bfloat16":
            case.setdefault("bfloat16", {}).setdefault(file_name, []).append(name)
            array = array.view(np.uint16)
        stored[name] = array
    buffer = io.BytesIO()
    np.savez(buffer, **stored)
    return buffer.getvalue()


def _named_inputs(
    inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray],
    input_names: Sequence[str] | None,
    model_inputs: list[str] | None,
) -> dict[str, np.ndarray]:
    if isinstance(inputs, Mapping):
        return dict(inputs)
    names = list(input_names or model_inputs or [])
    if len(names) != len(inputs):
        raise ValueError(
            f"write_repro got {len(inputs)} input arrays but {len(names)} input names "
            f"({names}); pass input_names or a dict {{name: array}}"
        )
    return dict(zip(names, inputs))


def _write_model(folder: Path, model: Any) -> list[str]:
    """Writes model.onnx; returns the graph input names."""
    import onnx
    import onnx_ir as ir

    path = folder / MODEL_FILE
    if isinstance(model, bytes):
        path.write_bytes(model)
        return [i.name for i in onnx.load_model_from_string(model).graph.input]
    if isinstance(model, ir.Model):
        from torch_onnx_conformance.exporter._program import initializer_bytes

        if initializer_bytes(model) > EXTERNAL_DATA_BYTES:
            ir.save(model, path, external_data=MODEL_FILE + ".data")
        else:
            ir.save(model, path)
        return [v.name for v in model.graph.inputs]
    if model.ByteSize() > EXTERNAL_DATA_BYTES:
        onnx.save_model(model, path, save_as_external_data=True, location=MODEL_FILE + ".data")
    else:
        onnx.save_model(model, path)
    return [i.name for i in model.graph.input]


def write_repro(
    folder: str | Path,
    *,
    model_proto: Any,
    inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray],
    expected: Sequence[np.ndarray],
    rtol: float,
    atol: float,
    input_names: Sequence[str] | None = None,
    inputs2: Sequence[np.ndarray] | Mapping[str, np.ndarray] | None = None,
    expected2: Sequence[np.ndarray] | None = None,
    tolerances: Sequence[tuple[float, float]] | None = None,
    meta: Mapping[str, Any] | None = None,
    extra_arrays: Mapping[str, Mapping[str, np.ndarray]] | None = None,
    extra_scripts: Mapping[str, str] | None = None,
) -> Path:
    """Write a repro directory (layout in the module docstring) and return its path.

    ``model_proto`` is an ``onnx.ModelProto``, an ``onnx_ir.Model``, serialised bytes, or None
    when the export itself failed. ``inputs`` are arrays in graph-input order (named by
    ``input_names``, else by the model's inputs) or a dict by name. ``tolerances`` optionally
    gives (rtol, atol) per output. ``meta`` goes into case.json: ``id``, ``provider``
    (cpu|cuda|reference), ``ort_optimization`` ("disable_all" to turn onnxruntime's graph
    optimisations off), ``status``, ``stage``, ``error``, ``note`` and anything else useful.
    ``extra_arrays`` are more npz files by name, ``extra_scripts`` more files by name and text.
    An existing repro directory at ``folder`` is replaced; any other non-empty folder is an error.
    """
    folder = Path(folder)
    if folder.exists():
        if not folder.is_dir():
            raise FileExistsError(f"cannot write a repro to {folder}: it is a file")
        if any(folder.iterdir()) and not (folder / CASE_FILE).exists():
            raise FileExistsError(
                f"cannot write a repro to {folder}: it holds files that are not a repro; "
                f"choose an empty or new folder"
            )
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    case: dict[str, Any] = {
        "id": "export",
        "provider": "cpu",
        "rtol": float(rtol),
        "atol": float(atol),
        "shape_only": False,
    }
    case.update(meta or {})
    if tolerances is not None:
        case["tolerances"] = [[float(r), float(a)] for r, a in tolerances]
    model_inputs = _write_model(folder, model_proto) if model_proto is not None else None
    save_arrays(folder / "inputs.npz", _named_inputs(inputs, input_names, model_inputs), case)
    save_arrays(folder / "expected.npz", {f"output_{i}": o for i, o in enumerate(expected)}, case)
    if inputs2 is not None and expected2 is not None:
        save_arrays(folder / "inputs2.npz", _named_inputs(inputs2, input_names, model_inputs), case)
        save_arrays(
            folder / "expected2.npz", {f"output_{i}": o for i, o in enumerate(expected2)}, case
        )
    for name, arrays in (extra_arrays or {}).items():
        save_arrays(folder / name, arrays, case)
    for name, text in (extra_scripts or {}).items():
        (folder / name).write_text(text, encoding="utf-8")
    (folder / CASE_FILE).write_text(json.dumps(case, indent=1, default=str), encoding="utf-8")
    install_scripts(folder)
    return folder


def write_verification_repro(
    folder: str | Path, program: Any, verification: VerificationResult
) -> Path:
    """The repro of a failed ``verify``: the exported model with the runs' inputs and the
    reference outputs (second-shape inputs too when there were any)."""
    case = verification.case
    rtol, atol = verification.rtol, verification.atol
    runs = verification.runs
    per_output = None
    if runs and runs[0].outputs:
        per_output = [(o.rtol, o.atol) for o in runs[0].outputs]
    # No one dtype speaks for all outputs: the fallback, as for dtypes the table does not list.
    rtol, atol = resolve_tolerance("export", None, rtol, atol)
    problems = verification.problems()
    meta = {
        "id": f"export of {getattr(getattr(program, 'record', None), 'model_class', 'model')}",
        "status": "fail",
        "stage": _failed_stage(verification),
        "error": "\n".join(problems),
        "reference": verification.reference,
    }
    if verification.bisection is not None and verification.bisection.first is not None:
        meta["note"] = verification.bisection.first.describe()
    return write_repro(
        folder,
        model_proto=program.model,
        inputs=case.feeds,
        expected=case.expected,
        rtol=rtol,
        atol=atol,
        inputs2=case.feeds2,
        expected2=case.expected2,
        tolerances=per_output,
        meta=meta,
    )


def _failed_stage(verification: VerificationResult) -> str:
    if verification.ort_load_error:
        return Stage.LOAD
    for run in verification.runs:
        if not run.ok:
            return run.stage
    return Stage.SECOND_SHAPE if verification.specialised else Stage.CHECKER


def write_export_repro(
    record: ExportRecord,
    program: ONNXProgram | None,
    error: BaseException | None,
    folder: Path,
    stage: str,
) -> str | None:
    """The repro folder ``report=True`` keeps beside its report when there is something to
    reproduce: a model that disagrees with the reference, or a program whose translation
    failed. Returns the line the report shows for it (None when nothing was written)."""
    verification = record.verification
    if verification is not None and program is not None and verification.case is not None:
        if verification.outputs_ok:
            return None
        verification.repro_dir = write_verification_repro(folder, program, verification)
        return f"`{folder}` (run `python repro.py` there; needs only numpy and onnxruntime)"
    translated = record.exported_program or record.captured_program
    if error is not None and record.model is None and translated is not None:
        write_failed_export_repro(folder, record, error, stage=stage)
        imports = custom_op_modules(translated)
        needs = (
            f"; it imports {', '.join(f'`{m}`' for m in imports.modules)} first, which "
            "registers the custom ops the program calls: run it from the folder they import from"
            if imports.modules
            else ""
        )
        if imports.unknown:
            needs += (
                f"; register the custom ops {', '.join(f'`{q}`' for q in imports.unknown)} "
                "first (their defining module is not known: import it at the top of the script)"
            )
        return (
            f"`{folder}` (the program that failed to translate with its example inputs; "
            f"`python rerun_export.py` re-runs the export{needs})"
        )
    return None


#: Op namespaces torch itself defines: no module needs importing for them.
_TORCH_NAMESPACES = frozenset(
    {"aten", "prims", "higher_order", "_c10d_functional", "c10d_functional", "quantized_decomposed"}
)


@dataclasses.dataclass
class CustomOpImports:
    #: Importable modules that define (register) custom ops the program calls.
    modules: list[str]
    #: Qualified names of custom ops whose defining module is not importable or not known.
    unknown: list[str]


def custom_op_modules(program: Any) -> CustomOpImports:
    """The modules to import before the program's custom ops exist in a fresh process (for
    ``rerun_export.py`` or ``torch.export.load``): found for ``torch.library.custom_op`` ops
    from their definition; others are named as unknown."""
    import torch
    from torch._library import custom_ops

    modules: dict[str, None] = {}
    unknown: dict[str, None] = {}
    for node in program.graph_module.graph.nodes:
        target = node.target
        if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
            continue
        if target.namespace in _TORCH_NAMESPACES:
            continue
        qualname = target._schema.name
        definition = custom_ops.OPDEFS.get(qualname)
        module = getattr(getattr(definition, "_init_fn", None), "__module__", None)
        if module and module != "__main__":
            modules[module] = None
        else:
            unknown[qualname] = None
    return CustomOpImports(list(modules), list(unknown))


def write_failed_export_repro(
    folder: str | Path, record: ExportRecord, error: BaseException, *, stage: str
) -> Path:
    """The repro of an export that failed before an ONNX model existed: the program it was
    translating, as Python source in ``rerun_export.py`` with its weights in ``weights.npz``, and
    that program's example inputs. When the program cannot be written as source (a submodule,
    a non-tensor input or constant), case.json says why and the inputs are still kept."""
    from torch_onnx_conformance.exporter._dtypes import to_numpy
    from torch_onnx_conformance.exporter._program import flatten_inputs

    program = record.exported_program or record.captured_program
    feeds = _example_feeds(program, flatten_inputs, to_numpy)
    meta: dict[str, Any] = {
        "id": f"export of {record.model_class or 'model'}",
        "status": "fail",
        "stage": stage,
        "error": f"{type(error).__name__}: {error}"[:4000],
        "input_order": list(feeds),
    }
    extra_arrays: dict[str, dict[str, np.ndarray]] = {}
    extra_scripts: dict[str, str] = {}
    try:
        placeholders, weights, code = _program_as_source(program, to_numpy, len(feeds))
    except ValueError as exc:
        meta["note"] = (
            f"the export failed before an ONNX model existed; {RERUN_FILE} was not written: {exc}"
        )
    else:
        meta["placeholders"] = placeholders
        meta["imports"] = custom_op_modules(program).modules
        meta["rerun"] = f"python {RERUN_FILE} (needs torch and the exporter)"
        meta["note"] = (
            f"the export failed before an ONNX model existed; python {RERUN_FILE} rebuilds the "
            f"program it was translating and re-runs the export"
        )
        extra_arrays[WEIGHTS_FILE] = weights
        template = Path(__file__).with_name("rerun_export_script.py").read_text(encoding="utf-8")
        extra_scripts[RERUN_FILE] = template.replace(PROGRAM_CODE_MARKER, code.strip() + "\n")
    return write_repro(
        folder,
        model_proto=None,
        inputs=feeds,
        expected=[],
        rtol=0.0,
        atol=0.0,
        meta=meta,
        extra_arrays=extra_arrays,
        extra_scripts=extra_scripts,
    )


def _example_feeds(program: Any, flatten_inputs: Any, to_numpy: Any) -> dict[str, np.ndarray]:
    import torch
    from torch.export import graph_signature as gs

    if program.example_inputs is None:
        return {}
    args, kwargs = program.example_inputs
    names = [
        s.arg.name
        for s in program.graph_signature.input_specs
        if s.kind == gs.InputKind.USER_INPUT and isinstance(s.arg, gs.TensorArgument)
    ]
    tensors = [t for t in flatten_inputs(args, kwargs) if isinstance(t, torch.Tensor)]
    return {
        names[i] if i < len(names) else f"input_{i}": to_numpy(t) for i, t in enumerate(tensors)
    }


def _program_as_source(
    program: Any, to_numpy: Any, tensor_inputs: int
) -> tuple[list[str | None], dict[str, np.ndarray], str]:
    """(placeholder targets, None for user inputs; weights by target; the graph's Python code).
    ValueError when the program does not fit that form."""
    import torch
    from torch.export import graph_signature as gs

    module = program.graph_module
    children = [name for name, _ in module.named_children()]
    if children:
        raise ValueError(f"the program calls submodules {children} (control flow)")
    placeholders: list[str | None] = []
    weights: dict[str, np.ndarray] = {}
    tables = {**program.state_dict, **program.constants}
    for spec in program.graph_signature.input_specs:
        if spec.kind == gs.InputKind.USER_INPUT:
            if not isinstance(spec.arg, gs.TensorArgument):
                raise ValueError(f"user input {spec.arg} is not a tensor")
            placeholders.append(None)
            continue
        value = tables.get(spec.target)
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"{spec.kind.name.lower()} {spec.target} is not a tensor")
        placeholders.append(spec.target)
        weights[spec.target] = to_numpy(value.detach())
    if placeholders.count(None) != tensor_inputs:
        raise ValueError("the example inputs do not match the program's user inputs")
    return placeholders, weights, module.code
