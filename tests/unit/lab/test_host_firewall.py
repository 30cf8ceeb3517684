"""The host's table of a lab reached through a bastion (gpucluster/lab/firewall.py): applied once,
left alone while it holds, removed with the bastion, and a clear error without nft. nft itself is
stood in for (its calls recorded); the twins apply the real one (tests/integration/twins)."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpucluster import twin
from gpucluster.lab import firewall
from gpucluster.lab.host import LabError
from gpucluster.lab.layout import LabLayout
from gpucluster.spec import load_spec

REPO = Path(__file__).resolve().parents[3]


class FakeNft:
    def __init__(self) -> None:
        self.tables: dict[str, str] = {}
        self.calls: list[list[str]] = []

    def run(self, cmd: list[str], what: str, *, check: bool = True, input_text: str | None = None,
            **_: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append(cmd[1:])
        args = cmd[1:]
        rc = 0
        stdout = ""
        if args[:2] == ["list", "table"]:
            rc = 0 if args[3] in self.tables else 1
            stdout = self.tables.get(args[3], "")
        elif args[:2] == ["delete", "table"]:
            rc = 0 if self.tables.pop(args[3], None) is not None else 1
        elif args == ["-f", "-"]:
            assert input_text is not None
            self.tables[input_text.splitlines()[0].split()[-1]] = input_text  # "table inet NAME"
        if check and rc:
            raise LabError(f"{what}: exit {rc}")
        return subprocess.CompletedProcess(cmd, rc, stdout, "")


@pytest.fixture
def plan(tmp_path: Path) -> LabLayout:
    p = twin.inputs(load_spec(REPO / "Pulumi.twin-aws-p5.yaml")).plan
    return dataclasses.replace(p, state_root=str(tmp_path))


@pytest.fixture
def nft(monkeypatch: pytest.MonkeyPatch) -> FakeNft:
    fake = FakeNft()
    monkeypatch.setattr(firewall, "run", fake.run)
    monkeypatch.setattr(firewall, "which", lambda cmd: "/usr/sbin/nft" if cmd == "nft" else None)
    return fake


def test_the_table_is_applied_once_and_then_left_alone(plan: LabLayout, nft: FakeNft) -> None:
    plan.lab_dir.mkdir(parents=True)
    assert firewall.ensure(plan) is True
    assert nft.tables == {firewall.table_name(plan.name): firewall.rules(plan)}
    assert firewall.ensure(plan) is False  # a second `lab up` changes nothing
    # Someone deleted it: applied again.
    nft.tables.clear()
    assert firewall.ensure(plan) is True and nft.tables
    # Someone deleted its rule (the file on disk unchanged): the live table differs, applied again.
    name = firewall.table_name(plan.name)
    nft.tables[name] = "\n".join(line for line in nft.tables[name].splitlines() if "reject" not in line)
    assert firewall.ensure(plan) is True and "reject" in nft.tables[name]
    assert firewall.ensure(plan) is False


def test_a_lab_without_a_bastion_has_no_table_and_down_removes_it(plan: LabLayout, nft: FakeNft) -> None:
    plan.lab_dir.mkdir(parents=True)
    firewall.ensure(plan)
    direct = dataclasses.replace(plan, bastion=None, outside_cidr=None, outside_bridge=None)
    assert firewall.ensure(direct) is True and nft.tables == {}
    assert firewall.ensure(direct) is False
    firewall.ensure(plan)
    assert firewall.remove(plan.name) is True and nft.tables == {}
    assert firewall.remove(plan.name) is False


def test_without_nft_a_bastion_lab_is_refused_naming_the_package(plan: LabLayout,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(firewall, "which", lambda cmd: None)
    with pytest.raises(LabError, match=r"nft is not installed \(Debian package nftables\)"):
        firewall.ensure(plan)
    # A lab without a bastion needs none.
    assert firewall.ensure(dataclasses.replace(plan, bastion=None, outside_cidr=None, outside_bridge=None)) is False
