"""The shipped platforms: the network shapes, each figure from its vendor's page (URL in the file)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpucluster.errors import InputError
from gpucluster.spec.loader import PLATFORM_DIR, load_platforms, load_profiles
from gpucluster.spec.models import Platform, Rail, expand_devices


def _rails(name: str) -> dict[str, tuple[str, str, int, int, list[str], str]]:
    return {r.name: (r.kind, r.role, r.count, r.rate_gbps, r.device_names(), r.addressing)
            for r in load_platforms()[name].rails}


# (platform, rail) -> (kind, role, count, rate Gb/s, devices, addressing), and the URL the file cites.
FIGURES = {
    ("aws-p5-48xlarge", "efa"): (("efa", "compute", 32, 100, [], "none"),
                                 "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html"),
    ("aws-p5en-48xlarge", "efa"): (("efa", "compute", 16, 200, [], "none"),
                                   "https://aws.amazon.com/ec2/instance-types/p5/"),
    ("aws-p4d-24xlarge", "efa"): (("efa", "compute", 4, 100, [], "none"),
                                  "https://aws.amazon.com/blogs/compute/amazon-ec2-p4d-instances-deep-dive/"),
    ("aws-g6e-48xlarge", "efa"): (("efa", "compute", 4, 100, [], "none"),
                                  "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html"),
    ("azure-nd96isr-h100-v5", "ib"): (
        ("infiniband", "compute", 8, 400, [f"mlx5_ib{i}" for i in range(8)], "shared_subnet"),
        "https://learn.microsoft.com/en-us/azure/virtual-machines/sizes/gpu-accelerated/ndh100v5-series"),
    ("azure-nd96isr-h100-v5", "frontend"): (
        ("ethernet", "frontend", 1, 80, ["mlx5_an0"], "shared_subnet"),
        "https://learn.microsoft.com/en-us/azure/virtual-machines/sizes/gpu-accelerated/ndh100v5-series"),
    ("oci-bm-gpu-h100-8", "rdma"): (
        ("roce", "compute", 16, 200, [f"mlx5_{i}" for i in (0, 1, *range(3, 11), *range(12, 18))], "provider"),
        "https://docs.oracle.com/en-us/iaas/Content/Compute/References/computeshapes.htm"),
    ("dgx-h100", "compute"): (
        ("infiniband", "compute", 8, 400, [f"mlx5_{i}" for i in (0, 3, 4, 5, 6, 9, 10, 11)], "shared_subnet"),
        "https://docs.nvidia.com/dgx/dgxh100-user-guide/introduction-to-dgxh100.html"),
    ("dgx-h100", "storage"): (
        ("ethernet", "storage", 2, 400, ["mlx5_2", "mlx5_8"], "none"),
        "https://docs.nvidia.com/dgx-basepod/deployment-guide-dgx-basepod/latest/network-overview.html"),
    ("dgx-h100", "storage-ib"): (
        ("infiniband", "storage", 2, 400, ["mlx5_1", "mlx5_7"], "none"),
        "https://docs.nvidia.com/dgx-basepod/deployment-guide-dgx-basepod/latest/network-overview.html"),
    ("lab", "fabric"): (("ethernet", "storage", 1, 10, ["eth1"], "shared_subnet"), "drivers/net/veth.c"),
    # The most a lab node may have; the spec's target.rails keeps the first N.
    ("lab", "rail"): (("ethernet", "compute", 8, 10, [f"enp{16 * (i + 1)}s0np0" for i in range(8)], "subnet_per_rail"),
                      "drivers/net/veth.c"),
    ("lab-cpu", "fabric"): (("ethernet", "storage", 1, 10, ["eth1"], "shared_subnet"), "drivers/net/veth.c"),
}


@pytest.mark.parametrize(("platform", "rail"), sorted(FIGURES))
def test_rail_figures_are_the_vendors(platform: str, rail: str) -> None:
    want, url = FIGURES[(platform, rail)]
    assert _rails(platform)[rail] == want
    assert url in (PLATFORM_DIR / f"{platform}.yaml").read_text()


def test_aggregate_bandwidth_is_the_vendors() -> None:
    """The per-rail rates add up to each shape's published total."""
    total = {name: sum(r.count * r.rate_gbps for r in p.compute_rails()) for name, p in load_platforms().items()}
    assert total["aws-p5-48xlarge"] == total["aws-p5en-48xlarge"] == 3200
    assert total["azure-nd96isr-h100-v5"] == total["oci-bm-gpu-h100-8"] == total["dgx-h100"] == 3200
    assert total["aws-p4d-24xlarge"] == total["aws-g6e-48xlarge"] == 400


