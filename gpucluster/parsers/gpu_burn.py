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
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpucluster.parsers.common import NotToolOutput, ParseResult, clean_lines

_PROGRESS = re.compile(r"(\d+(?:\.\d+)?)%\s+proc'd:\s*(.*?)\s+errors:\s*(.*?)\s+temps:\s*(.*?)\s*$")
_PROC = re.compile(r"^(-?\d+)\s+\((\d+(?:\.\d+)?)\s+Gflop/s\)$")
_ERR = re.compile(r"^(-?\d+)\s*(\((?:WARNING|DIED)!\))?$")
_SEP = re.compile(r"\s+-\s+")
_INIT = re.compile(r"Initialized device (\d+) with .*?using (FLOATS|DOUBLES)(, using Tensor Cores)?")
_BURNING = re.compile(r"Burning for (\d+) seconds")
_LISTED = re.compile(r"^GPU (\d+): (.+?) \(UUID: ([^)]+)\)$")
_TESTED = re.compile(r"^Tested (\d+) GPUs:")
_VERDICT = re.compile(r"^GPU (\d+): (OK|FAULTY)$")


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


def _split(part: str) -> list[str]:
    return [p.strip() for p in _SEP.split(part.strip()) if p.strip()]


def parse(text: str) -> GpuBurnResult:
    result = GpuBurnResult()
    gpus: dict[int, BurnGpu] = {}
    last: re.Match[str] | None = None
    seen_marker = False
    errors_max: dict[int, int] = {}

    def gpu(i: int) -> BurnGpu:
        return gpus.setdefault(i, BurnGpu(index=i))

    for line in clean_lines(text):
        if not line:
            continue
        if m := _PROGRESS.search(line):
            last = m
            seen_marker = True
            for i, err in enumerate(_split(m.group(3))):
                if (em := _ERR.match(err)) and int(em.group(1)) > 0:
                    errors_max[i] = max(errors_max.get(i, 0), int(em.group(1)))
            continue
        if "Killing processes with SIGTERM" in line:
            result.format = "sigterm"
        elif "Killing processes.." in line:
            result.format = "2022"
        for im in _INIT.finditer(line):
            seen_marker = True
            result.precision = "fp64" if im.group(2) == "DOUBLES" else "fp32"
            result.tensor_cores = im.group(3) is not None
            gpu(int(im.group(1)))
        if m := _BURNING.search(line):
            seen_marker = True
            result.duration_s = int(m.group(1))
        elif m := _LISTED.match(line):
            g = gpu(int(m.group(1)))
            g.name, g.uuid = m.group(2), m.group(3)
        elif m := _TESTED.match(line):
            seen_marker = True
            result.tested_gpus = int(m.group(1))
        elif (m := _VERDICT.match(line)) and result.tested_gpus is not None:
            gpu(int(m.group(1))).verdict = m.group(2).lower()

    if not seen_marker:
        raise NotToolOutput("not gpu-burn output (no progress, 'Initialized device' or 'Tested N GPUs' line)")

    if last is not None:
        result.progress_pct = float(last.group(1))
        for i, proc in enumerate(_split(last.group(2))):
            if pm := _PROC.match(proc):
                g = gpu(i)
                g.processed, g.gflops = int(pm.group(1)), float(pm.group(2))
                g.died = g.died or g.processed == -1
        for i, err in enumerate(_split(last.group(3))):
            if em := _ERR.match(err):
                g = gpu(i)
                g.errors = int(em.group(1))
                g.died = g.died or em.group(2) == "(DIED!)"
        for i, temp in enumerate(_split(last.group(4))):
            if tm := re.match(r"^(\d+) C$", temp):
                gpu(i).temperature_c = int(tm.group(1))
    for i, g in gpus.items():
        if g.errors is not None:
            g.errors_max = max(errors_max.get(i, 0), g.errors)
    result.gpus = [gpus[i] for i in sorted(gpus)]
    return _verdict(result, last is not None)


def _verdict(result: GpuBurnResult, progressed: bool) -> GpuBurnResult:
    faulty = [g.index for g in result.gpus if g.verdict == "faulty"]
    erring = [g.index for g in result.gpus if (g.errors_max or 0) > 0]
    died = [g.index for g in result.gpus if g.died]
    idle = [g.index for g in result.gpus if g.processed is not None and g.processed <= 0 and not g.died]
    if faulty:
        result.notes.append(f"FAULTY: GPU {', '.join(map(str, faulty))}")
    if erring:
        result.notes.append(f"calculation errors on GPU {', '.join(map(str, erring))}")
    if died:
        result.notes.append(f"worker died on GPU {', '.join(map(str, died))}")
    if faulty or erring or died:
        result.status = "failed"
        return result
    if result.tested_gpus is None:
        result.notes.append("no final per-GPU summary ('Tested N GPUs:'): run cut short?")
    if not progressed:
        result.notes.append("no progress lines: no work was reported")
    elif idle:
        result.notes.append(f"no work done (0 processed) on GPU {', '.join(map(str, idle))}")
    unjudged = [g.index for g in result.gpus if g.verdict is None]
    if result.tested_gpus is not None and unjudged:
        result.notes.append(f"no OK/FAULTY verdict for GPU {', '.join(map(str, unjudged))}")
    ok = result.tested_gpus is not None and progressed and not idle and not unjudged
    result.status = "ok" if ok else "incomplete"
    return result
