"""Judgements on parsed nvidia-smi and burn output: pure functions, one problem line each."""

from __future__ import annotations

import re
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


# GC-GPU-010: where the cuda_toolkit role put the toolkit, by the node contract's install method
# (roles/cuda_toolkit reads the same contract field): NVIDIA's packages under /usr/local/cuda-<x.y>
# (their version.json), or Debian's nvidia-cuda-toolkit, whose package version is
# "<nvcc's version>~<CUDA's version>-<Debian revision>" (bookworm non-free: 11.8.89~11.8.0-5~deb12u1;
# trixie: 12.4.131~12.4.1-2). dpkg-query prints a removed package's version as well while its
# configuration files remain (status "rc"), so the probe reads the status beside it.
DEBIAN_CUDA_PACKAGE = "nvidia-cuda-toolkit"


def dpkg_version_command(package: str) -> str:
    """dpkg's status and version of ``package``, as :func:`dpkg_installed_version` reads them."""
    return f"dpkg-query -W -f='${{db:Status-Abbrev}}${{Version}}' {package} 2>/dev/null"


def dpkg_installed_version(output: str) -> str | None:
    """The version in :func:`dpkg_version_command`'s output where the package is installed, else None.
    dpkg's abbreviated status is three characters (desired action, package state, error flag): "ii "
    for an installed package, "rc " for one removed with its configuration files kept. Only the
    state says installed: "ii" and "hi" (held) alike."""
    status, version = output[:3], output[3:].strip()
    if len(status) < 2 or status[1] != "i" or not version:
        return None
    return version


def _cuda_home(pin: str) -> str:
    """NVIDIA's toolkit folder of the pin's major.minor (cuda-toolkit-13-0: /usr/local/cuda-13.0)."""
    return "/usr/local/cuda-" + ".".join(pin.split(".")[:2])


def cuda_toolkit_command(method: str, pin: str) -> str:
    """The command whose output :func:`cuda_toolkit_version` reads on a node of ``method``."""
    if method == "distro":
        return dpkg_version_command(DEBIAN_CUDA_PACKAGE)
    return f"cat {_cuda_home(pin)}/version.json 2>/dev/null || cat /usr/local/cuda/version.json 2>&1"


def cuda_toolkit_version(method: str, output: str) -> str | None:
    """The CUDA version in :func:`cuda_toolkit_command`'s output, or None where none is installed."""
    if method == "distro":
        version = dpkg_installed_version(output)
        if version is None:
            return None
        m = re.search(r"~(\d+\.\d+(?:\.\d+)?)-", version)
        return m.group(1) if m else version.split("-")[0]
    m = re.search(r'"cuda"\s*:\s*\{[^}]*"version"\s*:\s*"([\d.]+)"', output)
    return m.group(1) if m else None


def cuda_toolkit_problem(method: str, found: str | None, pin: str) -> str | None:
    """Why the toolkit the role installed by ``method`` is not the pin, or None. The distro method
    installs Debian's toolkit knowingly (NVIDIA's repositories out of reach): the check says so."""
    if found == pin:
        return None
    if method == "distro":
        if found is None:
            return (f"Debian's {DEBIAN_CUDA_PACKAGE} is not installed (install method distro), pinned CUDA {pin}: "
                    "cuda_toolkit_enabled is false, or converge has not run with --heavy")
        return (f"Debian's {DEBIAN_CUDA_PACKAGE} holds CUDA {found}, not the pinned {pin}: the install method is "
                "distro because the nodes do not reach NVIDIA's repositories; give them NVIDIA's CUDA repository "
                "or a mirror of it (capabilities.nvidia_repo) for the pinned toolkit")
    return f"CUDA toolkit {found or f'not found in {_cuda_home(pin)} or /usr/local/cuda'}, pinned {pin}"
