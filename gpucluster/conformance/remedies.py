"""What to do next when a conformance check fails: one entry per check ID of the registry.

The table sits beside :mod:`gpucluster.conformance.checks` and is kept in step with it by a unit
test (exactly one entry per registered check, none for an unknown ID). The reports quote it
under each finding, and ``docs/troubleshooting.md`` is generated from it::

    python -m gpucluster.conformance.remedies --markdown > docs/troubleshooting.md

A step is a template: ``{node}``, ``{inventory}``, ``{service}``, ``{interface}`` and the other
:data:`FIELDS` are filled from the failing result (:func:`subject`: its node, the run's inventory,
the service, interface, rail, HCA and port it names), so a report's next step names what failed. A field the failure
does not know is said in words (``<the failing node>`` in a command), never left as a token, and the
doc shows every step so. What no check records (a GPU index, a peer's address on a rail) is written in words in
the table itself.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from dataclasses import dataclass

from gpucluster.conformance import checks
from gpucluster.conformance.verdict import CLUSTER, CheckResult
from gpucluster.spec.facts import DCGM_DIAG_LEVEL_DEFAULT


@dataclass(frozen=True)
class Subject:
    """What a failure names, to fill a remedy's steps with; empty where the failure does not say."""

    node: str = ""  # several nodes that failed alike comma-separated, as Ansible's --limit takes them
    inventory: str = ""  # the inventory file the run used (the report's meta)
    run_dir: str = ""  # the run folder
    service: str = ""  # GC-SYS-003's parameter
    interface: str = ""  # the fabric interface GC-NET-001/002 judged, the one GC-AR-003's pairs ran over
    peer: str = ""  # the other node of a slow pair
    hca: str = ""
    gpu: str = ""
    port: str = ""  # the HCA's port GC-NET-004 found not ACTIVE at the rate
    rail: str = ""  # the node's own netdev on the compute rail GC-RAIL-001/002 found wanting


# Each field in words, for a failure that does not name it: in a command inside <>, in prose as is.
FIELDS: dict[str, str] = {
    "node": "the failing node",
    "inventory": "the inventory the run used",
    "run_dir": "the run folder",
    "service": "the service the check names",
    "interface": "the node's fabric interface, gpucluster_fabric_interface in the inventory",
    "peer": "the peer the message names",
    "hca": "the HCA the message names",
    "gpu": "the GPU index the message names",
    "port": "the port the message names",
    "rail": "the rail's interface the message names",
}

_FIELD = re.compile(r"\{(" + "|".join(FIELDS) + r")\}")
_WORDS = re.compile(r"<[^<>`]*>")  # words to substitute in a command, which may hold a field


def fill(template: str, subject: Subject) -> str:
    """The step with the subject's values in place of its fields, each unknown one in words."""

    def value(m: re.Match[str], code: bool, quote: bool) -> str:
        given = getattr(subject, m.group(1))
        if given and m.group(1) == "node" and not code:
            # Several nodes that failed alike: a list for --limit in a command, words in prose.
            *rest, last = given.split(",")
            return f"{', '.join(rest)} and {last}" if rest else last
        if given:
            return shlex.quote(given) if quote else given
        return f"<{FIELDS[m.group(1)]}>" if code else FIELDS[m.group(1)]

    parts = template.split("`")  # odd parts are code spans
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            # A field inside words (<fabric address of {peer}>) is itself words or a bare value.
            part = _WORDS.sub(lambda w: _FIELD.sub(lambda m: value(m, False, False), w.group(0)), part)
            part = _FIELD.sub(lambda m: value(m, True, True), part)
        else:
            part = _FIELD.sub(lambda m: value(m, False, False), part)
        out.append(part)
    return "`".join(out)


# Which field a check's parameter is (CheckResult.param): GC-FLEET-001's names a figure, no subject.
PARAM_FIELDS = {"GC-SYS-003": "service"}
# The fields each check's results carry beyond the node and the inventory: a report's steps for it
# name them, and a unit test keeps every template that uses them filled.
SUBJECTS: dict[str, tuple[str, ...]] = {
    "GC-SYS-003": ("service",),
    "GC-NET-001": ("interface",),
    "GC-NET-002": ("interface",),
    "GC-NET-004": ("hca", "port"),
    "GC-RAIL-001": ("rail",),
    "GC-RAIL-002": ("rail",),
    "GC-AR-003": ("peer", "interface"),
    "GC-RDMA-001": ("peer",),
    "GC-RDMA-002": ("gpu", "hca"),
}
_PAIR = re.compile(r"pair_busbw_gbps_(.+)|min_hca_gbps_(.+)")
_GDR = re.compile(r"gdr_gbps_gpu(\d+)_(.+)")


def _below(value: object, floor: object) -> bool:
    """A figure that failed its floor: not measured, or under it."""
    number = (int, float)
    return not isinstance(value, number) or (isinstance(floor, number) and value < floor)


def _first(value: object) -> str:
    """The first of a figure that lists what failed (``failed_ports``, ``failed_rails``), or ""."""
    return str(value[0]) if isinstance(value, list) and value else ""


