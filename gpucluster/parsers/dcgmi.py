"""Parser for the table ``dcgmi diag -r N`` prints (DCGM 2.x, 3.x and 4.x).

Layout (both versions): a ``| Diagnostic | Result |`` header, then sections opened by
``|-----  Deployment  ----+----|`` or ``+-----  Hardware  ----+----+`` rows, then
``| <test name> | <result> |`` rows. The result starts with ``Pass``, ``Fail``, ``Warn``,
``Skip`` or ``Not Run``, optionally ``- All``, ``- GPU 3`` or ``- GPUs: 1, 2``. A test whose
GPUs disagree continues on a row with an empty name (``|   | Fail - GPU: 0 |``), and
``Warning``/``Info``/``Error`` rows, wrapped over rows with an empty name, explain the test
above them. DCGM 3.x opens with a ``Metadata`` section (DCGM version, driver, PCI device ids);
DCGM 2.x names the first check ``Blacklist``, 3.x ``Denylist``. DCGM 4.x names tests in lower
case (``software``, ``memory``, ``pcie``) and follows each with one row per GPU
(``|   | GPU0: Pass |``). An ``Error`` row before any test is a diagnostic that could not run,
and counts as a failure.

The table closes with a border row without a title (``+-----+-----+``); a table whose body
started but that has no closing border was cut short and is ``incomplete`` unless something
already failed. A log holding several runs is judged as one: the worst result stays.
Rows are split at their ``|`` characters, never with a lazy regex: a lazy group followed by a
run of blanks backtracks quadratically over a long line of spaces.

A run in which every test was skipped, or every test past the deployment checks (the
Deployment section, DCGM 4.x's ``software``) was skipped or not run, diagnosed nothing at the
level asked for: ``incomplete``, never ``ok`` (NVIDIA/DCGM#55: ``dcgmi diag -r 3`` whose tests
"beyond the level 1 tests" all read ``Skip``).

The same holds for one GPU. Each test keeps its per-GPU results (``gpu_results``, GPU index as
text to the worst result) where the output gives them: DCGM 4.x's ``GPU0: Pass`` rows, the
``- GPU 3``/``- GPU: 3``/``- GPUs: 1, 2`` suffixes DCGM 2.x/3.x print when GPUs disagree (one row
per result, ``Skip - GPU: 7`` among them), and the JSON's ``gpu_ids``/``entity_id`` entries. A GPU
that appears in the run (in any test's results, the deployment checks' included) and that every
test past the deployment checks skipped or did not run is a GPU nothing diagnosed: the run is
``incomplete``, with a note naming the GPU and the tests, unless it already failed. A test that
names GPUs but not this one did not run on it (DCGM 3.x leaves a GPU whose result is "not run" out
of every list). A test without a per-GPU breakdown (``Pass - All``, a bare ``Pass``, a JSON test
with only a summary) judged every GPU alike, so where no test gives one (DCGM 2.x/3.x runs whose
GPUs all agreed) only the whole-run rule above applies.

dcgmi that failed before its table prints ``Error: <message>`` (``Error: Unable to connect to
host engine. Host engine connection invalid/disconnected.``, ``Error: Unable to complete
diagnostic for group 2. Return: (-3) ...``): such a line makes the output dcgmi's failed run,
``failed`` with the message in ``errors``, as does a crash. Output with neither a table nor one
of dcgmi's own lines is not dcgmi output.

``dcgmi diag -r N -j`` prints JSON instead (:func:`parse_json`, chosen when the output holds a
JSON object and no table): ``{"DCGM GPU Diagnostic": {"test_categories": [{"category":
"Deployment", "tests": [{"name": "Denylist", "results": [{"gpu_ids": "0,1", "status": "PASS"}]},
...]}], "version": "3.1.0"}}`` (DCGM 3.x, as NVIDIA/DCGM's nvvs ``JsonOutput`` writes it and its
"Deserialize real output" test reads it). ``results`` holds one entry per GPU (``gpu_ids`` a GPU
index, as a number or a string) except for the deployment checks, whose one entry lists all GPUs
(``"0,1,2"``); ``status`` is ``PASS``/``FAIL``/``WARN``/``SKIPPED`` (``Pass``/``Fail`` in some
releases); ``warnings`` and ``info`` are lists of text (or of objects with a ``warning`` or
``message``). DCGM 4.x names the root ``DCGM Diagnostic`` and a result's GPU ``entity_id`` (with
``entity_group`` ``GPU``); a ``runtime_error`` means the diagnostic could not run. ``null``
entries in ``tests`` (real output has them) are skipped. Output that stops inside the object is
``incomplete``, never a pass.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from gpucluster.parsers.common import NotToolOutput, ParseResult, clean_lines, crash

_RESULT = re.compile(r"(pass|fail|warn(?:ing)?|skip|not run)\b[ \t]*(?:-[ \t]*(.*))?", re.IGNORECASE)
# "GPU 3", "GPU: 3", "GPUs: 1, 2" after a result's dash (dcgmi/Diag.cpp HelperDisplayGpuResults). A list
# longer than the column is cut and ends in "..." (CommandOutputController::ReplaceTag): "GPUs: 0, 1, 1...".
# The list is split at its commas, not matched by one regex: optional blanks on both sides of an
# optional comma backtrack cubically over a long run of blanks.
_GPU_WORD = re.compile(r"GPUs?[ \t]*:?", re.IGNORECASE)
_GPU_RESULT = re.compile(r"GPU[ \t]?(\d{1,9})[ \t]*:[ \t]*(pass|fail|warn(?:ing)?|skip|not run)", re.IGNORECASE)
_DETAIL_KINDS = {"warning": "warning", "info": "info", "error": "error"}
_RANK = {"fail": 3, "warn": 2, "pass": 1, "skip": 0}
_WRAP = 44  # the result column holds 46 characters; a full piece is 45 before its pad
_MAX_TEXT = 4000  # a wrapped message or merged result longer than this is hostile: stop growing it
_MAX_GPUS = 4096
_VERSION = re.compile(r"(?<![\d.])(\d{1,6}\.\d{1,6}(?:\.\d{1,6})?)")
# dcgmi reports a failure as "Error: <message>" (dcgmi/Diag.cpp, dcgmi/CommandLineParser.cpp):
# "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.",
# "Error: unable to establish a connection to the specified host: localhost", "Error: Unable to
# complete diagnostic for group 2. Return: (-3) ...". The message names what failed.
_ERROR_PREFIX = "Error: "
_ERROR_WORDS = ("host engine", "hostengine", "specified host", "diagnostic", "Diagnostic", "DCGM", "dcgm", "NVVS",
                "nvvs", "group", "plugin", "GPU")
_RAN = "Successfully ran diagnostic for group"
# DCGM's level-1 checks: the Deployment section (DCGM 2.x/3.x), or the "software" test DCGM 4.x runs them as.
_DEPLOYMENT_TESTS = ("software",)


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
    # GPU index (as text, a JSON key) -> the worst result the output gives that GPU for this test;
    # empty when the output gives no per-GPU breakdown ("Pass - All", a bare "Pass").
    gpu_results: dict[str, str] = field(default_factory=dict)
    # The output cut a GPU list short ("GPUs: 0, 1, ..."): a GPU missing from gpu_results may have run it.
    gpu_results_partial: bool = False


@dataclass
class DcgmiResult(ParseResult):
    dcgm_version: str | None = None
    driver_version: str | None = None
    gpu_device_ids: list[str] | None = None  # PCI device ids ("20b2"), as DCGM 3.x prints them
    tests: list[DcgmTest] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _result_of(text: str) -> tuple[str | None, list[int], list[int], bool]:
    """(result, failed GPUs, the GPUs the result names: ``- GPU 3``, ``- GPUs: 1, 2``, none for ``- All``;
    whether that list was cut short)."""
    m = _RESULT.fullmatch(text)
    if not m:
        return None, [], [], False
    word = m.group(1).lower()
    result = "warn" if word.startswith("warn") else ("skip" if word == "not run" else word)
    suffix = m.group(2) or ""
    gpus = [int(g) for g in re.findall(r"\d{1,9}", suffix)] if result == "fail" else []
    named, cut = _gpu_list(suffix.strip())
    return result, gpus, named, cut


def _gpu_list(suffix: str) -> tuple[list[int], bool]:
    """The GPUs of ``GPU 3``, ``GPU: 3``, ``GPUs: 1, 2`` (none for anything else), and whether the list
    was cut short with ``...``."""
    m = _GPU_WORD.match(suffix)
    if m is None:
        return [], False
    rest = suffix[m.end():].strip()
    cut = rest.endswith("...")
    if cut:
        rest = rest[:-3].rstrip()
    items = [item.strip() for item in rest.split(",")[: _MAX_GPUS + 1]]
    open_end = len(items) > 1 and items[-1] == ""
    if open_end:
        items.pop()
    if not all(item.isascii() and item.isdigit() and len(item) <= 9 for item in items):
        return [], False
    named = [int(item) for item in items][:_MAX_GPUS]
    if cut and named and not open_end:
        named.pop()  # "1..." may be the start of 10 or 11
    return named, cut


def _record_gpus(test: DcgmTest, gpus: list[int], result: str) -> None:
    """The worst result stays per GPU, as per test."""
    for gpu in gpus:
        key = str(gpu)
        known = test.gpu_results.get(key)
        if known is None:
            if len(test.gpu_results) >= _MAX_GPUS:
                continue
            test.gpu_results[key] = result
        elif _RANK[result] > _RANK[known]:
            test.gpu_results[key] = result


def _is_header(line: str) -> bool:
    if "Diagnostic" not in line:
        return False
    cells = line.split("|")
    return len(cells) == 4 and [c.strip() for c in cells] == ["", "Diagnostic", "Result", ""]


def _section(line: str) -> str | None:
    """The title of ``|-----  Deployment  ----+----|`` (or ``+---- .. +``); None for other lines."""
    if len(line) < 8 or line[0] not in "|+" or line[-1] not in "|+" or line[1:4] != "---":
        return None
    left, plus, right = line[1:-1].partition("+")
    if not plus or right.strip("-"):
        return None
    title = left.strip("-")
    if not title.strip() or title[:1] not in " \t" or title[-1:] not in " \t" or not left.endswith("--"):
        return None
    return title.strip()


def _is_border(line: str) -> bool:
    """``+------+------+``: the closing border (and the top one), a row without a title."""
    return len(line) > 2 and line[0] == "+" and line[-1] == "+" and not line.strip("+-") and "-" in line


def _cells(line: str) -> tuple[str, str, str] | None:
    """(name, value, raw value) of ``| name | value |``; the raw value keeps one leading blank less."""
    body = line[1:]
    name, bar, rest = body.partition("|")
    if not bar:
        return None
    raw = rest[:-1] if rest.endswith("|") else rest
    if raw[:1].isspace():
        raw = raw[1:]
    return name.strip(), raw.strip(), raw


def parse(text: str) -> DcgmiResult:
    """``dcgmi diag`` output: the JSON of ``-j`` when the output holds a JSON object and no table,
    else the table."""
    start = _json_start(text)
    if start is not None and not _has_table(text[:start]) and any(k in text for k in _JSON_MARKS):
        return parse_json(text, start)
    return parse_table(text)


def _json_start(text: str) -> int | None:
    """Where the first line that opens a JSON object starts (dcgmi may print warnings first)."""
    at = 0
    for line in text.split("\n"):
        if line.lstrip().startswith("{"):
            return at + len(line) - len(line.lstrip())
        at += len(line) + 1
    return None


def _has_table(text: str) -> bool:
    return any(_is_header(line) for line in clean_lines(text) if "Diagnostic" in line)


def _dcgmi_error(line: str) -> str | None:
    """The message of one of dcgmi's own error lines; None for any other line."""
    if not line.startswith(_ERROR_PREFIX):
        return None
    message = line[len(_ERROR_PREFIX) :].strip()
    return message[:_MAX_TEXT] if any(word in message for word in _ERROR_WORDS) else None


