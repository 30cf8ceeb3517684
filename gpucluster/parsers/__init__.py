"""Parsers of GPU-cluster tool output: each turns a captured log into a JSON-ready dict.

Every result carries ``status``: ``ok``, ``failed`` (the tool reports a fault) or
``incomplete`` (the run was cut short or did no work), plus ``notes`` saying why.
A parser given another tool's output raises :class:`NotToolOutput`.

Every result is JSON-safe: a float that is not finite (no parser should produce one, but a
hostile log must not turn into ``NaN`` on stdout) becomes null, with a note
(:meth:`ParseResult.to_json`).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from gpucluster.parsers import dcgmi, gpu_burn, ib_write_bw, nccl_tests, nvbandwidth, nvidia_smi
from gpucluster.parsers.common import NotToolOutput
from gpucluster.parsers.nccl_tests import busbw_factor

__all__ = ["PARSERS", "NotToolOutput", "busbw_factor", "parse", "parse_run"]


def _nccl(text: str) -> dict[str, Any]:
    return nccl_tests.parse(text).to_json()


def _gpu_burn(text: str) -> dict[str, Any]:
    return gpu_burn.parse(text).to_json()


def _ib_write_bw(text: str) -> dict[str, Any]:
    return ib_write_bw.parse(text).to_json()


def _nvidia_smi(text: str) -> dict[str, Any]:
    return nvidia_smi.parse(text).to_json()


def _dcgmi(text: str) -> dict[str, Any]:
    return dcgmi.parse(text).to_json()


def _nvbandwidth(text: str) -> dict[str, Any]:
    return nvbandwidth.parse(text).to_json()


PARSERS: dict[str, Callable[[str], dict[str, Any]]] = {
    "nccl-tests": _nccl,
    "gpu-burn": _gpu_burn,
    "ib_write_bw": _ib_write_bw,
    "nvidia-smi": _nvidia_smi,
    "dcgmi": _dcgmi,
    "nvbandwidth": _nvbandwidth,
}


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a parser runs.

    The parsers build only acyclic data (reference counting frees all of it), but a log of
    10^5 rows makes the collector re-scan the new row objects again and again: on a 50 MB log
    that cost more than the parsing itself (bench/bench_parse.py).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def parse(tool: str, text: str) -> dict[str, Any]:
    """Parse ``text`` as ``tool``'s output; raise KeyError for an unknown tool."""
    if tool not in PARSERS:
        raise KeyError(f"unknown tool {tool!r}; known: {', '.join(PARSERS)}")
    with _collector_paused():
        return PARSERS[tool](text)


def parse_run(tool: str, text: str, rc: int) -> dict[str, Any]:
    """Parse a run's output knowing its exit status: a run that exited non-zero is ``failed``
    whatever it printed (perftest exits 1 after a completion error, having printed good rows);
    output that is not the tool's at all is ``incomplete`` (``failed`` with a non-zero exit)."""
    try:
        result = parse(tool, text)
    except NotToolOutput as exc:
        result = {"status": "incomplete", "notes": [str(exc)]}
    if rc != 0:
        result["status"] = "failed"
        result["notes"] = [*result.get("notes", []), f"{tool} exited with status {rc}"]
    return result
