"""GC-GPU-007 and GC-DCGM-001: the Xid classification table, and the suite's tests run against fake
nodes whose commands answer with real output (an unreadable kernel log, application Xids, fatal
SXids, a missing dcgmi where the inventory does and does not expect DCGM)."""

from __future__ import annotations

import contextlib
import importlib.util
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from gpucluster.conformance import acceptance as acc
from gpucluster.conformance.nodes import parse_inventory
from gpucluster.inventory_model import parse_inventory_text
from gpucluster.outputs import Capabilities
from gpucluster.parsers import kernel_log
from gpucluster.spec.loader import load_profiles
from gpucluster.spec.models import Conformance, HardwareProfile

REPO = Path(__file__).resolve().parents[3]
SAMPLES = REPO / "tests" / "data" / "samples"
GOLDEN = REPO / "tests" / "golden" / "inventory" / "lab.yml"


def _suite(name: str) -> ModuleType:
    path = REPO / "tests" / "conformance" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"suite_{name}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_application_xids_are_the_catalogs_and_pinned() -> None:
    # NVIDIA's Xid catalog (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html)
    # attributes these to user applications; changing the set changes which nodes pass.
    assert sorted(acc.APPLICATION_XIDS) == [13, 31, 43, 45]
    for hardware in (48, 62, 63, 64, 74, 79, 92, 94, 95, 119, 154):
        assert hardware not in acc.APPLICATION_XIDS


def test_application_xids_are_reported_not_failed() -> None:
    events, unreadable = kernel_log.xid_events(
        "[ 966.503025] NVRM: Xid (PCI:0000:01:00): 31, Ch 0000000b, engmask 00000120, intr 10000000\n"
        "[ 967.1] NVRM: Xid (PCI:0000:01:00): 13, Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0)\n"
        "[ 967.2] NVRM: Xid (PCI:0000:01:00): 13, Graphics Exception: ESR 0x504648=0x20\n"
        "[ 968.0] NVRM: Xid (PCI:0000:41:00): 48, pid=1234, DBE (double bit error) ECC error\n")
    assert acc.xid_problems(events, unreadable) == ["Xid 48 on PCI 0000:41:00 (1x)"]
    assert acc.application_xids(events) == ["Xid 13 on PCI 0000:01:00 (2x)", "Xid 31 on PCI 0000:01:00 (1x)"]


def test_sxid_verdicts_on_published_lines() -> None:
    events, unreadable = kernel_log.sxid_events((SAMPLES / "kernel_sxid_01.txt").read_text())
    assert acc.sxid_problems(events, unreadable) == [
        "fatal SXid 20034 on nvswitch0 (PCI 0000:c2:00.0) (2x)",
        "fatal SXid 20034 on nvswitch1 (PCI 0000:c3:00.0) (1x)",
        "fatal SXid 20034 on nvswitch2 (PCI 0000:c4:00.0) (1x)",
        "fatal SXid 20034 on nvswitch3 (PCI 0000:c5:00.0) (1x)"]
    assert acc.nonfatal_sxids(events) == ["non-fatal SXid 19084 on nvswitch3 (PCI 0000:c5:00.0) (1x)",
                                          "non-fatal SXid 19084 on nvswitch4 (PCI 0000:c6:00.0) (1x)"]
    nonfatal = [e for e in events if e.fatal is False]
    assert acc.sxid_problems(nonfatal, 0) == []
    assert acc.sxid_problems([], 2) == ["2 SXid line(s) that could not be read"]


def _h100(nvswitch: bool) -> HardwareProfile:
    """The H100 SXM profile, on NVSwitch (its fabric manager too) or not."""
    profile = load_profiles()["h100-sxm-8"]
    return profile.model_copy(update={"gpu": profile.gpu.model_copy(update={"nvswitch": nvswitch,
                                                                            "fabric_manager": nvswitch})})


class _Node:
    """A GPU node whose commands answer from ``answers`` (first word of the command -> (rc, stdout))."""

    def __init__(self, answers: dict[str, tuple[int, str]], *, nvswitch: bool = False,
                 capabilities: dict[str, bool] | None = None, conformance: Conformance | None = None) -> None:
        # None: a target whose nodes get no DCGM (the lab's: no NVIDIA repository, no heavy packages).
        caps = Capabilities(**(capabilities or {"nvidia_repo": False, "heavy_packages": False}))
        self.answers = answers
        self.name = "gpu-1"
        self.profile = _h100(nvswitch)
        self.info = SimpleNamespace(gpu_count=8, profile_name="h100-sxm-8", groups=["gpu"], profile=self.profile,
                                    conformance=conformance or Conformance(), capabilities=caps)
        self.inv = SimpleNamespace(conformance=Conformance())
        self.figures: dict[str, Any] = {}
        self.ran: list[str] = []

    def require_gpus(self) -> None:
        pass

    def figure(self, key: str, value: Any) -> None:
        self.figures[key] = value

    def run(self, command: str, timeout: float = 120) -> SimpleNamespace:
        self.ran.append(command)
        word = command.split()[0] if not command.startswith("command -v") else command.split()[2]
        rc, out = self.answers.get(word, (127, f"sh: 1: {word}: not found\n"))
        return SimpleNamespace(rc=rc, stdout=out, stderr="")


DMESG_REFUSED = (1, "dmesg: read kernel buffer failed: Operation not permitted\n")
JOURNAL_HIDDEN = (0, "Hint: You are currently not seeing messages from other users and the system.\n"
                     "-- No entries --\n")


