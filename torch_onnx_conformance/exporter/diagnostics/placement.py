"""Which nodes of an ONNX model onnxruntime's CUDA provider would run, which it leaves to CPU,
and how many Memcpy nodes the session adds, predicted on any machine.

``predict(model, "cuda")`` returns the prediction; ``export(..., report=True,
placement_provider="cuda")`` renders it as the report's "CUDA placement" section, and
``python -m torch_onnx_conformance placement MODEL.onnx --provider cuda`` (``torch_onnx_conformance/conformance/placement.py``,
which also records onnxruntime's real placement beside it) prints each CPU-placed node with its
reason, each Memcpy the session would insert, and last ``N nodes, K on CPU, M Memcpy``.

The prediction follows onnxruntime's own rules for the pinned version (constraints.txt), for a
session with graph optimizations off (ORT_DISABLE_ALL; higher levels fuse nodes differently per
provider):

* kernel lookup (``core/framework/kernel_registry.cc``): a kernel registered as ``N+`` (open
  ended) matches only a node whose schema since-version is exactly N; a closed range ``[a, b]``
  matches any since-version inside it. The since-version is the node's schema version at the
  model's opset, not the opset itself. Then every type constraint of the kernel must admit the
  node's input and output types bound to it.
* the CUDA provider's attribute refusals (its GetCapability): RNN/LSTM/GRU with activations
  other than the defaults, ``activation_alpha``/``activation_beta``/``clip``, LSTM
  ``input_forget``; ConvTranspose with asymmetric ``pads`` or ``auto_pad`` SAME_*; Cast to or
  from string.
* CPU-preferred shape subgraphs (``core/framework/fallback_cpu_capability.cc``): consumers of a
  CUDA kernel's CPU-memory outputs (Shape, Size) whose every input is such a CPU value, a small
  initializer (<= 100 elements) or a graph input, and that the kernel does not itself read from
  CPU memory, move to CPU, and so do their consumers in turn; a node with a float16, bfloat16 or
  float8 input never moves.
* copies (``core/optimizer/transformer_memcpy.cc``): one MemcpyFromHost per value produced in
  CPU memory and read from device memory, one MemcpyToHost per value produced on the device and
  read on CPU: per value, not per consuming edge. Initializers read on both sides are
  duplicated, not copied; a graph input read only on one side is copied by the session (no
  node), one read on both sides gets one MemcpyFromHost. Constant nodes become initializers when
  onnxruntime loads the model, so they are not counted as nodes.
* If/Loop/Scan bodies are placed node by node by the same rules and their copies counted inside
  each body; a body's reads of outer-scope values are fed by the control-flow kernel (no
  Memcpy node), like a graph's inputs.

The kernel table is ``placement_data/kernels.json`` beside this module (generated from
onnxruntime's own kernel registrations, see ``placement_data/generate.py``); the CPU-memory
inputs and outputs are ``placement_data/cpu_memory.toml``. Only the ai.onnx domain is in the
table: a node of another domain is reported as such.
"""

from __future__ import annotations

import functools
import heapq
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import onnx
import onnx.inliner

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

DATA = Path(__file__).resolve().parent / "placement_data"
PROVIDERS = {"cuda": "CUDAExecutionProvider", "cpu": "CPUExecutionProvider"}
SMALL_INITIALIZER = 100  # elements; fallback_cpu_capability's threshold
_NEVER_TO_CPU = {
    "tensor(float16)",
    "tensor(bfloat16)",
    "tensor(float8e4m3fn)",
    "tensor(float8e4m3fnuz)",
    "tensor(float8e5m2)",
    "tensor(float8e5m2fnuz)",
}
_RNN_DEFAULT_ACTIVATIONS = {
    "RNN": ["tanh", "tanh"],
    "GRU": ["sigmoid", "tanh", "sigmoid", "tanh"],
    "LSTM": ["sigmoid", "tanh", "tanh", "sigmoid", "tanh", "tanh"],
}


