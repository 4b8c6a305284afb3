"""What a conformance case is, whatever it tests: an id, the facts its row and expectations see,
and ``prepare()``, which builds everything the runner needs before the export; and ``KINDS``, the
table of case kinds.

Two kinds implement ``Case``: ``op_cases.OpCase`` (an OpInfo sample) and ``model_cases.ModelCaseId``
(a zoo model or a user's, ``--cases``). ``runner.run_case`` takes either through the one loop
export -> checker -> load -> run -> compare -> second shape; what differs between them (how a
module is built and exported, which session runs it, which comparison rule and tolerance apply)
is in the ``Prepared`` subclass the case returns (``OpPrepared``, ``ModelPrepared``).

Everything else that depends on the kind (how an id is parsed, which process runs it, its
deadline, its expectations file) is its ``CaseKind`` row in ``KINDS``: the module of a kind
registers it (``register_kind``) and ``torch_onnx_conformance/conformance/__init__.py`` imports those modules, so the
table is full wherever ``conformance`` is imported. A new kind is one module plus one import.

An id reads ``<kind>::<field>::…``, for example
``op::nn.functional.conv2d::s003::f32::dynamic::opset20::cpu::ours`` or
``model::torchvision/resnet18::f32::dynamic::opset20::cpu::ours::opt``. Ids never contain tensor
reprs, so they stay stable and greppable across runs and machines.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import hashlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np

DTYPES = ("f32", "f16", "bf16", "i64", "b8")
SHAPES = ("static", "dynamic")
PROVIDERS = ("cpu", "cuda", "reference")
EXPORTERS = ("ours", "torch-dynamo", "torch-script")

#: Short dtype name -> attribute name on the ``torch`` module.
TORCH_DTYPE_NAMES = {
    "f32": "float32",
    "f16": "float16",
    "bf16": "bfloat16",
    "i64": "int64",
    "b8": "bool",
}


class Case(Protocol):
    """One conformance case (frozen, hashable: it is a pytest parameter)."""

    @property
    def id(self) -> str: ...

    def facts(self) -> dict[str, Any]:
        """What an expectation's ``match`` sees: the id's fields and what the case knows about
        itself (an op sample's signature and ranks, a model's family)."""
        ...

    def row_identity(self) -> dict[str, Any]:
        """The result row's fields that say which case it is about (``reports.rows``)."""
        ...

    @property
    def exporter(self) -> str: ...

    #: The planted fault the case carries (the harness's own tests), or None.
    @property
    def planted(self) -> str | None: ...

    def prepare(self, outcome: Any) -> Prepared:
        """Build the module and its inputs, run eager at the first and (dynamic cases) second
        shape, and choose the tolerance; records what it learns in ``outcome.extra``. Raises
        ``Skip`` when the case cannot be judged, ``StageFailed`` when its own setup failed."""
        ...

    def row_extra(self, facts: dict[str, Any] | None = None) -> dict[str, Any]:
        """What the case's row keeps in ``extra`` beside the outcome's (an op case's sample
        facts; ``facts`` instead when given: a crash row keeps the in-flight marker's)."""
        ...

    def with_sample_facts(self, sample_facts: dict[str, Any]) -> Case:
        """The case with the sample facts a row or in-flight marker kept (itself for a kind
        without samples)."""
        ...


