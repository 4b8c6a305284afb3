"""What a conformance case is, whatever it tests: an id, the facts its row and expectations see,
and ``prepare()``, which builds everything the runner needs before the export.

Two kinds implement ``Case``: ``op_cases.OpCase`` (an OpInfo sample) and ``model_cases.ModelCaseId``
(a zoo model). ``runner.run_case`` takes either through the one loop
export -> checker -> load -> run -> compare -> second shape; what differs between them (how a
module is built and exported, which session runs it, which comparison rule and tolerance apply)
is in the ``Prepared`` object the case returns.

An id reads ``<kind>::<field>::…``, for example
``op::nn.functional.conv2d::s003::f32::dynamic::opset20::cpu::ours`` or
``model::torchvision/resnet18::f32::dynamic::opset20::cpu::ours::opt``. Ids never contain tensor
reprs, so they stay stable and greppable across runs and machines.
"""

from __future__ import annotations

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

    def prepare(self, outcome: Any) -> Prepared:
        """Build the module and its inputs, run eager at the first and (dynamic cases) second
        shape, and choose the tolerance; records what it learns in ``outcome.extra``. Raises
        ``Skip`` when the case cannot be judged, ``StageFailed`` when its own setup failed."""
        ...


@dataclasses.dataclass
class Prepared:
    """A case ready to export: inputs and eager's outputs as numpy, at the first shape and, for a
    dynamic case, a second one; and the case-specific steps of the runner's loop."""

    #: The repro directory's ``case.json``: the comparison rule, its tolerance, how to rerun.
    meta: dict[str, Any]
    feeds: dict[str, np.ndarray]
    expected: list[np.ndarray]
    #: Export into the given ``model.onnx`` path; returns what the checker and ``open_session``
    #: take (the model proto, or the path for a model whose weights are external data).
    export: Callable[[Path], Any]
    open_session: Callable[[Any], Any]
    #: ``compare(expected, actual, session)`` -> ``exporter.diagnostics.compare.Comparison``
    compare: Callable[[list, list, Any], Any]
    dynamic: bool = False
    feeds2: dict[str, np.ndarray] | None = None
    expected2: list[np.ndarray] | None = None
    #: A dynamic case without a second shape: why (the case is then skipped after its compare).
    #: None with ``feeds2`` None means the case has no second shape to check.
    no_second_shape: str | None = None
    #: ``specialised(session, grown_only)``: dims asked to be dynamic that the model fixed (only
    #: those the second shape grows when ``grown_only``).
    specialised: Callable[[Any, bool], list[str]] = lambda session, grown_only: []
    #: Runs inside the ``run`` stage before the first run: an exception fails that stage.
    before_run: Callable[[Any, dict[str, np.ndarray]], None] = lambda session, feeds: None
    #: After the first run succeeded: measurements that are a by-product (latency).
    after_run: Callable[[Any, dict[str, np.ndarray], Any], None] = lambda session, feeds, outcome: (
        None
    )
    #: After the first compare passed: further checks of the compare stage (a decoder's greedy
    #: generation through the graph); an exception fails that stage.
    after_compare: Callable[[Any, Any], None] = lambda session, outcome: None
    #: What a message calls the second inputs.
    second_what: str = "second shape"
    #: Once the case passed: a last word on its status (a vacuous model comparison).
    conclude: Callable[[Any], None] = lambda outcome: None


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


def parse_case(case_id: str) -> Case:
    """An op or model case from its id; ValueError naming what is wrong."""
    if case_id.startswith("model::"):
        from conformance.model_cases import parse_model_id

        return parse_model_id(case_id)
    from conformance.op_cases import parse_case_id

    return parse_case_id(case_id)


def row_facts(case_id: str, sample_facts: dict[str, Any] | None = None) -> dict[str, Any]:
    """The facts of a case known only by its id, with the sample facts its row or in-flight
    marker kept (op cases)."""
    case = parse_case(case_id)
    if sample_facts and hasattr(case, "sample_facts"):
        case = dataclasses.replace(case, sample_facts=sample_facts)
    return case.facts()
