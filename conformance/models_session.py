"""Loading and running an exported model file, and timing its inference.

Unlike op cases, model cases run with onnxruntime's default graph optimisations: that is how
users run a whole model, and the latency compared between exporters means something only then.
One intra-op thread keeps timings comparable while other cases run on the other cores.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np
import onnx

from conformance.providers import PROVIDERS, declared_input_shapes

_ORT_PROVIDER = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}
#: Timed runs for the latency median, and the time budget that cuts them short for slow models.
LATENCY_RUNS = 5
LATENCY_BUDGET_S = 5.0


class ModelSession:
    """A model file loaded for ``provider``: ``input_shapes``, ``output_shapes`` (declared),
    ``run(feeds)``, and ``latency_ms(feeds)``."""

    def __init__(self, path: Path, provider: str):
        if provider not in PROVIDERS:
            raise ValueError(f"unknown provider {provider!r}; choose one of {', '.join(PROVIDERS)}")
        header = onnx.load(str(path), load_external_data=False)
        self.input_shapes = declared_input_shapes(header)
        self.output_shapes = [_dims(value) for value in header.graph.output]
        self.provider = provider
        if provider == "reference":
            from onnx.reference import ReferenceEvaluator

            self._reference = ReferenceEvaluator(str(path))
            self._ort = None
            return
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        wanted = _ORT_PROVIDER[provider]
        providers = [wanted] if provider == "cpu" else [wanted, "CPUExecutionProvider"]
        self._ort = ort.InferenceSession(str(path), options, providers=providers)
        active = self._ort.get_providers()
        if not active or active[0] != wanted:
            raise RuntimeError(
                f"onnxruntime did not activate {wanted} (active: {active}); it silently fell "
                "back. Install onnxruntime-gpu (pip install '.[cuda]') and check the CUDA libraries."
            )

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


def _dims(value: onnx.ValueInfoProto) -> list[int | str | None] | None:
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
