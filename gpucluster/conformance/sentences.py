"""The failure sentences of the Ceph and Kubernetes checks: the measured figure against the expected
one, then what is wrong by name ("2 of 3 OSDs up and in, expected 3: osd.1 on stor-2 is DOWN and in",
"1 of 2 nodes Ready, expected 2: gpu-2 NotReady for 340 s (KubeletNotReady)").

They are pure functions over what the checks parsed, so that the words are tested without a
cluster (tests/unit/conformance/test_sentences.py); the checks assert with them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from gpucluster.ceph.parse import ClusterStatus, Health, Osd, Quorum, RadosBench

DETAILS_SHOWN = 5  # of a health check's detail lines; `ceph health detail` holds them all


def _names(items: Iterable[str]) -> str:
    return ", ".join(items)


# --- Ceph ------------------------------------------------------------------------------------


def ceph_health(health: Health, allowed: Sequence[str]) -> str:
    """Why the cluster's health fails: its status and each check the spec does not allow."""
    bad = health.unexpected(allowed)
    expected = "HEALTH_OK" + (f" or only the allowed warnings {_names(allowed)}" if allowed else "")
    parts = [f"{c.code} ({c.summary})" + (f": {' | '.join(c.details[:DETAILS_SHOWN])}" if c.details else "")
             for c in bad]
    return f"{health.status} with {len(bad)} check(s) not allowed, expected {expected}: {'; '.join(parts)}"


def ceph_osds(osds: Sequence[Osd]) -> str:
    """OSDs up and in against all of them; empty when every OSD is."""
    bad = [o for o in osds if not (o.up and o.is_in)]
    if not osds:
        return "0 OSDs in the OSD tree, expected at least one per storage host"
    if not bad:
        return ""
    what = "; ".join(f"{o.name} on {o.host or '?'} is {'up' if o.up else 'DOWN'} and {'in' if o.is_in else 'OUT'}"
                     for o in bad)
    return f"{len(osds) - len(bad)} of {len(osds)} OSDs up and in, expected {len(osds)}: {what}"


def ceph_osd_hosts(osds: Sequence[Osd], storage_hosts: Sequence[str]) -> str:
    """Storage hosts carrying an OSD against the inventory's; empty when every one does."""
    hosts = {o.host for o in osds}
    missing = [h for h in storage_hosts if h not in hosts]
    if not missing:
        return ""
    return (f"{len(storage_hosts) - len(missing)} of {len(storage_hosts)} storage hosts carry an OSD, expected "
            f"{len(storage_hosts)}: no OSD on {_names(missing)}")


def ceph_pgs(status: ClusterStatus) -> str:
    """Placement groups active+clean against all of them; empty when every one is."""
    if status.num_pgs <= 0:
        return "0 placement groups, expected at least one (the cluster has no pools?)"
    others = status.pgs_not_active_clean()
    if not others:
        return ""
    states = ", ".join(f"{n} {state}" for state, n in sorted(others.items(), key=lambda kv: (-kv[1], kv[0])))
    return f"{status.pgs_active_clean} of {status.num_pgs} PGs active+clean, expected {status.num_pgs}: {states}"


def ceph_monitors(quorum: Quorum, monitors: Sequence[str]) -> str:
    """The spec's monitors in the monmap and in the quorum; empty when every one is."""
    missing = [m for m in monitors if m not in quorum.monitors]
    if missing:
        return (f"{len(monitors) - len(missing)} of {len(monitors)} monitors in the monmap, expected "
                f"{len(monitors)}: {_names(missing)} missing")
    out = [m for m in monitors if m not in quorum.in_quorum]
    if not out:
        return ""
    return (f"{len(monitors) - len(out)} of {len(monitors)} monitors in quorum, expected {len(monitors)}: "
            f"{_names(out)} out of quorum (quorum holds with {_names(quorum.in_quorum) or 'none'})")


def rados_bench(what: str, bench: RadosBench) -> str:
    """A bench that made no progress; empty when it did."""
    if bench.bandwidth_mb_s > 0 and bench.ops > 0:
        return ""
    return (f"rados bench {what} {bench.bandwidth_mb_s:g} MiB/s over {bench.ops} ops in {bench.total_time_s:g} s, "
            "expected a non-zero rate")


# --- Kubernetes --------------------------------------------------------------------------------


def _since(stamp: Any, now: datetime) -> str:
    """`for 340 s` from a condition's lastTransitionTime (RFC 3339), empty when it has none."""
    if not isinstance(stamp, str) or not stamp:
        return ""
    try:
        then = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return ""
    if then.tzinfo is None:
        then = then.replace(tzinfo=UTC)
    return f" for {max(0, round((now - then).total_seconds()))} s"


def k8s_nodes_ready(items: Sequence[Mapping[str, Any]], want: Iterable[str], now: datetime | None = None) -> str:
    """The inventory's nodes Ready against all of them (``items``: ``kubectl get nodes -o json``'s);
    each other one by name: how long it has been NotReady and why, or that it never registered.
    Empty when every one is Ready."""
    now = now or datetime.now(UTC)
    wanted = sorted(set(want))
    by_name = {str(n.get("metadata", {}).get("name", "")): n for n in items}
    ready, problems = 0, []
    for name in wanted:
        node = by_name.get(name)
        if node is None:
            problems.append(f"{name} not registered")
            continue
        cond = next((c for c in node.get("status", {}).get("conditions", []) or [] if c.get("type") == "Ready"), None)
        if cond is not None and cond.get("status") == "True":
            ready += 1
            continue
        if cond is None:
            problems.append(f"{name} reports no Ready condition")
            continue
        state = "NotReady" if cond.get("status") == "False" else f"Ready={cond.get('status')}"
        why = cond.get("reason") or ""
        problems.append(f"{name} {state}{_since(cond.get('lastTransitionTime'), now)}" + (f" ({why})" if why else ""))
    if not problems:
        return ""
    return f"{ready} of {len(wanted)} nodes Ready, expected {len(wanted)}: {'; '.join(problems)}"


def k8s_allocatable(node: str, allocatable: Mapping[str, Any], resource: str, expected: int, profile: str) -> str:
    """A node's allocatable GPUs against its profile's count; empty when they agree."""
    raw = allocatable.get(resource)
    try:
        got = int(str(raw)) if raw is not None else 0
    except ValueError:
        got = -1
    if got == expected:
        return ""
    shown = "none" if raw is None else str(raw)
    return f"{node} allocatable {resource} {shown}, expected {expected} (profile {profile})"


def k8s_pod(phase: str, gpus_listed: int, tail: str) -> str:
    """The GPU pod's phase and the GPUs nvidia-smi listed; empty when it succeeded with one or more."""
    if phase != "Succeeded":
        return f"pod {phase}, expected Succeeded: {tail}".rstrip(": ")
    if gpus_listed < 1:
        return f"nvidia-smi in the pod listed {gpus_listed} GPUs, expected at least 1: {tail}".rstrip(": ")
    return ""


def k8s_allreduce(world_size: int, expected_ranks: int, busbw_gbps: float, floor_gbps: float | None,
                  correct: bool) -> str:
    """The job's all-reduce against the ranks, the floor and correctness; empty when it passes."""
    problems = []
    if world_size != expected_ranks:
        problems.append(f"{world_size} ranks ran, expected {expected_ranks} (one per GPU of every GPU node)")
    if not correct:
        problems.append("wrong results, expected the exact sum on every rank")
    if floor_gbps is not None and busbw_gbps < floor_gbps:
        problems.append(f"busbw {busbw_gbps:.3g} GB/s < floor {floor_gbps:g} GB/s")
    return "; ".join(problems)