@functools.cache
def kernel_table() -> dict:
    return json.loads((DATA / "kernels.json").read_text(encoding="utf-8"))


@functools.cache
def cpu_memory_table() -> dict:
    return tomllib.loads((DATA / "cpu_memory.toml").read_text(encoding="utf-8"))


def _cpu_memory(op_type: str, since: int | None) -> tuple[frozenset[int], frozenset[int]]:
    """(inputs, outputs) a CUDA kernel of ``op_type`` at ``since`` keeps in CPU memory."""
    entry = cpu_memory_table().get(op_type)
    if entry is None or since is None or since < entry["since"]:
        return frozenset(), frozenset()
    return frozenset(entry.get("inputs", ())), frozenset(entry.get("outputs", ()))


def format_range(start: int, end: int | None) -> str:
    if end is None:
        return f"{start}+"
    return str(start) if start == end else f"[{start}, {end}]"


def version_matches(start: int, end: int | None, since: int) -> bool:
    """onnxruntime's VerifyVersion: an open-ended kernel matches its own start only."""
    return start == since or (end is not None and start <= since <= end)


def type_string(value_type: onnx.TypeProto) -> str | None:
    """``tensor(float)``, ``seq(tensor(int64))``..., as onnxruntime's kernel lists spell them."""
    kind = value_type.WhichOneof("value")
    if kind == "tensor_type":
        if not value_type.tensor_type.elem_type:
            return None
        name = onnx.TensorProto.DataType.Name(value_type.tensor_type.elem_type).lower()
        return f"tensor({name})"
    if kind == "sequence_type":
        inner = type_string(value_type.sequence_type.elem_type)
        return f"seq({inner})" if inner else None
    if kind == "optional_type":
        inner = type_string(value_type.optional_type.elem_type)
        return f"optional({inner})" if inner else None
    return None


@dataclass
class NodePlacement:
    graph: str  # "" for the main graph, "node/attribute" (nested with "/") for a body
    index: int
    name: str
    op_type: str
    domain: str
    since: int | None
    device: str  # "cuda" or "cpu"
    reason: str | None = None
    cpu_inputs: frozenset[int] = frozenset()
    cpu_outputs: frozenset[int] = frozenset()

    @property
    def label(self) -> str:
        name = self.name or f"#{self.index}"
        where = f"{self.graph}/" if self.graph else ""
        version = f"-{self.since}" if self.since is not None else ""
        domain = f"{self.domain}::" if self.domain else ""
        return f"{where}{name} ({domain}{self.op_type}{version})"


@dataclass
class Copy:
    kind: str  # MemcpyFromHost or MemcpyToHost
    value: str
    graph: str = ""


@dataclass
class Prediction:
    provider: str
    nodes: list[NodePlacement] = field(default_factory=list)
    copies: list[Copy] = field(default_factory=list)
    inlined: list[str] = field(default_factory=list)  # function ops expanded first

    @property
    def cpu_nodes(self) -> list[NodePlacement]:
        return [n for n in self.nodes if n.device == "cpu"]

    def summary(self) -> str:
        return f"{len(self.nodes)} nodes, {len(self.cpu_nodes)} on CPU, {len(self.copies)} Memcpy"

    def lines(self) -> list[str]:
        table = kernel_table()
        out = [
            f"placement on {PROVIDERS[self.provider]}, onnxruntime {table['onnxruntime']}, "
            "graph optimizations off (ORT_DISABLE_ALL)",
            f"kernel table: {table['sources'][PROVIDERS[self.provider]]}",
        ]
        out += [
            f"inlined {name}: no provider has a kernel, the op is an ONNX function"
            for name in self.inlined
        ]
        out += [f"CPU     {n.label}: {n.reason}" for n in self.cpu_nodes if n.reason]
        for c in self.copies:
            where = f" (in {c.graph})" if c.graph else ""
            out.append(f"{c.kind:<15} {c.value}{where}")
        out.append(self.summary())
        return out

    def to_dict(self) -> dict:
        """A compact record for result rows and reports."""
        return {
            "provider": self.provider,
            "nodes": len(self.nodes),
            "on_cpu": len(self.cpu_nodes),
            "memcpy": len(self.copies),
            "cpu_nodes": [f"{n.label}: {n.reason}" for n in self.cpu_nodes if n.reason],
            "copies": [f"{c.kind} {c.value}" for c in self.copies],
            "inlined": self.inlined,
        }

    def markdown(self) -> str:
        """The "CUDA placement" section body of a report."""
        lines = [f"**{self.summary()}** (predicted; {self.lines()[0]})", ""]
        if any(n.reason for n in self.cpu_nodes):
            lines += ["| node | placed on CPU because |", "|---|---|"]
            lines += [f"| `{n.label}` | {n.reason} |" for n in self.cpu_nodes if n.reason]
            lines.append("")
        if self.copies:
            lines.append("Copies: " + ", ".join(f"{c.kind} `{c.value}`" for c in self.copies) + ".")
        lines.append(f"Kernel table: {kernel_table()['sources'][PROVIDERS[self.provider]]}.")
        return "\n".join(lines)


