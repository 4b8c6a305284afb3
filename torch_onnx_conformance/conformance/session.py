"""Runtime sessions for the three providers: onnxruntime CPU, onnxruntime CUDA, and onnx's
reference evaluator, behind one small interface: ``Session`` for an op case's in-memory model,
``ModelSession`` for a zoo model's file.

Unlike op cases, model cases run with onnxruntime's default graph optimisations: that is how
users run a whole model, and the latency compared between exporters means something only then.
One intra-op thread keeps timings comparable while other cases run on the other cores.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import numpy as np
import onnx

from torch_onnx_conformance.conformance.case import PROVIDERS

_ORT_PROVIDER = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}
#: CUDA provider options for comparisons: TF32 off, so that float32 MatMul/Conv compute in
#: float32 and the float32 tolerances of torch_onnx_conformance/conformance/tolerances.toml hold on CUDA too.
CUDA_OPTIONS = {"use_tf32": "0"}
#: Set (to 1) to record the predicted and real placement on the CPU provider too (the GPU
#: check's dry run); CUDA rows always record it.
RECORD_PLACEMENT_ENV = "CONFORMANCE_RECORD_PLACEMENT"


def _records_placement(provider: str) -> bool:
    return provider == "cuda" or (provider == "cpu" and os.environ.get(RECORD_PLACEMENT_ENV) == "1")


def placement_record(model, provider: str, session) -> dict | None:
    """The prediction of torch_onnx_conformance/conformance/placement.py beside onnxruntime's real placement, for a
    result row's extra; None where not recorded. Never fails the case."""
    if not _records_placement(provider):
        return None
    from torch_onnx_conformance.conformance import placement

    try:
        return placement.record(model, provider, session)
    except Exception as exc:  # noqa: BLE001 - the case's run matters more than this record
        return {"error": f"{type(exc).__name__}: {exc}"}


def _check_provider(provider: str) -> None:
    if provider not in PROVIDERS:
        raise ValueError(f"unknown provider {provider!r}; choose one of {', '.join(PROVIDERS)}")


class Session:
    """A loaded model: ``input_shapes`` as declared by the graph, ``run(feeds)`` -> outputs."""

    def __init__(self, model: onnx.ModelProto, provider: str):
        _check_provider(provider)
        self.provider = provider
        self.input_shapes = declared_input_shapes(model)
        self._bf16_outputs = [
            i
            for i, out in enumerate(model.graph.output)
            if out.type.tensor_type.elem_type == onnx.TensorProto.BFLOAT16
        ]
        if provider == "reference":
            from onnx.reference import ReferenceEvaluator

            self._reference = ReferenceEvaluator(model)
            self._ort = None
        else:
            model = _readable_outputs(model, self._bf16_outputs)
            self._ort = ort_session(model, provider, optimize_graph=False)
        self.placement = placement_record(model, provider, self._ort)

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        unknown = set(feeds) - set(self.input_shapes)
        feeds = {name: value for name, value in feeds.items() if name not in unknown}
        if self._ort is None:
            return [np.asarray(out) for out in self._reference.run(None, feeds)]
        if any(_is_bf16(value) for value in feeds.values()):
            outputs = self._run_ort_values(feeds)
        else:
            outputs = [np.asarray(out) for out in self._ort.run(None, feeds)]
        if self._bf16_outputs:
            import ml_dtypes

            for i in self._bf16_outputs:
                outputs[i] = outputs[i].astype(ml_dtypes.bfloat16)
        return outputs

    def _run_ort_values(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        import onnxruntime as ort

        values = {}
        for name, value in feeds.items():
            if _is_bf16(value):
                values[name] = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
                    value.view(np.uint16), onnx_element_type=onnx.TensorProto.BFLOAT16
                )
            else:
                values[name] = ort.OrtValue.ortvalue_from_numpy(value)
        return [out.numpy() for out in self._ort.run_with_ort_values(None, values)]


def _is_bf16(value: np.ndarray) -> bool:
    return value.dtype.name == "bfloat16"


def _readable_outputs(model: onnx.ModelProto, bf16_outputs: list[int]) -> onnx.ModelProto:
    """onnxruntime's Python API cannot return bfloat16 arrays: read such outputs through a Cast
    to float32 (exact), converted back to bfloat16 after the run."""
    if not bf16_outputs:
        return model
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for i in bf16_outputs:
        out = model.graph.output[i]
        cast_name = f"{out.name}__read_as_float32"
        model.graph.node.append(
            onnx.helper.make_node("Cast", [out.name], [cast_name], to=onnx.TensorProto.FLOAT)
        )
        out.name = cast_name
        out.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    return model


