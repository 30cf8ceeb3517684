"""Every cloud node boots a pinned image; a lookup is an explicit opt-in the policy reports, and a
changed image never replaces a running node (ignore_changes reaches the engine)."""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path
from typing import Any

import pulumi
import pytest

from gpucluster.cli import main
from gpucluster.errors import InputError
from gpucluster.plan import Plan, plan_stack, run_mocked
from gpucluster.spec import load_spec
from stacks import policy
from stacks.components.common import IMAGE_IGNORE_CHANGES
from tests.unit.stacks.conftest import ROOT, write_stack

main_module = importlib.import_module("stacks.__main__")

AMI = "ami-0123456789abcdef0"
OTHER_AMI = "ami-0aaaaaaaaaaaaaaaa"


def _nodes(plan: Plan, type_: str) -> list[Any]:
    return plan.by_type(type_)


def _image_rule(plan: Plan) -> Any:
    (result,) = [r for r in plan.policy if r.rule == "image-pinned"]
    return result


def _one_line_error(path: Path, capsys: pytest.CaptureFixture[str], *needles: str) -> None:
    rc = main(["spec", "validate", str(path)])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err


# --- AWS -------------------------------------------------------------------------------------


def test_a_per_region_ami_reaches_every_gpu_instance(tmp_path: Path) -> None:
    stack = write_stack(tmp_path, "aws-h100", {"target.ami_id": None,
                                               "target.ami_ids": {"us-east-1": OTHER_AMI, "eu-west-1": AMI}})
    plan = plan_stack(stack)
    gpus = [r for r in _nodes(plan, policy.AWS_INSTANCE) if r.tag("gpucluster-pool") == "gpu"]
    assert len(gpus) == 2
    assert {r.inputs["ami"] for r in gpus} == {OTHER_AMI}  # the target's region, not eu-west-1
    assert _image_rule(plan).status == "pass"


def test_the_example_aws_stack_passes_the_image_rule(aws_plan: Plan) -> None:
    assert _image_rule(aws_plan).status == "pass"
    assert {r.tag("gpucluster-image") for r in _nodes(aws_plan, policy.AWS_INSTANCE)} == {"pinned"}


def test_aws_without_a_pin_is_refused_naming_ami_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack = write_stack(tmp_path, "aws-h100", {"target.ami_id": None})
    with pytest.raises(InputError, match="ami_id: no AMI pinned for region us-east-1"):
        load_spec(stack)
    _one_line_error(stack, capsys, "ami_id", "us-east-1")


def test_an_ami_id_of_the_wrong_shape_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="ami_id"):
        load_spec(write_stack(tmp_path, "aws-h100", {"target.ami_id": "ami-12345"}))


def test_the_aws_lookup_opt_in_is_flagged_as_a_warning(tmp_path: Path) -> None:
    stack = write_stack(tmp_path, "aws-h100", {"target.ami_id": None, "target.service_ami_id": None,
                                               "target.ami_lookup": True})
    plan = plan_stack(stack)
    result = _image_rule(plan)
    assert result.status == "warn"
    assert len(result.offenders) == len(_nodes(plan, policy.AWS_INSTANCE)) == 7  # six nodes and the bastion
    assert not plan.failed  # a warning does not stop the run
    # The mocks answer getAmi with an id derived from the name filter: the lookup did run.
    assert all(r.inputs["ami"] != AMI for r in _nodes(plan, policy.AWS_INSTANCE))


def test_a_lookup_beside_a_pin_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="ami_lookup"):
        load_spec(write_stack(tmp_path, "aws-h100", {"target.ami_lookup": True}))


# --- Azure -----------------------------------------------------------------------------------


def test_the_pinned_azure_urn_reaches_every_vm(azure_plan: Plan) -> None:
    vms = _nodes(azure_plan, policy.AZURE_VM)
    assert vms
    assert {tuple(sorted(r.inputs["sourceImageReference"].items())) for r in vms} == {
        (("offer", "ubuntu-hpc"), ("publisher", "microsoft-dsvm"), ("sku", "2204"), ("version", "22.04.2026072901"))}
    assert _image_rule(azure_plan).status == "pass"


@pytest.mark.parametrize("version", ["latest", "Latest"])
def test_azure_latest_is_refused_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  version: str) -> None:
    stack = write_stack(tmp_path, "azure-h100", {"target.image": f"microsoft-dsvm:ubuntu-hpc:2204:{version}"})
    _one_line_error(stack, capsys, "gpucluster.target.image", "`latest` is not a pin")


