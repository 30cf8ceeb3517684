"""What the suite puts on a node lies in a private folder of the run, never at a fixed name in
/var/tmp that another local user of the node could take first (issue 27)."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest

from gpucluster.conformance import allreduce_mpi, rdma_checks, remote, run_gpu_burn
from gpucluster.conformance.remote import NodeFolderError
from gpucluster.parsers import NotToolOutput
from tests.unit.conformance.test_publish import LocalRemote  # a node's shell, run here

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[3]
RUN = "abc123def456"
# The names the suite used before: a local user who made one of them first (a link, a file of
# theirs) had root write through it, or run their code.
OLD_FIXED_NAMES = ("gpucluster-allreduce-mpi.py", "gpucluster-burn-torch.py", "gpucluster-burn-smi.csv",
                   "gpucluster-nccl-tests.json", "gpucluster-gdr-server.log", "gpucluster-ibwb-server.log")


@pytest.fixture
def var_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A sticky, world-writable folder standing in for the node's /var/tmp, with every old fixed
    name planted as a link to a file the attacker wants written."""
    folder = tmp_path / "var-tmp"
    folder.mkdir()
    folder.chmod(0o1777)
    victim = tmp_path / "victim"
    victim.write_text("the operator's file\n")
    for name in OLD_FIXED_NAMES:
        (folder / name).symlink_to(victim)
    monkeypatch.setattr(remote, "NODE_FOLDER_PARENT", str(folder))
    monkeypatch.setenv(remote.RUN_ID_ENV, RUN)
    return folder


def test_no_module_names_a_fixed_path_in_a_shared_temporary_folder() -> None:
    """Every file the suite or its engines put on a node goes through remote.node_folder."""
    offenders = []
    for path in [*(REPO / "gpucluster" / "conformance").glob("*.py"), *(REPO / "tests" / "conformance").glob("*.py")]:
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"['\"\s>](/var)?/tmp/", line) and "NODE_FOLDER_PARENT =" not in line:
                offenders.append(f"{path.relative_to(REPO)}:{i}: {line.strip()}")
    assert offenders == []


def test_the_mpi_script_goes_to_a_private_folder_and_no_planted_link_is_followed(var_tmp: Path) -> None:
    nodes = [LocalRemote("gpu-1"), LocalRemote("gpu-2")]
    folder = remote.node_folder_path()
    assert folder.startswith(f"{var_tmp}/gpucluster-{RUN}.")
    # Both nodes share this /var/tmp: the second finds the first's folder, this user's, and uses it.
    assert allreduce_mpi.ship_script(nodes, folder) == []
    st = os.lstat(folder)
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid()
    script = Path(allreduce_mpi.script_path(folder))
    assert script.read_text() == allreduce_mpi.NODE_SCRIPT and stat.S_IMODE(script.stat().st_mode) == 0o600
    argv = allreduce_mpi.mpirun_argv(["10.0.0.1", "10.0.0.2"], "10.1.0.0/24",
                                     allreduce_mpi.MpiSettings(sizes=(1024,), folder=folder))
    assert str(script) in argv
    assert (var_tmp.parent / "victim").read_text() == "the operator's file\n"
    # The session's cleanup removes the run's folders on the node, whatever ended the run.
    out = LocalRemote("gpu-1").run(remote.cleanup_script(RUN)).stdout
    assert "folders 1" in out and not Path(folder).exists()


def test_a_name_another_user_took_first_is_refused_naming_it(var_tmp: Path) -> None:
    node = LocalRemote("gpu-1")
    taken = remote.node_folder_path()
    Path(taken).symlink_to(var_tmp.parent)  # a link to a folder of "ours": still not ours to use
    res = node.run(remote.make_folder_script(taken) + " && echo made")
    assert res.rc == 1 and "made" not in res.stdout and f"cannot make the private folder {taken}" in res.stderr
    lax = remote.node_folder_path()
    os.mkdir(lax, 0o777)
    os.chmod(lax, 0o777)  # a folder others may write to is not private, whoever owns it
    assert node.run(remote.make_folder_script(lax)).rc == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="making a folder another user owns needs root")
def test_a_folder_of_another_user_is_refused_and_survives_the_cleanup(var_tmp: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    theirs = f"{var_tmp}/gpucluster-{RUN}.0123456789abcdef"
    os.mkdir(theirs, 0o700)
    os.chown(theirs, 65534, 65534)
    monkeypatch.setattr(remote.secrets, "token_hex", lambda n: "0123456789abcdef")
    with pytest.raises(NodeFolderError, match=rf"gpu-1: cannot make the private folder {re.escape(theirs)}"):
        with remote.node_folder([LocalRemote("gpu-1")]):
            pass
    LocalRemote("gpu-1").run(remote.cleanup_script(RUN))
    assert os.path.isdir(theirs) and os.stat(theirs).st_uid == 65534  # never removed: not this user's


def test_burn_samples_and_the_gdr_servers_log_lie_in_a_folder_removed_after(var_tmp: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rdma_checks, "GDR_LISTEN_WAIT_S", 0)  # no server will listen here
    node = LocalRemote("gpu-1")
    with pytest.raises(NotToolOutput):  # no gpu-burn here: what matters is where its files went
        run_gpu_burn.run_gpu_burn(node, 1, install_dir=str(var_tmp / "no-gpu-burn"))
    sampler = next(c for c in node.commands if "nvidia-smi" in c)
    assert f"> {var_tmp}/gpucluster-{RUN}." in sampler and "/burn-smi.csv" in sampler
    server = LocalRemote("gpu-2")
    rdma_checks.run_gdr_pair(server, LocalRemote("gpu-1"), "10.0.0.2", 0, "mlx5_0", "mlx5_0", (False, False), seconds=1)
    assert any(f"> {var_tmp}/gpucluster-{RUN}." in c and "/gdr-server.log" in c for c in server.commands)
    assert sorted(p.name for p in var_tmp.iterdir()) == sorted(OLD_FIXED_NAMES)  # nothing left, nothing followed
    assert (var_tmp.parent / "victim").read_text() == "the operator's file\n"
