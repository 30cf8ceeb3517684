"""Role templates rendered for each fabric type and compared with golden files.

The inventories come from the example stack files through the project's own hand-off
(`build_outputs` -> `build_inventory`), so a change in the spec, the inventory or a
template shows up here as a diff. Regenerate after an intended change:
``GPUCLUSTER_UPDATE_GOLDEN=1 pytest tests/unit/roles``.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.roles.render import (
    FABRICS,
    GOLDEN,
    assert_golden,
    first_host,
    host_context,
    inventory_for,
    render_template,
    role_vars,
)

# (role, template, node group, extra role variables the tasks would have set)
_COMMON_STATE = {"__common_sysctl_state": {}}
CASES: list[tuple[str, str, str, dict[str, Any]]] = [
    ("common", "gpucluster.nft.j2", "gpu", {}),
    ("common", "nftables.conf.j2", "gpu", {}),
    ("common", "sysctl.conf.j2", "gpu", _COMMON_STATE),
    ("common", "chrony.conf.j2", "gpu", {}),
    ("common", "hosts.j2", "gpu", {}),
    ("common", "sshd-hardening.conf.j2", "gpu", {}),
    ("common", "limits-memlock.conf.j2", "gpu", {}),
    # A GPU node whose containerd (Docker's containerd.io 1.7.27) takes CDI.
    ("container_runtime", "config.toml.j2", "gpu", {"__container_runtime_nvidia_present": True,
                                                    "__container_runtime_toolkit": {
                                                        "stdout": "present\ncontainerd containerd.io 1.7.27 0\n"}}),
    ("monitoring", "prometheus-node-exporter.default.j2", "gpu", {}),
    ("cuda_toolkit", "cuda.sh.j2", "gpu", {}),
    ("nvidia_driver", "apt-preferences.j2", "gpu", {}),
    ("nvidia_driver", "unattended-upgrades-hold.conf.j2", "gpu", {}),
]
# Templates only one fabric type renders.
ONLY = {
    "infiniband": [
        ("rdma_fabric", "partitions.conf.j2", "storage", {}),
        ("rdma_fabric", "ipoib.network.j2", "gpu", {}),
    ],
    "roce": [
        ("rdma_fabric", "roce-qos.sh.j2", "gpu", {}),
        ("rdma_fabric", "roce.link.j2", "gpu", {}),
        ("rdma_fabric", "gpucluster-roce-qos.service.j2", "gpu", {}),
    ],
    "efa": [],
    "ethernet": [],
}


def _cases() -> list[Any]:
    out = []
    for fabric in FABRICS:
        for role, template, group, extra in CASES + ONLY[fabric]:
            out.append(pytest.param(fabric, role, template, group, extra, id=f"{fabric}-{role}-{template}"))
    return out


def _render(fabric: str, role: str, template: str, group: str, extra: dict[str, Any]) -> str:
    inventory = inventory_for(fabric)
    ctx = host_context(inventory, first_host(inventory, group))
    variables = role_vars(role, ctx, extra)
    variables.update(extra)
    return render_template(role, template, variables)


@pytest.mark.parametrize(("fabric", "role", "template", "group", "extra"), _cases())
def test_template_matches_golden(fabric: str, role: str, template: str, group: str, extra: dict[str, Any]) -> None:
    text = _render(fabric, role, template, group, extra)
    assert_golden(GOLDEN / fabric / role / template.removesuffix(".j2"), text)


def test_sysctl_skips_read_only_keys_with_a_comment() -> None:
    state = {"vm.swappiness": "read-only", "net.ipv4.neigh.default.gc_thresh1": "absent"}
    text = _render("ethernet", "common", "sysctl.conf.j2", "gpu", {"__common_sysctl_state": state})
    assert "# skipped: vm.swappiness = 1 (read-only on this node)" in text
    assert "# skipped: net.ipv4.neigh.default.gc_thresh1 = 8192 (absent on this node)" in text
    assert "\nnet.core.rmem_max = 268435456\n" in text


def test_firewall_admits_ssh_only_from_management() -> None:
    text = _render("infiniband", "common", "gpucluster.nft.j2", "gpu", {})
    ssh_accept = text.index("tcp dport 22 ip saddr @management_v4 accept")
    ssh_drop = text.index("tcp dport 22 drop")
    cluster_accept = text.index("\t\tip saddr @cluster_v4 accept")
    assert ssh_accept < ssh_drop < cluster_accept
    assert "elements = { 10.10.0.0/22 }" in text
    assert "policy drop" in text and "flush ruleset" not in text