def test_an_azure_vm_on_latest_fails_the_rule_even_past_the_model(azure_plan: Plan) -> None:
    vm = _nodes(azure_plan, policy.AZURE_VM)[0]
    ref = {**vm.inputs["sourceImageReference"], "version": "latest"}
    broken = dataclasses.replace(vm, inputs={**vm.inputs, "sourceImageReference": ref})
    result = policy.image_pinned([broken])
    assert result.status == "fail"
    assert "latest" in result.offenders[0]


# --- OCI -------------------------------------------------------------------------------------


def test_oci_without_an_image_id_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack = write_stack(tmp_path, "oci-h100", {"target.image_id": None})
    _one_line_error(stack, capsys, "image_id: no image pinned")


def test_the_oci_lookup_opt_in_is_flagged_and_follows_the_os(tmp_path: Path) -> None:
    stack = write_stack(tmp_path, "oci-h100", {"target.image_id": None, "target.image_lookup": True})
    plan = plan_stack(stack)
    assert _image_rule(plan).status == "warn"
    assert {r.inputs["sourceDetails"]["sourceId"] for r in _nodes(plan, policy.OCI_INSTANCE)} == {
        "ocid1.image.oc1..mockubuntu2204"}


def test_the_pinned_oci_image_passes_the_rule(oci_plan: Plan) -> None:
    assert _image_rule(oci_plan).status == "pass"


# --- the rule and the resource option ---------------------------------------------------------


def test_a_cloud_node_that_does_not_say_how_its_image_was_chosen_fails(aws_plan: Plan) -> None:
    inst = _nodes(aws_plan, policy.AWS_INSTANCE)[0]
    tags = {k: v for k, v in inst.inputs["tags"].items() if k != "gpucluster-image"}
    result = policy.image_pinned([dataclasses.replace(inst, inputs={**inst.inputs, "tags": tags})])
    assert result.status == "fail"


def test_the_image_rule_is_not_applicable_without_cloud_nodes(ib_plan: Plan) -> None:
    assert _image_rule(ib_plan).status == "n/a"


@pytest.mark.parametrize(("stack", "type_", "target"), [
    ("aws-h100", policy.AWS_INSTANCE, "aws"),
    ("azure-h100", policy.AZURE_VM, "azure"),
    ("oci-h100", policy.OCI_INSTANCE, "oci"),
])
def test_every_instance_ignores_later_changes_of_its_image(stack: str, type_: str, target: str) -> None:
    seen: dict[str, list[str]] = {}
    cluster = load_spec(ROOT / f"Pulumi.{stack}.yaml")

    # A stack transformation sees the options the program gave each resource, as the engine does.
    def record(args: pulumi.ResourceTransformationArgs) -> None:
        if args.type_ == type_:
            seen[args.name] = list(args.opts.ignore_changes or [])

    def program() -> Any:
        pulumi.runtime.register_stack_transformation(record)
        return main_module.program(cluster)

    run_mocked(program, stack=cluster.stack)
    assert len(seen) >= 4
    assert all(set(IMAGE_IGNORE_CHANGES[target]) <= set(v) for v in seen.values()), seen
    assert IMAGE_IGNORE_CHANGES == {"aws": ["ami"], "azure": ["sourceImageReference"],
                                    "oci": ["sourceDetails.sourceId"]}


def test_the_gate_lets_a_lookup_through_with_one_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from stacks.gate import PolicyGate

    warned: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda msg, *a, **k: warned.append(msg))
    plan = plan_stack(write_stack(tmp_path, "oci-h100", {"target.image_id": None, "target.image_lookup": True}))
    gate = PolicyGate()
    gate.records = list(plan.resources)
    results = gate.verdict()  # raises on a failure; a warning passes
    assert [r.status for r in results if r.rule == "image-pinned"] == ["warn"]
    assert len(warned) == 1 and warned[0].startswith("policy image-pinned: ")


def test_the_region_map_needs_an_entry_for_the_targets_region(tmp_path: Path) -> None:
    stack = write_stack(tmp_path, "aws-h100", {"target.ami_id": None, "target.ami_ids": {"eu-west-1": AMI}})
    with pytest.raises(InputError, match=r"ami_ids\.us-east-1"):
        load_spec(stack)
    cluster = load_spec(write_stack(tmp_path, "aws-h100", {"target.ami_ids": {"us-east-1": OTHER_AMI}}))
    assert cluster.spec.target.pinned_ami() == AMI  # type: ignore[union-attr]  # ami_id wins over the map
