"""Cluster-wide fabric measurements, each run once per verify run and shared by the node checks.

The conformance tests run per node in parallel worker processes; an inter-node all-reduce,
the pair search and the RDMA pairs involve many nodes at once. Whichever worker needs one
first runs it under a lock in the run folder (one fabric benchmark at a time, so they do
not disturb each other's figures) and leaves its result as JSON; the others read that.
"""

from __future__ import annotations

import fcntl
import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpucluster.conformance import allreduce_mpi, ib_write_bw, nccl_tests, progress
from gpucluster.conformance.bandwidth import AllReduceRun, BandwidthVerdict, judge
from gpucluster.conformance.nodes import ClusterInventory, NodeInfo
from gpucluster.conformance.pairs import PairResult, PairSearch, find_slow, ring_pairs, rounds
from gpucluster.conformance.remote import Remote, RunKey, SshRemote
from gpucluster.hostkeys import HostKeyPolicy


@dataclass(frozen=True)
class FabricOptions:
    mpi_iters: int = 10
    mpi_budget_s: float = 2.0
    ib_seconds: int = 5


class _Grant:
    """The run key authorised on the nodes of one measurement; ``close`` takes it back."""

    def __init__(self, key: RunKey, remotes: list[Remote]) -> None:
        self.key = key
        self.remotes = remotes
        self.problems = [p for p in (key.grant(r) for r in remotes) if p]

    def close(self) -> None:
        for r in self.remotes:
            self.key.revoke(r)


