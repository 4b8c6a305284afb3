"""ONNXProgram: the exported model with ways to save, run, inspect and re-weight it."""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
import torch
from torch.utils import _pytree as pytree

from torch_onnx_conformance.exporter import _dtypes

#: Tensors at least this big go to the external data file.
EXTERNAL_DATA_THRESHOLD = 1024


def initializer_bytes(model: ir.Model) -> int:
    return sum(
        v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value is not None
    )


#: protobuf refuses to serialize a message of 2 GiB or more.
PROTOBUF_LIMIT_BYTES = 2**31 - 1
#: What one initializer's TensorProto adds around its bytes (name, dims, type), generously.
_TENSOR_OVERHEAD_BYTES = 512


def serialized_size_estimate(model: ir.Model) -> int:
    """The size of the model as one protobuf, from its weights' bytes plus the graph without them.

    Serializing only the graph is cheap, so a model near the 2 GiB limit is judged by what it
    would really take rather than by its weights alone.
    """
    graph = model.graph
    saved = dict(graph.initializers)
    try:
        graph.initializers.clear()
        rest = ir.serde.serialize_model(model).ByteSize()
    finally:
        for name, value in saved.items():
            graph.initializers[name] = value
    return (
        rest
        + sum(v.const_value.nbytes for v in saved.values() if v.const_value is not None)
        + _TENSOR_OVERHEAD_BYTES * len(saved)
    )


def fits_one_protobuf(model: ir.Model) -> bool:
    if initializer_bytes(model) < PROTOBUF_LIMIT_BYTES // 2:
        return True  # no graph is a GiB without its weights: skip serializing it
    # a margin for the estimate's slack: near the limit external data is the safe choice
    return serialized_size_estimate(model) < PROTOBUF_LIMIT_BYTES - 16 * 1024 * 1024


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


def _stale_data_file(destination: Path) -> Path | None:
    """The ``<name>.data`` an earlier save of ``destination`` wrote, which a save without
    external data leaves orphaned; only a file the old model really referenced counts."""
    data = destination.with_name(destination.name + ".data")
    if not (data.is_file() and destination.is_file()):
        return None
    import onnx

    try:
        old = onnx.load(str(destination), load_external_data=False)
    except Exception:  # noqa: BLE001 - an unreadable old file references nothing we know of
        return None
    for tensor in old.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location" and entry.value == data.name:
                return data
    return None


def has_no_data(tensor: torch.Tensor) -> bool:
    """A tensor with a shape and no data: on the meta device, or a fake tensor."""
    from torch._subclasses.fake_tensor import FakeTensor

    return tensor.is_meta or isinstance(tensor, FakeTensor)


class PlannedInput:
    """One flattened user input of an exported program: a graph input, or a baked value."""

    def __init__(self, name: str, baked: bool, value: Any = None, tensor: bool = False) -> None:
        self.name = name
        self.baked = baked
        self.value = value
        self.tensor = tensor  #: a tensor graph input (not a dynamic scalar)


def input_plan(exported_program: torch.export.ExportedProgram) -> list[PlannedInput]:
    """Per flattened user input, in torch.export's order: does it become a graph input?

    The translation makes a graph input of every user input that torch.export traced (a tensor
    or a dynamic scalar) and bakes in the rest (static Python scalars, None).
    """
    from torch.export import graph_signature as gs

    placeholders = [n for n in exported_program.graph.nodes if n.op == "placeholder"]
    plan = []
    for node, spec in zip(placeholders, exported_program.graph_signature.input_specs):
        if spec.kind != gs.InputKind.USER_INPUT:
            continue
        if isinstance(spec.arg, gs.ConstantArgument):
            plan.append(PlannedInput(spec.arg.name, True, spec.arg.value))
        elif node.meta.get("val") is None:
            plan.append(PlannedInput(node.name, True, None))
        else:
            is_tensor = isinstance(node.meta["val"], torch.Tensor)
            plan.append(PlannedInput(node.name, False, tensor=is_tensor))
    return plan


