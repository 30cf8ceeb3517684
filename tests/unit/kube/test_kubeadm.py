"""kubeadm configuration: single and HA control planes, joins, and clear errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpucluster.errors import InputError
from gpucluster.kube import kubeadm_plan, render_init_documents, render_join_document
from gpucluster.kube.kubeadm import KubeadmSettings
from gpucluster.spec import load_spec

REPO = Path(__file__).resolve().parents[3]
TOKEN = "abcdef.0123456789abcdef"
HASH = "sha256:" + "a" * 64
KEY = "b" * 64


def _ha(config: dict[str, Any]) -> None:
    config["gpucluster:node_pools"] = [p for p in config["gpucluster:node_pools"] if p["name"] != "cp"] + [
        {"name": "cp", "count": 3, "roles": ["control_plane"], "profile": "cpu-server"}
    ]
    nodes = config["gpucluster:target"]["nodes"]
    for i in (2, 3):
        nodes.append({"name": f"cp-0{i}", "pool": "cp", "bmc_address": f"10.9.0.3{i}",
                      "management_mac": f"3c:ec:ef:00:00:3{i}", "rack": "r3"})
    config["gpucluster:kubernetes"].update({"control_plane_ha": True, "api_vip": "10.10.0.5"})


def test_single_control_plane_init(repo: Path) -> None:
    plan = kubeadm_plan(load_spec(repo / "Pulumi.onprem-h100-roce.yaml"))
    init, cluster, kubelet = render_init_documents(plan, "cp-01")
    assert init["kind"] == "InitConfiguration" and init["apiVersion"] == "kubeadm.k8s.io/v1beta4"
    assert cluster["kubernetesVersion"] == "v1.33.4"
    assert cluster["controlPlaneEndpoint"] == f"{init['localAPIEndpoint']['advertiseAddress']}:6443"
    assert cluster["networking"] == {"podSubnet": "10.244.0.0/16", "serviceSubnet": "10.96.0.0/12",
                                     "dnsDomain": "cluster.local"}
    assert kubelet["cgroupDriver"] == "systemd" and kubelet["failSwapOn"] is True
    assert init["nodeRegistration"]["criSocket"] == "unix:///run/containerd/containerd.sock"
    assert "taints" not in init["nodeRegistration"]  # kubeadm's default control-plane taint stays


def test_ha_control_plane_uses_the_vip_and_joins_with_a_certificate_key(stack_file: Any) -> None:
    plan = kubeadm_plan(load_spec(stack_file("Pulumi.onprem-h100-roce.yaml", _ha)))
    assert plan.ha and [n.name for n in plan.control_planes] == ["cp-01", "cp-02", "cp-03"]
    _, cluster, _ = render_init_documents(plan, "cp-01")
    assert cluster["controlPlaneEndpoint"] == "10.10.0.5:6443"
    sans = cluster["apiServer"]["certSANs"]
    assert sans[0] == "10.10.0.5" and {"cp-01", "cp-02", "cp-03"} <= set(sans)
    join = render_join_document(plan, "cp-02", token=TOKEN, ca_cert_hash=HASH, certificate_key=KEY)
    assert join["controlPlane"]["certificateKey"] == KEY
    assert join["discovery"]["bootstrapToken"]["apiServerEndpoint"] == "10.10.0.5:6443"
    with pytest.raises(InputError, match="certificate_key"):
        render_join_document(plan, "cp-03", token=TOKEN, ca_cert_hash=HASH)


def test_worker_join(repo: Path) -> None:
    plan = kubeadm_plan(load_spec(repo / "Pulumi.onprem-h100-roce.yaml"))
    join = render_join_document(plan, "hgx-01", token=TOKEN, ca_cert_hash=HASH)
    assert "controlPlane" not in join
    assert join["discovery"]["bootstrapToken"]["caCertHashes"] == [HASH]
    args = {a["name"]: a["value"] for a in join["nodeRegistration"]["kubeletExtraArgs"]}
    assert args["node-labels"] == "gpucluster.io/pool=hgx,gpucluster.io/profile=h100-sxm-8"


def test_bad_secrets_are_named_never_echoed(repo: Path) -> None:
    plan = kubeadm_plan(load_spec(repo / "Pulumi.onprem-h100-roce.yaml"))
    with pytest.raises(InputError) as err:
        render_join_document(plan, "hgx-01", token="s3cret-token", ca_cert_hash="nope")
    assert len(err.value.problems) == 2
    assert "s3cret" not in str(err.value)


def test_init_only_on_the_first_control_plane_and_storage_nodes_are_not_kubernetes_nodes(repo: Path) -> None:
    plan = kubeadm_plan(load_spec(repo / "Pulumi.onprem-h100-roce.yaml"))
    with pytest.raises(InputError, match="first control-plane"):
        render_init_documents(plan, "hgx-01")
    with pytest.raises(InputError, match="not a kubeadm node"):
        plan.node("stor-01")


def test_plan_problems_are_collected() -> None:
    nodes = [{"name": "a", "address": "10.0.0.1", "control_plane": True},
             {"name": "b", "address": "10.0.0.2", "control_plane": True}]
    with pytest.raises(InputError) as err:
        KubeadmSettings.from_mapping({"cluster_name": "c", "kubernetes_version": "1.33", "pod_cidr": "10.244.0.0/33",
                                  "service_cidr": "10.96.0.0/12", "nodes": nodes})
    text = "\n".join(err.value.problems)
    assert "kubernetes_version" in text and "pod_cidr" in text and "api_vip" in text


def test_plan_round_trips_through_plain_data(repo: Path) -> None:
    plan = kubeadm_plan(load_spec(repo / "Pulumi.onprem-h100-ib.yaml"))
    assert KubeadmSettings.from_mapping(plan.as_dict()) == plan
