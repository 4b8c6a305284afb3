"""Op case identity: the axes of one conformance case, its stable id, and the per-case seed.

An id reads ``op::<op>::s<NNN>::<dtype>::<shapes>::opset<N>::<provider>::<exporter>``, for example
``op::nn.functional.conv2d::s003::f32::dynamic::opset20::cpu::ours``. Ids never contain tensor
reprs, so they stay stable and greppable across runs and machines.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re

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

_ID_PATTERN = re.compile(
    r"^op::(?P<op>[^:]+)::s(?P<sample>\d+)::(?P<dtype>[^:]+)::(?P<shapes>[^:]+)"
    r"::opset(?P<opset>\d+)::(?P<provider>[^:]+)::(?P<exporter>[^:]+)$"
)


@dataclasses.dataclass(frozen=True)
class OpCase:
    """One op case. ``op`` is the case's op name: the OpInfo name, ``.variant`` appended when
    the OpInfo has a variant, and ``_`` appended to the name for its in-place variant."""

    op: str
    sample: int
    dtype: str
    shapes: str
    opset: int
    provider: str
    exporter: str

    @property
    def id(self) -> str:
        return (
            f"op::{self.op}::s{self.sample:03d}::{self.dtype}::{self.shapes}"
            f"::opset{self.opset}::{self.provider}::{self.exporter}"
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


def parse_case_id(case_id: str) -> OpCase:
    """Parse an op case id; raises ValueError naming the part that is wrong."""
    match = _ID_PATTERN.match(case_id.strip())
    if match is None:
        raise ValueError(
            f"not an op case id: {case_id!r}. Expected "
            "'op::<op>::s<NNN>::<dtype>::<static|dynamic>::opset<N>::<provider>::<exporter>', "
            "for example 'op::abs::s000::f32::static::opset20::cpu::ours'."
        )
    fields = match.groupdict()
    _check_choice("dtype", fields["dtype"], DTYPES)
    _check_choice("shapes", fields["shapes"], SHAPES)
    _check_choice("provider", fields["provider"], PROVIDERS)
    _check_choice("exporter", fields["exporter"], EXPORTERS)
    return OpCase(
        op=fields["op"],
        sample=int(fields["sample"]),
        dtype=fields["dtype"],
        shapes=fields["shapes"],
        opset=int(fields["opset"]),
        provider=fields["provider"],
        exporter=fields["exporter"],
    )


def _check_choice(what: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"unknown {what} {value!r} in case id; choose one of {', '.join(choices)}")


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
