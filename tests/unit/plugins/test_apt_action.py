"""The `gpucluster.cluster.apt` action's fast path: which package specs dpkg already satisfies.

The dpkg output comes from this host's real dpkg-query (the format the action asks nodes for).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.unit.loading import load_file

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[3]
PLUGIN = REPO / "collections/ansible_collections/gpucluster/cluster/plugins/action/apt.py"


apt = load_file(PLUGIN, "gpucluster_apt_action")


@pytest.mark.parametrize(("args", "expected"), [
    ({"name": ["chrony", "nftables"], "state": "present", "cache_valid_time": 3600},
     [("chrony", None), ("nftables", None)]),
    ({"name": "chrony,nftables"}, [("chrony", None), ("nftables", None)]),
    ({"name": ["ceph-common=16.2.15*"], "install_recommends": False}, [("ceph-common", "16.2.15*")]),
    ({"name": ["libnccl2:amd64=2.21.5-1+cuda12.4"]}, [("libnccl2", "2.21.5-1+cuda12.4")]),
    ({"name": ["x"], "update_cache": False}, [("x", None)]),
    ({"name": ["x"], "update_cache": "no"}, [("x", None)]),
])
def test_wanted_packages_for_plain_installs(args: dict[str, object], expected: list[tuple[str, str | None]]) -> None:
    assert apt.wanted_packages(args) == expected


@pytest.mark.parametrize("args", [
    {"name": ["x"], "state": "latest"},
    {"name": ["x"], "update_cache": True},
    {"deb": "/var/cache/gpucluster/x.deb"},
    {"name": ["/tmp/x.deb"]},
    {"name": ["x>=1.0"]},
    {"upgrade": "dist"},
    {"name": []},
    {"name": ["x"], "purge": True},
])
def test_anything_but_a_plain_install_goes_to_apt(args: dict[str, object]) -> None:
    assert apt.wanted_packages(args) is None


@pytest.fixture(scope="module")
def dpkg_output() -> str:
    if shutil.which("dpkg-query") is None:
        pytest.skip("no dpkg-query on this host")
    res = subprocess.run(["dpkg-query", "-W", "-f=" + apt._QUERY_FORMAT, "bash", "coreutils",
                          "gpucluster-no-such-package"], capture_output=True, text=True, check=False)
    assert res.returncode == 1, res  # one unknown name: dpkg-query's exit code the action accepts
    return res.stdout


def test_real_dpkg_output_is_parsed(dpkg_output: str) -> None:
    installed = apt.parse_dpkg_query(dpkg_output)
    assert set(installed) == {"bash", "coreutils"}
    assert all(v and v[0].isdigit() for v in installed.values())


def test_satisfied_only_when_installed_at_a_matching_version(dpkg_output: str) -> None:
    installed = apt.parse_dpkg_query(dpkg_output)
    bash = installed["bash"]
    assert apt.unsatisfied([("bash", None), ("coreutils", None)], installed) == []
    assert apt.unsatisfied([("bash", bash.split("-")[0] + "*")], installed) == []
    assert apt.unsatisfied([("bash", "0.1*")], installed) == ["bash=0.1*"]
    assert apt.unsatisfied([("gpucluster-no-such-package", None)], installed) == ["gpucluster-no-such-package"]


def test_removed_but_configured_packages_are_not_installed() -> None:
    out = "chrony\tconfig-files\t4.3-2\nnftables\tinstalled\t1.0.6-2\nntp\tnot-installed\t\n"
    assert apt.unsatisfied([("chrony", None), ("nftables", None), ("ntp", None)],
                           apt.parse_dpkg_query(out)) == ["chrony", "ntp"]


@pytest.mark.parametrize("first_try", [0, 1])
def test_the_bindings_are_fetched_through_the_tasks_proxy(tmp_path: Path, first_try: int) -> None:
    """A node whose only way out is the egress proxy gets python3-apt through it: the raw command
    carries the play's environment to apt-get, on the first try and after apt-get update (the
    Azure twin with a proxy egress found the bare command resolving deb.debian.org itself)."""
    log = tmp_path / "calls"
    fake = tmp_path / "apt-get"
    fake.write_text(f'#!/bin/sh\necho "$* via ${{http_proxy:-none}} ${{https_proxy:-none}}" >> {log}\n'
                    f'case "$1" in install) [ -e {tmp_path}/updated ] || exit {first_try} ;; '
                    f'update) : > {tmp_path}/updated ;; esac\n')
    fake.chmod(0o755)
    env = {"http_proxy": "http://10.83.0.1:3142", "https_proxy": "http://10.83.0.1:3142", "no_proxy": "a b,'c'"}
    cmd = apt.bindings_command(env)
    subprocess.run(["/bin/sh", "-c", cmd], env={"PATH": f"{tmp_path}:/usr/bin:/bin"}, check=True, timeout=30)
    calls = log.read_text().splitlines()
    assert calls and all(c.endswith("via http://10.83.0.1:3142 http://10.83.0.1:3142") for c in calls), calls
    assert len(calls) == (1 if first_try == 0 else 3)
    assert apt.bindings_command({}) == apt._INSTALL_BINDINGS
