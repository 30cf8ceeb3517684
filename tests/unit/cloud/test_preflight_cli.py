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


def test_no_credentials_is_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    # The real client factory, with every source of credentials emptied.
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    assert main(["preflight", "--stack", AWS_STACK]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "no credentials found" in lines[0] and "AWS_PROFILE" in lines[0]


def test_rejected_credentials_stop_the_run_in_one_line(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from botocore.exceptions import ClientError

    class Refusing:
        def __getattr__(self, name: str) -> Any:
            def call(**_: Any) -> Any:
                raise ClientError({"Error": {"Code": "AuthFailure", "Message": "not valid"}}, name)
            return call

    monkeypatch.setattr(cli_preflight, "clients", lambda region: (Refusing(), Refusing()))
    assert main(["preflight", AWS_STACK]) == 2
    captured = capsys.readouterr()
    assert "FAIL" not in captured.out
    assert len(captured.err.strip().splitlines()) == 1 and "AuthFailure" in captured.err