def _in_spec_order(program: ONNXProgram, kwargs: dict[str, Any]) -> dict[str, Any]:
    """kwargs in the order torch.export flattened them at export (a call may name them freely)."""
    spec = program.exported_program.call_spec.in_spec if program.exported_program else None
    try:
        order = list(spec.child(1).context) if spec is not None else None
    except (AttributeError, IndexError, TypeError):
        order = None
    if order is None or set(order) != set(kwargs):
        return kwargs
    return {k: kwargs[k] for k in order}


def leaves_with_paths(tree: Any) -> list[tuple[tuple[Any, ...] | None, Any]]:
    """pytree leaves with their key paths; None paths for a container registered without keys."""
    try:
        return pytree.tree_flatten_with_path(tree)[0]
    except (ValueError, TypeError, NotImplementedError):
        return [(None, leaf) for leaf in pytree.tree_leaves(tree)]


def _where(path: tuple[Any, ...] | None) -> str:
    """``args[1]`` or ``kwargs['n']`` for a leaf path of ``(args, kwargs)``."""
    if path is None:
        return "a flattened input"
    return ("args" if path[0].idx == 0 else "kwargs") + pytree.keystr(path[1:])


def _same_baked(given: Any, baked: Any) -> bool:
    if given is None or baked is None:
        return given is baked
    if isinstance(given, torch.Tensor) or isinstance(given, bool) != isinstance(baked, bool):
        return False
    try:
        return bool(given == baked)
    except Exception:  # noqa: BLE001 - values that cannot be compared are not the same
        return False


_SCALAR_NUMPY = {
    ir.DataType.INT64: np.int64,
    ir.DataType.INT32: np.int32,
    ir.DataType.FLOAT: np.float32,
    ir.DataType.DOUBLE: np.float64,
    ir.DataType.BOOL: np.bool_,
}


