"""The Kubernetes layer: add-ons on a running cluster, from the cluster's stack file.

Run from this folder: ``pulumi up -s <stack>`` with ``gpuclusterKube:stackFile`` and
``gpuclusterKube:kubeconfig`` set (see Pulumi.yaml). Only composes; see program.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # the repository root, for `stacks.kubernetes`

from gpucluster.spec import load_spec  # noqa: E402
from stacks.kubernetes.config import parse_config  # noqa: E402
from stacks.kubernetes.program import build  # noqa: E402

_cfg = pulumi.Config("gpuclusterKube")
_raw = {
    key: _cfg.get_object(key)
    for key in ("stackFile", "kubeconfig", "gpuMode", "devicePluginChartVersion", "cephFsid", "cephUser", "gpuQuotas")
}
# Read as plain text here; the Secret resource wraps it in pulumi.Output.secret again.
_raw["cephUserKey"] = _cfg.get("cephUserKey")
cfg = parse_config(_raw, HERE)
cluster = load_spec(cfg.stack_file)
# The kubeconfig holds the cluster-admin key: keep it out of the state in plain text.
provider = k8s.Provider("cluster", kubeconfig=pulumi.Output.secret(Path(cfg.kubeconfig).read_text(encoding="utf-8")))
resources = build(cluster, cfg, provider)
pulumi.export("cluster", cluster.name)
pulumi.export("components", sorted(resources))
