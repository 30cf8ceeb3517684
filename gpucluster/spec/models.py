"""The cluster spec: pydantic models of what a stack file may say.

Field-level rules (types, ranges, patterns, unknown keys) live here; rules that
span fields or need the hardware profiles and the bill of materials live in
``rules.py`` so every problem can be collected and reported together.
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError, core_schema

from gpucluster.render.devices import RDMA_KINDS, expand_devices
from gpucluster.spec.facts import (
    DCGM_DIAG_LEVEL_DEFAULT,
    DCGM_DIAG_LEVELS,
    FLEET_MARGIN_DEFAULT,
    FLEET_MARGIN_MAX,
    MTU_MAX,
    MTU_MIN,
    FabricType,
    Role,
)

TargetKind = Literal["aws", "azure", "oci", "baremetal", "lab"]
# The operating systems a node may run; the bill of materials' `os` table names each one's release.
OsId = Literal["ubuntu-22.04", "ubuntu-24.04", "debian-12"]
OS_IDS: tuple[str, ...] = ("ubuntu-22.04", "ubuntu-24.04", "debian-12")
# What a role does where the image already ships a component (driver, CUDA, NCCL, EFA, OFED) at
# another version than the pin: replace it with the pin, or stop and say so.
PreinstalledPolicy = Literal["adopt_or_replace", "adopt_or_fail"]

_NAME = r"^[a-z]([a-z0-9-]{0,30}[a-z0-9])?$"
_MAC = r"^([0-9a-f]{2}:){5}[0-9a-f]{2}$"


class _Model(BaseModel):
    # strict: a stack file says what it means. "2", true and 2.0 are not the count 2, and
    # "9000" is not an MTU: nothing is coerced, so a quoting slip is an error, not a guess.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Secret:
    """A Pulumi secret as a stack file holds it: ``{secure: <ciphertext>}``, opaque.

    ``pulumi config set --secret`` writes this shape; only Pulumi can decrypt it, in the
    program it runs. Here it is carried, never shown: ``str``, ``repr`` and the JSON dump of
    a model (``spec show``) print ``[secret]``, and the ciphertext is only reachable through
    :attr:`ciphertext`. Only fields annotated as may-be-secret accept one (see
    :class:`MayBeSecret`); anywhere else the loader refuses it without printing it.
    """

    __slots__ = ("_ciphertext",)
    SHOWN = "[secret]"

    def __init__(self, ciphertext: str) -> None:
        self._ciphertext = ciphertext

    @property
    def ciphertext(self) -> str:
        return self._ciphertext

    def __repr__(self) -> str:
        return f"Secret({self.SHOWN})"

    def __str__(self) -> str:
        return self.SHOWN

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._ciphertext == self._ciphertext

    def __hash__(self) -> int:
        return hash((Secret, self._ciphertext))

    @staticmethod
    def is_secure_value(value: object) -> bool:
        """Whether ``value`` has the shape Pulumi gives a secret (a mapping with a ``secure`` key)."""
        return isinstance(value, dict) and "secure" in value


@dataclass(frozen=True)
class MayBeSecret:
    """``Annotated[str | Secret, MayBeSecret(Plain)]``: a ``Plain`` value, or a Pulumi secret.

    Plain values are validated by ``Plain`` alone (its pattern, its errors, its field path);
    a ``{secure: ...}`` mapping becomes a :class:`Secret`. One schema, not a union, so a bad
    plain value gives one error line, not one per union member.
    """

    plain: Any

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.no_info_wrap_validator_function(
            _secret_or_plain,
            handler.generate_schema(self.plain),
            serialization=core_schema.plain_serializer_function_ser_schema(_shown, info_arg=True),
        )


def _secret_or_plain(value: Any, plain: Callable[[Any], Any]) -> Any:
    if isinstance(value, Secret):
        return value
    if Secret.is_secure_value(value):
        ciphertext = value["secure"]
        if len(value) != 1 or not isinstance(ciphertext, str) or not ciphertext:
            # The message never includes the value: it is, or holds, ciphertext.
            raise PydanticCustomError(
                "secret_shape", "a Pulumi secret is a mapping with the one key 'secure' holding the ciphertext"
            )
        return Secret(ciphertext)
    return plain(value)


def _shown(value: Any, info: core_schema.SerializationInfo) -> Any:
    if isinstance(value, Secret):
        return Secret.SHOWN if info.mode_is_json() else value
    return value


def _cidr(value: str) -> str:
    try:
        net = ipaddress.ip_network(value, strict=True)
    except ValueError as exc:
        raise ValueError(f"malformed CIDR {value!r}: {exc}") from None
    if net.version != 4:
        raise ValueError(f"{value!r}: only IPv4 networks are supported")
    return str(net)


def _ipv4(value: str) -> str:
    try:
        return str(ipaddress.IPv4Address(value))
    except ValueError:
        raise ValueError(f"malformed IPv4 address {value!r}") from None


def _dev_path(value: str) -> str:
    # The path reaches a root shell on the node (the OSD role links and chowns it): a plain device
    # path only, such as /dev/nvme0n1 or /dev/disk/by-id/nvme-SAMSUNG_MZ..._S4X9NF0M123456.
    if not re.fullmatch(r"/dev/[A-Za-z0-9._:+-]+(/[A-Za-z0-9._:+-]+)*", value) or len(value) > 255:
        raise ValueError(f"{value!r} must be a /dev/ path of letters, digits and . _ : + -")
    if any(part in (".", "..") for part in value.split("/")):
        raise ValueError(f"{value!r} must not contain '.' or '..' components")
    return value


# Folders a lab's state may never be, nor sit under: `lab down` removes `<state_dir>/<name>`.
_SYSTEM_DIRS = frozenset({
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/media",
    "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var",
    "/var/lib", "/var/tmp", "/var/log", "/var/cache", "/var/spool", "/var/mail", "/usr/local",
})
_SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/sbin",
                 "/sys", "/usr")


def _state_dir(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError(f"{value!r} must be an absolute path")
    if not re.fullmatch(r"/[A-Za-z0-9._/+-]*", value) or len(value) > 200:
        raise ValueError(f"{value!r}: only letters, digits and . _ / + - are allowed, at most 200 characters")
    parts = value.split("/")[1:]
    if any(p in ("", ".", "..") for p in parts if value != "/"):
        raise ValueError(f"{value!r} must be a normal path: no '..', '.', '//' or trailing '/'")
    if value in _SYSTEM_DIRS:
        raise ValueError(f"{value!r} is a system folder; use one of the lab's own, such as /var/lib/gpucluster/lab")
    for tree in _SYSTEM_TREES:
        if value.startswith(tree + "/"):
            raise ValueError(f"{value!r} is under the system folder {tree}; use one such as /var/lib/gpucluster/lab")
    return value


def _digits_as_text(value: object) -> object:
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _abs_path(value: str) -> str:
    if not re.fullmatch(r"(/[A-Za-z0-9._+-]+)+", value) or len(value) > 255:
        raise ValueError(f"{value!r} must be an absolute path of letters, digits and . _ + - (at most 255 characters)")
    if any(part in (".", "..") for part in value.split("/")):
        raise ValueError(f"{value!r} must not contain '.' or '..' components")
    if value in _SYSTEM_DIRS or any(value.startswith(tree + "/") for tree in _SYSTEM_TREES):
        raise ValueError(f"{value!r} is a system folder; mount under a folder of its own, such as /mnt/cephfs")
    return value


Cidr = Annotated[str, AfterValidator(_cidr)]
IPv4 = Annotated[str, AfterValidator(_ipv4)]
Mac = Annotated[str, Field(pattern=_MAC)]
DevPath = Annotated[str, AfterValidator(_dev_path)]
Name = Annotated[str, Field(pattern=_NAME, description="lower-case name: letters, digits, dashes")]

# Strict shapes for every free-text field. Each value reaches the inventory, a shell or a
# cloud API, and Ansible templates inventory strings on the controller: a value with Jinja
# (`{{ lookup('pipe', ...) }}`) or shell metacharacters must never get past the spec.
# A Linux interface name (at most 15 bytes, IFNAMSIZ less its NUL), no '/', ':' or space.
IfName = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_.-]{0,14}$", description="a network interface name")]
AbsPath = Annotated[str, AfterValidator(_abs_path)]
# Ceph health check codes are upper-case words joined by underscores (OSD_DOWN, POOL_NO_REDUNDANCY).
# dcgmi diag's run levels (gpucluster/spec/facts.py): the cluster's, and a host's own in the inventory.
DcgmDiagLevel = Annotated[int, Field(ge=DCGM_DIAG_LEVELS[0], le=DCGM_DIAG_LEVELS[-1])]
CephHealthCode = Annotated[str, Field(pattern=r"^[A-Z][A-Z0-9_]{0,63}$", description="a Ceph health code")]
CrushBucketName = Annotated[
    str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$", description="a CRUSH bucket name")
]
# An OpenSSH public key line: type, base64 body, optional comment without shell or Jinja syntax.
SshPublicKeyText = Annotated[
    str,
    Field(pattern=r"^(ssh-(ed25519|rsa|dss)|ecdsa-sha2-nistp(256|384|521)|sk-(ssh-ed25519|ecdsa-sha2-nistp256)@openssh\.com)"
                  r" [A-Za-z0-9+/]+={0,3}( [A-Za-z0-9@._+-][A-Za-z0-9@._+ -]{0,99})?$",
          description="an OpenSSH public key"),
]
# A public key is not secret, but users keep key material in `pulumi config set --secret`.
SshPublicKey = Annotated[str | Secret, MayBeSecret(SshPublicKeyText)]
# Cloud tags: the characters AWS and Azure both accept in keys and values.
TagKey = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9 _.:/=+@-]{0,127}$")]
TagValue = Annotated[str, Field(pattern=r"^[A-Za-z0-9 _.:/=+@-]{0,256}$")]
# A cloud instance type or shape: p5.48xlarge, Standard_ND96isr_H100_v5, BM.GPU.H100.8.
InstanceType = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
# A version, package suffix or release word in the bill of materials (570.172.08, 12-8, 2.26.5-1+cuda12.8).
Token = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9.+~:_-]{0,63}$")]
HttpUrl = Annotated[str, Field(pattern=r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~+/%-]*)?$")]


# --- reach and egress: how the controller gets in, how the nodes get out (cloud targets) ---------


def _key_file(value: str) -> str:
    # Absolute or under ~ (ssh and Ansible expand it): a relative path would depend on the folder
    # converge happens to run from, and the key is never looked for anywhere else.
    if not re.fullmatch(r"(/|~/)[A-Za-z0-9._+@-]+(/[A-Za-z0-9._+@-]+)*", value) or len(value) > 1024:
        raise ValueError(f"{value!r} must be an absolute path or one under ~/, of letters, digits and . _ + @ -")
    if any(part in (".", "..") for part in value.split("/")[1:]):
        raise ValueError(f"{value!r} must not contain '.' or '..' components")
    return value


# A private key file on the controller: ssh's -i, Ansible's ansible_ssh_private_key_file.
KeyFile = Annotated[str, AfterValidator(_key_file)]
# A host name or an IPv4 address (each label a DNS label).
HostName = Annotated[str, Field(pattern=r"^[A-Za-z0-9]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9]([A-Za-z0-9-]{0,62}))*$",
                                max_length=253, description="a host name or IPv4 address")]
SshUser = Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_-]{0,31}$", description="a login name")]
# A proxy's URL: scheme, host and port only (credentials in a URL would be a secret in the inventory).
ProxyUrl = Annotated[str, Field(pattern=r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?/?$",
                                description="http(s)://host:port of a proxy")]
# A no_proxy entry: a host, a domain suffix (.example.internal), an IPv4 address or network.
NoProxyEntry = Annotated[str, Field(pattern=r"^(\.?[A-Za-z0-9][A-Za-z0-9-]{0,62}(\.[A-Za-z0-9][A-Za-z0-9-]{0,62})*"
                                            r"|[0-9]{1,3}(\.[0-9]{1,3}){3}/[0-9]{1,2})$",
                                    max_length=253, description="a host, .domain, IPv4 address or CIDR")]
# Each place the roles download from (gpucluster.render.sources.SOURCES says what each one serves).
MirrorKey = Literal["os_archive", "nvidia", "container_toolkit", "doca", "efa_installer", "kubernetes",
                    "container_registry", "ceph", "sources"]
# The existing network a cloud stack joins: an AWS VPC (vpc-...), an Azure VNet (its resource ID) or
# an OCI VCN (ocid1.vcn...), and its subnets; gpucluster.spec.rules checks each against the target.
_AZURE_VNET = (r"/subscriptions/[0-9a-fA-F-]{36}/[Rr]esource[Gg]roups/[A-Za-z0-9_().-]{1,90}"
               r"/providers/Microsoft\.Network/virtualNetworks/[A-Za-z0-9_.-]{1,80}")
NetworkId = Annotated[str, Field(pattern=rf"^(vpc-[0-9a-f]{{8,17}}|ocid1\.vcn\.[a-z0-9][a-z0-9.-]{{0,250}}"
                                         rf"|{_AZURE_VNET})$",
                                 description="vpc-..., an Azure VNet resource ID or ocid1.vcn...")]
SubnetId = Annotated[str, Field(pattern=rf"^(subnet-[0-9a-f]{{8,17}}|ocid1\.subnet\.[a-z0-9][a-z0-9.-]{{0,250}}"
                                        rf"|{_AZURE_VNET}/subnets/[A-Za-z0-9_.-]{{1,80}})$",
                                description="subnet-..., an Azure subnet resource ID or ocid1.subnet...")]


class ExistingNetwork(_Model):
    """A network the stack joins instead of creating one: it creates no VPC/VNet/VCN, no subnet and
    no gateway there, only the cluster's own security rules and machines."""

    id: NetworkId
    # Every node's primary interface (and the storage nodes').
    management_subnet_id: SubnetId
    # AWS: the subnet of the GPU nodes' EFA interfaces (else the management subnet).
    fabric_subnet_id: SubnetId | None = None
    # A public subnet (a route to the internet) for a bastion the stack creates.
    public_subnet_id: SubnetId | None = None


