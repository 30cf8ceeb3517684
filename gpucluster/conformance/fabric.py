"""Cluster-wide fabric measurements, each run once per verify run and shared by the node checks.

The conformance tests run per node in parallel worker processes; an inter-node all-reduce,
the pair search and the RDMA pairs involve many nodes at once. Whichever worker needs one
first runs it under a lock in the run folder (one fabric benchmark at a time, so they do
not disturb each other's figures) and leaves its result as JSON; the others read that.

Every measurement is bounded by a time budget that a link at the floor meets with room to spare
(:func:`gpucluster.conformance.bandwidth.budget_s`): a slow link ends in a verdict (slow, at the
size it reached) instead of holding the run. Each carries a tag of its own on every node it
reaches, and when it ends, whatever of it is left on any node (mpirun's remote daemons and
ranks, ib_write_bw's server) is killed by that tag (:func:`~gpucluster.conformance.remote.kill_measurement`).
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from shlex import quote
from typing import Any

from gpucluster.conformance import allreduce_mpi, progress, run_ib_write_bw, run_nccl_tests
from gpucluster.conformance.bandwidth import AllReduceRun, BandwidthVerdict, budget_s, judge
from gpucluster.conformance.nodes import ClusterInventory, NodeInfo, nccl_tests_split
from gpucluster.conformance.pairs import PairResult, PairSearch, find_slow, rail_search, ring_pairs, rounds
from gpucluster.conformance.provider_ports import provider_address
from gpucluster.conformance.rdma_checks import IB_COUNTER_DUMP, compute_hcas
from gpucluster.conformance.remote import (
    Remote,
    RunKey,
    SshRemote,
    TaggedRemote,
    kill_measurement,
    make_folders,
    new_measurement_tag,
    node_folder_path,
    remove_folder_script,
    remove_folders,
    revoke_script,
)
from gpucluster.hostkeys import HostKeyPolicy
from gpucluster.render.nccl import gid_index
from gpucluster.render.platform import provider_cidrs, provider_ports
from gpucluster.runs import write_private

# The fabric cache key of GC-IB-002's "before" reading (Fabric.counter_baseline).
COUNTER_BASELINE_KEY = "ib-counters-before"
# Every rail ping of a verify run ends within this, wherever a peer does not answer (ping -W 1, 2 tries).
RAIL_PING_TIMEOUT_S = 20.0


def rail_ping_command(interface: str, peer: str, mtu: int, tag: str) -> str:
    """One background ping from ``interface`` to ``peer`` with the fabric MTU's full frame and
    don't-fragment set (IPv4 and ICMP headers are 28 bytes); prints ``<tag> <exit code>``.
    Two tries a fifth of a second apart, one second's wait: a lost rail costs at most ~2 s."""
    return (f"(ping -n -q -M do -s {mtu - 28} -c 2 -i 0.2 -W 1 -I {quote(interface)} {quote(peer)} "
            f">/dev/null 2>&1; echo \"{tag} $?\") &")


# Up to this many nodes every node pings every peer on each rail; past it, its ring neighbours only
# (n² pings at fleet scale would take longer than the measurements they guard).
RAIL_PING_ALL_MAX = 32


def rail_name(nodes: list[NodeInfo], i: int) -> str:
    """What rail position ``i`` is called in a report: its interface name where every node that has
    it names it alike, else ``rail<i>`` (each node's own interface is in the pair's message)."""
    names = {n.rails[i].interface for n in nodes if i < len(n.rails)}
    return names.pop() if len(names) == 1 else f"rail{i}"


def rail_netdev(node: NodeInfo, rails: Sequence[str], rail: str) -> str:
    """``node``'s own interface on ``rail``, one of a measurement's ``rails``: its rail names in rail
    order (a name's place is the rail's index; the name is the interface every node shares, the
    first node's, or ``rail<i>``). The name itself where the node lists no such rail."""
    names = list(rails)
    i = names.index(rail) if rail in names else -1
    return node.rails[i].interface if 0 <= i < len(node.rails) else rail


