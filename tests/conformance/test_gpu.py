"""GPUs and the NVIDIA stack (GC-GPU): expected values from the node's hardware profile and the BOM."""

from __future__ import annotations

import re

import pytest

from gpucluster.conformance.acceptance import application_xids, nonfatal_sxids, sxid_problems, xid_problems
from gpucluster.conformance.gpu_checks import (
    cuda_toolkit_command,
    cuda_toolkit_problem,
    cuda_toolkit_version,
    dpkg_installed_version,
    dpkg_version_command,
    gpu_health_problems,
    nvlink_problems,
    verdict_problems,
)
from gpucluster.parsers import parse_run
from gpucluster.parsers.kernel_log import read_kernel_log, sxid_events, xid_events

pytestmark = pytest.mark.gpu


def _query(node):
    """``nvidia-smi -q`` as the parser reads it, exit status included; output that lists no GPU fails
    here with the parser's reasons (nvidia-smi's own error lines)."""
    res = node.run("nvidia-smi -q 2>&1")
    parsed = parse_run("nvidia-smi", res.stdout, res.rc)
    assert parsed.get("gpus"), f"nvidia-smi -q listed no GPU (rc {res.rc}): " + "; ".join(parsed["notes"])
    return parsed


def _expected_driver(node):
    # The method the nvidia_driver role installed by: the inventory's node contract (decided from the
    # target's capabilities), or the role variable the inventory sets for the node.
    pins = node.bom.nvidia_driver
    return pins.debian_version if node.info.contract.nvidia_driver_install_method == "distro" else pins.version


@pytest.mark.check("GC-GPU-001")
def test_driver_version(node):
    """The NVIDIA kernel driver MUST be loaded and its version MUST equal the BOM's pin."""
    node.require_gpus()
    res = node.run("cat /proc/driver/nvidia/version 2>&1")
    assert res.rc == 0, "the NVIDIA kernel driver is not loaded (/proc/driver/nvidia/version missing)"
    m = re.search(r"Kernel Module(?: for [\w]+)?\s+(\d+\.\d+(?:\.\d+)?)", res.stdout)
    version = m.group(1) if m else None
    node.figure("driver_version", version)
    assert version == _expected_driver(node), f"driver {version}, pinned {_expected_driver(node)}"


@pytest.mark.check("GC-GPU-002")
def test_gpu_count(node):
    """The node MUST show exactly the number of GPUs its hardware profile lists."""
    node.require_gpus()
    gpus = _query(node)["gpus"]
    node.figure("gpus", len(gpus))
    assert len(gpus) == node.info.gpu_count, f"{len(gpus)} GPUs, profile lists {node.info.gpu_count}"


@pytest.mark.check("GC-GPU-003")
def test_gpu_model(node):
    """Every GPU MUST be the model the hardware profile names."""
    node.require_gpus()
    want = node.profile.gpu.model
    wrong = [f"GPU {g['index']}: {g.get('product_name')}" for g in _query(node)["gpus"]
             if g.get("product_name") != want]
    assert not wrong, f"not {want}: " + "; ".join(wrong)


@pytest.mark.check("GC-GPU-004")
def test_gpu_memory(node):
    """Every GPU MUST have the total memory the hardware profile lists (MiB)."""
    node.require_gpus()
    want = node.profile.gpu.memory_mib
    wrong = [f"GPU {g['index']}: {g.get('memory_total_mib')} MiB" for g in _query(node)["gpus"]
             if g.get("memory_total_mib") != want]
    assert not wrong, f"not {want} MiB: " + "; ".join(wrong)


@pytest.mark.check("GC-GPU-005")
def test_persistence_mode(node):
    """Persistence mode MUST be enabled on every GPU."""
    node.require_gpus()
    off = [str(g["index"]) for g in _query(node)["gpus"] if g.get("persistence_mode") != "Enabled"]
    assert not off, f"persistence mode off on GPU(s) {', '.join(off)}"


@pytest.mark.check("GC-GPU-006")
def test_ecc_health(node):
    """ECC MUST be enabled on every GPU, and nvidia-smi -q MUST report every GPU healthy: no uncorrectable ECC errors, no pending or failed row remapping or page retirement, no SRAM error threshold exceeded, no pending memory repair or unrepairable memory, no reset or recovery action required, and every health reading readable."""  # noqa: E501
    node.require_gpus()
    # The parser is the one judge of GPU health; a GPU nvidia-smi cannot reach fails here too.
    res = node.run("nvidia-smi -q 2>&1")
    problems = gpu_health_problems(parse_run("nvidia-smi", res.stdout, res.rc))
    assert not problems, "; ".join(problems)