def subject(r: CheckResult, inventory: str = "", run_dir: str = "") -> Subject:
    """What the failing result names: its node, its parameter, the interface it recorded, and the
    first peer, GPU, HCA and port, and rail whose figure failed (the message names them all; a
    step names one)."""
    f = r.figures
    peer = hca = gpu = ""
    for key in sorted(f):
        pair, gdr = _PAIR.fullmatch(key), _GDR.fullmatch(key)
        if pair and not peer and _below(f[key], f.get("floor_gbps" if pair.group(1) else "rdma_floor_gbps")):
            peer = pair.group(1) or pair.group(2)
        if gdr and not hca and _below(f[key], f.get("rdma_floor_gbps")):
            gpu, hca = gdr.groups()
    # GC-NET-004's device:port, as NCCL_IB_HCA writes one.
    device, _, port = _first(f.get("failed_ports")).rpartition(":")
    param_field = PARAM_FIELDS.get(r.check_id)
    return Subject(node="" if r.node == CLUSTER else r.node, inventory=inventory, run_dir=run_dir,
                   service=(r.param or "") if param_field == "service" else "",
                   interface=str(f.get("interface") or ""), peer=peer, hca=hca or device, gpu=gpu,
                   port=port if device else "", rail=_first(f.get("failed_rails")))


def steps_for(r: CheckResult, inventory: str = "", run_dir: str = "") -> tuple[str, ...]:
    """The next steps for one failing result, filled from it (the table's fallback for a check it lacks)."""
    found = REMEDIES.get(r.check_id, Remedy(r.check_id, ("Open the check's log.",)))
    return found.filled(subject(r, inventory, run_dir))


@dataclass(frozen=True)
class Remedy:
    check_id: str
    templates: tuple[str, ...]  # in the order to try them, with fields (FIELDS) to fill from the failure

    @property
    def steps(self) -> tuple[str, ...]:
        """The steps for no failure in particular (every field in words): the troubleshooting doc's."""
        return self.filled(Subject())

    @property
    def first(self) -> str:
        return self.steps[0]

    def filled(self, subject: Subject) -> tuple[str, ...]:
        return tuple(fill(t, subject) for t in self.templates)


def _converge(tags: str) -> str:
    return "gpucluster converge --inventory {inventory} --limit {node} --tags " + tags