class Egress(_Model):
    """How the nodes reach what they download (packages, installers, container images).

    ``nat``: the network routes out; a stack that creates the network creates the cloud's NAT (AWS
    NAT gateway in a public subnet, Azure NAT gateway, OCI NAT and service gateways); a joined
    network routes out through its own. ``proxy``: through an HTTP(S) proxy, which apt, pip,
    downloads and containerd's image pulls all take. ``none``: nowhere; every source the roles
    download from needs a mirror inside the network (``mirrors``). Mirrors are taken in every mode.
    """

    mode: Literal["nat", "proxy", "none"] = "nat"
    http_proxy: ProxyUrl | None = None
    https_proxy: ProxyUrl | None = None
    # Beside these, the cluster's own networks, localhost and the metadata address never go through it.
    no_proxy: list[NoProxyEntry] = Field(default_factory=list)
    mirrors: dict[MirrorKey, HttpUrl] = Field(default_factory=dict)


class Bastion(_Model):
    """``create: true``: the stack makes a small instance with a public address, SSH only from the
    target's admin_cidrs, and the nodes admit SSH from it alone. Otherwise an existing jump host:
    ``host``, ``user``, ``port``, and ``source_cidr``, where the nodes see its connections come from
    (default: ``host``, when that is an IPv4 address)."""

    create: bool = False
    instance_type: InstanceType | None = None
    host: HostName | None = None
    user: SshUser | None = None
    port: int = Field(22, ge=1, le=65535)
    source_cidr: Cidr | None = None