def parse_table(text: str) -> DcgmiResult:
    result = DcgmiResult()
    ran = False  # dcgmi said it ran, or reported an error of its own: its output, table or none
    crashed: list[str] = []
    in_body = False
    header_seen = False
    open_tables = 0  # tables whose body started and that have not closed
    section: str | None = None
    current: DcgmTest | None = None
    detail: DcgmDetail | None = None
    meta_key: str | None = None
    last_piece = 0
    metadata: dict[str, str] = {}
    for line in clean_lines(text):
        if not line:
            continue
        if line[0] not in "|+":
            if (message := _dcgmi_error(line)) is not None:
                ran = True
                if len(result.errors) < _MAX_GPUS:
                    result.errors.append(message)
            elif line.startswith(_RAN):
                ran = True
            elif crash(line):
                crashed.append(line[:200])
            continue
        if _is_header(line):
            if in_body:
                open_tables += 1  # a second table started before the first one closed
            header_seen, in_body, section, current, detail = True, False, None, None, None
            continue
        if not header_seen:
            continue
        if line.startswith(("+===", "|===")):
            in_body = True
            continue
        if line[1:4] == "---" and (title := _section(line)) is not None:
            section, current, detail = title, None, None
            continue
        if line[0] == "+" and _is_border(line):
            if in_body:
                in_body, section, current, detail = False, None, None, None
            continue
        if not in_body or line[0] != "|" or (cells := _cells(line)) is None:
            continue
        name, value, raw = cells
        if section == "Metadata":
            if name:
                meta_key = name
                metadata[name] = value
            elif meta_key is not None and len(metadata[meta_key]) < _MAX_TEXT:
                metadata[meta_key] += value
            continue
        kind = _DETAIL_KINDS.get(name.lower())
        if kind is not None:
            detail = DcgmDetail(kind, value)
            last_piece = len(value)
            if current is not None:
                current.details.append(detail)
            elif kind == "error" and len(result.errors) < _MAX_GPUS:
                result.errors.append(value)
            continue
        if not name:
            if not value:
                continue
            if (gm := _GPU_RESULT.fullmatch(value)) is not None and current is not None:
                # DCGM 4.x: one row per GPU under the test's own result.
                extra, _, _, _ = _result_of(gm.group(2))
                assert extra is not None
                gpu = int(gm.group(1))
                _merge(current, value, extra, [gpu] if extra == "fail" else [], [gpu], False)
                detail = None
                continue
            extra, gpus, named, cut = _result_of(value)
            if current is not None and extra is not None and detail is None:
                _merge(current, value, extra, gpus, named, cut)
            elif detail is not None:
                # DCGM wraps at the column edge, mid-word: a piece that filled the column
                # continues without a space.
                glued = last_piece >= _WRAP and not raw.startswith(" ")
                if len(detail.text) < _MAX_TEXT:
                    detail.text += ("" if glued else " ") + value
                last_piece = len(value)
                if detail.kind == "error" and current is None and result.errors:
                    result.errors[-1] = detail.text
            continue
        outcome, gpus, named, cut = _result_of(value)
        current = DcgmTest(name=name, section=section, result=outcome, raw=value, failed_gpus=gpus,
                           gpu_results_partial=cut)
        if outcome is not None:
            _record_gpus(current, named, outcome)
        detail = None
        result.tests.append(current)
    if not header_seen and not ran:
        raise NotToolOutput("not dcgmi diag output (no '| Diagnostic | Result |' table header)")
    for line in crashed[:5]:
        result.note(f"dcgmi crashed: {line}")
    if crashed:
        result.errors.append(f"crashed: {crashed[0]}")
    if in_body:
        open_tables += 1
    if v := metadata.get("DCGM Version"):
        result.dcgm_version = v
    for key, value in metadata.items():
        if key.startswith("Driver Version") and (vm := _VERSION.search(value)):
            result.driver_version = vm.group(1)
        elif key.startswith("GPU Device IDs"):
            result.gpu_device_ids = [x.strip() for x in value.split(",") if x.strip()]
    return _verdict(result, open_tables)


