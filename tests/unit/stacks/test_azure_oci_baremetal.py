from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml

from gpucluster.errors import InputError
from gpucluster.plan import Plan, plan_stack
from tests.unit.stacks.conftest import write_stack

AZ_VM = "azure:compute/linuxVirtualMachine:LinuxVirtualMachine"
AZ_VMSS = "azure:compute/orchestratedVirtualMachineScaleSet:OrchestratedVirtualMachineScaleSet"
OCI_INSTANCE = "oci:Core/instance:Instance"


def test_azure_gpu_vms_share_one_single_placement_group_scale_set(azure_plan: Plan) -> None:
    (vmss,) = azure_plan.by_type(AZ_VMSS)
    assert vmss.inputs["singlePlacementGroup"] is True
    assert vmss.inputs["platformFaultDomainCount"] == 1
    assert vmss.inputs["zones"] == ["1"]
    gpus = [r for r in azure_plan.by_type(AZ_VM) if r.tag("gpucluster-pool") == "gpu"]
    assert len(gpus) == 2
    for vm in gpus:
        assert vm.inputs["size"] == "Standard_ND96isr_H100_v5"
        assert vm.inputs["virtualMachineScaleSetId"] == vmss.id
        assert vm.inputs["osDisk"]["diskSizeGb"] == 256
        assert vm.inputs["disablePasswordAuthentication"] is True
        user_data = base64.b64decode(vm.inputs["customData"]).decode()
        assert "infiniband-mode: datagram" in user_data
        assert f"hostname: {vm.inputs['computerName']}" in user_data


def test_azure_storage_vms_spread_over_zones_with_static_addresses(azure_plan: Plan) -> None:
    ceph = [r for r in azure_plan.by_type(AZ_VM) if r.tag("gpucluster-pool") == "ceph"]
    assert sorted(r.inputs["zone"] for r in ceph) == ["1", "2", "3"]
    assert all("virtualMachineScaleSetId" not in r.inputs for r in ceph)
    nics = [r for r in azure_plan.by_type("azure:network/networkInterface:NetworkInterface")]
    assert all(n.inputs["acceleratedNetworkingEnabled"] is True for n in nics)
    addrs = sorted(n.inputs["ipConfigurations"][0]["privateIpAddress"] for n in nics)
    assert addrs == [f"10.50.0.{i}" for i in range(10, 16)]
    nodes = {n["name"]: n for n in azure_plan.outputs["nodes"]}
    assert nodes["gpu-1"]["fabric_ip"] == "10.51.0.10"
    assert nodes["ceph-3"]["failure_domain"] == "3"


def test_azure_refuses_a_gpu_pool_larger_than_one_placement_group(tmp_path: Path) -> None:
    doc = yaml.safe_load(Path("Pulumi.azure-h100.yaml").read_text())
    doc["config"]["gpucluster:node_pools"][0]["count"] = 101
    path = tmp_path / "Pulumi.big.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(InputError, match=r"node_pools\[0\].count: 101 GPU VMs exceed one placement group"):
        plan_stack(path)


def test_azure_needs_an_ssh_key(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="ssh_public_key"):
        plan_stack(write_stack(tmp_path, "azure-h100", {"target.ssh_public_key": None}))


def test_oci_gpu_instances_join_one_compute_cluster(oci_plan: Plan) -> None:
    (cc,) = oci_plan.by_type("oci:Core/computeCluster:ComputeCluster")
    gpus = [r for r in oci_plan.by_type(OCI_INSTANCE) if r.tag("gpucluster-pool") == "gpu"]
    assert [r.inputs["shape"] for r in gpus] == ["BM.GPU.H100.8"] * 2
    assert {r.inputs["computeClusterId"] for r in gpus} == {cc.id}
    assert {r.inputs["sourceDetails"]["bootVolumeSizeInGbs"] for r in gpus} == {"512"}
    # The stack file's image_id, not a lookup.
    assert {r.inputs["sourceDetails"]["sourceId"] for r in gpus} == {
        "ocid1.image.oc1.iad.aaaaaaaaplaceholderreplacewithyourimageocid"}


def test_oci_exports_no_fabric_address_for_ports_ocis_image_addresses(oci_plan: Plan) -> None:
    """OCI's image addresses the 16 RDMA ports itself (platform oci-bm-gpu-h100-8, addressing
    provider): no spec address is exported for a port nobody would put it on, and the inventory
    names no interface the roles would configure."""
    gpus = [n for n in oci_plan.outputs["nodes"] if n["pool"] == "gpu"]
    assert gpus and all(n["fabric_ip"] is None and n["fabric_interface"] is None for n in gpus)


