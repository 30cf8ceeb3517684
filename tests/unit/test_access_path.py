"""The way in, from stack outputs to every SSH connection a run makes: the inventory carries it in
Ansible's standard form (ansible_ssh_common_args: -o ProxyJump=user@host:port), converge hands ssh
the bastion's login and host key policy, verify's ssh_config names it per node, and the MPI
launcher's per-run key travels the same path. What ssh makes of each configuration is read back
with ``ssh -G``, OpenSSH's own resolution of its options."""

from __future__ import annotations

import io
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gpucluster import hostkeys
from gpucluster.conformance.nodes import parse_inventory
from gpucluster.conformance.remote import RunKey, SshRemote, write_ssh_config
from gpucluster.converge import ConvergeOptions, converge
from gpucluster.errors import InputError
from gpucluster.inventory import build_inventory, dump_inventory, parse_inventory_text
from gpucluster.inventory_model import validate_inventory
from gpucluster.outputs import StackOutputs
from gpucluster.spec import load_spec
from tests.unit.example_outputs import BASTION_PUBLIC, example_outputs

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[2]
KEY = "/home/ci/.ssh/gpucluster"
JUMP = f"ubuntu@{BASTION_PUBLIC}:22"
# How `ssh -G` prints it back.
JUMP_G = f"ubuntu@[{BASTION_PUBLIC}]:22"
needs_ssh = pytest.mark.skipif(shutil.which("ssh") is None, reason="OpenSSH's client is not installed")


def _inventory(stack: str = "Pulumi.aws-h100.yaml", key: str | None = KEY) -> dict[str, Any]:
    cluster = load_spec(REPO / stack)
    outputs = StackOutputs.model_validate(example_outputs(cluster, ssh_user="ubuntu", ssh_private_key_file=key))
    return parse_inventory_text(dump_inventory(build_inventory(cluster, outputs)))


def _ssh_g(config: Path, host: str, *extra: str) -> dict[str, str]:
    """ssh's resolved options for ``host`` under ``config`` (first value of each)."""
    out = subprocess.run(["ssh", "-G", "-F", str(config), *extra, host], capture_output=True, text=True, check=True,
                         stdin=subprocess.DEVNULL).stdout
    found: dict[str, str] = {}
    for line in out.splitlines():
        key, _, value = line.partition(" ")
        found.setdefault(key, value)
    return found


def test_the_inventory_carries_the_bastion_in_ansibles_standard_form() -> None:
    data = _inventory()
    for host in data["all"]["hosts"].values():
        assert host["ansible_ssh_common_args"] == f"-o ProxyJump={JUMP}"
        assert host["ansible_ssh_private_key_file"] == KEY
    model = validate_inventory(data, "inventory.yml")
    assert model.vars.gpucluster_access.jump() == JUMP
    # Reached directly: no jump at all.
    direct = _inventory("Pulumi.oci-h100.yaml")
    assert not [h for h in direct["all"]["hosts"].values() if "ansible_ssh_common_args" in h]
    assert validate_inventory(direct, "inventory.yml").vars.gpucluster_access.jump() is None


@pytest.mark.skipif(shutil.which("ansible-inventory") is None and not (Path(__import__("sys").executable).parent /
                    "ansible-inventory").exists(), reason="ansible-inventory is not installed")
def test_ansible_reads_the_jump(tmp_path: Path) -> None:
    import json
    import sys

    tool = Path(sys.executable).parent / "ansible-inventory"
    path = tmp_path / "inventory.yml"
    cluster = load_spec(REPO / "Pulumi.aws-h100.yaml")
    path.write_text(dump_inventory(build_inventory(cluster, StackOutputs.model_validate(
        example_outputs(cluster, ssh_user="ubuntu")))))
    listed = json.loads(subprocess.run([str(tool if tool.exists() else "ansible-inventory"), "-i", str(path),
                                        "--list"], capture_output=True, text=True, check=True, cwd=tmp_path).stdout)
    assert listed["_meta"]["hostvars"]["gpu-1"]["ansible_ssh_common_args"] == f"-o ProxyJump={JUMP}"


