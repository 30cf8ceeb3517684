"""The lab's boot probe: a unit systemd could not spawn (status 219/CGROUP, this host's fault) is
started once more and said so; every other failed unit is left alone and reported."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gpucluster.lab import node

pytestmark = pytest.mark.process

# A stand-in for systemctl that answers from files: failed units in ./failed, each unit's
# `systemctl show` text in ./show.<unit>, and every restart recorded in ./restarted.
FAKE_SYSTEMCTL = r"""#!/bin/sh
d=$(dirname "$0")
case "$1" in
  is-system-running) if [ -s "$d/failed" ]; then echo degraded; exit 1; fi; echo running ;;
  list-units) [ -f "$d/failed" ] && sed 's/$/ loaded failed failed x/' "$d/failed" ;;
  show) eval "u=\${$#}"; cat "$d/show.$u" ;;
  reset-failed) : ;;
  restart) echo "$2" >> "$d/restarted"; grep -vx "$2" "$d/failed" > "$d/failed.new"; mv "$d/failed.new" "$d/failed" ;;
esac
"""


def _run_probe(tmp_path: Path, mode: str) -> tuple[node.Readiness, list[str]]:
    fake = tmp_path / "systemctl"
    fake.write_text(FAKE_SYSTEMCTL)
    fake.chmod(0o755)
    (tmp_path / "failed").write_text("nftables.service\nsku-customizations.service\nbroken.service\n")
    (tmp_path / "show.nftables.service").write_text(
        "ExecMainStatus=219\nExecStart={ path=/usr/sbin/nft ; argv[]=/usr/sbin/nft -f /etc/nftables.conf ; "
        "ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=271 ; code=exited ; status=219 }\n")
    (tmp_path / "show.sku-customizations.service").write_text(
        "ExecMainStatus=0\nExecStart={ path=/bin/sh ; argv[]=/bin/sh /usr/sbin/x.sh ; ignore_errors=no ; "
        "start_time=[Sat 2026-11-28 04:47:17 UTC] ; stop_time=[Sat 2026-11-28 04:47:17 UTC] ; pid=279 ; "
        "code=exited ; status=0 }\nExecStartPost={ path=/usr/bin/install ; argv[]=/usr/bin/install a b ; "
        "ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=280 ; code=exited ; status=219 }\n")
    (tmp_path / "show.broken.service").write_text(
        "ExecMainStatus=1\nExecStart={ path=/bin/false ; argv[]=/bin/false ; ignore_errors=no ; "
        "start_time=[n/a] ; stop_time=[n/a] ; pid=290 ; code=exited ; status=1 }\n")
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    out = subprocess.run(["sh", "-c", node._PROBE_SCRIPT, "probe", mode], env=env, capture_output=True,
                         text=True, check=True, timeout=30).stdout
    restarted = (tmp_path / "restarted").read_text().split() if (tmp_path / "restarted").exists() else []
    return node.parse_probe(out), restarted


def test_units_that_could_not_be_spawned_are_started_again_and_said(tmp_path: Path) -> None:
    ready, restarted = _run_probe(tmp_path, "respawn")
    assert restarted == ["nftables.service", "sku-customizations.service"]
    assert ready.respawned == ("nftables.service", "sku-customizations.service")
    # A unit that ran and failed is the node's own failure: reported, never restarted.
    assert ready == node.Readiness(True, "degraded", ("broken.service",), ready.respawned)


def test_a_look_restarts_nothing(tmp_path: Path) -> None:
    ready, restarted = _run_probe(tmp_path, "look")
    assert restarted == []
    assert ready == node.Readiness(True, "degraded",
                                   ("nftables.service", "sku-customizations.service", "broken.service"))


def test_parse_probe_reads_a_node_that_is_not_up() -> None:
    assert node.parse_probe("state starting\n") == node.Readiness(False, "starting")
    assert node.parse_probe("") == node.Readiness(False, "unknown")
