"""One translation, several opsets: an export under a ``capture_key`` keeps what translation and
optimization made of the kept capture, with every choice they made by the opset, and an export
at another opset that would make each of those choices the same way takes a copy of it instead
of translating again (``exporter._capture_cache``).

What the model depends on, besides the capture and the request, is the opset, and the export
reads it in three ways, each recorded while translation and optimization run:

- **comparisons**: the opset is a :class:`TrackedOpset`, an ``int`` that notes every comparison
  made with it (``ctx.has("Gelu")`` is ``opset >= 20``; onnxscript's folder picks its evaluators
  by comparing versions, onnx's reference implementation too). Another opset makes the same
  choice when each comparison gives the same answer for it.
- **schemas**: ONNX's schema lookups (``onnx.defs.get_schema``, which onnxscript's shape
  inference and onnx_ir's removal of unused optional outputs call with the model's opset) are
  noted with the schema found. Another opset finds the same one, or a later one reached by
  versions that each only allow more types, with the same inputs, outputs, attributes (their
  defaults included) and documentation, or with differences reviewed to concern only the types
  added (:func:`same_meaning`, :data:`NEW_TYPES_ONLY`). ONNX versions an operator whenever its
  schema changes, types included; most versions between 18 and 26 only add types. The
  constant folder notes the schema of every node it visits and reads the plain number.
- **anything else** (hashing it, arithmetic, printing it) makes the translation one that is
  never reused: what it did with the number cannot be replayed.

A fusion asks for the opset without recording it where its answer changes nothing: its rules
cannot match the graph (some op type each rule needs is missing) and its clean-up removes
nothing, or they apply and rewrite nothing, or they do not apply and, tried on a copy, would
not have (``exporter._fusions``).

What is kept is the model an export handed back, serialized, with the graph's FX value map;
a reuse is that model with the opset imports set to its own opset, parsed only when asked for
(``ONNXProgram.from_serialized``: ``model_proto`` parses the bytes, ``model`` deserializes
them the first time it is read). Exports reused this way equal fresh ones byte for byte
(``tests/exporter/test_translation_reuse.py``, over op samples at opsets 18, 20, 23 and 26).
Not reused: exports with custom translations, weights without data or more than
``KEEP_WEIGHT_BYTES`` of weights, and opsets below the op library's oldest (they are converted
down after translation).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import onnx
import onnx.defs
import onnx_ir as ir

#: Translations kept per capture: a case's opsets are few, and those that choose differently
#: each keep their own.
KEPT_PER_CAPTURE = 4


class OpsetChoices:
    """What an export read of its opset: comparisons and schema lookups, in order, or the
    reason it cannot be replayed."""

    def __init__(self) -> None:
        self.compared: list[tuple[str, Any, bool]] = []
        self.schemas: dict[tuple[str, str], int | None] = {}
        self.opaque: str | None = None

    def holds_at(self, opset: int) -> bool:
        """Whether an export at ``opset`` makes every recorded choice the same way."""
        if self.opaque is not None:
            return False
        for name, other, answer in self.compared:
            operand = opset if other is SELF else other
            if getattr(int, name)(opset, operand) is not answer:
                return False
        return all(
            same_meaning(op_type, domain, since, opset)
            for (op_type, domain), since in self.schemas.items()
        )


#: The operand of a comparison of the opset with itself (or with another tracked opset).
SELF = object()


def _compare(name: str):
    plain = getattr(int, name)

    def compare(self, other):
        answer = plain(self, other)
        if answer is not NotImplemented:
            self.choices.compared.append(
                (name, SELF if isinstance(other, TrackedOpset) else other, answer)
            )
        return answer

    compare.__name__ = name
    return compare


def _opaque(name: str):
    plain = getattr(int, name)

    def use(self, *args):
        if self.choices.opaque is None:
            self.choices.opaque = name
        return plain(self, *args)

    use.__name__ = name
    return use


class TrackedOpset(int):
    """An opset number that notes what is done with it into its :class:`OpsetChoices`.
    ``int(opset)`` (and the C code of onnx and protobuf, which read the number directly) is
    not noted: :func:`plain` gives the number to ask something that changes nothing."""

    choices: OpsetChoices

    def __new__(cls, value: int, choices: OpsetChoices) -> TrackedOpset:
        tracked = super().__new__(cls, value)
        tracked.choices = choices
        return tracked

    __lt__ = _compare("__lt__")
    __le__ = _compare("__le__")
    __gt__ = _compare("__gt__")
    __ge__ = _compare("__ge__")
    __eq__ = _compare("__eq__")
    __ne__ = _compare("__ne__")
    __hash__ = _opaque("__hash__")
    __bool__ = _opaque("__bool__")
    __str__ = _opaque("__str__")
    __repr__ = _opaque("__repr__")
    __format__ = _opaque("__format__")
    for _name in (
        "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__floordiv__",
        "__rfloordiv__", "__truediv__", "__rtruediv__", "__mod__", "__rmod__", "__neg__",
        "__pow__", "__and__", "__or__", "__xor__", "__lshift__", "__rshift__",
    ):  # fmt: skip
        locals()[_name] = _opaque(_name)
    del _name


def plain(opset: int) -> int:
    """The number itself, noting nothing: for a question whose answer changes nothing."""
    return int.__int__(opset)


# ------------------------------------------------------------------------------ schemas
def _noting_get_schema(get_schema):
    @functools.wraps(get_schema)
    def noting(op_type, *args, **kwargs):
        version = args[0] if args else kwargs.get("max_inclusive_version")
        if not isinstance(version, TrackedOpset):
            return get_schema(op_type, *args, **kwargs)
        domain = args[1] if len(args) > 1 else kwargs.get("domain", "")
        try:
            schema = get_schema(op_type, *args, **kwargs)
        except onnx.defs.SchemaError:
            version.choices.schemas.setdefault((op_type, domain), None)
            raise
        version.choices.schemas.setdefault((op_type, domain), schema.since_version)
        return schema

    noting.noting_opset = True
    return noting


def note_schema_lookups() -> None:
    """Make ``onnx.defs.get_schema`` note the lookups made with a :class:`TrackedOpset` (once,
    for good: with any other version it is the function it wraps)."""
    if not getattr(onnx.defs.get_schema, "noting_opset", False):
        onnx.defs.get_schema = _noting_get_schema(onnx.defs.get_schema)


def _schema(op_type: str, domain: str, opset: int):
    try:
        return onnx.defs.get_schema(op_type, plain(opset), domain)
    except onnx.defs.SchemaError:
        return None


@functools.cache
def same_meaning(op_type: str, domain: str, since: int | None, opset: int) -> bool:
    """Whether the schema ``op_type`` had where it was found at version ``since`` (None: not
    found) means the same at ``opset``: the same version, or, at a later opset, each version
    on the way only allowing more types, with the same inputs, outputs, attributes (defaults
    included) and documentation, or with the differences :data:`NEW_TYPES_ONLY` lists."""
    schema = _schema(op_type, domain, opset)
    if schema is None or since is None:
        return schema is None and since is None
    if schema.since_version == since:
        return True
    if schema.since_version < since:
        return False  # an older version allows no more types
    before = onnx.defs.get_schema(op_type, since, domain)
    while before.since_version < schema.since_version:
        after = onnx.defs.get_schema(op_type, _next_version(op_type, domain, before), domain)
        reviewed = NEW_TYPES_ONLY.get((domain, op_type, before.since_version, after.since_version))
        ignored = () if reviewed is None else reviewed[0]
        if _signature(before, ignored, reviewed is None) != _signature(
            after, ignored, reviewed is None
        ) or not _wider(before, after):
            return False
        before = after
    return True


def _next_version(op_type: str, domain: str, schema) -> int:
    """The first opset past ``schema``'s version where ``op_type`` has a newer version."""
    opset = schema.since_version + 1
    while onnx.defs.get_schema(op_type, opset, domain).since_version == schema.since_version:
        opset += 1
    return opset


