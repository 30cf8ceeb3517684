"""First and no-op converge of the lab example's shape at 8 and 16 nodes (targets: an 8-node no-op
under 60 s, a 16-node no-op at most 1.5 times the 8-node one).

The stack is Pulumi.lab.yaml itself (one storage node with RBD and CephFS, CephFS mounted on every
GPU node), scaled: its GPU pool takes the other nodes. Each size gets a lab of its own
(`benchconv8`, `benchconv16`, 10.86.x / 10.87.x), converged twice through `gpucluster converge`'s
library entry point, then taken down. Needs root.
"""

from __future__ import annotations

import collections
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from gpucluster.converge import ConvergeOptions, converge, lab_inventory

TARGET_NOOP_8_S = 60.0
TARGET_16_OVER_8 = 1.5
REPO = Path(__file__).resolve().parents[1]
NETS = {3: 85, 8: 86, 16: 87}
# The figures of the lighter stack this bench measured before (RBD only, no CephFS, no mounts;
# bench/results/converge.json of 2026-11-27T08:28Z), and the example's shape as measured by hand
# when issue 25 was filed (a no-op through `gpucluster converge`).
BEFORE_EXAMPLE_SHAPE = {"when": "2026-11-27T08:28:13+00:00", "stack": "RBD only, no CephFS mounts",
                        "first_8_s": 280.0, "noop_8_s": 53.9,
                        "example_shape_by_hand": {"first_8_s": 386, "noop_8_s": 130.6, "first_16_s": 768,
                                                  "noop_16_s": 184.1}}
# The figures before the move to Ansible's stock strategy (bench/results/converge.json of
# 2026-11-23T07:51Z): the removed gpucluster.cluster.linear, linear over Mitogen with skips and
# controller-only tasks answered in the strategy's process through ansible-core internals.
BEFORE_STOCK = {"strategy": "gpucluster.cluster.linear (removed: relied on ansible-core internals)",
                "when": "2026-11-23T07:51:50+00:00", "noop_3_s": 25.0, "noop_8_s": 45.8, "first_8_s": 271.7}
# The figures of the stock strategy before the roles did less (bench/results/converge.json of
# 2026-11-23T15:13Z; host-tasks counted in a no-op run of that tree): a play per node type, a task
# per assert, report and skipped step.
BEFORE_FEWER_TASKS = {"when": "2026-11-23T15:13:16+00:00", "first_8_s": 368.1, "noop_8_s": 93.9,
                      "noop_8_without_apt_fast_path_s": 153.6, "noop_8_over_mitogen_opt_in_s": 71.1,
                      "noop_host_tasks_total": 1112, "noop_host_tasks_gpu_node": 140,
                      "noop_host_tasks_storage_node": 131}
# The figures on ansible-core 2.19.14 (Python 3.11), stock linear strategy, the same roles
# (bench/results/converge.json of 2026-11-23T17:05Z, host load 4.6-5.6 from other work).
BEFORE_ANSIBLE_CORE_2_21 = {"ansible_core": "2.19.14", "python": "3.11.7", "when": "2026-11-23T17:05:19+00:00",
                            "first_8_s": 502.1, "noop_8_s": 113.1, "noop_8_without_apt_fast_path_s": 166.4,
                            "noop_8_over_mitogen_opt_in_s": 55.5, "noop_host_tasks_total": 829,
                            "host_load_avg_1m": [4.59, 5.61]}
# The figures before the roles wrote their files through gpucluster.cluster.files and the kube
# filter file stopped importing the spec (bench/results/converge.json of 2026-11-23T20:54Z), and
# the same tree's no-op on one lab on 2026-11-27 06:58Z, just before the change (host CPU 194.6 s
# in 105.9 s: the controller's processes 90.8 s, half of it the workers importing gpucluster.kube).
BEFORE_FILES_MODULE = {"when": "2026-11-23T20:54:00+00:00", "first_8_s": 355.8, "noop_8_s": 103.8,
                       "noop_8_without_apt_fast_path_s": 163.2, "noop_8_over_mitogen_opt_in_s": 88.8,
                       "noop_host_tasks_total": 875,
                       "same_lab_2026_11_27": {"noop_8_s": 105.9, "host_cpu_s": 194.6, "controller_cpu_s": 90.8}}
# The example's shape before the files and service fast paths and ceph_client's raw probe
# (bench/results/converge.json of 2026-11-28, measured on a clean clone of e1b0605): the CephFS
# mount's stat, copy, file, template and systemd tasks and the client probe's slurp and command were
# each a Python start on every GPU node.
# Before the controller's templating changes (the builtin template lookup's deep copy, a compile per
# worker, the facts as variables, each worker loading its plugins): bench/results/converge.json of c2bc504.
BEFORE_CONTROLLER_TEMPLATING = {"when": "2026-11-29", "tree": "c2bc504", "first_8_s": 353.3, "noop_8_s": 73.4,
                                "first_16_s": 641.0, "noop_16_s": 122.7, "noop_host_tasks_total_8": 1005,
                                "noop_host_cpu_s_8": 126.8, "noop_controller_cpu_s_8": 96.3, "noop_cpu_floor_s_8": 63.4,
                                "noop_host_cpu_s_16": 226.0, "noop_controller_cpu_s_16": 173.9,
                                "noop_cpu_floor_s_16": 113.0}