def test_no_xid_fails_when_no_source_can_be_read() -> None:
    node = _Node({"journalctl": JOURNAL_HIDDEN, "dmesg": DMESG_REFUSED})
    with pytest.raises(AssertionError, match=r"could not be read: journalctl could not read.*; dmesg exited"):
        _suite("test_gpu").test_no_xid(node)


def test_no_xid_passes_a_clean_log_and_application_xids_with_a_figure() -> None:
    suite = _suite("test_gpu")
    suite.test_no_xid(_Node({"journalctl": (0, "Nov 27 03:00:01 gpu-1 kernel: Linux version 6.8.0-45-generic\n")}))
    with pytest.raises(AssertionError, match="holds no kernel message"):  # an empty journal is not a clean one
        suite.test_no_xid(_Node({"journalctl": (0, "-- No entries --\n"), "dmesg": DMESG_REFUSED}))
    node = _Node({"journalctl": (1, "Failed to get journal access\n"),
                  "dmesg": (0, "[ 1.0] NVRM: Xid (PCI:0000:01:00): 43, pid=77, Ch 00000010\n")})
    suite.test_no_xid(node)
    assert node.figures == {"xid_lines": 1, "health_checks": ["Xid 43 on PCI 0000:01:00 (1x)"]}


def test_no_xid_fails_naming_hardware_xid_and_fatal_sxid_only_on_nvswitch() -> None:
    log = (SAMPLES / "kernel_sxid_01.txt").read_text() + \
        "[ 9.0] NVRM: Xid (PCI:0000:01:00): 13, Graphics Exception\n"
    suite = _suite("test_gpu")
    with pytest.raises(AssertionError) as failed:
        suite.test_no_xid(_Node({"journalctl": (0, log)}, nvswitch=True))
    message = str(failed.value)
    assert "Xid 64 on PCI 0000:0f:00 (1x)" in message and "fatal SXid 20034 on nvswitch0" in message
    assert "reported, not failing: Xid 13 on PCI 0000:01:00 (1x); non-fatal SXid 19084" in message
    with pytest.raises(AssertionError) as failed:
        suite.test_no_xid(_Node({"journalctl": (0, log)}, nvswitch=False))
    assert "nvswitch" not in str(failed.value)  # SXids are read on NVSwitch profiles only


# The fabric as the DCGM check uses it: the node's GPUs held while dcgmi runs.
_FABRIC = SimpleNamespace(gpus_held=lambda names: contextlib.nullcontext())
# pytest's config as the check reads it: no --dcgm-level given.
_CONFIG = SimpleNamespace(getoption=lambda name: None)


def test_dcgm_missing_fails_where_expected_and_skips_where_not() -> None:
    suite = _suite("test_acceptance")
    expected = _Node({}, capabilities={"nvidia_repo": True, "heavy_packages": True})
    with pytest.raises(AssertionError, match="dcgmi is not installed, but the inventory"):
        suite.test_dcgm_diag(expected, _FABRIC, _CONFIG)
    for caps in ({"nvidia_repo": True, "heavy_packages": False}, {"nvidia_repo": False, "heavy_packages": True}):
        with pytest.raises(pytest.skip.Exception, match="does not expect DCGM"):
            suite.test_dcgm_diag(_Node({}, capabilities=caps), _FABRIC, _CONFIG)


def test_dcgm_diag_reads_json_and_fails_cut_output() -> None:
    suite = _suite("test_acceptance")
    text = (SAMPLES / "dcgmi_diag_json_01.txt").read_text()
    node = _Node({"dcgmi": (0, text)}, capabilities={"nvidia_repo": True, "heavy_packages": True})
    suite.test_dcgm_diag(node, _FABRIC, _CONFIG)
    assert node.ran[-1] == "dcgmi diag -r 2 -j"
    node.answers["dcgmi"] = (0, text[:1000])
    with pytest.raises(AssertionError, match="not complete JSON"):
        suite.test_dcgm_diag(node, _FABRIC, _CONFIG)


def test_a_burn_in_asks_dcgm_for_its_own_level() -> None:
    """`gpucluster verify --dcgm-level 3` (a burn-in) wins over the spec's level (2 by default)."""
    suite = _suite("test_acceptance")
    text = (SAMPLES / "dcgmi_diag_json_01.txt").read_text()
    node = _Node({"dcgmi": (0, text)}, capabilities={"nvidia_repo": True, "heavy_packages": True})
    suite.test_dcgm_diag(node, _FABRIC, SimpleNamespace(getoption=lambda name: 3 if name == "--dcgm-level" else None))
    assert node.ran[-1] == "dcgmi diag -r 3 -j"


def test_the_nodes_own_level_reaches_dcgmi_and_a_burn_in_still_wins() -> None:
    """The level the inventory read for the node (a host's own gpucluster_conformance over the
    cluster's, folded in by gpucluster.conformance.nodes) is the one dcgmi runs at."""
    data = parse_inventory_text(GOLDEN.read_text())
    data["all"]["hosts"]["gpu-1"]["gpucluster_conformance"] = {"dcgm_diag_level": 4}
    info = parse_inventory(data, "inv.yml").node("gpu-1")
    suite = _suite("test_acceptance")
    text = (SAMPLES / "dcgmi_diag_json_01.txt").read_text()
    node = _Node({"dcgmi": (0, text)}, capabilities={"nvidia_repo": True, "heavy_packages": True},
                 conformance=info.conformance)
    suite.test_dcgm_diag(node, _FABRIC, _CONFIG)
    assert node.ran[-1] == "dcgmi diag -r 4 -j"
    suite.test_dcgm_diag(node, _FABRIC, SimpleNamespace(getoption=lambda name: 3 if name == "--dcgm-level" else None))
    assert node.ran[-1] == "dcgmi diag -r 3 -j"