@dataclasses.dataclass(kw_only=True)
class Prepared(abc.ABC):
    """A case ready to export: inputs and eager's outputs as numpy, at the first shape and, for a
    dynamic case, a second one; and the case-specific steps of the runner's loop.

    Each kind subclasses it (``op_cases.OpPrepared``, ``model_cases.ModelPrepared``): the three
    steps every case has are abstract, the hooks around them do nothing unless a kind needs
    them (the shape of onnx_ir's ``passes.PassBase``: an abstract ``call``, no-op ``requires``
    and ``ensures``)."""

    #: The repro directory's ``case.json``: the comparison rule, its tolerance, how to rerun.
    meta: dict[str, Any]
    feeds: dict[str, np.ndarray]
    expected: list[np.ndarray]
    dynamic: bool = False
    feeds2: dict[str, np.ndarray] | None = None
    expected2: list[np.ndarray] | None = None
    #: A dynamic case without a second shape: why (the case is then skipped after its compare).
    #: None with ``feeds2`` None means the case has no second shape to check.
    no_second_shape: str | None = None
    #: What a message calls the second inputs.
    second_what: str = "second shape"

    @abc.abstractmethod
    def export(self, path: Path) -> Any:
        """Export into the given ``model.onnx`` path; returns what the checker and
        ``open_session`` take (the model proto, or the path for a model whose weights are
        external data)."""

    @abc.abstractmethod
    def open_session(self, model: Any) -> Any:
        """A session over the exported model: ``run(feeds)``, ``input_shapes``."""

    @abc.abstractmethod
    def compare(self, expected: list, actual: list, session: Any) -> Any:
        """``exporter.diagnostics.compare.Comparison`` of the session's outputs with eager's."""

    def specialised(self, session: Any, grown_only: bool) -> list[str]:
        """Dims asked to be dynamic that the model fixed (only those the second shape grows
        when ``grown_only``)."""
        return []

    def before_run(self, session, feeds) -> None:  # noqa: B027 - no-op hook
        """Runs inside the ``run`` stage before the first run: an exception fails that stage."""

    def after_run(self, session, feeds, outcome) -> None:  # noqa: B027 - no-op hook
        """After the first run succeeded: measurements that are a by-product (latency)."""

    def after_compare(self, session, outcome) -> None:  # noqa: B027 - no-op hook
        """After the first compare passed: further checks of the compare stage (a decoder's
        greedy generation through the graph); an exception fails that stage."""

    def conclude(self, outcome) -> None:  # noqa: B027 - no-op hook
        """Once the case ran: a last word on its status (a vacuous model comparison)."""


class Skip(Exception):
    """The case cannot be judged (invalid sample, nothing dynamic); not a failure."""


class StageFailed(Exception):
    """The case failed at ``stage``: ``error`` is the exception or a message."""

    def __init__(self, stage: str, error: BaseException | str):
        super().__init__(stage)
        self.stage = stage
        self.error = error


class CaseSetupError(RuntimeError):
    """The case itself failed (build or eager run): a bug in the case, not the exporter. Its row's
    error signature starts with the class's name."""


# --------------------------------------------------------------------------- ids


def format_id(kind: str, *parts: object) -> str:
    return "::".join((kind, *map(str, parts)))


#: Id fields that are numbers, and the allowed values of the axes every kind of case shares.
_NUMERIC_ID_FIELDS = frozenset({"sample", "opset"})
_ID_SLOT = r"\{(\w+)\}"
_DIGITS, _TEXT = r"\d+", "[^:]+"
_ID_CHOICES = {
    "shapes": SHAPES,
    "provider": PROVIDERS,
    "exporter": EXPORTERS,
    "optimize": ("opt", "noopt"),
}


@dataclasses.dataclass(frozen=True)
class IdFormat:
    """How one kind of case id is written: a ``template`` with ``{field}`` slots (a field is
    text without ``:``, digits for ``sample`` and ``opset``), what such an id is, an example,
    and the dtypes the kind runs in; the shared axes' allowed values come from ``_ID_CHOICES``."""

    template: str
    what: str
    example: str
    dtypes: tuple[str, ...]

    @property
    def fields(self) -> list[str]:
        return re.findall(_ID_SLOT, self.template)

    @functools.cached_property
    def pattern(self) -> re.Pattern:
        parts = re.split(_ID_SLOT, self.template)
        regex = "".join(
            f"(?P<{part}>{_DIGITS if part in _NUMERIC_ID_FIELDS else _TEXT})"
            if i % 2
            else re.escape(part)
            for i, part in enumerate(parts)
        )
        return re.compile(f"^{regex}$")

    @property
    def choices(self) -> dict[str, tuple[str, ...]]:
        table = {"dtype": self.dtypes, **_ID_CHOICES}
        return {name: table[name] for name in self.fields if name in table}

    @property
    def form(self) -> str:
        """The layout for an error message: ``<field>``, or ``<a|b>`` for a field of few values."""

        def slot(match: re.Match) -> str:
            allowed = self.choices.get(match.group(1))
            return (
                f"<{'|'.join(allowed)}>" if allowed and len(allowed) == 2 else f"<{match.group(1)}>"
            )

        layout = re.sub(_ID_SLOT, slot, self.template)
        return f"'{layout}', for example '{self.example}'"

    def parse(self, case_id: str) -> dict[str, str]:
        """The named fields of ``case_id``; ValueError naming the part that is wrong."""
        match = self.pattern.match(case_id.strip())
        if match is None:
            raise ValueError(f"not {self.what}: {case_id!r}. Expected {self.form}.")
        fields = match.groupdict()
        for name, allowed in self.choices.items():
            if fields[name] not in allowed:
                raise ValueError(
                    f"unknown {name} {fields[name]!r} in case id {case_id!r}; "
                    f"choose one of {', '.join(allowed)}"
                )
        return fields