# --------------------------------------------------------------------------- kernel lookup


def _bound_args(schema: onnx.defs.OpSchema, node: onnx.NodeProto, name: str) -> Iterator[str]:
    """The node's input and output names bound to the type constraint (or formal name) ``name``."""
    for formals, actuals in ((schema.inputs, node.input), (schema.outputs, node.output)):
        for i, actual in enumerate(actuals):
            if not actual or not formals:
                continue
            formal = formals[min(i, len(formals) - 1)]
            if (
                i >= len(formals)
                and formal.option != onnx.defs.OpSchema.FormalParameterOption.Variadic
            ):
                continue
            if formal.type_str == name or formal.name == name:
                yield actual


def _type_mismatch(kernel_types: dict, schema, node, types: dict[str, str]) -> str | None:
    for name, allowed in kernel_types.items():
        for arg in _bound_args(schema, node, name):
            actual = types.get(arg)
            if actual is not None and actual not in allowed:
                return f"{name}={actual}"
    return None


def lookup(
    provider: str, node: onnx.NodeProto, schema, types: dict[str, str]
) -> tuple[list | None, str | None]:
    """(the matching kernel row, None) or (None, why there is none) for ``provider``."""
    ep = PROVIDERS[provider]
    if node.domain not in ("", "ai.onnx"):
        return None, f"domain {node.domain!r} is not in the kernel table (ai.onnx only)"
    if schema is None:
        return None, "no ONNX schema for this op at the model's opset"
    rows = kernel_table()["providers"][ep].get(node.op_type, [])
    since = schema.since_version
    if not rows:
        return None, f"no {ep} kernel for {node.op_type} at any version"
    matching = [r for r in rows if version_matches(r[0], r[1], since)]
    if not matching:
        ranges = ", ".join(format_range(r[0], r[1]) for r in sorted(rows, key=lambda r: r[0]))
        return None, f"no kernel for version {since} ({ep} has {ranges})"
    mismatch = None
    for row in matching:
        mismatch = _type_mismatch(row[2], schema, node, types)
        if mismatch is None:
            return row, None
    return None, f"type {mismatch} (no {ep} kernel for it at version {since})"


