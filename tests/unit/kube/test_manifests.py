"""gpucluster.kube.manifests: the GPU Operator's values against what the roles put on the node."""

from __future__ import annotations

from pathlib import Path

from gpucluster.kube.manifests import gpu_operator_release
from gpucluster.render.os_packages import DCGM_HOSTENGINE
from gpucluster.spec import load_spec

REPO = Path(__file__).resolve().parents[3]


def test_the_operators_dcgm_exporter_reads_the_nodes_host_engine() -> None:
    """Issue 24: the Operator's dcgm-exporter started its own host engine beside the node's nvidia-dcgm
    (gpu_validation). It connects to the node's (DCGM_REMOTE_HOSTENGINE_INFO at localhost, on which the
    Operator runs it on the host's network), the Operator's standalone DCGM pod stays off, and the
    chart's own exporter settings, replaced with the env list, are kept."""
    values = gpu_operator_release(load_spec(REPO / "Pulumi.onprem-h100-roce.yaml")).values
    assert values["dcgm"] == {"enabled": False}
    exporter = values["dcgmExporter"]
    assert exporter["enabled"] is True
    env = {e["name"]: e["value"] for e in exporter["env"]}
    assert env["DCGM_REMOTE_HOSTENGINE_INFO"] == DCGM_HOSTENGINE
    assert DCGM_HOSTENGINE.startswith("localhost")  # the Operator's condition for hostNetwork
    assert env["DCGM_EXPORTER_LISTEN"] == ":9400" and env["DCGM_EXPORTER_KUBERNETES"] == "true"
    assert env["DCGM_EXPORTER_COLLECTORS"] == "/etc/dcgm-exporter/dcp-metrics-included.csv"
