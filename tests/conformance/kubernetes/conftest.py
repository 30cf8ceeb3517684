"""Kubernetes checks run from the controller with kubectl against the cluster's kubeconfig.

They run only where a kubeconfig is given (``GPUCLUSTER_KUBECONFIG``, e.g. the admin.conf
that the kubernetes_control_plane role fetches) and kubectl is on PATH; otherwise each one
is skipped with that reason.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml


@dataclass(frozen=True)
class Kube:
    kubeconfig: Path
    kubectl: str
    namespace: str = "gpucluster-conformance"

    def run(self, *args: str, stdin: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self.kubectl, "--kubeconfig", str(self.kubeconfig), *args], input=stdin,
                              capture_output=True, text=True, timeout=timeout, check=False)

    def json(self, *args: str) -> Any:
        res = self.run(*args, "-o", "json")
        if res.returncode != 0:
            pytest.fail(f"kubectl {' '.join(args)} failed: {res.stderr.strip()[-500:]}")
        return json.loads(res.stdout)

    def apply(self, docs: list[dict[str, Any]]) -> None:
        res = self.run("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
        if res.returncode != 0:
            pytest.fail(f"kubectl apply failed: {res.stderr.strip()[-500:]}")

    def delete(self, docs: list[dict[str, Any]]) -> None:
        self.run("delete", "--ignore-not-found", "--wait=false", "-f", "-", stdin=yaml.safe_dump_all(docs))


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
