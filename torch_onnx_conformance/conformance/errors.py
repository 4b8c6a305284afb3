"""How an error is written into a result row: the root cause first (``error_text``), and a
normalised signature that expectations match and reports group by (``signature_of``)."""

from __future__ import annotations

import re
import traceback

MAX_ERROR_CHARS = 4000

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def root_cause(error: BaseException) -> BaseException:
    """The innermost explicitly chained cause (``raise ... from``). Exporters wrap the real
    error in a generic per-stage message; the cause is what tells failures apart, and it reads
    the same whichever exporter wrapped it."""
    seen = {id(error)}
    while error.__cause__ is not None and id(error.__cause__) not in seen:
        error = error.__cause__
        seen.add(id(error))
    return error


def signature_of(error: BaseException | str) -> str:
    """A normalised error signature: ``reports.normalise_error`` of the root cause, or for an
    unsupported-op error, of the ops it lists (its message starts with a count only)."""
    from torch_onnx_conformance.reports import normalise_error

    if isinstance(error, BaseException):
        unsupported = getattr(error, "unsupported", None)
        if unsupported and isinstance(unsupported, list):
            targets = sorted(
                {str(u.get("target", u)) if isinstance(u, dict) else str(u) for u in unsupported}
            )
            return f"{type(error).__name__}: no translation for {', '.join(targets)}"[:200]
        error = root_cause(error)
        return _ANSI.sub(
            "", normalise_error(f"{type(error).__name__}: {_ANSI.sub('', str(error))}")
        )
    return normalise_error(_ANSI.sub("", error))


def error_text(error: BaseException | str) -> str:
    """The error as recorded in a row: the root cause, then the exception that wrapped it."""
    if isinstance(error, BaseException):
        text = "".join(traceback.format_exception_only(type(error), error)).strip()
        cause = root_cause(error)
        if cause is not error:
            cause_text = "".join(traceback.format_exception_only(type(cause), cause)).strip()
            # The cause first: a long wrapper message must not truncate it away.
            text = f"{cause_text}\n[raised as] {text}"
    else:
        text = str(error)
    text = _ANSI.sub("", text)
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"
