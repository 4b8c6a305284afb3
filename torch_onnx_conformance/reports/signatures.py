"""Error signatures: one short, stable line per kind of failure.

Two cases that fail for the same reason must get the same signature even when their messages
differ in sizes, addresses, file paths or generated value names, so that reports can count
failures by cause and expectation files can match on them.
"""

from __future__ import annotations

import re

MAX_SIGNATURE_CHARS = 160
#: The unmasked line shown beside an unexpected result: long enough for a tolerance message.
MAX_HEADLINE_CHARS = 300

# A line such as "ValueError: bad" or "torch._dynamo.exc.Unsupported: x": dotted name, then ": ".
_TYPED_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*)(?::\s*(?P<msg>.*))?$")
# Names that read as an exception class when a line carries no other hint.
_EXCEPTION_NAME = re.compile(r"(Error|Exception|Exit|Interrupt|Warning|Fault|Unsupported)$")
_DECORATION = re.compile(r"^[\W_]*$")

_DTYPE_NAMES = frozenset(
    "float16 float32 float64 bfloat16 int8 int16 int32 int64 uint8 uint16 uint32 uint64 "
    "complex32 complex64 complex128 float8_e4m3fn float8_e5m2".split()
)

_HEX = re.compile(r"\b0x[0-9a-fA-F]+\b")
_QUOTED = re.compile(r"(['\"])([^'\"\s]{1,200})\1")
_FILE_EXTENSION = re.compile(r"\.[A-Za-z]\w{0,5}(?::\d+)?$")
_ROOTED_PATH = re.compile(r"(?<![\w<])(?:[A-Za-z]:[\\/]|~?/|\.{1,2}/)[^\s'\",;()\[\]{}<>]+")
_BARE_FILE = re.compile(
    r"\b[\w.\-]+(?:[\\/][\w.\-]+)*\.(?:py|pyi|onnx|pt|pth|so|dll|json|jsonl|txt|c|cc|cpp|cu|h|hpp|yaml)"
    r"(?::\d+)?\b"
)
_TORCH_SIZE = re.compile(r"torch\.Size\(\[[^\]]*\]\)")
_DIM = r"(?:-?\d+|[su]\d+|\?|[A-Za-z_]\w*)"
_BRACKET_SHAPE = re.compile(rf"\[\s*{_DIM}(?:\s*,\s*{_DIM})*\s*,?\s*\]")
_PAREN_SHAPE = re.compile(r"\(\s*-?\d+\s*,(?:\s*-?\d+\s*,?)*\s*\)")
_X_SHAPE = re.compile(r"\b\d+(?:x\d+)+\b")
_SYMBOL = re.compile(r"\b[su]\d+\b")
_NUMBERED_SUFFIX = re.compile(r"\b([A-Za-z]\w*?)_\d+\b")
_NUMBER = re.compile(r"(?<![\w.<])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w>])")
_SPACES = re.compile(r"\s+")
_TERMINAL_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def normalise_error(error: BaseException | str | None) -> str:
    """Return a stable one-line signature for an exception or an error text.

    The signature is the exception type and the first meaningful line of its message, with
    numbers, hex addresses, file paths, tensor shapes and generated value names replaced by
    placeholders (``<N>``, ``<ADDR>``, ``<PATH>``, ``<SHAPE>``, ``<NAME>``), at most
    ``MAX_SIGNATURE_CHARS`` characters long. Tracebacks are reduced to their final exception.
    """
    if error is None:
        return ""
    type_name, message = _typed_message(error)
    return _joined(type_name, _normalise_text(message), MAX_SIGNATURE_CHARS)


def error_headline(error: BaseException | str | None, limit: int = MAX_HEADLINE_CHARS) -> str:
    """The line a reader acts on: exception type and first meaningful message line, exactly as
    raised (numbers, names and paths kept), tracebacks reduced to their final exception.

    ``normalise_error`` is this line with the case-specific parts masked for grouping.
    """
    if error is None:
        return ""
    return _joined(*_typed_message(error), limit)


