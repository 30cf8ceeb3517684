"""Parser for gpu-burn (wilicc/gpu-burn) output.

gpu-burn exits 0 even when a GPU is FAULTY, so the verdict comes from its text. Formats
follow the upstream ``gpu_burn-drv.cpp`` printf calls:

* progress, rewritten in place with ``\\r``:
  ``%.1f%%  proc'd: %d (%.0f Gflop/s) - ...  errors: %d [ (WARNING!)| (DIED!)] - ...  temps: %d C|-- - ...``
  (``errors`` is reset after each ``Summary at:`` line, every 10 % of the run);
* ``Initialized device %d with %lu MB of memory (%lu MB available, using %lu MB of it),
  using FLOATS|DOUBLES[, using Tensor Cores]``;
* ``Burning for %d seconds.`` (newer builds), ``Killing processes.. `` (older) or
  ``Killing processes with SIGTERM (soft kill)`` (newer);
* the final summary ``Tested %d GPUs:`` then ``\\tGPU %d: OK|FAULTY``.

Verdict. ``failed`` when a GPU is FAULTY, any progress line shows errors or a dead worker
(``-1`` processed, ``(DIED!)``), an error count is a number but not a plain count (``-3`` is an
``int`` that overflowed, ``1e3`` is no ``%d`` output), or gpu-burn prints one of its error
lines (``Couldn't init a GPU test``, ``Failure during compute``, ``No clients are alive``,
``cuInit returned`` non-zero...) or crashes. A run that failed before any work (``Couldn't init a
GPU test: Error in "couldn't find file "compare.ptx" ..."``) is gpu-burn's failed run by that line
alone. ``incomplete`` when an error count cannot be read at all
(``nan``), no summary was printed, the summary lists fewer GPUs than it announced, a run
follows the last summary without its own, or no work was done. A log holding several runs
keeps the worst: a later ``OK`` never clears an earlier ``FAULTY``. Progress lines are cut at
their keywords with ``str.find``: the regex this replaced backtracked quadratically over a line
of digits.
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
    parse_int,
    parse_number,
    worst,
)

_INIT_INDEX = re.compile(r"(\d{1,9}) with ")
_BURNING = re.compile(r"Burning for (\d{1,12}) seconds")
_TESTED = re.compile(r"Tested (\d{1,9}) GPUs:")
_VERDICT = re.compile(r"GPU (\d{1,9}): (OK|FAULTY)")
_DIED_NOTE = "(DIED!)"
# What gpu_burn-drv.cpp prints when it cannot run or a worker breaks (to stderr, often
# captured with 2>&1): each means the burn did not happen as asked, whatever came before.
_ERROR_PREFIXES = (
    "Couldn't init CUDA",
    "Couldn't init a GPU test",
    "Failure during compute",
    "No clients are alive",
    "No CUDA devices",
    "No CUDA capable GPUs found",
    "Not enough devices for USEDEV",
    "Low mem for result",
    "terminate called after throwing",
)
_READ_ERROR = re.compile(r"read\[\d{1,9}\] error -?\d")
# Lines gpu-burn prints before any work (gpu_burn-drv.cpp): a run that failed at start-up is still gpu-burn's.
_START = ("Run length not specified in the command line", "Using compare file:", "Burning for ")
_CUINIT = re.compile(r"cuInit returned (-?\d{1,9})")


@dataclass
class BurnGpu:
    index: int
    verdict: str | None = None  # "ok" | "faulty"; None when the run printed no summary
    name: str | None = None
    uuid: str | None = None
    processed: int | None = None
    gflops: float | None = None
    errors: int | None = None
    errors_max: int | None = None  # largest error count any progress line showed
    died: bool = False
    temperature_c: int | None = None


@dataclass
class GpuBurnResult(ParseResult):
    format: str | None = None  # "2022" (Killing processes..) or "sigterm" (newer builds)
    precision: str | None = None  # "fp32" | "fp64"
    tensor_cores: bool | None = None
    duration_s: int | None = None
    tested_gpus: int | None = None
    progress_pct: float | None = None
    gpus: list[BurnGpu] = field(default_factory=list)


def _groups(part: str) -> list[list[str]]:
    """Split "a (b) - c (d)" into per-GPU token groups at the lone "-" gpu-burn puts between GPUs.

    A negative number ("-3") is one token, so it never reads as a separator.
    """
    groups: list[list[str]] = [[]]
    for token in part.split():
        if token == "-":
            groups.append([])
        else:
            groups[-1].append(token)
    return [g for g in groups if g]


@dataclass
class _Progress:
    pct: float | None
    procs: list[list[str]]
    errors: list[list[str]]
    temps: list[list[str]]


def _progress(line: str) -> _Progress | None:
    """A progress line: ``%.1f%%  proc'd: ...  errors: ...  temps: ...``, or None."""
    i = line.find("proc'd:")
    if i < 0:
        return None
    j = line.find("errors:", i)
    k = line.find("temps:", j) if j >= 0 else -1
    if k < 0:
        return None
    head = line[:i].split()
    pct = parse_number(head[-1][:-1]) if head and head[-1].endswith("%") else None
    return _Progress(pct, _groups(line[i + 7 : j]), _groups(line[j + 7 : k]), _groups(line[k + 6 :]))


