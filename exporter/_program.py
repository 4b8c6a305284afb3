"""ONNXProgram: the exported model with ways to save, run, inspect and re-weight it."""

from __future__ import annotations

import contextlib
import gc
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx_ir as ir
import torch
from torch.utils import _pytree as pytree

#: Above this many bytes of initializers a model no longer fits one protobuf (2 GiB limit).
LARGE_MODEL_BYTES = 1536 * 1024 * 1024
#: Tensors at least this big go to the external data file.
EXTERNAL_DATA_THRESHOLD = 1024


def _initializer_bytes(model: ir.Model) -> int:
    return sum(
        v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value is not None
    )


def flatten_inputs(args: Sequence[Any], kwargs: dict[str, Any] | None) -> list[torch.Tensor]:
    """Inputs in graph-input order: pytree leaves, None dropped, scalars as 0-d tensors."""
    leaves = pytree.tree_leaves((tuple(args), kwargs or {}))
    out = []
    for leaf in leaves:
        if leaf is None:
            continue
        if isinstance(leaf, torch.Tensor):
            out.append(torch.view_as_real(leaf) if leaf.is_complex() else leaf)
        elif isinstance(leaf, (bool, int, float)):
            out.append(leaf)
    return out


def _to_numpy(x: Any) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        if x.dtype == torch.bfloat16:
            import ml_dtypes

            return x.view(torch.uint16).numpy().view(ml_dtypes.bfloat16)
        return x.numpy()
    return np.asarray(x)


def default_providers() -> list[str]:
    import onnxruntime as ort

    available = ort.get_available_providers()
    return [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available]


def _default_session(model_bytes_or_path: bytes | str) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(model_bytes_or_path, options, providers=default_providers())


