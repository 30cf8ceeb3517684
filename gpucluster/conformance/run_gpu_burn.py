"""gpu-burn (wilicc/gpu-burn, installed by the gpu_validation role) and the burn's GPU telemetry.

gpu-burn exits 0 even when a GPU is FAULTY: the verdict comes from its parsed summary
(:mod:`gpucluster.parsers.gpu_burn`), and a run without a summary or with no work done is
not a pass. While a burn runs, ``nvidia-smi`` samples every GPU's temperature and clock
event (throttle) reasons once a second; Xid lines in the kernel log are counted before and
after.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpucluster.conformance import progress
from gpucluster.conformance.remote import Remote, node_folder, quote
from gpucluster.parsers import parse

# The sampler's file, in a private folder of the run on the node (remote.node_folder).
SAMPLES_NAME = "burn-smi.csv"
XID_COUNT = "journalctl -k -b --no-pager 2>/dev/null | grep -c 'NVRM: Xid' || true"
# Bits of clocks_event_reasons that mean the GPU slowed down for a fault, not by choice.
_BAD_THROTTLE = {0x8: "hw_slowdown", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
                 0x80: "hw_power_brake_slowdown"}


@dataclass
class Telemetry:
    max_temp_c: dict[int, int] = field(default_factory=dict)
    throttle: dict[int, list[str]] = field(default_factory=dict)


def samples_path(folder: str) -> str:
    return f"{folder}/{SAMPLES_NAME}"


def sampler_command(seconds: float, folder: str) -> str:
    """nvidia-smi sampling in the background into ``folder`` (a private folder of the run)."""
    return (f"timeout {int(seconds) + 5} nvidia-smi --query-gpu=index,temperature.gpu,clocks_event_reasons.active "
            f"--format=csv,noheader,nounits -l 1 > {quote([samples_path(folder)])} 2>/dev/null &")


def parse_samples(text: str) -> Telemetry:
    tel = Telemetry()
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3 or not parts[0].isdigit():
            continue
        idx = int(parts[0])
        if parts[1].isdigit():
            tel.max_temp_c[idx] = max(tel.max_temp_c.get(idx, 0), int(parts[1]))
        try:
            mask = int(parts[2], 16)
        except ValueError:
            continue
        names = tel.throttle.setdefault(idx, [])
        for bit, name in _BAD_THROTTLE.items():
            if mask & bit and name not in names:
                names.append(name)
    return tel


def xid_count(remote: Remote) -> int | None:
    res = remote.run(XID_COUNT, timeout=30)
    text = res.stdout.strip()
    return int(text) if text.isdigit() else None


def run_gpu_burn(remote: Remote, seconds: int, install_dir: str) -> tuple[dict[str, Any], Telemetry, str]:
    """Run gpu-burn (FP32) for ``seconds``; returns the parsed result, telemetry and the raw log."""
    progress.note(f"gpu-burn on {getattr(remote, 'name', 'a node')} for {int(seconds)} s", budget_s=seconds + 180)
    with node_folder([remote]) as folder:
        cmd = f"{sampler_command(seconds, folder)} cd {quote([install_dir])} && ./gpu_burn {int(seconds)} 2>&1"
        res = remote.run(cmd, timeout=seconds + 180)
        parsed = parse("gpu-burn", res.stdout)
        tel = parse_samples(remote.run(f"cat {quote([samples_path(folder)])}", timeout=30).stdout)
    return parsed, tel, res.stdout
