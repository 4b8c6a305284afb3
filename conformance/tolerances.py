"""Loading the comparison policy in ``tolerances.toml``: per-dtype tolerances, per-op overrides,
the list of ops whose outputs are compared on shape and dtype only, and the ops whose
eigen/singular vectors are compared up to sign."""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

DEFAULT_PATH = Path(__file__).with_name("tolerances.toml")


@dataclasses.dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float
    source: str  # "dtype f32" or "override nn.functional.conv2d: <reason>"


@dataclasses.dataclass(frozen=True)
class Policy:
    by_dtype: dict[str, tuple[float, float]]
    overrides: tuple[dict, ...]
    shape_only_globs: tuple[str, ...]
    shape_only_reason: str
    sign_invariant_entries: tuple[dict, ...] = ()

    def tolerance(self, op: str, dtype: str) -> Tolerance:
        for entry in self.overrides:
            if fnmatch.fnmatchcase(op, entry["op"]) and entry.get("dtype", dtype) == dtype:
                return Tolerance(
                    float(entry["rtol"]),
                    float(entry["atol"]),
                    f"override {entry['op']}: {entry.get('reason', '')}".rstrip(": "),
                )
        if dtype not in self.by_dtype:
            raise KeyError(f"tolerances.toml has no [dtype.{dtype}] table")
        rtol, atol = self.by_dtype[dtype]
        return Tolerance(rtol, atol, f"dtype {dtype}")

    def is_shape_only(self, op: str) -> bool:
        return any(fnmatch.fnmatchcase(op, pattern) for pattern in self.shape_only_globs)

    def sign_invariant(self, op: str) -> list[list]:
        """``compare.align_vector_signs``'s spec for the op, or [] (the first match wins)."""
        for entry in self.sign_invariant_entries:
            if fnmatch.fnmatchcase(op, entry["op"]):
                return [list(item) for item in entry["outputs"]]
        return []


@functools.cache
def load_policy(path: str | Path = DEFAULT_PATH) -> Policy:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"cannot read the tolerance policy {path}: {exc}") from exc
    by_dtype = {}
    for dtype, table in data.get("dtype", {}).items():
        try:
            by_dtype[dtype] = (float(table["rtol"]), float(table["atol"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: [dtype.{dtype}] needs numeric rtol and atol") from exc
    overrides = tuple(data.get("override", ()))
    for index, entry in enumerate(overrides):
        missing = {"op", "rtol", "atol"} - set(entry)
        if missing:
            raise ValueError(
                f"{path}: [[override]] #{index + 1} lacks {', '.join(sorted(missing))}"
            )
    sign_invariant = tuple(data.get("sign_invariant", ()))
    for index, entry in enumerate(sign_invariant):
        outputs = entry.get("outputs")
        if (
            "op" not in entry
            or not outputs
            or any(len(item) != 2 or item[1] not in ("columns", "rows") for item in outputs)
        ):
            raise ValueError(
                f"{path}: [[sign_invariant]] #{index + 1} needs op and outputs = "
                '[[index, "columns" | "rows"], ...]'
            )
    shape_only = data.get("shape_only", {})
    return Policy(
        by_dtype=by_dtype,
        overrides=overrides,
        shape_only_globs=tuple(shape_only.get("ops", ())),
        shape_only_reason=shape_only.get("reason", "outputs compared on shape and dtype only"),
        sign_invariant_entries=sign_invariant,
    )
