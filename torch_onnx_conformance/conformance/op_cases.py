"""OpInfo samples as conformance cases: which ops and samples exist, which ones a run takes, and
``OpCase``, one sample under one set of axes, which builds its module and inputs for the runner.

An id reads ``op::<op>::s<NNN>::<dtype>::<shapes>::opset<N>::<provider>::<exporter>``, for example
``op::nn.functional.conv2d::s003::f32::dynamic::opset20::cpu::ours``.

Collection must be fast, so sample facts (index, input signature, ranks) are kept in a manifest
cached as JSON under ``<results>/.cache/``, keyed by the torch version: a warm collection never
imports ``op_db``. Sample values are reproducible because each op's sample generator runs from a
seed derived from the op name and dtype; a sample's index is its position in the op's full list,
so ``s003`` names the same sample whatever ``--samples`` says.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import fnmatch
import functools
import importlib.metadata
import json
import logging
import os
import random
import tempfile
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from torch_onnx_conformance.conformance import planted as planted_cases
from torch_onnx_conformance.conformance.case import (
    DTYPES,
    TORCH_DTYPE_NAMES,
    CaseKind,
    IdFormat,
    Prepared,
    Skip,
    base_id,
    format_id,
    in_shard,
    register_kind,
    stable_hash,
)
from torch_onnx_conformance.conformance.isolation import CaseChild
from torch_onnx_conformance.conformance.runner import CaseOutcome, run_case
from torch_onnx_conformance.conformance.runs import READ_ONLY_ENV

if TYPE_CHECKING:
    from torch_onnx_conformance.conformance.plugin import Options

#: 3: the hand-written quantization op infos (``quantized_ops``) joined the op list.
MANIFEST_FORMAT = 3
#: Samples per op in a default run. Measured with our exporter: about 0.12 CPU-seconds per case
#: (export, checker, onnxruntime, compare), so the default set of about 4,100 cases (678 OpInfos
#: x 3 samples + 163 in-place variants x 1, static and dynamic) needs roughly 8-9 CPU-minutes:
#: about 5 minutes with -n 2 on an idle 2-core machine. torch.onnx's dynamo exporter costs about
#: 0.6 CPU-seconds per case.
DEFAULT_SAMPLES = 3
#: In-place variants repeat their base op's samples, so a default run takes fewer of them.
DEFAULT_INPLACE_SAMPLES = 1
#: Seconds one op case may take (``--case-timeout``).
DEFAULT_CASE_TIMEOUT_S = 120.0


#: The op cases' comparison policy: per-dtype tolerances, per-op overrides, shape-only ops.
OP_TOLERANCES_PATH = Path(__file__).with_name("tolerances.toml")

_ID_FORMAT = IdFormat(
    "op::{op}::s{sample}::{dtype}::{shapes}::opset{opset}::{provider}::{exporter}",
    "an op case id",
    "op::abs::s000::f32::static::opset20::cpu::ours",
    DTYPES,
)


#: The fields of an op case's id, as the case, its facts and its id name them.
_AXES = ("op", "dtype", "shapes", "opset", "provider", "exporter", "sample")


@dataclasses.dataclass(frozen=True)
class OpCase:
    """One op case. ``op`` is the case's op name: the OpInfo name, ``.variant`` appended when
    the OpInfo has a variant, and ``_`` appended to the name for its in-place variant.
    ``sample_facts`` are the sample's facts from the manifest, when the case was collected."""

    op: str
    sample: int
    dtype: str
    shapes: str
    opset: int
    provider: str
    exporter: str
    sample_facts: dict[str, Any] | None = dataclasses.field(
        default=None, compare=False, hash=False, repr=False
    )
    #: Another comparison policy file than ``OP_TOLERANCES_PATH`` (the harness's own tests).
    tolerances_path: str | None = dataclasses.field(
        default=None, compare=False, hash=False, repr=False
    )

    @property
    def id(self) -> str:
        return format_id(
            "op",
            self.op,
            f"s{self.sample:03d}",
            self.dtype,
            self.shapes,
            f"opset{self.opset}",
            self.provider,
            self.exporter,
        )

    @property
    def sample_key(self) -> str:
        """The part of the id that fixes the sample's values (not how it is exported or run)."""
        return f"op::{self.op}::s{self.sample:03d}::{self.dtype}"

    @property
    def seed(self) -> int:
        """Seed for the case's random draws: the same for every exporter, opset and provider,
        so that exporters are compared on identical inputs."""
        return stable_hash(self.sample_key) % (2**31)

    def replace(self, **changes) -> OpCase:
        return dataclasses.replace(self, **changes)

    def facts(self) -> dict[str, Any]:
        """What an expectation's ``match`` can look at: the id's fields and the sample's facts."""
        found: dict[str, Any] = dict(self.sample_facts or {})
        found.pop("index", None)
        found.update(id=self.id, **{axis: getattr(self, axis) for axis in _AXES})
        return found

    @property
    def planted(self) -> str | None:
        return planted_cases.planted_name(self.op)

    def row_extra(self, facts: dict[str, Any] | None = None) -> dict[str, Any]:
        """The sample's facts (the in-flight marker's ``facts`` for a crash row)."""
        sample = self.sample_facts if facts is None else facts
        return {} if sample is None else {"sample": sample}

    def with_sample_facts(self, sample_facts: dict[str, Any]) -> OpCase:
        return dataclasses.replace(self, sample_facts=sample_facts)

    def row_identity(self) -> dict[str, Any]:
        from torch_onnx_conformance.conformance.families import op_family

        return {
            "id": self.id,
            "kind": "op",
            "subject": self.op,
            "family": "planted" if self.planted else op_family(self.op),
            "dtype": self.dtype,
            "shapes": self.shapes,
            "opset": self.opset,
            "provider": self.provider,
            "exporter": self.exporter,
            "sample": self.sample,
        }

    def prepare(self, outcome) -> Prepared:
        return _prepare_shared(self, outcome)


