"""Parser for NVIDIA nvbandwidth output (``nvbandwidth -t host_to_device_memcpy_ce ...``).

Each test prints ``Running <test>.``, a title such as ``memcpy CE CPU(row) -> GPU(column)
bandwidth (GB/s)``, a matrix whose first line holds the column indices and whose other lines
start with a row index, then ``SUM <test> <GB/s>`` (v0.10 adds ``COEFFICIENT_OF_VARIATION``).
``N/A`` cells (a GPU to itself) read as null. For the host<->device tests the matrix has one row
and one column per GPU (testcases_ce.cpp, https://github.com/NVIDIA/nvbandwidth: device-to-host
is titled ``CPU(row) <- GPU(column)``; Azure's v0.10 capture titles it ``GPU(row) -> CPU(column)``
and still prints one row), so the figure per GPU is the cell in that GPU's column; a matrix of
one column is read by rows. Rows may be indented (`` 0     55.20``).

Verdict. ``failed`` when nvbandwidth or CUDA reports an error (``ERROR``, ``CUDA_ERROR_``,
``failed``, ``terminate called``, or one of nvbandwidth's own assertion lines, ``[<CUDA error
name>] <description> in expression <call> in <function>() : <file>:<line>`` and ``ASSERT in
expression ...``) or the process crashed. ``incomplete`` when a test that started has no ``SUM``
line, a matrix cell is not a number (nor ``N/A``), or no test ran at all. A run that failed
before its first matrix (CUDA could not start, the first test asserted) is nvbandwidth's when it
holds its banner (``nvbandwidth Version:``) or one of its own error lines: ``failed`` with that
line as the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpucluster.parsers.common import (
    NotToolOutput,
    ParseResult,
    Status,
    clean_lines,
    crash,
    parse_count,
    parse_number,
    worst,
)

_RUNNING = re.compile(r"Running (\w{1,80})\.?$")
_TITLE = re.compile(r"memcpy (?:CE|SM) .{1,80}bandwidth \(GB/s\)")
_SUM = re.compile(r"SUM (\w{1,80}) (\S{1,40})$")
_ERROR = re.compile(r"\bERROR\b|CUDA_ERROR_\w|\bfailed\b|terminate called|Segmentation fault")
# nvbandwidth's own error lines (error_handling.h: CUDA_ASSERT, CU_ASSERT, NVML_ASSERT, ASSERT):
# "[CUDA_ERROR_INVALID_VALUE] invalid argument in expression cuMemSetAccess(...) in f() : file:line",
# "[cudaErrorUnsupportedPtxVersion] ... in expression ...", "NVML_ERROR: [...] in expression ...",
# "ASSERT in expression h_errorFlag == 0 in ...".
_OWN_ERROR = re.compile(r"(?:\[\w{1,80}\] |NVML_ERROR: \[|ASSERT in expression )")
_IN_EXPRESSION = " in expression "
# Its banner: a run that failed before its first matrix is still nvbandwidth's.
_BANNER = ("nvbandwidth Version:", "Built from Git version:")


@dataclass
class NvbandwidthTest:
    name: str
    title: str | None = None
    matrix: list[list[float | None]] = field(default_factory=list)
    sum_gbps: float | None = None
    per_gpu_gbps: dict[str, float | None] = field(default_factory=dict)


@dataclass
class NvbandwidthResult(ParseResult):
    version: str | None = None
    tests: list[NvbandwidthTest] = field(default_factory=list)


def _per_gpu(matrix: list[list[float | None]]) -> dict[str, float | None]:
    if len(matrix) == 1:
        return {str(i): v for i, v in enumerate(matrix[0])}
    if matrix and all(len(row) == 1 for row in matrix):
        return {str(i): row[0] for i, row in enumerate(matrix)}
    return {}


def parse(text: str) -> NvbandwidthResult:
    result = NvbandwidthResult()
    verdict: Status = "ok"
    current: NvbandwidthTest | None = None
    header: int | None = None  # columns of the current matrix, once its index line was read
    titles = 0
    seen = False  # its banner or an error line of its own ("Running <test>." is no proof alone)
    for line in clean_lines(text):
        if not line:
            header = None if current is None or current.matrix else header
            continue
        if _IN_EXPRESSION in line and _OWN_ERROR.match(line):
            result.note(f"nvbandwidth reported an error: {line[:300]}")
            verdict = "failed"
            seen = True
        elif line.startswith(_BANNER):
            seen = True
            if line.startswith(_BANNER[0]):
                result.version = line.split(":", 1)[1].strip()[:40] or None
        elif m := _RUNNING.match(line):
            current, header = NvbandwidthTest(name=m.group(1)), None
            result.tests.append(current)
        elif _TITLE.match(line):
            titles += 1
            if current is not None:
                current.title = line[:120]
        elif m := _SUM.match(line):
            if current is not None and m.group(1) == current.name:
                current.sum_gbps = parse_number(m.group(2))
            header = None
        elif _ERROR.search(line[:500]) or crash(line):
            result.note(f"nvbandwidth reported an error: {line[:200]}")
            verdict = "failed"
        elif current is not None and current.title is not None and current.sum_gbps is None:
            tokens = line.split()
            if header is None and all(parse_count(t) is not None for t in tokens):
                header = len(tokens)
            elif header is not None and parse_count(tokens[0]) is not None and len(tokens) == header + 1:
                cells = [None if t == "N/A" else parse_number(t) for t in tokens[1:]]
                if any(c is None and t != "N/A" for c, t in zip(cells, tokens[1:], strict=True)):
                    result.note(f"{current.name}: unreadable matrix row: {line[:120]}")
                    verdict = worst("incomplete", verdict)
                current.matrix.append(cells)
    if titles == 0 and not seen:
        raise NotToolOutput("not nvbandwidth output (no 'memcpy ... bandwidth (GB/s)' matrix title)")
    for test in result.tests:
        test.per_gpu_gbps = _per_gpu(test.matrix)
        if test.sum_gbps is None:
            result.note(f"{test.name}: no SUM line: the test did not finish")
            verdict = worst("incomplete", verdict)
        if not test.matrix:
            result.note(f"{test.name}: no matrix")
            verdict = worst("incomplete", verdict)
    if not result.tests:
        result.note("no 'Running <test>.' line: no test ran")
        verdict = worst("incomplete", verdict)
    result.status = verdict
    return result