class Access(_Model):
    """How the controller (converge, verify, the MPI launcher's per-run key) reaches the nodes:
    ``direct`` (the controller is inside the network, or admin_cidrs reach it) or through a bastion."""

    mode: Literal["direct", "bastion"] = "direct"
    bastion: Bastion | None = None


class _CloudReach(_Model):
    """What every cloud target says about reach and egress (README, "Reach and egress")."""

    network: ExistingNetwork | None = None
    # A public subnet the stack creates in the network it creates, for the NAT gateway (AWS) and a
    # bastion it creates: inside the network, apart from the management and fabric networks.
    public_cidr: Cidr | None = None
    egress: Egress = Field(default_factory=Egress)
    access: Access = Field(default_factory=Access)
    # The private key converge and verify log in with; unset, the SSH agent's keys.
    ssh_private_key_file: KeyFile | None = None


# --- targets -----------------------------------------------------------------


class LabTarget(_Model):
    """Nodes are systemd-nspawn containers on this host (the embedded default)."""

    kind: Literal["lab"]
    # The lab builds Debian nodes only (debootstrap from debian_mirror).
    os: Literal["debian-12"] = "debian-12"
    debian_mirror: HttpUrl = "http://deb.debian.org/debian"
    boot_timeout_s: int = Field(120, ge=10, le=3600)
    apt_proxy_port: int = Field(3142, ge=1024, le=65535)
    state_dir: Annotated[str, AfterValidator(_state_dir)] = "/var/lib/gpucluster/lab"
    # Compute rails per GPU node: each rail is its own bridge and subnet (rail i is the (i+1)-th
    # subnet of fabric_cidr's size after fabric_cidr), its interface named rdma<i> in the node.
    rails: int = Field(2, ge=1, le=8)


_AWS_REGION = r"^[a-z]{2}(-gov)?-[a-z]+-\d$"
# ami- and 8 or 17 hexadecimal characters: IDs had 8 characters after the hyphen before 2016 and
# 17 since (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/resource-ids.html); AWS's own
# AmiId pattern is (ami-[0-9a-f]{8})|(ami-[0-9a-f]{17})
# (https://docs.aws.amazon.com/snowball/latest/api-reference/API_Ec2AmiResource.html).
AmiId = Annotated[str, Field(pattern=r"^ami-([0-9a-f]{8}|[0-9a-f]{17})$")]


class AwsTarget(_CloudReach):
    kind: Literal["aws"]
    region: str = Field(pattern=_AWS_REGION)
    availability_zone: str = Field(pattern=r"^[a-z]{2}(-gov)?-[a-z]+-\d[a-z]$")
    vpc_cidr: Cidr | None = None
    # The Deep Learning Base OSS Nvidia Driver GPU AMI is built on Ubuntu 22.04 and 24.04.
    os: Literal["ubuntu-22.04", "ubuntu-24.04"] = "ubuntu-22.04"
    # The image every node boots, pinned: `ami_id`, or `ami_ids` per region (the target's region is
    # used). A lookup by name (`ami_lookup: true`) takes whatever AMI is newest at `pulumi up` and is
    # reported by the `image-pinned` policy rule as a warning.
    ami_id: AmiId | None = None
    ami_ids: dict[Annotated[str, Field(pattern=_AWS_REGION)], AmiId] = Field(default_factory=dict)
    # Storage and control-plane pools boot this AMI where set, else the GPU pools' one.
    service_ami_id: AmiId | None = None
    ami_lookup: bool = False
    ami_name_filter: str = Field("Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04)*",
                                 pattern=r"^[A-Za-z0-9 ()\[\]._*?,/:+-]{1,128}$")
    # `pulumi config set --path` stores an account ID as a number: read it as its digits.
    ami_owner: Annotated[str, BeforeValidator(_digits_as_text)] = Field(
        "amazon", pattern=r"^(amazon|aws-marketplace|self|\d{12})$")
    ssh_public_key: SshPublicKey | None = None
    capacity_reservation_id: str | None = Field(None, pattern=r"^cr-[0-9a-f]{8,17}$")
    # The reservation is a Capacity Block for ML: its instances launch with the capacity-block market type.
    capacity_block: bool = False
    # An existing cluster placement group, the one the capacity reservation was created in: GPU
    # pools launch into it instead of a group of their own.
    placement_group: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,254}$")
    admin_cidrs: list[Cidr] = Field(default_factory=list)
    tags: dict[TagKey, TagValue] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _image_pinned(self) -> AwsTarget:
        if self.ami_lookup and (self.ami_id or self.ami_ids):
            raise ValueError("ami_lookup: true looks the AMI up by name, yet ami_id/ami_ids pin one; keep one of them")
        if not self.ami_lookup and not self.pinned_ami():
            raise ValueError(f"ami_id: no AMI pinned for region {self.region} (set ami_id or ami_ids.{self.region}; "
                             "`ami_lookup: true` takes the newest AMI by name instead)")
        return self

    def pinned_ami(self) -> str | None:
        """The AMI pinned for the target's region (``ami_id`` wins over ``ami_ids``)."""
        return self.ami_id or self.ami_ids.get(self.region)