def test_efa_only_interfaces_have_no_address() -> None:
    for platform in load_platforms().values():
        for rail in platform.rails:
            if rail.kind == "efa":
                assert rail.addressing == "none", platform.name


def test_shapes_carry_the_right_gpus() -> None:
    platforms, profiles = load_platforms(), load_profiles()
    assert platforms["aws-p4d-24xlarge"].profiles == ["a100-40gb-sxm-8"]
    assert platforms["aws-p4de-24xlarge"].profiles == ["a100-sxm-8"]
    assert platforms["aws-g6e-48xlarge"].profiles == ["l40s-pcie"]
    assert platforms["aws-p5en-48xlarge"].profiles == ["h200-sxm-8"]
    for platform in platforms.values():
        assert set(platform.profiles) <= set(profiles), platform.name


def test_rdma_platforms_judge_inter_node_all_reduce_at_8_gib_or_more() -> None:
    for platform in load_platforms().values():
        if platform.hca_count:
            assert (platform.floors.allreduce_inter_verdict_bytes or 0) >= 8 << 30, platform.name


def test_hca_count_is_compute_rdma_rails_only() -> None:
    platforms = load_platforms()
    assert platforms["dgx-h100"].hca_count == 8  # the 4 storage ports are not counted
    assert platforms["azure-nd96isr-h100-v5"].hca_count == 8  # the frontend VF is not
    assert platforms["aws-p5-48xlarge"].hca_count == platforms["aws-p5-48xlarge"].efa_interfaces == 32
    assert platforms["lab"].hca_count == 0
    assert platforms["azure-nd96isr-h100-v5"].subnet_manager == "provider"


def test_device_ranges_expand_once() -> None:
    assert expand_devices(["mlx5_ib{0..2}", "mlx5_an0"]) == ["mlx5_ib0", "mlx5_ib1", "mlx5_ib2", "mlx5_an0"]
    assert expand_devices(["mlx5_{10..11}"]) == ["mlx5_10", "mlx5_11"]
    with pytest.raises(ValueError, match="backwards"):
        expand_devices(["mlx5_{3..1}"])


def _platform(**rail: object) -> dict[str, object]:
    base = {"name": "c", "kind": "infiniband", "role": "compute", "count": 2, "rate_gbps": 400,
            "devices": ["mlx5_{0..1}"], "addressing": "none"}
    return {"name": "p", "description": "d", "targets": ["baremetal"], "rails": [{**base, **rail}],
            "floors": {"rdma_write_bw_gbps": None, "allreduce_inter_busbw_gbps": None,
                       "allreduce_inter_verdict_bytes": None}}


@pytest.mark.parametrize(("rail", "message"), [
    ({"count": 3}, "count 3 but devices name 2"),
    ({"devices": None}, "names its devices"),
    ({"devices": ["mlx5_0", "mlx5_0"]}, "named twice"),
])
def test_bad_rails_are_refused(rail: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Platform.model_validate(_platform(**rail))


def test_a_bad_platform_file_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "broken.yaml").write_text("name: broken\ndescription: x\ntargets: [mars]\nfloors: {}\n")
    with pytest.raises(InputError) as err:
        load_platforms.__wrapped__(tmp_path)
    assert all(p.startswith("broken.yaml: platform.") for p in err.value.problems)


