"""What the tool-output parsers share: cleaning captured text, reading numbers, ranking verdicts.

Captured logs rarely hold a tool's bare stdout. They carry launcher prefixes (``srun -l``
writes ``0: ``, Open MPI's ``--tag-output`` writes ``[1,0]<stdout>:``), the indentation of the
reST or markdown block they were pasted into, carriage-return progress rewrites, and terminal
colour escapes. Every parser starts from :func:`clean_lines` so that each quirk is handled once.

Logs are also hostile: truncated, concatenated, corrupted or crafted. Every regular expression
in the parsers is written so that it cannot backtrack more than linearly (no two quantifiers
that can match the same characters next to each other, no unanchored search that starts with a
quantifier unless a look-behind stops it re-scanning a run), and numbers are read only from
tokens of a bounded length, so that a line of 50,000 digits costs what its length costs.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["ok", "failed", "incomplete"]

# failed > incomplete > ok: when a log holds several runs, or a value is read twice, the worse stays.
_SEVERITY: dict[Status, int] = {"ok": 0, "incomplete": 1, "failed": 2}

# A log of 10^5 broken rows must not carry 10^5 notes (nor cost a quadratic dedupe).
MAX_NOTES = 50
_MORE = "(and more notes of the same kinds, not listed)"
# No tool prints a number longer than this; a longer token is junk, never parsed (int() of
# more than 4300 digits raises, and float() of 400 digits is inf).
MAX_NUMBER_CHARS = 40


class NotToolOutput(ValueError):
    """The text is not the output of the tool the parser was asked to read."""


_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
# `srun -l` prefixes "<task>: "; Open MPI --tag-output prefixes "[job,rank]<stdout>:".
_LAUNCHER = re.compile(r"[ \t]*(?:\[\d{1,9},\d{1,9}\]<std(?:out|err)>:|\d{1,9}:(?: |$))")


# What a process that died mid-run leaves in its captured output, whichever tool it was: the
# shell's report of a signal death (bash: "Segmentation fault (core dumped)", "12345 Aborted"),
# glibc's assert(3) line ("prog: file.c:12: f: Assertion `x' failed."), libstdc++'s terminate
# handler, and the crash handlers of Open MPI ("*** Process received signal ***") and UCX
# ("Caught signal 11 (Segmentation fault: ...)", "==== backtrace (tid: 600) ====").
_CRASH_WORDS = (
    "(core dumped)",
    "Segmentation fault",
    "Bus error",
    "Illegal instruction",
    "Floating point exception",
    "terminate called after throwing",
    "terminate called without an active exception",
    "*** Process received signal ***",
    "==== backtrace",
)
_CAUGHT_SIGNAL = re.compile(r"Caught signal \d{1,3} \(")
# "Aborted" alone, or after the pid of bash's job report; never "Aborting" or a word inside a message.
_ABORTED = re.compile(r"(?:^|\d[ \t]+)Aborted\b")


def crash(line: str) -> bool:
    """Whether ``line`` says the process crashed (see ``_CRASH_WORDS``): a failed run, whatever the
    tool printed before it. Substring tests only, so a long line costs its length."""
    for word in _CRASH_WORDS:
        if word in line:
            return True
    at = line.find("Assertion ")
    if at >= 0 and line.find(" failed", at) > at:
        return True
    if "Caught signal" in line and _CAUGHT_SIGNAL.search(line):
        return True
    return "Aborted" in line and _ABORTED.search(line) is not None


def worst(*statuses: Status) -> Status:
    """The worse of several verdicts (failed > incomplete > ok); ``ok`` for none."""
    return max(statuses, key=_SEVERITY.__getitem__, default="ok")


def strip_ansi(line: str) -> str:
    return _ANSI.sub("", line) if "\x1b" in line else line


def last_rewrite(line: str) -> str:
    """Return what a terminal shows for ``line``: the text after its last carriage return.

    A trailing CR (CRLF files) is not a rewrite, so empty segments are skipped.
    """
    if "\r" not in line:
        return line
    stripped = line.rstrip("\r")
    return stripped[stripped.rfind("\r") + 1 :]


def strip_launcher_prefix(line: str) -> str:
    m = _LAUNCHER.match(line)
    return line[m.end() :] if m else line


def clean_lines(text: str, *, keep_indent: bool = False) -> list[str]:
    """Split ``text`` into display lines with launcher prefixes, ANSI escapes and CR rewrites gone.

    With ``keep_indent`` the indentation common to all non-blank lines (a reST or markdown
    block) is removed and the rest kept, for formats whose nesting is indentation
    (``nvidia-smi -q``); otherwise every line is stripped on both sides.
    """
    lines: list[str] = []
    append = lines.append
    match = _LAUNCHER.match
    # last_rewrite, strip_ansi and strip_launcher_prefix inlined: this runs once per line of 10^6.
    for line in text.split("\n"):
        if "\r" in line:
            line = last_rewrite(line)
        if "\x1b" in line:
            line = _ANSI.sub("", line)
        head = line[:1]
        if (head.isdigit() or head in " \t[") and (m := match(line)) is not None and m.end():
            line = line[m.end() :]
        append(line.strip() if not keep_indent else line.rstrip())
    if not keep_indent:
        return lines
    common = min((len(line) - len(line.lstrip(" ")) for line in lines if line), default=0)
    return [line[common:] for line in lines] if common else lines


_INT = re.compile(r"[+-]?\d+")
_COUNT = re.compile(r"\d+")
# One digit run, then an optional fraction: "\d+\.?\d*" would let two quantifiers share digits.
_FLOAT = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def parse_number(token: str) -> float | None:
    """Parse a C ``%g``/``%f`` number such as ``1.04858e+06`` or ``235.26``.

    None for anything else, including ``nan``, ``inf`` and values that overflow to infinity
    (``1e999``): no tool result is legitimately infinite.
    """
    if len(token) > MAX_NUMBER_CHARS:
        token = token.strip()
        if len(token) > MAX_NUMBER_CHARS:
            return None
    # Fast path (no regex) for the common "235.26"; float() alone would also take "nan", "1_0".
    if token.isascii() and token.replace(".", "", 1).isdigit():
        return float(token)
    token = token.strip()
    if not _FLOAT.fullmatch(token):
        return None
    value = float(token)
    return value if math.isfinite(value) else None


def parse_int(token: str) -> int | None:
    """Parse an integer, accepting ``%g`` output of an integral value (``1.04858e+06``)."""
    token = token.strip()
    if len(token) > MAX_NUMBER_CHARS:
        return None
    if (token.isascii() and token.isdigit()) or _INT.fullmatch(token):
        return int(token)
    value = parse_number(token)
    return None if value is None else round(value)


def parse_count(token: str) -> int | None:
    """Parse an event counter as tools print it with ``%d``/``%u``: plain non-negative digits only.

    ``-3``, ``1e3``, ``1.0`` and ``nan`` are not counts: a counter that reads so is corrupt.
    """
    if not (token.isascii() and token.isdigit()):  # str.isdigit alone accepts "²"
        token = token.strip()
        if not _COUNT.fullmatch(token):
            return None
    return int(token) if len(token) <= MAX_NUMBER_CHARS else None


def is_number(token: str) -> bool:
    return parse_number(token) is not None


_PRIMITIVE_WORDS = {"int", "float", "str", "bool", "None", "|"}


@dataclass(frozen=True)
class _Plan:
    """How to turn one dataclass into a dict: which fields may hold a float, which need a walk."""

    floats: tuple[str, ...]
    nested: tuple[str, ...]


_PLANS: dict[type, _Plan] = {}


def _plan(cls: type) -> _Plan:
    plan = _PLANS.get(cls)
    if plan is None:
        floats, nested = [], []
        for f in dataclasses.fields(cls):
            words = set(str(f.type).replace("|", " | ").split())
            if not words <= _PRIMITIVE_WORDS:
                nested.append(f.name)
            elif "float" in words:
                floats.append(f.name)
        plan = _PLANS[cls] = _Plan(tuple(floats), tuple(nested))
    return plan


def _plain(value: Any, bad: list[str], name: str) -> Any:
    """``value`` as JSON-ready data; a non-finite float becomes None and its field name goes to ``bad``.

    One pass, with a per-class plan, because dataclasses.asdict (a deep copy) and a second walk
    for NaN dominated the time on logs of 10^5 rows.
    """
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        bad.append(name)
        return None
    if isinstance(value, str | int | bool) or value is None:
        return value
    if isinstance(value, list):
        if not value:
            return []
        kind = type(value[0])
        if dataclasses.is_dataclass(kind) and all(type(v) is kind for v in value):
            plan = _plan(kind)
            return [_record(v, plan, bad) for v in value]
        return [_plain(v, bad, name) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v, bad, str(k)) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _record(value, _plan(type(value)), bad)
    return value


def _record(value: Any, plan: _Plan, bad: list[str]) -> dict[str, Any]:
    out = dict(vars(value))
    for key in plan.floats:
        v = out[key]
        if v is not None and not math.isfinite(v):
            bad.append(key)
            out[key] = None
    for key in plan.nested:
        v = out[key]
        if v:
            out[key] = _plain(v, bad, key)
        elif isinstance(v, list | dict):
            out[key] = type(v)()
    return out


@dataclass
class ParseResult:
    """Base of every parser's result; ``to_json`` gives the documented dict."""

    status: Status = "incomplete"
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The documented dict, JSON-safe: a NaN/Infinity (JSON has neither) is null, with a note."""
        bad: list[str] = []
        out: dict[str, Any] = _plain(self, bad, "")
        if bad:
            fields = ", ".join(dict.fromkeys(bad))
            out["notes"].append(f"non-finite numbers shown as null ({len(bad)}, in: {fields[:200]})")
        return out

    def note(self, text: str) -> None:
        """Add ``text`` once (a log of many runs repeats the same finding), at most MAX_NOTES notes."""
        if text in self.notes:
            return
        if len(self.notes) < MAX_NOTES - 1:
            self.notes.append(text)
        elif self.notes[-1] != _MORE:
            self.notes.append(_MORE)