class AzureTarget(_CloudReach):
    kind: Literal["azure"]
    location: str = Field(pattern=r"^[a-z0-9]+$")
    resource_group: str = Field(pattern=r"^[A-Za-z0-9_().-]{0,89}[A-Za-z0-9_()-]$")
    # Microsoft's ubuntu-hpc image (microsoft-dsvm:ubuntu-hpc:2204 or 2404) follows the OS.
    os: Literal["ubuntu-22.04", "ubuntu-24.04"] = "ubuntu-22.04"
    # A marketplace image URN, publisher:offer:sku:version, with an explicit version: `latest` would
    # give each new scale-set instance whatever image is newest that day.
    image: str = Field(pattern=r"^[A-Za-z0-9_.-]+:[A-Za-z0-9_.-]+:[A-Za-z0-9_.-]+:[A-Za-z0-9_.-]+$")

    @field_validator("image")
    @classmethod
    def _image_version(cls, urn: str) -> str:
        if urn.rsplit(":", 1)[-1].lower() == "latest":
            raise ValueError(f"{urn}: the version `latest` is not a pin; name the image version "
                             "(az vm image list --publisher microsoft-dsvm --offer ubuntu-hpc --all)")
        return urn
    ssh_public_key: SshPublicKey | None = None
    admin_cidrs: list[Cidr] = Field(default_factory=list)
    zones: list[Annotated[str, BeforeValidator(_digits_as_text), Field(pattern=r"^[1-9]$")]] = Field(
        default_factory=list)
    tags: dict[TagKey, TagValue] = Field(default_factory=dict)


class OciTarget(_CloudReach):
    kind: Literal["oci"]
    # uk-gov-london-1, eu-dcc-milan-1 as well as us-ashburn-1.
    region: str = Field(pattern=r"^[a-z]{2}(-[a-z]+){1,3}-\d$")
    # The tenancy's OCID names its root compartment.
    compartment_id: str = Field(pattern=r"^ocid1\.(compartment|tenancy)\.[a-z0-9][a-z0-9.-]{0,250}$")
    availability_domain: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9:._-]{0,63}$")
    # OCI's GPU platform images are Oracle Linux or Ubuntu; this project converges Ubuntu.
    os: Literal["ubuntu-22.04", "ubuntu-24.04"] = "ubuntu-22.04"
    image_id: str | None = Field(None, pattern=r"^ocid1\.image\.[a-z0-9][a-z0-9.-]{0,250}$")
    # Look the image up (newest Canonical Ubuntu of target.os for the shape) instead of pinning
    # image_id; the `image-pinned` policy rule reports it as a warning.
    image_lookup: bool = False
    ssh_public_key: SshPublicKey | None = None
    admin_cidrs: list[Cidr] = Field(default_factory=list)
    fault_domains: list[Annotated[str, Field(pattern=r"^FAULT-DOMAIN-[1-9]$")]] = Field(default_factory=list)

    @model_validator(mode="after")
    def _image_pinned(self) -> OciTarget:
        if self.image_lookup and self.image_id:
            raise ValueError("image_lookup: true looks the image up, yet image_id pins one; keep one of them")
        if not self.image_lookup and not self.image_id:
            raise ValueError("image_id: no image pinned (set the image's OCID, ocid1.image...; "
                             "`image_lookup: true` takes the newest platform image instead)")
        return self


class BareMetalNode(_Model):
    name: Name
    pool: Name
    bmc_address: IPv4
    management_mac: str = Field(pattern=_MAC)
    fabric_macs: list[Mac] = Field(default_factory=list)
    disks: list[DevPath] = Field(default_factory=list)
    rack: CrushBucketName | None = None


class BaremetalTarget(_Model):
    kind: Literal["baremetal"]
    os: OsId = "ubuntu-22.04"
    provisioning: Literal["cloud-init", "autoinstall"] = "cloud-init"
    gateway: IPv4 | None = None
    dns_servers: list[IPv4] = Field(default_factory=list)
    ssh_user: str = Field("ubuntu", pattern=r"^[a-z_][a-z0-9_-]*$")
    ssh_public_key: SshPublicKey | None = None
    # The private key converge and verify log in with; unset, the SSH agent's keys.
    ssh_private_key_file: KeyFile | None = None
    nodes: list[BareMetalNode] = Field(min_length=1)


Target = Annotated[
    LabTarget | AwsTarget | AzureTarget | OciTarget | BaremetalTarget,
    Field(discriminator="kind"),
]
TARGET_KINDS: tuple[str, ...] = ("lab", "aws", "azure", "oci", "baremetal")


# --- node pools ----------------------------------------------------------------


class DataDisks(_Model):
    """File-backed disks attached to each lab node of the pool (Ceph OSDs)."""

    count: int = Field(1, ge=1, le=12)
    size_gb: int = Field(ge=1, le=4096)


class NodePool(_Model):
    name: Name
    count: int = Field(ge=1, le=20000)
    roles: list[Role] = Field(min_length=1)
    profile: Name
    # The network shape (gpucluster/data/platforms/): unset, the target's default for the pool's kind.
    platform: Name | None = None
    instance_type: InstanceType | None = None
    root_volume_gb: int = Field(200, ge=8, le=16384)
    osd_devices: list[DevPath] = Field(default_factory=list)
    data_disks: DataDisks | None = None
    # The pool's OS where it differs from the target's (`target.os`).
    os: OsId | None = None
    # A component the image already ships at another version than the pin: replace it, or fail.
    preinstalled: PreinstalledPolicy = "adopt_or_fail"
    # The interface that carries the node's fabric address, where the pool's platform names no
    # netdev for its fabric port (a generic server: its IPoIB name follows its PCI slot).
    fabric_interface: IfName | None = None
    # What the pool's image ships (gpucluster/data/images/<name>.yaml): `spec validate` and
    # `preflight` compare it with the bill of materials under `preinstalled`. Unset on Azure, the
    # manifest whose `urns` list the target's image is taken.
    image_manifest: Name | None = None

    @field_validator("roles")
    @classmethod
    def _unique_roles(cls, v: list[str]) -> list[str]:
        dup = sorted(r for r, n in Counter(v).items() if n > 1)
        if dup:
            raise ValueError(f"role {dup[0]!r} listed twice")
        return v


# --- fabric ----------------------------------------------------------------------


class Partition(_Model):
    name: Name
    pkey: str = Field(pattern=r"^0x[0-7][0-9a-fA-F]{3}$")
    ipoib: bool = True


class RoceQos(_Model):
    dscp_trust: bool = True
    pfc_priority: int = Field(3, ge=0, le=7)
    ecn: bool = True
    traffic_class: int = Field(106, ge=0, le=255)


class Fabric(_Model):
    type: FabricType
    mtu: int = Field(ge=MTU_MIN, le=MTU_MAX)
    management_cidr: Cidr
    fabric_cidr: Cidr
    subnet_managers: list[Name] = Field(default_factory=list)
    partitions: list[Partition] = Field(default_factory=list)
    roce_qos: RoceQos | None = None
    gid_index: int | None = Field(None, ge=0, le=255)
    ib_timeout: int = Field(20, ge=1, le=31)
    socket_ifname: IfName | None = None
    # The RDMA stack: the distribution's rdma-core and kernel drivers, or NVIDIA DOCA-OFED (the BOM's doca_ofed).
    ofed: Literal["inbox", "doca"] = "inbox"


# --- storage -----------------------------------------------------------------------


