"""boto3 helpers run before ``pulumi up`` on AWS: AMI lookup by filter, the pinned AMIs present in
the region (and named as their image manifests say), instance type offered in the AZ, EFA
interfaces, vCPU quota, capacity reservation. Each returns problems as one line each
(the caller reports them together) or raises InputError for a lookup that found nothing.

Clients are passed in (``boto3.client("ec2")``...), so tests hand in moto's or a Stubber's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpucluster.errors import InputError
from gpucluster.spec import Cluster
from gpucluster.spec.images import pool_manifest
from gpucluster.spec.models import AwsTarget, ImageManifest

# Service Quotas codes of "Running On-Demand <family> instances" (vCPUs), by instance family letter.
VCPU_QUOTAS: dict[str, tuple[str, str]] = {
    "p": ("L-417A185B", "Running On-Demand P instances"),
    "g": ("L-DB2E81BA", "Running On-Demand G and VT instances"),
    "vt": ("L-DB2E81BA", "Running On-Demand G and VT instances"),
    "standard": ("L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances"),
}


@dataclass(frozen=True)
class Image:
    image_id: str
    name: str
    created: str


def find_ami(ec2: Any, name_filter: str, owner: str, architecture: str = "x86_64") -> Image:
    """The newest image matching ``name_filter`` (wildcards allowed) owned by ``owner``."""
    resp = ec2.describe_images(
        Owners=[owner],
        Filters=[
            {"Name": "name", "Values": [name_filter]},
            {"Name": "architecture", "Values": [architecture]},
            {"Name": "state", "Values": ["available"]},
        ],
    )
    images = sorted(resp.get("Images", []), key=lambda i: i.get("CreationDate", ""), reverse=True)
    if not images:
        raise InputError(f"no {architecture} AMI owned by {owner!r} matches {name_filter!r}")
    top = images[0]
    return Image(image_id=top["ImageId"], name=top.get("Name", ""), created=top.get("CreationDate", ""))


def describe_ami(ec2: Any, image_id: str) -> dict[str, Any] | None:
    """The region's record of ``image_id`` (visible to this account), or None where there is none."""
    try:
        resp = ec2.describe_images(ImageIds=[image_id])
    except Exception as exc:  # botocore ClientError: InvalidAMIID.NotFound / .Malformed / .Unavailable
        if credential_problem(exc):
            raise
        code = (getattr(exc, "response", None) or {}).get("Error", {}).get("Code", "")
        if str(code).startswith("InvalidAMIID"):
            return None
        raise
    images: list[dict[str, Any]] = resp.get("Images", [])
    return images[0] if images else None


def ami_problems(ec2: Any, cluster: Cluster, manifests: dict[str, ImageManifest]) -> list[str]:
    """Every AMI the stack boots exists in its region and is available, and a pool's AMI carries the
    name its image manifest gives (else the manifest describes another image than the one pinned)."""
    target = cluster.spec.target
    assert isinstance(target, AwsTarget)
    region = target.region
    if target.ami_lookup:
        try:
            gpu_ami = find_ami(ec2, target.ami_name_filter, target.ami_owner).image_id
        except InputError as exc:
            return [f"target.ami_lookup: {p}" for p in exc.problems]
        plain_ami = target.service_ami_id
    else:
        gpu_ami = target.pinned_ami() or ""
        plain_ami = target.service_ami_id or gpu_ami
    booted: dict[str, list[tuple[str, ImageManifest | None]]] = {}
    for pool in cluster.spec.node_pools:
        # GPU pools boot the GPU AMI; the others the service AMI where one is set (stacks/targets/aws.py).
        ami = gpu_ami if "gpu" in pool.roles or plain_ami is None else plain_ami
        booted.setdefault(ami, []).append((pool.name, pool_manifest(cluster.spec, pool, manifests)))
    problems = []
    for ami, pools in booted.items():
        names = ", ".join(name for name, _ in pools)
        image = describe_ami(ec2, ami)
        if image is None:
            problems.append(f"AMI {ami} (pools {names}) does not exist in {region}, or this account may not "
                            "launch it: AMI IDs differ per region (docs/walkthroughs/aws.md, \"Pin the image\")")
            continue
        if image.get("State", "available") != "available":
            problems.append(f"AMI {ami} (pools {names}) is {image.get('State')} in {region}, not available")
        for pool_name, manifest in pools:
            if manifest is not None and image.get("Name") != manifest.image:
                problems.append(f"AMI {ami} (pool {pool_name}) is named {image.get('Name')!r}, but the pool's image "
                                f"manifest {manifest.name} describes {manifest.image!r}: pin that image, or name "
                                "the manifest of the one pinned")
    return problems


@dataclass(frozen=True)
class InstanceTypeInfo:
    name: str
    vcpus: int
    max_efa_interfaces: int


# Error codes that say the caller is not allowed in at all: an environment problem for the whole
# run (one line, exit 2), never a failed check per instance type.
AUTH_ERROR_CODES = frozenset({"AuthFailure", "InvalidClientTokenId", "ExpiredToken", "RequestExpired",
                              "UnrecognizedClientException", "SignatureDoesNotMatch", "UnauthorizedOperation",
                              "AccessDenied", "AccessDeniedException"})


def credential_problem(exc: BaseException) -> str | None:
    """The one line to stop on when ``exc`` means bad or missing credentials, else None."""
    if type(exc).__name__ in ("NoCredentialsError", "PartialCredentialsError", "NoRegionError"):
        return f"AWS: {exc}"
    code = (getattr(exc, "response", None) or {}).get("Error", {}).get("Code")
    if code in AUTH_ERROR_CODES:
        return f"AWS: {code}: the credentials in use cannot call EC2 here ({exc})"
    return None