class ONNXProgram:
    """An exported ONNX model: ``model`` (onnx_ir), ``model_proto``, ``exported_program``."""

    def __init__(
        self,
        model: ir.Model,
        exported_program: torch.export.ExportedProgram | None,
        *,
        record: Any = None,
    ) -> None:
        self.model: ir.Model = model
        self.exported_program = exported_program
        self.record = record  #: exporter._record.ExportRecord of the export that made it
        self.verification: Any = None
        self.report_path: Path | None = None
        self._session: Any = None
        self._tempdir: tempfile.TemporaryDirectory | None = None
        self._session_factory: Callable[[Any], Any] = _default_session

    def __repr__(self) -> str:
        return f"ONNXProgram(\n  model=\n{self.model}\n)"

    @property
    def capture_strategy(self) -> str | None:
        return None if self.record is None else self.record.capture_strategy

    @property
    def specialized_dims(self) -> list[Any]:
        """Dims declared dynamic (or left free) that a guard held at one size or made constant,
        each with the guard and the user's source line (``exporter._dynamic_shapes.DimAudit``).
        """
        from exporter._dynamic_shapes import specialized

        return [] if self.record is None else specialized(self.record.dim_audit)

    @property
    def model_proto(self):
        """A fresh ``onnx.ModelProto`` of the current model."""
        return ir.serde.serialize_model(self.model)

    # ------------------------------------------------------------------ save
    def save(
        self,
        destination: str | os.PathLike,
        *,
        include_initializers: bool = True,
        keep_initializers_as_inputs: bool = False,
        external_data: bool | None = None,
    ) -> None:
        """Write the model. ``external_data=None`` switches to a ``.data`` file for big models.

        ``include_initializers=False`` leaves the weights out and makes them graph inputs, so
        the file is still a valid model that takes its weights at run time.
        """
        destination = Path(destination)
        if not destination.parent.exists():
            raise FileNotFoundError(
                f"cannot save to {destination}: folder {destination.parent} does not exist"
            )
        total = _initializer_bytes(self.model)
        if external_data is None:
            external_data = total > LARGE_MODEL_BYTES
        with self._io_view(include_initializers, keep_initializers_as_inputs):
            big = [
                v
                for v in self.model.graph.initializers.values()
                if v.const_value is not None and v.const_value.nbytes >= EXTERNAL_DATA_THRESHOLD
            ]
            if external_data and big:
                data_name = destination.name + ".data"
                ir.save(
                    self.model,
                    destination,
                    external_data=data_name,
                    size_threshold_bytes=EXTERNAL_DATA_THRESHOLD,
                )
            else:
                if total > LARGE_MODEL_BYTES and include_initializers:
                    raise ValueError(
                        f"the model's weights take {total / 2**30:.1f} GiB, over protobuf's "
                        f"2 GiB limit; save with external_data=True"
                    )
                ir.save(self.model, destination)

    @contextlib.contextmanager
    def _io_view(
        self, include_initializers: bool, keep_initializers_as_inputs: bool
    ) -> Iterator[None]:
        graph = self.model.graph
        saved_inputs = list(graph.inputs)
        saved_inits = dict(graph.initializers)
        try:
            if not include_initializers:
                for name, value in saved_inits.items():
                    graph.initializers.pop(name)
                    graph.inputs.append(value)
            elif keep_initializers_as_inputs:
                for value in saved_inits.values():
                    if value not in graph.inputs:
                        graph.inputs.append(value)
            yield
        finally:
            graph.inputs.clear()
            graph.inputs.extend(saved_inputs)
            graph.initializers.clear()
            for name, value in saved_inits.items():
                graph.initializers[name] = value

    # ------------------------------------------------------------------- run
    def initialize_inference_session(self, initializer: Callable[[Any], Any] | None = None) -> None:
        """Build the onnxruntime session now (``initializer(bytes_or_path) -> session``)."""
        if initializer is not None:
            self._session_factory = initializer
        self.release()
        if _initializer_bytes(self.model) > LARGE_MODEL_BYTES:
            self._tempdir = tempfile.TemporaryDirectory()
            path = os.path.join(self._tempdir.name, "model.onnx")
            self.save(path, external_data=True)
            self._session = self._session_factory(path)
        else:
            self._session = self._session_factory(self.model_proto.SerializeToString())

    def release(self) -> None:
        """Drop the inference session and any temporary files."""
        if self._session is not None:
            self._session = None
            gc.collect()  # onnxruntime frees its arena only once the session object is gone
        if self._tempdir is not None:
            self._tempdir.cleanup()
            self._tempdir = None

    def _feeds(
        self, session: Any, args: Sequence[Any], kwargs: dict[str, Any] | None
    ) -> dict[str, np.ndarray]:
        flat = flatten_inputs(args, kwargs)
        names = [i.name for i in session.get_inputs()]
        if len(flat) != len(names):
            raise ValueError(
                f"the model takes {len(names)} inputs ({names}) but {len(flat)} tensors were "
                f"given after flattening"
            )
        return {n: _to_numpy(t) for n, t in zip(names, flat)}

    def __call__(self, *args: Any, **kwargs: Any) -> list[torch.Tensor]:
        """Run the model in onnxruntime (CUDA provider first when present)."""
        if self._session is None:
            self.initialize_inference_session()
        outs = self._session.run(None, self._feeds(self._session, args, kwargs))
        return [torch.from_numpy(np.asarray(o)) for o in outs]

    def call_reference(self, *args: Any, **kwargs: Any) -> list[torch.Tensor]:
        """Run the model with onnx's reference evaluator."""
        from onnx.reference import ReferenceEvaluator

        evaluator = ReferenceEvaluator(self.model_proto)
        flat = flatten_inputs(args, kwargs)
        names = [v.name for v in self.model.graph.inputs]
        outs = evaluator.run(None, {n: _to_numpy(t) for n, t in zip(names, flat)})
        return [torch.from_numpy(np.asarray(o)) for o in outs]

    def compute_values(
        self,
        value_names: Sequence[str],
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> list[torch.Tensor]:
        """Values of intermediate tensors, computed by one session exposing them as outputs."""
        graph = self.model.graph
        values = {v.name: v for v in ir.traversal.RecursiveGraphIterator(graph) for v in v.outputs}
        values.update({v.name: v for v in graph.inputs})
        values.update(graph.initializers)
        missing = [n for n in value_names if n not in values]
        if missing:
            raise KeyError(f"no values named {missing} in the model")
        saved = list(graph.outputs)
        try:
            graph.outputs.clear()
            graph.outputs.extend(values[n] for n in value_names)
            proto = self.model_proto
        finally:
            graph.outputs.clear()
            graph.outputs.extend(saved)
        session = self._session_factory(proto.SerializeToString())
        outs = session.run(None, self._feeds(session, args, kwargs))
        return [torch.from_numpy(np.asarray(o)) for o in outs]

    # --------------------------------------------------------------- weights
    def apply_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Replace initializer data by name (e.g. real weights after a fake-weight export)."""
        import warnings

        inits = self.model.graph.initializers
        for name, tensor in state_dict.items():
            if name not in inits:
                warnings.warn(
                    f"apply_weights: no initializer named {name!r}; skipped", stacklevel=2
                )
                continue
            t = tensor.detach()
            if t.is_complex():
                t = torch.view_as_real(t)
            inits[name].const_value = ir.tensor_adapters.TorchTensor(t.contiguous(), name=name)
        self.release()

    def optimize(self) -> None:
        """Clean up the graph with onnxscript's optimizer (constant folding, rewrites, CSE)."""
        from exporter._passes import optimize

        optimize(self.model)
        self.release()
