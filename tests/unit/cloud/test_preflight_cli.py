"""`gpucluster preflight`: the AWS checks before `pulumi up`, from a stack file.

EC2 is moto's; Service Quotas is a Stubber on the real API shape (moto 5.2 has no
GetServiceQuota for ec2). The command's client factory is the seam replaced here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from gpucluster.cli import main
from gpucluster.cli import preflight as cli_preflight

REPO = Path(__file__).resolve().parents[3]
AWS_STACK = str(REPO / "Pulumi.aws-h100.yaml")


@pytest.fixture()
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(var, "testing")
    with mock_aws():
        yield


def _use(monkeypatch: pytest.MonkeyPatch, stub: Callable[[dict[str, float]], Any], quotas: dict[str, float]) -> None:
    ec2 = boto3.client("ec2", region_name="us-east-1")
    monkeypatch.setattr(cli_preflight, "clients", lambda region: (ec2, stub(quotas)))


def test_enough_quota_passes(
    aws: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], service_quotas: Any
) -> None:
    # 2x p5.48xlarge = 384 vCPUs of P quota; i4i + m7i come from the standard quota.
    _use(monkeypatch, service_quotas, {"L-417A185B": 400.0, "L-1216C47A": 1000.0})
    assert main(["preflight", AWS_STACK, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"stack": AWS_STACK, "ok": True, "problems": []}


def test_short_quota_fails_naming_it(
    aws: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], service_quotas: Any
) -> None:
    _use(monkeypatch, service_quotas, {"L-417A185B": 192.0, "L-1216C47A": 1000.0})
    assert main(["preflight", AWS_STACK]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "L-417A185B" in out and "384 vCPUs" in out


def test_not_an_aws_stack_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["preflight", str(REPO / "Pulumi.lab.yaml")]) == 2
    assert "preflight checks AWS stacks; this one is lab" in capsys.readouterr().err
