"""stacks/kubernetes under Pulumi mocks: chart versions and values, CRD ordering, storage classes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulumi
import pytest

from gpucluster.errors import InputError
from gpucluster.kube.schema import validate_manifests
from gpucluster.spec import load_bom, load_spec

REPO = Path(__file__).resolve().parents[3]
FSID = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"


class Mocks(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.resources: list[pulumi.runtime.MockResourceArgs] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        self.resources.append(args)
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        return {}, None


DEPENDENCIES: dict[str, list[str]] = {}
_register = pulumi.runtime.mocks.MockMonitor.RegisterResource


def _recording_register(self: Any, request: Any) -> Any:
    # The mock monitor sees each resource's explicit dependencies (URNs): record them by name.
    DEPENDENCIES[request.name] = [urn.rsplit("::", 1)[-1] for urn in request.dependencies]
    return _register(self, request)


pulumi.runtime.mocks.MockMonitor.RegisterResource = _recording_register  # type: ignore[method-assign]


def _stack_with_gpu_mode(stack: str, mode: str) -> Path:
    """A copy of an example stack whose spec says kubernetes.gpu_mode MODE."""
    import tempfile

    import yaml

    data = yaml.safe_load((REPO / stack).read_text())
    data["config"]["gpucluster:kubernetes"]["gpu_mode"] = mode
    path = Path(tempfile.mkdtemp(prefix="kube-layer-")) / stack
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _run(stack: str, spec_gpu_mode: str | None = None, **cfg: Any) -> tuple[Mocks, dict[str, pulumi.Resource]]:
    from stacks.kubernetes.config import KubeStackConfig
    from stacks.kubernetes.program import build

    DEPENDENCIES.clear()
    mocks = Mocks()
    pulumi.runtime.set_mocks(mocks, preview=False)
    path = _stack_with_gpu_mode(stack, spec_gpu_mode) if spec_gpu_mode else REPO / stack
    cluster = load_spec(path)
    config = KubeStackConfig(stack_file=str(path), kubeconfig="/dev/null", **cfg)
    out: dict[str, pulumi.Resource] = {}

    @pulumi.runtime.test  # type: ignore[misc]
    def program() -> None:
        out.update(build(cluster, config))

    program()
    return mocks, out


def _of(mocks: Mocks, typ: str) -> list[pulumi.runtime.MockResourceArgs]:
    return [r for r in mocks.resources if r.typ == typ]


def test_roce_cluster_has_gpu_operator_rdma_ceph_and_quotas() -> None:
    mocks, _ = _run("Pulumi.onprem-h100-roce.yaml", ceph_fsid=FSID, ceph_user_key="AQBkey==")
    releases = {r.inputs["name"]: r.inputs for r in _of(mocks, "kubernetes:helm.sh/v3:Release")}
    assert set(releases) == {"gpu-operator", "network-operator", "ceph-csi-rbd", "ceph-csi-cephfs"}
    gpu = releases["gpu-operator"]
    assert gpu["version"] == "v25.3.2"
    assert gpu["values"]["driver"]["enabled"] is False
    assert gpu["values"]["toolkit"]["enabled"] is False
    assert releases["network-operator"]["version"] == "25.4.0"
    assert releases["ceph-csi-rbd"]["version"] == "3.14.1"
    assert {r["repositoryOpts"]["repo"] for r in releases.values()} == {
        "https://helm.ngc.nvidia.com/nvidia", "https://ceph.github.io/csi-charts"}


def test_nic_cluster_policy_waits_for_the_operator_that_installs_its_crd() -> None:
    mocks, _ = _run("Pulumi.onprem-h100-roce.yaml", ceph_fsid=FSID, ceph_user_key="k")
    policy = _of(mocks, "kubernetes:mellanox.com/v1alpha1:NicClusterPolicy")
    assert len(policy) == 1
    assert "rdma-release" in DEPENDENCIES["rdma-policy"]
    # and the storage classes wait for the CSI charts and their secret
    assert {"ceph-csi-ceph-csi-rbd", "ceph-csi-secret"} <= set(DEPENDENCIES["ceph-csi-ceph-rbd"])
    spec = policy[0].inputs["spec"]["rdmaSharedDevicePlugin"]
    assert spec["version"] == "network-operator-v25.4.0"
    assert '"ether"' in spec["config"]  # RoCE: Ethernet link layer


def test_storage_classes_point_at_the_ceph_cluster() -> None:
    mocks, _ = _run("Pulumi.onprem-h100-roce.yaml", ceph_fsid=FSID, ceph_user_key="k")
    classes = {r.inputs["metadata"]["name"]: r.inputs for r in _of(mocks, "kubernetes:storage.k8s.io/v1:StorageClass")}
    assert set(classes) == {"ceph-rbd", "ceph-cephfs"}
    rbd = classes["ceph-rbd"]
    assert rbd["provisioner"] == "rbd.csi.ceph.com"
    assert rbd["parameters"]["clusterID"] == FSID
    assert rbd["parameters"]["pool"] == "rbd"
    assert rbd["parameters"]["csi.storage.k8s.io/node-stage-secret-namespace"] == "ceph-csi"
    assert classes["ceph-cephfs"]["parameters"]["fsName"] == "cephfs"
    csi = next(r for r in _of(mocks, "kubernetes:helm.sh/v3:Release") if r.inputs["name"] == "ceph-csi-rbd")
    # Monitors on the management network (storage.public_network) of stor-01..03.
    assert csi.inputs["values"]["csiConfig"][0]["monitors"] == ["10.10.0.14:6789", "10.10.0.15:6789", "10.10.0.16:6789"]


def test_priority_classes_and_gpu_quotas() -> None:
    mocks, _ = _run("Pulumi.onprem-h100-roce.yaml", ceph_fsid=FSID, ceph_user_key="k", gpu_quotas={"team-a": 8})
    pcs = {r.inputs["metadata"]["name"]: r.inputs["value"]
           for r in _of(mocks, "kubernetes:scheduling.k8s.io/v1:PriorityClass")}
    assert pcs["gpucluster-production"] > pcs["gpucluster-experiments"]
    quotas = _of(mocks, "kubernetes:core/v1:ResourceQuota")
    assert [q.inputs["spec"]["hard"] for q in quotas] == [{"requests.nvidia.com/gpu": "8"}]


def test_node_labels_come_from_the_profile() -> None:
    mocks, _ = _run("Pulumi.onprem-h100-roce.yaml", ceph_fsid=FSID, ceph_user_key="k")
    patches = {r.inputs["metadata"]["name"]: r.inputs["metadata"]["labels"]
               for r in _of(mocks, "kubernetes:core/v1:NodePatch")}
    assert patches["hgx-01"]["gpucluster.io/gpu-count"] == "8"
    assert patches["hgx-01"]["gpucluster.io/gpu"] == "true"
    assert patches["cp-01"]["gpucluster.io/gpu"] == "false"
    assert "stor-01" not in patches  # storage nodes are not Kubernetes nodes


def test_ethernet_cluster_has_no_rdma_plugin_and_device_plugin_mode() -> None:
    mocks, out = _run("Pulumi.aws-h100.yaml", spec_gpu_mode="device_plugin", ceph_fsid=FSID, ceph_user_key="k")
    assert "rdma" not in out  # EFA fabric: no RDMA shared device plugin
    releases = {r.inputs["name"]: r.inputs for r in _of(mocks, "kubernetes:helm.sh/v3:Release")}
    assert "nvidia-device-plugin" in releases and "gpu-operator" not in releases
    # No devicePluginChartVersion: the chart version is the bill of materials' pin.
    plugin = releases["nvidia-device-plugin"]
    assert plugin["chart"] == "nvidia-device-plugin"
    assert plugin["version"] == load_bom().device_plugin.version == "0.17.1"
    assert plugin["repositoryOpts"]["repo"] == "https://nvidia.github.io/k8s-device-plugin"


def test_device_plugin_chart_version_config_overrides_the_bom() -> None:
    mocks, _ = _run("Pulumi.aws-h100.yaml", spec_gpu_mode="device_plugin", device_plugin_chart_version="0.17.0",
                    ceph_fsid=FSID, ceph_user_key="k")
    plugin = next(r for r in _of(mocks, "kubernetes:helm.sh/v3:Release") if r.inputs["name"] == "nvidia-device-plugin")
    assert plugin.inputs["version"] == "0.17.0"


def test_a_gpu_mode_other_than_the_specs_is_refused() -> None:
    # The roles chose dcgm-exporter's owner from the spec's mode: the layer may not install the other.
    with pytest.raises(InputError) as err:
        _run("Pulumi.aws-h100.yaml", gpu_mode="device_plugin", ceph_fsid=FSID, ceph_user_key="k")
    assert any(p.startswith("gpuclusterKube:gpuMode: 'device_plugin'") and "kubernetes.gpu_mode 'operator'" in p
               for p in err.value.problems)
    mocks, _ = _run("Pulumi.aws-h100.yaml", spec_gpu_mode="device_plugin", gpu_mode="device_plugin",
                    ceph_fsid=FSID, ceph_user_key="k")
    assert any(r.inputs["name"] == "nvidia-device-plugin" for r in _of(mocks, "kubernetes:helm.sh/v3:Release"))


def test_bad_device_plugin_chart_version_is_reported_with_its_key() -> None:
    from stacks.kubernetes.config import parse_config

    with pytest.raises(InputError) as err:
        parse_config({"stackFile": "/s.yaml", "kubeconfig": "/k", "gpuMode": "device_plugin",
                      "devicePluginChartVersion": "latest"}, REPO)
    assert err.value.problems == [
        "gpuclusterKube:devicePluginChartVersion: 'latest' does not match the pattern ^\\d+\\.\\d+\\.\\d+$"
    ]


def test_stack_file_and_kubeconfig_expand_home_then_resolve_under_the_stack_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`kubeconfig: ~/.local/state/...` (stacks/kubernetes/Pulumi.yaml's example) is the user's home,
    not a folder named `~` under stacks/kubernetes; a relative path is the stack folder's."""
    from stacks.kubernetes.config import parse_config

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    config = parse_config({"stackFile": "~/Pulumi.aws-h100.yaml",
                           "kubeconfig": "~/.local/state/gpucluster/clusters/aws/admin.conf"},
                          REPO / "stacks/kubernetes")
    assert config.stack_file == str(tmp_path / "home/Pulumi.aws-h100.yaml")
    assert config.kubeconfig == str(tmp_path / "home/.local/state/gpucluster/clusters/aws/admin.conf")
    relative = parse_config({"stackFile": "../../Pulumi.aws-h100.yaml", "kubeconfig": "/k"},
                            REPO / "stacks/kubernetes")
    assert (relative.stack_file, relative.kubeconfig) == (str(REPO / "Pulumi.aws-h100.yaml"), "/k")
    # An empty path is refused by the key, not read as the stack folder.
    with pytest.raises(InputError) as err:
        parse_config({"stackFile": "/s.yaml", "kubeconfig": ""}, REPO)
    assert err.value.problems[0].startswith("gpuclusterKube:kubeconfig:")


def test_missing_ceph_settings_are_reported_together() -> None:
    with pytest.raises(InputError) as err:
        _run("Pulumi.onprem-h100-roce.yaml")
    assert len(err.value.problems) == 2
    assert "cephFsid" in err.value.problems[0] and "cephUserKey" in err.value.problems[1]


@pytest.mark.parametrize("stack", ["Pulumi.onprem-h100-roce.yaml", "Pulumi.onprem-h100-ib.yaml"])
def test_every_native_manifest_the_layer_renders_is_valid_for_the_pinned_version(stack: str) -> None:
    from gpucluster.kube import manifests as m

    cluster = load_spec(REPO / stack)
    plan = m.ceph_csi_plan(cluster, FSID)
    docs = (
        m.priority_classes()
        + m.namespaces_and_quotas(m.default_gpu_quotas(cluster))
        + m.node_label_patches(cluster)
        + m.ceph_storage_classes(plan)
        + [m.ceph_secret(plan, "kubernetes", "k")]
    )
    validate_manifests(docs, cluster.kubernetes_version)
