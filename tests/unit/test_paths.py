"""gpucluster/paths.py: one answer to "where are this stack's files", for every target."""

from __future__ import annotations

import configparser
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpucluster import paths
from gpucluster.cli import main
from gpucluster.errors import InputError
from gpucluster.inventory import build_inventory, write_inventory
from gpucluster.inventory_model import read_inventory
from gpucluster.lab.layout import layout_lab
from gpucluster.outputs import StackOutputs
from gpucluster.spec import load_spec
from tests.unit.example_outputs import example_outputs

REPO = Path(__file__).resolve().parents[2]
StackFile = Callable[[str, Callable[[dict[str, Any]], None]], Path]


def test_a_lab_keeps_its_files_in_its_own_folder(stack_file: StackFile, tmp_path: Path) -> None:
    def mutate(config: dict[str, Any]) -> None:
        config["gpucluster:target"]["state_dir"] = str(tmp_path / "labs")

    stack = stack_file("Pulumi.lab.yaml", mutate)
    found = paths.resolve(stack)
    plan = layout_lab(load_spec(stack))
    assert found.target == "lab" and found.cluster == "lab"
    assert found.lab_state_root == tmp_path / "labs"
    # The lab's own layout and the paths module name the same folder and outputs file.
    assert found.lab_dir == found.folder == plan.lab_dir == tmp_path / "labs" / "lab"
    assert found.outputs_file == plan.outputs_file == plan.lab_dir / "outputs.json"
    assert found.inventory_file == plan.lab_dir / "inventory.yml"
    # Run folders go under the folder the command runs in, never into an installed package.
    assert found.runs_dir == Path("runs")


@pytest.mark.parametrize("stack", ["Pulumi.aws-h100.yaml", "Pulumi.onprem-h100-ib.yaml"])
def test_a_real_target_keeps_its_files_in_the_clusters_state_folder(stack: str, _state_dir: Path) -> None:
    found = paths.resolve(REPO / stack)
    cluster = load_spec(REPO / stack).name
    assert found.folder == _state_dir / "clusters" / cluster
    assert (found.outputs_file, found.inventory_file) == (found.folder / "outputs.json", found.folder / "inventory.yml")
    assert found.lab_dir is None and found.lab_state_root is None
    assert not found.folder.exists(), "naming a path creates nothing"


def test_a_missing_inventory_names_the_command_that_writes_it(_state_dir: Path) -> None:
    aws = paths.resolve(REPO / "Pulumi.aws-h100.yaml")
    remedy = r"gpucluster inventory --outputs .*outputs\.json --stack .* -o .*inventory\.yml"
    with pytest.raises(InputError, match=remedy):
        paths.existing_inventory(aws)
    aws.folder.mkdir(parents=True)
    aws.inventory_file.write_text("all: {}\n")
    assert paths.existing_inventory(aws) == aws.inventory_file


def test_a_missing_lab_inventory_says_to_bring_the_lab_up(stack_file: StackFile, tmp_path: Path) -> None:
    def mutate(config: dict[str, Any]) -> None:
        config["gpucluster:target"]["state_dir"] = str(tmp_path / "labs")

    with pytest.raises(InputError, match=r"is the lab up\? run `gpucluster lab up --stack"):
        paths.existing_inventory(paths.resolve(stack_file("Pulumi.lab.yaml", mutate)))