BEFORE_FAST_PATHS = {"when": "2026-11-28", "tree": "e1b0605", "first_8_s": 289.9, "noop_8_s": 79.1,
                     "first_16_s": 611.0, "noop_16_s": 152.7, "noop_host_tasks_total_8": 1070,
                     "noop_host_cpu_s_8": 139.5, "noop_controller_cpu_s_8": 67.1, "noop_cpu_floor_s_8": 69.8,
                     "noop_host_cpu_s_16": 283.7, "noop_controller_cpu_s_16": 146.5}
SETTINGS = {
    "forks": 50,
    "pipelining": True,
    "ssh ControlPersist": "300s",
    "gathering": "smart, once per run (no cache across runs: keyed by host name only)",
    "gather_subset": "min,virtual (no hardware)",
    "strategy": "linear (Ansible's stock strategy; Mitogen only as the opt-in ablation below)",
    "apt": "gpucluster.cluster.apt (dpkg-query fast path before the apt module), one package call per role",
    "plays": "every node type in one play (converge-nodes.yml): shared roles run on all nodes at once",
    "tasks": "one assert per preflight, one report per role, sections off on a node behind one include",
    "files": "a role's folders and files in one gpucluster.cluster.files run (a template task costs two module runs)",
    "filters": "the collection's filter files import nothing heavy (Ansible loads them all in every worker)",
    "probes": "read-only shell probes and the roles' shell steps run as `raw` (no Python on the node), usetty off",
    "fast paths": ("gpucluster.cluster.files and gpucluster.cluster.service read the node with one shell "
                   "command and run their module only where something differs"),
}
# No-op converges repeated with one setting changed, so the JSON says what each costs or buys
# on the same lab in the same run: each fast path off (apt, files, service), and Mitogen (opt-in) on.
ABLATIONS = {
    "noop_without_apt_fast_path_s": {"GPUCLUSTER_APT_FAST_PATH": "0"},
    "noop_without_files_fast_path_s": {"GPUCLUSTER_FILES_FAST_PATH": "0"},
    "noop_without_service_fast_path_s": {"GPUCLUSTER_SERVICE_FAST_PATH": "0"},
    "noop_over_mitogen_opt_in_s": {"GPUCLUSTER_MITOGEN": "1"},
}
# Ablations cost a no-op each: measured at 3 nodes when asked for (their earlier 8-node figures are
# in the results' history), not at the sizes the targets are about.
ABLATIONS_PER_SIZE = {3: list(ABLATIONS)}


def _stack(size: int, path: Path) -> None:
    """Pulumi.lab.yaml at ``size`` nodes: its storage pool as it is, its GPU pool the rest."""
    net = NETS[size]
    spec = yaml.safe_load((REPO / "Pulumi.lab.yaml").read_text())
    config = spec["config"]
    config["gpucluster:name"] = f"benchconv{size}"
    config["gpucluster:target"]["boot_timeout_s"] = 300
    pools = config["gpucluster:node_pools"]
    others = sum(p["count"] for p in pools if "gpu" not in p["roles"])
    for pool in pools:
        if "gpu" in pool["roles"]:
            pool["count"] = size - others
    config["gpucluster:fabric"]["management_cidr"] = f"10.{net}.0.0/24"
    config["gpucluster:fabric"]["fabric_cidr"] = f"10.{net}.1.0/24"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))