def parse_case_id(case_id: str) -> OpCase:
    """Parse an op case id; raises ValueError naming the part that is wrong."""
    fields = _ID_FORMAT.parse(case_id)
    return OpCase(**{**fields, "sample": int(fields["sample"]), "opset": int(fields["opset"])})


def run_in_child(
    case_id: str,
    scratch: Path,
    *,
    announce: Callable[[str], None] = lambda stage: None,
    release_memory: bool = True,
) -> CaseOutcome:
    """The op kind's child-process entry: ``run_case`` of the case the id names (an op case
    leaves no caches worth releasing)."""
    return run_case(parse_case_id(case_id), scratch, announce=announce)


@dataclasses.dataclass
class OpSamples:
    """An op's usable samples in the manifest."""

    op: str
    inplace: bool
    samples: list[dict[str, Any]]  # sample facts, see ``sample_facts``
    error: str | None = None


# --------------------------------------------------------------------------- collection


def collect_cases(options: Options) -> list[OpCase]:
    """Every op case the run's options select, in a stable order, sharded."""
    if not options.ops_enabled:
        return []  # the OpInfo database is not even imported
    axes = [
        (shapes, opset, provider, exporter)
        for shapes in options.shapes
        for opset in options.opsets
        for provider in options.providers
        for exporter in options.exporters
    ]
    cases = []
    if options.planted:
        for name in options.planted:
            for shapes, opset, provider, exporter in axes:
                cases.append(
                    OpCase(planted_cases.PREFIX + name, 0, "f32", shapes, opset, provider, exporter)
                )
    else:
        matched = 0
        for dtype in options.dtypes:
            ops = load_manifest(options.cache_dir, dtype, options.ops)
            matched += len(ops)
            for op in ops:
                if op.error:
                    warnings.warn(
                        f"conformance: {op.op} ({dtype}) has no samples: {op.error}", stacklevel=2
                    )
                    continue
                limit = options.samples
                if limit == -1:
                    limit = DEFAULT_INPLACE_SAMPLES if op.inplace else DEFAULT_SAMPLES
                by_index = {f["index"]: f for f in op.samples}
                for index in select_samples(op.samples, limit, inplace=op.inplace):
                    for shapes, opset, provider, exporter in axes:
                        cases.append(
                            OpCase(
                                op.op,
                                index,
                                dtype,
                                shapes,
                                opset,
                                provider,
                                exporter,
                                sample_facts=by_index[index],
                            )
                        )
        if options.ops and not matched:
            raise pytest.UsageError(
                f"--ops {' '.join(options.ops)}: no OpInfo supporting {', '.join(options.dtypes)} "
                "has a matching name. Names look like 'abs', 'nn.functional.conv2d', "
                "'div.trunc_rounding' (name.variant) or 'add_' (in-place); globs are fnmatch."
            )
    return [case for case in cases if in_shard(case.id, options.shard)]


# --------------------------------------------------------------------------- op_db access


@functools.cache
def op_db() -> list:
    # The OpInfo database imports torch.utils.cpp_extension, which warns "No CUDA runtime is
    # found" on a machine with nvcc but no GPU; every case process imports it, so the line
    # repeated in each failure's captured output. Building CUDA extensions is never done here.
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    try:
        from torch.testing._internal.common_methods_invocations import op_db as database
    except ModuleNotFoundError as exc:
        raise RuntimeError(
            f"cannot import PyTorch's OpInfo database ({exc}). It needs the test-only package "
            "'expecttest': pip install expecttest"
        ) from exc
    return list(database)


def op_infos() -> list:
    """The op infos cases are drawn from: PyTorch's OpInfo database, then the hand-written
    quantization ops it lacks (``conformance.quantized_ops``)."""
    from torch_onnx_conformance.conformance.quantized_ops import INFOS

    return [*op_db(), *INFOS]


