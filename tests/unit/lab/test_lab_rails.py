"""The lab's compute rails: a bridge and a subnet per rail, a veth per rail on each GPU node named
as the platform names it, and names `down` trusts only when they are the lab's own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpucluster.errors import InputError
from gpucluster.lab.layout import LabLayout, layout_lab
from gpucluster.lab.state import _plan_problem
from gpucluster.spec import load_spec

REPO = Path(__file__).resolve().parents[3]


def _stack(tmp_path: Path, rails: int | None, fabric: str = "10.77.1.0/24") -> Path:
    text = (REPO / "Pulumi.lab.yaml").read_text().replace("fabric_cidr: 10.77.1.0/24", f"fabric_cidr: {fabric}")
    if rails is not None:
        text = text.replace("    kind: lab\n", f"    kind: lab\n    rails: {rails}\n", 1)
    path = tmp_path / "Pulumi.lab.yaml"
    path.write_text(text)
    return path


def test_gpu_nodes_get_the_default_two_rails_storage_nodes_none(tmp_path: Path) -> None:
    plan = layout_lab(load_spec(_stack(tmp_path, None)))
    assert plan.rail_cidrs == ("10.77.2.0/24", "10.77.3.0/24")
    assert len(set(plan.rail_bridges)) == 2 and all(b.startswith("gc") and len(b) <= 15 for b in plan.rail_bridges)
    by_name = {n.name: n for n in plan.nodes}
    assert [r.interface for r in by_name["gpu-1"].rails] == ["enp16s0np0", "enp32s0np0"]
    assert [r.bridge for r in by_name["gpu-2"].rails] == list(plan.rail_bridges)
    assert by_name["stor-1"].rails == ()
    veths = [r.veth for n in plan.nodes for r in n.rails]
    assert len(set(veths)) == 4 and all(len(v) <= 15 for v in veths)


def test_eight_rails_and_the_state_round_trip(tmp_path: Path) -> None:
    cluster = load_spec(_stack(tmp_path, 8))
    plan = layout_lab(cluster)
    assert len(plan.rail_cidrs) == 8 and plan.rail_cidrs[-1] == "10.77.9.0/24"
    assert [r.address for r in cluster.node("gpu-2").rails][:2] == ["10.77.2.11", "10.77.3.11"]
    assert LabLayout.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan
    assert _plan_problem(plan, plan.lab_dir) is None


def test_a_state_file_from_before_rails_reads_as_no_rails(tmp_path: Path) -> None:
    data = layout_lab(load_spec(_stack(tmp_path, 1))).to_dict()
    data.pop("rail_bridges"), data.pop("rail_cidrs")
    for n in data["nodes"]:
        n.pop("rails")
    old = LabLayout.from_dict(data)
    assert old.rail_bridges == () and all(n.rails == () for n in old.nodes)


def test_a_plan_naming_a_foreign_rail_link_is_refused(tmp_path: Path) -> None:
    plan = layout_lab(load_spec(_stack(tmp_path, 2)))
    data = plan.to_dict()
    data["nodes"][0]["rails"][0]["veth"] = "eth0"
    assert "rail link 'eth0'" in str(_plan_problem(LabLayout.from_dict(data), plan.lab_dir))
    data = plan.to_dict()
    data["rail_bridges"][0] = "docker0"
    assert "not a lab bridge name" in str(_plan_problem(LabLayout.from_dict(data), plan.lab_dir))


@pytest.mark.parametrize("rails", [0, 9])
def test_rails_out_of_range_are_bad_input(tmp_path: Path, rails: int) -> None:
    with pytest.raises(InputError, match="rails"):
        load_spec(_stack(tmp_path, rails))


def test_a_rail_subnet_that_overlaps_another_network_names_the_rails(tmp_path: Path) -> None:
    # fabric 10.77.1.0/24: rails 10.77.2.0/24, 10.77.3.0/24; a management network over 10.77.2.0/23 clashes.
    text = _stack(tmp_path, 2).read_text().replace("management_cidr: 10.77.0.0/24", "management_cidr: 10.77.2.0/23")
    (tmp_path / "Pulumi.lab.yaml").write_text(text)
    with pytest.raises(InputError) as err:
        load_spec(tmp_path / "Pulumi.lab.yaml")
    assert any("target.rails" in p and "overlaps" in p for p in err.value.problems), err.value.problems


def test_rails_past_the_end_of_ipv4_are_bad_input(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"target\.rails"):
        load_spec(_stack(tmp_path, 2, fabric="255.255.254.0/24"))


def test_outputs_of_an_older_rail_plan_are_refused(tmp_path: Path) -> None:
    from gpucluster.inventory import build_inventory
    from gpucluster.outputs import build_outputs, parse_outputs

    one = load_spec(_stack(tmp_path, 1))
    outputs = parse_outputs(build_outputs(one, ssh_user="root", fabric_interface="eth1"), "outputs.json")
    two = load_spec(_stack(tmp_path, 2))
    with pytest.raises(InputError, match=r"outputs\.nodes\[0\]\.rails: enp16s0np0, but the stack file plans "
                                         r"enp16s0np0, enp32s0np0"):
        build_inventory(two, outputs)
    assert build_inventory(one, outputs)["all"]["hosts"]["gpu-1"]["gpucluster_rails"][0]["interface"] == "enp16s0np0"