def interface_on(links: Sequence[Mapping[str, Any]], cidrs: str) -> str | None:
    """The first interface of ``links`` (``ip -j addr show``) with an IPv4 address inside one of
    ``cidrs`` (comma-separated subnets), or None."""
    nets = [ipaddress.IPv4Network(c.strip()) for c in cidrs.split(",") if c.strip()]
    for link in links:
        for addr in link.get("addr_info") or []:
            if addr.get("family") == "inet" and addr.get("local") and \
                    any(ipaddress.IPv4Address(str(addr["local"])) in net for net in nets):
                return str(link.get("ifname"))
    return None


def unaddressed_ports(links: Sequence[Mapping[str, Any]], ports: str, cidrs: str) -> list[str]:
    """The ports of ``ports`` (comma-separated names) that ``links`` (``ip -j addr show``) shows
    without an IPv4 address inside ``cidrs`` (comma-separated subnets, the provider's ranges, as
    GC-NET-001 judges them: provider_ports.provider_address), or does not show at all."""
    by_name = {str(link.get("ifname")): link for link in links}
    ranges = [c.strip() for c in cidrs.split(",") if c.strip()]
    return [p for p in ports.split(",") if p and (p not in by_name or provider_address(by_name[p], ranges) is None)]


def rail_ping_pairs(names: list[str]) -> list[tuple[str, str]]:
    """The node pairs the rail pings cover: every pair of a small cluster, else the ring's."""
    if len(names) <= RAIL_PING_ALL_MAX:
        return [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    return ring_pairs(names)


def parse_rail_pings(text: str) -> dict[str, bool]:
    """``<rail index> <peer> <exit code>`` lines to ``{"<rail index> <peer>": reached}``; ping's
    exit code 0 is a reply received. A line missing (the node unreachable, the run cut) is absent."""
    out: dict[str, bool] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0].isdigit() and parts[2].isdigit():
            out[f"{parts[0]} {parts[1]}"] = parts[2] == "0"
    return out


# nccl-tests' iterations per size (perf_args: -w 5 -n 20) and what NCCL takes to set up its
# communicator across nodes before the first size, which the floor says nothing about.
NCCL_ITERATIONS = 25
# A run key grant outlives the measurement's budget by this much: the grants and the key's
# placing on the launcher take place before the budget's clock starts.
GRANT_SLACK_S = 30.0
NCCL_LAUNCH_S = 120.0


@dataclass(frozen=True)
class FabricOptions:
    mpi_iters: int = 10
    mpi_budget_s: float = 2.0
    ib_seconds: int = 5
    # Every all-reduce's whole time budget; None: from the floor (bandwidth.budget_s), which a
    # link at the floor meets with ``budget_margin`` to spare.
    budget_s: float | None = None
    budget_margin: float = 2.0