def _error_count(group: list[str]) -> tuple[int | None, Status | None]:
    """(errors, problem) of one GPU's ``errors:`` group; problem is "failed"/"incomplete" if unreadable."""
    count = parse_count(group[0])
    if count is not None:
        return count, None
    # "%d" prints neither "1e3" nor "1.5"; a negative count is an int that overflowed. A number
    # of any of these shapes is not zero; anything else (nan, junk) cannot be read at all.
    return None, ("failed" if parse_number(group[0]) is not None else "incomplete")


def parse(text: str) -> GpuBurnResult:
    result = GpuBurnResult()
    gpus: dict[int, BurnGpu] = {}
    last: _Progress | None = None
    seen_marker = False
    errors_max: dict[int, int] = {}
    verdict: Status = "ok"
    expected = 0  # GPUs the latest "Tested N GPUs:" announced
    verdicts_after = 0  # verdict lines read since then
    progress_after_summary = False
    own_error = False  # one of gpu-burn's own error lines (not a crash, which any program prints)

    def gpu(i: int) -> BurnGpu:
        return gpus.setdefault(i, BurnGpu(index=i))

    def summary_done() -> None:
        nonlocal verdict
        if expected and verdicts_after < expected:
            result.note(f"summary cut short: 'Tested {expected} GPUs:' followed by {verdicts_after} verdict(s)")
            verdict = worst("incomplete", verdict)

    for line in clean_lines(text):
        if not line:
            continue
        if (p := _progress(line)) is not None:
            last = p
            seen_marker = True
            progress_after_summary = result.tested_gpus is not None
            for i, group in enumerate(p.errors):
                count, problem = _error_count(group)
                if problem is not None:
                    result.note(f"GPU {i}: error count is not a count: {group[0][:40]!r}")
                    verdict = worst(problem, verdict)
                    if problem == "failed":
                        errors_max[i] = max(errors_max.get(i, 0), 1)
                elif count:
                    errors_max[i] = max(errors_max.get(i, 0), count)
                if _DIED_NOTE in group[1:]:
                    gpu(i).died = True
            for i, group in enumerate(p.procs):
                if group[0] == "-1":
                    gpu(i).died = True
            continue
        if line.startswith(_ERROR_PREFIXES) or ("error" in line and _READ_ERROR.search(line)):
            result.note(f"gpu-burn reported an error: {line[:200]}")
            verdict = "failed"
            own_error = own_error or not line.startswith("terminate called")
            continue
        if (m := _CUINIT.match(line)) and m.group(1) != "0":
            result.note(f"CUDA did not initialise: {line[:200]}")
            verdict = "failed"
            own_error = True
            continue
        if crash(line):
            result.note(f"gpu-burn crashed: {line[:200]}")
            verdict = "failed"
            continue
        if line.startswith(_START):
            seen_marker = True
        if "Killing processes with SIGTERM" in line:
            result.format = "sigterm"
        elif "Killing processes.." in line:
            result.format = "2022"
        if "Initialized device " in line:
            # The 2022 build prints these after "Killing processes.. " on the same line; a
            # segment per device keeps the search for "using ..." inside its own message.
            for segment in line.split("Initialized device ")[1:]:
                if not (im := _INIT_INDEX.match(segment)):
                    continue
                for word, precision in (("using DOUBLES", "fp64"), ("using FLOATS", "fp32")):
                    at = segment.find(word)
                    if at >= 0:
                        seen_marker = True
                        result.precision = precision
                        result.tensor_cores = segment.startswith(", using Tensor Cores", at + len(word))
                        gpu(int(im.group(1)))
                        break
        if m := _BURNING.search(line):
            seen_marker = True
            progress_after_summary = result.tested_gpus is not None
            result.duration_s = int(m.group(1))
        elif (listed := _listed(line)) is not None:
            g = gpu(listed[0])
            g.name, g.uuid = listed[1], listed[2]
        elif m := _TESTED.match(line):
            summary_done()
            seen_marker = True
            progress_after_summary = False
            expected, verdicts_after = int(m.group(1)), 0
            result.tested_gpus = max(result.tested_gpus or 0, expected)
        elif (m := _VERDICT.fullmatch(line)) and result.tested_gpus is not None:
            verdicts_after += 1
            g = gpu(int(m.group(1)))
            # A later run's OK does not clear an earlier FAULTY.
            if g.verdict != "faulty":
                g.verdict = m.group(2).lower()
    summary_done()

    if not seen_marker and not own_error:
        raise NotToolOutput("not gpu-burn output (no progress, 'Initialized device' or 'Tested N GPUs' line)")
    if progress_after_summary:
        result.note("progress after the last 'Tested N GPUs:' summary: a later run has no summary")
        verdict = worst("incomplete", verdict)

    if last is not None:
        result.progress_pct = last.pct
        for i, group in enumerate(last.procs):
            g = gpu(i)
            g.processed = parse_int(group[0])
            if len(group) >= 2 and group[1].startswith("("):
                g.gflops = parse_number(group[1][1:])
        for i, group in enumerate(last.errors):
            gpu(i).errors = _error_count(group)[0]
        for i, group in enumerate(last.temps):
            if len(group) == 2 and group[1] == "C":
                gpu(i).temperature_c = parse_count(group[0])
    for i, g in gpus.items():
        if g.errors is not None or i in errors_max:
            g.errors_max = max(errors_max.get(i, 0), g.errors or 0)
    result.gpus = [gpus[i] for i in sorted(gpus)]
    return _verdict(result, last is not None, verdict)


