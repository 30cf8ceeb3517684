"""Run the Pulumi program under Pulumi's mocks: what a stack would create, with no credentials.

This is a reviewer's view, not a diff against live state: nothing is read from or sent to a
cloud, computed values (ids, addresses a cloud assigns) are synthesised here, and
``pulumi preview`` remains the real preview. The same runner backs the unit tests of
``stacks/`` and the ``gpucluster plan`` command, so both see exactly what the program builds.

Only Pulumi's public API is used: :func:`pulumi.runtime.set_mocks` with :class:`PlanMocks` (handed
over as a :class:`pulumi.runtime.Mocks` subclass); :func:`pulumi.runtime.reset_options` so that several stacks can
be planned in one process, one after the other, each under a root stack resource of its own;
:func:`pulumi.runtime.test` to run the program and wait for every registration. The mocks are
not told a resource's parent or URN; a stack transformation
(:func:`pulumi.runtime.register_stack_transformation`, which hands over the resource object as it
is constructed) records each object and its parent, and their URNs are read once the program ran.

Stack transforms (``pulumi.runtime.register_resource_transform``) reach the mocks through
Pulumi's public ``Mocks.register_transform`` hook; the stock mock monitor does not run them, so
:class:`PlanMocks` runs them the way the engine does: in the order registered, before the
resource is "created", a transform's error refusing it. That is how the tests exercise the
policy gate the program installs (``stacks/gate.py``).

The program is the package :mod:`gpucluster.stacks` (``stacks/`` in a checkout, where
``stacks/__main__.py`` is Pulumi's entry; shipped inside the wheel), imported by name: an
installed gpucluster plans from any folder.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import importlib
import inspect
import ipaddress
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from gpucluster.errors import InputError
from gpucluster.spec import Cluster, load_spec

# Pulumi is imported where a plan runs, not here: every `gpucluster` command loads this module.
if TYPE_CHECKING:
    import pulumi

PROGRAM = "gpucluster.stacks"
PROJECT = "gpucluster"
NOT_A_DIFF = (
    "This is not a diff against live state: it ran the program under Pulumi's mocks with no "
    "credentials, and ids and cloud-assigned addresses are made up. `pulumi preview` is the real one."
)

# warn: allowed, and said out loud (an image looked up instead of pinned); only fail stops a run.
Status = Literal["pass", "warn", "fail", "n/a"]


@dataclass(frozen=True)
class Resource:
    """One resource the program registered, as the mock monitor saw it, or as the engine handed
    it to the program's policy gate (there ``id`` and ``urn`` are empty and ``parent`` is None:
    a stack transform sees a resource before it exists)."""

    type: str
    name: str
    id: str
    urn: str
    parent: str | None
    custom: bool
    inputs: Mapping[str, Any]
    state: Mapping[str, Any] = field(default_factory=dict)

    def tag(self, key: str) -> str | None:
        """A tag from AWS/Azure ``tags`` or OCI ``freeformTags``."""
        for prop in ("tags", "freeformTags"):
            tags = self.inputs.get(prop)
            if isinstance(tags, Mapping) and key in tags:
                return str(tags[key])
        return None


@dataclass(frozen=True)
class PolicyResult:
    rule: str
    status: Status
    message: str
    offenders: tuple[str, ...] = ()


@dataclass(frozen=True)
class Plan:
    stack: str
    target: str
    resources: tuple[Resource, ...]
    outputs: dict[str, Any]
    policy: tuple[PolicyResult, ...]
    seconds: float

    @property
    def failed(self) -> list[PolicyResult]:
        return [r for r in self.policy if r.status == "fail"]

    def by_type(self, type_: str) -> list[Resource]:
        return [r for r in self.resources if r.type == type_]

    def as_dict(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "target": self.target,
            "note": NOT_A_DIFF,
            "resources": [
                {"type": r.type, "name": r.name, "parent": r.parent, "properties": dict(r.inputs)}
                for r in self.resources
            ],
            "outputs": self.outputs,
            "policy": [
                {"rule": p.rule, "status": p.status, "message": p.message, "offenders": list(p.offenders)}
                for p in self.policy
            ],
            "seconds": round(self.seconds, 3),
        }


_SECRET_SIG = "4dabf18193072939515e22adb298388d"  # pulumi's marker of a secret value on the wire


def plain_inputs(value: Any) -> Any:
    """Protobuf turns every number into a float; give integers back their type. Secrets are
    unwrapped: under the mocks they hold only what the program put there."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        if _SECRET_SIG in value and "value" in value:
            return plain_inputs(value["value"])
        return {k: plain_inputs(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain_inputs(v) for v in value]
    return value


_ID_PREFIX = {
    "aws:ec2/instance:Instance": "i-",
    "aws:ec2/vpc:Vpc": "vpc-",
    "aws:ec2/subnet:Subnet": "subnet-",
    "aws:ec2/securityGroup:SecurityGroup": "sg-",
    "aws:ec2/launchTemplate:LaunchTemplate": "lt-",
    "aws:ec2/placementGroup:PlacementGroup": "pg-",
    "aws:ec2/keyPair:KeyPair": "key-",
}


class PlanMocks:
    """Pulumi mocks that echo inputs and make up what a cloud would compute.

    Addresses a cloud assigns (an AWS instance launched from a launch template) are taken
    from the top of the subnet downwards so they never meet the spec's planned addresses,
    which start at the bottom.
    """

    def __init__(self) -> None:
        self.by_id: dict[str, tuple[str, dict[str, Any]]] = {}
        self._next_top: dict[str, int] = {}
        self.transforms: list[Callable[[Any], Any]] = []
        # (type, name) of every resource "created", in order: what got past the transforms.
        self.created: list[tuple[str, str]] = []
        # (type, name) -> (id, custom, inputs, state) of each registration that got past them.
        self.registered: dict[tuple[str, str], tuple[str, bool, dict[str, Any], dict[str, Any]]] = {}

    def register_transform(self, transform: Any) -> None:
        """Pulumi's hook for ``register_resource_transform`` under the mocks."""
        self.transforms.append(transform)

    def apply_transforms(self, typ: str, name: str, custom: bool, inputs: dict[str, Any]) -> dict[str, Any]:
        """Run the stack transforms over one registration, as the engine does before it creates
        the resource; a transform that raises refuses it. Returns the (possibly replaced) inputs."""
        import pulumi

        for transform in self.transforms:
            args = pulumi.ResourceTransformArgs(custom=custom, type_=typ, name=name, props=inputs,
                                                opts=pulumi.ResourceOptions())
            result = transform(args)
            if inspect.isawaitable(result):
                if inspect.iscoroutine(result):
                    result.close()
                raise TypeError(f"{typ} {name}: PlanMocks runs synchronous transforms only")
            if result is not None and result.props is not None:
                inputs = dict(result.props)
        return inputs

    def _make_id(self, typ: str, name: str) -> str:
        if typ.startswith("oci:"):
            return f"ocid1.{typ.split('/')[-1].split(':')[0].lower()}.oc1..mock{_digest(name)}"
        if typ.startswith("azure:"):
            kind = typ.split(":")[-1]
            return f"/subscriptions/mock/resourceGroups/mock/providers/{kind}/{name}"
        return _ID_PREFIX.get(typ, "id-") + _digest(name)

    def _allocate(self, cidr: str) -> str:
        net = ipaddress.IPv4Network(cidr)
        step = self._next_top.get(cidr, 2)
        self._next_top[cidr] = step + 1
        return str(net.broadcast_address - step)

    def new_resource(self, args: Any) -> tuple[str, dict[str, Any]]:
        """Pulumi's ``Mocks.new_resource``: a registration (``args.custom`` a bool) passes the stack
        transforms first; a read (``Resource.get``, ``custom`` None) does not."""
        typ: str = args.typ
        registration = args.custom is not None
        raw = dict(args.inputs)
        if registration:
            raw = self.apply_transforms(typ, args.name, bool(args.custom), raw)
        inputs = plain_inputs(raw)
        id_ = self._make_id(typ, args.name) if args.custom else ""
        state: dict[str, Any] = dict(inputs)
        if typ == "aws:ec2/instance:Instance":
            state.setdefault("privateIp", self._aws_instance_ip(inputs))
            state["arn"] = f"arn:aws:ec2:mock:000000000000:instance/{id_}"
            if inputs.get("associatePublicIpAddress") is True:
                state.setdefault("publicIp", _public_address(args.name))
        elif typ == "azure:network/publicIp:PublicIp":
            state["ipAddress"] = _public_address(args.name)
        elif typ == "azure:network/networkInterface:NetworkInterface":
            configs = inputs.get("ipConfigurations") or [{}]
            subnet = self.by_id.get(configs[0].get("subnetId") or "", ("", {}))[1]
            dynamic = (subnet.get("addressPrefixes") or [None])[0]
            state["privateIpAddress"] = configs[0].get("privateIpAddress") or (
                self._allocate(str(dynamic)) if dynamic else None)
        elif typ == "oci:Core/instance:Instance":
            vnic = inputs.get("createVnicDetails") or {}
            state["privateIp"] = vnic.get("privateIp") or self._oci_instance_ip(vnic)
            if str(vnic.get("assignPublicIp")).lower() == "true":
                state["publicIp"] = _public_address(args.name)
        elif typ == "oci:Core/vcn:Vcn":
            # What OCI makes with every VCN: its default security list, route table and DHCP options.
            for kind in ("SecurityList", "RouteTable", "DhcpOptions"):
                state[f"default{kind}Id"] = f"ocid1.{kind.lower()}.oc1..mockdefault{_digest(args.name)}"
        elif typ.startswith("aws:"):
            state.setdefault("arn", f"arn:aws:mock:::{id_}")
        if args.custom:
            self.by_id[id_] = (typ, inputs)
        self.created.append((typ, args.name))
        if registration:
            self.registered[(typ, args.name)] = (id_, bool(args.custom), inputs, state)
        return id_, state

    def _aws_instance_ip(self, inputs: Mapping[str, Any]) -> str | None:
        subnet_id = inputs.get("subnetId")
        template = inputs.get("launchTemplate") or {}
        if not subnet_id and template.get("id") in self.by_id:
            nics = self.by_id[template["id"]][1].get("networkInterfaces") or []
            primary = [n for n in nics if n.get("deviceIndex") == 0 and n.get("networkCardIndex", 0) == 0]
            subnet_id = primary[0].get("subnetId") if primary else None
        if subnet_id in self.by_id:
            cidr = self.by_id[subnet_id][1].get("cidrBlock")
            if cidr:
                return self._allocate(str(cidr))
        return None

    def _oci_instance_ip(self, vnic: Mapping[str, Any]) -> str | None:
        subnet_id = vnic.get("subnetId")
        if subnet_id in self.by_id:
            cidr = self.by_id[subnet_id][1].get("cidrBlock")
            if cidr:
                return self._allocate(str(cidr))
        return None

    def call(self, args: Any) -> dict[str, Any]:
        token: str = args.token
        if token == "oci:Core/getServices:getServices":
            return {"services": [{"id": "ocid1.service.oc1..mockall",
                                  "cidrBlock": "all-mock-services-in-oracle-services-network",
                                  "name": "All Mock Services In Oracle Services Network"}]}
        if token == "aws:ec2/getAmi:getAmi":
            name = str((args.args.get("filters") or [{}])[0].get("values", ["ami"])[0])
            return {"id": "ami-" + _digest(name), "imageId": "ami-" + _digest(name), "name": name}
        if token == "oci:Core/getImages:getImages":
            return {"images": [{"id": "ocid1.image.oc1..mockubuntu2204", "displayName": "Canonical-Ubuntu-22.04"}]}
        return {}


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def _public_address(name: str) -> str:
    """A made-up public address (RFC 5737's TEST-NET-2, which no real host has) for a resource."""
    return f"198.51.100.{int(_digest(name), 16) % 254 + 1}"


def _pulumi_mocks(mocks: PlanMocks) -> pulumi.runtime.Mocks:
    """``mocks`` as the :class:`pulumi.runtime.Mocks` that :func:`pulumi.runtime.set_mocks` takes."""
    import pulumi

    class _Mocks(pulumi.runtime.Mocks):
        def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[Any, Any]]:
            return mocks.new_resource(args)

        def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[Any, Any], list[tuple[str, str]] | None]:
            return mocks.call(args), []

        def register_transform(self, transform: pulumi.ResourceTransform) -> None:
            mocks.register_transform(transform)

    return _Mocks()