def _feed(leaf: Any, value: ir.Value) -> np.ndarray:
    if isinstance(leaf, torch.Tensor):
        return _dtypes.graph_array(leaf)
    # a dynamic Python scalar: the graph declares its ONNX type, numpy would pick 64-bit
    return np.asarray(leaf, dtype=_SCALAR_NUMPY.get(value.dtype))


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
        self._model: ir.Model | None = model
        #: the model serialized, standing for ``model`` until it is first read
        #: (:meth:`from_serialized`), and the graph meta that serializing drops
        self._serialized: tuple[bytes, dict[str, Any]] | None = None
        self.exported_program = exported_program
        self.record = record  #: exporter._record.ExportRecord of the export that made it
        self.verification: Any = None
        self.report_path: Path | None = None
        self._session: Any = None
        self._tempdir: tempfile.TemporaryDirectory | None = None
        self._session_factory: Callable[[Any], Any] = _default_session

    @classmethod
    def from_serialized(
        cls,
        data: bytes,
        graph_meta: dict[str, Any],
        exported_program: torch.export.ExportedProgram | None,
        *,
        record: Any = None,
    ) -> ONNXProgram:
        """A program whose model is ``data`` (a serialized ModelProto): ``model_proto`` parses
        it as it is, and ``model`` deserializes it the first time it is read, with
        ``graph_meta`` set on its graph (an export reused at another opset,
        ``exporter._translation_reuse``)."""
        program = cls(None, exported_program, record=record)
        program._serialized = (data, graph_meta)
        return program

    @property
    def model(self) -> ir.Model:
        """The model (onnx_ir); changes to it are what ``model_proto`` and ``save`` write."""
        if self._model is None and self._serialized is not None:
            data, graph_meta = self._serialized
            model = ir.serde.deserialize_model(onnx.ModelProto.FromString(data))
            model.graph.meta.update(graph_meta)
            self._model, self._serialized = model, None
        return self._model

    @model.setter
    def model(self, model: ir.Model) -> None:
        self._model, self._serialized = model, None

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
        from torch_onnx_conformance.exporter._dynamic_shapes import specialized

        return [] if self.record is None else specialized(self.record.dim_audit)

    @property
    def model_proto(self):
        """A fresh ``onnx.ModelProto`` of the current model."""
        if self._model is None and self._serialized is not None:
            return onnx.ModelProto.FromString(self._serialized[0])
        return ir.serde.serialize_model(self.model)

    # ------------------------------------------------------------------ save
    def save(
        self,
        destination: str | os.PathLike,
        *,
        include_initializers: bool = True,
        keep_initializers_as_inputs: bool = False,
        external_data: bool | None = None,
        weights: Mapping[str, torch.Tensor] | str | os.PathLike | None = None,
    ) -> None:
        """Write the model. ``external_data=None`` switches to a ``.data`` file for big models.

        ``include_initializers=False`` leaves the weights out and makes them graph inputs, so
        the file is still a valid model that takes its weights at run time. ``weights`` (a
        state dict, or a safetensors file or folder) is applied first, as by
        :meth:`apply_weights`: weights from files are streamed into the ``.data`` file one
        tensor at a time.
        """
        destination = Path(destination)
        if weights is not None:
            self.apply_weights(weights)
        if include_initializers:
            self._require_weights(f"save {destination} with its weights")
        if not destination.parent.exists():
            raise FileNotFoundError(
                f"cannot save to {destination}: folder {destination.parent} does not exist"
            )
        data_path = destination.with_name(destination.name + ".data")
        for path in (destination, data_path):
            if path.is_symlink():
                raise FileExistsError(
                    f"cannot save to {destination}: {path} is a symbolic link (to "
                    f"{os.readlink(path)}) and save never writes through one; remove the link "
                    "or save under another name"
                )
        if external_data is None:
            external_data = not fits_one_protobuf(self.model)
        # Written in a private folder beside the target, then renamed into place: a rename
        # replaces a link planted meanwhile instead of following it, and a failed save leaves
        # no half-written model. The data file keeps its final name, which the model refers to
        # by a bare file name, so it stays inside the model's folder.
        staging = Path(tempfile.mkdtemp(prefix=f".{destination.name}.", dir=destination.parent))
        try:
            staged = staging / destination.name
            stale = None
            with self._io_view(include_initializers, keep_initializers_as_inputs):
                big = [
                    v
                    for v in self.model.graph.initializers.values()
                    if v.const_value is not None and v.const_value.nbytes >= EXTERNAL_DATA_THRESHOLD
                ]
                if external_data and big:
                    ir.save(
                        self.model,
                        staged,
                        external_data=data_path.name,
                        size_threshold_bytes=EXTERNAL_DATA_THRESHOLD,
                    )
                else:
                    if include_initializers and not fits_one_protobuf(self.model):
                        size = serialized_size_estimate(self.model)
                        raise ValueError(
                            f"the model serializes to about {size / 2**30:.2f} GiB, over "
                            f"protobuf's 2 GiB limit; save with external_data=True"
                        )
                    stale = _stale_data_file(destination)
                    ir.save(self.model, staged)
            if (staging / data_path.name).exists():
                os.replace(staging / data_path.name, data_path)
            os.replace(staged, destination)
            if stale is not None:
                stale.unlink()
        finally:
            shutil.rmtree(staging, ignore_errors=True)

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
        self._require_weights("run the model")
        self.release()
        if not fits_one_protobuf(self.model):
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
        feeds = self.feeds(args, kwargs)
        names = [i.name for i in session.get_inputs()]
        if list(feeds) != names:
            raise ValueError(
                f"the model takes {len(names)} inputs ({names}) but the arguments give "
                f"{len(feeds)} ({list(feeds)})"
            )
        return feeds

    def feeds(self, args: Sequence[Any], kwargs: dict[str, Any] | None) -> dict[str, np.ndarray]:
        """The graph-input feeds for a call with ``args``/``kwargs`` in the exported form.

        Inputs that torch.export baked into the graph (Python scalars, None) get no graph input:
        they are skipped, and a baked scalar passed with another value is an error, since the
        graph would silently compute with the value it was exported with.
        """
        from torch_onnx_conformance.exporter import _caches

        _caches.register(args, kwargs)  # a cache among the inputs flattens as at export
        graph_inputs = list(self.model.graph.inputs)
        plan = None if self.exported_program is None else input_plan(self.exported_program)
        kwargs = dict(kwargs or {})
        if plan is None:
            flat = flatten_inputs(args, kwargs)
            if len(flat) != len(graph_inputs):
                raise ValueError(
                    f"the model takes {len(graph_inputs)} inputs "
                    f"({[v.name for v in graph_inputs]}) but {len(flat)} were given after "
                    f"flattening"
                )
            return {v.name: _feed(t, v) for v, t in zip(graph_inputs, flat)}
        leaves = leaves_with_paths((tuple(args), _in_spec_order(self, kwargs)))
        if len(leaves) != len(plan):
            raise ValueError(
                f"the model was exported with {len(plan)} inputs after flattening "
                f"({[p.name for p in plan]}) but {len(leaves)} were given; pass the inputs in "
                f"the structure used at export"
            )
        feeds: dict[str, np.ndarray] = {}
        graph_index = 0
        for entry, (path, leaf) in zip(plan, leaves):
            if entry.baked:
                if not _same_baked(leaf, entry.value):
                    raise ValueError(
                        f"input {entry.name} ({_where(path)}) was exported with the "
                        f"value {entry.value!r}, which torch.export baked into the graph; it "
                        f"was called with {leaf!r}. Export again with that value, or make it "
                        f"a graph input with dynamic_shapes (Dim.DYNAMIC for an int)."
                    )
                continue
            if graph_index >= len(graph_inputs):
                raise ValueError(
                    f"the model takes {len(graph_inputs)} inputs but input {entry.name} has none"
                )
            value = graph_inputs[graph_index]
            graph_index += 1
            if leaf is None or not isinstance(leaf, (torch.Tensor, bool, int, float)):
                raise ValueError(
                    f"input {entry.name} ({_where(path)}) is a graph input "
                    f"{value.name!r} but was given {type(leaf).__name__}; pass a tensor or "
                    f"number"
                )
            feeds[value.name] = _feed(leaf, value)
        return feeds

    def __call__(self, *args: Any, **kwargs: Any) -> list[torch.Tensor]:
        """Run the model in onnxruntime (CUDA provider first when present)."""
        if self._session is None:
            self.initialize_inference_session()
        return _dtypes.run_session(self._session, self._feeds(self._session, args, kwargs))

    def unflatten_outputs(self, outputs: Sequence[Any]) -> Any:
        """The flat outputs of a call rebuilt into what forward() returned at export: a
        transformers ``ModelOutput`` with its ``DynamicCache``, a tuple, a dict, ...

        Outputs that are no graph outputs (None, Python constants) come back as exported.
        """
        from torch.export import graph_signature as gs

        if self.exported_program is None:
            raise ValueError("this program has no exported program to take the output form from")
        user_outputs = [
            spec
            for spec in self.exported_program.graph_signature.output_specs
            if spec.kind == gs.OutputKind.USER_OUTPUT
        ]
        graph_count = sum(not isinstance(s.arg, gs.ConstantArgument) for s in user_outputs)
        if len(outputs) != graph_count:
            raise ValueError(
                f"the model has {graph_count} graph outputs but {len(outputs)} were given; pass "
                f"the list a call of this program returned"
            )
        given = iter(outputs)
        leaves = [
            spec.arg.value if isinstance(spec.arg, gs.ConstantArgument) else next(given)
            for spec in user_outputs
        ]
        return pytree.tree_unflatten(leaves, self.exported_program.call_spec.out_spec)

    def call_reference(self, *args: Any, **kwargs: Any) -> list[torch.Tensor]:
        """Run the model with onnx's reference evaluator."""
        from onnx.reference import ReferenceEvaluator

        self._require_weights("run the model")
        evaluator = ReferenceEvaluator(self.model_proto)
        outs = evaluator.run(None, self.feeds(args, kwargs))
        return [_dtypes.from_numpy(o) for o in outs]

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
        self._require_weights("compute values")
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
        return _dtypes.run_session(session, self._feeds(session, args, kwargs))

    # --------------------------------------------------------------- weights
    def apply_weights(
        self,
        weights: Mapping[str, torch.Tensor] | str | os.PathLike,
        *,
        strict: bool = True,
    ) -> None:
        """Replace initializer data by name (e.g. real weights after a meta-device export).

        ``weights`` is a state dict, or a safetensors file or a folder of them
        (``*.safetensors``, as checkpoints are sharded). Tensors from files are not read here:
        each is read when the model is saved or run, one at a time, so memory holds about one
        tensor rather than the model. A tied weight may come under any of its names.

        Every weight is checked before any is changed, and a bad one is an error naming it:
        a shape or dtype other than the exported one; with ``strict`` (the default) also a
        name the model has no weight of, and a weight still without data (on the meta device)
        that the given weights leave out. ``strict=False`` skips unknown names with a warning
        and leaves missing weights for a later call (running or saving still names them).
        """
        from torch_onnx_conformance.exporter._errors import InvalidExportArgumentsError

        plan, unknown = self._weights_plan(_weight_sources(weights))
        if unknown:
            shown = _first_names(unknown)
            if strict:
                raise InvalidExportArgumentsError(
                    f"apply_weights: the exported model has no weight named {shown}; pass the "
                    f"weights of the exported model, or strict=False to skip names it lacks"
                )
            import warnings

            warnings.warn(f"apply_weights: no weight named {shown}; skipped", stacklevel=2)
        if strict:
            left_out = [name for name in self.meta_weights() if name not in plan]
            if left_out:
                raise InvalidExportArgumentsError(
                    f"apply_weights: the weights leave out {_first_names(left_out)}, which the "
                    f"model has no data for (exported on the meta device){self._buffer_hint(left_out)}"
                    f"; pass them too, or strict=False to apply these and pass the rest later"
                )
        self._set_weights(plan)

    def _weights_plan(
        self, sources: dict[str, _WeightSource]
    ) -> tuple[dict[str, _WeightSource], list[str]]:
        """Initializer name -> its new data, and the given names the model has no weight of.

        A name of a weight that the exported program holds but the graph no longer uses (the
        optimizer dropped it, or it is a tied alias of one used) is not unknown."""
        from torch_onnx_conformance.exporter._errors import InvalidExportArgumentsError

        inits = self.model.graph.initializers
        aliases = self._weight_aliases()
        plan: dict[str, _WeightSource] = {}
        unknown = []
        for name, source in sources.items():
            target = name if name in inits else aliases.get(name)
            if target not in inits:
                if target is None:
                    unknown.append(name)
                continue
            want = inits[target]
            want_shape = tuple(want.shape) if want.shape is not None else None
            if want_shape is not None and source.shape != want_shape:
                raise InvalidExportArgumentsError(
                    f"apply_weights: {name!r} has shape {source.shape} but the model was "
                    f"exported with {want_shape}; pass the weights of the exported model"
                )
            if want.dtype is not None and source.dtype != want.dtype:
                raise InvalidExportArgumentsError(
                    f"apply_weights: {name!r} has dtype {source.dtype_name} but the model was "
                    f"exported with {want.dtype.name}; convert it with .to() first, or export "
                    f"the model in that dtype"
                )
            plan[target] = source
        return plan, unknown

    def _weight_aliases(self) -> dict[str, str | None]:
        """Every weight name the exported program knows -> the initializer of the same tensor
        (tied weights share one), or None where the graph holds none of them."""
        program = self.exported_program
        if program is None:
            return {}
        inits = self.model.graph.initializers
        named = {**program.state_dict, **program.constants}
        by_tensor: dict[int, list[str]] = {}
        for name, tensor in named.items():
            by_tensor.setdefault(id(tensor), []).append(name)
        aliases: dict[str, str | None] = {}
        for names in by_tensor.values():
            used = next((n for n in names if n in inits), None)
            for name in names:
                aliases[name] = used
        return aliases

    def _buffer_hint(self, names: Sequence[str]) -> str:
        if self.exported_program is None:
            return ""
        from torch.export import graph_signature as gs

        buffers = [
            spec.target
            for spec in self.exported_program.graph_signature.input_specs
            if spec.kind == gs.InputKind.BUFFER and spec.persistent is False
        ]
        left = [name for name in names if name in buffers]
        if not left:
            return ""
        return (
            f"; {_first_names(left)} are non-persistent buffers, which checkpoints do not "
            f"hold: compute them (the module builds them in its __init__) and pass them in a "
            f"state dict"
        )

    def _set_weights(self, plan: Mapping[str, _WeightSource]) -> None:
        inits = self.model.graph.initializers
        for name, source in plan.items():
            inits[name].const_value = source.tensor(name)
        self.release()

    @contextlib.contextmanager
    def meta_weights_as_inputs(self) -> Iterator[list[str]]:
        """Within, the weights without data are graph inputs, so a pass that reads initializers
        (the optimizer's constant folding) leaves them alone; afterwards they are initializers
        again, those the pass left unused dropped."""
        graph = self.model.graph
        names = self.meta_weights()
        hidden = [graph.initializers.pop(name) for name in names]
        # rewrite rules read a value's const_value wherever it is: an input must have none
        shapes_only = [value.const_value for value in hidden]
        for value in hidden:
            value.const_value = None
        graph.inputs.extend(hidden)
        try:
            yield names
        finally:
            kept = [v for v in graph.inputs if all(v is not h for h in hidden)]
            graph.inputs.clear()
            graph.inputs.extend(kept)
            outputs = set(graph.outputs)
            for value, tensor in zip(hidden, shapes_only):
                value.const_value = tensor
                if value.uses() or value in outputs:
                    graph.register_initializer(value)

    def meta_weights(self) -> list[str]:
        """Initializers on the meta device (or fake tensors of a model built under
        FakeTensorMode): shapes without data, until apply_weights fills them."""
        return [
            name
            for name, value in self.model.graph.initializers.items()
            if isinstance(value.const_value, ir.tensor_adapters.TorchTensor)
            and has_no_data(value.const_value.raw)
        ]

    def _require_weights(self, action: str) -> None:
        missing = self.meta_weights()
        if missing:
            from torch_onnx_conformance.exporter._errors import InvalidExportArgumentsError

            shown = ", ".join(missing[:5]) + (
                f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            )
            raise InvalidExportArgumentsError(
                f"cannot {action}: the weights {shown} are on the meta device (shapes without "
                f"data); call apply_weights(state_dict) with the real weights first"
            )

    def optimize(self) -> None:
        """Clean up the graph with onnxscript's optimizer (constant folding, rewrites, CSE).

        Weights still on the meta device take part as inputs: nothing is folded from them."""
        from torch_onnx_conformance.exporter._passes import optimize

        with self.meta_weights_as_inputs():
            optimize(self.model)
        self.release()


