"""The Ceph and Kubernetes checks' failure sentences: the measured figure against the expected one.

The Ceph inputs are the parsers' real outputs (tests/unit/ceph/data/, from Ceph's own JSON);
the Kubernetes ones are `kubectl get nodes -o json` items in the API's shape.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from gpucluster.ceph.parse import (
    ClusterStatus,
    Health,
    HealthCheck,
    Osd,
    Quorum,
    RadosBench,
    parse_health,
    parse_osd_tree,
    parse_quorum_status,
    parse_status,
)
from gpucluster.conformance import sentences

CEPH_DATA = Path(__file__).resolve().parents[1] / "ceph" / "data"
NOW = datetime(2026, 11, 23, 15, 0, 0, tzinfo=UTC)


def _osd(i: int, host: str, up: bool = True, reweight: float = 1.0) -> Osd:
    return Osd(id=i, name=f"osd.{i}", host=host, up=up, reweight=reweight)


def _ceph(name: str) -> str:
    return (CEPH_DATA / name).read_text(encoding="utf-8")


def test_sentences_from_a_real_cluster_with_an_osd_and_a_monitor_down():
    assert sentences.ceph_osds(parse_osd_tree(_ceph("osd-tree-osd-down.json"))) == (
        "2 of 3 OSDs up and in, expected 3: osd.1 on node-2 is DOWN and in")
    assert sentences.ceph_osds(parse_osd_tree(_ceph("osd-tree-ok.json"))) == ""
    quorum = parse_quorum_status(_ceph("quorum-mon-down.json"))
    assert sentences.ceph_monitors(quorum, ["node-1", "node-2", "node-3"]) == (
        "2 of 3 monitors in quorum, expected 3: node-3 out of quorum (quorum holds with node-1, node-2)")
    assert sentences.ceph_pgs(parse_status(_ceph("status-osd-down.json"))) == (
        "0 of 41 PGs active+clean, expected 41: 34 active+undersized, 7 active+undersized+degraded")
    assert sentences.ceph_pgs(parse_status(_ceph("status-ok.json"))) == ""
    health = sentences.ceph_health(parse_health(_ceph("health-osd-down.json")), [])
    assert health.startswith("HEALTH_WARN with 3 check(s) not allowed, expected HEALTH_OK: OSD_DOWN (1 osds down): "
                             "osd.1 (root=default,host=node-2) is down; OSD_HOST_DOWN")


def test_osds_up_and_in_against_all_of_them():
    osds = [_osd(0, "stor-1"), _osd(1, "stor-2", up=False), _osd(2, "stor-3")]
    assert sentences.ceph_osds(osds) == "2 of 3 OSDs up and in, expected 3: osd.1 on stor-2 is DOWN and in"
    assert sentences.ceph_osds([_osd(0, "stor-1", reweight=0.0)]) == (
        "0 of 1 OSDs up and in, expected 1: osd.0 on stor-1 is up and OUT")
    assert sentences.ceph_osds([]) == "0 OSDs in the OSD tree, expected at least one per storage host"
    assert sentences.ceph_osds([_osd(0, "stor-1")]) == ""


def test_storage_hosts_without_an_osd():
    osds = [_osd(0, "stor-1"), _osd(1, "stor-2")]
    assert sentences.ceph_osd_hosts(osds, ["stor-1", "stor-2", "stor-3"]) == (
        "2 of 3 storage hosts carry an OSD, expected 3: no OSD on stor-3")
    assert sentences.ceph_osd_hosts(osds, ["stor-1", "stor-2"]) == ""


def test_placement_groups_active_clean():
    status = ClusterStatus(fsid="f", health=Health("HEALTH_WARN", ()), quorum_names=("a",), num_osds=3,
                           num_up_osds=2, num_in_osds=3, num_pgs=128,
                           pgs_by_state={"active+clean": 120, "active+undersized+degraded": 6, "peering": 2})
    assert sentences.ceph_pgs(status) == (
        "120 of 128 PGs active+clean, expected 128: 6 active+undersized+degraded, 2 peering")
    empty = ClusterStatus(fsid="f", health=Health("HEALTH_OK", ()), quorum_names=(), num_osds=0, num_up_osds=0,
                          num_in_osds=0, num_pgs=0, pgs_by_state={})
    assert sentences.ceph_pgs(empty).startswith("0 placement groups, expected at least one")


def test_monitors_in_the_monmap_and_in_quorum():
    quorum = Quorum(monitors=("stor-1", "stor-2", "stor-3"), in_quorum=("stor-1", "stor-2"), leader="stor-1")
    assert sentences.ceph_monitors(quorum, ["stor-1", "stor-2", "stor-3"]) == (
        "2 of 3 monitors in quorum, expected 3: stor-3 out of quorum (quorum holds with stor-1, stor-2)")
    assert sentences.ceph_monitors(quorum, ["stor-1", "stor-4"]) == (
        "1 of 2 monitors in the monmap, expected 2: stor-4 missing")
    assert sentences.ceph_monitors(quorum, ["stor-1", "stor-2"]) == ""


def test_health_names_the_status_each_check_and_what_was_allowed():
    health = Health("HEALTH_WARN", (
        HealthCheck("OSD_DOWN", "HEALTH_WARN", "1 osds down", ("osd.1 (root=default,host=stor-2) is down",), False),
        HealthCheck("POOL_NO_REDUNDANCY", "HEALTH_WARN", "1 pool(s) have no replicas configured", (), False)))
    assert sentences.ceph_health(health, ["POOL_NO_REDUNDANCY"]) == (
        "HEALTH_WARN with 1 check(s) not allowed, expected HEALTH_OK or only the allowed warnings "
        "POOL_NO_REDUNDANCY: OSD_DOWN (1 osds down): osd.1 (root=default,host=stor-2) is down")
    assert sentences.ceph_health(health, []).startswith("HEALTH_WARN with 2 check(s) not allowed, expected HEALTH_OK: ")


def test_a_rados_bench_without_progress():
    stalled = RadosBench(mode="write", total_time_s=5.2, ops=0, op_size_bytes=4194304, bandwidth_mb_s=0.0,
                         average_iops=0.0, average_latency_s=0.0)
    assert sentences.rados_bench("write", stalled) == (
        "rados bench write 0 MiB/s over 0 ops in 5.2 s, expected a non-zero rate")
    ok = RadosBench(mode="seq", total_time_s=5.0, ops=300, op_size_bytes=4194304, bandwidth_mb_s=240.0,
                    average_iops=60.0, average_latency_s=0.26)
    assert sentences.rados_bench("read", ok) == ""


def _node(name: str, status: str | None, since: str = "2026-11-23T14:54:20Z", reason: str = "") -> dict:
    conditions = [{"type": "MemoryPressure", "status": "False"}]
    if status is not None:
        conditions.append({"type": "Ready", "status": status, "lastTransitionTime": since, "reason": reason})
    return {"metadata": {"name": name}, "status": {"conditions": conditions}}


def test_nodes_ready_says_how_long_a_node_has_been_notready_and_which_never_joined():
    items = [_node("gpu-1", "True"), _node("gpu-2", "False", reason="KubeletNotReady"), _node("other", "False")]
    assert sentences.k8s_nodes_ready(items, {"gpu-1", "gpu-2", "gpu-3"}, NOW) == (
        "1 of 3 nodes Ready, expected 3: gpu-2 NotReady for 340 s (KubeletNotReady); gpu-3 not registered")
    assert sentences.k8s_nodes_ready([_node("gpu-1", "Unknown", since="")], {"gpu-1"}, NOW) == (
        "0 of 1 nodes Ready, expected 1: gpu-1 Ready=Unknown")
    assert sentences.k8s_nodes_ready([_node("gpu-1", None)], {"gpu-1"}, NOW) == (
        "0 of 1 nodes Ready, expected 1: gpu-1 reports no Ready condition")
    assert sentences.k8s_nodes_ready(items, {"gpu-1"}, NOW) == ""


def test_allocatable_gpus_against_the_profile():
    assert sentences.k8s_allocatable("gpu-1", {"nvidia.com/gpu": "4"}, "nvidia.com/gpu", 8, "h100-sxm-8") == (
        "gpu-1 allocatable nvidia.com/gpu 4, expected 8 (profile h100-sxm-8)")
    assert sentences.k8s_allocatable("gpu-1", {}, "nvidia.com/gpu", 8, "h100-sxm-8") == (
        "gpu-1 allocatable nvidia.com/gpu none, expected 8 (profile h100-sxm-8)")
    assert sentences.k8s_allocatable("gpu-1", {"nvidia.com/gpu": "8"}, "nvidia.com/gpu", 8, "p") == ""


def test_the_gpu_pod_and_the_allreduce_job():
    assert sentences.k8s_pod("Pending after 300s", 0, "") == "pod Pending after 300s, expected Succeeded"
    assert sentences.k8s_pod("Succeeded", 0, "No devices were found") == (
        "nvidia-smi in the pod listed 0 GPUs, expected at least 1: No devices were found")
    assert sentences.k8s_pod("Succeeded", 1, "GPU 0: NVIDIA H100") == ""
    assert sentences.k8s_allreduce(16, 24, 30.1, 40.0, True) == (
        "16 ranks ran, expected 24 (one per GPU of every GPU node); busbw 30.1 GB/s < floor 40 GB/s")
    assert sentences.k8s_allreduce(24, 24, 30.1, None, False) == "wrong results, expected the exact sum on every rank"
    assert sentences.k8s_allreduce(24, 24, 41.0, 40.0, True) == ""