class CephPool(_Model):
    name: Name
    application: Literal["rbd", "cephfs"]
    size: int = Field(3, ge=1, le=10)
    min_size: int | None = Field(None, ge=1, le=10)
    # None: Ceph's PG autoscaler sizes the pool.
    pg_num: int | None = Field(None, ge=1, le=65536)

    @field_validator("pg_num")
    @classmethod
    def _pow2(cls, v: int | None) -> int | None:
        if v is not None and v & (v - 1):
            raise ValueError(f"must be a power of two (got {v})")
        return v


class CephFs(_Model):
    name: Name = "cephfs"
    metadata_pool: Name
    data_pool: Name
    mount_path: AbsPath = "/mnt/cephfs"
    # Which client mounts it on GPU nodes: the kernel's ceph file system where the node's kernel
    # offers it (auto), or always the kernel client or always ceph-fuse.
    client: Literal["auto", "kernel", "fuse"] = "auto"


# CRUSH bucket types a replicated pool can spread its copies over (Ceph's default type list,
# less `osd`: copies on two OSDs of one host are not a failure domain anyone wants).
CrushFailureDomain = Literal["host", "chassis", "rack", "row", "pdu", "pod", "room", "datacenter", "zone", "region"]


class Storage(_Model):
    monitors: list[Name] = Field(min_length=1)
    managers: list[Name] = Field(default_factory=list)
    mds: list[Name] = Field(default_factory=list)
    pools: list[CephPool] = Field(default_factory=list)
    cephfs: CephFs | None = None
    public_network: Literal["management", "fabric"] = "management"
    cluster_network: Literal["management", "fabric"] = "fabric"
    allowed_health_warnings: list[CephHealthCode] = Field(default_factory=list)
    # The CRUSH bucket type the replicated pools place their copies across. `host` (the
    # default) is Ceph's own replicated_rule; any other type needs each storage host's bucket
    # of that type: `locations` (node -> bucket name), else a bare-metal node's `rack`.
    failure_domain: CrushFailureDomain = "host"
    locations: dict[Name, CrushBucketName] = Field(default_factory=dict)


# --- kubernetes ---------------------------------------------------------------------


class Kubernetes(_Model):
    enabled: bool = True
    version: str | None = Field(None, pattern=r"^\d+\.\d+(\.\d+)?$")
    pod_cidr: Cidr = "10.244.0.0/16"
    service_cidr: Cidr = "10.96.0.0/12"
    cni: Literal["calico", "cilium", "flannel"] = "calico"
    control_plane_ha: bool = False
    # Who serves the GPUs to Kubernetes: the GPU Operator (which then runs dcgm-exporter too) or
    # NVIDIA's device plugin alone (the monitoring role runs dcgm-exporter). The inventory's
    # gpucluster_gpu_mode carries it to the roles.
    gpu_mode: Literal["operator", "device_plugin"] = "operator"
    api_vip: IPv4 | None = None


# --- the whole spec -------------------------------------------------------------------


class Conformance(_Model):
    """How the conformance suite judges the nodes (the inventory's ``gpucluster_conformance``)."""

    # The values and their reasons: gpucluster/spec/facts.py.
    dcgm_diag_level: DcgmDiagLevel = DCGM_DIAG_LEVEL_DEFAULT
    fleet_margin: float = Field(FLEET_MARGIN_DEFAULT, ge=0.0, le=FLEET_MARGIN_MAX)


class TwinRef(_Model):
    """``gpucluster:twin``: boot this stack as a platform twin, a lab on this host shaped like the
    target's platform (gpucluster/data/twins/<file>.yaml); the rest of the stack is the real one."""

    file: Name
    # Where the twin's lab lives and how it boots: the lab target's own settings.
    state_dir: Annotated[str, AfterValidator(_state_dir)] = "/var/lib/gpucluster/lab"
    debian_mirror: HttpUrl = "http://deb.debian.org/debian"
    boot_timeout_s: int = Field(180, ge=10, le=3600)
    apt_proxy_port: int = Field(3142, ge=1024, le=65535)
    # The network outside the cluster's, where the controller is (a CI runner, an operator's desk):
    # a stack reached through a bastion has the bastion's public address here (the host holds the
    # subnet's first address, the bastion its second) and the controller reaches the nodes from
    # here through the bastion alone. Required exactly when the stack's access is a bastion.
    outside_cidr: Cidr | None = None


class ClusterSpec(_Model):
    """Everything under the ``gpucluster:`` namespace of a Pulumi stack file."""

    name: Name
    target: Target
    node_pools: list[NodePool] = Field(min_length=1)
    fabric: Fabric
    storage: Storage | None = None
    kubernetes: Kubernetes | None = None
    conformance: Conformance = Field(default_factory=Conformance)
    bom: str | None = Field(None, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_./-]{0,199}$",
                            description="bill-of-materials overlay (the keys it changes), beside the stack file")
    # A site's own platform files: a folder beside the stack file (or below it) of platform files
    # as gpucluster/data/platforms holds them, one per platform, named as the platform. A file there
    # adds a platform or replaces the shipped one of its name whole (an OCI site whose RDMA network
    # configuration addresses the ports from other ranges, a bare-metal site's own port names).
    platforms: str | None = Field(None, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_./-]{0,199}$",
                                  description="a folder of the site's own platform files, beside the stack file")
    twin: TwinRef | None = None


# --- data files -------------------------------------------------------------------------


class GpuHardware(_Model):
    model: str | None = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9 ._()/-]{0,63}$")
    count: int = Field(ge=0, le=16)
    memory_mib: int = Field(ge=0)
    nvlink: bool
    nvswitch: bool
    nvlinks_per_gpu: int = Field(ge=0, le=18)
    fabric_manager: bool
    # The GPU's host link as its datasheet states it (PCIe generation and lane count).
    pcie_generation: int | None = Field(None, ge=1, le=7)
    pcie_width: int | None = Field(None, ge=1, le=32)
    # One NVLink's speed in GB/s per direction, the figure `nvidia-smi nvlink -s` prints per link.
    nvlink_gbps_per_link: float | None = Field(None, gt=0)
    # The datasheet's dense (not 2:4 sparse) peak TFLOP/s per precision: what a burn floor is a share of.
    burn_peak_tflops: dict[Literal["fp32", "tf32", "bf16", "fp16", "fp64"], float] = Field(default_factory=dict)


class Floors(_Model):
    """What a node of the profile must reach on its own: the GPUs and what joins them inside the node."""

    allreduce_intra_busbw_gbps: float | None
    # The message size the intra-node all-reduce is judged at, where the bus is saturated.
    allreduce_intra_verdict_bytes: int | None = Field(ge=1)
    burn_tflops: dict[Literal["fp32", "tf32", "bf16", "fp16", "fp64"], float]
    # nvbandwidth host_to_device_memcpy_ce and device_to_host_memcpy_ce, GB/s per GPU (GC-PCIE-003).
    host_device_copy_gbps: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _verdict_size(self) -> Floors:
        # The verdict reads the bus bandwidth at this size; a floor without it cannot be judged.
        if self.allreduce_intra_busbw_gbps is not None and self.allreduce_intra_verdict_bytes is None:
            raise ValueError("allreduce_intra_verdict_bytes is required where allreduce_intra_busbw_gbps is set")
        return self


