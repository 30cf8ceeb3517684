"""One judge per fact: GC-GPU-006, GC-GPU-008 and GC-DCGM-001 fail with what the parsers judged, run
against fake nodes whose commands answer with real output (tests/data/samples) or with real output
given the reading a sick GPU shows.

GC-GPU-006 judged ECC by a narrower rule of its own (uncorrectable counts, pending remaps and
retirements); a GPU whose SRAM error threshold was exceeded, whose memory cannot be repaired or that
asks for a reset passed it while the nvidia-smi parser failed the same output.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from gpucluster.outputs import Capabilities
from gpucluster.spec.loader import load_profiles
from gpucluster.spec.models import Conformance, HardwareProfile
from tests.unit.loading import load_file

REPO = Path(__file__).resolve().parents[3]
SAMPLES = REPO / "tests" / "data" / "samples"


def _sample(name: str) -> str:
    with open(SAMPLES / name, encoding="utf-8", newline="") as f:
        return f.read()


def _suite(name: str) -> ModuleType:
    return load_file(REPO / "tests" / "conformance" / f"{name}.py", f"suite_{name}")


def _h100(nvswitch: bool) -> HardwareProfile:
    """The H100 SXM profile, on NVSwitch (its fabric manager too) or not."""
    profile = load_profiles()["h100-sxm-8"]
    return profile.model_copy(update={"gpu": profile.gpu.model_copy(update={"nvswitch": nvswitch,
                                                                            "fabric_manager": nvswitch})})


class _Node:
    """A GPU node whose commands answer from ``answers`` (the longest matching command prefix)."""

    def __init__(self, answers: dict[str, tuple[int, str]], *, nvswitch: bool = False) -> None:
        self.answers = answers
        self.name = "gpu-1"
        self.profile = _h100(nvswitch)
        self.info = SimpleNamespace(gpu_count=1, profile_name="h100-sxm-8", groups=["gpu"], profile=self.profile,
                                    conformance=Conformance(),
                                    capabilities=Capabilities(nvidia_repo=True, heavy_packages=True))
        self.inv = SimpleNamespace(conformance=Conformance())
        self.figures: dict[str, Any] = {}

    def require_gpus(self) -> None:
        pass

    def figure(self, key: str, value: Any) -> None:
        self.figures[key] = value

    def run(self, command: str, timeout: float = 120) -> SimpleNamespace:
        match = max((p for p in self.answers if command.startswith(p)), key=len, default=None)
        rc, out = self.answers[match] if match else (0, "")
        return SimpleNamespace(rc=rc, stdout=out, stderr="")


H100_Q = _sample("nvidia_smi_01.txt")  # nvidia-smi -q, driver 590.48.01: healthy


def _h100_with(old: str, new: str) -> str:
    assert H100_Q.count(old) == 1, old
    return H100_Q.replace(old, new)


def test_gc_gpu_006_passes_a_healthy_gpu() -> None:
    _suite("test_gpu").test_ecc_health(_Node({"nvidia-smi -q": (0, H100_Q)}))


@pytest.mark.parametrize(("old", "new", "reason"), [
    # Readings the parser failed and the check's own rule let pass.
    ("SRAM Threshold Exceeded                    : No", "SRAM Threshold Exceeded                    : Yes",
     "ECC Aggregate > SRAM Threshold Exceeded"),
    ("Unrepairable Memory                            : No", "Unrepairable Memory                            : Yes",
     "ECC Unrepairable Memory"),
    ("Channel Repair Pending                         : No", "Channel Repair Pending                         : Yes",
     "ECC Channel Repair Pending"),
    ("GPU Recovery Action                                : None",
     "GPU Recovery Action                                : Reset", "recovery action requested: Reset"),
    # What the check's rule already caught: the parser catches it too, with the same output.
    ("Pending                                        : No", "Pending                                        : Yes",
     "row remapping pending"),
    ("            DRAM Uncorrectable                         : 0\n        Aggregate",
     "            DRAM Uncorrectable                         : 2\n        Aggregate",
     "2 volatile uncorrectable ECC errors"),
    # A health counter nvidia-smi could not read: unknown health is no pass.
    ("Uncorrectable Error                            : 0",
     "Uncorrectable Error                            : [Unknown Error]",
     "health unknown, remapped rows (Uncorrectable Error) reads '[Unknown Error]'"),
])
def test_gc_gpu_006_fails_with_the_parsers_verdict(old: str, new: str, reason: str) -> None:
    node = _Node({"nvidia-smi -q": (0, _h100_with(old, new))})
    with pytest.raises(AssertionError) as failed:
        _suite("test_gpu").test_ecc_health(node)
    assert reason in str(failed.value)


@pytest.mark.parametrize("name", ["nvidia_smi_13.txt", "nvidia_smi_15.txt"])
def test_gc_gpu_006_fails_a_gpu_nvidia_smi_cannot_reach_with_its_error_line(name: str) -> None:
    node = _Node({"nvidia-smi -q": (255, _sample(name))})
    with pytest.raises(AssertionError, match="nvidia-smi -q failed: nvidia-smi could not reach a GPU: Unable to "
                                             "determine the device handle for GPU"):
        _suite("test_gpu").test_ecc_health(node)


def test_gc_gpu_008_fails_when_nvidia_smi_could_not_read_the_links() -> None:
    suite = _suite("test_gpu")
    suite.test_nvlinks_up(_Node({"nvidia-smi nvlink -s": (0, _sample("nvidia_smi_06.txt"))}, nvswitch=True))
    # A GPU nvidia-smi cannot reach prints no links at all: the parser's verdict names it.
    lost = _sample("nvidia_smi_06.txt") + _sample("nvidia_smi_15.txt")
    with pytest.raises(AssertionError, match="nvidia-smi nvlink -s failed: nvidia-smi could not reach a GPU"):
        suite.test_nvlinks_up(_Node({"nvidia-smi nvlink -s": (0, lost)}, nvswitch=True))


_FABRIC = SimpleNamespace(gpus_held=lambda names: contextlib.nullcontext())
_CONFIG = SimpleNamespace(getoption=lambda name: 3 if name == "--dcgm-level" else None)


def _dcgm_json_all_skipped() -> str:
    """DCGM 3.1.0's real JSON (Deployment) with the categories NVIDIA/DCGM#139 posts for a
    ``dcgmi diag -r 3 -j`` whose every test past Deployment read "Skip"."""
    text = _sample("dcgmi_diag_json_01.txt")
    doc = json.loads(text[text.index("{"):])
    skip = [{"gpu_id": "0", "status": "Skip"}]
    doc["DCGM GPU Diagnostic"]["test_categories"] += [
        {"category": "Integration", "tests": [{"name": "PCIe", "results": skip}]},
        {"category": "Hardware", "tests": [{"name": "GPU Memory", "results": skip},
                                           {"name": "Diagnostic", "results": skip}]},
        {"category": "Stress", "tests": [{"name": "Targeted Stress", "results": skip}]},
    ]
    return json.dumps(doc, indent="\t")


def test_gc_dcgm_001_fails_a_level_3_run_that_diagnosed_nothing() -> None:
    node = _Node({"command -v dcgmi": (0, "/usr/bin/dcgmi\n"), "dcgmi diag": (0, _dcgm_json_all_skipped())})
    with pytest.raises(AssertionError, match="every test past the deployment checks was skipped: PCIe, GPU Memory, "
                                             "Diagnostic, Targeted Stress"):
        _suite("test_acceptance").test_dcgm_diag(node, _FABRIC, _CONFIG)


def test_gc_dcgm_001_fails_without_a_host_engine_with_dcgmis_error() -> None:
    node = _Node({"command -v dcgmi": (0, "/usr/bin/dcgmi\n"), "dcgmi diag": (255, _sample("dcgmi_diag_02.txt"))})
    with pytest.raises(AssertionError, match="DCGM error: Unable to connect to host engine"):
        _suite("test_acceptance").test_dcgm_diag(node, _FABRIC, _CONFIG)


def test_gc_dcgm_001_fails_a_run_that_diagnosed_one_gpu_with_nothing() -> None:
    """The real DCGM 3.1.0 JSON given hardware tests that ran on GPUs 0-6 and skipped GPU 7 (issue 26):
    the check fails, and its reason is the parser's note naming GPU 7, even beside a warning."""
    text = _sample("dcgmi_diag_json_01.txt")
    doc = json.loads(text[text.index("{"):])
    memory = {"name": "GPU Memory", "results": [{"gpu_ids": g, "status": "SKIPPED" if g == 7 else "PASS"}
                                                for g in range(8)]}
    doc["DCGM GPU Diagnostic"]["test_categories"].append({"category": "Hardware", "tests": [memory]})
    node = _Node({"command -v dcgmi": (0, "/usr/bin/dcgmi\n"), "dcgmi diag": (0, json.dumps(doc, indent="\t"))})
    note = "every test past the deployment checks was skipped or not run on GPU 7: GPU Memory"
    with pytest.raises(AssertionError, match=f"dcgmi diag incomplete: {note}"):
        _suite("test_acceptance").test_dcgm_diag(node, _FABRIC, _CONFIG)
    memory["results"][2].update(status="WARN", warnings=["GPU 2 memory clock throttled"])
    node.answers["dcgmi diag"] = (0, json.dumps(doc, indent="\t"))
    with pytest.raises(AssertionError, match=f"DCGM GPU Memory: warn .*; dcgmi diag incomplete: {note}"):
        _suite("test_acceptance").test_dcgm_diag(node, _FABRIC, _CONFIG)