def _merge(test: DcgmTest, value: str, extra: str, gpus: list[int], named: list[int], cut: bool) -> None:
    if len(test.raw) < _MAX_TEXT:
        test.raw += "; " + value
    if len(test.failed_gpus) < _MAX_GPUS:
        test.failed_gpus += [g for g in gpus if g not in test.failed_gpus]
    _record_gpus(test, named, extra)
    test.gpu_results_partial = test.gpu_results_partial or cut
    if test.result is None or _RANK[extra] > _RANK[test.result]:
        test.result = extra


def _names(names: list[str]) -> str:
    shown = ", ".join(n[:60] for n in names[:20])
    return shown + (f" and {len(names) - 20} more" if len(names) > 20 else "")


def _is_deployment(test: DcgmTest) -> bool:
    return (test.section or "").lower() == "deployment" or test.name.lower() in _DEPLOYMENT_TESTS


def _gpus_not_diagnosed(tests: list[DcgmTest], hardware: list[DcgmTest]) -> list[int]:
    """The GPUs the run names that every test past the deployment checks skipped or did not run."""
    seen = {int(k) for t in tests for k in t.gpu_results}
    if not hardware or not seen:
        return []
    out = []
    for gpu in sorted(seen):
        key = str(gpu)
        ran = False
        for t in hardware:
            # No breakdown: the test's one result stands for every GPU. A breakdown without this
            # GPU: the test did not run on it.
            absent = None if t.gpu_results_partial else "skip"
            outcome = t.gpu_results.get(key, absent) if t.gpu_results else t.result
            if outcome != "skip":  # pass, warn, fail, or unrecognised (judged by its own rule)
                ran = True
                break
        if not ran:
            out.append(gpu)
    return out


