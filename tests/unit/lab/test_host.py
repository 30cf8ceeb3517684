"""The lab's host set-up leaves no system-wide apt proxy enabled that it installed."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

import pytest

from gpucluster.lab import host


class FakeSystemctl:
    def __init__(self, state: str, disable_rc: int = 0) -> None:
        self.state, self.disable_rc = state, disable_rc
        self.calls: list[list[str]] = []

    def __call__(self, cmd: Sequence[str], what: str, *, check: bool = True, **_: object) -> \
            subprocess.CompletedProcess[str]:
        self.calls.append(list(cmd))
        verb = cmd[1]
        if verb == "is-enabled":
            return subprocess.CompletedProcess(list(cmd), 0 if self.state == "enabled" else 1, self.state + "\n", "")
        if verb == "disable":
            if self.disable_rc == 0:
                self.state = "disabled"
            return subprocess.CompletedProcess(list(cmd), self.disable_rc, "", "")
        return subprocess.CompletedProcess(list(cmd), 0, "", "")


@pytest.fixture
def systemctl(monkeypatch: pytest.MonkeyPatch) -> FakeSystemctl:
    fake = FakeSystemctl("enabled")
    monkeypatch.setattr(host, "which", lambda cmd: "/usr/bin/systemctl" if cmd == "systemctl" else None)
    monkeypatch.setattr(host, "run", fake)
    return fake


def test_the_proxy_the_lab_installed_is_disabled_and_stopped(systemctl: FakeSystemctl) -> None:
    """Debian enables apt-cacher-ng.service on install: after a reboot it listened on every address."""
    said: list[str] = []
    host.quiet_system_proxy(said.append, installed=True)
    assert [c[1:] for c in systemctl.calls] == [["is-enabled", host.SYSTEM_PROXY_UNIT],
                                                ["disable", host.SYSTEM_PROXY_UNIT], ["stop", host.SYSTEM_PROXY_UNIT]]
    assert systemctl.state == "disabled" and "disabled Debian's system-wide" in said[0]


def test_a_proxy_the_operator_had_is_named_not_touched(systemctl: FakeSystemctl) -> None:
    said: list[str] = []
    host.quiet_system_proxy(said.append, installed=False)
    assert [c[1] for c in systemctl.calls] == ["is-enabled"] and systemctl.state == "enabled"
    assert "listens on every address" in said[0] and "systemctl disable --now" in said[0]


def test_nothing_to_say_when_it_is_disabled_or_disabling_fails(systemctl: FakeSystemctl) -> None:
    systemctl.state = "disabled"
    said: list[str] = []
    host.quiet_system_proxy(said.append, installed=True)
    assert said == []
    systemctl.state, systemctl.disable_rc = "enabled", 1
    host.quiet_system_proxy(said.append, installed=True)
    assert said and said[0].startswith("warning: could not disable")
