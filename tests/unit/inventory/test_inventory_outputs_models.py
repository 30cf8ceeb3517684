"""What the inventory carries from the stack outputs (the way in and out: ``gpucluster_access``,
``gpucluster_egress``; a node's ``gpucluster_rails``; ``gpucluster_capabilities``, in
test_capabilities.py): the outputs' own models (gpucluster/outputs.py), read back as the writer
wrote them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpucluster.errors import InputError
from gpucluster.inventory import parse_inventory_text
from gpucluster.inventory_model import validate_inventory
from gpucluster.outputs import OutputAccess, OutputBastion, OutputEgress, OutputRail

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "inventory"


def _golden(name: str = "aws-h100") -> dict[str, Any]:
    data: dict[str, Any] = parse_inventory_text((GOLDEN / f"{name}.yml").read_text())
    return data


def _problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(InputError) as err:
        validate_inventory(data, "inv.yml")
    return sorted(err.value.problems)


def test_the_way_in_and_out_read_back_as_the_outputs_models() -> None:
    v = validate_inventory(_golden(), "inv.yml").vars
    assert v.gpucluster_access == OutputAccess(mode="bastion", created=True, bastion=OutputBastion(
        host="198.51.100.20", user="ubuntu", port=22, source_cidr="10.40.32.10/32"))
    assert v.gpucluster_access.jump() == "ubuntu@198.51.100.20:22"
    assert v.gpucluster_egress == OutputEgress()


def test_inventories_before_the_way_in_was_carried_are_reached_directly() -> None:
    data = _golden()
    del data["all"]["vars"]["gpucluster_access"], data["all"]["vars"]["gpucluster_egress"]
    v = validate_inventory(data, "inv.yml").vars
    assert v.gpucluster_access == OutputAccess() and v.gpucluster_access.jump() is None
    assert v.gpucluster_egress is None
    # Written before a created bastion was told from an existing one: not created.
    data = _golden()
    del data["all"]["vars"]["gpucluster_access"]["created"]
    assert validate_inventory(data, "inv.yml").vars.gpucluster_access.created is False


def test_a_field_the_writer_writes_is_required_and_no_other_is_taken() -> None:
    data = _golden()
    access, egress = data["all"]["vars"]["gpucluster_access"], data["all"]["vars"]["gpucluster_egress"]
    del access["bastion"]["port"], egress["mirrors"]
    access["bastion"]["jump"] = "-oProxyCommand=sh"
    egress["mode"] = "socks"
    assert _problems(data) == [
        "all.vars.gpucluster_access.bastion.jump: unknown key",
        "all.vars.gpucluster_access.bastion.port: is required",
        "all.vars.gpucluster_egress.mirrors: is required",
        "all.vars.gpucluster_egress.mode: must be one of 'nat', 'proxy' or 'none'"]


def test_a_bastion_mode_without_its_bastion_is_refused() -> None:
    data = _golden()
    data["all"]["vars"]["gpucluster_access"]["bastion"] = None
    [problem] = _problems(data)
    assert problem.startswith("all.vars.gpucluster_access: ")
    assert "a bastion is named exactly when mode is bastion" in problem


def test_a_nodes_rails_read_back_as_the_outputs_rails() -> None:
    data = _golden("lab")
    host = validate_inventory(data, "inv.yml").hosts["gpu-1"]
    assert host.gpucluster_rails[0] == OutputRail(interface="enp16s0np0", address="10.77.2.10", cidr="10.77.2.0/24")
    rail = data["all"]["hosts"]["gpu-1"]["gpucluster_rails"][1]
    del rail["cidr"]
    rail["mtu"] = 9000
    assert _problems(data) == ["all.hosts.gpu-1.gpucluster_rails[1].cidr: is required",
                               "all.hosts.gpu-1.gpucluster_rails[1].mtu: unknown key"]
