"""The hand-off: stack outputs JSON -> Ansible inventory, against golden files.

Regenerate the golden files after an intended change with
``GPUCLUSTER_UPDATE_GOLDEN=1 pytest tests/unit/inventory`` and review the diff.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpucluster.cli import main
from gpucluster.errors import InputError
from gpucluster.inventory import build_inventory, dump_inventory, parse_inventory_text
from gpucluster.lab.layout import layout_lab
from gpucluster.outputs import load_outputs, parse_outputs
from gpucluster.spec import load_spec
from tests.unit.example_outputs import example_outputs

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[3]
GOLDEN = REPO / "tests" / "golden"
UPDATE = os.environ.get("GPUCLUSTER_UPDATE_GOLDEN") == "1"
_VENV_TOOL = Path(sys.executable).parent / "ansible-inventory"
ANSIBLE_INVENTORY = str(_VENV_TOOL) if _VENV_TOOL.exists() else shutil.which("ansible-inventory")

# (stack, ssh user, fabric interface, key file) as each target would export them; bare metal's
# fabric interfaces from the bare-metal target's own code (the platform's netdevs).
STACKS = {
    "lab": ("Pulumi.lab.yaml", "root", "fab0", str(layout_lab(load_spec(REPO / "Pulumi.lab.yaml")).key_file)),
    "aws-h100": ("Pulumi.aws-h100.yaml", "ubuntu", None, None),
    # An existing VNet, an existing bastion, an egress proxy.
    "azure-h100": ("Pulumi.azure-h100.yaml", "azureuser", "ib0", None),
    "onprem-h100-ib": ("Pulumi.onprem-h100-ib.yaml", "ubuntu", "baremetal", None),
    "onprem-h100-roce": ("Pulumi.onprem-h100-roce.yaml", "ubuntu", "baremetal", None),
}


def _outputs_file(name: str) -> Path:
    stack, user, iface, key = STACKS[name]
    path = GOLDEN / "outputs" / f"{name}.json"
    if UPDATE:
        cluster = load_spec(REPO / stack)
        if iface == "baremetal":
            from stacks.targets.baremetal import fabric_interface_of

            data = example_outputs(cluster, ssh_user=user, ssh_private_key_file=key,
                                 fabric_interfaces={n.name: fabric_interface_of(cluster, n) for n in cluster.nodes})
        else:
            data = example_outputs(cluster, ssh_user=user, fabric_interface=iface, ssh_private_key_file=key)
        path.write_text(json.dumps(data, indent=2) + "\n")
    return path


@pytest.mark.parametrize("name", sorted(STACKS))
def test_inventory_matches_golden(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outputs = _outputs_file(name)
    golden = GOLDEN / "inventory" / f"{name}.yml"
    out = tmp_path / "inventory.yml"
    assert main(["inventory", "--outputs", str(outputs), "--stack", str(REPO / STACKS[name][0]), "-o", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().err
    if UPDATE:
        shutil.copy(out, golden)
    assert out.read_text() == golden.read_text()


def _load(name: str) -> dict[str, Any]:
    text = (GOLDEN / "inventory" / f"{name}.yml").read_text()
    data: dict[str, Any] = parse_inventory_text(text)
    return data


def test_groups_per_role_and_pool() -> None:
    inv = _load("lab")["all"]
    children = inv["children"]
    assert set(children["gpu"]["hosts"]) == {"gpu-1", "gpu-2"}
    assert set(children["storage"]["hosts"]) == {"stor-1"}
    assert children["control_plane"]["hosts"] == {}
    assert set(children["pool_gpu"]["hosts"]) == {"gpu-1", "gpu-2"}
    assert set(children["pool_stor"]["hosts"]) == {"stor-1"}


def test_host_vars_carry_addresses_pool_profile_fabric() -> None:
    inv = _load("onprem-h100-ib")["all"]
    host = inv["hosts"]["hgx-01"]
    assert host["ansible_host"] == "10.10.0.10"
    assert host["ansible_user"] == "ubuntu"
    assert host["gpucluster_fabric_ip"] == "10.20.0.10"
    assert host["gpucluster_pool"] == "hgx"
    assert host["gpucluster_profile"] == "h100-sxm-8"
    assert host["gpucluster_fabric_interface"] == "ibp24s0"  # the platform's IPoIB netdev for mlx5_0, not ib0
    cluster_vars = inv["vars"]
    assert cluster_vars["gpucluster_fabric"]["type"] == "infiniband"
    assert cluster_vars["gpucluster_profiles"]["h100-sxm-8"]["gpu"]["count"] == 8
    assert cluster_vars["gpucluster_bom"]["nccl"]["version"]
    assert [n["name"] for n in cluster_vars["gpucluster_nodes"]][:2] == ["hgx-01", "hgx-02"]


def test_lab_key_file_becomes_ansible_var() -> None:
    host = _load("lab")["all"]["hosts"]["gpu-1"]
    assert host["ansible_ssh_private_key_file"].endswith("id_ed25519")


@pytest.mark.skipif(ANSIBLE_INVENTORY is None, reason="ansible-inventory is not installed")
def test_ansible_reads_the_inventory(tmp_path: Path) -> None:
    golden = GOLDEN / "inventory" / "lab.yml"
    proc = subprocess.run(
        [str(ANSIBLE_INVENTORY), "-i", str(golden), "--list"], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    listed = json.loads(proc.stdout)
    assert set(listed["gpu"]["hosts"]) == {"gpu-1", "gpu-2"}
    assert listed["_meta"]["hostvars"]["stor-1"]["ansible_host"] == "10.77.0.12"


@pytest.mark.skipif(ANSIBLE_INVENTORY is None, reason="ansible-inventory is not installed")
def test_ansible_reads_every_string_as_a_string(tmp_path: Path) -> None:
    """A partition key, a node named like a number, a word YAML reads as a boolean: Ansible reads
    each back as the string it was (a `!unsafe '0x7fff'` came back as the int 32767, so the
    rdma_fabric role refused every InfiniBand spec with partitions; the Azure twin found it)."""
    inventory = build_inventory(load_spec(REPO / "Pulumi.onprem-h100-ib.yaml"),
                                load_outputs(GOLDEN / "outputs" / "onprem-h100-ib.json"))
    header = "#jinja2:variable_start_string:'<<', variable_end_string:'>>'\n<< 6 * 7 >>"
    inventory["all"]["vars"]["gpucluster_probe"] = ["10", "yes", "0o17", "1e3", "null", "~", "{{ 1 }}", header]
    path = tmp_path / "inventory.yml"
    path.write_text(dump_inventory(inventory))
    proc = subprocess.run([str(ANSIBLE_INVENTORY), "-i", str(path), "--list"], capture_output=True, text=True,
                          check=True, cwd=tmp_path)
    hostvars = json.loads(proc.stdout)["_meta"]["hostvars"]["hgx-01"]
    assert [p["pkey"] for p in hostvars["gpucluster_fabric"]["partitions"]] == ["0x7fff", "0x0101"]
    assert hostvars["gpucluster_probe"][:6] == ["10", "yes", "0o17", "1e3", "null", "~"]
    # A string that could hold a template keeps its tag, also one that sets its own delimiters.
    assert hostvars["gpucluster_probe"][6] == {"__ansible_unsafe": "{{ 1 }}"}
    assert hostvars["gpucluster_probe"][7] == {"__ansible_unsafe": header}


def test_ansible_never_templates_an_inventory_string(tmp_path: Path) -> None:
    """The second wall: even a string no model refused is never templated by Ansible.

    The inventory is built from valid outputs, then a Jinja payload is planted in a cluster
    variable and a host variable (as a future field might carry one); a real ansible-playbook
    run over it must print the payload literally and never run its command.
    """
    inventory = build_inventory(load_spec(REPO / "Pulumi.lab.yaml"), load_outputs(GOLDEN / "outputs" / "lab.json"))
    witness = tmp_path / "pwned"
    payload = f"eth1{{{{ lookup('pipe', 'touch {witness}') }}}}"
    inventory["all"]["vars"]["gpucluster_fabric"]["socket_ifname"] = payload
    inventory["all"]["hosts"]["gpu-1"]["gpucluster_fabric_interface"] = payload
    for host in inventory["all"]["hosts"].values():
        host.update(ansible_connection="local", ansible_python_interpreter=sys.executable)
    inv = tmp_path / "inventory.yml"
    inv.write_text(dump_inventory(inventory))
    play = tmp_path / "play.yml"
    rendered = tmp_path / "rendered.txt"
    play.write_text(
        "- hosts: gpu-1\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.copy:\n"
        "        content: '{{ gpucluster_fabric.socket_ifname }}|{{ gpucluster_fabric_interface }}'\n"
        f"        dest: {rendered}\n"
    )
    playbook = Path(sys.executable).parent / "ansible-playbook"
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")
    env = {**os.environ, "ANSIBLE_CONFIG": str(tmp_path / "ansible.cfg")}
    proc = subprocess.run([str(playbook), "-i", str(inv), str(play)], capture_output=True, text=True, cwd=tmp_path,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert rendered.read_text() == f"{payload}|{payload}"
    assert not witness.exists(), "a Jinja lookup in the inventory ran on the controller"


def _raw(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((GOLDEN / "outputs" / f"{name}.json").read_text())
    return data


def _problems(raw: dict[str, Any], stack: str = "Pulumi.lab.yaml") -> list[str]:
    with pytest.raises(InputError) as err:
        build_inventory(load_spec(REPO / stack), parse_outputs(raw, "outputs.json"), source="outputs.json")
    return err.value.problems


def test_outputs_missing_a_node() -> None:
    raw = _raw("lab")
    raw["nodes"].pop()
    assert _problems(raw) == ["outputs.nodes: missing node(s) the stack file declares: stor-1"]


def test_outputs_with_unknown_node_and_wrong_pool() -> None:
    raw = _raw("lab")
    raw["nodes"][0]["name"] = "gpu-9"
    raw["nodes"][1]["pool"] = "stor"
    problems = _problems(raw)
    assert "outputs.nodes[0].name: node 'gpu-9' is not in the stack file's node pools" in problems
    assert any(p.startswith("outputs.nodes[1].pool: 'stor'") for p in problems)


def test_outputs_duplicate_address() -> None:
    raw = _raw("lab")
    raw["nodes"][1]["management_ip"] = raw["nodes"][0]["management_ip"]
    assert any(p.startswith("outputs.nodes[1].management_ip:") for p in _problems(raw))


def test_outputs_from_another_cluster() -> None:
    problems = _problems(_raw("aws-h100"))
    assert problems[0].startswith("outputs.cluster_name: 'aws-h100'")


def test_outputs_with_bad_types_name_the_field() -> None:
    raw = _raw("lab")
    raw["nodes"][2]["management_ip"] = "10.77.0.300"
    with pytest.raises(InputError) as err:
        parse_outputs(raw, "o.json")
    assert err.value.problems[0].startswith("outputs.nodes[2].management_ip: malformed IPv4 address")


@pytest.mark.parametrize(
    ("content", "reason"),
    [(None, "stack outputs file not found"), ("{not json", "not JSON"), ("[]", "outputs: must be a mapping")],
)
def test_bad_outputs_file_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, reason: str
) -> None:
    path = tmp_path / "outputs.json"
    if content is not None:
        path.write_text(content)
    target = tmp_path / "inventory.yml"
    rc = main(["inventory", "--outputs", str(path), "--stack", str(REPO / "Pulumi.lab.yaml"), "-o", str(target)])
    assert rc == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: ") and reason in err
    assert not target.exists(), "nothing is written on bad input"


def test_dump_is_deterministic() -> None:
    raw = _raw("lab")
    cluster = load_spec(REPO / "Pulumi.lab.yaml")
    first = dump_inventory(build_inventory(cluster, parse_outputs(raw, "a")))
    second = dump_inventory(build_inventory(cluster, load_outputs(GOLDEN / "outputs" / "lab.json")))
    assert first == second
