"""The inventory's rules live in the contract (gpucluster/inventory_model.py): each spec section's own
values are judged by the spec's models it is read through, what spans sections by the contract's
cross-field rules; the validate play keeps only what Ansible alone sees, and runs for real here."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucluster.errors import InputError
from gpucluster.inventory import dump_inventory, parse_inventory_text
from gpucluster.inventory_model import SCHEMA_VERSION, validate_inventory
from gpucluster.spec.models import Fabric

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[3]
GOLDEN = REPO / "tests" / "golden" / "inventory"
PLAY = REPO / "playbooks" / "validate-inventory.yml"
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"


def _golden(name: str) -> dict[str, Any]:
    data: dict[str, Any] = parse_inventory_text((GOLDEN / f"{name}.yml").read_text())
    return data


def _problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(InputError) as err:
        validate_inventory(data, "inv.yml")
    return list(err.value.problems)


@pytest.mark.parametrize("name", ["lab", "aws-h100", "onprem-h100-ib", "onprem-h100-roce"])
def test_every_golden_inventory_passes(name: str) -> None:
    validate_inventory(_golden(name), name)


def test_an_infiniband_fabric_a_cloud_manages_needs_no_subnet_manager_of_its_own() -> None:
    data = _golden("onprem-h100-ib")
    data["all"]["vars"]["gpucluster_fabric"]["subnet_managers"] = []
    validate_inventory(data, "inv.yml")


def _fabric(change: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
    return lambda root: change(root["vars"]["gpucluster_fabric"])


# Each spec section is read through the spec's own model: its types, ranges and validators judge the
# inventory as they judged the stack file, and the problem names the inventory's path.
MODEL_CASES: list[tuple[str, str, Callable[[dict[str, Any]], Any], str]] = [
    ("lab", "bom", lambda r: r["vars"]["gpucluster_bom"].pop("nccl"), "all.vars.gpucluster_bom.nccl: is required"),
    ("lab", "checksum", lambda r: r["vars"]["gpucluster_bom"]["gpu_burn"].update(sha256=""),
     "all.vars.gpucluster_bom.gpu_burn.sha256: empty: converge downloads"),
    ("lab", "type", _fabric(lambda f: f.update(type="omnipath")),
     "all.vars.gpucluster_fabric.type: must be one of 'infiniband', 'roce', 'efa' or 'ethernet'"),
    ("lab", "mtu", _fabric(lambda f: f.update(mtu=576)), "all.vars.gpucluster_fabric.mtu: must be at least 1280"),
    ("lab", "cidr", _fabric(lambda f: f.update(fabric_cidr="10.77.1.0/33")),
     "all.vars.gpucluster_fabric.fabric_cidr: malformed CIDR '10.77.1.0/33'"),
    ("lab", "unknown key", _fabric(lambda f: f.update(mtu_bytes=9000)),
     "all.vars.gpucluster_fabric.mtu_bytes: unknown key"),
    ("onprem-h100-ib", "storage", lambda r: r["vars"]["gpucluster_storage"].update(monitors=[]),
     "all.vars.gpucluster_storage.monitors: "),
    ("onprem-h100-ib", "kubernetes", lambda r: r["vars"]["gpucluster_kubernetes"].update(cni="weave"),
     "all.vars.gpucluster_kubernetes.cni: must be one of"),
    ("lab", "profile", lambda r: r["vars"]["gpucluster_profiles"]["cpu-lab"]["gpu"].update(count="1"),
     "all.vars.gpucluster_profiles.cpu-lab.gpu.count: must be an integer (got '1')"),
]

# What relates one section to another, which no one model sees: the contract's own rules.
RULE_CASES: list[tuple[str, str, Callable[[dict[str, Any]], Any], str]] = [
    ("onprem-h100-ib", "stranger", _fabric(lambda f: f.update(subnet_managers=["ghost"])),
     "subnet_managers: ghost not in all.hosts"),
    ("onprem-h100-roce", "roce qos", _fabric(lambda f: f.update(roce_qos=None)), "a RoCE fabric needs its QoS"),
    ("lab", "same address", lambda r: r["hosts"]["gpu-2"].update(gpucluster_management_ip="10.77.0.10"),
     "all.hosts.gpu-2.gpucluster_management_ip: 10.77.0.10 is also gpu-1's"),
]
CASES = MODEL_CASES + RULE_CASES


@pytest.mark.parametrize(("name", "case", "damage", "expected"), CASES, ids=[c[1] for c in CASES])
def test_each_rule_names_its_problem(name: str, case: str, damage: Callable[[dict[str, Any]], Any],
                                     expected: str) -> None:
    data = _golden(name)
    damage(data["all"])
    assert any(expected in p for p in _problems(data)), _problems(data)


def test_rule_and_type_problems_come_together() -> None:
    data = _golden("lab")
    del data["all"]["vars"]["gpucluster_bom"]["nvidia_driver"]
    hosts = data["all"]["hosts"]
    hosts["gpu-2"]["gpucluster_management_ip"] = hosts["gpu-1"]["gpucluster_management_ip"]
    data["all"]["hosts"]["gpu-1"]["ansible_port"] = "22"
    text = "\n".join(_problems(data))
    assert "all.vars.gpucluster_bom.nvidia_driver: is required" in text
    assert "all.hosts.gpu-2.gpucluster_management_ip" in text and "all.hosts.gpu-1.ansible_port" in text


def test_the_spec_models_defaults_fill_what_the_file_leaves_out() -> None:
    # The reader holds the spec's defaults, not a second copy of them: a fabric without ib_timeout
    # is read with Fabric's (the suite and the renderers read the model's attributes).
    data = _golden("lab")
    del data["all"]["vars"]["gpucluster_fabric"]["ib_timeout"]
    model = validate_inventory(data, "inv.yml")
    assert model.vars.gpucluster_fabric.ib_timeout == Fabric.model_fields["ib_timeout"].default


# --- the validate play: what only Ansible sees ------------------------------------------------


def test_the_play_reads_the_schema_the_writer_writes() -> None:
    play = yaml.safe_load(PLAY.read_text())
    assert len(play) == 1 and play[0]["hosts"] == "localhost"
    assert play[0]["vars"]["__validate_schema"] == SCHEMA_VERSION


def test_site_validates_first() -> None:
    site = yaml.safe_load((REPO / "playbooks" / "site.yml").read_text())
    assert site[0]["ansible.builtin.import_playbook"] == "validate-inventory.yml"


def _play(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    if not ANSIBLE_PLAYBOOK.is_file():
        pytest.skip("ansible-playbook is not installed in this environment")
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(dump_inventory(_golden("lab")))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_DEPRECATION_WARNINGS": "0",
           "NO_COLOR": "1", "ANSIBLE_LOCALHOST_WARNING": "0", "ANSIBLE_PYTHON_INTERPRETER": sys.executable}
    return subprocess.run([str(ANSIBLE_PLAYBOOK), "-i", str(inventory), *args, str(PLAY)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def test_the_play_passes_on_an_inventory_the_writer_wrote(tmp_path: Path) -> None:
    proc = _play(tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    proc = _play(tmp_path, "-e", "gpucluster_heavy_packages=true")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


def test_the_play_refuses_a_host_from_another_inventory_source(tmp_path: Path) -> None:
    other = tmp_path / "other.ini"
    other.write_text("stray-1 ansible_host=192.0.2.9\n")
    proc = _play(tmp_path, "-i", str(other))
    assert proc.returncode != 0
    assert "stray-1: not a node of cluster lab" in proc.stdout


def test_the_play_refuses_an_overridden_schema(tmp_path: Path) -> None:
    proc = _play(tmp_path, "-e", "gpucluster_inventory_schema=1")
    assert proc.returncode != 0 and f"gpucluster_inventory_schema is 1, not {SCHEMA_VERSION}" in proc.stdout


def test_the_play_refuses_heavy_packages_that_are_no_boolean(tmp_path: Path) -> None:
    proc = _play(tmp_path, "-e", "gpucluster_heavy_packages=maybe")
    assert proc.returncode != 0 and "gpucluster_heavy_packages is maybe: pass true or false" in proc.stdout