def test_cli_prints_json_and_single_fields(capsys: pytest.CaptureFixture[str], _state_dir: Path) -> None:
    assert main(["paths", "--stack", str(REPO / "Pulumi.lab.yaml"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data == paths.resolve(REPO / "Pulumi.lab.yaml").as_dict()
    assert main(["paths", "--stack", str(REPO / "Pulumi.lab.yaml"), "inventory_file"]) == 0
    assert capsys.readouterr().out == data["inventory_file"] + "\n"
    # A field the target has none of is bad input, not an empty line.
    assert main(["paths", "--stack", str(REPO / "Pulumi.aws-h100.yaml"), "lab_dir"]) == 2
    assert "has none" in capsys.readouterr().err
    assert main(["paths", "--stack", str(REPO / "missing.yaml")]) == 2


def _write_inventory(stack: Path, **all_vars: Any) -> Path:
    """What `gpucluster inventory` writes for the stack, with these variables set in all.vars (as a person would)."""
    cluster = load_spec(stack)
    data = build_inventory(cluster, StackOutputs.model_validate(example_outputs(cluster, ssh_user="ubuntu")))
    data["all"]["vars"].update(all_vars)
    inventory = paths.resolve(stack).inventory_file
    inventory.parent.mkdir(parents=True, exist_ok=True)
    write_inventory(data, inventory)
    return inventory


def test_the_kubeconfig_is_the_inventorys_answer_where_there_is_one(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`gpucluster paths kubeconfig_file` is no second judge: before the inventory, the node contract's
    place beside it; with one, what the inventory says (Inventory.kubeconfig_file, which the role,
    converge and up follow), moved where it sets kubernetes_control_plane_kubeconfig_fetch_dest."""
    stack = REPO / "Pulumi.onprem-h100-ib.yaml"
    found = paths.resolve(stack)
    assert found.kubeconfig_file == found.inventory_file.parent / "admin.conf"
    assert main(["paths", "--stack", str(stack), "kubeconfig_file"]) == 0
    assert capsys.readouterr().out == f"{found.inventory_file.parent / 'admin.conf'}\n"

    inventory = _write_inventory(stack)
    beside = inventory.parent / "admin.conf"
    assert found.kubeconfig_file == read_inventory(inventory)[0].kubeconfig_file(inventory) == beside

    moved = tmp_path / "kube" / "cluster-admin.conf"
    inventory = _write_inventory(stack, kubernetes_control_plane_kubeconfig_fetch_dest=str(moved))
    assert found.kubeconfig_file == read_inventory(inventory)[0].kubeconfig_file(inventory) == moved
    assert main(["paths", "--stack", str(stack), "kubeconfig_file"]) == 0
    assert capsys.readouterr().out == f"{moved}\n"
    assert main(["paths", "--stack", str(stack), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kubeconfig_file"] == str(moved)
    assert main(["paths", "--stack", str(stack)]) == 0
    assert f"kubeconfig_file: {moved}\n" in capsys.readouterr().out


def test_an_unreadable_inventory_fails_the_kubeconfig_alone(capsys: pytest.CaptureFixture[str]) -> None:
    """The kubeconfig's place cannot be told from an inventory that cannot be read: exit 2 naming it,
    not the contract's default as if nothing moved it; the other paths read nothing and still answer."""
    stack = REPO / "Pulumi.onprem-h100-ib.yaml"
    inventory = paths.resolve(stack).inventory_file
    inventory.parent.mkdir(parents=True)
    inventory.write_text("all: {}\n")
    assert main(["paths", "--stack", str(stack), "kubeconfig_file"]) == 2
    assert str(inventory) in capsys.readouterr().err
    assert main(["paths", "--stack", str(stack), "--json"]) == 2
    capsys.readouterr()
    assert main(["paths", "--stack", str(stack), "inventory_file"]) == 0
    assert capsys.readouterr().out == f"{inventory}\n"


def test_paths_help_says_where_the_kubeconfig_answer_comes_from(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["paths", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "kubernetes_control_plane_kubeconfig_fetch_dest" in text and "default place" in text


def test_git_ignores_the_fetched_kubeconfig_wherever_an_inventory_lies() -> None:
    """An inventory kept in a checkout gets the cluster-admin key beside it: the contract's name is
    ignored in every folder (a pattern without a slash), so `git add` never takes it."""
    patterns = (REPO / ".gitignore").read_text(encoding="utf-8").splitlines()
    assert paths.KUBECONFIG_NAME in patterns


def test_the_makefile_and_the_lab_cli_share_the_answer(capsys: pytest.CaptureFixture[str]) -> None:
    """`gpucluster lab status --json` names the inventory where `gpucluster paths` does."""
    assert main(["paths", "--stack", str(REPO / "Pulumi.lab.yaml"), "outputs_file"]) == 0
    assert capsys.readouterr().out.strip() == str(layout_lab(load_spec(REPO / "Pulumi.lab.yaml")).outputs_file)


# Where a path into a stack's folder must not be written out by hand (gpucluster/paths.py names them).
_SCANNED = ["gpucluster", "scripts", "playbooks", "docs", "Makefile", "ansible.cfg", "stacks"]
_HARD_CODED = re.compile(r"/var/lib/gpucluster/lab/[A-Za-z0-9._-]+/(inventory\.yml|outputs\.json)")


def _files(entries: list[str]) -> list[Path]:
    out: list[Path] = []
    for entry in entries:
        path = REPO / entry
        out += [p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts] if path.is_dir() else [path]
    return out


def test_the_pattern_catches_a_hard_coded_lab_inventory() -> None:
    assert _HARD_CODED.search('INVENTORY = Path("/var/lib/gpucluster/lab/kube/inventory.yml")')
    assert _HARD_CODED.search("cat /var/lib/gpucluster/lab/lab/outputs.json")


def test_no_file_hard_codes_a_stacks_inventory_or_outputs() -> None:
    found = []
    for path in _files(_SCANNED):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        found += [f"{path.relative_to(REPO)}: {m.group(0)}" for m in _HARD_CODED.finditer(text)]
    assert found == []


def test_no_file_in_the_repository_hard_codes_the_default_labs_inventory() -> None:
    needle = "/var/lib/gpucluster/lab/lab/inventory.yml"
    skip = {".git", ".venv", "runs", "node_modules", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis"}
    found = []
    for folder, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in skip]
        for name in files:
            path = Path(folder) / name
            if path == Path(__file__).resolve():
                continue
            try:
                if needle in path.read_text(encoding="utf-8"):
                    found.append(str(path.relative_to(REPO)))
            except (UnicodeDecodeError, OSError):
                continue
    assert found == []


def test_ansible_cfg_names_no_default_inventory() -> None:
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(REPO / "ansible.cfg", encoding="utf-8")
    assert cfg.has_section("defaults")
    assert not cfg.has_option("defaults", "inventory") and not cfg.has_option("defaults", "hostfile")
