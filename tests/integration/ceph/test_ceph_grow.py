"""The Ceph growth acceptance: "adding a storage node to the spec and converging adds its OSDs without restarting or
touching existing ones", on the shared lab (`itest_lab`).

Marked `lab_last`: it grows the shared lab by one node for good, so it runs after every other
test of the session (tests/integration/conftest.py moves it there). It writes the stack file
with the storage pool's count raised by one to a temporary folder under the same file name (same
lab, same stack name), runs `gpucluster lab up` on it (the lab adds the node and leaves the
running ones as they are) and `gpucluster converge --limit <new node>`: the new node gets the
whole site.yml, Ceph included; the OSD, key and bucket steps it needs on the monitors run
delegated to the first monitor. The existing nodes are not in the run at all, which keeps the
test's cost at one node's first converge (about 5 min on the 2-core CI host under load).
deploy-ceph.yml alone is not enough on a fresh node: its apt tasks rely on what the common role
of site.yml sets up first (python3-apt).

With GPUCLUSTER_KEEP_LAB=1 the node is taken out again at the end (its OSD purged, its key
removed, `lab up` with the original stack file), so a kept lab matches its stack file.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucluster.ceph.parse import parse_osd_tree
from tests.integration.waiting import wait_for

pytestmark = [pytest.mark.lab, pytest.mark.lab_last]


def _health(lab: Any, node: str) -> dict[str, Any]:
    res = lab.ssh(node, "ceph health detail -f json")
    try:
        return dict(json.loads(res.stdout or "{}"))
    except json.JSONDecodeError:
        return {}


def _healthy(lab: Any, node: str, allowed: set[str]) -> bool:
    h = _health(lab, node)
    return h.get("status") == "HEALTH_OK" or (
        h.get("status") == "HEALTH_WARN" and set(h.get("checks", {})) <= allowed)


def _daemon(lab: Any, host: str, osd_id: int) -> tuple[str, str]:
    """(MainPID, ExecMainStartTimestamp) of ceph-osd@ID on its host: both change on any restart."""
    res = lab.ssh(host, f"systemctl show ceph-osd@{osd_id} -p MainPID -p ExecMainStartTimestamp")
    props = dict(line.split("=", 1) for line in res.stdout.splitlines() if "=" in line)
    return props.get("MainPID", "?"), props.get("ExecMainStartTimestamp", "?")


def _osd_dump(lab: Any, node: str) -> dict[int, dict[str, Any]]:
    dump = json.loads(lab.ssh(node, "ceph osd dump -f json").stdout)
    return {int(o["osd"]): o for o in dump["osds"]}


def _grown_stack(stack: Path, dest_dir: Path) -> tuple[Path, str, dict[str, Any]]:
    """The stack file with the first storage pool one node larger; returns (file, new node, config)."""
    doc = yaml.safe_load(stack.read_text(encoding="utf-8"))
    config = doc["config"]
    pool = next(p for p in config["gpucluster:node_pools"] if "storage" in p["roles"])
    pool["count"] += 1
    new = f"{pool['name']}-{pool['count']}"
    storage = config["gpucluster:storage"]
    if storage.get("locations"):
        # A failure domain other than host: the new node joins the first storage node's bucket.
        first = f"{pool['name']}-1"
        storage["locations"][new] = storage["locations"][first]
    dest_dir.mkdir(parents=True, exist_ok=True)
    grown = dest_dir / stack.name  # the same file name: the same stack and lab
    grown.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return grown, new, config


def _shrink_back(lab: Any, admin: str, new: str, osd_ids: list[int]) -> None:
    """Take the grown node out of Ceph and the lab again (kept labs only; best effort)."""
    for osd_id in osd_ids:
        lab.ssh(admin, f"ceph osd out {osd_id}")
    lab.ssh(new, "systemctl stop gpucluster-cephfs.service ceph-osd.target")
    for osd_id in osd_ids:
        lab.ssh(admin, f"ceph osd purge {osd_id} --yes-i-really-mean-it")
    lab.ssh(admin, f"ceph osd crush rm {new}; ceph auth del client.gpu.{new}")
    lab.gc("lab", "up", "--stack", str(lab.stack), timeout=900)


def test_adding_a_storage_node_adds_its_osd_and_leaves_the_others_alone(itest_lab: Any, tmp_path: Path) -> None:
    lab = itest_lab
    started = time.monotonic()
    grown, new, config = _grown_stack(lab.stack, tmp_path / "grown")
    storage = config["gpucluster:storage"]
    admin = storage["monitors"][0]
    allowed = set(storage.get("allowed_health_warnings") or [])
    wait_for(lambda: _healthy(lab, admin, allowed), "a healthy cluster before the growth", timeout=300)

    before_tree = parse_osd_tree(lab.ssh(admin, "ceph osd tree -f json").stdout)
    assert before_tree, "no OSDs before the growth"
    assert all(o.host != new for o in before_tree)
    daemons = {o.id: (o.host, _daemon(lab, o.host, o.id)) for o in before_tree}
    assert all(pid not in ("0", "?") for _, (pid, _) in daemons.values()), daemons
    up_from = {i: o["up_from"] for i, o in _osd_dump(lab, admin).items()}

    up = lab.gc("lab", "up", "--stack", str(grown), "--json", timeout=900)
    assert up.returncode == 0, up.stderr[-3000:]
    actions = {n["name"]: n["action"] for n in json.loads(up.stdout)["nodes"]}
    assert actions[new] == "created", actions
    assert all(a in ("unchanged", "changed") for n, a in actions.items() if n != new), actions
    grown_osds: list[int] = []
    try:
        t0 = time.monotonic()
        conv = lab.gc("converge", "--stack", str(grown), "--limit", new, "--json", timeout=1800)
        converge_s = time.monotonic() - t0
        lab.record("grow_converge_s", converge_s)
        summary = json.loads(conv.stdout or "{}")
        assert conv.returncode == 0, f"{summary.get('failures')} ({summary.get('run_dir')})\n{conv.stderr[-3000:]}"
        recap = summary["hosts"]
        assert recap[new]["failed"] == 0 and recap[new]["unreachable"] == 0, recap
        assert set(recap) <= {new, "localhost"}, f"the limited converge touched other hosts: {sorted(recap)}"

        tree = parse_osd_tree(lab.ssh(admin, "ceph osd tree -f json").stdout)
        grown_osds = [o.id for o in tree if o.host == new]
        assert grown_osds, f"no OSD on {new}: {[(o.id, o.host) for o in tree]}"
        dump = _osd_dump(lab, admin)
        for osd_id in grown_osds:
            assert dump[osd_id]["up"] == 1 and dump[osd_id]["in"] == 1, dump[osd_id]

        # The existing OSDs: the same process since before (PID and start time), and the osdmap
        # has not seen them go down and come back (up_from unchanged).
        for osd_id, (host, was) in daemons.items():
            assert _daemon(lab, host, osd_id) == was, f"osd.{osd_id} on {host} was restarted: {was}"
            assert dump[osd_id]["up_from"] == up_from[osd_id], f"osd.{osd_id} went down and up again"
            assert dump[osd_id]["up"] == 1 and dump[osd_id]["in"] == 1, dump[osd_id]

        if storage.get("failure_domain", "host") != "host":
            crush = json.loads(lab.ssh(admin, "ceph osd crush tree -f json").stdout)["nodes"]
            bucket = next(n for n in crush if n["name"] == storage["locations"][new])
            host_id = next(n["id"] for n in crush if n["name"] == new and n["type"] == "host")
            assert host_id in bucket.get("children", []), f"{new} is not in {bucket['name']}: {crush}"

        mounted = lab.ssh(new, f"findmnt -n -o FSTYPE --mountpoint {storage['cephfs']['mount_path']}")
        assert mounted.returncode == 0 and "ceph" in mounted.stdout, mounted.stdout + mounted.stderr
        wait_for(lambda: _healthy(lab, admin, allowed), "HEALTH_OK after the new OSD joined", timeout=420)
        lab.record("grow_total_s", time.monotonic() - started)
    finally:
        if os.environ.get("GPUCLUSTER_KEEP_LAB") == "1":
            _shrink_back(lab, admin, new, grown_osds)