def test_no_platform_asks_more_of_nodes_together_than_of_each_alone() -> None:
    """A ring across nodes also crosses each node's GPUs: the inter-node floor of a platform can
    never exceed the intra-node floor of a GPU profile it carries (a floor above it fails every
    healthy node, as 40 GB/s did on g6e's PCIe-only L40S)."""
    from gpucluster.spec.loader import load_profiles

    profiles = load_profiles()
    checked = 0
    for name, platform in load_platforms().items():
        inter = platform.floors.allreduce_inter_busbw_gbps
        for profile in platform.profiles:
            intra = profiles[profile].floors.allreduce_intra_busbw_gbps
            if inter is not None and intra is not None:
                checked += 1
                assert inter <= intra, f"{name}: inter-node floor {inter} GB/s > {profile}'s intra-node {intra} GB/s"
    assert checked >= 8


# --- each port's network interface, as the platform's image names it ------------------------------

# DGX H100/H200 User Guide, "Network Modules" table (port, ConnectX device, default RDMA device):
# https://docs.nvidia.com/dgx/dgxh100-user-guide/introduction-to-dgxh100.html
DGX_H100_IPOIB = {"mlx5_11": "ibp220s0", "mlx5_6": "ibp154s0", "mlx5_10": "ibp206s0", "mlx5_9": "ibp192s0",
                  "mlx5_4": "ibp79s0", "mlx5_3": "ibp64s0", "mlx5_5": "ibp94s0", "mlx5_0": "ibp24s0"}


def _compute(name: str) -> Any:
    platform = load_platforms()[name]
    return next(r for r in platform.rails if r.role == "compute")


def test_dgx_h100_names_each_compute_ports_ipoib_interface_as_nvidias_table_does() -> None:
    rail = _compute("dgx-h100")
    assert dict(zip(rail.device_names(), rail.netdev_names(), strict=True)) == DGX_H100_IPOIB


def test_dgx_h100_in_ethernet_mode_names_the_same_pci_paths_with_the_port_name() -> None:
    """systemd.net-naming-scheme(7), ID_NET_NAME_PATH: the same p<bus>s<slot> path, prefix en for
    Ethernet (ib for IPoIB), and n<phys_port_name> (mlx5's p0) for an Ethernet port."""
    rail = _compute("dgx-h100-roce")
    expected = {dev: "en" + ib.removeprefix("ib") + "np0" for dev, ib in DGX_H100_IPOIB.items()}
    assert dict(zip(rail.device_names(), rail.netdev_names(), strict=True)) == expected


def test_netdevs_name_one_interface_per_device() -> None:
    with pytest.raises(ValueError, match="netdevs name 1 interfaces for 2 devices"):
        Rail(name="r", kind="infiniband", role="compute", count=2, rate_gbps=400, devices=["mlx5_{0..1}"],
             netdevs=["ibp24s0"], addressing="shared_subnet")


def test_each_inter_node_floor_names_the_algorithm_the_measurement_pins() -> None:
    """Issue 24: the inter-node floors were justified with NVLS/tree figures and measured with Ring.
    Every platform with an all-reduce floor says, beside it, which algorithm it holds for; on GPU
    nodes that is the one GC-AR-002/003 pin (run_nccl_tests.INTER_ENV, NCCL_ALGO), and a sample the
    file cites (a figure under NCCL's own algorithm choice) is said to be no ring's."""
    from gpucluster.conformance.run_nccl_tests import INTER_ENV, INTER_PINNED

    assert "NCCL_ALGO" in INTER_PINNED and INTER_ENV["NCCL_ALGO"] == "Ring"
    profiles = load_profiles()
    for name, platform in load_platforms().items():
        if platform.floors.allreduce_inter_busbw_gbps is None:
            continue
        block = (PLATFORM_DIR / f"{name}.yaml").read_text().split("\nfloors:\n", 1)[1]
        said = [line for line in block.splitlines() if line.startswith("  # algorithm (the all-reduce floors): ")]
        assert len(said) == 1, f"{name}: no '# algorithm' line beside its floors"
        gpus = any(profiles[p].gpu.count > 0 for p in platform.profiles)
        if gpus:
            assert f"Ring, the one GC-AR-002/003 pin (NCCL_ALGO={INTER_ENV['NCCL_ALGO']}," in said[0], name
        # A measured figure cited for the floor (shared/samples) says whether it was a ring's.
        if "nccl_allreduce_" in block:
            assert "not a ring" in block, f"{name}: cites an all-reduce sample without saying it is no Ring figure"
