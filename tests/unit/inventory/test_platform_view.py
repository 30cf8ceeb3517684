"""The suite's view of a node's platform, read from the inventory the writer wrote."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpucluster.conformance.nodes import load_inventory, parse_inventory
from gpucluster.errors import InputError
from gpucluster.spec.models import Conformance

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "inventory"


def test_a_dgx_node_sees_its_platform_and_both_floors() -> None:
    inv = load_inventory(GOLDEN / "onprem-h100-ib.yml")
    node = inv.node("hgx-01")
    assert (node.profile_name, node.platform_name) == ("h100-sxm-8", "dgx-h100")
    assert node.hca_count == 8  # compute rails only: the 4 storage ports are not HCAs here
    rails = {r.name: r for r in node.platform.rails}
    assert rails["compute"].devices == ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10",
                                        "mlx5_11"]
    assert (rails["storage"].role, rails["compute"].pcie_generation, rails["compute"].rate_gbps) == ("storage", 5, 400)
    # The profile's floors first (the GPUs'), then the platform's (the network's).
    assert node.floor("allreduce_intra_busbw_gbps") == 460.0
    assert node.floor("allreduce_intra_verdict_bytes") == 8 << 30
    assert node.floor("rdma_write_bw_gbps") == 380.0
    assert node.floor("allreduce_inter_verdict_bytes") == 8 << 30
    assert node.floor("no_such_floor") is None
    assert node.profile.gpu.pcie_generation == 5
    assert inv.conformance == Conformance(dcgm_diag_level=2, fleet_margin=0.1)


def test_a_storage_node_has_no_hcas_and_no_network_floors() -> None:
    inv = load_inventory(GOLDEN / "onprem-h100-ib.yml")
    node = inv.node("cp-01")
    assert (node.platform_name, node.hca_count, node.floor("rdma_write_bw_gbps")) == ("server-ethernet", 0, None)


def test_an_efa_node_counts_its_efa_devices() -> None:
    node = load_inventory(GOLDEN / "aws-h100.yml").node("gpu-1")
    assert (node.platform_name, node.hca_count, node.floor("allreduce_inter_busbw_gbps")) == ("aws-p5-48xlarge", 32,
                                                                                                340.0)


def test_a_host_naming_an_unknown_platform_is_refused() -> None:
    data = yaml.safe_load((GOLDEN / "lab.yml").read_text().replace("!unsafe ", ""))
    data["all"]["hosts"]["gpu-1"]["gpucluster_platform"] = "nope"
    with pytest.raises(InputError) as err:
        parse_inventory(data, "inv.yml")
    assert "all.hosts.gpu-1.gpucluster_platform: 'nope' is not in all.vars.gpucluster_platforms" in err.value.problems