def opinfo_name(info) -> str:
    return f"{info.name}.{info.variant_test_name}" if info.variant_test_name else info.name


def inplace_name(info) -> str:
    suffix = f".{info.variant_test_name}" if info.variant_test_name else ""
    return f"{info.name}_{suffix}"


@functools.cache
def _ops_by_case_name() -> dict[str, tuple[Any, bool]]:
    table: dict[str, tuple[Any, bool]] = {}
    for info in op_infos():
        table[opinfo_name(info)] = (info, False)
        if info.inplace_variant is not None:
            table.setdefault(inplace_name(info), (info, True))
    return table


def resolve_op(op: str) -> tuple[Any, bool]:
    """The OpInfo behind a case's op name, and whether the case uses its in-place variant."""
    from torch_onnx_conformance.conformance.quantized_ops import INFOS

    for info in INFOS:  # without importing op_db
        if opinfo_name(info) == op:
            return info, False
    table = _ops_by_case_name()
    if op not in table:
        import difflib

        close = difflib.get_close_matches(op, table, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise KeyError(f"no OpInfo named {op!r} in torch's op_db or quantized_ops.{hint}")
    return table[op]


def torch_dtype(dtype: str):
    import torch

    return getattr(torch, TORCH_DTYPE_NAMES[dtype])


def _seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed % (2**32))


@functools.lru_cache(maxsize=4)
def _cached_samples(op_name: str, dtype: str) -> tuple:
    info = opinfo_name_to_info(op_name)
    _seed_everything(stable_hash(f"samples::{op_name}::{dtype}") % (2**31))
    return tuple(info.sample_inputs("cpu", torch_dtype(dtype), requires_grad=False))


def opinfo_name_to_info(op_name: str):
    info, _ = resolve_op(op_name)
    return info


def raw_samples(info, dtype: str) -> tuple:
    """Every sample of an OpInfo for a dtype, in a reproducible order with reproducible values.

    Cached per process: callers must not mutate the returned tensors (``build_op_call`` clones).
    """
    return _cached_samples(opinfo_name(info), dtype)


# --------------------------------------------------------------------------- sample facts


def sample_facts(index: int, sample) -> dict[str, Any]:
    """What expectations and sampling need to know about a sample, without its values."""
    import torch
    from torch.utils import _pytree as pytree

    leaves = pytree.tree_leaves(((sample.input, *sample.args), sample.kwargs))
    tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
    return {
        "index": index,
        "signature": _signature(leaves)[:400],
        "n_tensors": len(tensors),
        "max_ndim": max((t.dim() for t in tensors), default=-1),
        "has_scalar": any(t.dim() == 0 for t in tensors),
        "has_empty": any(t.numel() == 0 for t in tensors),
        "has_dynamic": any(size >= 2 for t in tensors for size in t.shape),
        "dense": all(t.layout == torch.strided for t in tensors),
        # The in-place variant cannot write a broadcast result into a smaller input.
        "broadcasts_input": bool(getattr(sample, "broadcasts_input", False)),
    }


def _signature(leaves: list) -> str:
    import torch

    parts = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            dtype = str(leaf.dtype).removeprefix("torch.")
            parts.append(f"{dtype}[{','.join(str(s) for s in leaf.shape)}]")
        else:
            parts.append(repr(leaf)[:40])
    return " ".join(parts)


def select_samples(
    facts: list[dict[str, Any]], limit: int | None, *, inplace: bool = False
) -> list[int]:
    """Indices of the samples a run takes: all usable ones, or ``limit`` chosen for variety.

    Order of preference: a typical sample (rank >= 2, nothing empty, so the dynamic mode has
    something to vary), a 0-d one, an empty one, then one per rank not yet covered, then the
    rest in index order. Deterministic, so every exporter and shard sees the same choice.
    Sparse samples are never taken, nor, for in-place variants, samples that broadcast the input.
    """
    usable = [f for f in facts if f["dense"] and not (inplace and f.get("broadcasts_input"))]
    if limit is None or limit >= len(usable):
        return [f["index"] for f in usable]
    preferred: list[dict[str, Any]] = []

    def take_first(predicate) -> None:
        for f in usable:
            if f not in preferred and predicate(f):
                preferred.append(f)
                return

    take_first(lambda f: f["max_ndim"] >= 2 and not f["has_empty"] and not f["has_scalar"])
    take_first(lambda f: f["has_scalar"])
    take_first(lambda f: f["has_empty"])
    for rank in sorted({f["max_ndim"] for f in usable}):
        if all(f["max_ndim"] != rank for f in preferred):
            take_first(lambda f, rank=rank: f["max_ndim"] == rank)
    preferred.extend(f for f in usable if f not in preferred)
    return sorted(f["index"] for f in preferred[:limit])