def _gpu_names(gpus: list[int]) -> str:
    shown = ", ".join(map(str, gpus[:20])) + (f" and {len(gpus) - 20} more" if len(gpus) > 20 else "")
    return ("GPU " if len(gpus) == 1 else "GPUs ") + shown


def _verdict(result: DcgmiResult, open_tables: int) -> DcgmiResult:
    failed = [t.name for t in result.tests if t.result == "fail"]
    hardware = [t for t in result.tests if not _is_deployment(t)]
    unknown = [t.name for t in result.tests if t.result is None]
    if failed:
        result.note(f"failed: {_names(failed)}")
    if result.errors:
        result.note(f"diagnostic errors: {len(result.errors)}, first: {result.errors[0][:200]}")
    if unknown:
        result.note(f"unrecognised result text for: {_names(unknown)}")
    if failed or result.errors:
        result.status = "failed"
    elif not result.tests:
        result.note("no test rows")
        result.status = "incomplete"
    elif all(t.result == "skip" for t in result.tests):
        # Nothing was diagnosed (e.g. the DCGM package of another CUDA major skips every plugin).
        result.note(f"every test was skipped: {_names([t.name for t in result.tests])}")
        result.status = "incomplete"
    elif hardware and all(t.result == "skip" for t in hardware):
        # The level-1 checks passed and nothing past them ran: `dcgmi diag -r 3` that diagnosed
        # no GPU (NVIDIA/DCGM#55: every test "beyond the level 1 tests" skipped) is no pass.
        result.note(f"every test past the deployment checks was skipped: {_names([t.name for t in hardware])}")
        result.status = "incomplete"
    elif undiagnosed := _gpus_not_diagnosed(result.tests, hardware):
        # The hardware tests ran, but not on these GPUs: they are as undiagnosed as a run whose
        # every test skipped, and a run that says ok for them would pass a GPU nothing looked at.
        result.note(f"every test past the deployment checks was skipped or not run on {_gpu_names(undiagnosed)}: "
                    f"{_names(list(dict.fromkeys(t.name for t in hardware)))}")
        result.status = "incomplete"
    elif unknown:
        result.status = "incomplete"
    elif open_tables:
        result.note("the results table has no closing border: output cut short?")
        result.status = "incomplete"
    else:
        result.status = "ok"
    return result


