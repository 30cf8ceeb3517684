"""Render role defaults and templates the way Ansible would, without a host.

A Jinja2 environment with Ansible's own core filters and tests, native types for
variables (as Ansible 2.19 templates them), and the role's defaults and vars resolved
against an inventory built from a stack file by the project's own hand-off code.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml
from ansible.errors import AnsibleError
from ansible.plugins.filter.core import FilterModule
from ansible.plugins.filter.mathstuff import FilterModule as MathFilters
from ansible.plugins.test.core import TestModule
from ansible.plugins.test.mathstuff import TestModule as MathTests
from jinja2.nativetypes import NativeEnvironment

from gpucluster.inventory import build_inventory
from gpucluster.outputs import StackOutputs
from gpucluster.spec import load_spec
from tests.unit.example_outputs import example_outputs

REPO = Path(__file__).resolve().parents[3]
ROLES = REPO / "roles"
GOLDEN = REPO / "tests" / "golden" / "roles"
MY_ROLES = (
    "common",
    "nvidia_cuda_repo",
    "nvidia_driver",
    "cuda_toolkit",
    "nccl",
    "gpu_validation",
    "container_runtime",
    "rdma_fabric",
    "fabric_rails",
    "monitoring",
)
ANSIBLE_MANAGED = "Managed by gpucluster (Ansible): local edits are overwritten on the next converge."

# The four fabric types, each from an example stack file, with the interface its nodes use.
FABRICS = {
    "infiniband": ("Pulumi.onprem-h100-ib.yaml", "ib0"),
    "roce": ("Pulumi.onprem-h100-roce.yaml", "ens1f0np0"),
    "efa": ("Pulumi.aws-h100.yaml", "ens32"),
    "ethernet": ("Pulumi.lab.yaml", "fab0"),
}

FACTS: dict[str, Any] = {
    "os_family": "Debian",
    "distribution": "Debian",
    "distribution_major_version": "12",
    "distribution_release": "bookworm",
    "architecture": "x86_64",
    "kernel": "6.1.0-37-amd64",
    "hostname": "node",
    "virtualization_role": "host",
    "virtualization_type": "kvm",
}


COLLECTION_FILTERS = REPO / "collections/ansible_collections/gpucluster/cluster/plugins/filter"


def collection_filters() -> dict[str, Any]:
    """The project collection's filters under their full names, as roles call them."""
    from tests.unit.loading import load_file

    out: dict[str, Any] = {}
    for path in sorted(COLLECTION_FILTERS.glob("*.py")):
        module = load_file(path, f"gpucluster_cluster_filter_{path.stem}_for_render")
        out.update({f"gpucluster.cluster.{k}": v for k, v in module.FilterModule().filters().items()})
    return out


def _env(native: bool) -> jinja2.Environment:
    cls = NativeEnvironment if native else jinja2.Environment
    env = cls(undefined=jinja2.StrictUndefined, trim_blocks=True, keep_trailing_newline=True,
              extensions=["jinja2.ext.do", "jinja2.ext.loopcontrols"])
    # Jinja's own `default` copes with StrictUndefined; Ansible's wraps it for its own undefined type.
    env.filters.update({k: v for k, v in FilterModule().filters().items() if k not in ("d", "default")})
    env.filters.update(MathFilters().filters())
    env.filters.update(collection_filters())
    env.tests.update(TestModule().tests())
    env.tests.update(MathTests().tests())
    return env


NATIVE = _env(native=True)
TEXT = _env(native=False)


def inventory_for(fabric: str) -> dict[str, Any]:
    stack, interface = FABRICS[fabric]
    cluster = load_spec(REPO / stack)
    outputs = StackOutputs.model_validate(example_outputs(cluster, ssh_user="root", fabric_interface=interface))
    return build_inventory(cluster, outputs)


def host_context(inventory: dict[str, Any], host: str) -> dict[str, Any]:
    root = inventory["all"]
    groups = {name: list(body["hosts"]) for name, body in root["children"].items()}
    ctx: dict[str, Any] = dict(root["vars"])
    ctx.update(root["hosts"][host])
    ctx.update(
        inventory_hostname=host,
        group_names=sorted(g for g, members in groups.items() if host in members),
        groups={"all": list(root["hosts"]), **groups},
        ansible_facts=dict(FACTS, hostname=host),
        ansible_managed=ANSIBLE_MANAGED,
        ansible_check_mode=False,
    )
    return ctx


