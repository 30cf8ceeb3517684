"""The Ceph roles' rendered decisions: which CephFS client mounts and how (kernel and ceph-fuse
units against golden files), and where CRUSH puts hosts and pools for a failure domain.

Inventories come from the example stack files through the project's own hand-off, as in
tests/unit/roles. Regenerate the golden units after an intended change:
``GPUCLUSTER_UPDATE_GOLDEN=1 pytest tests/unit/ceph/test_ceph_render.py``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from gpucluster.inventory import build_inventory
from gpucluster.outputs import StackOutputs, build_outputs
from gpucluster.spec import load_spec
from gpucluster.spec.rules import failure_domains
from tests.unit.roles.no_log import NO_LOG
from tests.unit.roles.render import (
    GOLDEN,
    REPO,
    ROLES,
    assert_golden,
    first_host,
    host_context,
    render_template,
    role_vars,
)

CEPH_GOLDEN = GOLDEN / "ceph"
PROBE = "Ask the kernel, systemd and modprobe which CephFS client can mount here"


def inventory(stack: str) -> dict[str, Any]:
    """The inventory of an example stack, with the failure domains a provider reports (racks)."""
    cluster = load_spec(REPO / stack)
    domains = {} if cluster.spec.storage is None or cluster.spec.storage.failure_domain == "host" else (
        failure_domains(cluster.spec))
    outputs = build_outputs(cluster, ssh_user="root", fabric_interface="eth1", failure_domains=domains)
    return build_inventory(cluster, StackOutputs.model_validate(outputs))


def client_vars(stack: str, **extra: Any) -> dict[str, Any]:
    inv = inventory(stack)
    return role_vars("ceph_client", host_context(inv, first_host(inv, "gpu")), extra)


def golden(name: str, text: str) -> None:
    assert_golden(CEPH_GOLDEN / name, text)


# --- which client ---------------------------------------------------------------------------

def probed(*lines: str) -> dict[str, Any]:
    """tasks/detect.yml's probe as `raw` registers it (ssh -tt: each line ends in CR LF)."""
    return {"__ceph_client_detect": {"rc": 0, "stdout": "".join(f"{line}\r\n" for line in lines),
                                     "stdout_lines": list(lines)}}


# (id, ceph_client_mount_method, registered results, expected client, piece of the reason); the
# probe's real output for each case: tests/unit/ceph/test_ceph_client_detect.py.
CHOICES = [
    ("kernel-has-ceph", "auto", probed("filesystem ceph"), "kernel",
     "the running kernel registers the ceph file system (/proc/filesystems)"),
    ("container", "auto", probed("filesystem none", "container systemd-nspawn"), "fuse",
     "ceph is not in /proc/filesystems and this node is a container (systemd-nspawn), which cannot load"),
    ("module-loadable", "auto", probed("filesystem none", "container none", "modprobe ok"), "kernel",
     "modprobe can load the ceph module"),
    ("no-module", "auto", probed("filesystem none", "container none",
                                "modprobe rc 1: modprobe: FATAL: Module ceph not found in directory "
                                "/lib/modules/6.1.0-37-amd64 "), "fuse",
     "modprobe --dry-run ceph fails (rc 1: modprobe: FATAL: Module ceph not found"),
    ("no-answer", "auto", {"__ceph_client_detect": {"rc": 127, "stdout": "", "stdout_lines": []}}, "fuse",
     "modprobe --dry-run ceph fails (rc ?: no answer)"),
    ("forced-fuse", "fuse", {"__ceph_client_detect": {"skipped": True}}, "fuse",
     "ceph_client_mount_method (storage.cephfs.client) is fuse"),
    ("forced-kernel", "kernel", {}, "kernel", "ceph_client_mount_method (storage.cephfs.client) is kernel"),
]


@pytest.mark.parametrize(("method", "registered", "client", "reason"), [c[1:] for c in CHOICES],
                         ids=[c[0] for c in CHOICES])
def test_client_choice_and_reason(method: str, registered: dict[str, Any], client: str, reason: str) -> None:
    v = client_vars("Pulumi.lab.yaml", ceph_client_mount_method=method, **registered)
    assert v["__ceph_client_choice"] == client
    assert reason in v["__ceph_client_choice_reason"], v["__ceph_client_choice_reason"]


def test_method_defaults_to_auto_from_the_spec() -> None:
    assert client_vars("Pulumi.lab.yaml")["ceph_client_mount_method"] == "auto"


def test_choice_tasks_probe_only_what_auto_needs() -> None:
    tasks = {t["name"]: t for t in yaml.safe_load((ROLES / "ceph_client/tasks/detect.yml").read_text())}
    assert "ceph_client_mount_method == 'auto'" in tasks[PROBE]["when"]
    said = tasks["Say which CephFS client mounts here and why"]["ansible.builtin.debug"]["msg"]
    assert "__ceph_client_mount_reason" in said and "because" in said


# --- how it mounts ------------------------------------------------------------------------------


def test_fuse_unit_matches_golden() -> None:
    v = client_vars("Pulumi.lab.yaml", __ceph_client_mount_client="fuse")
    text = render_template("ceph_client", "gpucluster-cephfs.service.j2", v)
    golden("ceph_client/gpucluster-cephfs.service.fuse-lab", text)
    assert "ExecStart=/usr/bin/ceph-fuse -f --id gpu.gpu-1 --client_fs cephfs /mnt/cephfs\n" in text
    assert "mount -t ceph" not in text


