"""Helpers shared by the case modules: stable seeds and deterministic random inputs."""

from __future__ import annotations

import zlib
from collections.abc import Mapping

import torch


def seed_for(*parts: object) -> int:
    """A stable 31-bit seed from the given parts (unlike `hash`, the same in every process)."""
    return zlib.crc32("\x1f".join(map(str, parts)).encode()) & 0x7FFFFFFF


def generator_for(name: str, sizes: Mapping[str, int]) -> torch.Generator:
    """A generator seeded by the case name and the sizes, so each input set is reproducible."""
    return torch.Generator().manual_seed(seed_for(name, sorted(sizes.items())))


def randn(generator: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=generator)


def randint(generator: torch.Generator, high: int, *shape: int) -> torch.Tensor:
    return torch.randint(0, high, shape, generator=generator, dtype=torch.int64)
