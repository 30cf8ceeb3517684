"""Helpers of the Kubernetes conformance checks (tests/conformance/kubernetes), importable in any
pytest import mode and from the installed suite alike."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml


@dataclass(frozen=True)
class Kube:
    """kubectl against one kubeconfig, failing the calling check when a call does."""

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