def first_host(inventory: dict[str, Any], group: str) -> str:
    return next(iter(inventory["all"]["children"][group]["hosts"]))


@functools.cache
def _native_template(source: str) -> jinja2.Template:
    """One compiled template per source string: Jinja's from_string compiles anew on every call, and
    role_vars meets the same strings in every pass, for every host and role (most of its cost)."""
    return NATIVE.from_string(source)


@functools.cache
def _role_file(path: Path) -> dict[str, Any]:
    """A role's defaults or vars as parsed once; callers take a copy (the tests never write them)."""
    data: dict[str, Any] = yaml.safe_load(path.read_text()) or {}
    return data


def _resolve(value: Any, ctx: dict[str, Any]) -> Any:
    if isinstance(value, str) and ("{{" in value or "{%" in value):
        out = _native_template(value).render(ctx)
        if isinstance(out, jinja2.Undefined):
            # A lone expression over a variable not resolved yet: native rendering hands back the
            # Undefined itself instead of raising; try again on the next pass, as for any other.
            raise jinja2.UndefinedError(str(value))
        return out
    if isinstance(value, list):
        return [_resolve(v, ctx) for v in value]
    if isinstance(value, dict):
        return {k: _resolve(v, ctx) for k, v in value.items()}
    return value


def role_vars(role: str, ctx: dict[str, Any], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The role's defaults and vars resolved against ``ctx`` (lazily, as Ansible does)."""
    raw: dict[str, Any] = {}
    for part in ("defaults", "vars"):
        path = ROLES / role / part / "main.yml"
        if path.is_file():
            raw.update(copy.deepcopy(_role_file(path)))
    raw.update(extra or {})
    resolved = dict(ctx)
    resolved.update(raw)
    # Fixed point: a variable may refer to another of the role's variables.
    for _ in range(6):
        before = json.dumps(resolved, sort_keys=True, default=str)
        for key, value in raw.items():
            try:
                resolved[key] = _resolve(value, resolved)
            except (jinja2.UndefinedError, AnsibleError, TypeError):
                # An input not resolved yet (a template string a test or filter cannot take): kept
                # as written for the next pass; one still unresolved at the end reaches the test so.
                resolved[key] = value
        if json.dumps(resolved, sort_keys=True, default=str) == before:
            break
    return resolved


def render_template(role: str, template: str, variables: dict[str, Any]) -> str:
    source = (ROLES / role / "templates" / template).read_text()
    return _text_template(source).render(variables)


@functools.cache
def _text_template(source: str) -> jinja2.Template:
    """One compiled template per source (as _native_template): the goldens render each for many cases."""
    return TEXT.from_string(source)


def assert_golden(path: Path, text: str) -> None:
    """`text` equals the golden file at `path` (GPUCLUSTER_UPDATE_GOLDEN=1 rewrites it; a missing
    one is written and the test fails so that it gets reviewed); no Jinja left unrendered."""
    if os.environ.get("GPUCLUSTER_UPDATE_GOLDEN") == "1" or not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if os.environ.get("GPUCLUSTER_UPDATE_GOLDEN") != "1":
            pytest.fail(f"golden file {path} was missing: written; review and commit it")
    assert text == path.read_text(), f"{path} differs (GPUCLUSTER_UPDATE_GOLDEN=1 to accept)"
    assert "{{" not in text and "{%" not in text



_TEMPLATE_LOOKUP = re.compile(r"lookup\('gpucluster\.cluster\.template', '([^']+)'")


def file_entries(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The file entries of a task list's gpucluster.cluster.files tasks (those written as YAML
    mappings), each with `src`: the template its content's lookup renders, and `task`: its task."""
    out = []
    for task in tasks:
        for entry in (task.get("gpucluster.cluster.files") or {}).get("files") or []:
            if isinstance(entry, dict):
                found = _TEMPLATE_LOOKUP.search(str(entry.get("content", "")))
                out.append({**entry, "src": found.group(1) if found else None, "task": task})
    return out
