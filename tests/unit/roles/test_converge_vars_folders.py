"""`gpucluster converge` refuses a node contract override (gpucluster.spec.contract.OVERRIDE_VARS) in a
group_vars/ or host_vars/ file Ansible would read beside the inventory or the playbook: the role would
follow it and the conformance suite, which reads the inventory file alone, would not. Refused, naming
the file and the variable, before a lock, a run folder or ansible-playbook."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucluster.cli import main
from gpucluster.converge import ConvergeOptions, converge, vars_files
from gpucluster.errors import InputError
from tests.unit.roles.render import inventory_for


@pytest.fixture
def inventory_file(tmp_path: Path) -> Path:
    path = tmp_path / "cluster" / "inventory.yml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(inventory_for("ethernet")))
    return path


def _never(**kwargs: Any) -> Any:
    raise AssertionError("ansible-playbook must not start")


def _refused(inventory_file: Path, playbook: Path | None = None) -> str:
    runs_dir = inventory_file.parent.parent / "runs"
    options = ConvergeOptions(inventory=inventory_file, runs_dir=runs_dir,
                              **({"playbook": playbook} if playbook else {}))
    with pytest.raises(InputError) as err:
        converge(options, progress_out=io.StringIO(), runner=_never)
    assert not runs_dir.exists()
    [line] = err.value.problems
    assert "set it there (a host's variables or all.vars)" in line
    return line


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize(("where", "var"), [
    ("group_vars/all.yml", "nccl_tests_install_dir"),
    ("group_vars/all.yaml", "monitoring_textfile_dir"),
    ("group_vars/all", "gpucluster_contract"),
    ("group_vars/all.json", "cuda_toolkit_install_method"),
    ("group_vars/all/contract.yml", "nvidia_driver_install_method"),
    ("group_vars/all/deeper/more", "gpu_validation_gpu_burn_install_dir"),
    ("group_vars/gpu.yml", "monitoring_node_exporter_listen_address"),
    ("group_vars/pool_gpu/x.yml", "nccl_tests_install_dir"),
    ("host_vars/gpu-2.yml", "nccl_tests_install_dir"),
    ("host_vars/gpu-1/a.yaml", "kubernetes_control_plane_kubeconfig_fetch_dest"),
])
def test_an_override_in_a_vars_file_beside_the_inventory_is_refused_naming_it(inventory_file: Path, where: str,
                                                                            var: str) -> None:
    text = f'{{"{var}": "/srv/x"}}\n' if where.endswith(".json") else f"---\nother_var: 1\n{var}: /srv/x\n"
    path = _write(inventory_file.parent / where, text)
    line = _refused(inventory_file)
    assert line.startswith(f"{path} sets {var}: the node contract's override"), line


def test_every_file_and_variable_is_named_on_one_line(inventory_file: Path) -> None:
    a = _write(inventory_file.parent / "group_vars" / "all.yml",
               "nccl_tests_install_dir: /srv/a\nmonitoring_textfile_dir: /srv/t\n")
    b = _write(inventory_file.parent / "host_vars" / "gpu-1.yml", "nccl_tests_install_dir: /srv/b\n")
    assert _refused(inventory_file).startswith(f"{a} sets nccl_tests_install_dir; {a} sets monitoring_textfile_dir; "
                                               f"{b} sets nccl_tests_install_dir: ")


def test_beside_the_playbook_too(tmp_path: Path, inventory_file: Path) -> None:
    playbook = _write(tmp_path / "play" / "site.yml", "- hosts: all\n  tasks: []\n")
    path = _write(tmp_path / "play" / "group_vars" / "all" / "main.yml", "monitoring_textfile_dir: /srv/t\n")
    assert _refused(inventory_file, playbook).startswith(f"{path} sets monitoring_textfile_dir: ")


@pytest.mark.parametrize("where", [
    # Names no group or host of this inventory has; files Ansible skips in a folder.
    "group_vars/nobody.yml", "host_vars/ghost-9.yml", "group_vars/all/.hidden.yml", "group_vars/all/old.yml~",
    "group_vars/all/notes.txt", "group_vars/all/x.d/y.yml",
    # Ansible reads the first of all, all.yml, all.yaml, all.json: the folder here, not this file.
    "group_vars/all.yml",
])
def test_what_ansible_does_not_read_is_not_refused(inventory_file: Path, where: str) -> None:
    _write(inventory_file.parent / "group_vars" / "all" / "fine.yml", "gpucluster_apt_timeout_s: 600\n")
    _write(inventory_file.parent / where, "nccl_tests_install_dir: /srv/x\n")
    folder = inventory_file.parent / where.split("/")[0]
    assert [p.name for p in vars_files(folder, ["all", "gpu-1"])] == (["fine.yml"] if where.startswith("group")
                                                                      else [])
    with pytest.raises(AssertionError, match="ansible-playbook must not start"):
        converge(ConvergeOptions(inventory=inventory_file, runs_dir=inventory_file.parent.parent / "runs"),
                 progress_out=io.StringIO(), runner=_never)


@pytest.mark.parametrize("text", [
    "nccl_tests_install_dir: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  3132\nother: !unsafe '{{ x }}'\n",
    "[nccl_tests_install_dir]\n",
])
def test_tags_are_not_this_readers_and_only_top_level_keys_count(inventory_file: Path, text: str) -> None:
    _write(inventory_file.parent / "group_vars" / "all.yml", text)
    if text.startswith("["):
        # A list sets nothing (Ansible refuses it itself).
        with pytest.raises(AssertionError, match="ansible-playbook must not start"):
            converge(ConvergeOptions(inventory=inventory_file, runs_dir=inventory_file.parent.parent / "runs"),
                     progress_out=io.StringIO(), runner=_never)
    else:
        assert "sets nccl_tests_install_dir: " in _refused(inventory_file)


def test_cli_refuses_it_with_one_line_and_exit_2(tmp_path: Path, inventory_file: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(inventory_file.parent / "host_vars" / "gpu-2.yml", "nccl_tests_install_dir: /srv/nccl\n")
    code = main(["converge", "--inventory", str(inventory_file), "--runs-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert f"{path} sets nccl_tests_install_dir" in err
    assert not (tmp_path / "runs").exists()