def _wider(before, after) -> bool:
    """Whether ``after`` allows every type ``before`` allows, for each type parameter."""
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in after.type_constraints}
    return all(
        c.type_param_str in allowed and set(c.allowed_type_strs) <= allowed[c.type_param_str]
        for c in before.type_constraints
    )


#: Version steps of operators whose attributes and documentation change only for the types the
#: newer version adds, as reviewed here from ONNX's own text: (domain, op, from, to) -> (the
#: attributes added, what the documentation adds). A node of the older version's types means
#: the same without them.
NEW_TYPES_ONLY: dict[tuple[str, str, int, int], tuple[tuple[str, ...], str]] = {
    ("", "Cast", 13, 19): (("saturate",), "saturate 'only applies for float 8 conversion'"),
    ("", "Cast", 23, 24): (
        ("round_mode",),
        "round_mode 'only applies to casting to float8e8m0'; float8 Inf rows",
    ),
    ("", "CastLike", 15, 19): (("saturate",), "as Cast 19"),
    ("", "CastLike", 23, 24): (("round_mode",), "as Cast 24"),
    ("", "ReduceMax", 18, 20): ((), "bool added: 'False < True'"),
    ("", "ReduceMin", 18, 20): ((), "bool added: 'False < True'"),
}


def _signature(schema, ignored: tuple[str, ...] = (), with_doc: bool = True) -> tuple:
    """What a schema says besides its types: inputs, outputs, attributes with their defaults
    (less ``ignored``), and its documentation (``with_doc``)."""

    def formals(params):
        return tuple(
            (p.name, str(p.option), p.is_homogeneous, p.min_arity, p.type_str) for p in params
        )

    attributes = tuple(
        sorted(
            (name, str(a.type), a.required, a.default_value.SerializeToString())
            for name, a in schema.attributes.items()
            if name not in ignored
        )
    )
    return (
        formals(schema.inputs),
        formals(schema.outputs),
        attributes,
        schema.has_function,
        schema.has_context_dependent_function,
        schema.doc if with_doc else None,
    )