def verdict_size(node: NodeInfo, scope: str) -> int:
    """The message size the all-reduce verdict reads from (``scope``: "inter" or "intra"), where
    the bus saturates: the intra-node one is the GPUs' (the profile's), the inter-node one the
    network's (the platform's). A floor without its size is an error naming the file to fix."""
    value = node.floor(f"allreduce_{scope}_verdict_bytes")
    if value is None:
        where = (f"gpucluster/data/profiles/{node.profile_name}.yaml" if scope == "intra"
                 else f"gpucluster/data/platforms/{node.platform_name}.yaml")
        raise ValueError(f"{where}: floors.allreduce_{scope}_verdict_bytes is not set, but node {node.name} "
                         f"is judged against floors.allreduce_{scope}_busbw_gbps; set the message size "
                         "the bus saturates at")
    return int(value)


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

    def cached(self, key: str, compute: Callable[[], dict[str, Any]], hold: Sequence[str] = ()) -> dict[str, Any]:
        """``compute()``'s result for ``key``, made once per run: one measurement between nodes at a
        time (the fabric lock). ``hold``: nodes whose GPUs it loads, held first (gpus_held) so that no
        burn, DCGM or host-copy check runs on them meanwhile. Lock order, everywhere: GPU locks (by
        name), then the fabric lock; nothing waits for a GPU while holding the fabric."""
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        target = self.cache_dir / f"{key}.json"
        if target.exists():  # written whole (os.replace): readable without the locks
            done: dict[str, Any] = json.loads(target.read_text())
            return done
        with self.gpus_held(list(hold)), open(self.cache_dir / "fabric.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                if target.exists():
                    data: dict[str, Any] = json.loads(target.read_text())
                    return data
                if key != COUNTER_BASELINE_KEY:
                    # The first measurement between nodes of the session reads every HCA node's
                    # counters before it moves traffic: GC-IB-002's "before", whichever worker gets here.
                    self._write_counter_baseline()
                started = time.perf_counter()
                data = compute()
                data["wall_s"] = round(time.perf_counter() - started, 3)
                write_private(target, json.dumps(data, indent=2))
                return data
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _write_counter_baseline(self) -> None:
        """Under the fabric lock: every HCA node's port error counters, read once per session."""
        target = self.cache_dir / f"{COUNTER_BASELINE_KEY}.json"
        nodes = [n for n in self.inv.nodes if n.hca_count > 0]
        if target.exists() or not nodes:
            return
        with ThreadPoolExecutor(max_workers=min(16, len(nodes))) as pool:
            read = dict(pool.map(lambda n: (n.name, self.remote(n.name).run(IB_COUNTER_DUMP, timeout=60).stdout),
                                 nodes))
        write_private(target, json.dumps({"nodes": read, "taken": time.time()}, indent=2))

    def counter_baseline(self, node: str) -> str | None:
        """``node``'s HCA port counters as read before the session's first measurement between
        nodes (sysfs lines), or None when no such measurement ran (it is read then, or never)."""
        target = self.cache_dir / f"{COUNTER_BASELINE_KEY}.json"
        if not target.exists():
            return None
        dumps: dict[str, str] = json.loads(target.read_text()).get("nodes", {})
        return dumps.get(node)

    @contextlib.contextmanager
    def gpus_held(self, names: list[str]) -> Iterator[None]:
        """Hold the GPUs of ``names`` (a lock per node in the run folder, taken in name order): a
        check that loads a node's GPUs (burn, DCGM diagnostics, host copies) and GPUDirect RDMA,
        which loads a peer's GPUs from another worker, never run on the same GPUs at once, so a
        figure is never another check's load read as the node's fault."""
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        with contextlib.ExitStack() as stack:
            for name in sorted(set(names)):
                lock = stack.enter_context(open(self.cache_dir / f"gpus-{name}.lock", "w"))
                fcntl.flock(lock, fcntl.LOCK_EX)
                stack.callback(fcntl.flock, lock, fcntl.LOCK_UN)
            yield

    def _log(self, name: str, text: str) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        (self.log_dir / name).write_text(text, encoding="utf-8")

    def allreduce_log(self, label: str) -> str:
        """The run folder's log of one all-reduce (mpirun's whole output, its command first),
        relative to the run folder, as the checks name it."""
        safe = label.replace(":", "_").replace(",", "_").replace("+", "_").replace("@", "_")
        return f"{self.log_dir.name}/allreduce-{safe}.log"

    def remote(self, name: str) -> Remote:
        return SshRemote(name, self.ssh_config)

    def run_key(self, measurement: str) -> RunKey:
        """The key of one measurement, made in the run folder (each measurement has its own)."""
        return RunKey.ensure(self.run_dir / "ssh" / "run-key", self.run_id, measurement)

    def _grant(self, nodes: list[NodeInfo], key: RunKey, budget: float) -> list[str]:
        """The measurement's key authorised on the nodes mpirun's launcher (``nodes[0]``) logs in
        to, from its management address, for the budget (and the grants' own time), nodes at
        once; problems. The launcher itself needs none: its daemon is mpirun's own."""
        source = nodes[0].management_ip or nodes[0].address
        peers = nodes[1:]
        if not peers:
            return []
        with ThreadPoolExecutor(max_workers=min(16, len(peers))) as pool:
            found = pool.map(lambda n: key.grant(self.remote(n.name), source, budget + GRANT_SLACK_S), peers)
        return [p for p in found if p]

    def _end(self, nodes: list[NodeInfo], tag: str,
             folder: str | None = None) -> tuple[dict[str, int | str], list[str]]:
        """Kill what is left of the measurement on every node, take its key back and remove its
        private ``folder``, one command per node; (node -> processes killed, or why not), and a
        note when any was."""
        extra = revoke_script(self.run_id, tag) + (f"; {remove_folder_script(folder)}" if folder else "")
        kills = kill_measurement([self.remote(n.name) for n in nodes], tag, extra=extra)
        left = [f"{n} {k}" for n, k in kills.items() if k != 0]
        return kills, [f"processes of the run killed on its nodes: {', '.join(left)}"] if left else []

    def _place_key(self, launcher: NodeInfo, key: RunKey) -> str | None:
        """The measurement's key on the launcher, for mpirun's ssh to the other nodes; None when it could not be put."""
        return key.place(self.remote(launcher.name), self.host_keys.trusted_lines())

    def _remove_key(self, launcher: NodeInfo, key: RunKey, path: str | None) -> None:
        key.remove(self.remote(launcher.name), path)
        key.delete_local()

    # --- all-reduce ------------------------------------------------------------------------

    @staticmethod
    def _gpu_names(nodes: list[NodeInfo]) -> list[str]:
        return [n.name for n in nodes if n.gpu_count > 0]

    def verdict_bytes(self, nodes: list[NodeInfo]) -> int:
        return max(verdict_size(n, "inter") for n in nodes)

    def engine(self, nodes: list[NodeInfo]) -> str:
        return "nccl-tests" if nodes and all(n.gpu_count > 0 for n in nodes) else "mpi-cpu"

    def budget(self, nodes: list[NodeInfo], sizes: tuple[int, ...],
               floor_key: str = "allreduce_inter_busbw_gbps") -> float:
        """The measurement's whole time budget (the option, or from the lowest floor of its nodes)."""
        if self.options.budget_s is not None:
            return self.options.budget_s
        floor = min(float(n.floor(floor_key)) for n in nodes)
        if self.engine(nodes) == "nccl-tests":
            ranks = len(nodes) * max(1, nodes[0].gpu_count)
            return budget_s(sizes, ranks, floor, NCCL_ITERATIONS, NCCL_LAUNCH_S, self.options.budget_margin)
        # The node script's fewest iterations per size: warmup, the probe, one timed.
        return budget_s(sizes, len(nodes), floor, allreduce_mpi.MpiSettings(sizes).warmup + 2,
                        allreduce_mpi.LAUNCH_S, self.options.budget_margin)

    def control_cidr(self, nodes: list[NodeInfo]) -> str:
        """The subnet mpirun's own traffic (and, without rails, the measured TCP data) goes over:
        the fabric's where every node has a fabric address, else the management network's. EFA
        interfaces carry no IP (AWS: fabric_ip is None), and NCCL reaches them through libfabric,
        not through an address, so on EFA nothing may wait for an address the fabric lacks."""
        if all(n.fabric_ip for n in nodes):
            return self.inv.fabric.fabric_cidr
        return self.inv.fabric.management_cidr

    def rail_indexes(self, nodes: list[NodeInfo]) -> list[int]:
        """The rail positions every one of ``nodes`` has an address on (the inventory's rails)."""
        return list(range(min((len(n.rails) for n in nodes), default=0)))

    def data_cidrs(self, nodes: list[NodeInfo], rail: int | None = None) -> str | None:
        """The subnets an all-reduce's data goes over: rail ``rail``'s alone, or (None) every rail
        the nodes share; None where they have no addressed rails (the fabric CIDR then)."""
        shared = self.rail_indexes(nodes)
        if not shared:
            return None
        chosen = shared if rail is None else [rail]
        return ",".join(dict.fromkeys(nodes[0].rails[i].cidr for i in chosen))

    def provider_port_names(self, nodes: list[NodeInfo]) -> str:
        """Where the nodes share no addressed rail, the compute ports the provider addresses (OCI's
        rdma0-rdma15) that every one of their platforms names, in the first node's rail order, by
        name (comma-separated, as btl_tcp_if_include takes them); else ""."""
        if not nodes or self.rail_indexes(nodes):
            return ""
        others = [provider_ports(n.platform) for n in nodes[1:]]
        return ",".join(d for d, cidrs in provider_ports(nodes[0].platform)
                        if all((d, cidrs) in other for other in others))

    def data_ports(self, nodes: list[NodeInfo], rail: int | None = None) -> str | None:
        """What an MPI all-reduce's TCP data is pinned to (btl_tcp_if_include): the subnets of the
        addressed rails (data_cidrs: rail ``rail``'s alone, which must be one every node has);
        where the provider addresses the compute ports instead, those ports by name (Open MPI takes
        one interface per subnet it is given, the first that matches, so a provider's one range for
        every port would pin it to one port); else None (the control network then)."""
        if rail is not None:
            if rail not in self.rail_indexes(nodes):
                raise ValueError(f"rail {rail}: not a compute rail every one of "
                                 f"{', '.join(n.name for n in nodes)} has an address on")
            return self.data_cidrs(nodes, rail)
        return self.data_cidrs(nodes) or self.provider_port_names(nodes) or None

    def data_networks(self, nodes: list[NodeInfo]) -> str:
        """The subnets (comma-separated) an all-reduce over all of ``nodes``' fabric runs on: MPI's
        data over every addressed rail the nodes share, or over the ports the provider addresses
        (their ranges, then: provider_port_names names the ports), else the control network
        (control_cidr), where MPI's TCP data and NCCL's own connections go (NCCL's IB or EFA data
        goes over the HCAs, which have no interface of their own to name)."""
        if self.engine(nodes) != "nccl-tests":
            ranges = provider_cidrs(nodes[0].platform) if self.provider_port_names(nodes) else []
            return self.data_cidrs(nodes) or ",".join(ranges) or self.control_cidr(nodes)
        return self.control_cidr(nodes)

    def _allreduce(self, nodes: list[NodeInfo], label: str, sweep: bool = True, rail: int | None = None,
                   floor_key: str = "allreduce_inter_busbw_gbps") -> AllReduceRun:
        """One all-reduce over ``nodes``. ``sweep``: every size up to twice the verdict size (the
        plot's series); otherwise a short ramp to the sizes the verdict reads (the pair runs).
        ``rail``: over that compute rail alone (its budget from ``floor_key``), else over all."""
        names = tuple(n.name for n in nodes)
        # mpirun starts its daemons over SSH on the management network (the firewall
        # admits SSH from there only); the traffic measured is pinned to the fabric CIDR.
        ips = [n.management_ip or n.address for n in nodes]
        cidr = self.control_cidr(nodes)
        verdict = self.verdict_bytes(nodes)
        nccl = self.engine(nodes) == "nccl-tests"
        # One mpirun names one binary for every rank: nodes with nccl-tests in different folders are
        # refused before verify starts (ClusterInventory.inter_node_problems), and never run from
        # the first node's folder here.
        split = nccl_tests_split(nodes) if nccl else None
        if split:
            return AllReduceRun(self.engine(nodes), label, names, 0, status="incomplete", notes=[split])
        # The measurement's files (the MPI script, nccl-tests' JSON) on its nodes: a private folder
        # at one path on every node, removed with the measurement's other remains in _end.
        folder = node_folder_path(self.run_id)
        remotes = [self.remote(n) for n in names]
        if nccl:
            first = 8 if sweep else verdict
            sizes = tuple(first << i for i in range((2 * verdict // first).bit_length()) if first << i <= 2 * verdict)
            unshipped = make_folders(remotes, folder)
        else:
            sizes = allreduce_mpi.sizes_up_to(verdict) if sweep else allreduce_mpi.ramp_to(verdict)
            unshipped = allreduce_mpi.ship_script(remotes, folder)
        if unshipped:
            remove_folders(remotes, folder)
            return AllReduceRun(self.engine(nodes), label, names, 0, status="incomplete", notes=unshipped)
        budget = self.budget(nodes, sizes, floor_key)
        progress.note(f"all-reduce {label.replace(':', ' ', 1).replace('+', '/').replace('@', ' on ')} "
                      f"({self.engine(nodes)}, sizes up to {_size(2 * verdict)})", budget_s=budget)
        tag = new_measurement_tag()
        launcher = TaggedRemote(self.remote(nodes[0].name), tag)
        problems: list[str] = []
        key: str | None = None
        run_key = self.run_key(tag)
        try:
            # Inside the try: whatever happens once the first node holds a grant, the finally
            # below takes it back from every node.
            problems = self._grant(nodes, run_key, budget)
            key = self._place_key(nodes[0], run_key)
            if nccl:
                # No NCCL setting of the node's own: the run reads its deployed /etc/nccl.conf.
                run, log = run_nccl_tests.run_inter(launcher, names, ips, nodes[0].gpu_count, cidr, 2 * verdict,
                                                label, nodes[0].contract.nccl_tests_bin_dir, min_bytes=sizes[0],
                                                ssh_key=key, timeout_s=budget, folder=folder)
            else:
                settings = allreduce_mpi.MpiSettings(sizes=sizes, iters=self.options.mpi_iters,
                                                     budget_s=self.options.mpi_budget_s, timeout_s=budget,
                                                     ssh_key=key, folder=folder)
                run, log = allreduce_mpi.run_allreduce(launcher, names, ips, cidr, settings, label,
                                                       self.data_ports(nodes, rail))
        finally:
            self._remove_key(nodes[0], run_key, key)
            _, killed = self._end(nodes, tag, folder)
        run.budget_s = budget
        if launcher.timed_out and run.status == "incomplete":
            run.status = "cut"
        run.notes += problems + killed
        # The command (first line of ``log``) stays in the log, never in a check's message.
        self._log(self.allreduce_log(label).split("/", 1)[1],
                  f"# launcher {nodes[0].name}; status {run.status}; budget {budget:.1f} s; "
                  f"notes: {'; '.join(run.notes) or 'none'}\n{log}")
        return run

    def inter_node(self) -> dict[str, Any]:
        """All participants in one ring all-reduce (nccl-tests under NCCL_ALGO=Ring, or MPI on CPUs)."""

        def compute() -> dict[str, Any]:
            nodes = self.inv.allreduce_participants()
            if len(nodes) < 2:
                return {"skip": f"{len(nodes)} node(s) with an inter-node all-reduce floor: an inter-node "
                                "all-reduce needs two"}
            run = self._allreduce(nodes, "inter:" + ",".join(n.name for n in nodes))
            verdict = self.verdict_bytes(nodes)
            # "large_bytes": the name readers of earlier run folders know the verdict size by.
            return {"run": run.to_json(), "engine": run.engine, "verdict_bytes": verdict, "large_bytes": verdict,
                    "log": self.allreduce_log(run.label)}

        return self.cached("inter_node", compute, hold=self._gpu_names(self.inv.allreduce_participants()))

    def pair_search(self) -> dict[str, Any]:
        """Every ring pair's all-reduce: over each compute rail alone where every participant has
        addressed rails and a per-rail floor (the search then names the rail as well as the node),
        else over all of the fabric at once."""

        def compute() -> dict[str, Any]:
            nodes = self.inv.allreduce_participants()
            if len(nodes) < 2:
                return {"skip": f"{len(nodes)} node(s) with an inter-node floor: pairs need two"}
            by_name = {n.name: n for n in nodes}
            per_rail = [i for i in self.rail_indexes(nodes)
                        if all(n.floor("allreduce_rail_busbw_gbps") is not None for n in nodes)]
            floor_key = "allreduce_rail_busbw_gbps" if per_rail else "allreduce_inter_busbw_gbps"
            results: dict[str, list[PairResult]] = {}
            runs: list[dict[str, Any]] = []
            chosen: list[int | None] = list(per_rail) or [None]
            for rail in chosen:
                rail_name = nodes[0].rails[rail].interface if rail is not None else ""
                for this_round in rounds(ring_pairs([n.name for n in nodes])):
                    def one(pair: tuple[str, str], rail: int | None = rail,
                            rail_name: str = rail_name) -> tuple[PairResult, AllReduceRun]:
                        a, b = by_name[pair[0]], by_name[pair[1]]
                        label = f"pair:{a.name}+{b.name}" + (f"@{rail_name}" if rail_name else "")
                        run = self._allreduce([a, b], label, sweep=False, rail=rail, floor_key=floor_key)
                        floor = min(float(a.floor(floor_key)), float(b.floor(floor_key)))
                        v = judge(run, floor, self.verdict_bytes([a, b]))
                        return PairResult(a.name, b.name, v.ok, v.busbw_gbps, v.message, v.reached_bytes), run

                    with ThreadPoolExecutor(max_workers=len(this_round)) as pool:
                        for pr, run in pool.map(one, this_round):
                            results.setdefault(rail_name, []).append(pr)
                            runs.append(run.to_json())
            names = [n.name for n in nodes]
            if per_rail:
                search, per = rail_search(names, results)
                rails = {rail: s.to_json() for rail, s in per.items()}
            else:
                search, rails = find_slow(names, results[""]), {}
            # "networks": where the pairs ran over all of the fabric at once, the subnets they ran on
            # (GC-AR-003 names the node's interface there); rail by rail, "rails" names them.
            # "ports": where they ran over the ports the provider addresses, by name, those ports
            # (GC-AR-003 then names those of the node without an address in the provider's ranges).
            over_ports = not per_rail and self.engine(nodes) != "nccl-tests"
            return {"search": search.to_json(), "rails": rails, "floor_key": floor_key, "runs": runs,
                    "networks": "" if per_rail else self.data_networks(nodes),
                    "ports": self.provider_port_names(nodes) if over_ports else "",
                    "verdict_bytes": self.verdict_bytes(nodes),
                    "logs": {r["label"]: self.allreduce_log(r["label"]) for r in runs}}

        return self.cached("pair_search", compute, hold=self._gpu_names(self.inv.allreduce_participants()))

    # --- compute rails ---------------------------------------------------------------------

    def rail_reachability(self) -> dict[str, Any]:
        """A do-not-fragment ping at the fabric MTU from every node to every peer on each compute
        rail the nodes share, all nodes at once; per rail, a pair passes only when both ends
        reach each other, and the pair search names the node (or the pair) a failure is on."""

        def compute() -> dict[str, Any]:
            nodes = [n for n in self.inv.in_groups(("gpu",)) if n.rails]
            if len(nodes) < 2:
                return {"skip": f"{len(nodes)} node(s) with addressed compute rails: a rail needs two"}
            mtu = self.inv.fabric.mtu
            # Every rail position any node has: a node that lacks one its peers have fails on it
            # (a rail the smallest node lacks is not left out of the check).
            indexes = list(range(max(len(n.rails) for n in nodes)))
            progress.note(f"ping at MTU {mtu} on {len(indexes)} rail(s) between {len(nodes)} nodes",
                          budget_s=RAIL_PING_TIMEOUT_S)

            pairs = rail_ping_pairs([n.name for n in nodes])
            by_name = {n.name: n for n in nodes}

            def from_node(n: NodeInfo) -> tuple[str, dict[str, bool]]:
                peers = [by_name[b if a == n.name else a] for a, b in pairs if n.name in (a, b)]
                lines = [rail_ping_command(n.rails[i].interface, peer.rails[i].address, mtu, f"{i} {peer.name}")
                         for i in indexes for peer in peers if i < len(n.rails) and i < len(peer.rails)]
                script = "\n".join(lines) + "\nwait\n"
                res = self.remote(n.name).run(script, timeout=RAIL_PING_TIMEOUT_S)
                return n.name, parse_rail_pings(res.stdout)

            with ThreadPoolExecutor(max_workers=min(16, len(nodes))) as pool:
                seen = dict(pool.map(from_node, nodes))
            per_rail: dict[str, list[PairResult]] = {}
            for i in indexes:
                rail = rail_name(nodes, i)
                for a_name, b_name in pairs:
                    a, b = by_name[a_name], by_name[b_name]
                    lacking = [x for x in (a, b) if i >= len(x.rails)]
                    if lacking:
                        msg = "; ".join(f"{x.name} has no rail {i} (its inventory lists {len(x.rails)})"
                                        for x in lacking)
                        per_rail.setdefault(rail, []).append(PairResult(a_name, b_name, False, None, msg))
                        continue
                    there = seen[a_name].get(f"{i} {b_name}", False)
                    back = seen[b_name].get(f"{i} {a_name}", False)
                    msg = (f"{a_name} {a.rails[i].interface} -> {b_name} {'ok' if there else 'lost'}, "
                           f"{b_name} {b.rails[i].interface} -> {a_name} {'ok' if back else 'lost'}")
                    per_rail.setdefault(rail, []).append(PairResult(a_name, b_name, there and back, None, msg))
            search, per = rail_search([n.name for n in nodes], per_rail)
            return {"mtu": mtu, "search": search.to_json(), "rails": {k: v.to_json() for k, v in per.items()}}

        return self.cached("rail_reachability", compute)

    # --- RDMA ------------------------------------------------------------------------------

    def rdma(self) -> dict[str, Any]:
        """ib_write_bw on ring pairs of HCA nodes, HCA i of one node to HCA i of the other."""

        def compute() -> dict[str, Any]:
            nodes = [n for n in self.inv.in_groups(("gpu",)) if n.hca_count > 0
                     and n.floor("rdma_write_bw_gbps") is not None]
            if len(nodes) < 2:
                return {"skip": f"{len(nodes)} node(s) with HCAs and an ib_write_bw floor: a pair needs two"}
            by_name = {n.name: n for n in nodes}
            # The compute rails' devices only: a DGX's storage ports are on another network.
            hcas = {n.name: compute_hcas(n.platform, run_ib_write_bw.list_hcas(self.remote(n.name))) for n in nodes}
            results: list[PairResult] = []
            detail: list[dict[str, Any]] = []
            for this_round in rounds(ring_pairs([n.name for n in nodes])):
                for a_name, b_name in this_round:
                    a, b = by_name[a_name], by_name[b_name]
                    floor = min(float(a.floor("rdma_write_bw_gbps")), float(b.floor("rdma_write_bw_gbps")))
                    per_hca = []
                    for i in range(min(len(hcas[a_name]), len(hcas[b_name]))):
                        progress.note(f"ib_write_bw {a_name}/{b_name} on {hcas[a_name][i]}",
                                      budget_s=self.options.ib_seconds + 60)
                        # Server and client carry one tag: whichever outlives the other is killed after.
                        tag = new_measurement_tag()
                        # perftest exchanges its connection data over TCP: the fabric address, else
                        # (no address on the fabric) the management one.
                        parsed = run_ib_write_bw.run_pair(TaggedRemote(self.remote(b_name), tag),
                                                      TaggedRemote(self.remote(a_name), tag),
                                                      str(b.fabric_ip or b.address),
                                                      hcas[a_name][i], hcas[b_name][i], self.options.ib_seconds,
                                                      gid_index(self.inv.fabric, a.platform))
                        kills = kill_measurement([self.remote(x) for x in (a_name, b_name)], tag)
                        parsed["killed_after"] = {k: v for k, v in kills.items() if v != 0}
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
    ``fabric-pair:A+B``: the pair of two nodes with no other peer is slow (nothing tells which side);
    ``fabric-ring``: the pairs single out nothing (every pair under the floor).
    """
    if node in search.slow:
        return f"fabric-slow-node:{node}"
    mine_status = search.nodes.get(node)
    if mine_status is not None and mine_status.status == "pair_slow":
        peers = sorted({node, *(p["peer"] for p in mine_status.pairs if not p["ok"])})
        return f"fabric-pair:{'+'.join(peers)}"
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
    "pair_slow": "the pair is under the floor and, with two nodes, nothing tells which side is slow: both are "
                 "marked, neither is blamed",
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
    wrong = sum(p.wrong or 0 for p in run.points)
    if run.status == "cut" and not wrong:
        budget = f"{run.budget_s:.0f} s" if run.budget_s else "its time"
        if v.reached_bytes is None:
            return (f"{what}: slow: no size finished within its budget of {budget}; floor {v.floor_gbps:g} GB/s "
                    f"at >= {size}")
        return (f"{what}: slow: the sizes up to {_size(2 * large_bytes)} did not finish within its budget of {budget}, "
                f"which a link at the floor {v.floor_gbps:g} GB/s meets; it reached {_size(v.reached_bytes)} at busbw "
                f"{v.busbw_gbps:.3g} GB/s (the floor holds at >= {size})")
    if run.status == "incomplete" or not run.points:
        return f"{what} did not complete ({notes or 'no message size measured'})"
    if wrong or run.status == "failed":
        return f"{what} returned {wrong} wrong result(s)" + (f" ({notes})" if notes else "")
    if v.busbw_gbps is None:
        return f"{what} measured no message size of {size} or more; floor {v.floor_gbps:g} GB/s"
    relation = "<" if v.busbw_gbps < v.floor_gbps else ">="
    return f"{what}: busbw {v.busbw_gbps:.3g} GB/s at >= {size} {relation} floor {v.floor_gbps:g} GB/s"
