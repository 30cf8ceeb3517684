"""storage.failure_domain and storage.locations: which CRUSH bucket each node sits in, and the
specs the cross-field checks accept (the rejected ones are in test_invalid.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpucluster.spec import load_spec
from gpucluster.spec.rules import failure_domains

REPO = Path(__file__).resolve().parents[3]
Mutate = Callable[[dict[str, Any]], None]


def test_default_is_host_and_every_node_is_its_own_domain() -> None:
    cluster = load_spec(REPO / "Pulumi.lab.yaml")
    assert cluster.spec.storage is not None
    assert cluster.spec.storage.failure_domain == "host"
    assert cluster.spec.storage.locations == {}
    assert failure_domains(cluster.spec) == {n.name: n.name for n in cluster.nodes}


def test_bare_metal_racks_are_the_rack_domains() -> None:
    cluster = load_spec(REPO / "Pulumi.onprem-h100-ib.yaml")
    assert cluster.spec.storage is not None and cluster.spec.storage.failure_domain == "rack"
    domains = failure_domains(cluster.spec)
    assert {n: domains[n] for n in ("stor-01", "stor-02", "stor-03")} == {
        "stor-01": "r1", "stor-02": "r2", "stor-03": "r3"}


def test_locations_win_over_racks(stack_file: Callable[[str, Mutate], Path]) -> None:
    def mutate(config: dict[str, Any]) -> None:
        config["gpucluster:storage"]["locations"] = {"stor-01": "hall-a-r1"}

    cluster = load_spec(stack_file("Pulumi.onprem-h100-ib.yaml", mutate))
    assert failure_domains(cluster.spec)["stor-01"] == "hall-a-r1"


def test_fewer_domains_than_monitors_is_accepted_when_spread_evenly(
    stack_file: Callable[[str, Mutate], Path],
) -> None:
    # Two rooms, three monitors: two in one room is the best spread there is.
    def mutate(config: dict[str, Any]) -> None:
        storage = config["gpucluster:storage"]
        storage["failure_domain"] = "room"
        storage["locations"] = {"stor-01": "a", "stor-02": "b", "stor-03": "a"}
        for pool in storage["pools"]:
            pool["size"] = 2

    cluster = load_spec(stack_file("Pulumi.onprem-h100-ib.yaml", mutate))
    assert cluster.spec.storage is not None and cluster.spec.storage.failure_domain == "room"


def test_lab_with_racks_from_locations(stack_file: Callable[[str, Mutate], Path]) -> None:
    def mutate(config: dict[str, Any]) -> None:
        config["gpucluster:storage"]["failure_domain"] = "rack"
        config["gpucluster:storage"]["locations"] = {"stor-1": "r1"}

    cluster = load_spec(stack_file("Pulumi.lab.yaml", mutate))
    assert failure_domains(cluster.spec) == {"stor-1": "r1"}
