"""What the tool-output parsers share: cleaning captured text and reading numbers.

Captured logs rarely hold a tool's bare stdout. They carry launcher prefixes (``srun -l``
writes ``0: ``, Open MPI's ``--tag-output`` writes ``[1,0]<stdout>:``), the indentation of the
reST or markdown block they were pasted into, carriage-return progress rewrites, and terminal
colour escapes. Every parser starts from :func:`clean_lines` so that each quirk is handled once.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Status = Literal["ok", "failed", "incomplete"]


class NotToolOutput(ValueError):
    """The text is not the output of the tool the parser was asked to read."""


_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
# `srun -l` prefixes "<task>: "; Open MPI --tag-output prefixes "[job,rank]<stdout>:".
_LAUNCHER = re.compile(r"^\s*(?:\[\d+,\d+\]<std(?:out|err)>:|\d+:(?: |$))")


def strip_ansi(line: str) -> str:
    return _ANSI.sub("", line)


def last_rewrite(line: str) -> str:
    """Return what a terminal shows for ``line``: the text after its last carriage return.

    A trailing CR (CRLF files) is not a rewrite, so empty segments are skipped.
    """
    if "\r" not in line:
        return line
    parts = [p for p in line.split("\r") if p]
    return parts[-1] if parts else ""


def strip_launcher_prefix(line: str) -> str:
    return _LAUNCHER.sub("", line, count=1)


def clean_lines(text: str, *, keep_indent: bool = False) -> list[str]:
    """Split ``text`` into display lines with launcher prefixes, ANSI escapes and CR rewrites gone.

    With ``keep_indent`` the indentation common to all non-blank lines (a reST or markdown
    block) is removed and the rest kept, for formats whose nesting is indentation
    (``nvidia-smi -q``); otherwise every line is stripped on both sides.
    """
    lines = [strip_launcher_prefix(strip_ansi(last_rewrite(raw))).rstrip() for raw in text.split("\n")]
    if not keep_indent:
        return [line.strip() for line in lines]
    indents = [len(line) - len(line.lstrip(" ")) for line in lines if line.strip()]
    common = min(indents, default=0)
    return [line[common:] for line in lines]


_INT = re.compile(r"^[+-]?\d+$")
_FLOAT = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$")


def parse_number(token: str) -> float | None:
    """Parse a C ``%g``/``%f`` number such as ``1.04858e+06`` or ``235.26``; None otherwise."""
    token = token.strip()
    if not _FLOAT.match(token):
        return None
    return float(token)


def parse_int(token: str) -> int | None:
    """Parse an integer, accepting ``%g`` output of an integral value (``1.04858e+06``)."""
    token = token.strip()
    if _INT.match(token):
        return int(token)
    value = parse_number(token)
    if value is None:
        return None
    return round(value)


def is_number(token: str) -> bool:
    return parse_number(token) is not None


@dataclass
class ParseResult:
    """Base of every parser's result; ``to_json`` gives the documented dict."""

    status: Status = "incomplete"
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
