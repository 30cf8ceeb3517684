"""Reach and egress in the spec: a joined network named as its cloud names it, an egress that can
work, an access path that leads somewhere, a key that is named or the agent's. Every refusal is one
line naming its field, and all of them come together."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucluster.errors import InputError
from gpucluster.render.sources import SOURCES, Needs, needed_sources, resolved_sources
from gpucluster.spec import load_bom, load_spec
from gpucluster.spec.rules import cluster_needs

REPO = Path(__file__).resolve().parents[3]
NS = "gpucluster.target"
MIRROR = "http://mirror.example.internal"
AWS_VPC = {"id": "vpc-0123456789abcdef0", "management_subnet_id": "subnet-0123456789abcdef0"}
AZURE_VNET = ("/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/net/providers/"
              "Microsoft.Network/virtualNetworks/hub")


def _stack(tmp_path: Path, example: str, **target: Any) -> Path:
    doc = yaml.safe_load((REPO / f"Pulumi.{example}.yaml").read_text())
    t = doc["config"]["gpucluster:target"]
    for key, value in target.items():
        if value is None:
            t.pop(key, None)
        else:
            t[key] = copy.deepcopy(value)
    path = tmp_path / f"Pulumi.{example}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _problems(path: Path) -> list[str]:
    with pytest.raises(InputError) as err:
        load_spec(path)
    return list(err.value.problems)


def test_the_examples_take_each_path() -> None:
    aws, azure, oci = (load_spec(REPO / f"Pulumi.{n}.yaml").spec.target
                       for n in ("aws-h100", "azure-h100", "oci-h100"))
    assert (aws.access.mode, aws.access.bastion and aws.access.bastion.create, aws.egress.mode) == (
        "bastion", True, "nat")
    assert (azure.network is not None, azure.access.bastion and azure.access.bastion.host, azure.egress.mode) == (
        True, "203.0.113.10", "proxy")
    assert (oci.access.mode, oci.egress.mode, oci.network) == ("direct", "nat", None)


def test_a_proxy_needs_its_urls(tmp_path: Path) -> None:
    problems = _problems(_stack(tmp_path, "oci-h100", egress={"mode": "proxy"}))
    assert problems == [
        f"{NS}.egress.http_proxy: egress.mode proxy needs the proxy's URL for http (http://host:port; the same URL "
        "for both is fine)",
        f"{NS}.egress.https_proxy: egress.mode proxy needs the proxy's URL for https (http://host:port; the same URL "
        "for both is fine)",
    ]


def test_proxy_settings_without_a_proxy_are_refused(tmp_path: Path) -> None:
    problems = _problems(_stack(tmp_path, "oci-h100", egress={"mode": "nat", "http_proxy": "http://p:3128",
                                                               "no_proxy": [".internal"]}))
    assert [p.split(":")[0] for p in problems] == [f"{NS}.egress.http_proxy", f"{NS}.egress.no_proxy"]
    assert "egress.mode is nat; the nodes take no proxy" in problems[0]


@pytest.mark.parametrize("url", ["http://user:secret@proxy:3128", "proxy:3128", "http://proxy:3128/{{ x }}"])
def test_a_proxy_url_is_scheme_host_and_port(tmp_path: Path, url: str) -> None:
    (line,) = _problems(_stack(tmp_path, "oci-h100", egress={"mode": "proxy", "http_proxy": url, "https_proxy": url}
                               ))[:1]
    assert line.startswith(f"{NS}.egress.http_proxy")


def test_no_egress_needs_a_mirror_for_every_source_the_roles_download_from(tmp_path: Path) -> None:
    problems = _problems(_stack(tmp_path, "aws-h100", egress={"mode": "none"}, public_cidr=None,
                                access={"mode": "direct"}))
    # EFA (its installer), Kubernetes (binaries, images), Ceph from download.ceph.com, GPU nodes.
    assert [p.split(":")[0] for p in problems] == [
        f"{NS}.egress.mirrors.{key}" for key in ("os_archive", "nvidia", "container_toolkit", "efa_installer",
                                                 "kubernetes", "container_registry", "ceph", "sources")]
    assert "the roles download AWS's EFA installer tarballs from https://efa-installer.amazonaws.com" in problems[3]
    mirrors = {key: f"{MIRROR}/{key}" for key in ("os_archive", "nvidia", "container_toolkit", "efa_installer",
                                                  "kubernetes", "container_registry", "ceph", "sources")}
    load_spec(_stack(tmp_path, "aws-h100", egress={"mode": "none", "mirrors": mirrors}, public_cidr=None,
                     access={"mode": "direct"}))


def test_the_sources_follow_the_cluster() -> None:
    bare = needed_sources(Needs(gpu_nodes=False, fabric="ethernet", ofed="inbox", kubernetes=False,
                                ceph_upstream=False))
    assert [s.key for s in bare] == ["os_archive"]
    full = needed_sources(Needs(gpu_nodes=True, fabric="efa", ofed="doca", kubernetes=True, ceph_upstream=True))
    assert [s.key for s in full] == [s.key for s in SOURCES]
    # The lab's Ceph is Debian's own archive: no download.ceph.com.
    lab = cluster_needs(load_spec(REPO / "Pulumi.lab.yaml").spec)
    assert lab.ceph_upstream is False and lab.gpu_nodes is True


def test_mirrors_resolve_to_the_urls_the_roles_take() -> None:
    bom = load_bom()
    upstream = resolved_sources({}, bom)
    assert upstream["nvidia"] == "https://developer.download.nvidia.com/compute/cuda/repos"
    assert upstream["nccl_tests"] == bom.nccl_tests.source_url
    assert upstream["ceph"] == bom.ceph.mirror_url
    mirrored = resolved_sources({"nvidia": f"{MIRROR}/cuda/", "sources": f"{MIRROR}/github"}, bom)
    assert mirrored["nvidia"] == f"{MIRROR}/cuda"
    # GitHub's archive paths under the mirror's URL.
    assert mirrored["nccl_tests"] == bom.nccl_tests.source_url.replace("https://github.com", f"{MIRROR}/github")
    with pytest.raises(ValueError, match="no source named pypi"):
        resolved_sources({"pypi": MIRROR}, bom)


def test_a_bastion_path_that_leads_nowhere_is_refused(tmp_path: Path) -> None:
    assert _problems(_stack(tmp_path, "oci-h100", access={"mode": "bastion"})) == [
        f"{NS}.access.bastion: access.mode bastion needs one: {{create: true}} for a bastion the stack makes, or "
        "{host, user, port} of an existing one"]
    assert _problems(_stack(tmp_path, "oci-h100", access={"mode": "direct", "bastion": {"host": "10.0.0.1"}}))[0] \
        .startswith(f"{NS}.access.bastion: set, but access.mode is direct")
    problems = _problems(_stack(tmp_path, "oci-h100", access={"mode": "bastion", "bastion": {"port": 2222}}))
    assert [p.split(":")[0] for p in problems] == [f"{NS}.access.bastion.host", f"{NS}.access.bastion.user"]


def test_an_existing_bastion_by_name_says_where_its_connections_come_from(tmp_path: Path) -> None:
    named = {"mode": "bastion", "bastion": {"host": "jump.example.com", "user": "ops"}}
    (line,) = _problems(_stack(tmp_path, "oci-h100", access=named))
    assert line.startswith(f"{NS}.access.bastion.source_cidr: bastion jump.example.com is named, not addressed")
    named["bastion"]["source_cidr"] = "10.61.0.0/28"  # type: ignore[index]
    load_spec(_stack(tmp_path, "oci-h100", access=named))
    # An address is its own source.
    load_spec(_stack(tmp_path, "oci-h100", access={"mode": "bastion", "bastion": {"host": "10.61.0.5",
                                                                                   "user": "ops"}}))


def test_a_created_bastion_needs_admin_cidrs_and_a_public_subnet(tmp_path: Path) -> None:
    problems = _problems(_stack(tmp_path, "oci-h100", admin_cidrs=[],
                                access={"mode": "bastion", "bastion": {"create": True, "user": "ops"}}))
    assert [p.split(":")[0] for p in problems] == [
        f"{NS}.public_cidr", f"{NS}.access.bastion.user", f"{NS}.admin_cidrs"]
    assert "the bastion the stack creates needs a public subnet" in problems[0]
    assert "admits SSH from nowhere" in problems[2]
    load_spec(_stack(tmp_path, "oci-h100", public_cidr="10.60.64.0/28",
                     access={"mode": "bastion", "bastion": {"create": True}}))


def test_aws_nat_needs_a_public_subnet_inside_the_vpc(tmp_path: Path) -> None:
    (line,) = _problems(_stack(tmp_path, "aws-h100", public_cidr=None, access={"mode": "direct"}))
    assert line.startswith(f"{NS}.public_cidr: the NAT gateway (AWS puts it in a public subnet) needs a public subnet")
    problems = _problems(_stack(tmp_path, "aws-h100", public_cidr="10.41.0.0/24"))
    assert problems == [f"{NS}.public_cidr: 10.41.0.0/24 is not inside target.vpc_cidr 10.40.0.0/16"]
    overlap = _problems(_stack(tmp_path, "aws-h100", public_cidr="10.40.0.0/24"))
    assert overlap == [f"{NS}.public_cidr: 10.40.0.0/24 overlaps fabric.management_cidr 10.40.0.0/20"]
    # Going out by a proxy, nothing needs it.
    (unused,) = _problems(_stack(tmp_path, "aws-h100", access={"mode": "direct"},
                                 egress={"mode": "proxy", "http_proxy": "http://p:3128", "https_proxy": "http://p:3128"}))
    assert unused.startswith(f"{NS}.public_cidr: nothing the stack creates needs a public subnet")


def test_a_joined_network_is_named_as_its_cloud_names_it(tmp_path: Path) -> None:
    azure_ids = {"id": "vpc-0123456789abcdef0", "management_subnet_id": "subnet-0123456789abcdef0",
                 "fabric_subnet_id": "subnet-0123456789abcdef1"}
    problems = _problems(_stack(tmp_path, "azure-h100", network=azure_ids))
    assert [p.split(":")[0] for p in problems] == [
        f"{NS}.network.id", f"{NS}.network.management_subnet_id", f"{NS}.network.fabric_subnet_id",
        f"{NS}.network.fabric_subnet_id"]
    assert "is not a VNet resource ID" in problems[0]
    other = {"id": AZURE_VNET, "management_subnet_id": AZURE_VNET.replace("/hub", "/spoke") + "/subnets/a"}
    (line,) = _problems(_stack(tmp_path, "azure-h100", network=other))
    assert line.startswith(f"{NS}.network.management_subnet_id:") and f"is not a subnet of {AZURE_VNET}" in line


def test_joining_a_network_creates_no_subnet_and_no_vpc(tmp_path: Path) -> None:
    problems = _problems(_stack(tmp_path, "aws-h100", network=AWS_VPC))
    assert [p.split(":")[0] for p in problems] == [
        f"{NS}.vpc_cidr", f"{NS}.public_cidr", f"{NS}.network.public_subnet_id"]
    assert "needs a public subnet of vpc-0123456789abcdef0" in problems[2]
    # Joined, the network's own route is the way out; the bastion goes in its public subnet.
    load_spec(_stack(tmp_path, "aws-h100", vpc_cidr=None, public_cidr=None,
                     network={**AWS_VPC, "public_subnet_id": "subnet-0123456789abcdef2"}))


def test_every_problem_comes_at_once(tmp_path: Path) -> None:
    problems = _problems(_stack(tmp_path, "oci-h100", egress={"mode": "proxy"}, admin_cidrs=[],
                                access={"mode": "bastion", "bastion": {"create": True}}))
    assert [p.split(":")[0] for p in problems] == [
        f"{NS}.public_cidr", f"{NS}.egress.http_proxy", f"{NS}.egress.https_proxy", f"{NS}.admin_cidrs"]


@pytest.mark.parametrize("key", ["id_ed25519", "./id", "~/../etc/shadow", "/keys/a b", "/keys/{{ x }}"])
def test_the_private_key_is_an_absolute_path_or_one_under_home(tmp_path: Path, key: str) -> None:
    (line,) = _problems(_stack(tmp_path, "oci-h100", ssh_private_key_file=key))
    assert line.startswith(f"{NS}.ssh_private_key_file")


@pytest.mark.parametrize("key", ["/home/ci/.ssh/gpucluster", "~/.ssh/id_ed25519"])
def test_a_key_file_is_a_field_of_its_own(tmp_path: Path, key: str) -> None:
    assert load_spec(_stack(tmp_path, "oci-h100", ssh_private_key_file=key)).spec.target.ssh_private_key_file == key