def test_kernel_unit_matches_golden() -> None:
    v = client_vars("Pulumi.onprem-h100-ib.yaml", __ceph_client_mount_client="kernel")
    text = render_template("ceph_client", "gpucluster-cephfs.service.j2", v)
    golden("ceph_client/gpucluster-cephfs.service.kernel-onprem-ib", text)
    # The three monitors' management addresses on the msgr2 port, the node's own key, the fs by name.
    assert ("ExecStart=/bin/mount -t ceph 10.10.0.14:3300,10.10.0.15:3300,10.10.0.16:3300:/ /mnt/data -o "
            "name=gpu.hgx-01,secretfile=/etc/ceph/ceph.client.gpu.hgx-01.secret,mds_namespace=cephfs,"
            "ms_mode=prefer-crc,noatime\n") in text
    assert "Type=oneshot" in text and "RemainAfterExit=yes" in text
    assert "ceph-fuse" not in text and "admin" not in text


def test_kernel_legacy_messenger_uses_port_6789() -> None:
    v = client_vars("Pulumi.onprem-h100-ib.yaml", __ceph_client_mount_client="kernel",
                    ceph_client_kernel_ms_mode="legacy")
    assert v["__ceph_client_kernel_source"].startswith("10.10.0.14:6789,")
    assert "ms_mode=legacy" in v["__ceph_client_kernel_options"]


def test_secret_file_holds_the_bare_key() -> None:
    task = next(t for t in yaml.safe_load((ROLES / "ceph_client/tasks/keys.yml").read_text())
                if t["name"] == "Install this node's secret for the kernel client")
    assert task["no_log"] == NO_LOG
    from tests.unit.roles.render import TEXT

    keyring = "[client.gpu.hgx-01]\n\tkey = AQBhc2RmYXNkZmFzZGZhc2RmYXNkZg==\n"
    content = TEXT.from_string(task["ansible.builtin.copy"]["content"]).render(
        __ceph_client_keys={"keyrings": {"client.gpu.hgx-01": keyring}},
        __ceph_client_entity={"name": "client.gpu.hgx-01"})
    assert content == "AQBhc2RmYXNkZmFzZGZhc2RmYXNkZg==\n"


# --- CRUSH ----------------------------------------------------------------------------------------

# `ceph osd crush tree -f json` of a cluster whose stor-01 sits under rack r1 and stor-02 under the root.
CRUSH_TREE = {
    "nodes": [
        {"id": -1, "name": "default", "type": "root", "type_id": 11, "children": [-5, -3]},
        {"id": -5, "name": "r1", "type": "rack", "type_id": 3, "children": [-2]},
        {"id": -2, "name": "stor-01", "type": "host", "type_id": 1, "pool_weights": {}, "children": [0]},
        {"id": 0, "name": "osd.0", "type": "osd", "type_id": 0, "crush_weight": 0.0078, "depth": 3},
        {"id": -3, "name": "stor-02", "type": "host", "type_id": 1, "pool_weights": {}, "children": [1]},
        {"id": 1, "name": "osd.1", "type": "osd", "type_id": 0, "crush_weight": 0.0078, "depth": 2},
    ],
    "stray": [],
}


def osd_vars(host: str, tree: dict[str, Any]) -> dict[str, Any]:
    inv = inventory("Pulumi.onprem-h100-ib.yaml")
    return role_vars("ceph_osd", host_context(inv, host), {"__ceph_osd_crush_tree": {"stdout": json.dumps(tree)}})


def test_osd_location_from_the_rack_on_bare_metal() -> None:
    v = osd_vars("stor-02", CRUSH_TREE)
    assert (v["ceph_osd_failure_domain"], v["ceph_osd_location"], v["ceph_osd_crush_host"]) == ("rack", "r2", "stor-02")


def test_crush_placement_found_in_the_tree() -> None:
    placed = osd_vars("stor-01", CRUSH_TREE)
    assert placed["__ceph_osd_crush_location_parent"] == "default"
    assert placed["__ceph_osd_crush_host_parent"] == "r1"  # nothing to do: every move's `when` is false
    moved = osd_vars("stor-02", CRUSH_TREE)
    assert moved["__ceph_osd_crush_location_bucket"] is None  # rack r2: created, hung under default
    assert moved["__ceph_osd_crush_host_parent"] == "default"  # host: moved into r2
    new = osd_vars("stor-03", CRUSH_TREE)
    assert new["__ceph_osd_crush_host_bucket"] is None  # created before its first OSD starts


def test_crush_tasks_only_for_other_failure_domains() -> None:
    main = yaml.safe_load((ROLES / "ceph_osd/tasks/main.yml").read_text())
    crush = next(t for t in main if t.get("ansible.builtin.import_tasks") == "crush.yml")
    assert crush["when"] == "ceph_osd_failure_domain != 'host'"
    order = [t.get("ansible.builtin.import_tasks") or t.get("ansible.builtin.include_tasks") for t in main]
    assert order.index("crush.yml") < order.index("service.yml")  # placed before any OSD starts
    lab = inventory("Pulumi.lab.yaml")
    assert role_vars("ceph_osd", host_context(lab, "stor-1"))["ceph_osd_failure_domain"] == "host"


def test_pools_rule_per_failure_domain() -> None:
    lab = inventory("Pulumi.lab.yaml")
    assert role_vars("ceph_pools", host_context(lab, "stor-1"))["ceph_pools_crush_rule"] == "replicated_rule"
    ib = inventory("Pulumi.onprem-h100-ib.yaml")
    assert role_vars("ceph_pools", host_context(ib, "stor-01"))["ceph_pools_crush_rule"] == "replicated_rack"
