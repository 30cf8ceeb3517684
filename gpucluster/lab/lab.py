"""The lab's lifecycle: ``up``, ``status``, ``down``. The CLI and the Pulumi provider both call these.

The lab is one more target: ``up`` brings its nodes up and exports the stack outputs every target
exports (``outputs.json`` in the lab's folder), nothing else. The inventory is made from them by the
one hand-off, :mod:`gpucluster.inventory`, as for any target.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpucluster.lab import firewall, network, node, process, proxy, rootfs, ssh
from gpucluster.lab.host import LabError, Progress, disk_problem, ensure_host, free_bytes, quiet, run
from gpucluster.lab.layout import (
    FABRIC_INTERFACE,
    SSH_USER,
    LabLayout,
    NodeLayout,
    layout_lab,
    mirror_problems,
    overlap_problems,
    route_problems,
)
from gpucluster.lab.state import atomic_write, check_owned, claim, locked, other_labs, read_state, write_state
from gpucluster.outputs import LAB_CAPABILITIES, build_outputs
from gpucluster.spec.cluster import Cluster

# Set on Ctrl-C so node workers stop waiting and the command returns promptly.
_cancel = threading.Event()
_WORKERS = 8


@dataclass
class NodeResult:
    name: str
    action: str  # created | started | unchanged | changed | failed
    seconds: float
    system_state: str = ""
    failed_units: list[str] = field(default_factory=list)
    boot_log_tail: str = ""

    @property
    def ok(self) -> bool:
        return self.action != "failed"


@dataclass
class LabResult:
    name: str
    nodes: list[NodeResult]
    changed: bool
    seconds: float
    rootfs_built: bool
    outputs_file: str
    # The stack outputs the lab exports (gpucluster/outputs.py), as written to outputs_file.
    outputs: dict[str, Any]

    @property
    def failed(self) -> list[NodeResult]:
        return [n for n in self.nodes if not n.ok]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LabInputs:
    """Everything ``up`` needs, as plain data (the Pulumi provider's inputs)."""

    plan: LabLayout
    outputs: dict[str, Any]


def lab_inputs(cluster: Cluster) -> LabInputs:
    """The lab target's inputs (a platform twin's are gpucluster.twin.inputs, over the same plan)."""
    plan = layout_lab(cluster)
    outputs = build_outputs(cluster, ssh_user=SSH_USER, fabric_interface=FABRIC_INTERFACE,
                            ssh_private_key_file=str(plan.key_file), capabilities=LAB_CAPABILITIES)
    return LabInputs(plan, outputs)


def _registry_lock(plan: LabLayout) -> Path:
    return plan.cache_dir / "registry.lock"


def _register(plan: LabLayout, progress: Progress) -> LabLayout | None:
    """Check the lab can exist here and record its plan before anything is made; return the old plan."""
    with locked(_registry_lock(plan), "the lab registry", wait=True):
        problems = overlap_problems(plan, other_labs(Path(plan.state_root), plan.name))
        problems += route_problems(plan, network.host_routes())
        problems += mirror_problems(plan, network.resolve(plan.mirror))
        if problems:
            raise LabError(problems[0] if len(problems) == 1 else "; ".join(problems))
        old = read_state(plan.lab_dir)
        if old is not None and old.lab_level() != plan.lab_level():
            changed = sorted(k for k, v in plan.lab_level().items() if old.lab_level().get(k) != v)
            raise LabError(
                f"lab {plan.name!r} is up with different {', '.join(changed)}; "
                "run `gpucluster lab down` first, then `up` again"
            )
        if old is not None:
            removed = [n for n in old.nodes if n.name not in {m.name for m in plan.nodes}]
            for gone in removed:
                progress(f"{gone.name}: no longer in the spec, removing")
                _teardown_node(old, gone)
        write_state(plan)
        return old


def _teardown_node(plan: LabLayout, n: NodeLayout) -> bool:
    changed = node.teardown(plan, n)
    changed = network.delete_node_links(n) or changed
    if plan.node_dir(n.name).exists():
        shutil.rmtree(plan.node_dir(n.name))
        changed = True
    return changed


@dataclass
class _Prepared:
    node: NodeLayout
    existed: bool
    changed: bool
    disks: list[str]
    host_key: str = ""
    error: NodeResult | None = None


def _prepare_node(plan: LabLayout, n: NodeLayout, pubkey: str) -> _Prepared:
    """Network, disks, overlay and files: everything before boot, and the node's host key."""
    started = time.monotonic()
    existed = plan.node_dir(n.name).exists()
    try:
        changed = network.ensure_node_links(plan, n)
        disk_changed, disks = node.ensure_disks(plan, n)
        changed = node.ensure_overlay(plan, n) or disk_changed or changed
        kept = plan.bastion_cache_dir if plan.site_bastion and n is plan.bastion else None
        files_changed, host_key = node.ensure_files(plan, n, pubkey, disks, kept)
    except LabError as exc:
        failed = NodeResult(n.name, "failed", round(time.monotonic() - started, 2), str(exc),
                            boot_log_tail=node.log_tail(plan, n))
        return _Prepared(n, existed, True, [], error=failed)
    return _Prepared(n, existed, changed or files_changed, disks, host_key)


def _boot_node(plan: LabLayout, prep: _Prepared, deadline: float, progress: Progress) -> NodeResult:
    n = prep.node
    if prep.error is not None:
        progress(f"{n.name}: FAILED: {prep.error.system_state}")
        return prep.error
    started = time.monotonic()
    try:
        if node.pids(plan, n):
            ready = node.probe(plan, n, timeout=15, respawn=True)
            action = "changed" if prep.changed else "unchanged"
        else:
            where = (f"outside {n.outside.address.split('/')[0]}, management {n.management_ip}" if n.outside
                     else f"{n.management_ip}, fabric {n.fabric_ip}")
            progress(f"{n.name}: booting ({where})")
            pid = node.start(plan, n, prep.disks)
            ready = node.wait_ready(plan, n, pid, deadline, _cancel)
            action = "started" if prep.existed else "created"
    except LabError as exc:
        ready = node.Readiness(False, str(exc))
    seconds = round(time.monotonic() - started, 2)
    if not ready.ok:
        progress(f"{n.name}: FAILED: {ready.system_state}")
        return NodeResult(n.name, "failed", seconds, ready.system_state, list(ready.failed_units),
                          node.log_tail(plan, n))
    failed = f" (failed units: {', '.join(ready.failed_units)})" if ready.failed_units else ""
    if ready.respawned:
        # Said every time: a unit that could not be spawned is this host's fault, never the node's.
        failed += (f" (started again: {', '.join(ready.respawned)}: systemd could not spawn them, "
                   "status 219/CGROUP, a fault of this host's cgroups)")
    progress(f"{n.name}: {action}, system {ready.system_state}{failed} [{seconds:.1f} s]")
    return NodeResult(n.name, action, seconds, ready.system_state, list(ready.failed_units))


def up(inputs: LabInputs, *, rebuild_rootfs: bool = False, progress: Progress = quiet) -> LabResult:
    """Bring the lab to its plan. Idempotent; a node that fails is reported, the others stay up."""
    plan = inputs.plan
    started = time.monotonic()
    _cancel.clear()
    ensure_host(progress)
    new_nodes = sum(1 for n in plan.machines if not plan.node_dir(n.name).exists())
    room = disk_problem(Path(plan.state_root), free_bytes(Path(plan.state_root)), new_nodes,
                        plan.rootfs_dir.exists())
    if room:
        raise LabError(room)
    claim(plan.lab_dir, plan.name)
    with locked(plan.lab_dir / "lock", f"lab {plan.name!r}"):
        old = _register(plan, progress)
        changed = old != plan
        changed = network.ensure_bridges(plan) or changed
        if firewall.ensure(plan):
            changed = True
            progress("the host's own connections to the cluster's networks refused: the bastion is the way in"
                     if plan.bastion is not None else
                     f"the host reaches the cluster's networks from the controller's address {plan.outside_host_ip} "
                     "alone" if plan.outside_cidr is not None else "the host's table of an earlier twin removed")
        if proxy.ensure_proxy(plan):
            changed = True
            progress(f"apt proxy on {plan.proxy_url} (cache {plan.apt_cache_dir})")
        with locked(plan.cache_dir / "rootfs.lock", "the rootfs cache", wait=True):
            built = rootfs.ensure_rootfs(plan.rootfs_dir, suite=plan.suite, mirror=plan.mirror,
                                         packages=plan.packages, proxy_url=plan.proxy_url,
                                         rebuild=rebuild_rootfs, progress=progress)
        changed = ssh.ensure_lab_key(plan) or built or changed
        pubkey = ssh.public_key(plan)
        pool = ThreadPoolExecutor(max_workers=min(_WORKERS, len(plan.machines)))
        try:
            prepared = list(pool.map(lambda n: _prepare_node(plan, n, pubkey), plan.machines))
            # Host keys are known before any node boots: SSH checks them strictly from the first login.
            keys = {p.node.name: p.host_key for p in prepared if p.host_key}
            changed = ssh.write_known_hosts(plan, keys) or changed
            deadline = time.monotonic() + plan.boot_timeout_s
            futures: list[Future[NodeResult]] = [
                pool.submit(_boot_node, plan, p, deadline, progress) for p in prepared
            ]
            results = [f.result() for f in futures]
        except BaseException:
            _cancel.set()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown()
        changed = atomic_write(plan.outputs_file, json.dumps(inputs.outputs, indent=2) + "\n", 0o644) or changed
        changed = changed or any(r.action != "unchanged" for r in results)
    return LabResult(plan.name, results, changed, round(time.monotonic() - started, 2), built,
                     str(plan.outputs_file), inputs.outputs)


def _leftover_netns(plan: LabLayout) -> list[str]:
    if not network.NETNS_DIR.is_dir():
        return []
    prefix = f"gcl-{plan.name}-"
    return sorted(p.name for p in network.NETNS_DIR.iterdir() if p.name.startswith(prefix))


def down(state_root: Path, name: str, *, progress: Progress = quiet) -> bool:
    """Remove everything the lab made (not the shared cache); return whether anything was there."""
    lab_dir = state_root / name
    if not lab_dir.exists() and not lab_dir.is_symlink():
        return False
    check_owned(lab_dir, name)
    plan = read_state(lab_dir)
    with locked(lab_dir / "lock", f"lab {name!r}"):
        if plan is not None:
            pool = ThreadPoolExecutor(max_workers=min(_WORKERS, max(1, len(plan.machines))))
            futures = [pool.submit(_teardown_node, plan, n) for n in plan.machines]
            for n, fut in zip(plan.machines, futures, strict=True):
                fut.result()
                progress(f"{n.name}: removed")
            pool.shutdown()
            # Safety nets for anything a crash left outside the plan's nodes.
            stray = process.find(node.EXECUTABLE, str(lab_dir) + "/")
            if stray:
                process.stop(stray, grace_s=20)
            for ns in _leftover_netns(plan):
                network.delete_netns(ns)
            if proxy.stop_proxy(plan):
                progress("apt proxy stopped")
            for bridge in plan.bridges:
                network.delete_link(bridge)
        # By the lab's name alone: also where its plan could not be read.
        if firewall.remove(name):
            progress("the host's table for the bastion removed")
        for point in node.mounts_under(lab_dir):
            run(["umount", "-l", point], f"umount {point}")
        for loop in node.loops_under(lab_dir):
            run(["losetup", "-d", loop], f"detach {loop}")
        shutil.rmtree(lab_dir)
    progress(f"lab {name!r} removed ({lab_dir})")
    return True


def _node_status(plan: LabLayout, n: NodeLayout) -> dict[str, Any]:
    running = bool(node.pids(plan, n))
    ready = node.probe(plan, n, timeout=10) if running else node.Readiness(False, "not running")
    return {
        "name": n.name,
        "management_ip": n.management_ip,
        "fabric_ip": n.fabric_ip,
        "running": running,
        "network": network.netns_exists(n.netns),
        "mounted": node.is_mounted(node.root_dir(plan, n)),
        "ssh": ready.ok,
        "system_state": ready.system_state,
        "failed_units": list(ready.failed_units),
    }


def status(state_root: Path, name: str) -> dict[str, Any] | None:
    """The lab as found on the host, or None when it is not up."""
    plan = read_state(state_root / name)
    if plan is None:
        return None
    with ThreadPoolExecutor(max_workers=min(_WORKERS, len(plan.machines))) as pool:
        nodes = list(pool.map(lambda n: _node_status(plan, n), plan.machines))
    return {
        "name": plan.name,
        "state_dir": str(plan.lab_dir),
        "proxy": {"url": plan.proxy_url, "running": bool(proxy.pids(plan))},
        "bridges": {b: network.link_exists(b)
                    for b in plan.bridges},
        "rootfs": str(plan.rootfs_dir),
        "outputs_file": str(plan.outputs_file),
        "ssh_private_key_file": str(plan.key_file),
        "nodes": nodes,
        "healthy": all(n["ssh"] for n in nodes) and bool(proxy.pids(plan)),
    }
