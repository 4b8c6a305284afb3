"""OpInfo cases: which ops and samples exist, which ones a run takes, and building one of them.

Collection must be fast, so sample facts (index, input signature, ranks) are kept in a manifest
cached as JSON under ``<results>/.cache/``, keyed by the torch version: a warm collection never
imports ``op_db``. Sample values are reproducible because each op's sample generator runs from a
seed derived from the op name and dtype; a sample's index is its position in the op's full list,
so ``s003`` names the same sample whatever ``--samples`` says.
"""

from __future__ import annotations

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
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from conformance.cases import TORCH_DTYPE_NAMES, stable_hash
from conformance.runs import READ_ONLY_ENV

MANIFEST_FORMAT = 2
#: Samples per op in a default run. Measured with our exporter: about 0.12 CPU-seconds per case
#: (export, checker, onnxruntime, compare), so the default set of about 4,100 cases (678 OpInfos
#: x 3 samples + 163 in-place variants x 1, static and dynamic) needs roughly 8-9 CPU-minutes:
#: about 5 minutes with -n 2 on an idle 2-core machine. torch.onnx's dynamo exporter costs about
#: 0.6 CPU-seconds per case.
DEFAULT_SAMPLES = 3
#: In-place variants repeat their base op's samples, so a default run takes fewer of them.
DEFAULT_INPLACE_SAMPLES = 1


@dataclasses.dataclass
class OpSamples:
    """An op's usable samples in the manifest."""

    op: str
    inplace: bool
    samples: list[dict[str, Any]]  # sample facts, see ``sample_facts``
    error: str | None = None


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


def opinfo_name(info) -> str:
    return f"{info.name}.{info.variant_test_name}" if info.variant_test_name else info.name


def inplace_name(info) -> str:
    suffix = f".{info.variant_test_name}" if info.variant_test_name else ""
    return f"{info.name}_{suffix}"


@functools.cache
def _ops_by_case_name() -> dict[str, tuple[Any, bool]]:
    table: dict[str, tuple[Any, bool]] = {}
    for info in op_db():
        table[opinfo_name(info)] = (info, False)
        if info.inplace_variant is not None:
            table.setdefault(inplace_name(info), (info, True))
    return table


def resolve_op(op: str) -> tuple[Any, bool]:
    """The OpInfo behind a case's op name, and whether the case uses its in-place variant."""
    table = _ops_by_case_name()
    if op not in table:
        import difflib

        close = difflib.get_close_matches(op, table, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise KeyError(f"no OpInfo named {op!r} in torch's op_db.{hint}")
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
        for info in op_db():
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
    from conformance.modules import CallModule, split_call

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
