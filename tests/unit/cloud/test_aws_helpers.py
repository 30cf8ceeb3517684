"""boto3 helpers against moto (AMI lookup, instance types, offerings). moto 5.2 implements
neither DescribeCapacityReservations nor Service Quotas' GetServiceQuota for ec2: those are
tested with botocore's Stubber on the real API shapes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from gpucluster.cloud import aws as helpers
from gpucluster.errors import InputError

REGION = "us-east-1"


@pytest.fixture()
def ec2(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(var, "testing")
    with mock_aws():
        yield boto3.client("ec2", region_name=REGION)


def _register(ec2: Any, name: str) -> str:
    instance = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    return str(ec2.create_image(InstanceId=instance, Name=name)["ImageId"])


def test_find_ami_matches_the_name_filter(ec2: Any) -> None:
    wanted = _register(ec2, "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) 20250101")
    _register(ec2, "some-other-image 20250101")
    owner = ec2.describe_images(ImageIds=[wanted])["Images"][0]["OwnerId"]
    found = helpers.find_ami(ec2, "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04)*", owner)
    assert found.image_id == wanted


def test_find_ami_returns_the_newest_match() -> None:
    # moto stamps images created in one second alike, so the ordering is tested on a Stubber.
    client = boto3.client("ec2", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    images = [
        {"ImageId": "ami-0old", "Name": "dlami 2024", "CreationDate": "2024-01-01T00:00:00.000Z"},
        {"ImageId": "ami-0new", "Name": "dlami 2025", "CreationDate": "2025-01-01T00:00:00.000Z"},
        {"ImageId": "ami-0mid", "Name": "dlami 2024b", "CreationDate": "2024-06-01T00:00:00.000Z"},
    ]
    stub.add_response("describe_images", {"Images": images})
    stub.activate()
    found = helpers.find_ami(client, "dlami*", "amazon")
    assert found == helpers.Image("ami-0new", "dlami 2025", images[1]["CreationDate"])


def test_find_ami_without_a_match_is_an_input_error(ec2: Any) -> None:
    with pytest.raises(InputError, match=r"no x86_64 AMI owned by 'self' matches 'nothing-like-this-\*'"):
        helpers.find_ami(ec2, "nothing-like-this-*", "self")


def test_instance_type_info_reads_vcpus_and_efa(ec2: Any) -> None:
    info = helpers.instance_type_info(ec2, "p5.48xlarge")
    assert (info.vcpus, info.max_efa_interfaces) == (192, 32)
    assert helpers.instance_type_info(ec2, "m7i.2xlarge").max_efa_interfaces == 0


def test_unknown_instance_type_is_an_input_error(ec2: Any) -> None:
    with pytest.raises(InputError, match=r"instance type .p99\.huge."):
        helpers.instance_type_info(ec2, "p99.huge")


def test_offered_in_az(ec2: Any) -> None:
    assert helpers.offered_in_az(ec2, "p5.48xlarge", "us-east-1a") is True
    assert helpers.offered_in_az(ec2, "p5.48xlarge", "us-east-1z") is False


def test_vcpu_quota_problems_name_the_quota_and_the_gap(service_quotas: Any) -> None:
    quotas = service_quotas({"L-417A185B": 192.0, "L-1216C47A": 5000.0})
    problems = helpers.vcpu_quota_problems(quotas, {"p": 384, "standard": 96})
    assert problems == [
        "quota L-417A185B (Running On-Demand P instances): the stack needs 384 vCPUs, the quota is 192; "
        "ask for an increase in Service Quotas"
    ]


def _reservation(ec2_client: Any, **fields: Any) -> Any:
    stub = Stubber(ec2_client)
    cr = {"CapacityReservationId": "cr-0123456789abcdef0", "InstanceType": "p5.48xlarge",
          "AvailabilityZone": "us-east-1a", "State": "active", "AvailableInstanceCount": 2, **fields}
    stub.add_response("describe_capacity_reservations", {"CapacityReservations": [cr]},
                      {"CapacityReservationIds": ["cr-0123456789abcdef0"]})
    stub.activate()
    return stub


def test_capacity_reservation_that_fits_has_no_problem() -> None:
    client = boto3.client("ec2", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    _reservation(client)
    assert helpers.capacity_reservation_problems(client, "cr-0123456789abcdef0", "p5.48xlarge", "us-east-1a", 2) == []


def test_capacity_reservation_mismatches_are_all_reported() -> None:
    client = boto3.client("ec2", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    _reservation(client, State="expired", InstanceType="p4d.24xlarge", AvailabilityZone="us-east-1b",
                 AvailableInstanceCount=1)
    problems = helpers.capacity_reservation_problems(client, "cr-0123456789abcdef0", "p5.48xlarge", "us-east-1a", 2)
    assert len(problems) == 4
    assert "state is expired" in problems[0]
    assert problems[3].endswith("1 instance(s) available, the GPU pools need 2")


def test_preflight_collects_every_problem(ec2: Any, service_quotas: Any) -> None:
    quotas = service_quotas({"L-417A185B": 100.0, "L-1216C47A": 10_000.0})
    problems = helpers.preflight(
        ec2, quotas, availability_zone="us-east-1a",
        pools=[("p5.48xlarge", 2, True), ("m7i.2xlarge", 1, False), ("p99.huge", 1, True)],
    )
    assert any(p.startswith("instance type 'p99.huge'") for p in problems)
    assert any("L-417A185B" in p and "384 vCPUs" in p for p in problems)
    assert len(problems) == 2


def test_quota_family() -> None:
    assert [helpers.quota_family(t) for t in ("p5.48xlarge", "g6.xlarge", "vt1.3xlarge", "i4i.8xlarge")] == [
        "p", "g", "vt", "standard",
    ]
