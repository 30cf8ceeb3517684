"""gpucluster.render.nccl: NCCL's settings per fabric, and NCCL_IB_HCA's exact-match form."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpucluster.render.nccl import (
    EFA_RDMA_READ_INSTANCE_TYPES,
    NCCL_CONF_PATH,
    compute_hcas,
    ib_hca_value,
    nccl_settings,
    parse_nccl_conf,
    socket_ifname_problem,
    socket_ifname_selects,
    socket_ifname_value,
)
from gpucluster.spec.loader import load_platforms
from gpucluster.spec.models import Fabric, Platform

_FLOORS = {"rdma_write_bw_gbps": None, "allreduce_inter_busbw_gbps": None, "allreduce_inter_verdict_bytes": None}


def _profile(hcas: int, aws: str | None = None) -> Platform:
    """A platform as the inventory carries it: ``hcas`` compute ports named mlx5_0.. (exact names)."""
    rails = [{"name": "compute", "kind": "infiniband", "role": "compute", "count": hcas, "rate_gbps": 400,
              "devices": [f"mlx5_{i}" for i in range(hcas)], "addressing": "shared_subnet"}] if hcas else []
    return Platform.model_validate({"name": "test", "description": "", "targets": ["aws" if aws else "baremetal"],
                                    "rails": rails, "instance_types": {"aws": aws} if aws else {},
                                    "floors": _FLOORS})


def _fabric(kind: str, **extra: Any) -> Fabric:
    data = {"type": kind, "mtu": 4092, "management_cidr": "10.0.0.0/24", "fabric_cidr": "10.1.0.0/24",
            "ib_timeout": 20, "gid_index": None, "roce_qos": None, "socket_ifname": None, **extra}
    if kind not in ("infiniband", "roce", "efa", "ethernet"):
        # A type the model refuses, for the renderer's own refusal.
        return Fabric.model_construct(**data)
    return Fabric.model_validate(data)


def _selects(value: str, device: str, port: int = 1) -> bool:
    """Whether NCCL_IB_HCA=``value`` selects ``device`` port ``port``, by the rules NCCL documents:
    a leading ``=`` makes each token an exact name, otherwise a prefix; ``:n`` names a port
    (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-ib-hca)."""
    exact = value.startswith("=")
    for token in value.removeprefix("=").split(","):
        name, _, want_port = token.partition(":")
        if (device == name if exact else device.startswith(name)) and (not want_port or int(want_port) == port):
            return True
    return False


def test_ib_hca_names_each_rail_exactly_so_mlx5_1_is_not_mlx5_10() -> None:
    value = nccl_settings(_fabric("infiniband"), _profile(2), "ib0")["NCCL_IB_HCA"]
    assert value == "=mlx5_0:1,mlx5_1:1"
    assert _selects(value, "mlx5_1") and _selects(value, "mlx5_0")
    assert not _selects(value, "mlx5_10") and not _selects(value, "mlx5_11")
    # Without the "=", the same list would also take mlx5_10 (what NCCL's documentation warns of).
    assert _selects(value.removeprefix("="), "mlx5_10")


def test_twelve_rails_list_each_once_and_nothing_else() -> None:
    value = ib_hca_value(compute_hcas(_profile(12)))
    devices = [f"mlx5_{i}" for i in range(16)]
    assert [d for d in devices if _selects(value, d)] == devices[:12]
    assert not _selects(value, "mlx5_1", port=2)


def test_infiniband() -> None:
    assert nccl_settings(_fabric("infiniband"), _profile(8), "ib0") == {
        "NCCL_SOCKET_IFNAME": "=ib0",
        "NCCL_IB_HCA": "=" + ",".join(f"mlx5_{i}:1" for i in range(8)),
        "NCCL_IB_TIMEOUT": "20",
    }


def test_roce_adds_gid_index_and_traffic_class() -> None:
    fabric = _fabric("roce", gid_index=3, roce_qos={"dscp_trust": True, "pfc_priority": 3, "ecn": True,
                                                     "traffic_class": 106})
    got = nccl_settings(fabric, _profile(2), "ens1f0np0")
    assert got == {"NCCL_SOCKET_IFNAME": "=ens1f0np0", "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1",
                   "NCCL_IB_TIMEOUT": "20", "NCCL_IB_GID_INDEX": "3", "NCCL_IB_TC": "106"}


def test_efa_uses_the_plugin_not_the_ib_transport() -> None:
    got = nccl_settings(_fabric("efa"), _profile(8, aws="p5.48xlarge"), None)
    assert got == {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1"}
    assert not any(k.startswith("NCCL_IB_") for k in got)


def test_efa_device_rdma_only_where_the_instance_has_rdma_read() -> None:
    # g5: "RDMA read support: No" in AWS's EFA instance table; setting the variable there aborts.
    got = nccl_settings(_fabric("efa"), _profile(0, aws="g5.48xlarge"), "ens32")
    assert got == {"NCCL_SOCKET_IFNAME": "=ens32", "FI_PROVIDER": "efa"}
    assert {"p4d.24xlarge", "p5.48xlarge", "p5e.48xlarge"} <= EFA_RDMA_READ_INSTANCE_TYPES


def test_every_gpu_platform_on_aws_gets_device_rdma() -> None:
    """The AWS instance types of the GPU platforms (p4d, p4de, p5, p5en, g6e) all have EFA RDMA read."""
    for platform in load_platforms().values():
        aws = platform.instance_types.get("aws")
        if aws and platform.profiles:
            assert aws in EFA_RDMA_READ_INSTANCE_TYPES, f"{platform.name}: {aws}"


@pytest.mark.parametrize("name", sorted(load_platforms()))
def test_every_platform_names_its_compute_rails_only_and_exactly(name: str) -> None:
    """On every platform, NCCL_IB_HCA lists exactly its IB/RoCE compute devices, never a storage or
    frontend one, and no name in it selects another device by prefix (mlx5_1 and mlx5_10)."""
    platform = load_platforms()[name]
    every = [d for r in platform.rails for d in r.device_names()]
    compute = [d for r in platform.compute_rails() if r.kind in ("infiniband", "roce") for d in r.device_names()]
    kinds = {r.kind for r in platform.compute_rails()} & {"infiniband", "roce", "efa"} or {"ethernet"}
    for kind in kinds:
        got = nccl_settings(_fabric(kind), platform, None)
        if kind == "efa":
            assert got["FI_PROVIDER"] == "efa" and "NCCL_IB_HCA" not in got
            continue
        if not compute:
            assert "NCCL_IB_HCA" not in got
            continue
        value = got["NCCL_IB_HCA"]
        assert value.startswith("=")
        assert [d for d in every if _selects(value, d)] == compute, name


def test_ethernet_disables_ib_and_pins_the_socket_interface() -> None:
    assert nccl_settings(_fabric("ethernet"), _profile(0), "fab0") == {
        "NCCL_SOCKET_IFNAME": "=fab0", "NCCL_IB_DISABLE": "1"}


def test_the_spec_socket_ifname_wins_over_the_node_interface() -> None:
    got = nccl_settings(_fabric("ethernet", socket_ifname="bond0"), _profile(0), "fab0")
    assert got["NCCL_SOCKET_IFNAME"] == "=bond0"


def test_no_interface_known_leaves_nccl_to_choose() -> None:
    assert "NCCL_SOCKET_IFNAME" not in nccl_settings(_fabric("ethernet"), _profile(0), None)
    assert "NCCL_SOCKET_IFNAME" not in nccl_settings(_fabric("ethernet"), _profile(0), "")


@pytest.mark.parametrize(("fabric", "profile", "iface", "message"), [
    (_fabric("omnipath"), _profile(1), "ib0", "fabric type 'omnipath'"),
    (_fabric("infiniband"), _profile(1), "ib0; rm -rf /", "not an interface name"),
])
def test_bad_input_is_refused(fabric: Fabric, profile: Platform, iface: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        nccl_settings(fabric, profile, iface)


def test_bad_device_names_and_ports_are_refused() -> None:
    with pytest.raises(ValueError, match="not an RDMA device"):
        ib_hca_value(["mlx5_0,mlx5_1"])
    with pytest.raises(ValueError, match="at least one"):
        ib_hca_value([])
    with pytest.raises(ValueError, match="not an HCA port"):
        ib_hca_value(["mlx5_0"], port=0)
    with pytest.raises(ValueError, match="not an interface"):
        socket_ifname_value("=ib0")


def test_parse_keeps_the_exact_match_prefix() -> None:
    text = "#\n# managed\n#\nNCCL_IB_HCA==mlx5_0:1\n\nNCCL_SOCKET_IFNAME==ib0\nnot a setting\n"
    assert parse_nccl_conf(text) == {"NCCL_IB_HCA": "=mlx5_0:1", "NCCL_SOCKET_IFNAME": "=ib0"}


def test_the_conf_path_is_nccls() -> None:
    assert NCCL_CONF_PATH == "/etc/nccl.conf"


# `ip -j addr show` (iproute2 6.1.0) in a network namespace shaped like a lab GPU node: lo, eth0 (a
# veth whose peer is in another namespace, down, no address) and two rail veths with addresses.
IP_ADDR_SHOW = (
    '[{"ifindex":1,"ifname":"lo","flags":["LOOPBACK","UP","LOWER_UP"],"mtu":65536,"qdisc":"noqueue",'
    '"operstate":"UNKNOWN","group":"default","txqlen":1000,"link_type":"loopback","address":"00:00:00:00:00:00",'
    '"broadcast":"00:00:00:00:00:00","addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8,"scope":"host",'
    '"label":"lo","valid_life_time":4294967295,"preferred_life_time":4294967295},{"family":"inet6","local":"::1",'
    '"prefixlen":128,"scope":"host","valid_life_time":4294967295,"preferred_life_time":4294967295}]},'
    '{"ifindex":2,"link_index":3448,"ifname":"eth0","flags":["BROADCAST","MULTICAST"],"mtu":1500,"qdisc":"noop",'
    '"operstate":"DOWN","group":"default","txqlen":1000,"link_type":"ether","address":"86:54:ec:44:7b:16",'
    '"broadcast":"ff:ff:ff:ff:ff:ff","link_netnsid":0,"addr_info":[]},'
    '{"ifindex":3,"link":"enp16s0np0","ifname":"enp32s0np0","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"],'
    '"mtu":1500,"qdisc":"noqueue","operstate":"UP","group":"default","txqlen":1000,"link_type":"ether",'
    '"address":"12:03:7d:89:7a:87","broadcast":"ff:ff:ff:ff:ff:ff","addr_info":[{"family":"inet",'
    '"local":"10.5.3.10","prefixlen":24,"scope":"global","label":"enp32s0np0","valid_life_time":4294967295,'
    '"preferred_life_time":4294967295},{"family":"inet6","local":"fe80::1003:7dff:fe89:7a87","prefixlen":64,'
    '"scope":"link","tentative":true,"valid_life_time":4294967295,"preferred_life_time":4294967295}]},'
    '{"ifindex":4,"link":"enp32s0np0","ifname":"enp16s0np0","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"],'
    '"mtu":1500,"qdisc":"noqueue","operstate":"UP","group":"default","txqlen":1000,"link_type":"ether",'
    '"address":"c2:01:75:4c:e0:4b","broadcast":"ff:ff:ff:ff:ff:ff","addr_info":[{"family":"inet",'
    '"local":"10.5.2.10","prefixlen":24,"scope":"global","label":"enp16s0np0","valid_life_time":4294967295,'
    '"preferred_life_time":4294967295},{"family":"inet6","local":"fe80::c001:75ff:fe4c:e04b","prefixlen":64,'
    '"scope":"link","tentative":true,"valid_life_time":4294967295,"preferred_life_time":4294967295}]}]')
LAB_NODE = [link["ifname"] for link in json.loads(IP_ADDR_SHOW)]
AZURE_NODE = ["lo", "eth0", *(f"ib{i}" for i in range(8))]


@pytest.mark.parametrize(("value", "interfaces", "selected"), [
    # A prefix: every interface whose name begins with it ("eth : Use all interfaces starting with eth").
    ("enp", LAB_NODE, ["enp32s0np0", "enp16s0np0"]),
    ("ib", AZURE_NODE, [f"ib{i}" for i in range(8)]),
    ("ib1", [*AZURE_NODE, "ib10"], ["ib1", "ib10"]),
    # "=": exact names only ("=eth0 : Use only interface eth0").
    ("=enp16s0np0", LAB_NODE, ["enp16s0np0"]),
    ("=ib1", [*AZURE_NODE, "ib10"], ["ib1"]),
    ("=enp16s0", LAB_NODE, []),
    # "^": everything but ("^docker : Do not use any interface starting with docker").
    ("^docker,lo", [*LAB_NODE, "docker0"], ["eth0", "enp32s0np0", "enp16s0np0"]),
    ("^=enp16s0np0", LAB_NODE, ["lo", "eth0", "enp32s0np0"]),
    ("^enp,eth,lo", LAB_NODE, []),
    # Several entries, each prefix or exact alike; the renderer's lab rails; a port suffix dropped.
    ("=enp16s0np0,enp32s0np0", LAB_NODE, ["enp32s0np0", "enp16s0np0"]),
    ("=enp16s0np0,enp64s0np0", LAB_NODE, ["enp16s0np0"]),
    ("ib,eth", AZURE_NODE, ["eth0", *(f"ib{i}" for i in range(8))]),
    ("=ib0:1,ib1", AZURE_NODE, ["ib0", "ib1"]),
    # NCCL ignores a one-character value and matches every interface on a list without an entry.
    ("=", LAB_NODE, LAB_NODE),
    ("=,", LAB_NODE, LAB_NODE),
])
def test_socket_ifname_selects_as_nccl_reads_it(value: str, interfaces: list[str], selected: list[str]) -> None:
    assert socket_ifname_selects(value, interfaces) == selected


def test_an_include_list_that_matches_nothing_names_the_value_and_the_interfaces() -> None:
    assert socket_ifname_problem("=ib0", LAB_NODE) == (
        "NCCL_SOCKET_IFNAME==ib0 matches no interface of the node's (lo, eth0, enp32s0np0, enp16s0np0)")
    assert socket_ifname_problem("=enp16s0np0,enp64s0np0", LAB_NODE) is None
    assert socket_ifname_problem("ib", AZURE_NODE) is None
    assert socket_ifname_problem("^enp,eth,lo", LAB_NODE) == (
        "NCCL_SOCKET_IFNAME=^enp,eth,lo excludes every interface of the node's (lo, eth0, enp32s0np0, enp16s0np0)")
    assert socket_ifname_problem("=eth0", []) == "NCCL_SOCKET_IFNAME==eth0 matches no interface of the node's (none)"


def test_what_the_renderer_writes_selects_exactly_the_interfaces_it_names() -> None:
    """The exact form keeps ib1 from selecting ib10 (a prefix would), on the reader's side too."""
    for names in (["ib1"], ["enp16s0np0", "enp32s0np0"], ["eth0"]):
        present = [*AZURE_NODE, *LAB_NODE, "ib10", "enp16s0np0f1"]
        assert socket_ifname_selects(socket_ifname_value(names), present) == [n for n in present if n in names]
