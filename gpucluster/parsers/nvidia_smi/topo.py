"""``nvidia-smi topo -m``, kind ``topo``: the matrix (terminal underline escapes removed), the
legend skipped but for the NIC names newer drivers add to it. A matrix without its ``Legend`` is
output cut short."""

from __future__ import annotations

import re

from gpucluster.parsers.common import clean_lines, parse_count, worst
from gpucluster.parsers.nvidia_smi.shared import Health, NvidiaSmiResult, is_fatal, null

_TOPO_GPU = re.compile(r"GPU\d{1,4}\s")
_NIC_NAME = re.compile(r"^\s*(NIC\d{1,3}):\s*(\S{1,64})\s*$")


def recognises(useful: list[str]) -> bool:
    """Whether these lines (nvidia-smi's error lines and blank lines left out) are a topology matrix."""
    return "CPU Affinity" in useful[0] and any(_TOPO_GPU.match(line) for line in useful[1:])


def read(text: str, result: NvidiaSmiResult) -> list[Health]:
    """The matrix and NIC names into ``result``, one entry per GPU row into ``result.gpus``."""
    header: list[str] | None = None
    matrix: dict[str, dict[str, str]] = {}
    legend = done = False
    for line in clean_lines(text, keep_indent=True):
        if not line.strip():
            done = header is not None and bool(matrix)
            continue
        if line.startswith("Legend"):
            legend = True
            continue
        if legend:
            # After the legend of link kinds, newer drivers name each NIC column: "  NIC0: mlx5_0".
            nic = _NIC_NAME.match(line)
            if nic:
                result.nics = {**(result.nics or {}), nic.group(1): nic.group(2)}
            continue
        if done or is_fatal(line.lstrip()):
            continue
        cells = [c.strip() for c in line.split("\t")]
        if header is None:
            header = [c for c in cells if c]
            continue
        name, values = cells[0], [c for c in cells[1:] if c]
        matrix[name] = dict(zip(header, values, strict=False))
    result.matrix = matrix
    if not legend:
        result.note("no 'Legend:' after the matrix: output cut short?")
        result.status = worst("incomplete", result.status)
    healths: list[Health] = []
    for name, row in matrix.items():
        index = parse_count(name[3:]) if name.startswith("GPU") else None
        if index is not None:
            result.gpus.append(
                {
                    "index": index,
                    "links": {k: v for k, v in row.items() if _is_topo_peer(k)},
                    "cpu_affinity": null(row.get("CPU Affinity")),
                    "numa_affinity": null(row.get("NUMA Affinity")),
                    "gpu_numa_id": null(row.get("GPU NUMA ID")),
                }
            )
            healths.append(Health(who=f"GPU {index}"))
    return healths


def _is_topo_peer(name: str) -> bool:
    return name[:3] in ("GPU", "NIC") and parse_count(name[3:]) is not None
