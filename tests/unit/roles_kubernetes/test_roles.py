"""The Kubernetes roles: contracts in step with defaults, templates that render through the
tested renderer, secrets under no_log, playbooks that parse."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml

from gpucluster.kube import kubeadm_plan, render_init_documents, render_join_document
from gpucluster.spec import load_spec
from tests.unit.roles.no_log import NO_LOG

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[3]
ROLES = ["kubernetes_node", "kubernetes_control_plane", "kubernetes_worker"]
ANSIBLE = REPO / ".venv" / "bin" / "ansible-playbook"


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


@pytest.mark.parametrize("role", ROLES)
def test_argument_specs_match_defaults(role: str) -> None:
    defaults = set(_yaml(REPO / "roles" / role / "defaults" / "main.yml"))
    spec = set(_yaml(REPO / "roles" / role / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"])
    assert defaults == spec, f"only in defaults: {defaults - spec}; only in argument_specs: {spec - defaults}"
    assert all(name.startswith(role + "_") for name in defaults)


@pytest.mark.parametrize("role", ROLES)
def test_layout_and_templates(role: str) -> None:
    base = REPO / "roles" / role
    for part in ("tasks/main.yml", "tasks/preflight.yml", "handlers/main.yml", "meta/main.yml", "README.md"):
        assert (base / part).is_file(), part
    for tpl in (base / "templates").glob("*.j2"):
        assert tpl.read_text().startswith("{{ ansible_managed | comment }}"), tpl.name
    readme = (base / "README.md").read_text()
    missing = [v for v in _yaml(base / "defaults" / "main.yml") if v not in readme]
    assert not missing, f"README.md does not list {missing}"


def _tasks(role: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def walk(items: list[dict[str, Any]]) -> None:
        for t in items or []:
            out.append(t)
            for key in ("block", "always", "rescue"):
                walk(t.get(key, []))

    for f in (REPO / "roles" / role / "tasks").glob("*.yml"):
        walk(_yaml(f))
    return out


@pytest.mark.parametrize("role", ROLES)
def test_tasks_are_named_fully_qualified_and_secret_tasks_are_no_log(role: str) -> None:
    for t in _tasks(role):
        assert t.get("name"), t
        module = next((k for k in t if k.startswith(("ansible.builtin.", "gpucluster.cluster."))), None)
        if "block" not in t:
            assert module is not None, f"not a fully qualified module: {t['name']}"
        if module in ("ansible.builtin.command", "ansible.builtin.shell") and "creates" not in str(t.get(module)):
            assert "changed_when" in t, t["name"]
        if module not in ("ansible.builtin.command", "ansible.builtin.shell", "ansible.builtin.template",
                          "ansible.builtin.fetch"):
            continue
        text = yaml.safe_dump(t)
        if any(s in text for s in ("token create", "upload-certs", "kubeadm-join.yaml.j2", "admin.conf\n    dest")):
            assert t.get("no_log") == NO_LOG, t["name"]
        if "kubeadm init" in text or "kubeadm join" in text:
            assert t.get("no_log") == NO_LOG, t["name"]


def _filters() -> dict[str, Any]:
    path = REPO / "collections" / "ansible_collections" / "gpucluster" / "cluster" / "plugins" / "filter" / "kube.py"
    spec = importlib.util.spec_from_file_location("gpucluster_cluster_kube_filters", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    filters: dict[str, Any] = mod.FilterModule().filters()
    return filters


def _render(role: str, template: str, variables: dict[str, Any]) -> list[dict[str, Any]]:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters.update({f"gpucluster.cluster.{name}": fn for name, fn in _filters().items()})
    env.filters["comment"] = lambda s: "#\n# " + s + "\n#"
    text = env.from_string((REPO / "roles" / role / "templates" / template).read_text()).render(
        ansible_managed="Managed by gpucluster", **variables
    )
    assert text.startswith("#\n# Managed by gpucluster")
    return [d for d in yaml.safe_load_all(text) if d]


def _inventory_plan(stack: Path) -> tuple[dict[str, Any], Any]:
    """The plan as the roles build it from inventory variables (gpucluster_nodes + hostvars)."""
    cluster = load_spec(stack)
    nodes = [{"name": n.name, "management_ip": n.management_ip, "roles": list(n.roles)} for n in cluster.nodes]
    hostvars = {n.name: {"gpucluster_pool": n.pool, "gpucluster_profile": n.profile} for n in cluster.nodes}
    kube = cluster.spec.kubernetes
    assert kube is not None
    plan = {
        "cluster_name": cluster.name,
        "kubernetes_version": cluster.bom.kubernetes.version,
        "pod_cidr": kube.pod_cidr,
        "service_cidr": kube.service_cidr,
        "api_vip": kube.api_vip,
        "nodes": _filters()["kube_nodes"](nodes, hostvars),
        "image_repository": "registry.k8s.io",
        "cri_socket": "unix:///run/containerd/containerd.sock",
        "extra_cert_sans": [],
    }
    return plan, cluster


@pytest.mark.parametrize("stack", ["Pulumi.onprem-h100-roce.yaml", "Pulumi.onprem-h100-ib.yaml"])
def test_control_plane_template_renders_what_the_python_renderer_does(stack: str) -> None:
    plan, cluster = _inventory_plan(REPO / stack)
    first = kubeadm_plan(cluster).first_control_plane.name
    docs = _render("kubernetes_control_plane", "kubeadm-init.yaml.j2",
                   {"__kubernetes_control_plane_plan": plan, "kubernetes_control_plane_node_name": first})
    assert docs == render_init_documents(kubeadm_plan(cluster), first)


def test_worker_template_renders_the_join_document() -> None:
    plan, cluster = _inventory_plan(REPO / "Pulumi.onprem-h100-roce.yaml")
    token, ca = "abcdef.0123456789abcdef", "sha256:" + "c" * 64
    docs = _render("kubernetes_worker", "kubeadm-join.yaml.j2", {
        "__kubernetes_worker_plan": plan, "kubernetes_worker_node_name": "hgx-02",
        "__kubernetes_worker_join_token": token, "__kubernetes_worker_join_hash": ca})
    assert docs == [render_join_document(kubeadm_plan(cluster), "hgx-02", token=token, ca_cert_hash=ca)]


@pytest.mark.skipif(not ANSIBLE.exists(), reason="ansible-core is not installed in .venv")
def test_playbooks_parse() -> None:
    inv = REPO / "tests" / "golden" / "inventory" / "onprem-h100-roce.yml"
    for pb in ("deploy-kubernetes.yml", "upgrade-rolling.yml"):
        res = subprocess.run([str(ANSIBLE), "--syntax-check", "-i", str(inv), str(REPO / "playbooks" / pb)],
                             capture_output=True, text=True, cwd=REPO, check=False)
        assert res.returncode == 0, res.stderr


def test_rolling_upgrade_is_serial_and_gated_on_verify() -> None:
    play = _yaml(REPO / "playbooks" / "upgrade-rolling.yml")[0]
    assert play["serial"] == 1 and play["max_fail_percentage"] == 0
    text = (REPO / "playbooks" / "upgrade-rolling.yml").read_text()
    assert "gpucluster verify" in text and "--limit" in text
    names = [t["name"] for t in play["pre_tasks"] + play["tasks"] + play["post_tasks"]]
    order = [next(i for i, n in enumerate(names) if key in n) for key in ("drain", "Uncordon", "conformance", "Stop")]
    assert order == sorted(order)
    # The gate verifies this node on the inventory the play runs on, from the repository root.
    gate = next(t for t in play["post_tasks"] if t["name"] == "Run the conformance suite for this node")
    assert gate["delegate_to"] == "localhost"
    assert gate["ansible.builtin.command"]["chdir"] == "{{ playbook_dir | dirname }}"
    assert "--inventory {{ inventory_file }}" in play["vars"]["upgrade_rolling_verify_command"]


def test_rolling_upgrade_skips_the_kubectl_steps_with_a_reason_without_a_control_plane() -> None:
    play = _yaml(REPO / "playbooks" / "upgrade-rolling.yml")[0]
    tasks = play["pre_tasks"] + play["tasks"] + play["post_tasks"]
    kubectl = [t for t in tasks if "__upgrade_rolling_kubectl" in str(t.get("ansible.builtin.command", ""))]
    assert [t["name"] for t in kubectl] == ["Cordon and drain the node", "Wait until the node reports Ready",
                                            "Uncordon the node"]
    for task in kubectl:
        assert "__upgrade_rolling_kube_skip_reason | length == 0" in task["when"], task["name"]
    names = [t["name"] for t in tasks]
    why = tasks[names.index("Say why the Kubernetes steps are skipped")]
    assert why["when"] == "__upgrade_rolling_kube_skip_reason | length > 0"
    assert "{{ __upgrade_rolling_kube_skip_reason }}" in why["ansible.builtin.debug"]["msg"]
    # The reason is decided (no control_plane group, or no kubeconfig on its first node) before the drain.
    decide = tasks[names.index("Decide whether the Kubernetes steps can run")]["ansible.builtin.set_fact"]
    reason = decide["__upgrade_rolling_kube_skip_reason"]
    assert "no control_plane group" in reason and "no kubeconfig" in reason
    assert names.index("Say why the Kubernetes steps are skipped") < names.index("Cordon and drain the node")
    # A Kubernetes upgrade without a cluster is refused, not skipped.
    refuse = tasks[names.index("Check that a Kubernetes upgrade has a cluster to upgrade")]["ansible.builtin.assert"]
    assert "'kubernetes' not in upgrade_rolling_components" in refuse["that"][0]
