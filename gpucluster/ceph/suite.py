"""Helpers of the Ceph conformance checks (tests/conformance/ceph), importable in any pytest import mode."""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from gpucluster.spec.models import Storage


def storage_spec(node: Any) -> Storage:
    """The spec's storage section (the inventory's gpucluster_storage, as its model read it)."""
    spec: Storage | None = node.inv.storage
    if spec is None:
        pytest.skip("the inventory has no gpucluster_storage: the cluster has no Ceph")
    return spec


def require_admin(node: Any) -> None:
    """Cluster-wide checks run once, on the first monitor that holds the admin keyring."""
    for name in storage_spec(node).monitors:
        if name == node.name:
            if not node.run("test -r /etc/ceph/ceph.client.admin.keyring", timeout=20).ok:
                pytest.fail(f"{node.name} is a monitor without /etc/ceph/ceph.client.admin.keyring")
            return
        other = node.remote().__class__(name, node.ssh_config)
        if other.run("test -r /etc/ceph/ceph.client.admin.keyring", timeout=20).ok:
            pytest.skip(f"cluster-wide check: it runs on monitor {name}")
    pytest.skip("cluster-wide check: this node is not a monitor")


def ceph(node: Any, args: str, timeout: float = 60) -> str:
    res = node.run(f"ceph --connect-timeout 30 {args}", timeout=timeout)
    assert res.ok, f"ceph {args} on {node.name} exited {res.rc}: {(res.stderr or res.stdout).strip()[-500:]}"
    return str(res.stdout)


def quote(text: str) -> str:
    return shlex.quote(text)