class HardwareProfile(_Model):
    """The GPU part of a node: what the node's GPUs are and what they must reach."""

    name: Name
    description: str = Field(pattern=r"^[^{}%$`\\\n\r]{0,200}$")
    gpu: GpuHardware
    floors: Floors

    @model_validator(mode="after")
    def _burn_floors_below_peak(self) -> HardwareProfile:
        # A floor at or above the datasheet's peak fails every healthy GPU.
        for precision, floor in self.floors.burn_tflops.items():
            peak = self.gpu.burn_peak_tflops.get(precision)
            if peak is not None and floor >= peak:
                raise ValueError(f"floors.burn_tflops.{precision} ({floor:g}) is not below "
                                 f"gpu.burn_peak_tflops.{precision} ({peak:g}), the datasheet's peak")
        return self


# --- platforms: the network shape of a node ----------------------------------------------

# A rail is of the kinds a fabric is.
RailKind = FabricType
RailRole = Literal["compute", "storage", "frontend"]
# none: the rail's devices carry no IP address (EFA-only interfaces, RDMA-only ports);
# subnet_per_rail: each rail of the group sits in its own subnet; shared_subnet: one subnet for all;
# provider: the provider's image addresses every port from its own range (``provider_cidrs``; OCI's
# cluster network), so the cluster plans no address for it and adopts what the port carries.
Addressing = Literal["none", "subnet_per_rail", "shared_subnet", "provider"]
# An RDMA device name (mlx5_0, mlx5_ib3) or an interface name, or one brace range of them:
# `mlx5_ib{0..7}` stands for mlx5_ib0 .. mlx5_ib7.
DevicePattern = Annotated[
    str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_.-]{0,14}(\{[0-9]{1,3}\.\.[0-9]{1,3}\}[A-Za-z0-9_.-]{0,8})?$")
]


class Rail(_Model):
    """A group of identical network ports of a node: `count` of them at `rate_gbps` each."""

    name: Name
    kind: RailKind
    role: RailRole
    count: int = Field(ge=1, le=64)
    rate_gbps: int = Field(ge=1, le=3200)
    # Exact names or brace ranges; none where the OS names the devices unpredictably (EFA, an ENA).
    devices: list[DevicePattern] | None = None
    # The network interface (netdev) of each device, in the same order, as the platform's image
    # names it (IPoIB ibp24s0, a RoCE port enp24s0np0); none where no interface carries an address
    # the cluster sets (EFA) or the names are not known for the platform (a generic server: the
    # pool's `fabric_interface` names it).
    netdevs: list[DevicePattern] | None = None
    pcie_generation: int | None = Field(None, ge=1, le=7)
    pcie_width: int | None = Field(None, ge=1, le=32)
    addressing: Addressing
    # ``addressing: provider``: the ranges the provider's image takes each port's address from
    # (the platform file cites where); a port carrying an address in one of them is addressed.
    provider_cidrs: list[Cidr] = Field(default_factory=list, max_length=8)

    @field_validator("devices")
    @classmethod
    def _names(cls, v: list[str] | None) -> list[str] | None:
        if v is None:
            return v
        names = expand_devices(v)
        dup = sorted(n for n, times in Counter(names).items() if times > 1)
        if dup:
            raise ValueError(f"device {dup[0]!r} is named twice")
        return v

    @model_validator(mode="after")
    def _netdevs(self) -> Rail:
        if self.netdevs is not None:
            names = expand_devices(self.netdevs)
            if self.devices is None or len(names) != len(self.device_names()):
                raise ValueError(f"rail {self.name!r}: netdevs name {len(names)} interfaces for "
                                 f"{len(self.device_names())} devices; one per device, in the same order")
            dup = sorted(n for n, times in Counter(names).items() if times > 1)
            if dup:
                raise ValueError(f"netdev {dup[0]!r} is named twice")
            long = [n for n in names if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_.-]{0,14}", n)]
            if long:
                raise ValueError(f"netdev {long[0]!r} is no interface name (at most 15 characters, the kernel's limit)")
        if (self.addressing == "provider") != bool(self.provider_cidrs):
            raise ValueError(f"rail {self.name!r}: provider_cidrs are the ranges of a rail with addressing: provider, "
                             "and such a rail names them")
        if self.addressing == "provider" and self.netdevs is None:
            raise ValueError(f"rail {self.name!r}: a rail the provider addresses names its netdevs (the ports the "
                             "addresses are adopted from)")
        return self

    def device_names(self) -> list[str]:
        return expand_devices(self.devices or [])

    def netdev_names(self) -> list[str]:
        return expand_devices(self.netdevs or [])


class PlatformFloors(_Model):
    """What a node of the platform must reach over its network."""

    # ib_write_bw (or the EFA equivalent) per compute rail, Gb/s.
    rdma_write_bw_gbps: float | None
    allreduce_inter_busbw_gbps: float | None
    # The message size the inter-node all-reduce is judged at (8 GiB or more where the fabric is RDMA).
    allreduce_inter_verdict_bytes: int | None = Field(ge=1)
    # A pair all-reduce over one compute rail alone, where the inventory gives the rails' addresses
    # (the pair search then runs once per rail and names the rail); None: pairs use every rail at once.
    allreduce_rail_busbw_gbps: float | None = None

    @model_validator(mode="after")
    def _verdict_size(self) -> PlatformFloors:
        # The verdict reads the bus bandwidth at this size; a floor without it cannot be judged.
        if self.allreduce_inter_busbw_gbps is not None and self.allreduce_inter_verdict_bytes is None:
            raise ValueError("allreduce_inter_verdict_bytes is required where allreduce_inter_busbw_gbps is set")
        return self


class ProviderQos(_Model):
    """A provider's RDMA network whose QoS the provider sets (its switches, their classes): the
    settings its published NCCL configuration gives the nodes, which the nodes then use rather
    than a QoS of the spec's own."""

    traffic_class: int = Field(ge=0, le=255)
    service_level: int = Field(ge=0, le=15)
    ib_timeout: int = Field(ge=1, le=31)
    gid_index: int = Field(ge=0, le=255)


# A citation: a URL, or a document and section ("DGX H100 User Guide, Network Modules").
Source = Annotated[str, Field(pattern=r"^[^\n\r{}%$`\\]{12,400}$")]
DebName = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9+.-]{1,99}$")]
DebVersion = Annotated[str, Field(pattern=r"^([0-9]+:)?[0-9A-Za-z][0-9A-Za-z.+~-]{0,99}$")]
CheckId = Annotated[str, Field(pattern=r"^GC-[A-Z]{2,6}-[0-9]{3}$")]


class TwinPackage(_Model):
    """A package the platform's image ships, registered with dpkg at the image's version."""

    name: DebName
    version: DebVersion
    source: Source


class TwinImage(_Model):
    name: str = Field(pattern=r"^[^\n\r{}%$`\\]{1,120}$")
    # The image's OS: every OS-specific choice (package names, repositories) resolves for it.
    os: OsId
    source: Source
    packages: list[TwinPackage] = Field(default_factory=list)
    # How the image applies the target's network-config at boot. ``netplan``: cloud-init writes it
    # to /etc/netplan/50-cloud-init.yaml and netplan's generator renders it for systemd-networkd at
    # every boot (Ubuntu). The twin installs Debian's netplan.io and writes the target's own
    # rendering (stacks/targets/baremetal.py) there.
    network: Literal["netplan"] | None = None
    network_source: Source | None = None