def attribute_refusal(node: onnx.NodeProto, types: dict[str, str]) -> str | None:
    """The CUDA provider's GetCapability refusals for a node that has a kernel."""
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type in _RNN_DEFAULT_ACTIVATIONS:
        for name in ("activation_alpha", "activation_beta", "clip"):
            if name in attrs:
                return f"attribute {name} (the CUDA RNN kernels support none)"
        supported = _RNN_DEFAULT_ACTIVATIONS[node.op_type]
        given = [a.decode().lower() for a in attrs.get("activations", [])]
        if any(i >= len(supported) or a != supported[i] for i, a in enumerate(given)):
            return f"attribute activations={given} (CUDA supports only {supported[: len(given)]})"
        if node.op_type == "LSTM" and attrs.get("input_forget", 0):
            return "attribute input_forget=1"
    if node.op_type == "ConvTranspose":
        auto_pad = attrs.get("auto_pad", b"NOTSET").decode()
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            return f"attribute auto_pad={auto_pad}"
        pads = list(attrs.get("pads", []))
        rank = len(pads) // 2
        if any(pads[i] != pads[i + rank] for i in range(rank)):
            return f"attribute pads={pads} (asymmetric; cuDNN pads symmetrically)"
    if node.op_type == "Cast":
        if attrs.get("to") == onnx.TensorProto.STRING:
            return "attribute to=STRING"
        if node.input and types.get(node.input[0]) == "tensor(string)":
            return "type T1=tensor(string) (Cast from string)"
    return None


# --------------------------------------------------------------------------- graphs


@dataclass
class _Graph:
    path: str
    graph: onnx.GraphProto
    types: dict[str, str]  # this scope's value types, outer scopes included
    outer: frozenset[str]  # names visible from enclosing graphs


def _value_types(graph: onnx.GraphProto, outer: dict[str, str]) -> dict[str, str]:
    types = dict(outer)
    for value in [*graph.input, *graph.value_info, *graph.output]:
        if (t := type_string(value.type)) is not None:
            types[value.name] = t
    for init in graph.initializer:
        types[init.name] = f"tensor({onnx.TensorProto.DataType.Name(init.data_type).lower()})"
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.output:
            attr = node.attribute[0] if node.attribute else None
            if attr is not None and attr.type == onnx.AttributeProto.TENSOR:
                elem = onnx.TensorProto.DataType.Name(attr.t.data_type).lower()
                types.setdefault(node.output[0], f"tensor({elem})")
    return types