# --------------------------------------------------------------------------- manifest


def torch_version() -> str:
    return importlib.metadata.version("torch")


def manifest_path(cache_dir: Path, dtype: str) -> Path:
    return (
        Path(cache_dir) / f"opinfo-manifest-v{MANIFEST_FORMAT}-torch{torch_version()}-{dtype}.json"
    )


def load_manifest(cache_dir: Path, dtype: str, op_globs: Iterable[str] | None) -> list[OpSamples]:
    """Ops (and their sample facts) supporting ``dtype`` on CPU whose name matches a glob.

    Facts missing from the cache are generated and saved back under a file lock (xdist workers
    collect at the same time; one generates, the others wait and read). A warm cache needs no
    torch import.
    """
    globs = list(op_globs or ["*"])
    path = manifest_path(cache_dir, dtype)
    data = _read_json(path)
    if (data is None or _incomplete(data, globs)) and os.environ.get(READ_ONLY_ENV):
        data, _ = _complete(data, dtype, globs)  # --collect-only and the like write nothing
    elif data is None or _incomplete(data, globs):
        path.parent.mkdir(parents=True, exist_ok=True)
        with _locked(path.with_name(path.name + ".lock")):
            data = _read_json(path)  # another process may have filled it while we waited
            data, changed = _complete(data, dtype, globs)
            if changed:
                _write_json_atomic(path, data)
    wanted: list[OpSamples] = []
    for name, entry in data["ops"].items():
        samples = entry["samples"] or []
        if _matches(name, globs):
            wanted.append(OpSamples(name, False, samples, entry["error"]))
        if entry["inplace"] is not None and _matches(entry["inplace"], globs):
            wanted.append(OpSamples(entry["inplace"], True, samples, entry["error"]))
    return wanted


def _wanted(name: str, entry: dict, globs: list[str]) -> bool:
    return _matches(name, globs) or (
        entry["inplace"] is not None and _matches(entry["inplace"], globs)
    )


def _incomplete(data: dict, globs: list[str]) -> bool:
    return any(
        entry["samples"] is None and entry["error"] is None
        for name, entry in data["ops"].items()
        if _wanted(name, entry, globs)
    )


def _complete(data: dict | None, dtype: str, globs: list[str]) -> tuple[dict, bool]:
    changed = False
    if data is None or data.get("dtype") != dtype:
        data = {"format": MANIFEST_FORMAT, "torch": torch_version(), "dtype": dtype, "ops": {}}
        for info in op_infos():
            if torch_dtype(dtype) in info.supported_dtypes("cpu"):
                data["ops"][opinfo_name(info)] = {
                    "inplace": inplace_name(info) if info.inplace_variant is not None else None,
                    "samples": None,
                    "error": None,
                }
        changed = True
    for name, entry in data["ops"].items():
        if _wanted(name, entry, globs) and entry["samples"] is None and entry["error"] is None:
            entry["samples"], entry["error"] = _generate_facts(name, dtype)
            changed = True
    return data, changed


@contextlib.contextmanager
def _locked(lock_path: Path):
    import fcntl

    with open(lock_path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _matches(name: str, globs: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, g) for g in globs)


def _generate_facts(op_name: str, dtype: str) -> tuple[list | None, str | None]:
    try:
        samples = _cached_samples(op_name, dtype)
        return [sample_facts(i, s) for i, s in enumerate(samples)], None
    except Exception as exc:  # a broken sample generator costs its op, not the run
        return None, f"{type(exc).__name__}: {exc}"[:500]


def _read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if data.get("format") != MANIFEST_FORMAT or data.get("torch") != torch_version():
        return None
    return data