def _typed_message(error: BaseException | str) -> tuple[str, str]:
    if isinstance(error, BaseException):
        type_name = type(error).__name__
        message = _first_meaningful_line(str(error))
        typed = _split_typed_line(message)
        if typed is not None and typed[0] == type_name:
            message = typed[1]  # str() of some exceptions repeats the type name
        return type_name, message
    return _type_and_message(str(error))


def _joined(type_name: str, message: str, limit: int) -> str:
    line = f"{type_name}: {message}" if type_name and message else type_name or message
    line = _SPACES.sub(" ", _TERMINAL_ESCAPE.sub("", line)).strip()
    if len(line) > limit:
        line = line[: limit - 1].rstrip() + "…"
    return line


def _type_and_message(text: str) -> tuple[str, str]:
    line = _final_exception_line(text) or _first_meaningful_line(text)
    typed = _split_typed_line(line)
    if typed is None:
        return "", line
    return typed


def _split_typed_line(line: str) -> tuple[str, str] | None:
    match = _TYPED_LINE.match(line)
    if match is None:
        return None
    type_name = match.group("type").rsplit(".", 1)[-1]
    message = match.group("msg")
    if message is None and not _EXCEPTION_NAME.search(type_name):
        return None  # a lone word such as "Segmentation" is a message, not a type
    if message is not None and not (
        _EXCEPTION_NAME.search(type_name) or "." in match.group("type")
    ):
        return None  # "Status Message: ..." or "Name: ..." is prose, not an exception
    return type_name, message or ""


def _final_exception_line(text: str) -> str | None:
    """The exception line that ends a Python traceback, or None when text is no traceback."""
    if "Traceback (most recent call last)" not in text:
        return None
    lines = text.splitlines()
    last_frame = max(
        (i for i, line in enumerate(lines) if line.lstrip().startswith('File "')), default=None
    )
    if last_frame is None:
        return None
    for line in lines[last_frame + 1 :]:
        # Frames and their source lines are indented; the exception line is not.
        if line.strip() and not line[0].isspace():
            return line.strip()
    return None


def _first_meaningful_line(text: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line and not _DECORATION.match(line):
            return line
    return ""


def _normalise_text(text: str) -> str:
    text = _HEX.sub("<ADDR>", text)
    text = _QUOTED.sub(_normalise_quoted, text)
    text = _ROOTED_PATH.sub("<PATH>", text)
    text = _BARE_FILE.sub("<PATH>", text)
    text = _TORCH_SIZE.sub("torch.Size([<SHAPE>])", text)
    text = _BRACKET_SHAPE.sub(_normalise_bracket, text)
    text = _PAREN_SHAPE.sub("(<SHAPE>)", text)
    text = _X_SHAPE.sub("<SHAPE>", text)
    text = _SYMBOL.sub("<SYM>", text)
    text = _NUMBERED_SUFFIX.sub(r"\1_<N>", text)
    text = _NUMBER.sub("<N>", text)
    return _SPACES.sub(" ", text).strip()


def _normalise_quoted(match: re.Match[str]) -> str:
    quote, content = match.group(1), match.group(2)
    if ("/" in content or "\\" in content) and _FILE_EXTENSION.search(content):
        return f"{quote}<PATH>{quote}"
    if content in _DTYPE_NAMES:
        return match.group(0)
    # Generated names (val_3, getitem_12, buf0, /layer1/Conv_2, %5) differ from case to case.
    if content[0] in "/%" or content[-1].isdigit():
        return f"{quote}<NAME>{quote}"
    return match.group(0)


def _normalise_bracket(match: re.Match[str]) -> str:
    inner = match.group(0)
    # ['x', 'y'] lists of names were already handled; keep lists of plain words such as [x, y]
    # unless they contain a digit, which marks them as sizes.
    if not any(ch.isdigit() for ch in inner) and "?" not in inner:
        return inner
    return "[<SHAPE>]"
