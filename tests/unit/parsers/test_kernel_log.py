"""Kernel log readers: NVIDIA Xid and NVSwitch SXid events, and whether the log could be read at all.

The SXid lines are the published ones in ``kernel_sxid_01.txt`` (first lines, a Severity detail
line); the journalctl and dmesg prefixes are the ones those tools print before a kernel message.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpucluster.parsers import kernel_log
from gpucluster.parsers.kernel_log import SxidEvent

Sample = Callable[[str], str]

FATAL = "nvidia-nvswitch0: SXid (PCI:0000:c2:00.0): 20034, Fatal, Link 28 LTSSM Fault Up"
NONFATAL = ("nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error "
            "(First)")


def test_published_sxid_lines(sample: Sample) -> None:
    events, unreadable = kernel_log.sxid_events(sample("kernel_sxid_01.txt"))
    assert unreadable == 0
    # 7 first lines; the "10002, Severity 5 Engine instance ..." line is a detail, not an event.
    assert len(events) == 7
    assert [e.sxid for e in events if e.fatal] == [20034] * 5
    assert sorted((e.switch, e.sxid) for e in events if e.fatal is False) == [("nvswitch3", 19084),
                                                                            ("nvswitch4", 19084)]
    assert events[1] == SxidEvent("nvswitch0", "0000:c2:00.0", 20034, True, "Link 28 LTSSM Fault Up")
    assert 10002 not in {e.sxid for e in events}


@pytest.mark.parametrize("prefix", [
    "",
    "[ 4909.922970] ",  # dmesg
    "Nov 27 03:12:44 gpu-07 kernel: ",  # journalctl -k
    "Nov 27 03:12:44 gpu-07 kernel: [ 4909.922970] ",  # journalctl over a printk timestamp
    "2026-11-27T03:12:44+0000 gpu-07 kernel: ",  # journalctl -o short-iso
])
def test_sxid_behind_any_log_prefix(prefix: str) -> None:
    events, unreadable = kernel_log.sxid_events(f"{prefix}{FATAL}\n{prefix}{NONFATAL}\n")
    assert unreadable == 0
    assert [(e.switch, e.pci, e.sxid, e.fatal) for e in events] == [
        ("nvswitch0", "0000:c2:00.0", 20034, True), ("nvswitch0", "0000:05:00.0", 12028, False)]


def test_sxid_detail_lines_are_not_events() -> None:
    text = "\n".join([
        NONFATAL,
        "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Severity 0 Engine instance 32 Sub-engine instance 00",
        "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Data {0x00000000, 0x00000000, 0x00000000, 0x00000000}",
    ])
    events, unreadable = kernel_log.sxid_events(text)
    assert (len(events), unreadable) == (1, 0)


def test_sxid_without_severity_or_code() -> None:
    events, unreadable = kernel_log.sxid_events(
        "nvidia-nvswitch3: SXid (PCI:0000:c1:00.0): garbled, Fatal\n"
        "nvidia-nvswitch3: SXid (PCI:0000:c1:00.0): 11001, ingress invalid command\n")
    assert unreadable == 1
    assert [(e.sxid, e.fatal, e.text) for e in events] == [(11001, None, "ingress invalid command")]


def test_xid_reader_ignores_sxid_and_vice_versa(sample: Sample) -> None:
    xids, _ = kernel_log.xid_events(sample("kernel_sxid_01.txt"))
    assert [(e.pci, e.xid) for e in xids] == [("0000:0f:00", 64)]
    assert kernel_log.sxid_events(sample("kernel_xid_01.txt")) == ([], 0)


@pytest.mark.parametrize(("source", "rc", "output", "readable"), [
    # util-linux dmesg under kernel.dmesg_restrict=1 without CAP_SYSLOG
    ("dmesg", 1, "dmesg: read kernel buffer failed: Operation not permitted\n", False),
    ("journalctl", 127, "sh: 1: journalctl: not found\n", False),
    # a journal without a kernel message since boot says nothing: dmesg is read instead
    ("journalctl", 0, "-- No entries --\n", False),
    # journalctl exits 0 when the user may not read the system journal
    ("journalctl", 0, "Hint: You are currently not seeing messages from other users and the system.\n"
                      "      Users in groups 'adm', 'systemd-journal' can see all messages.\n"
                      "      Pass -q to turn off this notice.\n-- No entries --\n", False),
    ("journalctl", 0, "No journal files were opened due to insufficient permissions.\n", False),
    ("journalctl", 0, "", False),
    ("dmesg", 0, "[    0.000000] Linux version 6.8.0-45-generic (buildd@lcy02-amd64-075)\n", True),
])
def test_unreadable_reason(source: str, rc: int, output: str, readable: bool) -> None:
    why = kernel_log.unreadable_reason(source, rc, output)
    assert (why is None) == readable, why
    if rc:
        assert why is not None and f"status {rc}" in why and output.split("\n")[0][:40] in why


def _runner(answers: dict[str, tuple[int, str]]) -> tuple[Callable[[str], tuple[int, str]], list[str]]:
    ran: list[str] = []

    def run(command: str) -> tuple[int, str]:
        ran.append(command)
        return answers[command.split()[0]]

    return run, ran


def test_read_kernel_log_falls_back_to_dmesg_and_fails_when_neither_reads() -> None:
    refused = (1, "dmesg: read kernel buffer failed: Operation not permitted\n")
    run, ran = _runner({"journalctl": (0, "-- No entries --\n"), "dmesg": refused})
    log = kernel_log.read_kernel_log(run)
    assert (log.readable, len(ran)) == (False, 2) and "holds no kernel message" in log.reasons[0]
    run, ran = _runner({"journalctl": (0, "-- No entries --\n"), "dmesg": (0, "[ 0.0] Linux version 6.8.0\n")})
    assert kernel_log.read_kernel_log(run).source == "dmesg"

    run, ran = _runner({"journalctl": (1, "Failed to get journal access: Permission denied\n"),
                        "dmesg": (0, "[ 1.0] NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.\n")})
    log = kernel_log.read_kernel_log(run)
    assert (log.readable, log.source, len(ran)) == (True, "dmesg", 2)
    assert kernel_log.xid_events(log.text)[0][0].xid == 79

    run, _ = _runner({"journalctl": (1, "Failed to get journal access: Permission denied\n"), "dmesg": refused})
    log = kernel_log.read_kernel_log(run)
    assert not log.readable and log.text == ""
    assert log.reasons == ["journalctl exited with status 1: Failed to get journal access: Permission denied",
                           "dmesg exited with status 1: dmesg: read kernel buffer failed: Operation not permitted"]
