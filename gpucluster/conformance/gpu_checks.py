"""Judgements on parsed nvidia-smi and burn output: pure functions, one problem line each."""

from __future__ import annotations

from typing import Any


def verdict_problems(parsed: dict[str, Any], tool: str, limit: int = 5) -> list[str]:
    """The parser's verdict as a problem line: nothing when it is ``ok``, else its status and its
    notes, which begin with the tool's own error lines. A check that reads a parser's output judges
    what the parser judged through this, never by a rule of its own."""
    if parsed.get("status") == "ok":
        return []
    notes = [str(n) for n in parsed.get("notes", [])]
    more = f" (and {len(notes) - limit} more)" if len(notes) > limit else ""
    return [f"{tool} {parsed.get('status')}: {'; '.join(notes[:limit])}{more}"]


def gpu_health_problems(parsed: dict[str, Any]) -> list[str]:
    """GC-GPU-006 over ``nvidia-smi -q`` as :func:`gpucluster.parsers.parse_run` read it: ECC enabled
    on every GPU (the check's own expectation: a setting, not a health reading), then the parser's
    verdict, the one judge of GPU health (gpucluster.parsers.nvidia_smi): uncorrectable ECC errors,
    pending or failed row remaps and page retirements, an exceeded SRAM error threshold, pending
    channel/TPC repairs, unrepairable memory, a required reset or drain, a recovery action, ERR!
    readings, a lost or unreachable GPU, a health counter that cannot be read."""
    out = [f"GPU {g.get('index')}: ECC mode {g.get('ecc_mode_current')}" for g in parsed.get("gpus", [])
           if g.get("ecc_mode_current") != "Enabled"]
    return out + verdict_problems(parsed, "nvidia-smi -q", limit=16)


def nvlink_problems(gpus: list[dict[str, Any]], links_per_gpu: int) -> list[str]:
    out: list[str] = []
    for g in gpus:
        links = g.get("links", [])
        up = [x for x in links if x.get("state") == "active"]
        if len(up) != links_per_gpu:
            down = [str(x.get("link")) for x in links if x.get("state") != "active"]
            out.append(f"GPU {g.get('index')}: {len(up)}/{links_per_gpu} NVLinks up"
                       + (f" (down: {', '.join(down)})" if down else ""))
    return out


def burn_problems(rows: list[dict[str, Any]], floors_tflops: dict[str, float],
                  peaks_tflops: dict[str, float] | None = None) -> list[str]:
    """Rows from burn_torch (or gpu-burn converted): per device and precision. A figure under its
    floor also says its share of the datasheet's peak (``peaks_tflops``) where the profile has one."""
    out: list[str] = []
    for r in rows:
        where = f"{r['device']} {r['precision']}"
        if r.get("errors"):
            out.append(f"{where}: {r['errors']} wrong result(s)")
        if not r.get("reference_ok", True):
            out.append(f"{where}: first product off the reference ({r.get('reference_error')})")
        if not r.get("products"):
            out.append(f"{where}: no work done")
        floor = floors_tflops.get(r["precision"])
        tflops = r.get("tflops")
        if floor is None:
            out.append(f"{where}: the profile has no burn floor for {r['precision']}")
        elif tflops is None or tflops < floor:
            peak = (peaks_tflops or {}).get(r["precision"])
            share = f", {100 * tflops / peak:.0f}% of the {peak:g} peak" if peak and tflops is not None else ""
            out.append(f"{where}: {tflops if tflops is None else round(tflops, 1)} TFLOP/s under the floor "
                       f"{floor}{share}")
    return out


def gpu_burn_rows(parsed: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """gpu-burn's parsed summary as burn rows (fp32/fp64), plus run-level problems."""
    problems: list[str] = []
    if parsed.get("status") != "ok":
        problems.append(f"gpu-burn {parsed.get('status')}: {'; '.join(parsed.get('notes', []))}")
    prec = parsed.get("precision") or "fp32"
    rows = []
    for g in parsed.get("gpus", []):
        if g.get("verdict") != "ok":
            problems.append(f"gpu-burn GPU {g.get('index')}: {g.get('verdict') or 'no verdict'}")
        gflops = g.get("gflops")
        rows.append({"device": f"gpu{g.get('index')}", "precision": prec,
                     "tflops": None if gflops is None else gflops / 1000.0,
                     "errors": max(g.get("errors") or 0, g.get("errors_max") or 0),
                     "products": g.get("processed"), "reference_ok": g.get("verdict") == "ok"})
    return rows, problems