_JSON_ROOTS = ("DCGM GPU Diagnostic", "DCGM Diagnostic")
# A JSON object without one of these is another tool's: the table parser then rejects it.
_JSON_MARKS = (*_JSON_ROOTS, '"test_categories"')
_GPU_KEYS = ("gpu_ids", "gpu_id")


def _json_status(value: Any) -> str | None:
    word = str(value).strip().lower() if isinstance(value, str) else ""
    for prefix, result in (("pass", "pass"), ("fail", "fail"), ("warn", "warn"), ("skip", "skip"),
                           ("not run", "skip"), ("notrun", "skip"), ("not applicable", "skip")):
        if word.startswith(prefix):
            return result
    return None


def _json_gpus(entry: dict[str, Any]) -> list[int]:
    raw: Any = next((entry[k] for k in _GPU_KEYS if k in entry), None)
    if raw is None and "entity_id" in entry and str(entry.get("entity_group", "GPU")).upper() == "GPU":
        raw = entry["entity_id"]
    if isinstance(raw, bool):
        return []
    if isinstance(raw, int):
        return [raw]
    if isinstance(raw, str):
        return [int(g) for g in re.findall(r"\d{1,9}", raw)][:_MAX_GPUS]
    return []


def _json_texts(value: Any) -> list[str]:
    items = value if isinstance(value, list) else [value] if value else []
    out = []
    for item in items[:_MAX_GPUS]:
        if isinstance(item, dict):
            item = item.get("warning") or item.get("message") or item.get("error") or json.dumps(item)
        if item:
            out.append(str(item)[:_MAX_TEXT])
    return out