class Fabric:
    """Measurements between nodes, with no inventory key on any node and no agent forwarding.

    mpirun's launcher (nccl-tests on GPUs, the MPI all-reduce on CPUs) logs in to the other nodes
    with the run's own key (:class:`RunKey`), authorised for one measurement only, and checks
    their host keys against the ones the controller recorded (``host_keys``).
    """

    def __init__(self, inv: ClusterInventory, run_dir: Path, ssh_config: Path, host_keys: HostKeyPolicy,
                 run_id: str, options: FabricOptions | None = None) -> None:
        self.inv = inv
        self.run_dir = run_dir
        self.ssh_config = ssh_config
        self.host_keys = host_keys
        self.run_id = run_id
        self.options = options or FabricOptions()
        self.cache_dir = run_dir / "fabric"
        self.log_dir = run_dir / "logs"

    # --- plumbing ------------------------------------------------------------------------

    def cached(self, key: str, compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        target = self.cache_dir / f"{key}.json"
        with open(self.cache_dir / "fabric.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                if target.exists():
                    data: dict[str, Any] = json.loads(target.read_text())
                    return data
                started = time.perf_counter()
                data = compute()
                data["wall_s"] = round(time.perf_counter() - started, 3)
                target.write_text(json.dumps(data, indent=2))
                return data
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _log(self, name: str, text: str) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        (self.log_dir / name).write_text(text, encoding="utf-8")

    def allreduce_log(self, label: str) -> str:
        """The run folder's log of one all-reduce (mpirun's whole output, its command first),
        relative to the run folder, as the checks name it."""
        safe = label.replace(":", "_").replace(",", "_").replace("+", "_")
        return f"{self.log_dir.name}/allreduce-{safe}.log"

    def remote(self, name: str) -> Remote:
        return SshRemote(name, self.ssh_config)

    def run_key(self) -> RunKey:
        # Called under the fabric lock (``cached``): one key per run, made once.
        return RunKey.ensure(self.run_dir / "ssh" / "run-key", self.run_id)

    def _grant(self, nodes: list[NodeInfo]) -> _Grant:
        return _Grant(self.run_key(), [self.remote(n.name) for n in nodes])

    def _place_key(self, launcher: NodeInfo) -> str | None:
        """The run key on the launcher, for mpirun's ssh to the other nodes; None when it could not be put."""
        return self.run_key().place(self.remote(launcher.name), self.host_keys.trusted_lines())

    def _remove_key(self, launcher: NodeInfo, path: str | None) -> None:
        self.run_key().remove(self.remote(launcher.name), path)

    # --- all-reduce ------------------------------------------------------------------------

    def allreduce_participants(self) -> list[NodeInfo]:
        """GPU-group nodes whose profile sets an inter-node floor."""
        return [n for n in self.inv.in_groups(("gpu",)) if n.floor("allreduce_inter_busbw_gbps") is not None]

    def large_bytes(self, nodes: list[NodeInfo]) -> int:
        return max(int(n.floor("large_message_bytes")) for n in nodes)

    def engine(self, nodes: list[NodeInfo]) -> str:
        return "nccl-tests" if nodes and all(n.gpu_count > 0 for n in nodes) else "mpi-cpu"

    def _allreduce(self, nodes: list[NodeInfo], label: str, sweep: bool = True) -> AllReduceRun:
        """One all-reduce over ``nodes``. ``sweep``: every size up to twice the large size (the
        plot's series); otherwise only the sizes the verdict reads (the pair runs)."""
        names = tuple(n.name for n in nodes)
        # mpirun starts its daemons over SSH on the management network (the firewall
        # admits SSH from there only); the traffic measured is pinned to the fabric CIDR.
        ips = [n.address for n in nodes]
        cidr = str(self.inv.fabric["fabric_cidr"])
        large = self.large_bytes(nodes)
        launcher = self.remote(nodes[0].name)
        nccl = self.engine(nodes) == "nccl-tests"
        if not nccl:
            problems = allreduce_mpi.ship_script([self.remote(n) for n in names])
            if problems:
                return AllReduceRun("mpi-cpu", label, names, 0, status="incomplete", notes=problems)
        budget = 600.0 if nccl else allreduce_mpi.MpiSettings(sizes=(large,)).timeout_s
        progress.note(f"all-reduce {label.replace(':', ' ', 1).replace('+', '/')} ({self.engine(nodes)}, sizes up to "
                      f"{_size(2 * large)})", budget_s=budget)
        key = self._place_key(nodes[0])
        try:
            if nccl:
                run, log = nccl_tests.run_inter(launcher, names, ips, nodes[0].gpu_count, cidr,
                                                self.inv.fabric.get("socket_ifname") or nodes[0].fabric_interface,
                                                2 * large, label, min_bytes=8 if sweep else large, ssh_key=key)
            else:
                sizes = allreduce_mpi.sizes_up_to(large) if sweep else (large, 2 * large)
                settings = allreduce_mpi.MpiSettings(sizes=sizes,
                                                     iters=self.options.mpi_iters, budget_s=self.options.mpi_budget_s,
                                                     ssh_key=key)
                run, log = allreduce_mpi.run_allreduce(launcher, names, ips, cidr, settings, label)
        finally:
            self._remove_key(nodes[0], key)
        # The command (first line of ``log``) stays in the log, never in a check's message.
        self._log(self.allreduce_log(label).split("/", 1)[1],
                  f"# launcher {nodes[0].name}; status {run.status}; notes: {'; '.join(run.notes) or 'none'}\n{log}")
        return run

    def inter_node(self) -> dict[str, Any]:
        """All participants in one ring all-reduce (nccl-tests under NCCL_ALGO=Ring, or MPI on CPUs)."""

        def compute() -> dict[str, Any]:
            nodes = self.allreduce_participants()
            if len(nodes) < 2:
                return {"skip": f"{len(nodes)} node(s) with an inter-node all-reduce floor: an inter-node "
                                "all-reduce needs two"}
            grant = self._grant(nodes)
            try:
                run = self._allreduce(nodes, "inter:" + ",".join(n.name for n in nodes))
            finally:
                grant.close()
            return {"run": run.to_json(), "engine": run.engine, "large_bytes": self.large_bytes(nodes),
                    "log": self.allreduce_log(run.label)}

        return self.cached("inter_node", compute)

    def pair_search(self) -> dict[str, Any]:
        def compute() -> dict[str, Any]:
            nodes = self.allreduce_participants()
            if len(nodes) < 2:
                return {"skip": f"{len(nodes)} node(s) with an inter-node floor: pairs need two"}
            by_name = {n.name: n for n in nodes}
            grant = self._grant(nodes)
            results: list[PairResult] = []
            runs: list[dict[str, Any]] = []
            try:
                for this_round in rounds(ring_pairs([n.name for n in nodes])):
                    def one(pair: tuple[str, str]) -> tuple[PairResult, AllReduceRun]:
                        a, b = by_name[pair[0]], by_name[pair[1]]
                        run = self._allreduce([a, b], f"pair:{a.name}+{b.name}", sweep=False)
                        floor = min(float(a.floor("allreduce_inter_busbw_gbps")),
                                    float(b.floor("allreduce_inter_busbw_gbps")))
                        v = judge(run, floor, self.large_bytes([a, b]))
                        return PairResult(a.name, b.name, v.ok, v.busbw_gbps, v.message), run

                    with ThreadPoolExecutor(max_workers=len(this_round)) as pool:
                        for pr, run in pool.map(one, this_round):
                            results.append(pr)
                            runs.append(run.to_json())
            finally:
                grant.close()
            search = find_slow([n.name for n in nodes], results)
            return {"search": search.to_json(), "runs": runs,
                    "logs": {r["label"]: self.allreduce_log(r["label"]) for r in runs}}

        return self.cached("pair_search", compute)

    # --- RDMA ------------------------------------------------------------------------------

    def rdma(self) -> dict[str, Any]:
        """ib_write_bw on ring pairs of HCA nodes, HCA i of one node to HCA i of the other."""

        def compute() -> dict[str, Any]:
            nodes = [n for n in self.inv.in_groups(("gpu",)) if n.hca_count > 0
                     and n.floor("ib_write_bw_gbps") is not None]
            if len(nodes) < 2:
                return {"skip": f"{len(nodes)} node(s) with HCAs and an ib_write_bw floor: a pair needs two"}
            by_name = {n.name: n for n in nodes}
            hcas = {n.name: ib_write_bw.list_hcas(self.remote(n.name)) for n in nodes}
            results: list[PairResult] = []
            detail: list[dict[str, Any]] = []
            for this_round in rounds(ring_pairs([n.name for n in nodes])):
                for a_name, b_name in this_round:
                    a, b = by_name[a_name], by_name[b_name]
                    floor = min(float(a.floor("ib_write_bw_gbps")), float(b.floor("ib_write_bw_gbps")))
                    per_hca = []
                    for i in range(min(len(hcas[a_name]), len(hcas[b_name]))):
                        progress.note(f"ib_write_bw {a_name}/{b_name} on {hcas[a_name][i]}",
                                      budget_s=self.options.ib_seconds + 60)
                        parsed = ib_write_bw.run_pair(self.remote(b_name), self.remote(a_name), str(b.fabric_ip),
                                                      hcas[a_name][i], hcas[b_name][i], self.options.ib_seconds)
                        per_hca.append(parsed)
                    bws = [p.get("peak_gbps") for p in per_hca]
                    ok = bool(per_hca) and all(isinstance(x, int | float) and x >= floor for x in bws)
                    low = min((x for x in bws if isinstance(x, int | float)), default=None)
                    msg = (f"{a_name}->{b_name}: " + ", ".join(
                        f"{p['device']} {p.get('peak_gbps')} Gb/s" for p in per_hca) + f" (floor {floor:g})"
                           if per_hca else f"{a_name}->{b_name}: no HCA pairs")
                    results.append(PairResult(a_name, b_name, ok, low, msg))
                    detail.append({"a": a_name, "b": b_name, "floor_gbps": floor, "hcas": per_hca})
            search = find_slow([n.name for n in nodes], results)
            return {"search": search.to_json(), "detail": detail, "hcas": hcas}

        return self.cached("rdma", compute)


# --- root causes -----------------------------------------------------------------------------


def fault_key(search: PairSearch, node: str) -> str:
    """The root cause a failing fabric check on ``node`` shares with the other checks it affected
    (the all-node all-reduce, the pair runs, the RDMA pairs), as the reports group failures:

    ``fabric-slow-node:N``: N is the node the pair search names slow (its link, NIC or cable);
    ``fabric-link:A+B``: the pair A, B fails while both pass with other nodes (the path between them);
    ``fabric-ring``: the pairs single out nothing (two nodes, or every pair under the floor).
    """
    if node in search.slow:
        return f"fabric-slow-node:{node}"
    failing = [r for r in search.results if not r.ok and r.a not in search.slow and r.b not in search.slow]
    good = {n for r in search.results if r.ok for n in (r.a, r.b)}
    links = sorted("+".join(sorted((r.a, r.b))) for r in failing if r.a in good and r.b in good)
    mine = [link for link in links if node in link.split("+")]
    if mine or links:
        return f"fabric-link:{(mine or links)[0]}"
    if search.slow:
        return f"fabric-slow-node:{','.join(search.slow)}"
    return "fabric-ring"


# Why a node's pair runs fail it, by its status in the pair search (its figures come beside).
PAIR_STATUS_REASON = {
    "slow": "every pair with this node is under the floor while its peers pass with other nodes",
    "suspect": "the pair is under the floor though both nodes pass with other nodes: the link between them, "
               "or a transient",
    "undetermined": "no pair of this node reached the floor and no peer is proven good, so no node or link can "
                    "be singled out",
}


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or n % 1024:
            return f"{n} {unit}"
        n //= 1024
    return f"{n} TiB"


def verdict_sentence(what: str, run: AllReduceRun, v: BandwidthVerdict, large_bytes: int) -> str:
    """A check's message on an all-reduce: what ran, the figure against the floor, or why there is
    none. The command and mpirun's output are in the run's log, never here."""
    size = _size(large_bytes)
    notes = "; ".join(run.notes)
    if run.status == "incomplete" or not run.points:
        return f"{what} did not complete ({notes or 'no message size measured'})"
    wrong = sum(p.wrong or 0 for p in run.points)
    if wrong or run.status == "failed":
        return f"{what} returned {wrong} wrong result(s)" + (f" ({notes})" if notes else "")
    if v.busbw_gbps is None:
        return f"{what} measured no message size of {size} or more; floor {v.floor_gbps:g} GB/s"
    relation = "<" if v.busbw_gbps < v.floor_gbps else ">="
    return f"{what}: busbw {v.busbw_gbps:.3g} GB/s at >= {size} {relation} floor {v.floor_gbps:g} GB/s"