def base_id(case_id: str) -> str:
    """The id without its opset field: cases of one base differ only in the opset, so they
    capture the same program (``conformance.exporters.capture_cache``)."""
    return re.sub(r"::opset\d+(?=::|$)", "", case_id)


def stable_hash(text: str) -> int:
    """A hash that is the same in every process and Python version (unlike ``hash``)."""
    return int.from_bytes(hashlib.sha1(text.encode("utf-8")).digest()[:8], "big")


def in_shard(case_id: str, shard: tuple[int, int] | None) -> bool:
    """Whether a case belongs to shard ``index`` of ``count`` (hash of the id, so shards are
    balanced and a case never moves between shards when other cases are added)."""
    if shard is None:
        return True
    index, count = shard
    return stable_hash(case_id) % count == index


def parse_shard(text: str) -> tuple[int, int]:
    """Parse ``i/N`` (0 <= i < N)."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if match is None:
        raise ValueError(f"--shard expects 'i/N' such as '0/4', got {text!r}")
    index, count = int(match.group(1)), int(match.group(2))
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"--shard {text}: need 0 <= i < N (shards are numbered from 0)")
    return index, count


def sanitise_id(case_id: str) -> str:
    """A file-system-safe directory name for a case id."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", case_id.replace("::", "__")).strip("_")


# --------------------------------------------------------------------------- case kinds


@dataclasses.dataclass(frozen=True)
class CaseKind:
    """One kind of case, as the harness handles it without knowing what the case tests. Its
    module fills in a row of ``KINDS`` with ``register_kind``."""

    #: The id's first field (``op::...``), the row's ``kind``, and the fact naming its subject.
    name: str
    #: How its ids are written (``<name>::...``).
    id_format: IdFormat
    #: id -> case; ValueError naming what is wrong.
    parse: Callable[[str], Case]
    #: The process a worker runs these cases in: ``child()`` -> an ``isolation.ChildProcess``
    #: with ``run(case_id, scratch, timeout_s, on_stage=...)``.
    child: Callable[[], Any]
    #: The child-process entry: ``run(case_id, scratch, announce=..., release_memory=...)``
    #: runs one case by id in the process that runs it and returns its ``CaseOutcome``.
    run: Callable[..., Any]
    #: The option giving one case's deadline, its default in seconds, and what it times.
    timeout_option: str
    default_timeout: float
    timeout_what: str
    #: ``<expectations_prefix><exporter>.toml`` in the expectations folder judges the cases.
    expectations_prefix: str
    #: The test function in ``torch_onnx_conformance/conformance/test_*.py`` that takes the cases, and its parameter.
    test_function: str
    parameter: str
    #: The run's cases of this kind: ``collect(options)`` with the plugin's ``Options``.
    collect: Callable[[Any], list]
    #: Whether ``--update-expectations`` proposes a file for every exporter of the run, even
    #: one without cases of this kind.
    proposes_always: bool = False

    @property
    def prefix(self) -> str:
        return f"{self.name}::"

    def expectations_file(self, folder: Path, exporter: str) -> Path:
        """The expectations file that judges one exporter's cases of this kind."""
        return Path(folder) / f"{self.expectations_prefix}{exporter}.toml"


#: The case kinds by name, in the order their modules registered them (ops, then models).
KINDS: dict[str, CaseKind] = {}


def register_kind(kind: CaseKind) -> CaseKind:
    KINDS[kind.name] = kind
    return kind


def find_kind(case_id: str | None) -> CaseKind | None:
    """The kind an id names with its first field; None for anything else."""
    if not isinstance(case_id, str):
        return None
    return KINDS.get(case_id.split("::", 1)[0]) if "::" in case_id else None


def kind_of(case_id: str) -> CaseKind:
    """The kind of a case id; ValueError naming the kinds there are."""
    kind = find_kind(case_id)
    if kind is None:
        forms = "; or ".join(kind.id_format.form for kind in KINDS.values())
        raise ValueError(f"not a case id: {case_id!r}. Expected {forms}.")
    return kind


def parse_case(case_id: str) -> Case:
    """A case of any kind from its id; ValueError naming what is wrong."""
    return kind_of(case_id).parse(case_id)


def row_facts(case_id: str, sample_facts: dict[str, Any] | None = None) -> dict[str, Any]:
    """The facts of a case known only by its id, with the sample facts its row or in-flight
    marker kept (op cases)."""
    case = parse_case(case_id)
    if sample_facts:
        case = case.with_sample_facts(sample_facts)
    return case.facts()
