"""What one export did, stage by stage: the input of ``report=True`` and of diagnostics."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from torch_onnx_conformance.exporter.stages import RECORD_STAGES

if TYPE_CHECKING:
    from torch_onnx_conformance.exporter.diagnostics.verify import VerificationResult

#: Stage names, in order. Each is "ok", "failed", "skipped" or absent (not reached).
STAGES = RECORD_STAGES


@dataclasses.dataclass
class ExportRecord:
    model_class: str = ""
    opset: int = 0
    status: dict[str, str] = dataclasses.field(default_factory=dict)
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    #: capture attempts: exporter._capture.Attempt objects (strategy, seconds, error, traceback)
    capture_attempts: list[Any] = dataclasses.field(default_factory=list)
    capture_strategy: str | None = None
    #: names of the model-side capture rewrites capture applied (exporter._capture_patches)
    capture_patches: list[str] = dataclasses.field(default_factory=list)
    decomposition_reason: str | None = None
    errors: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    unsupported: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    exported_program: Any = None  # the program that was translated
    captured_program: Any = None  # the program as captured, before decomposition
    model: Any = None  # onnx_ir.Model once translated
    verification: VerificationResult | None = None  # when verify ran
    dumped_program: Any = None  # pathlib.Path of the .pt2 dump_exported_program=True wrote
    verify_requested: bool = False  # verify=True (or "strict") was passed, whether it ran or not
    registry: Any = None  # the ops Registry translation used, custom_translation_table included
    notes: list[str] = dataclasses.field(default_factory=list)
    #: exporter._dynamic_shapes.DimAudit per declared-dynamic or guard-held input dim
    dim_audit: list[Any] = dataclasses.field(default_factory=list)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time a stage and record its outcome; exceptions propagate unchanged."""
        start = time.perf_counter()
        try:
            yield
        except BaseException as exc:
            self.status[name] = "failed"
            self.add_error(name, exc)
            raise
        else:
            self.status[name] = "ok"
        finally:
            self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - start

    def add_error(self, stage: str, exc: BaseException) -> None:
        import traceback

        self.errors.append(
            {
                "stage": stage,
                "type": type(exc).__name__,
                "message": str(exc),
                "traceback": "".join(traceback.format_exception(exc)),
                "source": getattr(exc, "source", None),
            }
        )

    @property
    def failed_stage(self) -> str | None:
        for name in self.status:
            if self.status[name] == "failed":
                return name
        return None
