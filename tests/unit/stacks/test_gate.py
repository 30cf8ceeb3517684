"""The policy gate inside the Pulumi program: what `pulumi preview` and `pulumi up` run.

The program (``stacks/__main__.py``) registers a stack transform that judges each resource as
the engine registers it, before the engine creates it, and judges the whole stack once every
resource has registered. Here the program runs under Pulumi's mocks; ``PlanMocks`` runs stack
transforms the way the engine does, in order and before it "creates" a resource, so a test can
break the program's inputs with a transform of its own registered ahead of the gate."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pulumi
import pytest

from gpucluster.plan import PlanMocks, Resource, run_mocked
from gpucluster.spec import Cluster, load_spec
from stacks import policy
from stacks.gate import PolicyGate
from tests.unit.stacks.conftest import ROOT, write_stack

main_module = importlib.import_module("stacks.__main__")

Mutation = Callable[[pulumi.ResourceTransformArgs], pulumi.ResourceTransformResult | None]


def cluster_of(stack: str) -> Cluster:
    return load_spec(ROOT / f"Pulumi.{stack}.yaml")


def run_program(
    cluster: Cluster,
    *,
    mutate: Mutation | None = None,
    gate: PolicyGate | None = None,
    mocks: PlanMocks | None = None,
    preview: bool = False,
) -> Mapping[str, Any]:
    def program() -> Mapping[str, Any]:
        if mutate is not None:
            pulumi.runtime.register_resource_transform(mutate)
        return main_module.program(cluster, gate=gate)

    _, outputs = run_mocked(program, stack=cluster.stack, preview=preview, mocks=mocks)
    return outputs


def setting(
    type_: str,
    change: Callable[[dict[str, Any]], None],
    only: Callable[[pulumi.ResourceTransformArgs], bool] = lambda a: True,
) -> Mutation:
    """A transform that edits the inputs of every resource of one type (as a careless edit of a
    component would), registered ahead of the gate."""

    def mutate(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
        if args.type_ != type_ or not only(args):
            return None
        props = dict(args.props)
        change(props)
        return pulumi.ResourceTransformResult(props=props, opts=args.opts)

    return mutate


def is_gpu(args: pulumi.ResourceTransformArgs) -> bool:
    return "gpu" in str((args.props.get("tags") or {}).get("gpucluster-roles", ""))


@pytest.mark.parametrize("stack", ["aws-h100", "azure-h100", "oci-h100", "onprem-h100-ib", "onprem-h100-roce", "lab"])
def test_the_gate_passes_every_example_stack_and_saw_every_resource(stack: str) -> None:
    gate = PolicyGate()
    outputs = run_program(cluster_of(stack), gate=gate)
    assert outputs["nodes"] is not None
    assert gate.results, "the final verdict never ran"
    assert {r.rule for r in gate.results} == {r.id for r in policy.RULES}
    assert not [r for r in gate.results if r.status == "fail"]
    # What the gate judged is what the mocks recorded: the engine's view, not a copy of it.
    records, _ = run_mocked(lambda: main_module.program(cluster_of(stack)), stack=stack)
    assert sorted((r.type, r.name) for r in gate.records) == sorted((r.type, r.name) for r in records)


def test_a_resource_that_breaks_a_rule_is_refused_before_it_is_created() -> None:
    mocks = PlanMocks()
    optional = setting(policy.AWS_INSTANCE, lambda p: p.update(metadataOptions={"httpTokens": "optional"}), is_gpu)
    with pytest.raises(pulumi.RunError) as err:
        run_program(cluster_of("aws-h100"), mutate=optional, mocks=mocks)
    message = str(err.value)
    assert "imds-v2-only" in message
    assert "Instance gpu-gpu-" in message  # the first refusal the program reports
    created = {name for _, name in mocks.created}
    assert not {"gpu-gpu-1", "gpu-gpu-2"} & created
    assert {"aws-h100-sg", "gpu-lt", "ceph-ceph-1"} <= created  # everything that obeys the rules was


def test_a_security_group_open_to_both_halves_of_the_internet_stops_the_program(tmp_path: Path) -> None:
    # Reached directly: the nodes' own group admits SSH from admin_cidrs.
    path = write_stack(tmp_path, "aws-h100", {"target.admin_cidrs": ["0.0.0.0/1", "128.0.0.0/1"],
                                              "target.access": {"mode": "direct"}})
    mocks = PlanMocks()
    with pytest.raises(pulumi.RunError) as err:
        run_program(load_spec(path), mocks=mocks)
    assert "no-public-management-port" in str(err.value)
    created = {name for _, name in mocks.created}
    assert "aws-h100-sg" not in created
    # Nothing that needs the group got as far as the cloud either.
    assert not [n for t, n in mocks.created if t == policy.AWS_INSTANCE]


def test_two_oci_rules_that_together_open_ssh_to_a_slash_fifteen_stop_the_second(tmp_path: Path) -> None:
    # Each admin CIDR is a /16 of public space, at the threshold alone; OCI gets one NSG rule
    # per CIDR and port, and the second rule for port 22 makes the union a /15.
    path = write_stack(tmp_path, "oci-h100", {"target.admin_cidrs": ["11.0.0.0/16", "11.1.0.0/16"]})
    mocks = PlanMocks()
    with pytest.raises(pulumi.RunError) as err:
        run_program(load_spec(path), mocks=mocks)
    assert "no-public-management-port" in str(err.value)
    rules = [n for t, n in mocks.created if t.endswith("NetworkSecurityGroupSecurityRule")]
    assert "oci-h100-nsg-admin-0-22" in rules
    assert "oci-h100-nsg-admin-1-22" not in rules


def test_a_node_port_range_open_to_the_world_stops_the_program() -> None:
    """Kubernetes' NodePorts (and Ceph's daemon ports) are management ports: a group that opens
    them to the internet is refused before it exists."""
    mocks = PlanMocks()
    node_ports = {"protocol": "tcp", "fromPort": 30000, "toPort": 32767, "cidrBlocks": ["0.0.0.0/0"]}
    opened = setting("aws:ec2/securityGroup:SecurityGroup", lambda p: p.update(ingress=[*p["ingress"], node_ports]),
                     lambda a: a.name == "aws-h100-sg")
    with pytest.raises(pulumi.RunError) as err:
        run_program(cluster_of("aws-h100"), mutate=opened, mocks=mocks)
    assert "ports 30000-32767 (Kubernetes NodePort services)" in str(err.value)
    assert "aws-h100-sg" not in {name for _, name in mocks.created}


def test_a_source_unknown_while_the_program_runs_stops_it(tmp_path: Path) -> None:
    """During `pulumi preview` a source computed from another resource is unknown: the gate cannot
    count it, so it refuses the rule rather than letting it pass."""
    path = write_stack(tmp_path, "oci-h100", {"target.admin_cidrs": ["198.51.100.0/24"]})
    mocks = PlanMocks()
    unknown = setting(policy.OCI_NSG_RULE, lambda p: p.update(source=pulumi.UNKNOWN),
                      lambda a: a.name.endswith("-admin-0-22"))
    with pytest.raises(pulumi.RunError) as err:
        run_program(load_spec(path), mutate=unknown, mocks=mocks)
    assert "port 22 (SSH) via NetworkSecurityGroupSecurityRule oci-h100-nsg-admin-0-22: source is not known" \
        in str(err.value)
    assert "oci-h100-nsg-admin-0-22" not in {name for _, name in mocks.created}


def test_a_prefix_list_the_gate_cannot_match_by_id_is_judged_by_every_list_of_the_stack() -> None:
    """In the gate no resource has an id: a rule naming a prefix list stands for every list the
    stack holds, and one holding 0.0.0.0/0 refuses it."""
    gate = PolicyGate()

    def judge(type_: str, name: str, props: dict[str, Any]) -> None:
        gate.judge(pulumi.ResourceTransformArgs(custom=True, type_=type_, name=name, props=props,
                                                opts=pulumi.ResourceOptions()))

    judge(policy.AWS_PREFIX_LIST, "admins", {"addressFamily": "IPv4", "maxEntries": 2,
                                             "entries": [{"cidr": "198.51.100.0/24"}]})
    rule = {"type": "ingress", "protocol": "tcp", "fromPort": 22, "toPort": 22, "prefixListIds": [pulumi.UNKNOWN]}
    judge(policy.AWS_SG_RULE, "ssh", rule)
    with pytest.raises(pulumi.RunError, match="no-public-management-port"):
        judge(policy.AWS_PREFIX_LIST_ENTRY, "anyone", {"prefixListId": pulumi.UNKNOWN, "cidr": "0.0.0.0/0"})


def test_a_rule_that_needs_the_whole_stack_fails_the_program_once_everything_registered() -> None:
    # No placement group: every resource is fine alone; only the stack as a whole breaks a rule.
    loose = setting(policy.AWS_INSTANCE, lambda p: p.pop("placementGroup", None), is_gpu)
    gate = PolicyGate()
    with pytest.raises(pulumi.RunError) as err:
        run_program(cluster_of("aws-h100"), mutate=loose, gate=gate)
    assert "gpu-placement" in str(err.value)
    assert [r.rule for r in gate.results if r.status == "fail"] == ["gpu-placement"]


def test_the_verdict_fails_the_preview_that_pulumi_up_runs_first() -> None:
    unencrypted = setting(policy.AWS_INSTANCE, lambda p: p["rootBlockDevice"].update(encrypted=False), is_gpu)
    with pytest.raises(pulumi.RunError) as err:
        run_program(cluster_of("aws-h100"), mutate=unencrypted, preview=True)
    assert "disks-encrypted" in str(err.value)


def test_main_the_entry_point_pulumi_runs_installs_the_gate() -> None:
    public = setting(
        "oci:Core/instance:Instance",
        lambda p: p["createVnicDetails"].update(assignPublicIp="true"),
        lambda a: "storage" in str((a.props.get("freeformTags") or {}).get("gpucluster-roles", "")),
    )

    def entry() -> Mapping[str, Any]:
        pulumi.runtime.register_resource_transform(public)
        main_module.main()
        return {}

    with pytest.raises(pulumi.RunError) as err:
        run_mocked(entry, stack="oci-h100")
    assert "no-public-ip-on-gpu-storage" in str(err.value)


def test_the_gate_judges_a_resource_handed_to_it_directly() -> None:
    gate = PolicyGate()
    volume = pulumi.ResourceTransformArgs(
        custom=True, type_=policy.AWS_EBS_VOLUME, name="scratch", props={"size": 100}, opts=pulumi.ResourceOptions()
    )
    with pytest.raises(pulumi.RunError, match="disks-encrypted"):
        gate.judge(volume)
    ok = pulumi.ResourceTransformArgs(
        custom=True,
        type_=policy.AWS_EBS_VOLUME,
        name="ok",
        props={"size": 100, "encrypted": True},
        opts=pulumi.ResourceOptions(),
    )
    assert gate.judge(ok) is None
    assert [r.name for r in gate.records] == ["ok"]


def test_placement_is_judged_by_structure_while_ids_are_unknown() -> None:
    # During `pulumi preview` a scale set's id is unknown, and the gate never sees ids at all:
    # a GPU VM that names a scale set passes when every scale set is a single placement group.
    def rec(type_: str, name: str, inputs: dict[str, Any]) -> Resource:
        return Resource(type=type_, name=name, id="", urn="", parent=None, custom=True, inputs=inputs)

    vm = rec(
        policy.AZURE_VM, "gpu-1", {"tags": {"gpucluster-roles": "gpu"}, "virtualMachineScaleSetId": pulumi.UNKNOWN}
    )
    one = rec(policy.AZURE_VMSS, "vmss", {"singlePlacementGroup": True})
    assert policy.gpu_placement([one, vm]).status == "pass"
    many = rec(policy.AZURE_VMSS, "vmss", {"singlePlacementGroup": False})
    assert policy.gpu_placement([many, vm]).status == "fail"
    loose = rec(policy.AZURE_VM, "gpu-2", {"tags": {"gpucluster-roles": "gpu"}})
    assert policy.gpu_placement([one, loose]).status == "fail"
