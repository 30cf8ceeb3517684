"""The Ceph parsers on output captured from the lab cluster (tests/unit/ceph/data/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucluster.ceph.parse import (
    CephOutputError,
    parse_health,
    parse_osd_tree,
    parse_quorum_status,
    parse_rados_bench,
    parse_status,
)

DATA = Path(__file__).parent / "data"


def read(name: str) -> str:
    return (DATA / name).read_text()


def test_healthy_cluster_has_no_checks() -> None:
    health = parse_health(read("health-ok.json"))
    assert health.status == "HEALTH_OK"
    assert health.checks == ()
    assert health.unexpected([]) == []


def test_down_osd_is_named_with_its_host() -> None:
    health = parse_health(read("health-osd-down.json"))
    assert health.status == "HEALTH_WARN"
    assert health.codes() == ["OSD_DOWN", "OSD_HOST_DOWN", "PG_DEGRADED"]
    osd_down = health.checks[0]
    assert osd_down.details == ("osd.1 (root=default,host=node-2) is down",)
    assert [c.code for c in health.unexpected(["PG_DEGRADED"])] == ["OSD_DOWN", "OSD_HOST_DOWN"]


def test_allowed_warnings_never_hide_errors() -> None:
    text = '{"status": "HEALTH_ERR", "checks": {"MON_DISK_CRIT": {"severity": "HEALTH_ERR", ' \
           '"summary": {"message": "mon full"}, "detail": [], "muted": false}}}'
    assert [c.code for c in parse_health(text).unexpected(["MON_DISK_CRIT"])] == ["MON_DISK_CRIT"]


def test_monitor_out_of_quorum() -> None:
    health = parse_health(read("health-mon-down.json"))
    assert health.codes() == ["MON_DOWN"]
    assert "mon.node-3" in health.checks[0].details[0]
    quorum = parse_quorum_status(read("quorum-mon-down.json"))
    assert quorum.monitors == ("node-1", "node-2", "node-3")
    assert quorum.in_quorum == ("node-1", "node-2")
    assert quorum.out_of_quorum == ("node-3",)


def test_full_quorum() -> None:
    quorum = parse_quorum_status(read("quorum-ok.json"))
    assert quorum.out_of_quorum == ()
    assert quorum.leader in quorum.in_quorum


def test_status_counts_osds_and_pgs() -> None:
    status = parse_status(read("status-ok.json"))
    assert (status.num_osds, status.num_up_osds, status.num_in_osds) == (3, 3, 3)
    assert status.pgs_active_clean == status.num_pgs == 41
    assert status.pgs_not_active_clean() == {}
    assert status.health.status == "HEALTH_OK"


def test_status_with_a_down_osd_has_unclean_pgs() -> None:
    status = parse_status(read("status-osd-down.json"))
    assert status.num_up_osds == 2
    assert status.pgs_not_active_clean()
    assert all("degraded" in s or "undersized" in s for s in status.pgs_not_active_clean())


def test_status_with_a_monitor_down() -> None:
    status = parse_status(read("status-mon-down.json"))
    assert status.quorum_names == ("node-1", "node-2")
    assert status.health.codes() == ["MON_DOWN"]


def test_osd_tree_maps_osds_to_hosts() -> None:
    osds = parse_osd_tree(read("osd-tree-ok.json"))
    assert [(o.name, o.host, o.up, o.is_in) for o in osds] == [
        ("osd.0", "node-1", True, True), ("osd.1", "node-2", True, True), ("osd.2", "node-3", True, True)]


def test_osd_tree_names_the_down_osd_and_its_node() -> None:
    down = [o for o in parse_osd_tree(read("osd-tree-osd-down.json")) if not o.up]
    assert [(o.name, o.host) for o in down] == [("osd.1", "node-2")]


def test_rados_bench_write() -> None:
    bench = parse_rados_bench(read("rados-bench-write.txt"))
    assert bench.mode == "write"
    assert bench.ops == 142
    assert bench.op_size_bytes == 4 * 1024 * 1024
    assert bench.bandwidth_mb_s == pytest.approx(107.958)
    assert bench.average_iops == 26
    assert bench.average_latency_s == pytest.approx(0.58237)


def test_rados_bench_read() -> None:
    bench = parse_rados_bench(read("rados-bench-seq.txt"))
    assert bench.mode == "read"
    assert bench.ops == 142
    assert bench.bandwidth_mb_s == pytest.approx(349.814)
    assert bench.bandwidth_bytes_s == pytest.approx(349.814 * 1048576)


def test_rados_bench_read_without_objects_fails() -> None:
    with pytest.raises(CephOutputError, match="Must write data"):
        parse_rados_bench(read("rados-bench-seq-no-objects.txt"))


@pytest.mark.parametrize("name,parser", [
    ("rados-bench-write.txt", parse_health),
    ("rados-bench-write.txt", parse_status),
    ("health-ok.json", parse_osd_tree),
    ("health-ok.json", parse_quorum_status),
    ("health-ok.json", parse_status),
])
def test_wrong_output_is_rejected(name: str, parser: object) -> None:
    with pytest.raises(CephOutputError):
        parser(read(name))  # type: ignore[operator]


def test_truncated_bench_is_rejected() -> None:
    text = read("rados-bench-write.txt").split("Total time run")[0]
    with pytest.raises(CephOutputError, match="no summary"):
        parse_rados_bench(text)
