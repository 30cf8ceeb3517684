"""Parser for the table ``dcgmi diag -r N`` prints (DCGM 2.x and 3.x).

Layout (both versions): a ``| Diagnostic | Result |`` header, then sections opened by
``|-----  Deployment  ----+----|`` or ``+-----  Hardware  ----+----+`` rows, then
``| <test name> | <result> |`` rows. The result starts with ``Pass``, ``Fail``, ``Warn``,
``Skip`` or ``Not Run``, optionally ``- All``, ``- GPU 3`` or ``- GPUs: 1, 2``. A test whose
GPUs disagree continues on a row with an empty name (``|   | Fail - GPU: 0 |``), and
``Warning``/``Info``/``Error`` rows, wrapped over rows with an empty name, explain the test
above them. DCGM 3.x opens with a ``Metadata`` section (DCGM version, driver, PCI device ids);
DCGM 2.x names the first check ``Blacklist``, 3.x ``Denylist``. An ``Error`` row before any
test is a diagnostic that could not run, and counts as a failure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpucluster.parsers.common import NotToolOutput, ParseResult, clean_lines

_HEADER = re.compile(r"^\|\s*Diagnostic\s*\|\s*Result\s*\|$")
_SECTION = re.compile(r"^[|+]-{3,}\s+(\S.*?)\s+-{2,}\+-*[|+]$")
_ROW = re.compile(r"^\|\s?(.*?)\s*\|\s?(.*?)\s*\|?$")
_RESULT = re.compile(r"^(pass|fail|warn(?:ing)?|skip|not run)\b\s*(?:-\s*(.*))?$", re.IGNORECASE)
_DETAIL_KINDS = {"warning": "warning", "info": "info", "error": "error"}
_RANK = {"fail": 3, "warn": 2, "pass": 1, "skip": 0}
_WRAP = 44  # the result column holds 46 characters; a full piece is 45 before its pad
_VERSION = re.compile(r"(\d+\.\d+(?:\.\d+)?)")


@dataclass
class DcgmDetail:
    kind: str  # "warning" | "info" | "error"
    text: str


@dataclass
class DcgmTest:
    name: str
    section: str | None
    result: str | None  # "pass" | "fail" | "warn" | "skip"; None when the text is not one
    raw: str
    failed_gpus: list[int] = field(default_factory=list)
    details: list[DcgmDetail] = field(default_factory=list)


@dataclass
class DcgmiResult(ParseResult):
    dcgm_version: str | None = None
    driver_version: str | None = None
    gpu_device_ids: list[str] | None = None  # PCI device ids ("20b2"), as DCGM 3.x prints them
    tests: list[DcgmTest] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _result_of(text: str) -> tuple[str | None, list[int]]:
    m = _RESULT.match(text)
    if not m:
        return None, []
    word = m.group(1).lower()
    result = "warn" if word.startswith("warn") else ("skip" if word == "not run" else word)
    gpus = [int(g) for g in re.findall(r"\d+", m.group(2) or "")] if result == "fail" else []
    return result, gpus


def parse(text: str) -> DcgmiResult:
    result = DcgmiResult()
    in_body = False
    header_seen = False
    section: str | None = None
    current: DcgmTest | None = None
    detail: DcgmDetail | None = None
    meta_key: str | None = None
    last_piece = 0
    metadata: dict[str, str] = {}
    for line in clean_lines(text):
        if _HEADER.match(line):
            header_seen = True
            continue
        if not header_seen:
            continue
        if line.startswith("+===") or line.startswith("|==="):
            in_body = True
            continue
        if m := _SECTION.match(line):
            section, current, detail = m.group(1).strip(), None, None
            continue
        if not in_body or not line.startswith("|"):
            continue
        m = _ROW.match(line)
        if not m:
            continue
        name, value = m.group(1).strip(), m.group(2).strip()
        if section == "Metadata":
            if name:
                meta_key = name
                metadata[name] = value
            elif meta_key is not None:
                metadata[meta_key] += value
            continue
        kind = _DETAIL_KINDS.get(name.lower())
        if kind is not None:
            detail = DcgmDetail(kind, value)
            last_piece = len(value)
            if current is not None:
                current.details.append(detail)
            elif kind == "error":
                result.errors.append(value)
            continue
        if not name:
            if not value:
                continue
            extra, gpus = _result_of(value)
            if current is not None and extra is not None and detail is None:
                current.raw += "; " + value
                current.failed_gpus += gpus
                if current.result is None or _RANK[extra] > _RANK[current.result]:
                    current.result = extra
            elif detail is not None:
                # DCGM wraps at the column edge, mid-word: a piece that filled the column
                # continues without a space.
                glued = last_piece >= _WRAP and not m.group(2).startswith(" ")
                detail.text += ("" if glued else " ") + value
                last_piece = len(value)
                if detail.kind == "error" and current is None and result.errors:
                    result.errors[-1] = detail.text
            continue
        outcome, gpus = _result_of(value)
        current = DcgmTest(name=name, section=section, result=outcome, raw=value, failed_gpus=gpus)
        detail = None
        result.tests.append(current)
    if not header_seen:
        raise NotToolOutput("not dcgmi diag output (no '| Diagnostic | Result |' table header)")
    if v := metadata.get("DCGM Version"):
        result.dcgm_version = v
    for key, value in metadata.items():
        if key.startswith("Driver Version") and (vm := _VERSION.search(value)):
            result.driver_version = vm.group(1)
        elif key.startswith("GPU Device IDs"):
            result.gpu_device_ids = [x.strip() for x in value.split(",") if x.strip()]
    return _verdict(result)


def _verdict(result: DcgmiResult) -> DcgmiResult:
    failed = [t.name for t in result.tests if t.result == "fail"]
    unknown = [t.name for t in result.tests if t.result is None]
    if failed:
        result.notes.append(f"failed: {', '.join(failed)}")
    if result.errors:
        result.notes.append(f"diagnostic errors: {len(result.errors)}")
    if unknown:
        result.notes.append(f"unrecognised result text for: {', '.join(unknown)}")
    if failed or result.errors:
        result.status = "failed"
    elif not result.tests:
        result.notes.append("no test rows")
        result.status = "incomplete"
    elif unknown:
        result.status = "incomplete"
    else:
        result.status = "ok"
    return result