def instance_type_info(ec2: Any, instance_type: str) -> InstanceTypeInfo:
    try:
        resp = ec2.describe_instance_types(InstanceTypes=[instance_type])
    except Exception as exc:  # botocore ClientError: InvalidInstanceType
        if credential_problem(exc):
            raise
        raise InputError(f"instance type {instance_type!r}: {exc}") from None
    info = resp["InstanceTypes"][0]
    efa = (info.get("NetworkInfo") or {}).get("EfaInfo") or {}
    return InstanceTypeInfo(
        name=instance_type,
        vcpus=int(info["VCpuInfo"]["DefaultVCpus"]),
        max_efa_interfaces=int(efa.get("MaximumEfaInterfaces", 0)),
    )


def offered_in_az(ec2: Any, instance_type: str, availability_zone: str) -> bool:
    resp = ec2.describe_instance_type_offerings(
        LocationType="availability-zone",
        Filters=[
            {"Name": "instance-type", "Values": [instance_type]},
            {"Name": "location", "Values": [availability_zone]},
        ],
    )
    return any(o.get("Location") == availability_zone for o in resp.get("InstanceTypeOfferings", []))


def quota_family(instance_type: str) -> str:
    family = instance_type.split(".")[0].lower()
    if family.startswith("vt"):
        return "vt"
    if family[0] in ("p", "g"):
        return family[0]
    return "standard"


def vcpu_quota_problems(quotas: Any, demand: dict[str, int]) -> list[str]:
    """``demand`` maps quota family to vCPUs wanted; one line per family over its quota."""
    problems = []
    for family, vcpus in sorted(demand.items()):
        code, title = VCPU_QUOTAS[family]
        resp = quotas.get_service_quota(ServiceCode="ec2", QuotaCode=code)
        limit = float(resp["Quota"]["Value"])
        if vcpus > limit:
            problems.append(
                f"quota {code} ({title}): the stack needs {vcpus} vCPUs, the quota is {math.floor(limit)}; "
                "ask for an increase in Service Quotas"
            )
    return problems


def capacity_reservation_problems(
    ec2: Any, reservation_id: str, instance_type: str, availability_zone: str, count: int
) -> list[str]:
    try:
        resp = ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id])
    except Exception as exc:  # botocore ClientError: InvalidCapacityReservationId.NotFound
        if credential_problem(exc):
            raise
        return [f"capacity reservation {reservation_id}: {exc}"]
    found = resp.get("CapacityReservations", [])
    if not found:
        return [f"capacity reservation {reservation_id}: not found"]
    cr = found[0]
    where = f"capacity reservation {reservation_id}"
    problems = []
    if cr.get("State") != "active":
        problems.append(f"{where}: state is {cr.get('State')}, not active")
    if cr.get("InstanceType") != instance_type:
        problems.append(f"{where}: reserves {cr.get('InstanceType')}, the GPU pool uses {instance_type}")
    if cr.get("AvailabilityZone") != availability_zone:
        problems.append(f"{where}: is in {cr.get('AvailabilityZone')}, the stack uses {availability_zone}")
    available = int(cr.get("AvailableInstanceCount", 0))
    if available < count:
        problems.append(f"{where}: {available} instance(s) available, the GPU pools need {count}")
    return problems


def preflight(
    ec2: Any,
    quotas: Any,
    *,
    availability_zone: str,
    pools: Iterable[tuple[str, int, bool]],
    capacity_reservation_id: str | None = None,
) -> list[str]:
    """Every problem found for ``pools`` of (instance type, count, is a GPU pool) before ``pulumi up``."""
    problems: list[str] = []
    demand: dict[str, int] = {}
    gpu_total: dict[str, int] = {}
    for itype, count, gpu in pools:
        try:
            info = instance_type_info(ec2, itype)
        except InputError as exc:
            problems += exc.problems
            continue
        if not offered_in_az(ec2, itype, availability_zone):
            problems.append(f"instance type {itype} is not offered in {availability_zone}")
        if gpu and info.max_efa_interfaces == 0:
            problems.append(f"instance type {itype} supports no EFA interface")
        family = quota_family(itype)
        demand[family] = demand.get(family, 0) + info.vcpus * count
        if gpu:
            gpu_total[itype] = gpu_total.get(itype, 0) + count
    problems += vcpu_quota_problems(quotas, demand)
    if capacity_reservation_id:
        for itype, count in gpu_total.items():
            problems += capacity_reservation_problems(ec2, capacity_reservation_id, itype, availability_zone, count)
    return problems


def preflight_cluster(cluster: Cluster, ec2: Any, quotas: Any,
                      manifests: dict[str, ImageManifest] | None = None) -> list[str]:
    """:func:`ami_problems` and :func:`preflight` for an AWS stack's node pools, from its spec."""
    target = cluster.spec.target
    if target.kind != "aws":
        raise InputError(f"gpucluster.target.kind: preflight checks AWS stacks; this one is {target.kind}")
    pools = []
    for pool in cluster.spec.node_pools:
        itype = cluster.instance_type(pool.name)
        assert itype is not None  # the spec's checks guarantee one for every AWS pool
        pools.append((itype, pool.count, "gpu" in pool.roles))
    return ami_problems(ec2, cluster, manifests or {}) + preflight(
        ec2,
        quotas,
        availability_zone=target.availability_zone,
        pools=pools,
        capacity_reservation_id=target.capacity_reservation_id,
    )
