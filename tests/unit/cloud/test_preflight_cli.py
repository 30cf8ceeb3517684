"""`gpucluster preflight`: the image and AWS checks before `pulumi up`, from a stack file.

EC2 is moto's (the pinned AMIs are registered there, under the names their manifests give);
Service Quotas is a Stubber on the real API shape (moto 5.2 has no GetServiceQuota for ec2). The
command's client factory is the seam replaced here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from moto import mock_aws

from gpucluster.cli import main
from gpucluster.cli import preflight as cli_preflight

REPO = Path(__file__).resolve().parents[3]
AWS_STACK = str(REPO / "Pulumi.aws-h100.yaml")
DLAMI = "aws-dlami-base-2204-20260102"
DLAMI_NAME = "Deep Learning Base AMI with Single CUDA (Ubuntu 22.04) 20260102"
OVERLAY = REPO / "examples/bom/aws-dlami-base-2204-20260102.yaml"


@pytest.fixture()
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(var, "testing")
    with mock_aws():
        yield


def _use(monkeypatch: pytest.MonkeyPatch, stub: Callable[[dict[str, float]], Any], quotas: dict[str, float]) -> Any:
    ec2 = boto3.client("ec2", region_name="us-east-1")
    monkeypatch.setattr(cli_preflight, "clients", lambda region: (ec2, stub(quotas)))
    return ec2


def _register(ec2: Any, name: str) -> str:
    disk = [{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 100}}]
    image: str = ec2.register_image(Name=name, RootDeviceName="/dev/sda1", BlockDeviceMappings=disk)["ImageId"]
    return image


def _stack(tmp_path: Path, gpu_ami: str, service_ami: str, manifest: str | None = DLAMI,
           overlay: bool = True) -> str:
    """The AWS example with its AMIs pinned to ``gpu_ami``/``service_ami``, the GPU pool naming
    ``manifest`` and (``overlay``) the example overlay that pins what that image ships."""
    doc = yaml.safe_load(Path(AWS_STACK).read_text())
    config = doc["config"]
    config["gpucluster:target"].update(ami_id=gpu_ami, service_ami_id=service_ami)
    if manifest:
        config["gpucluster:node_pools"][0]["image_manifest"] = manifest
    if overlay:
        (tmp_path / "bom-dlami.yaml").write_text(OVERLAY.read_text())
        config["gpucluster:bom"] = "bom-dlami.yaml"
    path = tmp_path / "Pulumi.aws-h100.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


def test_enough_quota_passes(
    aws: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], service_quotas: Any,
    tmp_path: Path,
) -> None:
    # 2x p5.48xlarge = 384 vCPUs of P quota; i4i + m7i come from the standard quota.
    ec2 = _use(monkeypatch, service_quotas, {"L-417A185B": 400.0, "L-1216C47A": 1000.0})
    stack = _stack(tmp_path, _register(ec2, DLAMI_NAME), _register(ec2, "ubuntu-jammy-22.04-amd64-server"))
    assert main(["preflight", stack, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"stack": stack, "ok": True, "problems": []}


def test_short_quota_fails_naming_it(
    aws: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], service_quotas: Any,
    tmp_path: Path,
) -> None:
    ec2 = _use(monkeypatch, service_quotas, {"L-417A185B": 192.0, "L-1216C47A": 1000.0})
    stack = _stack(tmp_path, _register(ec2, DLAMI_NAME), _register(ec2, "ubuntu"))
    assert main(["preflight", stack]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "L-417A185B" in out and "384 vCPUs" in out


def test_an_ami_missing_in_the_region_fails_naming_it(
    aws: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], service_quotas: Any,
    tmp_path: Path,
) -> None:
    # The example's placeholder AMIs exist nowhere: both fail, each naming its pools; quotas still run.
    _use(monkeypatch, service_quotas, {"L-417A185B": 400.0, "L-1216C47A": 1000.0})
    assert main(["preflight", AWS_STACK, "--json"]) == 1
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert problems == [
        "AMI ami-0123456789abcdef0 (pools gpu) does not exist in us-east-1, or this account may not launch it: "
        'AMI IDs differ per region (docs/walkthroughs/aws.md, "Pin the image")',
        "AMI ami-0fedcba9876543210 (pools ceph, cp) does not exist in us-east-1, or this account may not launch it: "
        'AMI IDs differ per region (docs/walkthroughs/aws.md, "Pin the image")',
    ]


def test_an_ami_that_is_not_the_manifests_image_fails(
    aws: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], service_quotas: Any,
    tmp_path: Path,
) -> None:
    ec2 = _use(monkeypatch, service_quotas, {"L-417A185B": 400.0, "L-1216C47A": 1000.0})
    other = "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) 20261006"
    stack = _stack(tmp_path, _register(ec2, other), _register(ec2, "ubuntu"))
    assert main(["preflight", stack]) == 1
    out = capsys.readouterr().out
    assert f"is named {other!r}, but the pool's image manifest {DLAMI} describes {DLAMI_NAME!r}" in out


def test_an_image_converge_would_stop_on_is_exit_2_before_any_aws_call(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    def no_aws(region: str) -> Any:
        raise AssertionError("preflight called AWS before the image check stopped it")

    monkeypatch.setattr(cli_preflight, "clients", no_aws)
    stack = _stack(tmp_path, "ami-0123456789abcdef0", "ami-0fedcba9876543210", overlay=False)
    assert main(["preflight", stack]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 3
    assert "ships nvidia-driver 580.105.08, the bill of materials pins 580.126.16" in lines[0]
    assert "ships efa 1.45.0, the bill of materials pins 1.51.0" in lines[1]
    # The image's container toolkit is below the pin (an image's at or above it would be adopted).
    assert "ships container-toolkit 1.18.1, the bill of materials pins 1.18.2" in lines[2]
    assert all("Two ways out" in line and "overlay" in line and "boot an image" in line for line in lines)


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
    # One error line; the image check's warnings (the example's pool names no manifest) go before it.
    lines = [line for line in captured.err.strip().splitlines() if not line.startswith("warning: ")]
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
    lines = [line for line in captured.err.strip().splitlines() if not line.startswith("warning: ")]
    assert len(lines) == 1 and "AuthFailure" in lines[0]