def _json_test(test: dict[str, Any], section: str | None) -> DcgmTest:
    """One test's entries merged: the worst status stays, failed GPUs are collected, and a status
    that is not one of DCGM's words leaves the test unrecognised unless an entry failed."""
    name = str(test.get("name") or test.get("test_name") or "unnamed test")[:200]
    current = DcgmTest(name=name, section=section, result=None, raw="")
    pieces: list[str] = []
    unknown = False
    entries = test.get("results")
    summary = test.get("test_summary")
    statuses = [(e, _json_status(e.get("status"))) for e in (entries if isinstance(entries, list) else [])
                if isinstance(e, dict)]
    if isinstance(summary, dict) and "status" in summary:
        statuses.append(({"status": summary["status"]}, _json_status(summary["status"])))
    for entry, outcome in statuses[:_MAX_GPUS]:
        gpus = _json_gpus(entry)
        pieces.append(str(entry.get("status"))[:40] + (f" - GPU {', '.join(map(str, gpus))}" if gpus else ""))
        current.details += [DcgmDetail("warning", t) for t in _json_texts(entry.get("warnings"))]
        current.details += [DcgmDetail("info", t) for t in _json_texts(entry.get("info"))]
        if outcome is None:
            unknown = True
            continue
        _record_gpus(current, gpus, outcome)
        if outcome == "fail":
            current.failed_gpus += [g for g in gpus if g not in current.failed_gpus]
        if current.result is None or _RANK[outcome] > _RANK[current.result]:
            current.result = outcome
    if unknown and current.result != "fail":
        current.result = None
    current.raw = "; ".join(pieces)[:_MAX_TEXT]
    return current


def parse_json(text: str, start: int = 0) -> DcgmiResult:
    """``dcgmi diag -j`` output: the JSON object from ``start`` (see the module docstring)."""
    result = DcgmiResult()
    try:
        data, _ = json.JSONDecoder().raw_decode(text, start)
    except (ValueError, RecursionError) as exc:  # RecursionError: hostile nesting, never DCGM's
        result.note(f"dcgmi diag -j output is not complete JSON (cut short?): {str(exc)[:200]}")
        result.status = "incomplete"
        return result
    if not isinstance(data, dict):
        result.note("dcgmi diag -j output is not a JSON object")
        result.status = "incomplete"
        return result
    root = next((data[k] for k in _JSON_ROOTS if isinstance(data.get(k), dict)), data)
    # DCGM 3 states its version at the root; DCGM 4 under metadata.version
    # (NVIDIA/DCGM testing/python3/dcgm_diag_schema.json).
    metadata: dict[str, Any] = root["metadata"] if isinstance(root.get("metadata"), dict) else {}
    version = root.get("version") if isinstance(root.get("version"), str) else metadata.get("version")
    if isinstance(version, str):
        result.dcgm_version = version[:40]
    for holder in (data, root) if root is not data else (data,):
        result.errors += _json_texts(holder.get("runtime_error"))
    categories = root.get("test_categories")
    tests: list[tuple[str | None, Any]] = []
    for category in categories if isinstance(categories, list) else []:
        if isinstance(category, dict) and isinstance(category.get("tests"), list):
            section = category.get("category")
            tests += [(section if isinstance(section, str) else None, t) for t in category["tests"]]
    if isinstance(root.get("tests"), list):
        tests += [(None, t) for t in root["tests"]]
    for section, test in tests[:_MAX_GPUS]:
        if isinstance(test, dict):
            result.tests.append(_json_test(test, section))
    return _verdict(result, 0)