class TwinInterface(_Model):
    name: Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_.-]{0,14}$")]
    source: Source


class TwinBootService(_Model):
    """A unit of the image that acts at every boot. ``rewrite_nccl_conf``: it writes /etc/nccl.conf
    with the platform's ``image_nccl`` keys and nothing else (Azure's SKU customisation).
    ``address_provider_ports``: it gives every port of the platform's provider-addressed rail its
    address from the rail's first ``provider_cidrs`` range (rail index i, host h: the range's
    address i*256 + h, h the last octet of the node's management address) at ``mtu``, and brings it
    up (OCI's RDMA network configuration)."""

    unit: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.@-]{1,100}\.service$")]
    action: Literal["rewrite_nccl_conf", "address_provider_ports"]
    # address_provider_ports: the MTU the image gives each port, and the prefix length of each
    # port's address (None: the range's own).
    mtu: int | None = Field(None, ge=MTU_MIN, le=MTU_MAX)
    prefixlen: int | None = Field(None, ge=8, le=30)
    source: Source


class TwinLimit(_Model):
    """What the twin cannot model, and what follows for the checks."""

    what: str = Field(pattern=r"^[^\n\r{}%$`\\]{1,80}$")
    reason: str = Field(pattern=r"^[^\n\r{}%$`\\]{1,400}$")


class TwinFault(_Model):
    """The fault ``gpucluster twin check`` injects on the twin's first GPU node, and the checks
    that must name it (and only them): the address removed from the node's fabric interface, the
    image's boot service's script run again outside its unit over what the roles converged, the
    node's management link throttled (where the fabric carries no IP, EFA, the all-reduce's TCP
    data runs there), or one of its compute ports throttled."""

    kind: Literal["remove_fabric_address", "boot_service", "throttle_management_link", "throttle_rail"]
    description: str = Field(pattern=r"^[^\n\r{}%$`\\]{1,200}$")
    expect: list[CheckId] = Field(min_length=1)
    # remove_fabric_address: the compute port (0-based, the node's addressed rails in the target's
    # outputs) whose address is removed; None: the fabric interface's address. throttle_rail: the
    # compute port whose link is throttled (required).
    port: int | None = Field(None, ge=0, le=63)

    @model_validator(mode="after")
    def _port(self) -> TwinFault:
        if self.kind == "throttle_rail" and self.port is None:
            raise ValueError("fault throttle_rail names the compute port it throttles (port)")
        return self


class TwinLinkFloors(_Model):
    """The fabric floors of the twin's own links (veth pairs between namespaces of one host), in
    place of the platform's, which are for GPUs over RDMA."""

    allreduce_inter_busbw_gbps: float = Field(gt=0)
    allreduce_inter_verdict_bytes: int = Field(ge=1)
    source: Source


class TwinFile(_Model):
    """One platform twin (gpucluster/data/twins/<name>.yaml): what a real machine of the platform
    looks like from inside a node, each fact with its source, and what the lab cannot be."""

    name: Name
    description: str = Field(pattern=r"^[^\n\r{}%$`\\]{1,200}$")
    target: Literal["aws", "azure", "oci", "baremetal"]
    # The GPU nodes' platform (gpucluster/data/platforms/): its rails' netdevs become the twin's links.
    platform: Name
    image: TwinImage
    management_interface: TwinInterface
    boot_services: list[TwinBootService] = Field(default_factory=list)
    cannot_model: list[TwinLimit] = Field(min_length=1)
    link_floors: TwinLinkFloors
    # What the twin proves: checks that must PASS on every GPU node of a healthy twin (a skip is
    # no proof): the interfaces, addresses and MTU, NCCL's settings, the all-reduce over the ports.
    must_pass: list[CheckId] = Field(min_length=1)
    fault: TwinFault


class Platform(_Model):
    """The network part of a node (a cloud shape or a server model): its rails and what they must reach."""

    name: Name
    description: str = Field(pattern=r"^[^{}%$`\\\n\r]{0,200}$")
    targets: list[Literal["aws", "azure", "oci", "baremetal", "lab"]] = Field(min_length=1)
    # The hardware profiles this shape carries; empty: any GPU-less profile.
    profiles: list[Name] = Field(default_factory=list)
    instance_types: dict[Literal["aws", "azure", "oci"], InstanceType] = Field(default_factory=dict)
    # Who runs the InfiniBand subnet manager: the provider (Azure) or nodes of the cluster.
    subnet_manager: Literal["provider", "cluster"] | None = None
    # Set where the provider owns the RoCE network's QoS (OCI's cluster network).
    provider_qos: ProviderQos | None = None
    # NCCL settings the provider's image writes for the shape (its topology file, relaxed
    # ordering): /etc/nccl.conf keeps them beside the spec's.
    image_nccl: dict[Annotated[str, Field(pattern=r"^NCCL_[A-Z0-9_]{1,60}$")],
                     Annotated[str, Field(pattern=r"^[A-Za-z0-9_./:=,+-]{1,200}$")]] = Field(default_factory=dict)
    # A unit of the provider's image that rewrites /etc/nccl.conf at every boot (Azure's
    # sku-customizations.service): the nccl role puts its own file back after it.
    nccl_conf_rewritten_by: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.@-]{1,100}\.service$")] | None = None
    # The interface the provider's own NCCL settings pin NCCL's sockets (bootstrap) to, where the
    # node has no fabric interface of the spec's (OCI's eth0 beside RDMA ports it addresses itself):
    # NCCL_SOCKET_IFNAME names it unless the spec's fabric.socket_ifname or a fabric interface does.
    nccl_socket_interface: IfName | None = None
    rails: list[Rail] = Field(default_factory=list)
    floors: PlatformFloors

    @field_validator("rails")
    @classmethod
    def _rails(cls, v: list[Rail]) -> list[Rail]:
        names = Counter(r.name for r in v)
        dup = sorted(n for n, times in names.items() if times > 1)
        if dup:
            raise ValueError(f"rail {dup[0]!r} is named twice")
        for rail in v:
            named = len(rail.device_names())
            if rail.devices is not None and named != rail.count:
                raise ValueError(f"rail {rail.name!r}: count {rail.count} but devices name {named}")
            if rail.kind in ("infiniband", "roce") and rail.devices is None:
                raise ValueError(f"rail {rail.name!r}: an {rail.kind} rail names its devices")
        every = Counter(d for r in v for d in r.device_names())
        shared = sorted(d for d, times in every.items() if times > 1)
        if shared:
            raise ValueError(f"device {shared[0]!r} is in two rails")
        return v

    def compute_rails(self) -> list[Rail]:
        return [r for r in self.rails if r.role == "compute"]

    @property
    def efa_interfaces(self) -> int:
        """EFA devices a node of the platform carries (its EFA rails, whatever their role)."""
        return sum(r.count for r in self.rails if r.kind == "efa")

    @property
    def hca_count(self) -> int:
        """RDMA devices on compute rails: what the conformance suite calls the node's HCAs."""
        return sum(r.count for r in self.compute_rails() if r.kind in RDMA_KINDS)