# ------------------------------------------------------------------------- kept models
@dataclasses.dataclass(frozen=True)
class Translation:
    """An export's model as it handed it back (serialized), the opset it was made at, what it
    chose by that opset and what else it depended on."""

    opset: int
    choices: OpsetChoices
    depends_on: tuple
    proto: bytes
    #: the graph's FX node -> ONNX value map (``_translate.FX_VALUES_KEY``), not serialized
    fx_values: dict


#: Models whose weights take more than this are not kept (the copy is a serialized model).
KEEP_WEIGHT_BYTES = 64 * 2**20


def untrack(model: ir.Model) -> bool:
    """Put plain numbers in place of tracked opsets in the model's opset imports; whether no
    tracked number is left anywhere else in it (an attribute made of one, say)."""
    for graph_like in (model.graph, *model.functions.values()):
        for domain, version in list(graph_like.opset_imports.items()):
            if isinstance(version, TrackedOpset):
                graph_like.opset_imports[domain] = plain(version)
    from torch_onnx_conformance.exporter._passes import walk_nodes

    for _, node in walk_nodes(model):
        for attr in node.attributes.values():
            value = getattr(attr, "value", None)
            values = value if isinstance(value, (list, tuple)) else (value,)
            if any(isinstance(v, TrackedOpset) for v in values):
                return False
    return True


def keep(translations: list[Translation], choices: OpsetChoices, depends_on, program) -> None:
    """Keep ``program`` (an export made with ``choices``, its opset numbers plain again:
    :func:`untrack`) for other opsets, unless its weights are large."""
    from torch_onnx_conformance.exporter._program import initializer_bytes
    from torch_onnx_conformance.exporter._translate import FX_VALUES_KEY

    model = program.model
    opset = model.opset_imports.get("")
    if choices.opaque is not None or opset is None or not _at_one_opset(model, opset):
        return
    if initializer_bytes(model) > KEEP_WEIGHT_BYTES:
        return
    if len(translations) >= KEPT_PER_CAPTURE:
        del translations[0]
    proto = program.model_proto.SerializeToString()
    fx_values = dict(model.graph.meta.get(FX_VALUES_KEY) or {})
    translations.append(Translation(plain(opset), choices, depends_on, proto, fx_values))


def _at_one_opset(model: ir.Model, opset: int) -> bool:
    """Whether the graph and every function import the default domain at ``opset`` (what
    :func:`copy_at` sets for another opset)."""
    return all(
        graph_like.opset_imports.get("", opset) == plain(opset)
        for graph_like in (model.graph, *model.functions.values())
    )


def find(translations: list[Translation], opset: int, depends_on) -> Translation | None:
    """A kept translation that an export at ``opset`` would make alike, if any."""
    for translation in translations:
        if translation.depends_on == depends_on and translation.choices.holds_at(opset):
            return translation
    return None


def copy_at(translation: Translation, opset: int) -> bytes:
    """The kept model at ``opset``, serialized: the default domain's imports set to it."""
    proto = onnx.ModelProto.FromString(translation.proto)
    for imports in (proto.opset_import, *(f.opset_import for f in proto.functions)):
        for entry in imports:
            if entry.domain == "":
                entry.version = plain(opset)
    return proto.SerializeToString()
