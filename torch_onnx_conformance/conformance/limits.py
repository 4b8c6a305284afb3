"""Limits every case process runs under: a memory ceiling, and death with its parent.

Without a ceiling, one runaway case (a planted 40 GB allocation, an op that materialises a huge
intermediate) drives the machine into the kernel's OOM killer, which may take any process: an
unrelated job, the pytest controller, the editor. With ``RLIMIT_DATA`` the allocation fails in
the case's own process (``MemoryError`` or torch's "can't allocate memory"), which costs that
case one row. ``RLIMIT_DATA`` rather than ``RLIMIT_AS``: it counts memory that can be written,
not address space that CUDA and allocators reserve without using.

The limit is ``CONFORMANCE_CASE_MEMORY``: a size (``6G``, ``512M``, bytes), a fraction of the
machine's RAM (``0.25``), or ``none``. By default each case gets half the RAM shared among the
run's xdist workers, and never less than ``MIN_DEFAULT_BYTES``.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import sys

MEMORY_ENV = "CONFORMANCE_CASE_MEMORY"
DEFAULT_RAM_FRACTION = 0.5
MIN_DEFAULT_BYTES = 2 * 2**30
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_PR_SET_PDEATHSIG = 1


def total_ram_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def parse_memory(text: str, ram: int | None = None) -> int | None:
    """Bytes for ``text`` (see the module doc); None for ``none``. Raises ValueError naming
    the accepted forms."""
    value = text.strip().upper().removesuffix("B").removesuffix("I")
    if value in ("NONE", "OFF", "0"):
        return None
    ram = total_ram_bytes() if ram is None else ram
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)", value)
    if match:
        number, unit = float(match.group(1)), match.group(2)
        if not unit and number < 1:
            if ram is None:
                raise ValueError(f"{MEMORY_ENV}={text}: a fraction needs the RAM size, unknown")
            return int(number * ram)
        return int(number * _UNITS[unit])
    raise ValueError(
        f"{MEMORY_ENV}={text!r}: expected a size like 6G or 512M, a fraction of RAM like 0.25, "
        "or 'none'"
    )


def case_memory_limit(environ=None) -> int | None:
    """The per-case memory ceiling in bytes, or None for no ceiling."""
    environ = os.environ if environ is None else environ
    text = environ.get(MEMORY_ENV)
    if text:
        return parse_memory(text)
    ram = total_ram_bytes()
    if ram is None:
        return None
    workers = max(int(environ.get("PYTEST_XDIST_WORKER_COUNT") or 1), 1)
    return max(int(ram * DEFAULT_RAM_FRACTION / workers), MIN_DEFAULT_BYTES)


def die_with_parent(parent: int | None = None) -> None:
    """Ask Linux to SIGKILL this process when its parent dies, so a killed harness leaves no
    orphan. ``parent`` is the pid the caller expects as its parent (default: the current one);
    when that parent is already gone, this process exits at once."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid() if parent is None else parent
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:
        os._exit(1)


def apply_case_limits() -> None:
    """Called first thing in every case process (op child, model zygote, forked model case)."""
    die_with_parent()
    limit = case_memory_limit()
    if limit is None:
        return
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
