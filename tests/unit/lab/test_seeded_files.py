"""Files the lab seeds into a node and a converge later owns are not fought over."""

from __future__ import annotations

from pathlib import Path

from gpucluster.lab import node


def test_seed_writes_a_new_file_and_rewrites_its_own(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    assert node._seed(tmp_path, "hosts", "10.0.0.10\tgpu-1\n") is True
    assert node._seed(tmp_path, "hosts", "10.0.0.10\tgpu-1\n") is False
    assert node._seed(tmp_path, "hosts", "10.0.0.11\tgpu-2\n") is True
    assert hosts.read_text() == "10.0.0.11\tgpu-2\n"


def test_seed_leaves_a_converged_file_alone(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    converged = f"# {node._CONVERGE_MARK}: local edits are overwritten on the next converge.\n10.0.0.10 gpu-1\n"
    hosts.write_text(converged)
    assert node._seed(tmp_path, "hosts", "something the lab would write\n") is False
    assert hosts.read_text() == converged


def test_the_mark_is_the_one_converge_writes() -> None:
    group_vars = Path(__file__).resolve().parents[3] / "playbooks" / "group_vars" / "all.yml"
    assert node._CONVERGE_MARK in group_vars.read_text()


def test_seed_leaves_a_file_holding_the_converges_block_alone(tmp_path: Path) -> None:
    """/etc/hosts carries the common role's block, not the managed header: `lab up` after a converge
    must not rewrite it, or every `make lab` rerun reports the block as changed again."""
    hosts = tmp_path / "hosts"
    converged = ("127.0.0.1\tlocalhost\n10.0.0.10\tgpu-1\n"
                 f"{node._CONVERGE_BLOCK_MARK}lab\n10.0.0.10 gpu-1\n# END gpucluster lab\n")
    hosts.write_text(converged)
    assert node._seed(tmp_path, "hosts", "something the lab would write\n") is False
    assert hosts.read_text() == converged


def test_the_block_mark_is_the_one_the_common_role_writes() -> None:
    import yaml

    tasks = Path(__file__).resolve().parents[3] / "roles" / "common" / "tasks" / "hosts.yml"
    block = next(t for t in yaml.safe_load(tasks.read_text()) if "ansible.builtin.blockinfile" in t)
    marker = block["ansible.builtin.blockinfile"]["marker"]
    assert marker.replace("{mark}", "BEGIN").startswith(node._CONVERGE_BLOCK_MARK)
