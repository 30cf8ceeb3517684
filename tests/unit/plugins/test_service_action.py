"""The `gpucluster.cluster.service` action's fast path: which arguments it may answer, and what it
concludes from systemctl's real answers (tests/data/systemctl, captured on a lab node)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.loading import load_file

REPO = Path(__file__).resolve().parents[3]
service = load_file(REPO / "collections/ansible_collections/gpucluster/cluster/plugins/action/service.py",
                    "gpucluster_service_action")


def captured() -> dict[str, str]:
    text = (REPO / "tests/data/systemctl/probe-debian12-systemd252.txt").read_text()
    out = {}
    for section in text.split("### ")[1:]:
        head, _, body = section.partition("\n")
        out[head.split()[0]] = body
    return out


SAMPLES = captured()


@pytest.mark.parametrize(("args", "expected"), [
    ({"name": "nftables", "state": "started", "enabled": True}, ("nftables", True, True)),
    ({"name": "nftables", "enabled": "yes"}, ("nftables", False, True)),
    ({"name": "x.service", "state": "started", "no_block": True}, ("x.service", True, False)),
    ({"name": "x", "state": "started", "enabled": True, "daemon_reload": False}, ("x", True, True)),
    ({"unit": "x", "state": "started", "scope": "system"}, ("x", True, False)),
])
def test_start_and_enable_take_the_fast_path(args: dict[str, Any], expected: tuple[str, bool, bool]) -> None:
    assert service.fast_path_unit(args) == expected


@pytest.mark.parametrize("args", [
    {"name": "x", "state": "restarted"},
    {"name": "x", "state": "reloaded", "enabled": True},
    {"name": "x", "state": "stopped"},
    {"name": "x", "enabled": False},
    {"name": "x", "state": "started", "daemon_reload": True},
    {"name": "x", "masked": False, "state": "started"},
    {"name": "x", "state": "started", "scope": "user"},
    {"daemon_reload": True},
    {"name": "x"},
    {"name": "x", "enabled": "maybe"},
])
def test_anything_else_goes_to_the_module(args: dict[str, Any]) -> None:
    assert service.fast_path_unit(args) is None


@pytest.mark.parametrize(("case", "started", "enabled", "expected"), [
    ("active-enabled", True, True, True),
    ("active-static", True, True, True),  # the module counts is-enabled's exit 0 ("static") as enabled
    ("active-static", True, False, True),
    ("not-found", True, True, False),  # the module's own "could not find" message
    ("not-found", False, True, False),
    ("inactive-disabled", True, True, False),
    ("inactive-disabled", False, True, False),
    ("masked", True, False, False),
    ("enabled-runtime", True, True, False),  # the module enables it for good
    ("enabled-runtime", True, False, True),
    ("alias", False, True, False),  # the module leaves an alias to systemd
])
def test_real_answers(case: str, started: bool, enabled: bool, expected: bool) -> None:
    assert service.satisfied(SAMPLES[case], started, enabled) is expected


@pytest.mark.parametrize("stdout", ["", "LoadState=loaded\nActiveState=active\n", "garbage\n"])
def test_an_answer_it_does_not_recognise_runs_the_module(stdout: str) -> None:
    assert service.satisfied(stdout, True, True) is False


def test_the_probe_quotes_the_unit() -> None:
    command = service.probe_command("a b; rm -rf /")
    assert "'a b; rm -rf /'" in command and "rm -rf / " not in command.replace("'a b; rm -rf /'", "")
