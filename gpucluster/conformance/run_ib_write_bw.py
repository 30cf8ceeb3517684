"""ib_write_bw (perftest) between a pair of nodes on each HCA, parsed by gpucluster.parsers."""

from __future__ import annotations

from typing import Any

from gpucluster.conformance.remote import Remote, quote
from gpucluster.parsers import parse_run

LIST_HCAS = "ls /sys/class/infiniband 2>/dev/null"


def list_hcas(remote: Remote) -> list[str]:
    return sorted(remote.run(LIST_HCAS, timeout=30).stdout.split())


def gid_args(gid_index: int | None) -> list[str]:
    """perftest's ``-x``: the GID index NCCL is set to use (gpucluster.render.nccl.gid_index), so
    the figure is the one of the GID NCCL's traffic takes; none where NCCL picks its own."""
    return [] if gid_index is None else ["-x", str(gid_index)]


def args(device: str, seconds: int, qps: int = 4, gid_index: int | None = None) -> list[str]:
    # Duration mode, Gb/s, several QPs, as Azure's health checks drive it.
    return ["ib_write_bw", "-d", device, "-F", "--report_gbits", "-D", str(seconds), "-q", str(qps),
            *gid_args(gid_index)]


def run_pair(server: Remote, client: Remote, server_ip: str, device: str, peer_device: str,
             seconds: int = 5, gid_index: int | None = None) -> dict[str, Any]:
    """Server in the background on ``server``, client on ``client``; the client's output is the figure."""
    port = 18515
    srv = quote([*args(peer_device, seconds, gid_index=gid_index), "-p", str(port)])
    # The server's own output is never read (the client's is the figure): no file for it.
    server.run(f"(timeout {seconds + 30} {srv} > /dev/null 2>&1 &)", timeout=30)
    res = client.run("sleep 1; " + quote([*args(device, seconds, gid_index=gid_index), "-p", str(port), server_ip])
                     + " 2>&1",
                     timeout=seconds + 60)
    # The exit status counts: perftest exits 1 after a completion error, having printed good rows.
    parsed = parse_run("ib_write_bw", res.stdout, res.rc)
    if not parsed.get("rows"):
        parsed.setdefault("peak_gbps", None)
        parsed["rows"] = []
        parsed["notes"] = [*parsed.get("notes", []), f"output (rc {res.rc}): {res.stdout.strip()[-200:]}"]
    parsed["device"] = device
    parsed["peer_device"] = peer_device
    return parsed