@pytest.mark.check("GC-GPU-007")
def test_no_xid(node):
    """The kernel log since boot MUST be readable and MUST hold no NVIDIA Xid error except those NVIDIA's Xid catalog attributes to user applications, and on NVSwitch profiles no fatal SXid error."""  # noqa: E501
    node.require_gpus()

    def run(command: str) -> tuple[int, str]:
        res = node.run(command)
        return res.rc, res.stdout

    log = read_kernel_log(run)
    assert log.readable, "the kernel log could not be read: " + "; ".join(log.reasons)
    events, unreadable = xid_events(log.text)
    node.figure("xid_lines", len(events))
    problems = xid_problems(events, unreadable)
    reported = application_xids(events)
    if node.profile.gpu.nvswitch:
        sxids, sxid_unreadable = sxid_events(log.text)
        problems += sxid_problems(sxids, sxid_unreadable)
        reported += nonfatal_sxids(sxids)
    # Events that do not fail the node, kept in results.json (a text figure, as Ceph's health check
    # codes are) for whoever triages the node next.
    node.figure("health_checks", reported)
    note = f" (reported, not failing: {'; '.join(reported[:10])})" if reported else ""
    assert not problems, f"Xid/SXid events since boot ({log.source}): " + "; ".join(problems[:10]) + note


@pytest.mark.check("GC-GPU-008")
def test_nvlinks_up(node):
    """On NVSwitch profiles every GPU MUST show all its NVLinks up."""
    node.require_gpus()
    if not node.profile.gpu.nvswitch:
        pytest.skip(f"profile {node.info.profile_name} has no NVSwitch")
    res = node.run("nvidia-smi nvlink -s 2>&1")
    parsed = parse_run("nvidia-smi", res.stdout, res.rc)
    problems = nvlink_problems(parsed.get("gpus", []), node.profile.gpu.nvlinks_per_gpu)
    problems += verdict_problems(parsed, "nvidia-smi nvlink -s")
    assert not problems, "; ".join(problems)


@pytest.mark.check("GC-GPU-009")
def test_fabric_manager(node):
    """nvidia-fabricmanager MUST be running where the hardware profile needs it."""
    node.require_gpus()
    if not node.profile.gpu.fabric_manager:
        pytest.skip(f"profile {node.info.profile_name} needs no fabric manager")
    assert node.host.service("nvidia-fabricmanager").is_running, "nvidia-fabricmanager is not running"


@pytest.mark.check("GC-GPU-010")
def test_cuda_version(node):
    """The installed CUDA toolkit version MUST equal the BOM's pin."""
    node.require_gpus()
    want = node.bom.cuda.version
    # Where the cuda_toolkit role installed it: the node contract's method, which the role reads too
    # (an inventory's cuda_toolkit_install_method moves both).
    method = node.info.contract.cuda_toolkit_install_method
    res = node.run(cuda_toolkit_command(method, want))
    version = cuda_toolkit_version(method, res.stdout)
    node.figure("cuda_version", version)
    problem = cuda_toolkit_problem(method, version, want)
    assert problem is None, problem


@pytest.mark.check("GC-GPU-011")
def test_nccl_version(node):
    """The installed NCCL (libnccl2) version MUST equal the BOM's pin."""
    node.require_gpus()
    want = node.bom.nccl.version
    # libnccl2's Debian version is <NCCL>-<revision>+cuda<x.y> (2.28.9-1+cuda13.0); a package removed
    # with its configuration kept ("rc") is not installed.
    res = node.run(dpkg_version_command("libnccl2"))
    installed = dpkg_installed_version(res.stdout)
    version = installed.split("-")[0] if installed else None
    node.figure("nccl_version", version)
    assert version == want, f"libnccl2 {version or 'not installed'}, pinned {want}"


@pytest.mark.check("GC-GPU-012")
def test_container_runtime_sees_gpus(node):
    """The NVIDIA container toolkit MUST see every GPU of the node."""
    node.require_gpus()
    res = node.run("nvidia-container-cli info 2>&1")
    assert res.rc == 0, f"nvidia-container-cli info failed: {res.stdout.strip()}"
    seen = len(re.findall(r"^Device Index:", res.stdout, re.M))
    node.figure("gpus_seen", seen)
    assert seen == node.info.gpu_count, f"the container runtime sees {seen} GPUs of {node.info.gpu_count}"