def _first_names(names: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(repr(n) for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


#: safetensors' dtype names (its header format) as torch dtypes.
_SAFETENSORS_DTYPES = {
    "BOOL": torch.bool,
    "U8": torch.uint8,
    "I8": torch.int8,
    "I16": torch.int16,
    "U16": torch.uint16,
    "I32": torch.int32,
    "U32": torch.uint32,
    "I64": torch.int64,
    "U64": torch.uint64,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F32": torch.float32,
    "F64": torch.float64,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
}


class _WeightSource:
    """One weight to apply: its shape and dtype now, its data when asked for."""

    def __init__(
        self,
        shape: tuple[int, ...],
        torch_dtype: torch.dtype,
        load: Callable[[], torch.Tensor],
        lazy: bool,
    ) -> None:
        self.shape = shape
        self.dtype_name = str(torch_dtype)
        self.dtype = _dtypes.to_ir(torch_dtype)
        self._load = load
        self._lazy = lazy

    def tensor(self, name: str) -> ir.TensorProtocol:
        if not self._lazy:
            return ir.tensor_adapters.TorchTensor(self._load(), name=name)
        # read at each use and dropped after it: saving streams the weights one at a time
        return ir.LazyTensor(
            lambda: ir.tensor_adapters.TorchTensor(self._load()),
            dtype=self.dtype,
            shape=ir.Shape(self.shape),
            name=name,
        )


def _from_tensor(name: str, tensor: Any) -> _WeightSource:
    from torch_onnx_conformance.exporter._errors import InvalidExportArgumentsError

    if not isinstance(tensor, torch.Tensor):
        raise InvalidExportArgumentsError(
            f"apply_weights: {name!r} is a {type(tensor).__name__}, not a tensor"
        )
    t = tensor.detach()
    if t.is_complex():
        t = torch.view_as_real(t)
    t = t.contiguous()
    return _WeightSource(tuple(t.shape), t.dtype, lambda: t, lazy=False)


def _from_safetensors(path: Path, name: str, shape: list[int], dtype: str) -> _WeightSource:
    from torch_onnx_conformance.exporter._errors import InvalidExportArgumentsError

    if dtype not in _SAFETENSORS_DTYPES:
        raise InvalidExportArgumentsError(
            f"apply_weights: {name!r} in {path} is of safetensors dtype {dtype}, which ONNX "
            f"has no type for"
        )

    def load() -> torch.Tensor:
        from safetensors import safe_open

        # opened per tensor: the file's memory map goes with it, so pages of tensors already
        # written do not pile up in the process
        with safe_open(str(path), framework="pt") as handle:
            return handle.get_tensor(name)

    return _WeightSource(tuple(shape), _SAFETENSORS_DTYPES[dtype], load, lazy=True)


def _weight_sources(weights: Any) -> dict[str, _WeightSource]:
    """Name -> weight for a state dict, a safetensors file, or a folder of safetensors files."""
    from torch_onnx_conformance.exporter._errors import InvalidExportArgumentsError

    if isinstance(weights, Mapping):
        return {name: _from_tensor(name, tensor) for name, tensor in weights.items()}
    if not isinstance(weights, (str, os.PathLike)):
        raise InvalidExportArgumentsError(
            f"apply_weights: weights must be a state dict or the path of a safetensors file or "
            f"folder, not {type(weights).__name__}"
        )
    path = Path(weights)
    if path.is_dir():
        files = sorted(path.glob("*.safetensors"))
        if not files:
            raise InvalidExportArgumentsError(
                f"apply_weights: folder {path} holds no *.safetensors file"
            )
    elif path.is_file():
        files = [path]
    else:
        raise InvalidExportArgumentsError(
            f"apply_weights: {path} does not exist; pass a safetensors file or a folder of them"
        )
    from safetensors import safe_open

    sources: dict[str, _WeightSource] = {}
    where: dict[str, Path] = {}
    for file in files:
        try:
            with safe_open(str(file), framework="pt") as handle:
                header = {n: handle.get_slice(n) for n in handle.keys()}
                entries = {n: (s.get_shape(), s.get_dtype()) for n, s in header.items()}
        except Exception as exc:  # noqa: BLE001 - any unreadable file is named with the reason
            raise InvalidExportArgumentsError(
                f"apply_weights: cannot read {file} as safetensors ({type(exc).__name__}: {exc})"
            ) from exc
        for name, (shape, dtype) in entries.items():
            if name in where:
                raise InvalidExportArgumentsError(
                    f"apply_weights: {name!r} is in both {where[name]} and {file}; a folder "
                    f"must hold each weight once"
                )
            where[name] = file
            sources[name] = _from_safetensors(file, name, shape, dtype)
    return sources
