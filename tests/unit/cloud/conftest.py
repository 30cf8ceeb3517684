"""Shared fixtures of the AWS helper tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

REGION = "us-east-1"


@pytest.fixture()
def service_quotas() -> Callable[[dict[str, float]], Any]:
    """A Service Quotas client answering GetServiceQuota for ec2 from ``values`` (moto 5.2 has
    no such call): a Stubber on the real API shape."""
    return _quotas


def _quotas(values: dict[str, float]) -> Any:
    client = boto3.client("service-quotas", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    for code, value in values.items():
        stub.add_response(
            "get_service_quota",
            {"Quota": {"ServiceCode": "ec2", "QuotaCode": code, "Value": value}},
            {"ServiceCode": "ec2", "QuotaCode": code},
        )
    stub.activate()
    return client
