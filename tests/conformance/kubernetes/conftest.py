"""Kubernetes checks run from the controller with kubectl against the cluster's kubeconfig.

They run only where a kubeconfig is given (``GPUCLUSTER_KUBECONFIG``, e.g. the admin.conf
that the kubernetes_control_plane role fetches) and kubectl is on PATH; otherwise each one
is skipped with that reason. The kubectl helper lives in :mod:`gpucluster.kube.suite`.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from gpucluster.kube.suite import Kube


@pytest.fixture(scope="session")
def kube() -> Kube:
    path = os.environ.get("GPUCLUSTER_KUBECONFIG")
    if not path:
        pytest.skip("no kubeconfig given (set GPUCLUSTER_KUBECONFIG): Kubernetes checks need a running cluster")
    if not Path(path).is_file():
        pytest.skip(f"kubeconfig {path} does not exist")
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not on PATH of the controller")
    k = Kube(Path(path), kubectl)
    k.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": k.namespace}}])
    return k