def _listed(line: str) -> tuple[int, str, str] | None:
    """``GPU %d: NAME (UUID: GPU-...)`` as ``nvidia-smi -L`` prints it before a burn."""
    if not line.startswith("GPU ") or not line.endswith(")"):
        return None
    colon = line.find(": ", 4)
    tag = line.rfind(" (UUID: ")
    if colon < 0 or tag <= colon:
        return None
    index = parse_count(line[4:colon])
    if index is None:
        return None
    return index, line[colon + 2 : tag], line[tag + 8 : -1]


def _verdict(result: GpuBurnResult, progressed: bool, verdict: Status) -> GpuBurnResult:
    faulty = [g.index for g in result.gpus if g.verdict == "faulty"]
    erring = [g.index for g in result.gpus if (g.errors_max or 0) > 0]
    died = [g.index for g in result.gpus if g.died]
    idle = [g.index for g in result.gpus if g.processed is not None and g.processed <= 0 and not g.died]
    if faulty:
        result.note(f"FAULTY: GPU {', '.join(map(str, faulty))}")
    if erring:
        result.note(f"calculation errors on GPU {', '.join(map(str, erring))}")
    if died:
        result.note(f"worker died on GPU {', '.join(map(str, died))}")
    if faulty or erring or died or verdict == "failed":
        result.status = "failed"
        return result
    if result.tested_gpus is None:
        result.note("no final per-GPU summary ('Tested N GPUs:'): run cut short?")
    if not progressed:
        result.note("no progress lines: no work was reported")
    elif idle:
        result.note(f"no work done (0 processed) on GPU {', '.join(map(str, idle))}")
    unjudged = [g.index for g in result.gpus if g.verdict is None]
    if result.tested_gpus is not None and unjudged:
        result.note(f"no OK/FAULTY verdict for GPU {', '.join(map(str, unjudged))}")
    ok = result.tested_gpus is not None and progressed and not idle and not unjudged
    result.status = worst("ok" if ok else "incomplete", verdict)
    return result