class _Pinned(_Model):
    version: Token


class _Floor(_Model):
    # The lowest version adopted from an image (gpucluster.render.os_packages.FLOOR_COMPONENTS).
    floor: Token


SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


def pinned_sha256(value: str, what: str) -> str:
    """``value`` as the SHA-256 a download is checked against; a ValueError naming ``what`` where it
    is empty or not 64 lower-case hex digits (converge never downloads an artefact unverified)."""
    if not value:
        raise ValueError(f"empty: converge downloads {what} and checks it against this SHA-256; pin the "
                         "artefact's published SHA-256 (64 lower-case hex digits), never leave it unverified")
    if not SHA256_RE.match(value):
        raise ValueError(f"{value[:80]!r} is not a SHA-256 (64 lower-case hex digits) of {what}")
    return value


class _Sourced(_Model):
    """A source tarball a role downloads at converge: its version, URL and SHA-256 (required)."""

    version: Token
    source_url: HttpUrl
    sha256: str

    @field_validator("sha256")
    @classmethod
    def _checksum(cls, v: str, info: ValidationInfo) -> str:
        return pinned_sha256(v, str(info.data.get("source_url") or "the artefact"))


class _Efa(_Model):
    version: Token
    # The installer tarball's SHA-256; "" where none is published. Whether a cluster needs it is the
    # spec's to tell (gpucluster.spec.downloads): converge never downloads the installer without it.
    sha256: str = Field(default="", pattern=r"^([0-9a-f]{64})?$")


class _Driver(_Model):
    branch: Token
    version: Token
    debian_version: Token


class _Cuda(_Model):
    version: Token
    package_suffix: Token


class _Nccl(_Model):
    version: Token
    cuda_build: Token


class _CephRelease(_Model):
    release: Token
    version: Token


class _Ceph(_Model):
    release: Token
    version: Token
    # download.ceph.com or a mirror of it (an air-gapped site's).
    mirror_url: HttpUrl
    # The distribution archive's own Ceph, per OS, for nodes that reach only that archive.
    distro: dict[OsId, _CephRelease] = Field(default_factory=dict)


class _OsRelease(_Model):
    # /etc/os-release's ID, VERSION_ID and VERSION_CODENAME.
    id: Literal["ubuntu", "debian"]
    version_id: Token
    codename: Token


class _Kube(_Model):
    version: Token
    minor: Token


class _Debian(_Model):
    suite: Token


class Bom(_Model):
    """The bill of materials: every pinned version, in one file."""

    schema_: int = Field(alias="schema")
    nvidia_driver: _Driver
    cuda: _Cuda
    nccl: _Nccl
    nccl_tests: _Sourced
    gpu_burn: _Sourced
    nvbandwidth: _Sourced
    dcgm: _Pinned
    container_toolkit: _Pinned
    # containerd comes from the OS archive; an image's own (moby-containerd, containerd.io) is
    # adopted at or above this floor (roles/container_runtime, gpucluster.spec.images).
    containerd: _Floor
    ceph: _Ceph
    kubernetes: _Kube
    cni: dict[Literal["calico", "cilium", "flannel"], Token]
    gpu_operator: _Pinned
    device_plugin: _Pinned
    network_operator: _Pinned
    ceph_csi: _Pinned
    doca_ofed: _Pinned
    # AWS's EFA installer (EFA driver, libfabric, aws-ofi-nccl), where an EFA node's image lacks it.
    efa: _Efa
    os: dict[OsId, _OsRelease]
    debian: _Debian


# --- image manifests: what a pinned cloud image ships ----------------------------------------------

# The components a manifest may state. nvidia-driver, efa and containerd are the ones converge adopts or
# stops on (gpucluster.render.os_packages.preinstalled_action); the rest are stated for the reader and the
# twins. ofed: `ofed_info -s`'s OFED version; doca: the DOCA-Host release that brought it.
ImageComponentName = Literal["nvidia-driver", "cuda", "nccl", "dcgm", "efa", "aws-ofi-nccl", "doca", "ofed",
                             "container-toolkit", "containerd", "docker"]
# What every manifest states, by a version or by the reason it gives none (`not_listed`).
IMAGE_CORE_COMPONENTS: tuple[str, ...] = ("nvidia-driver", "cuda", "nccl", "container-toolkit", "containerd")


class ImageComponent(_Model):
    """One component of an image, as its publisher states it: the exact version where one is given,
    else only its branch or minor (an image named "GPU-580": the driver's branch 580)."""

    version: DebVersion | None = None
    branch: Token | None = None
    # How the image installed it, where the publisher's recipe says: packages (apt) or NVIDIA's
    # runfile, over which the roles never layer packages.
    installed_by: Literal["package", "runfile"] | None = None
    # The Debian package that carries it, where the component's package name varies by publisher
    # (containerd: moby-containerd, containerd.io; gpucluster.render.os_packages.IMAGE_CONTAINERD).
    package: Token | None = None
    source: Source

    @model_validator(mode="after")
    def _stated(self) -> ImageComponent:
        if self.version is None and self.branch is None:
            raise ValueError("a component states its version or its branch (else list it under not_listed)")
        return self


class ImageUnlisted(_Model):
    """A component whose version the publisher does not state, and why it is left out."""

    component: ImageComponentName
    reason: str = Field(pattern=r"^[^\n\r{}%$`\\]{1,300}$")


class ImageManifest(_Model):
    """What a published cloud image ships (gpucluster/data/images/<name>.yaml), every version with
    its source; what no source gives is under `not_listed`, never guessed."""

    name: Name
    description: str = Field(pattern=r"^[^\n\r{}%$`\\]{1,200}$")
    target: Literal["aws", "azure", "oci"]
    os: OsId
    arch: Literal["x86_64", "aarch64"]
    # The image's name as its publisher gives it (an AMI name, an OCI image's display name).
    image: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9 ()._:+-]{0,199}$")
    # Azure Marketplace URNs (publisher:offer:sku:version) this manifest describes.
    urns: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+:[A-Za-z0-9_.-]+:[A-Za-z0-9_.-]+:[A-Za-z0-9_.-]+$")]] = (
        Field(default_factory=list))
    source: Source
    components: dict[ImageComponentName, ImageComponent]
    not_listed: list[ImageUnlisted] = Field(default_factory=list)

    @model_validator(mode="after")
    def _every_core_component(self) -> ImageManifest:
        unlisted = [u.component for u in self.not_listed]
        both = sorted(set(unlisted) & set(self.components))
        if both:
            raise ValueError(f"{both[0]} has a version and is under not_listed; keep one")
        missing = [c for c in IMAGE_CORE_COMPONENTS if c not in self.components and c not in unlisted]
        if missing:
            raise ValueError(f"{missing[0]}: give its version with a source, or list it under not_listed "
                             "with the reason no source gives one")
        if self.urns and self.target != "azure":
            raise ValueError("urns are Azure Marketplace image URNs; this manifest's target is " + self.target)
        return self