def _write_json_atomic(path: Path, data: dict) -> None:
    """Write then rename, so concurrent xdist workers never read a half-written cache."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


# --------------------------------------------------------------------------- building a case


@dataclasses.dataclass
class OpCall:
    """A sample turned into a module and its tensor inputs."""

    module: Any  # torch.nn.Module
    inputs: tuple
    facts: dict[str, Any]
    nondeterministic: bool


def build_op_call(op: str, sample_index: int, dtype: str) -> OpCall:
    """The module and inputs of one OpInfo sample (raises ``LookupError`` if it is gone)."""
    from torch_onnx_conformance.conformance.modules import CallModule, split_call

    info, inplace = resolve_op(op)
    samples = raw_samples(info, dtype)
    if sample_index >= len(samples):
        raise LookupError(
            f"{op} has {len(samples)} samples for {dtype} in torch {torch_version()}, "
            f"no sample {sample_index}; the id comes from another torch version"
        )
    sample = samples[sample_index]
    spec, leaves, tensors = split_call((sample.input, *sample.args), sample.kwargs)
    if inplace and not _first_leaf_is_tensor(sample):
        raise LookupError(f"{op}: the in-place variant needs a tensor as its first argument")
    fn = info.inplace_variant if inplace else info.op
    return OpCall(
        module=CallModule(fn, spec, leaves, inplace).eval(),
        inputs=tensors,
        facts=sample_facts(sample_index, sample),
        nondeterministic=bool(getattr(info, "has_nondeterministic_output", False)),
    )


def _first_leaf_is_tensor(sample) -> bool:
    import torch

    return isinstance(sample.input, torch.Tensor)


# --------------------------------------------------------------------------- preparing a case


@dataclasses.dataclass(kw_only=True)
class OpPrepared(Prepared):
    """An op case ready to export: the sample's module and inputs, exported by the case's
    exporter (a planted case's fake one), run in an in-memory ``Session`` and compared element
    by element, or by distribution over draws for a random op."""

    case: OpCase
    module: Any  # torch.nn.Module
    inputs: tuple
    inputs2: tuple | None
    input_names: list[str]
    #: The ``(input, dim)`` pairs the second shape grows (``second_shape.grown_dims``).
    grown: Any
    tolerance: Any  # exporter.diagnostics.compare.Tolerance
    shape_only: bool
    sign_invariant: bool
    #: Random outputs: judged by distribution over several draws of eager and of the model.
    distribution: bool
    planted: str | None
    #: float16 cases: the upcast eager outputs at each shape and the rule judging against them
    #: (``_low_precision_reference``); None otherwise.
    references: tuple = (None, None)
    reference_rule: Any = None
    #: Quantized codes: the fraction of elements that may be one code apart (``[codes]``).
    code_tie_fraction: float | None = None
    #: A random op's further eager draws, ``(first shape?, k) -> outputs``: the same for every
    #: opset of the case (``_prepare_shared`` hands the cases one dict).
    eager_draws: dict = dataclasses.field(default_factory=dict)

    def export(self, path: Path):
        from torch_onnx_conformance.conformance.modules import clone_tensors

        exported = _export(
            self.case, self.module, clone_tensors(self.inputs), self.dynamic, self.planted
        )
        from torch_onnx_conformance.conformance.repro import write_in_place

        write_in_place(path, exported.model.SerializeToString())
        return exported.model

    def open_session(self, model):
        from torch_onnx_conformance.conformance.session import Session

        return Session(model, self.case.provider)

    def specialised(self, session, grown_only: bool) -> list[str]:
        from torch_onnx_conformance.conformance import shapes

        among = self.grown if grown_only else None
        return shapes.specialised_inputs(session.input_shapes, self.input_names, self.inputs, among)

    def compare(self, expected, actual, session):
        from torch_onnx_conformance.exporter.diagnostics.compare import compare_outputs

        if self.distribution:
            first = expected is self.expected
            return _compare_draws(
                self.case.op,
                self.module,
                self.inputs if first else self.inputs2,
                self.feeds if first else self.feeds2,
                (expected, actual),
                session,
                self.case.seed,
                self.tolerance,
                self.eager_draws.setdefault(first, {}),
            )
        return compare_outputs(
            expected,
            actual,
            rtol=self.tolerance.rtol,
            atol=self.tolerance.atol,
            shape_only=self.shape_only,
            sign_invariant=self.sign_invariant,
            references=self.references[0 if expected is self.expected else 1],
            reference_rule=self.reference_rule,
            code_tie_fraction=self.code_tie_fraction,
        )

    def before_run(self, session, feeds) -> None:
        fault = planted_cases.runtime_fault(self.planted)
        if fault is not None:
            fault()


def _judging(case: OpCase, policy, planted, shape_only: bool, outcome) -> tuple:
    """How the case is judged: ``(tolerance, distribution, shape_only, sign_invariant,
    code_tie_fraction)``, each noted in the row."""
    # Random outputs are judged by distribution over several draws of eager and of the model.
    distribution = planted is None and policy.is_distribution(case.op)
    if distribution:
        shape_only = False
        outcome.extra["distribution"] = True
    tolerance = policy.tolerance(case.op, case.dtype, case.provider)
    outcome.rtol, outcome.atol = tolerance.rtol, tolerance.atol
    outcome.extra["tolerance_source"] = tolerance.source
    if shape_only:
        outcome.extra["shape_only"] = True
    code_tie_fraction = policy.code_tie_fraction(case.op)
    if code_tie_fraction is not None:
        outcome.extra["code_tie_fraction"] = code_tie_fraction
    return tolerance, distribution, shape_only, policy.sign_invariant(case.op), code_tie_fraction


#: Prepared cases a case process keeps for the other opsets of the same case, which come next
#: (``_prepare_shared``); 0 prepares every case afresh.
SHARED_PREPARED = 2


@dataclasses.dataclass
class _SharedPrepare:
    """What preparing a case made that does not depend on its opset: the prepared case (or
    the reason it skipped), what preparing wrote into the row, and torch's random state after
    it (what the export would have started from)."""

    prepared: OpPrepared | None
    skip: str | None
    row: dict[str, Any]
    rng_state: Any


_shared_prepares: collections.OrderedDict[tuple, _SharedPrepare] = collections.OrderedDict()


def _prepare_shared(case: OpCase, outcome) -> OpPrepared:
    """``_prepare`` once for all opsets of a case in this process: the sample's module and
    inputs, eager's outputs at both shapes, the float16 references and a random op's eager
    draws are the same at every opset (the opset only changes the id and the export), so
    the case's other opsets take them from the first and write the same row fields. Only a
    prepare that finished or skipped is kept; anything else is prepared again."""
    import copy

    import torch

    if not SHARED_PREPARED:
        return _prepare(case, outcome)
    key = (base_id(case.id), case.tolerances_path)
    shared = _shared_prepares.get(key)
    if shared is None:
        blank = dataclasses.asdict(CaseOutcome(**case.row_identity(), status="pass"))
        skip = prepared = None
        try:
            prepared = _prepare(case, outcome)
        except Skip as exc:
            skip = exc
        shared = _SharedPrepare(
            prepared,
            None if skip is None else str(skip),
            _row_changes(blank, dataclasses.asdict(outcome)),
            torch.get_rng_state(),
        )
        _shared_prepares[key] = shared
        while len(_shared_prepares) > SHARED_PREPARED:
            _shared_prepares.popitem(last=False)
        if skip is not None:
            raise skip
        return prepared
    _shared_prepares.move_to_end(key)
    for field, value in copy.deepcopy(shared.row).items():
        if field == "extra":
            outcome.extra.update(value)
        else:
            setattr(outcome, field, value)
    torch.set_rng_state(shared.rng_state)
    if shared.skip is not None:
        raise Skip(shared.skip)
    return dataclasses.replace(
        shared.prepared,
        case=case,
        meta={**shared.prepared.meta, "id": case.id, "rerun": _rerun(case)},
    )


def _row_changes(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The row fields preparing set (``extra``: the keys it added or changed)."""
    import copy

    changes = {f: v for f, v in after.items() if f != "extra" and v != before[f]}
    unset = object()
    extra = {k: v for k, v in after["extra"].items() if before["extra"].get(k, unset) != v}
    if extra:
        changes["extra"] = extra
    return copy.deepcopy(changes)


def _rerun(case: OpCase) -> str:
    return f"python -m torch_onnx_conformance repro '{case.id}'"


def _prepare(case: OpCase, outcome) -> OpPrepared:
    import torch

    from torch_onnx_conformance.conformance import exporters
    from torch_onnx_conformance.conformance.flat_io import to_numpy
    from torch_onnx_conformance.exporter.diagnostics import second_shape
    from torch_onnx_conformance.exporter.diagnostics.compare import ELEMENT, load_policy

    policy = load_policy(case.tolerances_path or OP_TOLERANCES_PATH)
    torch.manual_seed(case.seed)
    module, inputs, facts, shape_only, planted = _build(case, policy)
    outcome.extra["sample"] = facts
    tolerance, distribution, shape_only, sign_invariant, code_tie_fraction = _judging(
        case, policy, planted, shape_only, outcome
    )
    dynamic = case.shapes == "dynamic"
    if dynamic and not second_shape.has_dynamic_dims(inputs):
        raise Skip("dynamic: no input dimension >= 2 to make dynamic (same as static)")

    expected = _eager(module, inputs, case.seed, "the sample")
    inputs2 = expected2 = grown = None
    note = None
    if dynamic:
        inputs2, expected2, grown, note = second_shape_inputs(
            module, inputs, expected, case.seed, outcome
        )
    rule_data, reference, reference2 = _low_precision_reference(
        case,
        tolerance,
        distribution or shape_only or bool(sign_invariant),
        module,
        (inputs, inputs2),
        outcome,
    )

    input_names = exporters.input_names_for(inputs)
    feeds2 = expected2_np = None
    if inputs2 is not None:
        feeds2 = {name: to_numpy(t) for name, t in zip(input_names, inputs2)}
        expected2_np = [to_numpy(t) for t in expected2]
    return OpPrepared(
        meta={
            "id": case.id,
            "provider": case.provider,
            "rule": ELEMENT,
            "rtol": tolerance.rtol,
            "atol": tolerance.atol,
            "ort_optimization": "disable_all",
            "rerun": _rerun(case),
            # A repro directory has one eager draw: it checks a random op's shapes and dtypes;
            # the harness judges the distribution (compare_distributions).
            "shape_only": shape_only or distribution,
            "sign_invariant": sign_invariant,
            "code_tie_fraction": code_tie_fraction,
            "sample": facts,
        },
        feeds={name: to_numpy(t) for name, t in zip(input_names, inputs)},
        expected=[to_numpy(t) for t in expected],
        dynamic=dynamic,
        feeds2=feeds2,
        expected2=expected2_np,
        no_second_shape=(note or "no growth of the inputs works")
        if dynamic and not feeds2
        else None,
        case=case,
        module=module,
        inputs=inputs,
        inputs2=inputs2,
        input_names=input_names,
        grown=grown,
        tolerance=tolerance,
        shape_only=shape_only,
        sign_invariant=sign_invariant,
        distribution=distribution,
        planted=planted,
        references=(reference, reference2),
        reference_rule=rule_data,
        code_tie_fraction=code_tie_fraction,
    )


#: Draws of a random op per side: at most (however small its output), and at least (enough to
#: see whether the values of one draw move together, compare._design_effect).
MAX_DRAWS = 400
MIN_DRAWS = 30


def _low_rank_product(outputs: list) -> list:
    """svd_lowrank/pca_lowrank's ``U diag(S) V^T`` and ``S``: what the random projection leaves
    defined (the factors' signs vary with the draw, and when q is below the rank, the factors
    themselves; their product is the draw's approximation of the matrix)."""
    import numpy as np

    u, s, v = (np.asarray(o) for o in outputs)
    return [(u * s[..., None, :]) @ np.swapaxes(v, -1, -2), s]


#: What the distribution rule compares of an op's outputs, where not the outputs themselves.
DISTRIBUTION_VIEWS = {"svd_lowrank": _low_rank_product, "pca_lowrank": _low_rank_product}


def _compare_draws(
    op, module, inputs, feeds, first_draws, session, seed: int, tolerance, eager_draws: dict
):
    """A random op's outputs by distribution: eager (seeded ``seed + k``) and the model run
    until each output has about ``DISTRIBUTION_VALUES`` values pooled (``MIN_DRAWS`` to
    ``MAX_DRAWS`` draws); values within the case's tolerance count as equal. Eager's draw
    ``k`` depends on its seed alone: ``eager_draws`` keeps them (``k -> outputs``) for the
    case's other opsets."""
    import math

    import numpy as np

    from torch_onnx_conformance.conformance.flat_io import to_numpy
    from torch_onnx_conformance.exporter.diagnostics.compare import (
        DISTRIBUTION_VALUES,
        compare_distributions,
    )

    expected, actual = first_draws
    sizes = [np.asarray(a).size for a in actual if np.asarray(a).size]
    per_draw = min(sizes) if sizes else 1
    draws = max(MIN_DRAWS, min(MAX_DRAWS, math.ceil(DISTRIBUTION_VALUES / per_draw)))
    expected_draws = [list(expected)]
    actual_draws = [list(actual)]
    for k in range(1, draws):
        if k not in eager_draws:
            with _reseeding_disabled():
                outputs = _eager(module, inputs, seed + k, "a further draw")
            eager_draws[k] = [to_numpy(t) for t in outputs]
        expected_draws.append(list(eager_draws[k]))
        actual_draws.append(session.run(feeds))
    view = DISTRIBUTION_VIEWS.get(op)
    if view is not None:
        expected_draws = [view(draw) for draw in expected_draws]
        actual_draws = [view(draw) for draw in actual_draws]
    return compare_distributions(
        expected_draws, actual_draws, rtol=tolerance.rtol, atol=tolerance.atol
    )


@contextlib.contextmanager
def _reseeding_disabled():
    """OpInfo wraps many random ops in ``wrapper_set_seed``, which calls
    ``torch.manual_seed(42)`` before the op, so every eager call would draw the same numbers:
    while a further draw runs, ``torch.manual_seed`` seeds only the first time (``_eager``'s
    own seeding), so each draw follows its own seed."""
    import torch

    real = torch.manual_seed
    calls = 0

    def first_only(seed):
        nonlocal calls
        calls += 1
        return real(seed) if calls == 1 else torch.default_generator

    torch.manual_seed = first_only
    try:
        yield
    finally:
        torch.manual_seed = real


def second_shape_inputs(module, inputs, expected, seed: int, outcome):
    """The second input set: the first growth plan (``second_shape.growth_plans``) and delta for
    which eager accepts the inputs and returns outputs of the same count and ranks (a graph has
    a fixed number of outputs, so a shape that changes it can never match). Returns the inputs,
    eager's outputs, the grown ``(input, dim)`` pairs, and otherwise why no plan worked."""
    import torch

    from torch_onnx_conformance.exporter.diagnostics import second_shape

    note = None
    ranks = _ranks(expected)
    for sizes in second_shape.growth_plans(inputs):
        for delta in second_shape.SECOND_SHAPE_DELTAS:
            generator = torch.Generator().manual_seed(seed)
            candidate = second_shape.grown_inputs(inputs, delta, generator, sizes)
            try:
                expected2 = _eager(module, candidate, seed, "the second shape")
            except Skip as rejected:
                note = note or str(rejected)
                continue
            if _ranks(expected2) != ranks:
                note = note or (
                    f"eager returns {len(expected2)} outputs at the second shape, "
                    f"{len(expected)} at the first: the output count depends on a dynamic size"
                )
                continue
            outcome.extra["second_shape_delta"] = delta
            if sizes is not None:
                outcome.extra["second_shape_grows_sizes"] = sorted(sizes)
            return candidate, expected2, second_shape.grown_dims(inputs, sizes), None
    return None, None, None, note


def _ranks(outputs) -> list:
    return [t.dim() if hasattr(t, "dim") else type(t).__name__ for t in outputs]


def _build(case: OpCase, policy):
    """(module, inputs, sample facts, shape_only, planted name) for a case."""
    planted = planted_cases.planted_name(case.op)
    if planted is not None:
        module, inputs = planted_cases.build_planted(planted)
        facts = {"index": 0, "signature": "float32[3,4]", "max_ndim": 2, "planted": planted}
        return module, inputs, facts, False, planted
    try:
        call = build_op_call(case.op, case.sample, case.dtype)
    except LookupError as exc:
        raise Skip(str(exc)) from exc
    shape_only = call.nondeterministic or policy.is_shape_only(case.op)
    return call.module, call.inputs, call.facts, shape_only, None


def _eager(module, inputs: tuple, seed: int, what: str) -> tuple:
    import torch

    from torch_onnx_conformance.conformance.modules import clone_tensors

    torch.manual_seed(seed)
    try:
        with torch.no_grad():
            return module(*clone_tensors(inputs))
    except Exception as exc:
        raise Skip(
            f"eager rejects {what}: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
            if str(exc)
            else f"eager rejects {what}: {type(exc).__name__}"
        ) from exc


#: The case dtypes judged against a higher-precision reference (``[float16]`` in the policy).
LOW_PRECISION = {"f16": "float16"}


def _low_precision_reference(case: OpCase, tolerance, skip: bool, module, input_sets, outcome):
    """A float16 case's higher-precision reference: eager on the same inputs' values upcast
    (``[float16]`` of the policy file: its rule and reference dtype), one per input set, each
    a list with one array per output (None where that output has no wider float), or None
    where the reference run is rejected. ``(None, None, None)`` for other cases, random,
    shape-only and sign-invariant ones (the reference's vectors may take other signs), and
    where a per-op override sets the tolerance instead."""
    from torch_onnx_conformance.exporter.diagnostics.compare import load_reference_rule

    if case.dtype not in LOW_PRECISION or skip or tolerance.overridden:
        return None, None, None
    rule = load_reference_rule(case.tolerances_path or OP_TOLERANCES_PATH)
    outcome.extra["tolerance_source"] = (
        f"{tolerance.source}: judged against a {rule.reference} reference, within "
        f"{rule.multiple:g} x eager float16's own error + {rule.floor:g} ([float16])"
    )
    references = [
        None if inputs is None else _upcast_outputs(module, inputs, case.seed, rule.reference)
        for inputs in input_sets
    ]
    return rule, *references


def _upcast_outputs(module, inputs: tuple, seed: int, dtype_name: str) -> list | None:
    """Eager's outputs on ``inputs`` with their float16 tensors upcast to ``dtype_name`` (the
    same values), as numpy; an output that does not come out wider than float16 is None. None
    when eager rejects the upcast inputs."""
    import torch

    from torch_onnx_conformance.conformance.flat_io import to_numpy

    wide = getattr(torch, dtype_name)
    upcast = tuple(t.to(wide) if t.dtype == torch.float16 else t for t in inputs)
    try:
        outputs = _eager(module, upcast, seed, "the upcast sample")
    except Skip:
        return None
    return [to_numpy(t) if t.dtype in (torch.float32, torch.float64) else None for t in outputs]


def _export(case: OpCase, module, inputs: tuple, dynamic: bool, planted: str | None):
    from torch_onnx_conformance.conformance import exporters

    if planted is not None:
        return planted_cases.fake_export(planted, inputs, dynamic=dynamic, opset=case.opset)
    return exporters.export_case(
        case.exporter,
        module,
        inputs,
        dynamic=dynamic,
        opset=case.opset,
        capture_key=base_id(case.id),
    )


KIND = register_kind(
    CaseKind(
        name="op",
        id_format=_ID_FORMAT,
        parse=parse_case_id,
        child=CaseChild,
        run=run_in_child,
        timeout_option="--case-timeout",
        default_timeout=DEFAULT_CASE_TIMEOUT_S,
        timeout_what="one case",
        expectations_prefix="",
        test_function="test_op",
        parameter="op_case",
        collect=collect_cases,
        proposes_always=True,
    )
)
