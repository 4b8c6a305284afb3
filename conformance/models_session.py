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

from conformance.providers import PROVIDERS, declared_dims, declared_input_shapes, ort_session

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
        self.output_shapes = [declared_dims(value) for value in header.graph.output]
        self.provider = provider
        if provider == "reference":
            from onnx.reference import ReferenceEvaluator

            self._reference = ReferenceEvaluator(str(path))
            self._ort = None
            return
        self._ort = ort_session(str(path), provider, optimize_graph=True)

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