def _constant_sizes(graph: onnx.GraphProto) -> dict[str, int]:
    """Initializers (Constant nodes included: onnxruntime turns them into initializers) and
    their element counts."""
    sizes = {init.name: math.prod(init.dims) for init in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.output:
            size = 1
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.TENSOR:
                    size = math.prod(attr.t.dims)
                elif attr.type in (onnx.AttributeProto.INTS, onnx.AttributeProto.FLOATS):
                    size = len(attr.ints) + len(attr.floats)
            sizes[node.output[0]] = size
    return sizes


def _is_constant_node(node: onnx.NodeProto) -> bool:
    return node.op_type == "Constant" and node.domain in ("", "ai.onnx")


def _used_names(graph: onnx.GraphProto) -> set[str]:
    """Every name read inside ``graph`` and its nested bodies."""
    names: set[str] = set()
    for node in graph.node:
        names.update(i for i in node.input if i)
        for attr in node.attribute:
            for body in _bodies(attr):
                names |= _used_names(body)
    names.update(o.name for o in graph.output)
    return names


def _bodies(attr: onnx.AttributeProto) -> list[onnx.GraphProto]:
    if attr.type == onnx.AttributeProto.GRAPH:
        return [attr.g]
    if attr.type == onnx.AttributeProto.GRAPHS:
        return list(attr.graphs)
    return []


def _defined_names(graph: onnx.GraphProto) -> set[str]:
    names = {v.name for v in graph.input} | {i.name for i in graph.initializer}
    for node in graph.node:
        names.update(o for o in node.output if o)
    return names


def _implicit_inputs(node: onnx.NodeProto) -> set[str]:
    """Outer-scope names a control-flow node's bodies read."""
    names: set[str] = set()
    for attr in node.attribute:
        for body in _bodies(attr):
            names |= _used_names(body) - _defined_names(body)
    return names


class _Predictor:
    def __init__(self, model: onnx.ModelProto, provider: str):
        if provider not in PROVIDERS:
            raise ValueError(f"unknown provider {provider!r}; choose one of {', '.join(PROVIDERS)}")
        self.provider = provider
        self.opsets = {
            ("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import
        }
        self.prediction = Prediction(provider)

    def schema(self, node: onnx.NodeProto):
        domain = "" if node.domain == "ai.onnx" else node.domain
        version = self.opsets.get(domain)
        if version is None:
            return None
        try:
            return onnx.defs.get_schema(node.op_type, version, domain)
        except onnx.defs.SchemaError:
            return None

    def place_graph(self, scope: _Graph, graph_inputs: set[str]) -> None:
        nodes = [n for n in scope.graph.node if not _is_constant_node(n)]
        placements: list[NodePlacement] = []
        kernels: dict[int, list] = {}
        for i, node in enumerate(nodes):
            schema = self.schema(node)
            since = schema.since_version if schema is not None else None
            p = NodePlacement(scope.path, i, node.name, node.op_type, node.domain, since, "cpu")
            if self.provider == "cuda":
                kernel, reason = lookup("cuda", node, schema, scope.types)
                if kernel is not None:
                    reason = attribute_refusal(node, scope.types)
                if reason is None:
                    p.device = "cuda"
                    p.cpu_inputs, p.cpu_outputs = _cpu_memory(node.op_type, since)
                    kernels[i] = kernel
                else:
                    p.reason = reason
            if p.device == "cpu":
                cpu_kernel, cpu_reason = lookup("cpu", node, schema, scope.types)
                if cpu_kernel is None:
                    note = _no_cpu_kernel(node, schema, scope.types, cpu_reason)
                    p.reason = f"{p.reason}; {note}" if p.reason else note
            placements.append(p)
        if self.provider == "cuda":
            for i in self._cpu_preferred(nodes, placements, scope, graph_inputs):
                placements[i].device = "cpu"
                placements[i].cpu_inputs = placements[i].cpu_outputs = frozenset()
                placements[i].reason = (
                    "shape computation on CPU-memory values (fallback_cpu_capability: "
                    "cheaper on CPU than copying)"
                )
            self.prediction.copies += self._copies(nodes, placements, scope, graph_inputs)
        self.prediction.nodes += placements
        for node, p in zip(nodes, placements, strict=True):
            for attr in node.attribute:
                for k, body in enumerate(_bodies(attr)):
                    suffix = f"[{k}]" if attr.type == onnx.AttributeProto.GRAPHS else ""
                    path = f"{p.graph + '/' if p.graph else ''}{node.name or '#' + str(p.index)}"
                    inner = _Graph(
                        f"{path}/{attr.name}{suffix}",
                        body,
                        _value_types(body, scope.types),
                        scope.outer | _defined_names(scope.graph),
                    )
                    self.place_graph(inner, {v.name for v in body.input})

    def _cpu_preferred(self, nodes, placements, scope: _Graph, graph_inputs: set[str]) -> set[int]:
        consumers: dict[str, list[int]] = {}
        for i, node in enumerate(nodes):
            for name in {*node.input, *_implicit_inputs(node)}:
                if name:
                    consumers.setdefault(name, []).append(i)
        small = {n for n, size in _constant_sizes(scope.graph).items() if size <= SMALL_INITIALIZER}
        cpu_values: set[str] = set()
        heap: list[int] = []
        for node, p in zip(nodes, placements, strict=True):
            if p.device != "cuda":
                continue
            for k in p.cpu_outputs:
                if k < len(node.output) and node.output[k]:
                    cpu_values.add(node.output[k])
                    heap += consumers.get(node.output[k], [])
        heapq.heapify(heap)
        visited: set[int] = set()
        moved: set[int] = set()
        while heap:
            i = heapq.heappop(heap)
            if i in visited:
                continue
            visited.add(i)
            node, p = nodes[i], placements[i]
            if p.device != "cuda":
                continue
            to_cpu = True
            for k, name in enumerate(node.input):
                if not name:
                    continue
                if scope.types.get(name) in _NEVER_TO_CPU:
                    to_cpu = False
                    break
                if name in small or name in graph_inputs:
                    continue
                if name not in cpu_values or k in p.cpu_inputs:
                    to_cpu = False
                    break
            if to_cpu:
                moved.add(i)
                for out in node.output:
                    if out:
                        cpu_values.add(out)
                        for j in consumers.get(out, []):
                            heapq.heappush(heap, j)
        return moved

    def _copies(self, nodes, placements, scope: _Graph, graph_inputs: set[str]) -> list[Copy]:
        initializers = set(_constant_sizes(scope.graph))
        device_in: set[str] = set()
        host_in: set[str] = set()
        device_out: list[str] = []
        host_out: list[str] = []
        for node, p in zip(nodes, placements, strict=True):
            on_device = p.device == "cuda"
            for k, name in enumerate(node.input):
                if name:
                    (device_in if on_device and k not in p.cpu_inputs else host_in).add(name)
            for name in _implicit_inputs(node):
                (device_in if on_device else host_in).add(name)
            for k, name in enumerate(node.output):
                if name:
                    (device_out if on_device and k not in p.cpu_outputs else host_out).append(name)
        copies = [
            Copy("MemcpyFromHost", name, scope.path)
            for name in sorted(graph_inputs - initializers)
            if name in device_in and name in host_in
        ]
        copies += [Copy("MemcpyFromHost", n, scope.path) for n in host_out if n in device_in]
        copies += [Copy("MemcpyToHost", n, scope.path) for n in device_out if n in host_in]
        return copies


def _with_types(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with onnx's inferred value types (the declared ones when inference fails)."""
    try:
        return onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False)
    except Exception:  # noqa: BLE001 - inference is a help; declared types still serve
        return model


def load(path: str | Path) -> onnx.ModelProto:
    """A model file's graph without its external data (the prediction reads no weights)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such model file; pass the path of an .onnx file")
    try:
        return onnx.load(str(path), load_external_data=False)
    except Exception as exc:
        raise ValueError(
            f"{path}: not a readable ONNX model ({type(exc).__name__}: {exc})"
        ) from exc


def _no_cpu_kernel(node, schema, types: dict[str, str], reason: str | None) -> str:
    """What onnxruntime does with a node that the CPU provider has no kernel for either."""
    if node.domain not in ("", "ai.onnx"):
        return "not predicted: the kernel table holds the ai.onnx domain only"
    if reason and reason.startswith("type") and "float16)" in reason:
        as_float = {k: ("tensor(float)" if v == "tensor(float16)" else v) for k, v in types.items()}
        if lookup("cpu", node, schema, as_float)[0] is not None:
            return "computed in float32 between Casts on CPU (InsertCastTransformer)"
    return f"no CPU kernel either, the session fails to load: {reason}"


_ELEM = {name.lower(): value for name, value in onnx.TensorProto.DataType.items()}


def _type_proto(text: str | None) -> onnx.TypeProto:
    if text and text.startswith("tensor(") and (elem := _ELEM.get(text[7:-1])) is not None:
        return onnx.helper.make_tensor_type_proto(elem, None)
    return onnx.TypeProto()


def _function_body(node: onnx.NodeProto, schema, opset: int, types) -> onnx.FunctionProto | None:
    """The ONNX function that defines ``node``'s op (what onnxruntime inlines), or None."""

    def version(versions) -> int:  # the body's opset: the newest one not above the model's
        return max((v for v in versions if v <= opset), default=opset)

    try:
        if schema.has_function:
            data = schema.get_function_with_opset_version(version(schema.function_opset_versions))
            return onnx.FunctionProto.FromString(data) if data else schema.function_body
        if schema.has_context_dependent_function:
            inputs = [_type_proto(types.get(name)).SerializeToString() for name in node.input]
            data = schema.get_context_dependent_function_with_opset_version(
                version(schema.context_dependent_function_opset_versions),
                node.SerializeToString(),
                inputs,
            )
            return onnx.FunctionProto.FromString(data) if data else None
    except Exception:  # noqa: BLE001 - no body to inline: the node stays as it is
        return None
    return None


def _inline(node: onnx.NodeProto, body: onnx.FunctionProto, tag: str) -> list[onnx.NodeProto]:
    """``body``'s nodes wired to ``node``'s inputs and outputs, its attribute references
    resolved, its inner values and node names made unique with ``tag``."""
    rename = {f: (node.input[i] if i < len(node.input) else "") for i, f in enumerate(body.input)}
    rename |= {
        f: (node.output[i] if i < len(node.output) else "") for i, f in enumerate(body.output)
    }
    given = {a.name: a for a in node.attribute}
    defaults = {a.name: a for a in body.attribute_proto}
    nodes = []
    for k, inner in enumerate(body.node):
        copy = onnx.NodeProto()
        copy.CopyFrom(inner)
        copy.name = f"{tag}/{inner.name or inner.op_type + str(k)}"
        for names in (copy.input, copy.output):
            for i, name in enumerate(names):
                names[i] = rename.get(name, f"{tag}/{name}" if name else "")
        attributes = []
        for attr in copy.attribute:
            if attr.ref_attr_name:
                source = given.get(attr.ref_attr_name) or defaults.get(attr.ref_attr_name)
                if source is None:
                    continue
                resolved = onnx.AttributeProto()
                resolved.CopyFrom(source)
                resolved.name = attr.name
                attributes.append(resolved)
            else:
                attributes.append(attr)
        del copy.attribute[:]
        copy.attribute.extend(attributes)
        nodes.append(copy)
    return nodes


def _inline_unplaceable(model: onnx.ModelProto, provider: str) -> tuple[onnx.ModelProto, list[str]]:
    """onnxruntime's partitioner inlines a node that no provider has a kernel for when its op
    is an ONNX function (Mish, Softmax on float16 for CPU...), then places the body's nodes.
    Done on the main graph, one level deep: onnxruntime 1.31.1 placed a Softplus from an inlined
    Mish body on CPU (float16, between Casts) rather than inlining it in turn (the GPU check's
    dry run shows it). Returns the model and what was inlined."""
    predictor = _Predictor(model, provider)
    inlined: list[str] = []
    for _ in range(1):
        model = _with_types(model)
        types = _value_types(model.graph, {})
        out, changed = [], False
        for k, node in enumerate(model.graph.node):
            schema = predictor.schema(node)
            if _is_constant_node(node) or schema is None:
                out.append(node)
                continue
            claimed = lookup("cpu", node, schema, types)[0] is not None or (
                provider == "cuda" and lookup("cuda", node, schema, types)[0] is not None
            )
            opset = predictor.opsets.get("" if node.domain == "ai.onnx" else node.domain, 0)
            body = None if claimed else _function_body(node, schema, opset, types)
            if body is None or not body.node:
                out.append(node)
                continue
            tag = node.name or f"{node.op_type}{k}"
            out += _inline(node, body, tag)
            inlined.append(f"{tag} ({node.op_type}-{schema.since_version})")
            changed = True
        if not changed:
            break
        del model.graph.node[:]
        model.graph.node.extend(out)
    return model, inlined


def predict(model: onnx.ModelProto | str | Path, provider: str = "cuda") -> Prediction:
    """Where onnxruntime (the pinned version, ORT_DISABLE_ALL) places each node of ``model`` when
    the session's providers are ``provider`` (then CPU), and the Memcpy nodes it adds."""
    if not isinstance(model, onnx.ModelProto):
        model = load(model)
    else:
        model = onnx.ModelProto.FromString(model.SerializeToString())
    if model.functions:  # onnxruntime inlines a model's local functions when it loads it
        model = onnx.inliner.inline_local_functions(model)
    model, inlined = _inline_unplaceable(model, provider)
    predictor = _Predictor(model, provider)
    predictor.prediction.inlined = inlined
    model = _with_types(model)
    graph = model.graph
    initializers = {i.name for i in graph.initializer}
    scope = _Graph("", graph, _value_types(graph, {}), frozenset())
    predictor.place_graph(scope, {v.name for v in graph.input} - initializers)
    return predictor.prediction
