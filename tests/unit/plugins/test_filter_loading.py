"""The collection's filter files, as Ansible loads them: every file, in every worker process.

Ansible resolves any ``gpucluster.cluster.*`` filter by importing every file of the filter folder
in the forked worker that templates the task, so what these files import is paid once per
host-task. They must not pull in the spec's pydantic models or gpucluster.kube: of the spec, only
gpucluster.spec.facts (the fabric types, the MTU range), whose package loads its models lazily.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpucluster.kube.ansible_filters import FILTERS
from tests.unit.loading import load_file

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[3]
FILTER_DIR = REPO / "collections/ansible_collections/gpucluster/cluster/plugins/filter"
HEAVY = ("pydantic", "gpucluster.spec", "gpucluster.kube", "yaml")
LIGHT = ("gpucluster.spec", "gpucluster.spec.facts")

_PROBE = """
import importlib.util, json, sys
path = sys.argv[1]
spec = importlib.util.spec_from_file_location("probe_filter", path)
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
mod.FilterModule().filters()
print(json.dumps(sorted(sys.modules)))
"""


@pytest.mark.parametrize("path", sorted(FILTER_DIR.glob("*.py")), ids=lambda p: p.name)
def test_loading_a_filter_file_imports_nothing_heavy(path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", _PROBE, str(path)], capture_output=True, text=True,
                         check=True, cwd=REPO)
    modules = json.loads(out.stdout)
    heavy = [m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY) and m not in LIGHT]
    assert heavy == [], f"{path.name} imports {heavy[:5]} when Ansible loads it"


def test_the_kube_filter_file_names_every_kube_filter_and_calls_it() -> None:
    mod = load_file(FILTER_DIR / "kube.py", "gc_kube_filter_names")
    filters = mod.FilterModule().filters()
    assert sorted(filters) == sorted(name.removeprefix("gpucluster_") for name in FILTERS)
    nodes = [{"name": "gpu-1", "management_ip": "10.0.0.2", "roles": ["gpu"]},
             {"name": "stor-1", "management_ip": "10.0.0.3", "roles": ["storage"]}]
    assert filters["kube_nodes"](nodes, {"gpu-1": {"gpucluster_pool": "gpu"}}) == [
        {"name": "gpu-1", "address": "10.0.0.2", "control_plane": False, "gpu": True, "pool": "gpu", "profile": ""}]


def test_the_models_vars_plugin_loads_the_models_in_the_main_process() -> None:
    """The render filters validate through the spec's models, which no filter file imports when loaded:
    the vars plugin gpucluster.cluster.models, enabled in ansible.cfg, has Ansible's main process import
    them before it forks its workers, which then find them in sys.modules."""
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(REPO / "ansible.cfg")
    enabled = [p.strip() for p in cfg["defaults"]["vars_plugins_enabled"].split(",")]
    assert enabled == ["host_group_vars", "gpucluster.cluster.models"]
    plugin = FILTER_DIR.parent / "vars" / "models.py"
    out = subprocess.run([sys.executable, "-c", _PROBE.replace("mod.FilterModule().filters()",
                                                               "assert mod.VarsModule().get_vars(None, '', []) == {}"),
                          str(plugin)], capture_output=True, text=True, check=True, cwd=REPO)
    modules = set(json.loads(out.stdout))
    assert {"gpucluster.spec.models", "gpucluster.outputs"} <= modules


def test_the_render_filters_take_ansibles_own_string_and_container_types() -> None:
    """What a role hands a filter is Ansible's: str and dict subclasses the strict models refuse as
    they are. The filter file hands them on as plain data, and renders what the plain dicts render."""
    mod = load_file(FILTER_DIR / "render.py", "gc_render_filter_types")
    filters = mod.FilterModule().filters()

    class Tagged(str):
        pass

    class Lazy(dict):  # type: ignore[type-arg]
        pass

    fabric = {"type": "ethernet", "mtu": 9000, "management_cidr": "10.0.0.0/24", "fabric_cidr": "10.0.1.0/24"}
    tagged = Lazy({Tagged(k): Tagged(v) if isinstance(v, str) else v for k, v in fabric.items()})
    assert filters["ssh_sources"](tagged, [Tagged("10.9.0.0/24")]) == filters["ssh_sources"](fabric, ["10.9.0.0/24"])
    assert filters["ssh_sources"](fabric) == ["10.0.0.0/24"]
    assert filters["platform_devices"]({}) == [] and filters["platform_rdma_addressed"]({}) is False
    assert filters["required_services"](["gpu"], {}) == ["ssh", "chrony", "nftables", "prometheus-node-exporter"]


def test_a_value_the_models_refuse_fails_the_filter_with_a_line_per_field() -> None:
    """A role input the spec's model refuses fails the task naming each field, one line each, not with
    pydantic's dump of the whole input (a review's finding on 891e24c)."""
    from ansible.errors import AnsibleFilterError

    mod = load_file(FILTER_DIR / "render.py", "gc_render_filter_errors")
    filters = mod.FilterModule().filters()
    bad = {"type": "ethernet", "mtu": "9000", "management_cidr": "10.0.0.0/24"}
    with pytest.raises(AnsibleFilterError) as err:
        filters["ssh_sources"](bad)
    message = str(err.value)
    assert message.startswith("fabric.") and "fabric.mtu" in message and "fabric.fabric_cidr" in message
    assert "errors.pydantic.dev" not in message and "input_value" not in message