_REMEDIES = (
    Remedy("GC-OS-001", (
        "Compare `/etc/os-release` on {node} with the OS the spec declares for its pool (`os` on the target or "
        "the pool; the inventory's `gpucluster_os`) and that OS's entry in the BOM's `os` table "
        "(`gpucluster/data/bom.yaml`).",
        "A node on another release was imaged wrong: reinstall it from the pinned image; the roles do not "
        "upgrade between releases.",
    )),
    Remedy("GC-OS-002", (
        "Run `uname -r` and `ls /lib/modules/$(uname -r)` on {node}.",
        "A missing modules folder means the running kernel's package was removed: reinstall "
        "`linux-image-$(uname -r)` or reboot into the installed kernel.",
        "An older kernel: install the OS's current kernel package (Debian `linux-image-amd64`, Ubuntu "
        "`linux-generic` or the cloud's kernel flavour) and reboot, then rerun the driver role "
        f"(`{_converge('nvidia_driver')}`) so the module is built for it.",
    )),
    Remedy("GC-SYS-001", (
        "Run `chronyc tracking` and `chronyc sources -v` on {node}: a leap status other than Normal or no `*` "
        "source means chrony has no usable server.",
        "Check that the NTP servers the common role configured are reachable from the node (UDP 123 through the "
        f"firewall), then rerun `{_converge('common_time')}`.",
        "A large offset with a good source: `chronyc makestep` once, then watch `chronyc tracking` settle.",
    )),
    Remedy("GC-SYS-002", (
        "Run `systemctl status nftables` and `nft list ruleset` on {node}: the input chain must have "
        "`policy drop`.",
        "Check `/etc/nftables.conf` with `nft -c -f /etc/nftables.conf`; a syntax error leaves no ruleset loaded.",
        "SSH sources differ: `nft list set inet gpucluster management_v4` must hold the management network and "
        "the target's admin_cidrs (`gpucluster_admin_cidrs` in the inventory) or, behind a bastion, the bastion's "
        "source (`gpucluster_access.bastion.source_cidr`); regenerate the inventory after changing admin_cidrs or "
        "the access path in the stack file.",
        f"Rerun `{_converge('common_firewall')}` to rewrite and reload the ruleset.",
    )),
    Remedy("GC-SYS-003", (
        "Run `systemctl status {service}` and `journalctl -u {service} -b --no-pager | tail -50` on {node}.",
        "Rerun the role that owns the service on {node} (`gpucluster converge --inventory {inventory} --limit "
        "{node}`); "
        "its handler restarts the service and waits until it is ready.",
    )),
    Remedy("GC-SYS-004", (
        "Run `systemctl status prometheus-node-exporter` and `ss -ltnp | grep node_exporter` on {node}: it listens "
        "on `monitoring_node_exporter_listen_address`, by default the management address and the inventory's "
        "`gpucluster_contract.node_exporter_port`.",
        "`curl -s http://<that address and port>/metrics | grep collector=\\\"textfile\\\"`: without "
        "the textfile collector, "
        "check `--collector.textfile.directory` against `monitoring_textfile_dir` (by default the inventory's "
        "`gpucluster_contract.textfile_dir`).",
        f"Rerun `{_converge('monitoring')}`.",
    )),
    Remedy("GC-SYS-005", (
        "Run `apt-config dump | grep Proxy` and `systemctl show -p Environment containerd` on {node}: both must "
        "name the spec's `egress.http_proxy`/`https_proxy`.",
        "A stale file: `/etc/apt/apt.conf.d/90gpucluster-proxy` and "
        "`/etc/systemd/system/containerd.service.d/http-proxy.conf` are the roles'; another file of apt.conf.d "
        "that sets Acquire::http::Proxy later in the order wins over it.",
        f"Regenerate the inventory after changing `egress` in the stack file, then rerun "
        f"`{_converge('common_proxy,container_runtime')}`.",
    )),
    Remedy("GC-GPU-001", (
        "Run `cat /proc/driver/nvidia/version` and `dpkg -l | grep -E 'nvidia-(driver|kernel)'` on {node}; "
        "compare with `nvidia_driver` in the BOM.",
        "Nothing loaded: `dkms status` and `journalctl -k -b | grep -i nvidia` show a module that failed to build "
        "or load (Secure Boot, a kernel without headers).",
        "Another version: the package is held at the old pin; upgrade it with the rolling upgrade "
        "(`gpucluster converge --inventory {inventory} --playbook playbooks/upgrade-rolling.yml "
        "-e upgrade_rolling_components=[driver]`), or on a drained node "
        f"`{_converge('nvidia_driver')} -e nvidia_driver_upgrade_enabled=true "
        "-e nvidia_driver_reboot_enabled=true`.",
    )),
    Remedy("GC-GPU-002", (
        "Run `nvidia-smi -L` and `lspci -d 10de: | wc -l` on {node}: a GPU on the PCI bus but not in "
        "nvidia-smi has fallen off the bus (see `journalctl -k -b | grep -E 'Xid|fallen off'`).",
        "Reset it with `nvidia-smi -r -i <GPU index>` on an idle node or reboot; a GPU missing from `lspci` needs a "
        "reseat "
        "or an RMA with the hardware vendor.",
        "If the node really has another GPU count, its hardware profile in the inventory is wrong.",
    )),
    Remedy("GC-GPU-003", (
        "Run `nvidia-smi --query-gpu=index,name,pci.bus_id --format=csv` on {node}.",
        "The wrong model in a node is a hardware or ordering matter; a whole node of another model needs another "
        "hardware profile in the spec.",
    )),
    Remedy("GC-GPU-004", (
        "Run `nvidia-smi --query-gpu=index,memory.total --format=csv` on {node}.",
        "Less memory than the profile on one GPU: check `nvidia-smi -q -d ROW_REMAPPER,PAGE_RETIREMENT`; a GPU "
        "with retired memory past the vendor's limit goes to RMA.",
        "MIG partitions also show less memory: `nvidia-smi -mig 0` when the profile expects whole GPUs.",
    )),
    Remedy("GC-GPU-005", (
        "Run `systemctl status nvidia-persistenced` and `nvidia-smi -q | grep -i persistence` on {node}.",
        f"Rerun `{_converge('nvidia_driver')}` (with `nvidia_driver_persistenced_enabled: true`).",
    )),
    Remedy("GC-GPU-006", (
        "Run `nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT` and `nvidia-smi -q | grep -iE 'reset|recovery'` "
        "on {node} and note the GPU's serial (`nvidia-smi -q | grep Serial`).",
        "Pending row remaps or retired pages, \"reset required\" and a recovery action of Reset clear with a GPU "
        "reset: drain the node, `nvidia-smi -r -i <GPU index>` or reboot, and run verify again; a recovery action of "
        "Reboot needs the reboot.",
        "\"nvidia-smi could not reach a GPU\" (Unable to determine the device handle, GPU is lost): the GPU fell "
        "off the bus; reboot, and if it stays lost reseat it or RMA it.",
        "ECC disabled: `nvidia-smi -e 1` then reboot. Uncorrectable errors that come back after a reset, a "
        "row-remapping failure, unrepairable memory or an exceeded SRAM error threshold mean RMA: open a case "
        "with the vendor, attaching `nvidia-bug-report.sh` output and the serial.",
    )),
    Remedy("GC-GPU-007", (
        "\"The kernel log could not be read\": the check runs `journalctl -k -b` and then `dmesg`; give the "
        "verifying user read access to the journal (group `systemd-journal` or `adm`) or the kernel ring "
        "buffer (`kernel.dmesg_restrict=0`, or verify as root).",
        "Run `journalctl -k -b | grep -E 'NVRM: Xid|SXid'` on {node} and look up each Xid code in NVIDIA's "
        "Xid catalog (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html). Xids 13, 31, 43 "
        "and 45, which the catalog attributes to user applications, are reported but do not fail the check.",
        "Hardware Xids (48, 63, 64, 74, 79, 92, 94, 95): drain the node, run `nvidia-smi -q -d ECC`, reset or "
        "reboot, and RMA the GPU if they return.",
        "Fatal SXids name the NVSwitch (`nvidia-nvswitchN`, PCI address) and link: check "
        "`journalctl -u nvidia-fabricmanager -b`, reset the baseboard or reboot, and open a case with the "
        "vendor if they return; non-fatal SXids are reported only.",
        "The check reads the log since boot: a reboot clears it once the cause is dealt with.",
    )),
    Remedy("GC-GPU-008", (
        "Run `nvidia-smi nvlink -s` and `nvidia-smi topo -m` on {node}.",
        "Links down on every GPU: check `systemctl status nvidia-fabricmanager` (GC-GPU-009) and reboot.",
        "Links down on one GPU: drain, reset the GPU or reboot; persisting, RMA the GPU or the baseboard.",
    )),
    Remedy("GC-GPU-009", (
        "Run `systemctl status nvidia-fabricmanager` and `journalctl -u nvidia-fabricmanager -b` on {node}: "
        "its version must equal the driver's.",
        f"Rerun `{_converge('nvidia_driver')}`, which installs and starts the fabric manager where "
        "the profile needs it.",
    )),
    Remedy("GC-GPU-010", (
        "Run `cat /usr/local/cuda/version.json` and `dpkg -l | grep cuda-toolkit` on {node} (Debian's "
        "`nvidia-cuda-toolkit` where the inventory's `gpucluster_contract.cuda_toolkit_install_method` is "
        "distro); compare with `cuda.version` in the BOM.",
        f"Rerun `{_converge('cuda_toolkit')}` (on the lab add `--heavy`).",
    )),
    Remedy("GC-GPU-011", (
        "Run `dpkg-query -W libnccl2` on {node}; compare with `nccl.version` in the BOM.",
        f"Rerun `{_converge('nccl')}`; a held package at another version is replaced there.",
    )),
    Remedy("GC-GPU-012", (
        "Run `nvidia-container-cli info` and `nvidia-ctk --version` on {node}.",
        "An error about the driver means GC-GPU-001 fails too: fix the driver first.",
        f"Rerun `{_converge('container_runtime')}` to reinstall the toolkit and its runtime "
        "configuration.",
    )),
    Remedy("GC-BURN-001", (
        "Open the check's log: it names the GPU, the precision and whether results were wrong, throughput was "
        "under the floor, or a GPU throttled.",
        "Wrong results or Xids during the burn: drain the node, `nvidia-smi -q -d ECC`, and RMA the GPU if a "
        "rerun fails again.",
        "Under the floor or throttled: `nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER` during a rerun; check "
        "cooling, power caps (`nvidia-smi -pl`) and clocks (`nvidia-smi -q -d CLOCK`).",
    )),
    Remedy("GC-NET-001", (
        "Run `ip -br addr show` and `ip -s link show {interface}` on {node}.",
        "Link down: check the cable and the switch port (`ethtool {interface}` or `ibstat`).",
        f"Address missing on an interface the cluster addresses: rerun `{_converge('rdma_fabric')}`, which "
        "configures the fabric interface.",
        "A compute port the provider addresses (OCI's rdma0-rdma15) without an address in its range: the roles "
        "never address it; the image's RDMA configuration did not run or the port's 802.1X authentication "
        "failed: `wpa_cli status -i <port>` (AUTHENTICATED), `systemctl status oci-rdma-configure`, and rerun it.",
    )),
    Remedy("GC-NET-002", (
        "Run `ip link show {interface}` on {node} and compare its MTU with the spec's fabric MTU.",
        f"Rerun `{_converge('rdma_fabric')}`; if it will not hold, the switch port's MTU is lower "
        "(`ping -M do -s <fabric MTU minus 28> <a peer's fabric address>` finds the largest that passes).",
    )),
    Remedy("GC-RAIL-001", (
        "The check names each rail and what differs: run `networkctl status {rail}`, `ip addr show dev {rail}`, "
        "`ip rule` and `ip route show table all dev {rail}` on {node}.",
        f"Rerun `{_converge('fabric_rails')}`; a rail its network file does not configure is run by "
        "another file that matches first (the role fails naming it: remove or rename that file).",
    )),
    Remedy("GC-RAIL-002", (
        "The check names the rail and the pair: `ping -M do -s <fabric MTU minus 28> -I {rail} <the peer's address "
        "on the rail>` on {node}, and the same from the peer, finds the side that drops full-size frames.",
        "A node named alone on a rail: its rail interface, cable or switch port (MTU, link state). "
        "Both ends named: the path between them.",
    )),
    Remedy("GC-NET-003", (
        "Run `ibv_devices` and `lspci | grep -i mellanox` on {node}; the check names each compute device of "
        "the platform (gpucluster/data/platforms/) it lacks and each device no rail names.",
        "An HCA on the PCI bus but not in `ibv_devices`: `lsmod | grep mlx5`, then rerun "
        f"`{_converge('rdma_fabric')}`; one missing from `lspci` needs a reseat or an RMA.",
    )),
    Remedy("GC-NET-004", (
        "Run `ibstat {hca} {port}` (or `cat /sys/class/infiniband/{hca}/ports/{port}/{state,rate}`) on {node}, and "
        "the same for each other port the message names.",
        "Ports not ACTIVE: InfiniBand needs a subnet manager (`sminfo`); RoCE needs the Ethernet link up.",
        "Active at a lower rate: a degraded cable or transceiver; `mlxlink -d {hca}` shows the lane errors; swap "
        "the cable.",
    )),
    Remedy("GC-NET-005", (
        "Run `dcb app show dev <netdev> dscp-prio` and `dcb pfc show dev <netdev> prio-pfc` on {node} for each "
        "rail's netdev the check names (`mlnx_qos -i <netdev>` where DOCA-OFED is installed).",
        f"Rerun `{_converge('rdma_fabric')}` (RoCE QoS); the switch must have PFC on the same "
        "priority.",
    )),
    Remedy("GC-NET-006", (
        "Run `cat /etc/nccl.conf` on {node}; the check's message names each setting that differs.",
        f"Rerun `{_converge('nccl')}`; a hand edit is overwritten there.",
        "\"NCCL_SOCKET_IFNAME=... matches no interface of the node's\": NCCL would find no interface to "
        "bootstrap over. Compare the value with `ip -br link` on {node}: the name comes from the spec's "
        "`fabric.socket_ifname`, else (Ethernet) the platform's compute rails, else the node's fabric interface "
        "(`gpucluster_fabric_interface` in the inventory), else the platform's `nccl_socket_interface`; correct "
        "it there, regenerate the inventory and rerun the nccl role.",
    )),
    Remedy("GC-AR-001", (
        "Open the check's log for the per-size figures. Check `nvidia-smi topo -m` and `nvidia-smi nvlink -s` "
        "(GC-GPU-008) on {node}.",
        "Rerun nccl-tests by hand: `<nccl_tests_install_dir>/build/all_reduce_perf -b 8 -e 512M -f 2 -g <GPUs per "
        "node>` (the folder: by default the inventory's `gpucluster_contract.nccl_tests_dir`) with "
        "`NCCL_DEBUG=INFO` to see the transport chosen.",
        "Wrong results: drain the node and burn its GPUs (GC-BURN-001).",
    )),
    Remedy("GC-AR-002", (
        "Read GC-AR-003's verdicts first: a slow node or link named there is the cause, and this check names it.",
        "With no node singled out, open the run's log in `logs/` (mpirun's own output) for an error such as "
        "a refused connection or a wrong interface.",
        "Measure node to node on the fabric addresses (`iperf3 -s` on one, `iperf3 -c <the first node's fabric "
        "address> -P 8` on the "
        "other; `ib_write_bw` on RDMA fabrics) to find the slow path.",
    )),
    Remedy("GC-AR-003", (
        "Measure the two fabric addresses of the slow pair directly: `iperf3 -s` on {peer}, "
        "`iperf3 -c <fabric address of {peer}> -P 8 -t 10` on {node} (on RDMA fabrics `ib_write_bw -d <HCA>` on "
        "{peer} and `ib_write_bw -d <HCA> <fabric address of {peer}>` on {node}).",
        "On {node} look at `ip -s link show {interface}` (errors, drops) and `tc qdisc show dev {interface}` (a "
        "shaping or netem qdisc left behind: `tc qdisc del dev {interface} root`), and on {peer} at its interface "
        "on the same network.",
        "Add a third node to the run (`--limit` with one more GPU node) so the pair search can tell a slow node "
        "from a slow link, then check that node's cable, switch port and NIC firmware.",
    )),
    Remedy("GC-RDMA-001", (
        "Rerun the pair by hand, for the HCA the message names: `ib_write_bw -d <HCA> --report_gbits` on {peer}, "
        "`ib_write_bw -d <HCA> --report_gbits <fabric address of {peer}>` on {node}.",
        "Check the HCA's port (`ibstat`: rate and state; GC-NET-004) and its error counters (`perfquery` on "
        "InfiniBand, `ethtool -S <the HCA's netdev> | grep -i -E 'err|discard'` on RoCE).",
        "A slow HCA on every pair: its cable or transceiver; on one pair only: the switch path between them.",
    )),
    Remedy("GC-GPU-013", (
        "Run `nvidia-smi -q | grep -A3 Fabric` and `systemctl status nvidia-fabricmanager` on {node}; "
        "State In Progress means the fabric manager has not finished training the NVSwitches.",
        "A Status other than Success: `journalctl -u nvidia-fabricmanager -b` names the failing switch or GPU; "
        "restart the fabric manager, then reboot if the state stays Not Started or the status an error.",
    )),
    Remedy("GC-GPU-014", (
        "Run `nvidia-smi nvlink -s` on {node}: every link must show the profile's GB/s.",
        "Links down or slow on one GPU: drain, reset the GPU (`nvidia-smi -r -i <GPU index>`) or reboot; "
        "persisting, RMA the "
        "GPU or baseboard. Links down on every GPU: check the fabric manager (GC-GPU-009, GC-GPU-013).",
    )),
    Remedy("GC-GPU-015", (
        "Run `nvidia-smi nvlink -e` on {node} and note the GPU and link; reset the counters with "
        "`nvidia-smi nvlink -r 0` and rerun an all-reduce to see whether they grow.",
        "Counters that grow under load point at the link's hardware (GPU, NVSwitch, baseboard): open a case "
        "with the vendor with `nvidia-bug-report.sh` attached.",
    )),
    Remedy("GC-GPU-016", (
        "Run `nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER` on {node}: the active reason names the cause.",
        "Thermal slowdown: check the node's fans, inlet temperature and airflow (`ipmitool sdr`); power "
        "slowdown: check the power limit (`nvidia-smi -q -d POWER`) and the PSUs.",
    )),
    Remedy("GC-DCGM-001", (
        "\"dcgmi is not installed\" where the inventory expects DCGM (capabilities `nvidia_repo` and "
        f"`heavy_packages`): rerun `{_converge('gpu_validation')}`, which installs DCGM and starts "
        "nvidia-dcgm; then check `systemctl status nvidia-dcgm`.",
        "Run `dcgmi diag -r <level> -j` on {node} (the level is `gpucluster_conformance.dcgm_diag_level`, "
        f"{DCGM_DIAG_LEVEL_DEFAULT} unless set) and read the warnings of the failing test's GPU entries; "
        "output that is not complete JSON means the diagnostic was cut short (timeout, host engine restart).",
        "\"Unable to connect to host engine\": nv-hostengine is not running; `systemctl restart nvidia-dcgm` and "
        "check `journalctl -u nvidia-dcgm`.",
        "\"every test past the deployment checks was skipped\": nothing was diagnosed; the DCGM package must match "
        "the driver's CUDA major (`datacenter-gpu-manager-4-cuda12` on a CUDA 12 driver) and the diagnostic must "
        "see the GPUs idle; rerun with `dcgmi diag -r <level> -v` to read why each test skipped. \"... skipped or "
        "not run on GPU <n>\": the other GPUs were diagnosed and that one was not; check on {node} that no process "
        "holds it and that it is not in MIG mode (`nvidia-smi`), then rerun with `-v` to read why.",
        "Memory or PCIe failures on one GPU: drain the node, reset the GPU and rerun; failing again, RMA the GPU "
        "with the `dcgmi diag` output and `nvidia-bug-report.sh` attached.",
    )),
    Remedy("GC-PCIE-001", (
        "Read the message: \"under load\" is the best generation seen while nvbandwidth copied to the GPU; "
        "\"idle\" means nvbandwidth is not installed and the GPU's pcie.link.gen.max was judged instead.",
        "Watch the link under load: `nvidia-smi --query-gpu=index,pcie.link.gen.current,pcie.link.width.current,"
        "pcie.link.gen.max,pcie.link.width.max --format=csv -lms 250` while `nvbandwidth -t "
        "host_to_device_memcpy_ce` runs (an idle GPU drops to a lower generation to save power).",
        "A lower generation or width than the profile: reseat the GPU or its riser, check the BIOS PCIe "
        "settings of the slot, and compare with a sibling node.",
    )),
    Remedy("GC-PCIE-002", (
        "Run `cat /sys/class/infiniband/<HCA>/device/current_link_speed` and `current_link_width` (or "
        "`lspci -vv -s <the HCA's PCI address> | grep LnkSta`) on {node}.",
        "A downgraded link: reseat the HCA, check the slot's BIOS settings and the HCA firmware (`mlxfwmanager`).",
        "Skipped as an SR-IOV VF (Azure ND H100 v5 and other VMs): a VF reads `Unknown` and width 0 as it has no "
        "link of its own; the physical link is the cloud's to check, and GC-RDMA-001 measures what it carries.",
    )),
    Remedy("GC-PCIE-003", (
        "Run `nvbandwidth -t host_to_device_memcpy_ce -t device_to_host_memcpy_ce` on {node}.",
        "One slow GPU: its PCIe link (GC-PCIE-001) or NUMA placement (`nvidia-smi topo -m`); all slow: the "
        "BIOS (IOMMU, ACS, power profile) and the CPU governor.",
    )),
    Remedy("GC-IB-001", (
        "Run `ibstat` (or `cat /sys/class/infiniband/*/ports/*/{state,rate}`) on {node}.",
        "A port down or at a lower rate: check the cable and transceiver, the switch port, then "
        "`mlxlink -d <HCA>` for the negotiated speed.",
    )),
    Remedy("GC-IB-002", (
        "Run `grep -H . /sys/class/infiniband/*/ports/*/counters/{symbol_error,link_downed,port_rcv_errors}` "
        "on {node}, and `perfquery` on InfiniBand.",
        "Errors on one port: replace its cable or transceiver and clear the counters (`perfquery -R`); a "
        "rising link_downed is a flapping link: check the switch side's log too.",
        "\"rose during the run\" compares the reading taken before the suite's GPUDirect RDMA, all-reduce and "
        "ib_write_bw checks with one after them: rerun `ib_write_bw` on that HCA and watch the counter.",
    )),
    Remedy("GC-IB-003", (
        "Run `cat /sys/class/infiniband/*/fw_ver` on {node} and on a node with the fleet's version.",
        "Flash the fleet's firmware with `mlxfwmanager -u` (NVIDIA MFT) and reboot the node.",
    )),
    Remedy("GC-RDMA-002", (
        "Rerun the pair the message names: `ib_write_bw -d <the peer's HCA> --use_cuda={gpu} --report_gbits -F "
        "-D 5` on {peer}, then `ib_write_bw -d {hca} --use_cuda={gpu} "
        "--report_gbits -F -D 5 <fabric address of {peer}>` on {node} (add `--use_cuda_dmabuf` on a node without "
        "nvidia_peermem).",
        "A run that fails at once: `lsmod | grep nvidia_peermem` (or a DMA-BUF capable driver and perftest) "
        "and the HCA's port (GC-IB-001); slow on one GPU only while GC-RDMA-001 passes on its HCA: the GPU's "
        "PCIe path to the HCA (`nvidia-smi topo -m`: PIX or PXB expected, GC-PCIE-001).",
    )),
    Remedy("GC-EFA-001", (
        "Run `fi_info -p efa -t FI_EP_RDM` and `ls /sys/class/infiniband` on {node}.",
        "Fewer devices than the profile: the instance was launched with fewer EFA interfaces (check the launch "
        "template), or the EFA driver is missing (`lsmod | grep efa`; reinstall the EFA software).",
    )),
    Remedy("GC-EFA-002", (
        "Rerun with `NCCL_DEBUG=INFO` and look for `NET/OFI Selected Provider is efa` and `Using network AWS "
        "Libfabric` in the output.",
        "Sockets or another provider: check that aws-ofi-nccl is on `LD_LIBRARY_PATH` (or `NCCL_NET_PLUGIN`) "
        "and that `FI_PROVIDER` is `efa`.",
    )),
    Remedy("GC-K8S-001", (
        "Run `kubectl get nodes -o wide` and `kubectl describe node {node}`: the conditions say why it is not "
        "Ready (kubelet stopped, network plugin not ready, disk or memory pressure).",
        "On the node: `systemctl status kubelet` and `journalctl -u kubelet -b | tail -50`.",
        "A node missing from the list never joined: rerun `gpucluster converge --inventory {inventory} --playbook "
        "playbooks/deploy-kubernetes.yml --limit {node}`.",
    )),
    Remedy("GC-K8S-002", (
        "Run `kubectl describe node {node} | grep -A8 Allocatable` and "
        "`kubectl -n kube-system get pods -o wide | grep nvidia-device-plugin`.",
        "A device plugin pod not running on {node}: read its log (`kubectl -n kube-system logs <pod>`); it needs "
        "the container toolkit (GC-GPU-012) and the driver (GC-GPU-001).",
    )),
    Remedy("GC-K8S-003", (
        "Run `kubectl -n gpucluster-conformance describe pod gc-k8s-003-nvidia-smi` during a rerun: Pending with "
        "`Insufficient nvidia.com/gpu` points at GC-K8S-002; a failed container at the runtime (GC-GPU-012).",
    )),
    Remedy("GC-K8S-004", (
        "Run `kubectl -n gpucluster-conformance describe job gc-k8s-004-allreduce` and read the pods' logs.",
        "A completed job under the floor is the fabric: read GC-AR-002 and GC-AR-003 for the slow node or link.",
    )),
    Remedy("GC-CEPH-001", (
        "Run `ceph health detail` on a storage node: each code (OSD_DOWN, PG_DEGRADED, MON_DOWN, "
        "MDS_ALL_DOWN...) names what is wrong; `ceph health mute <code>` is no fix.",
        "A warning that is expected on this cluster belongs in the spec's `storage.allowed_health_warnings`.",
    )),
    Remedy("GC-CEPH-002", (
        "Run `ceph osd tree` and, on the host the message names, `systemctl status ceph-osd@<OSD id>` and "
        "`journalctl -u ceph-osd@<OSD id> -b | tail -50`.",
        "An OSD out but up: `ceph osd in <OSD id>`. A dead disk: replace it and recreate the OSD (deploy-ceph.yml).",
    )),
    Remedy("GC-CEPH-003", (
        "Run `ceph pg dump_stuck` and `ceph health detail`: stuck PGs usually follow a down OSD (GC-CEPH-002).",
        "Backfilling or recovering PGs settle by themselves: watch `ceph -s` and run verify again.",
    )),
    Remedy("GC-CEPH-004", (
        "Run `ceph quorum_status -f json-pretty` and `ceph mon stat`; on the monitor out of quorum "
        "`systemctl status ceph-mon@<its host name>` and its clock (`chronyc tracking`, GC-SYS-001: skew breaks "
        "quorum).",
    )),
    Remedy("GC-CEPH-005", (
        "Run `findmnt <the CephFS mount path>` and `journalctl -b | grep -i ceph` on {node}.",
        f"Rerun `{_converge('ceph_client')}`, which writes the node's own client key and mounts "
        "CephFS.",
        "Mounted but not writable: `ceph fs status` and `ceph health detail` (MDS or full pools).",
    )),
    Remedy("GC-CEPH-006", (
        "Run `sha256sum` on the same file from both nodes and `ceph fs status`; a difference points at a "
        "client caching issue: remount (`umount <mount path> && mount <mount path>`) and report it.",
    )),
    Remedy("GC-FLEET-001", (
        "Read the node's figure beside the fleet median in `summary.md` (Fleet comparison); the check's "
        "parameter names the figure and the message the GPU or peer it came from.",
        "Burn throughput: run `nvidia-smi -q -d PERFORMANCE,CLOCK,TEMPERATURE,POWER -i <GPU index>` on {node} for "
        "the GPU "
        "named: an active clock-throttle reason (thermal, power brake, HW slowdown) points at cooling or power; "
        "reseat or RMA a GPU that stays slow when cool.",
        "Intra-node all-reduce: compare `nvidia-smi topo -m` and `nvidia-smi nvlink -s` with a node that passes "
        "(GC-GPU-008); an NVLink down or a GPU on another PCIe root is the usual cause.",
        "RDMA: run `ibstat` and `perfquery -x` on {node} and compare rate, width and error counters with a "
        "peer that passes (GC-NET-004).",
        "A fleet of mixed hardware on purpose: raise the margin (`gpucluster verify --fleet-margin 0.2` or "
        "`gpucluster_conformance.fleet_margin` in the inventory) rather than ignoring the failure.",
    )),
    Remedy("GC-CEPH-007", (
        "Run `rados bench -p <pool> 10 write --no-cleanup` by hand, then `ceph -s` and `ceph osd perf` for slow "
        "OSDs; `ceph health detail` for full or read-only pools.",
    )),
)