def test_oci_storage_instances_over_fault_domains(oci_plan: Plan) -> None:
    ceph = sorted((r for r in oci_plan.by_type(OCI_INSTANCE) if r.tag("gpucluster-pool") == "ceph"),
                  key=lambda r: r.name)
    assert [r.inputs["faultDomain"] for r in ceph] == ["FAULT-DOMAIN-1", "FAULT-DOMAIN-2", "FAULT-DOMAIN-3"]
    assert all("computeClusterId" not in r.inputs for r in ceph)
    assert [r.inputs["createVnicDetails"]["privateIp"] for r in ceph] == ["10.60.0.12", "10.60.0.13", "10.60.0.14"]


def test_bare_metal_machines_carry_bmc_macs_and_rendered_user_data(ib_plan: Plan) -> None:
    machines = {r.inputs["hostname"]: r for r in ib_plan.by_type("gpucluster:baremetal:Machine")}
    assert len(machines) == 8
    hgx = machines["hgx-01"].inputs
    assert (hgx["bmcAddress"], hgx["managementMac"], hgx["rack"]) == ("10.9.0.11", "3c:ec:ef:00:00:11", "r1")
    assert hgx["userData"].startswith("#cloud-config\n")
    network = yaml.safe_load(hgx["networkConfig"])
    assert network["ethernets"]["mgmt0"]["addresses"] == ["10.10.0.10/22"]
    # The IPoIB interface as DGX OS names it (the platform's netdev for mlx5_0), never ib0.
    assert network["ethernets"]["ibp24s0"]["addresses"] == ["10.20.0.10/22"]
    assert network["ethernets"]["ibp24s0"]["match"] == {"name": "ibp24s0"} and "ib0" not in network["ethernets"]
    stor = yaml.safe_load(machines["stor-01"].inputs["networkConfig"])
    assert list(stor["ethernets"]) == ["mgmt0", "ibp65s0"]  # the pool's fabric_interface
    assert list(yaml.safe_load(machines["cp-01"].inputs["networkConfig"])["ethernets"]) == ["mgmt0"]


def test_bare_metal_fabric_describes_subnet_managers_and_partitions(ib_plan: Plan, roce_plan: Plan) -> None:
    (ib,) = ib_plan.by_type("gpucluster:baremetal:Fabric")
    assert ib.inputs["subnetManagers"] == ["stor-01", "stor-02"]
    assert [p["pkey"] for p in ib.inputs["partitions"]] == ["0x7fff", "0x0101"]
    (roce,) = roce_plan.by_type("gpucluster:baremetal:Fabric")
    assert roce.inputs["roceQos"] == {"dscp_trust": True, "pfc_priority": 3, "ecn": True, "traffic_class": 106}
    interfaces = {n["name"]: n["fabric_interface"] for n in ib_plan.outputs["nodes"]}
    assert interfaces == {**{f"hgx-0{i}": "ibp24s0" for i in range(1, 5)},
                          **{f"stor-0{i}": "ibp65s0" for i in range(1, 4)}, "cp-01": None}
    roce_ifaces = {n["name"]: n["fabric_interface"] for n in roce_plan.outputs["nodes"] if n["pool"] == "hgx"}
    assert set(roce_ifaces.values()) == {"enp24s0np0"}


def test_bare_metal_autoinstall(tmp_path: Path) -> None:
    plan = plan_stack(write_stack(tmp_path, "onprem-h100-ib", {"target.provisioning": "autoinstall"}))
    machine = plan.by_type("gpucluster:baremetal:Machine")[0]
    doc = yaml.safe_load(machine.inputs["userData"])
    assert doc["autoinstall"]["version"] == 1
    assert machine.inputs.get("networkConfig") is None  # None props are not sent


def test_oci_manages_the_vcns_default_security_list_with_no_ingress(oci_plan: Plan) -> None:
    """OCI puts SSH from 0.0.0.0/0 into a new VCN's default security list, which every subnet of the
    stack takes: the stack manages that list, empty of ingress, so only the NSG admits anything."""
    (vcn,) = oci_plan.by_type("oci:Core/vcn:Vcn")
    (default,) = oci_plan.by_type("oci:Core/defaultSecurityList:DefaultSecurityList")
    assert default.inputs["manageDefaultResourceId"] == vcn.state["defaultSecurityListId"]
    assert default.inputs.get("ingressSecurityRules", []) == []
    assert [r["destination"] for r in default.inputs["egressSecurityRules"]] == ["0.0.0.0/0"]
    assert all("securityListIds" not in s.inputs for s in oci_plan.by_type("oci:Core/subnet:Subnet"))
    assert {p.rule: p.status for p in oci_plan.policy}["no-public-management-port"] == "pass"