def _monitor_thread() -> concurrent.futures.ThreadPoolExecutor:
    """The executor that runs the SDK's "blocking" monitor calls: one thread, off the event loop.

    Pulumi's mock monitor ends each registration with ``_sync_await`` (``MockMonitor.RegisterResource``
    serialises the mocked state), which, on a thread whose event loop is running, pumps that loop
    from inside the call. Run inline on the loop's thread, each registration ready at that moment
    started inside the one before: the stack grew by about ten frames per resource and a pool of
    some 100 GPU nodes hit the recursion limit. On a thread of its own the call gets a loop of its
    own, as under ``pulumi up`` (whose monitor calls run in the default thread pool), and the depth
    no longer depends on the node count. One thread, not a pool: :class:`PlanMocks` is not
    thread-safe (its address counters), and the calls run in the order they were made, so the
    made-up addresses do not change from run to run.
    """
    return concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpucluster-plan-monitor")


def _close_thread_loop() -> None:
    """Close the event loop the mock monitor made on this (the monitor's) thread, if it made one."""
    loop = _current_event_loop()
    if loop is not None:
        loop.close()
        asyncio.set_event_loop(None)


def _quiet_after_failure(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """When a registration fails, every output that depends on it fails too and is garbage
    collected unread; asyncio would log each one. run_mocked raises the first failure; the rest
    are its consequences."""
    if str(context.get("message", "")).endswith("exception was never retrieved"):
        return
    loop.default_exception_handler(context)


def _current_event_loop() -> asyncio.AbstractEventLoop | None:
    """The thread's event loop as the caller left it (asyncio makes one in the main thread)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            return asyncio.get_event_loop_policy().get_event_loop()
        except RuntimeError:
            return None


def run_mocked(
    program: Callable[[], Mapping[str, Any]],
    *,
    stack: str,
    project: str = PROJECT,
    preview: bool = False,
    mocks: PlanMocks | None = None,
) -> tuple[list[Resource], dict[str, Any]]:
    """Run ``program`` under fresh mocks; return the resources it registered and its outputs resolved.

    ``preview`` runs it as ``pulumi preview`` would (``pulumi.runtime.is_dry_run()`` true);
    ``mocks`` lets a caller keep the mocks to look at afterwards (what was created before an error).
    """
    import pulumi

    previous = _current_event_loop()
    loop = asyncio.new_event_loop()
    monitor = _monitor_thread()
    loop.set_default_executor(monitor)
    loop.set_exception_handler(_quiet_after_failure)
    asyncio.set_event_loop(loop)
    mocks = mocks if mocks is not None else PlanMocks()
    # Each resource object as it is constructed: its type, name and parent (None: the root stack).
    constructed: list[tuple[pulumi.Resource, str, str, pulumi.Resource | None]] = []

    def record(args: pulumi.ResourceTransformationArgs) -> None:
        parent = args.opts.parent if args.opts is not None else None
        constructed.append((args.resource, args.type_, args.name, parent))

    resolved: dict[str, Any] = {}
    urns: dict[int, str] = {}

    @pulumi.runtime.test  # type: ignore[untyped-decorator]
    def run() -> pulumi.Output[Any]:
        pulumi.runtime.register_stack_transformation(record)
        outputs = program()
        return pulumi.Output.from_input(dict(outputs)).apply(lambda value: resolved.update(value or {}))

    @pulumi.runtime.test  # type: ignore[untyped-decorator]
    def read_urns() -> pulumi.Output[Any]:
        # Every registration has finished (run() waited for them): these are resolved already.
        stack_resource = pulumi.runtime.get_root_resource()
        assert stack_resource is not None  # set_mocks made it
        objects = [stack_resource, *(r for r, typ, name, _ in constructed if (typ, name) in mocks.registered)]
        return pulumi.Output.all(*(o.urn for o in objects)).apply(
            lambda values: urns.update({id(o): str(u) for o, u in zip(objects, values, strict=True)}))

    try:
        # A fresh root stack resource for this run (set_mocks makes one once the old is dropped).
        pulumi.runtime.reset_options(project=project, stack=stack, preview=preview)
        pulumi.runtime.set_mocks(_pulumi_mocks(mocks), project=project, stack=stack, preview=preview)
        root = pulumi.runtime.get_root_resource()
        run()
        read_urns()
    finally:
        pulumi.runtime.reset_options()
        asyncio.set_event_loop(previous)
        monitor.submit(_close_thread_loop).result()
        loop.close()  # shuts the monitor's thread down
    records: list[Resource] = []
    for resource, typ, name, parent in constructed:
        key = (typ, name)
        if key not in mocks.registered:
            continue
        id_, custom, inputs, state = mocks.registered[key]
        records.append(Resource(type=key[0], name=key[1], id=id_, urn=urns[id(resource)],
                                parent=urns.get(id(parent if parent is not None else root)),
                                custom=custom, inputs=inputs, state=state))
    return records, plain_inputs(resolved)


def import_program(module: str) -> Any:
    """A module of the Pulumi program, :mod:`gpucluster.stacks` (installed with the package)."""
    try:
        return importlib.import_module(f"{PROGRAM}.{module}")
    except ModuleNotFoundError as exc:
        if exc.name == PROGRAM:
            raise InputError(f"the Pulumi program ({PROGRAM}) is not installed: reinstall gpucluster") from None
        raise


def target_module(kind: str) -> Any:
    """``gpucluster.stacks.targets.<kind>``; InputError when that target is not written yet."""
    name = f"targets.{kind}"
    try:
        return import_program(name)
    except ModuleNotFoundError as exc:
        if exc.name == f"{PROGRAM}.{name}":
            raise InputError(f"target {kind!r} has no Pulumi program yet (stacks/targets/{kind}.py)") from None
        raise


def plan_cluster(cluster: Cluster) -> Plan:
    """Run the target's program for ``cluster`` under the mocks and apply the policy rules."""
    module = target_module(cluster.spec.target.kind)
    policy = import_program("policy")
    started = time.perf_counter()
    records, outputs = run_mocked(lambda: module.deploy(cluster), stack=cluster.stack)
    results: list[PolicyResult] = policy.evaluate(records, cluster.spec.target.kind)
    return Plan(
        stack=cluster.stack,
        target=cluster.spec.target.kind,
        resources=tuple(sorted(records, key=lambda r: r.urn)),
        outputs=outputs,
        policy=tuple(results),
        seconds=time.perf_counter() - started,
    )


def plan_stack(path: str | Path) -> Plan:
    return plan_cluster(load_spec(path))