REMEDIES: dict[str, Remedy] = {r.check_id: r for r in _REMEDIES}

# Not a check: every check of a node the run could not reach fails for this one reason.
UNREACHABLE = Remedy("unreachable", (
    "Run `ssh -F {run_dir}/ssh/probe/ssh_config {node} true` from this machine: the error names a refused "
    "connection, a timeout or a changed host key.",
    "A changed host key after a reinstall: remove the old one with the `ssh-keygen -R` command the message "
    "gives, then run verify again.",
))


def remedy(check_id: str) -> Remedy:
    try:
        return REMEDIES[check_id]
    except KeyError:
        raise KeyError(f"no remedy for check {check_id!r}") from None


def anchor(check_id: str) -> str:
    """The heading anchor of the check in docs/troubleshooting.md (GitHub's slug of the heading)."""
    return check_id.lower()


def markdown() -> str:
    """docs/troubleshooting.md: the registry's checks by area, each with its next steps."""
    out = [
        "# Troubleshooting",
        "",
        "<!-- Generated by `python -m gpucluster.conformance.remedies --markdown` from",
        "     gpucluster/conformance/remedies.py; edit the table there, not this file. -->",
        "",
        "## When verify fails",
        "",
        "`gpucluster verify` prints one line per finding: the checks and nodes it concerns, the cause "
        "and the measured figure against the expected one. Failures that share a root cause (the same "
        "slow node or link, the same message on several nodes, an unreachable node) are one finding. "
        "The run folder holds the rest:",
        "",
        "- `summary.md` and `summary.html`: the findings first, each with its next steps from the table below;",
        "- `results.json`: `findings` (cause, checks, figure, remedy, log) beside every check's result;",
        "- `logs/checks/<node>/<check>.log`: one per failing check, with the full message, its figures, "
        "pytest's report and the tail of the tool's own log (`logs/allreduce-*.log` for mpirun);",
        "- `junit.xml`: the same figures, log path and log tail in each failing test case's `<system-out>`.",
        "",
        "In a report the steps name the failing node, the inventory, the service, interface, rail, HCA, port or "
        "peer the failure names; below they are said in words (`<the failing node>` in a command).",
        "",
        "### A node is unreachable",
        "",
    ]
    out += [f"{i}. {step}" for i, step in enumerate(UNREACHABLE.steps, 1)]
    for area, title in checks.AREAS.items():
        ids = [c for c in checks.CHECKS.values() if c.area == area]
        if not ids:
            continue
        out += ["", f"### {title}"]
        for c in ids:
            out += ["", f"#### {c.id}", "", f"**{c.title}.** {c.must}", ""]
            out += [f"{i}. {step}" for i, step in enumerate(REMEDIES[c.id].steps, 1)]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gpucluster.conformance.remedies",
                                description="Print the remediation table.")
    p.add_argument("--markdown", action="store_true", help="as docs/troubleshooting.md")
    args = p.parse_args(argv)
    if args.markdown:
        sys.stdout.write(markdown())
    else:
        for r in _REMEDIES:
            sys.stdout.write(f"{r.check_id}: {r.first}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
