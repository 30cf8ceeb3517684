"""Ceph storage (GC-CEPH). Expectations come from the inventory's gpucluster_storage; each
failure message names what is wrong: the check code, the down OSD and its node, the monitor
out of quorum."""

from __future__ import annotations

import secrets

import pytest

from gpucluster.ceph.parse import parse_health, parse_osd_tree, parse_quorum_status, parse_rados_bench, parse_status
from gpucluster.ceph.suite import ceph, quote, require_admin, storage_spec
from gpucluster.conformance import sentences


def _tail(text: str, lines: int = 3) -> str:
    """The last lines of a tool's output, whole: a message never starts mid-word."""
    return " | ".join(line.strip() for line in (text or "").strip().splitlines()[-lines:])



@pytest.mark.check("GC-CEPH-001")
@pytest.mark.storage
def test_ceph_health(node):
    """The cluster MUST report HEALTH_OK, or only warnings whose codes the spec lists in storage.allowed_health_warnings (a HEALTH_ERR check is never allowed)."""  # noqa: E501
    require_admin(node)
    health = parse_health(ceph(node, "health detail -f json"))
    node.figure("health", health.status)
    node.figure("health_checks", health.codes())
    allowed = storage_spec(node).allowed_health_warnings
    assert not health.unexpected(allowed), sentences.ceph_health(health, allowed)


@pytest.mark.check("GC-CEPH-002")
@pytest.mark.storage
def test_ceph_osds_up_and_in(node):
    """Every OSD MUST be up and in, and every storage host MUST carry at least one OSD."""
    require_admin(node)
    osds = parse_osd_tree(ceph(node, "osd tree -f json"))
    node.figure("osds", len(osds))
    node.figure("osds_up_in", sum(1 for o in osds if o.up and o.is_in))
    problem = sentences.ceph_osds(osds)
    assert not problem, problem
    problem = sentences.ceph_osd_hosts(osds, list(node.inv.groups.get("storage", ())))
    assert not problem, problem


@pytest.mark.check("GC-CEPH-003")
@pytest.mark.storage
def test_ceph_pgs_active_clean(node):
    """Every placement group MUST be active+clean."""
    require_admin(node)
    status = parse_status(ceph(node, "status -f json"))
    node.figure("pgs", status.num_pgs)
    node.figure("pgs_active_clean", status.pgs_active_clean)
    problem = sentences.ceph_pgs(status)
    assert not problem, problem


@pytest.mark.check("GC-CEPH-004")
@pytest.mark.storage
def test_ceph_monitor_quorum(node):
    """Every monitor the spec lists MUST be in the monmap and in the quorum."""
    require_admin(node)
    monitors = storage_spec(node).monitors
    quorum = parse_quorum_status(ceph(node, "quorum_status -f json"))
    node.figure("quorum", list(quorum.in_quorum))
    problem = sentences.ceph_monitors(quorum, monitors)
    assert not problem, problem


def _mount_path(node) -> str:
    fs = storage_spec(node).cephfs
    if fs is None:
        pytest.skip("the spec has no CephFS")
    return fs.mount_path


@pytest.mark.check("GC-CEPH-005")
@pytest.mark.gpu
def test_ceph_cephfs_mounted_writable(node):
    """CephFS MUST be mounted at storage.cephfs.mount_path through a client key of the node's own (never client.admin), and a file written there MUST read back."""  # noqa: E501
    path = _mount_path(node)
    mnt = node.run(f"findmnt -n -o FSTYPE --mountpoint {quote(path)}", timeout=30)
    assert mnt.ok and "ceph" in mnt.stdout, (
        f"{path} has file system type {mnt.stdout.strip() or 'none (not mounted)'}, expected ceph or fuse.ceph-fuse")
    node.figure("fstype", mnt.stdout.strip())
    who = node.run("ps -eo args | grep '^[c]eph-fuse' || true", timeout=30).stdout
    assert "--id admin" not in who and not ("ceph-fuse" in who and "--id" not in who), (
        f"ceph-fuse runs as client.admin: {who.strip()}")
    probe = f"{path}/.gc-ceph-005-{node.name}"
    res = node.run(f"echo {quote(node.name)} > {quote(probe)} && cat {quote(probe)} && rm -f {quote(probe)}", timeout=60)  # noqa: E501
    assert res.ok and res.stdout.strip() == node.name, f"cannot write and read {probe}: {_tail(res.stderr)}"


@pytest.mark.check("GC-CEPH-006")
@pytest.mark.gpu
def test_ceph_cephfs_cross_node_checksum(node):
    """A file written to CephFS on one GPU node MUST read back with the same SHA-256 on this node."""
    path = _mount_path(node)
    gpus = list(node.inv.groups.get("gpu", ()))
    writer_name = gpus[0] if gpus[0] != node.name else (gpus[1] if len(gpus) > 1 else None)
    if writer_name is None:
        pytest.skip("only one GPU node: nothing to compare with")
    writer = node.remote().__class__(writer_name, node.ssh_config)
    name = f"{path}/.gc-ceph-006-{node.name}-{secrets.token_hex(4)}"
    wrote = writer.run(f"head -c 8388608 /dev/urandom > {quote(name)} && sync {quote(name)} && sha256sum {quote(name)}")
    assert wrote.ok, f"{writer_name}: cannot write {name}: {_tail(wrote.stderr)}"
    try:
        got = node.run(f"sha256sum {quote(name)}")
    finally:
        writer.run(f"rm -f {quote(name)}")
    want = wrote.stdout.split()[0]
    assert got.ok, f"cannot read {name} written on {writer_name}: {_tail(got.stderr)}"
    assert got.stdout.split()[0] == want, (
        f"sha256 {got.stdout.split()[0]} read here, expected {want} as written on {writer_name}")


@pytest.mark.check("GC-CEPH-007")
@pytest.mark.storage
def test_ceph_rados_bench(node):
    """rados bench MUST write and read back at a non-zero rate on an RBD pool; the write and read throughput are recorded as figures."""  # noqa: E501
    require_admin(node)
    pools = [p.name for p in storage_spec(node).pools if p.application == "rbd"]
    if not pools:
        pytest.skip("the spec has no RBD pool")
    pool = quote(pools[0])
    try:
        w = node.run(f"rados bench -p {pool} 5 write -b 4M -t 16 --no-cleanup --run-name gc-ceph-007", timeout=180)
        assert w.ok, f"rados bench write exited {w.rc}: {_tail(w.stderr or w.stdout)}"
        write = parse_rados_bench(w.stdout)
        r = node.run(f"rados bench -p {pool} 5 seq -t 16 --run-name gc-ceph-007", timeout=180)
        assert r.ok, f"rados bench seq exited {r.rc}: {_tail(r.stderr or r.stdout)}"
        read = parse_rados_bench(r.stdout)
    finally:
        node.run(f"rados -p {pool} cleanup --run-name gc-ceph-007", timeout=180)
    for key, value in (("write_mib_s", write.bandwidth_mb_s), ("read_mib_s", read.bandwidth_mb_s),
                       ("write_iops", write.average_iops), ("read_iops", read.average_iops),
                       ("write_latency_s", write.average_latency_s), ("read_latency_s", read.average_latency_s)):
        node.figure(key, value)
    problem = sentences.rados_bench("write", write) or sentences.rados_bench("read", read)
    assert not problem, problem