def test_outputs_of_another_access_path_are_refused() -> None:
    cluster = load_spec(REPO / "Pulumi.aws-h100.yaml")
    direct = {**example_outputs(cluster, ssh_user="ubuntu"), "access": {"mode": "direct", "bastion": None}}
    with pytest.raises(InputError) as err:
        build_inventory(cluster, StackOutputs.model_validate(direct))
    assert ("outputs.access.mode: 'direct' but the stack file's access is 'bastion' (a bastion the stack makes) "
            "(bring the target up again)") in err.value.problems
    azure = load_spec(REPO / "Pulumi.azure-h100.yaml")
    moved = example_outputs(azure, ssh_user="azureuser")
    moved["access"]["bastion"]["host"] = "203.0.113.99"
    moved["egress"]["http_proxy"] = "http://old-proxy:3128"
    with pytest.raises(InputError) as err:
        build_inventory(azure, StackOutputs.model_validate(moved))
    assert [p.split(":")[0] for p in err.value.problems] == ["outputs.access.bastion.host", "outputs.egress"]


def test_outputs_name_a_bastion_exactly_in_bastion_mode() -> None:
    from pydantic import ValidationError

    cluster = load_spec(REPO / "Pulumi.aws-h100.yaml")
    raw = example_outputs(cluster, ssh_user="ubuntu", bastion_address=None)
    assert raw["access"] == {"mode": "bastion", "bastion": None, "created": True}  # the target did not say where
    with pytest.raises(ValidationError, match="a bastion is named exactly when mode is bastion"):
        StackOutputs.model_validate(raw)


@needs_ssh
def test_verify_reaches_every_node_through_the_bastion(tmp_path: Path) -> None:
    inv = parse_inventory(_inventory(), "inventory.yml")
    cfg = write_ssh_config(tmp_path / "ssh" / "ssh_config", list(inv.nodes))
    node = _ssh_g(cfg, "gpu-1")
    assert (node["hostname"], node["proxyjump"], node["user"]) == ("10.40.0.10", JUMP_G, "ubuntu")
    # The jump connection reads the same file: the bastion's login and the cluster's host key policy.
    bastion = _ssh_g(cfg, BASTION_PUBLIC)
    assert (bastion["user"], bastion["port"], bastion["identityfile"]) == ("ubuntu", "22", KEY)
    assert bastion["batchmode"] == "yes" and bastion["forwardagent"] == "no"


@needs_ssh
def test_the_run_key_travels_the_same_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inv = parse_inventory(_inventory(), "inventory.yml")
    cfg = write_ssh_config(tmp_path / "ssh" / "ssh_config", list(inv.nodes))
    calls: list[list[str]] = []

    def fake_run(argv: list[str], **kwargs: Any) -> SimpleNamespace:
        calls.append(argv)
        return SimpleNamespace(returncode=0, stdout=str(tmp_path / "k"), stderr="")

    key = RunKey.ensure(tmp_path / "run-key", "run1", "m1")
    monkeypatch.setattr(subprocess, "run", fake_run)
    remote = SshRemote("gpu-2", cfg, run_id="run1")
    assert key.grant(remote, "10.40.0.10", 60) is None
    assert key.place(remote, "") is not None
    monkeypatch.undo()
    assert calls and all(argv[:4] == ["ssh", "-F", str(cfg), "gpu-2"] for argv in calls)
    assert _ssh_g(cfg, "gpu-2")["proxyjump"] == JUMP_G