def host_tasks(run_dir: Path) -> dict[str, int]:
    """Tasks each host ran or skipped in a converge (its run folder's events), loop items not counted."""
    counts: collections.Counter[str] = collections.Counter()
    for line in (run_dir / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event.get("event") in ("runner_on_ok", "runner_on_skipped", "runner_on_failed"):
            host = (event.get("event_data") or {}).get("host")
            if host and host != "localhost":
                counts[host] += 1
    return dict(sorted(counts.items()))


def _host_busy_s() -> float:
    """CPU seconds this host's processors have been busy since boot, all processes (/proc/stat's cpu
    line: user, nice, system, irq, softirq, steal), for the CPU a converge costs the controller and
    the lab's nodes together (they share this host's processors)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _controller_cpu_s() -> float:
    """CPU seconds of this process's waited-for children (ansible-playbook and its workers)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _size(size: int, work: Path) -> dict[str, Any]:
    stack = work / f"Pulumi.benchconv{size}.yaml"
    _stack(size, stack)
    cli = [sys.executable, "-m", "gpucluster", "lab"]
    # A first converge needs fresh nodes: remove a lab of that name left by an earlier run.
    subprocess.run([*cli, "down", "--stack", str(stack)], capture_output=True, text=True)
    up = subprocess.run([*cli, "up", "--stack", str(stack)], capture_output=True, text=True)
    if up.returncode != 0:
        return {"nodes": size, "error": f"lab up failed: {up.stderr[-500:]}"}
    try:
        inventory = lab_inventory(str(stack))
        runs = work / "runs"
        first = converge(ConvergeOptions(inventory=inventory, runs_dir=runs), progress_out=io.StringIO())
        busy, controller = _host_busy_s(), _controller_cpu_s()
        noop = converge(ConvergeOptions(inventory=inventory, runs_dir=runs), progress_out=io.StringIO())
        busy, controller = _host_busy_s() - busy, _controller_cpu_s() - controller
        cores = os.cpu_count() or 1
        out: dict[str, Any] = {
            "nodes": size,
            "first_s": round(first.seconds, 1),
            "first_failed_hosts": first.failed_hosts,
            "noop_s": round(noop.seconds, 1),
            "noop_changed": noop.changed_total,
            "noop_failed_hosts": noop.failed_hosts,
            "noop_host_tasks": host_tasks(noop.run_dir),
            # The CPU the no-op took on this host (controller and nodes share its processors), and
            # the shortest it could take here were every processor busy with it the whole time.
            "noop_host_cpu_s": round(busy, 1),
            "noop_controller_cpu_s": round(controller, 1),
            "host_cores": cores,
            "noop_cpu_floor_s": round(busy / cores, 1),
        }
        out["noop_host_tasks_total"] = sum(out["noop_host_tasks"].values())
        for key in ABLATIONS_PER_SIZE.get(size, []):
            env = ABLATIONS[key]
            saved = {k: os.environ.get(k) for k in env}
            os.environ.update(env)
            try:
                res = converge(ConvergeOptions(inventory=inventory, runs_dir=runs), progress_out=io.StringIO())
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
            out[key] = round(res.seconds, 1)
            out[key[:-2] + "_changed"] = res.changed_total
        return out
    finally:
        subprocess.run([*cli, "down", "--stack", str(stack)], capture_output=True, text=True)


def _ansible_core_version() -> str:
    """The ansible-core that ran the converges (ansible-playbook from this environment)."""
    from ansible.release import __version__

    return str(__version__)


def run() -> dict[str, Any]:
    if os.geteuid() != 0:
        return {"target": f"no-op converge of the lab example at 8 nodes < {TARGET_NOOP_8_S:.0f} s", "met": False,
                "skipped": "needs root (lab nodes)"}
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-converge-") as tmp:
        # GPUCLUSTER_BENCH_CONVERGE_SIZES=8 re-measures one size (its figures alone are written).
        wanted = [int(n) for n in os.environ.get("GPUCLUSTER_BENCH_CONVERGE_SIZES", "8,16").split(",")]
        sizes = [_size(n, Path(tmp)) for n in wanted]
    by_size = {s["nodes"]: s for s in sizes}
    noop8, noop16 = by_size.get(8, {}).get("noop_s"), by_size.get(16, {}).get("noop_s")
    clean = all(s.get("noop_changed") == 0 and not s.get("noop_failed_hosts") and "error" not in s for s in sizes)
    return {
        "target": (f"the lab example's shape: no-op converge of 8 nodes < {TARGET_NOOP_8_S:.0f} s, of 16 nodes "
                   f"<= {TARGET_16_OVER_8} x the 8-node one"),
        "met": bool(clean and noop8 is not None and noop8 < TARGET_NOOP_8_S and noop16 is not None
                    and noop16 <= TARGET_16_OVER_8 * noop8),
        "noop_16_over_8": round(noop16 / noop8, 2) if noop8 and noop16 else None,
        # Whether the 8-node no-op's own CPU, spread over every processor of this host, already
        # takes the target's time: then no scheduling meets it here, only less work per task.
        "target_below_cpu_floor_8": (by_size[8]["noop_cpu_floor_s"] >= TARGET_NOOP_8_S
                                     if "noop_cpu_floor_s" in by_size.get(8, {}) else None),
        # The same for 16 nodes against 1.5 x the 8-node no-op: 16 nodes run twice the host-tasks on
        # the same processors, so where the per-host work dominates no schedule meets the ratio here.
        "target_below_cpu_floor_16": (by_size[16]["noop_cpu_floor_s"] >= TARGET_16_OVER_8 * noop8
                                      if noop8 and "noop_cpu_floor_s" in by_size.get(16, {}) else None),
        "sizes": sizes,
        "before_controller_templating": BEFORE_CONTROLLER_TEMPLATING,
        "before_fast_paths": BEFORE_FAST_PATHS,
        "before_example_shape": BEFORE_EXAMPLE_SHAPE,
        "ansible_settings": SETTINGS,
        "before_files_module": BEFORE_FILES_MODULE,
        "before_stock_strategy": BEFORE_STOCK,
        "before_fewer_tasks": BEFORE_FEWER_TASKS,
        "before_ansible_core_2_21": BEFORE_ANSIBLE_CORE_2_21,
        "ansible_core": _ansible_core_version(),
        "host_load_avg_1m_at_start": round(load, 2),
        "host_load_avg_1m_at_end": round(os.getloadavg()[0], 2),
    }
