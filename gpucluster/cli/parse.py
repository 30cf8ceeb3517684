"""`gpucluster parse TOOL FILE`: read a tool's captured output and give its verdict.

Exit 0 when the run is ok, 1 when it failed or is incomplete, 2 when the file cannot be
read or is not that tool's output. A run that failed before printing its results (perftest's
client never connected, NCCL could not initialise, dcgmi found no host engine) is the tool's
failed run, exit 1, with the tool's own error line among the notes. Whatever the file holds,
the answer is a verdict or one line on stderr, never a traceback. A reader that goes away
early (``| head``) does not change the exit code: it is still the verdict's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from gpucluster.errors import EXIT_CHECK_FAILED, EXIT_OK, InputError
from gpucluster.parsers import PARSERS, NotToolOutput, parse


def register(sub: Any) -> None:
    p = sub.add_parser(
        "parse",
        epilog="example: gpucluster parse nccl-tests all_reduce.log --json",
        help="parse a GPU-cluster tool's output and report ok/failed/incomplete",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    p.add_argument("tool", metavar="TOOL", choices=list(PARSERS), help=f"one of: {', '.join(PARSERS)}")
    p.add_argument("file", metavar="FILE", help="captured output, or - for stdin")
    p.add_argument("--json", action="store_true", help="print the parsed result as JSON")
    p.set_defaults(func=run)


def _read(path: str) -> str:
    # newline="" keeps carriage returns: progress rewrites are told apart from line ends.
    try:
        if path == "-":
            return sys.stdin.buffer.read().decode("utf-8", errors="replace")
        with open(path, encoding="utf-8", errors="replace", newline="") as f:
            return f.read()
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except MemoryError as exc:
        raise InputError(f"{path}: cannot read: too large for memory") from exc


def _summary(tool: str, path: str, result: dict[str, Any]) -> list[str]:
    lines = [f"{tool} {path}: {result['status']}"]
    if tool == "nccl-tests":
        lines.append(
            f"  {result['collective'] or 'collective unknown'}, format {result['format'] or 'unknown'}, "
            f"ranks {result['ranks']}, {len(result['rows'])} rows"
        )
        if result["rows"]:
            avg = result["avg_busbw_gbps"]
            avg_text = "n/a (no footer)" if avg is None else f"{avg} GB/s"
            lines.append(f"  peak busbw {result['peak_busbw_gbps']} GB/s, avg busbw {avg_text}")
    elif tool == "gpu-burn" and result["gpus"]:
        lines.append(f"  {len(result['gpus'])} GPUs, {result['precision']}, tensor cores {result['tensor_cores']}")
        for g in result["gpus"]:
            lines.append(f"  GPU {g['index']}: {g['verdict']} {g['gflops']} Gflop/s errors {g['errors']}")
    elif tool == "ib_write_bw":
        peak = result["peak_gbps"]
        lines.append(
            f"  {result['role']} on {result['device']} ({result['link_type']}), {len(result['rows'])} rows, "
            f"peak avg {peak:.2f} Gb/s"
            if peak is not None
            else f"  {result['role']}, no rows"
        )
    elif tool == "nvidia-smi":
        lines.append(f"  {result['kind']}: {len(result['gpus'])} GPUs, driver {result['driver_version']}")
    elif tool == "dcgmi" and result["tests"]:
        counts: dict[str, int] = {}
        for t in result["tests"]:
            counts[str(t["result"])] = counts.get(str(t["result"]), 0) + 1
        lines.append(
            f"  DCGM {result['dcgm_version']}, tests: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
        )
    lines += [f"  note: {n}" for n in result["notes"]]
    return lines


def _emit(text: str) -> None:
    """Write ``text`` to stdout; a reader that has gone away (EPIPE) is not an error of ours."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # Point stdout at /dev/null so the interpreter's final flush does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def run(args: argparse.Namespace) -> int:
    text = _read(args.file)
    try:
        result = parse(args.tool, text)
    except NotToolOutput as exc:
        raise InputError(f"{args.file}: {exc}") from exc
    except (ValueError, ArithmeticError, RecursionError, MemoryError, IndexError, KeyError, TypeError) as exc:
        # A parser bug must still end in one line, not a traceback; the tests hold the parsers
        # to never reaching this on hostile input.
        raise InputError(f"{args.file}: cannot parse as {args.tool} output ({type(exc).__name__}: {exc})") from exc
    if args.json:
        out = json.dumps(result, indent=2, allow_nan=False)
    else:
        out = "\n".join(_summary(args.tool, args.file, result))
    _emit(out + "\n")
    return EXIT_OK if result["status"] == "ok" else EXIT_CHECK_FAILED