@needs_ssh
def test_converge_hands_ssh_the_bastions_login(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = load_spec(REPO / "Pulumi.aws-h100.yaml")
    outputs = StackOutputs.model_validate(example_outputs(cluster, ssh_user="ubuntu", ssh_private_key_file=KEY))
    path = tmp_path / "inventory.yml"
    path.write_text(dump_inventory(build_inventory(cluster, outputs)))
    data = parse_inventory_text(path.read_text())
    probes: list[list[str]] = []

    def fake_probe(nodes: Any, argv_for: Any, policy: Any, **kwargs: Any) -> dict[str, Any]:
        probes.extend(argv_for(name) for name, _ in nodes)
        return {}

    monkeypatch.setattr(hostkeys, "probe", fake_probe)
    seen: dict[str, Any] = {}

    def runner(**kwargs: Any) -> SimpleNamespace:
        seen.update(kwargs)
        return SimpleNamespace(rc=0, status="successful", stats=None)

    converge(ConvergeOptions(inventory=path, runs_dir=tmp_path / "runs"), progress_out=io.StringIO(), runner=runner)
    jump = hostkeys.jump_of(validate_inventory(data, str(path)))
    assert jump == hostkeys.Jump(BASTION_PUBLIC, "ubuntu", 22, KEY)
    config = hostkeys.runs.cluster_state_dir("aws-h100") / hostkeys.JUMP_CONFIG
    assert seen["envvars"]["ANSIBLE_SSH_ARGS"].endswith(f" -F {config}")
    # The cluster's known_hosts holds the bastion's key as it holds the nodes'.
    bastion = _ssh_g(config, BASTION_PUBLIC)
    assert (bastion["user"], bastion["identityfile"], bastion["stricthostkeychecking"]) == ("ubuntu", KEY,
                                                                                            "accept-new")
    assert bastion["userknownhostsfile"].endswith("/clusters/aws-h100/known_hosts")
    assert len(probes) == 6
    assert all(["-F", str(config), "-o", f"ProxyJump={JUMP}"] == p[p.index("-F"):p.index("-F") + 4] for p in probes)
    # What Ansible's ssh would make of it for a node: the hosts' ProxyJump, the file's policy.
    node = _ssh_g(config, "10.40.0.10", "-o", f"ProxyJump={JUMP}")
    assert node["proxyjump"] == JUMP_G and node["stricthostkeychecking"] == "accept-new"


def test_a_direct_inventory_gets_no_jump_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = load_spec(REPO / "Pulumi.oci-h100.yaml")
    path = tmp_path / "inventory.yml"
    path.write_text(dump_inventory(build_inventory(cluster, StackOutputs.model_validate(
        example_outputs(cluster, ssh_user="ubuntu")))))
    monkeypatch.setattr(hostkeys, "probe", lambda *a, **k: {})
    seen: dict[str, Any] = {}
    converge(ConvergeOptions(inventory=path, runs_dir=tmp_path / "runs"), progress_out=io.StringIO(),
             runner=lambda **kw: seen.update(kw) or SimpleNamespace(rc=0, status="successful", stats=None))
    assert " -F " not in seen["envvars"]["ANSIBLE_SSH_ARGS"]
    assert not (hostkeys.runs.cluster_state_dir("oci-h100") / hostkeys.JUMP_CONFIG).exists()


def test_down_forgets_the_host_key_of_a_bastion_the_stack_made_alone(tmp_path: Path) -> None:
    import json

    from gpucluster.up import _node_hosts

    made = tmp_path / "made.json"
    made.write_text(json.dumps(example_outputs(load_spec(REPO / "Pulumi.aws-h100.yaml"), ssh_user="ubuntu")))
    assert _node_hosts(made)[-1] == BASTION_PUBLIC and len(_node_hosts(made)) == 7
    existing = tmp_path / "existing.json"
    existing.write_text(json.dumps(example_outputs(load_spec(REPO / "Pulumi.azure-h100.yaml"), ssh_user="azureuser")))
    assert "203.0.113.10" not in _node_hosts(existing) and len(_node_hosts(existing)) == 6


@pytest.mark.parametrize("args", ["-o ProxyCommand=sh -c 'touch /tmp/owned'",
                                  f"-o ProxyJump={JUMP} -o ProxyCommand=x", f"-o ProxyJump={JUMP}\n  LocalCommand x"])
def test_the_jump_is_the_only_ssh_option_an_inventory_may_carry(args: str) -> None:
    data = _inventory()
    data["all"]["hosts"]["gpu-1"]["ansible_ssh_common_args"] = args
    with pytest.raises(InputError) as err:
        validate_inventory(data, "inventory.yml")
    assert any(p.startswith("all.hosts.gpu-1.ansible_ssh_common_args") for p in err.value.problems)
