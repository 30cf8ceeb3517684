"""Parser for nvidia-smi output: :func:`parse` tells which output it is (``kind`` in the result),
reads it with that format's module and gives the verdict.

``query``
    ``nvidia-smi -q`` (also with ``-d SECTION``): :mod:`.query`.
``csv``
    ``--query-gpu=... --format=csv``: :mod:`.query_gpu`.
``nvlink``, ``nvlink_errors``
    ``nvidia-smi nvlink -s`` and ``nvidia-smi nvlink -e``: :mod:`.nvlink`.
``topo``
    ``nvidia-smi topo -m``: :mod:`.topo`.
``table``
    The default table: :mod:`.table`.
``error``
    nvidia-smi's own error lines and no output of the other kinds (``Unable to determine the
    device handle for GPU0000:0B:00.0: Unknown Error``, ``...: GPU is lost``, ``NVIDIA-SMI has
    failed ...``, ``Failed to initialize NVML: ...``, ``No devices were found``), whatever else the
    capture holds beside them (a shell prompt): always ``failed``, with those lines as the reasons.

What the formats share (the result, a GPU's health readings, merging snapshots) is in
:mod:`.shared`.

``status`` is ``failed`` when a GPU reports uncorrectable ECC errors (volatile or
aggregate), a pending page retirement or row remap, a row-remapping failure, a pending
channel/TPC repair, unrepairable memory, an exceeded SRAM error threshold, a required reset
or a recovery action; when a reading is ``ERR!`` (the table's mark for a value the driver
could not read) or a GPU is lost; when nvidia-smi says it could not reach a GPU (``Unable
to determine the device handle``); or when nvidia-smi crashed (a signal death:
:func:`~gpucluster.parsers.common.crash`). A counter that is not a plain non-negative integer
(``nan``, ``-3``, ``1e3``, ``Unknown Error`` in a health field) makes the GPU's health
unknown: ``incomplete``, never ``ok``. Output cut short is ``incomplete``: fewer ``GPU``
blocks than ``Attached GPUs``, a full ``-q`` block without its closing ``Processes`` entry, a
CSV row with too few fields, a table without its ``Processes:`` box, a topology matrix
without its ``Legend``. A log holding several snapshots (``-l``, or captures concatenated)
lists each GPU once, with its health fields merged worst-first, and is judged on every
snapshot.
"""

from __future__ import annotations

from gpucluster.parsers.common import NotToolOutput, Status, clean_lines, crash, worst
from gpucluster.parsers.nvidia_smi import nvlink, query, query_gpu, table, topo
from gpucluster.parsers.nvidia_smi.shared import Health, Merger, NvidiaSmiResult, is_fatal

__all__ = ["NvidiaSmiResult", "parse"]


def _kind(lines: list[str]) -> str | None:
    nonblank = [line.strip() for line in lines if line.strip()]
    useful = [line for line in nonblank if not is_fatal(line)]
    if not useful:
        return "error" if nonblank else None
    kind = _output_kind(useful)
    # nvidia-smi's error lines beside no output it could make (a shell prompt, the "NVML library
    # version" line a driver/library mismatch adds): the failed run of nvidia-smi.
    return "error" if kind is None and len(useful) < len(nonblank) else kind


def _output_kind(useful: list[str]) -> str | None:
    if query.recognises(useful):
        return "query"
    if table.recognises(useful):
        return "table"
    if query_gpu.recognises(useful):
        return "csv"
    if (links := nvlink.kind(useful)) is not None:
        return links
    if topo.recognises(useful):
        return "topo"
    return None


def _verdict(result: NvidiaSmiResult, healths: list[Health], fatal: list[str], errs: tuple[int, str]) -> None:
    status: Status = result.status if result.status != "ok" else "ok"
    for line in fatal[:10]:
        result.note(f"nvidia-smi could not reach a GPU: {line[:200]}")
        status = "failed"
    if errs[0]:
        result.note(f"ERR!, a GPU lost or needing a reset, or a crash, on {errs[0]} line(s), first: {errs[1][:120]}")
        status = "failed"
    for health in healths:
        for what in dict.fromkeys(health.failed):
            result.note(f"{health.who}: {what}")
            status = "failed"
        for what in dict.fromkeys(health.unreadable):
            result.note(f"{health.who}: health unknown, {what}")
            status = worst("incomplete", status)
    if not result.gpus:
        result.note("no GPUs parsed")
        status = worst("incomplete", status)
    result.status = status


def parse(text: str) -> NvidiaSmiResult:
    lines = clean_lines(text, keep_indent=True)
    kind = _kind(lines)
    if kind is None:
        raise NotToolOutput(
            "not nvidia-smi output (no -q log, --query-gpu CSV header, nvlink, topo or table)"
        )
    result = NvidiaSmiResult(kind=kind, status="ok")
    fatal = [line.strip() for line in lines if is_fatal(line.lstrip())]
    # ERR! (a reading the driver could not take) and a lost GPU are failures wherever they appear.
    err_lines = [line for line in lines
                 if "ERR!" in line or "GPU is lost" in line or "requires reset" in line or crash(line)]
    errs = (len(err_lines), err_lines[0].strip() if err_lines else "")
    merger = Merger(kind)
    healths: list[Health] = []
    if kind == "query":
        healths = query.read(lines, result, merger)
    elif kind == "csv":
        healths = query_gpu.read(lines, result, merger)
    elif kind == "table":
        healths = table.read([line.strip() for line in lines], result, merger)
    elif kind == "nvlink":
        healths = nvlink.read_status([line.strip() for line in lines], result)
    elif kind == "nvlink_errors":
        healths = nvlink.read_errors([line.strip() for line in lines], result)
    elif kind == "topo":
        healths = topo.read(text, result)
    if kind in ("query", "csv", "table"):
        result.gpus = merger.gpus()
        if merger.snapshots > len(result.gpus):
            result.note(
                f"{merger.snapshots} GPU snapshots of {len(result.gpus)} GPU(s) merged; the worst reading kept"
            )
    _verdict(result, healths, fatal, errs)
    return result