def ort_session(model: onnx.ModelProto | str, provider: str, *, optimize_graph: bool):
    """One-threaded onnxruntime session on ``provider`` for a model (proto, or a file path for
    models with external data); an error when onnxruntime silently falls back to another
    provider. Op cases turn graph optimisations off (they test translations, not onnxruntime's
    fusions); model cases keep them, because that is how users run a whole model."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    if not optimize_graph:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    if _records_placement(provider):
        from torch_onnx_conformance.conformance.placement import RECORD_ASSIGNMENT

        options.add_session_config_entry(RECORD_ASSIGNMENT, "1")
    wanted = _ORT_PROVIDER[provider]
    providers = [wanted] if provider == "cpu" else [(wanted, CUDA_OPTIONS), "CPUExecutionProvider"]
    source = model if isinstance(model, str) else model.SerializeToString()
    session = ort.InferenceSession(source, options, providers=providers)
    active = session.get_providers()
    if not active or active[0] != wanted:
        raise RuntimeError(
            f"onnxruntime did not activate {wanted} (active: {active}); it silently fell back. "
            "Install onnxruntime-gpu (pip install '.[cuda]') and check the CUDA libraries."
        )
    return session


def declared_input_shapes(model: onnx.ModelProto) -> dict[str, list[int | str | None]]:
    """Graph inputs (initializers excluded) with each dim as an int, a symbol name, or None."""
    initializers = {init.name for init in model.graph.initializer}
    return {
        value.name: declared_dims(value) or []
        for value in model.graph.input
        if value.name not in initializers
    }


def declared_dims(value: onnx.ValueInfoProto) -> list[int | str | None] | None:
    """A value's declared shape, each dim an int, a symbol name or None; None without a shape."""
    tensor_type = value.type.tensor_type
    if not value.type.HasField("tensor_type") or not tensor_type.HasField("shape"):
        return None
    dims: list[int | str | None] = []
    for dim in tensor_type.shape.dim:
        if dim.HasField("dim_value"):
            dims.append(dim.dim_value)
        elif dim.HasField("dim_param"):
            dims.append(dim.dim_param)
        else:
            dims.append(None)
    return dims


def cuda_available() -> bool:
    import onnxruntime as ort

    return "CUDAExecutionProvider" in ort.get_available_providers()


#: Timed runs for the latency median, and the time budget that cuts them short for slow models.
LATENCY_RUNS = 5
LATENCY_BUDGET_S = 5.0


class ModelSession:
    """A model file loaded for ``provider``: ``input_shapes``, ``output_shapes`` (declared),
    ``run(feeds)``, and ``latency_ms(feeds)``."""

    def __init__(self, path: Path, provider: str):
        _check_provider(provider)
        header = onnx.load(str(path), load_external_data=False)
        self.input_shapes = declared_input_shapes(header)
        self.output_shapes = [declared_dims(value) for value in header.graph.output]
        self.provider = provider
        if provider == "reference":
            from onnx.reference import ReferenceEvaluator

            self._reference = ReferenceEvaluator(str(path))
            self._ort = None
            self.placement = None
            return
        self._ort = ort_session(str(path), provider, optimize_graph=True)
        # Model sessions keep onnxruntime's optimizations, which fuse per provider: the real
        # placement can differ from the prediction (made for ORT_DISABLE_ALL) by those fusions.
        self.placement = placement_record(path, provider, self._ort)

    def missing_inputs(self, feeds: dict[str, np.ndarray]) -> list[str]:
        return [name for name in self.input_shapes if name not in feeds]

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        feeds = {name: value for name, value in feeds.items() if name in self.input_shapes}
        if self._ort is None:
            return [np.asarray(out) for out in self._reference.run(None, feeds)]
        return [np.asarray(out) for out in self._ort.run(None, feeds)]

    def latency_ms(self, feeds: dict[str, np.ndarray]) -> tuple[float, float] | None:
        """(CPU ms, wall ms): medians over a few runs, after at least one run warmed the session
        up; None for the reference evaluator, whose speed means nothing.

        The session has one thread, so the process's CPU time of a run is its latency on an
        idle core, and unlike wall time it stays meaningful while other cases load the machine.
        """
        if self._ort is None:
            return None
        feeds = {name: value for name, value in feeds.items() if name in self.input_shapes}
        cpu, wall = [], []
        started = time.perf_counter()
        for _ in range(LATENCY_RUNS):
            begin_cpu, begin_wall = time.process_time(), time.perf_counter()
            self._ort.run(None, feeds)
            cpu.append((time.process_time() - begin_cpu) * 1000.0)
            wall.append((time.perf_counter() - begin_wall) * 1000.0)
            if len(wall) >= 3 and time.perf_counter() - started > LATENCY_BUDGET_S:
                break
        return statistics.median(cpu), statistics.median(wall)
