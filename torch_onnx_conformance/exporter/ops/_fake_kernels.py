"""Meta/fake kernels that torch lacks, installed only while our exporter captures.

A few ATen ops (geqrf, histogram, linalg_lstsq) have CPU kernels but no Meta or fake kernel.
Fake tensors can fall back to the real kernel for static shapes only, so torch.export cannot
trace them with dynamic shapes. The op modules declare registrars with ``@fake_kernels``; each
returns the ``torch.library.Library`` that holds its registration, or None when torch already
has a kernel (a newer torch, or an outer export that installed ours). ``installed()`` runs them
for the duration of a capture and destroys the libraries afterwards, so other programs in the
process (eager, torch.compile, torch.onnx in a comparison run) see torch exactly as shipped.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch

Registrar = Callable[[], "torch.library.Library | None"]

_REGISTRARS: list[Registrar] = []


def fake_kernels(registrar: Registrar) -> Registrar:
    """Declare a registrar that ``installed()`` runs."""
    _REGISTRARS.append(registrar)
    return registrar


def meta_library(kernels: dict[str, Callable]) -> torch.library.Library | None:
    """A library giving each ATen op of ``kernels`` (name -> kernel) its Meta kernel, skipping
    ops that already have one (a newer torch, or an outer export); None when none needs it."""
    library = None
    for name, kernel in kernels.items():
        if torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", "Meta"):
            continue
        if library is None:
            library = torch.library.Library("aten", "IMPL")
        library.impl(name, kernel, "Meta")
    return library


@contextlib.contextmanager
def installed() -> Iterator[None]:
    libraries = []
    try:
        for registrar in _REGISTRARS:
            library = registrar()
            if library is not None:
                libraries.append(library)
        yield
    finally:
        for library in reversed(libraries):
            library._destroy()
