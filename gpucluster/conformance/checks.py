"""The check registry: every conformance check's ID, area, groups and MUST statement.

IDs are stable (``GC-<AREA>-<NNN>``); the test implementing a check carries the ID in its
``@pytest.mark.check`` marker and the MUST statement as its docstring (a unit test keeps the
two in step). ``groups`` are inventory groups: the check runs on hosts of those groups, or
on every host when empty.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Check:
    id: str
    area: str
    title: str
    must: str
    groups: tuple[str, ...] = ()


AREAS = {
    "OS": "Operating system",
    "SYS": "System services",
    "GPU": "GPUs and the NVIDIA stack",
    "BURN": "GPU burn",
    "NET": "Fabric",
    "AR": "All-reduce bandwidth",
    "RDMA": "RDMA bandwidth",
    "K8S": "Kubernetes",
    "CEPH": "Ceph storage",
    "FLEET": "Fleet comparison",
    "DCGM": "DCGM diagnostics",
    "PCIE": "PCIe links",
    "IB": "InfiniBand and RoCE ports",
    "EFA": "Elastic Fabric Adapter",
    "RAIL": "Compute rails",
}

_CHECKS = (
    Check("GC-OS-001", "OS", "Operating system release",
          "The node MUST run the OS release the spec declares for it (gpucluster_os, as the BOM's os table names it)."),
    Check("GC-OS-002", "OS", "Kernel",
          "The kernel MUST be the declared OS's series or newer, with its modules under /lib/modules/<release>."),
    Check("GC-SYS-001", "SYS", "Time in sync",
          "The system clock MUST be synchronised by chrony (leap status Normal, offset under 100 ms)."),
    Check("GC-SYS-002", "SYS", "Firewall active",
          "An nftables ruleset MUST be loaded with an input chain that drops by default, and where the "
          "cluster's table is loaded it MUST admit SSH from exactly the networks the stack admits it from: "
          "the management network, and the target's admin_cidrs or, behind a bastion, the bastion's source."),
    Check("GC-SYS-003", "SYS", "Required services",
          "Every service the node's roles require MUST be active."),
    Check("GC-SYS-004", "SYS", "node_exporter serving",
          "node_exporter MUST answer on its port (the inventory's node contract, 9100 by default) with its "
          "metrics, textfile collector included."),
    Check("GC-SYS-005", "SYS", "Egress proxy",
          "Where the spec's egress is a proxy, apt's configuration MUST carry it as the roles write it "
          "(gpucluster.render.proxy), and where containerd runs its unit's environment MUST carry it too."),
    Check("GC-GPU-001", "GPU", "Driver loaded at the pinned version",
          "The NVIDIA kernel driver MUST be loaded and its version MUST equal the BOM's pin.", ("gpu",)),
    Check("GC-GPU-002", "GPU", "GPU count",
          "The node MUST show exactly the number of GPUs its hardware profile lists.", ("gpu",)),
    Check("GC-GPU-003", "GPU", "GPU model",
          "Every GPU MUST be the model the hardware profile names.", ("gpu",)),
    Check("GC-GPU-004", "GPU", "GPU memory",
          "Every GPU MUST have the total memory the hardware profile lists (MiB).", ("gpu",)),
    Check("GC-GPU-005", "GPU", "Persistence mode",
          "Persistence mode MUST be enabled on every GPU.", ("gpu",)),
    Check("GC-GPU-006", "GPU", "GPU health",
          "ECC MUST be enabled on every GPU, and nvidia-smi -q MUST report every GPU healthy: no uncorrectable "
          "ECC errors, no pending or failed row remapping or page retirement, no SRAM error threshold exceeded, "
          "no pending memory repair or unrepairable memory, no reset or recovery action required, and every "
          "health reading readable.", ("gpu",)),
    Check("GC-GPU-007", "GPU", "No Xid errors",
          "The kernel log since boot MUST be readable and MUST hold no NVIDIA Xid error except those NVIDIA's "
          "Xid catalog attributes to user applications, and on NVSwitch profiles no fatal SXid error.", ("gpu",)),
    Check("GC-GPU-008", "GPU", "NVLinks up",
          "On NVSwitch profiles every GPU MUST show all its NVLinks up.", ("gpu",)),
    Check("GC-GPU-009", "GPU", "Fabric manager",
          "nvidia-fabricmanager MUST be running where the hardware profile needs it.", ("gpu",)),
    Check("GC-GPU-010", "GPU", "CUDA version",
          "The installed CUDA toolkit version MUST equal the BOM's pin.", ("gpu",)),
    Check("GC-GPU-011", "GPU", "NCCL version",
          "The installed NCCL (libnccl2) version MUST equal the BOM's pin.", ("gpu",)),
    Check("GC-GPU-012", "GPU", "Container runtime sees the GPUs",
          "The NVIDIA container toolkit MUST see every GPU of the node.", ("gpu",)),
    Check("GC-BURN-001", "BURN", "GPU burn",
          "Every GPU under a sustained matrix-product load MUST produce zero wrong results and "
          "reach the profile's TFLOP/s floor for each tested precision.", ("gpu",)),
    Check("GC-NET-001", "NET", "Fabric interface",
          "The fabric interface MUST be up and carry the node's fabric address; where the provider addresses "
          "the compute ports, every one MUST be up with an address in the provider's range.", ("gpu", "storage")),
    Check("GC-NET-002", "NET", "Fabric MTU",
          "The fabric interface MTU (every compute port's, where the provider addresses them) MUST equal the "
          "spec's fabric MTU.", ("gpu", "storage")),
    Check("GC-NET-003", "NET", "HCAs present",
          "The node MUST show every RDMA device its platform lists on its compute rails, and none that "
          "no rail of the platform names.", ("gpu",)),
    Check("GC-NET-004", "NET", "HCA ports active at rate",
          "Every port of the platform's compute RDMA devices MUST be ACTIVE at its compute rail's rate.", ("gpu",)),
    Check("GC-NET-005", "NET", "RoCE QoS",
          "On RoCE fabrics with QoS specified, every compute RoCE rail MUST trust DSCP and have PFC on "
          "exactly the specified priority.", ("gpu",)),
    Check("GC-NET-006", "NET", "NCCL configuration",
          "/etc/nccl.conf MUST hold exactly the settings the spec renders for the node, and its "
          "NCCL_SOCKET_IFNAME MUST name an interface the node has.", ("gpu",)),
    Check("GC-RAIL-001", "RAIL", "Compute rails configured",
          "Every addressed compute rail MUST be up at the fabric MTU with its address, its own routing table "
          "and source rule, and the multi-NIC ARP and reverse-path settings.", ("gpu",)),
    Check("GC-RAIL-002", "RAIL", "Compute rails reach every peer",
          "A do-not-fragment ping at the fabric MTU MUST pass to and from every peer on every compute rail, "
          "or the failure is another node's.", ("gpu",)),
    Check("GC-AR-001", "AR", "Intra-node all-reduce",
          "The all-reduce bus bandwidth across all GPUs of the node MUST reach the profile's intra-node "
          "floor at large message sizes, with no wrong results.", ("gpu",)),
    Check("GC-AR-002", "AR", "Inter-node all-reduce",
          "The ring all-reduce bus bandwidth across all nodes, under each node's /etc/nccl.conf with "
          "NCCL_ALGO=Ring pinned (the algorithm the floor holds for), MUST reach the profile's inter-node floor "
          "at large message sizes, with no wrong results.", ("gpu",)),
    Check("GC-AR-003", "AR", "Node-pair all-reduce",
          "The node MUST NOT be the one its pair all-reduce results name slow: every pair it is in "
          "reaches the inter-node floor (under each node's /etc/nccl.conf with NCCL_ALGO=Ring pinned), or the "
          "shortfall is another node's.", ("gpu",)),
    Check("GC-RDMA-001", "RDMA", "RDMA write bandwidth",
          "ib_write_bw between this node and a peer MUST reach the platform's floor on every compute HCA.", ("gpu",)),
    Check("GC-GPU-013", "GPU", "NVSwitch fabric registered",
          "On NVSwitch profiles every GPU MUST report the fabric State Completed and Status Success.", ("gpu",)),
    Check("GC-GPU-014", "GPU", "NVLinks at speed",
          "On NVLink profiles every NVLink of every GPU MUST be up at the profile's speed per link.", ("gpu",)),
    Check("GC-GPU-015", "GPU", "NVLink error counters",
          "Every NVLink MUST show zero replay, recovery and CRC errors.", ("gpu",)),
    Check("GC-GPU-016", "GPU", "No thermal or power slowdown",
          "Every GPU MUST be free of thermal and power slowdown among its active clocks event reasons.", ("gpu",)),
    Check("GC-DCGM-001", "DCGM", "DCGM diagnostics",
          "Where the inventory expects DCGM, dcgmi MUST be installed, and dcgmi diag at the configured level MUST "
          "pass with no failed or warning test on any GPU.", ("gpu",)),
    Check("GC-PCIE-001", "PCIE", "GPU PCIe link",
          "Every GPU's PCIe link MUST reach the profile's generation and run at the profile's width.", ("gpu",)),
    Check("GC-PCIE-002", "PCIE", "HCA PCIe link",
          "Every HCA a platform rail lists MUST run its PCIe link at the rail's generation and width.", ("gpu",)),
    Check("GC-PCIE-003", "PCIE", "Host-device copy bandwidth",
          "nvbandwidth host-to-device and device-to-host copies MUST reach the profile's floor on every GPU.",
          ("gpu",)),
    Check("GC-IB-001", "IB", "HCA ports at the platform rate",
          "Every port of an HCA a platform rail lists MUST be ACTIVE at the rail's rate.", ("gpu",)),
    Check("GC-IB-002", "IB", "HCA port error counters",
          "Every HCA port MUST show zero symbol errors, link-downed events and receive errors, with none "
          "rising during the run.", ("gpu",)),
    Check("GC-IB-003", "IB", "HCA firmware uniform",
          "Every HCA MUST run the firmware version that most HCAs of the fleet run.", ("gpu",)),
    Check("GC-RDMA-002", "RDMA", "GPUDirect RDMA write bandwidth",
          "ib_write_bw with GPU memory (--use_cuda) MUST reach the platform's RDMA write floor for every "
          "GPU and HCA pair.", ("gpu",)),
    Check("GC-EFA-001", "EFA", "EFA devices",
          "fi_info -p efa MUST list as many EFA devices as the platform states.", ("gpu",)),
    Check("GC-EFA-002", "EFA", "NCCL over the OFI plugin",
          "An NCCL run on an EFA node, under its /etc/nccl.conf with NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1 "
          "pinned (intra-node traffic through the network plugin), MUST use the OFI plugin (AWS Libfabric) over "
          "the efa provider.", ("gpu",)),
    Check("GC-K8S-001", "K8S", "Nodes Ready",
          "Every GPU and control-plane node of the inventory MUST be registered and report Ready."),
    Check("GC-K8S-002", "K8S", "GPUs allocatable",
          "A GPU node's allocatable nvidia.com/gpu MUST equal its hardware profile's GPU count.", ("gpu",)),
    Check("GC-K8S-003", "K8S", "GPU pod",
          "A pod that requests one nvidia.com/gpu MUST run nvidia-smi to completion and list a GPU."),
    Check("GC-K8S-004", "K8S", "Cross-node all-reduce job",
          "An Indexed Job with one rank per GPU node MUST complete an all-reduce with correct results at or "
          "above the profile's inter-node bus bandwidth floor."),
)

CEPH_CHECKS: tuple[Check, ...] = (
    Check("GC-CEPH-001", "CEPH", "Cluster health",
          "The cluster MUST report HEALTH_OK, or only warnings whose codes the spec lists in "
          "storage.allowed_health_warnings (a HEALTH_ERR check is never allowed).", ("storage",)),
    Check("GC-CEPH-002", "CEPH", "OSDs up and in",
          "Every OSD MUST be up and in, and every storage host MUST carry at least one OSD.", ("storage",)),
    Check("GC-CEPH-003", "CEPH", "Placement groups clean",
          "Every placement group MUST be active+clean.", ("storage",)),
    Check("GC-CEPH-004", "CEPH", "Monitor quorum",
          "Every monitor the spec lists MUST be in the monmap and in the quorum.", ("storage",)),
    Check("GC-CEPH-005", "CEPH", "CephFS mounted and writable",
          "CephFS MUST be mounted at storage.cephfs.mount_path through a client key of the node's own "
          "(never client.admin), and a file written there MUST read back.", ("gpu",)),
    Check("GC-CEPH-006", "CEPH", "CephFS consistent across nodes",
          "A file written to CephFS on one GPU node MUST read back with the same SHA-256 on this node.", ("gpu",)),
    Check("GC-CEPH-007", "CEPH", "rados bench throughput",
          "rados bench MUST write and read back at a non-zero rate on an RBD pool; the write and read "
          "throughput are recorded as figures.", ("storage",)),
)

# Checks no test of the suite implements: the suite's controller derives their results from the
# other checks' figures once every node has run (gpucluster.conformance.fleet).
DERIVED_CHECKS: tuple[Check, ...] = (
    Check("GC-FLEET-001", "FLEET", "Fleet comparison",
          "Each node's GPU burn TFLOP/s per precision, intra-node all-reduce bus bandwidth and RDMA write "
          "bandwidth MUST NOT fall more than the fleet margin (default 10 %) below the median of the nodes "
          "that measured it, where at least 3 nodes did.", ("gpu",)),
)

CHECKS: dict[str, Check] = {c.id: c for c in (*_CHECKS, *CEPH_CHECKS, *DERIVED_CHECKS)}


def get(check_id: str) -> Check:
    try:
        return CHECKS[check_id]
    except KeyError:
        raise KeyError(f"unknown check {check_id!r}") from None


# The checks whose runs span several nodes at once with one command line (mpirun: every rank runs
# the one binary path it names), gpucluster.conformance.fabric's inter_node and pair_search: their
# nodes need nccl-tests in one folder (ClusterInventory.inter_node_problems).
INTER_NODE = frozenset({"GC-AR-002", "GC-AR-003"})


def select(patterns: Iterable[str], option: str = "--checks") -> frozenset[str]:
    """The check IDs that IDs or shell patterns (``GC-NET-*``) name, as ``verify --checks`` takes them.

    ValueError, on one line, when a pattern names no check: that pattern and every check ID, so a
    run is refused before it reaches any node rather than running nothing (or everything).
    """
    given = [p.strip() for p in patterns if p.strip()]
    if not given:
        raise ValueError(f"{option}: no check ID or pattern given")
    unmatched = [p for p in given if not any(fnmatch.fnmatchcase(c, p) for c in CHECKS)]
    if unmatched:
        raise ValueError(f"{option}: {', '.join(unmatched)} matches no check; the check IDs: "
                         f"{', '.join(sorted(CHECKS))}")
    return frozenset(c for c in CHECKS if any(fnmatch.fnmatchcase(c, p) for p in given))
