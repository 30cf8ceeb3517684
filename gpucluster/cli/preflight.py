"""`gpucluster preflight STACK_FILE`: capacity and quota checks before `pulumi up` (AWS).

It calls AWS with the caller's credentials (the usual boto3 chain) and reads only:
instance types, their offerings in the zone, EC2 vCPU quotas and the capacity reservation.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from gpucluster.errors import EXIT_CHECK_FAILED, EXIT_OK, InputError
from gpucluster.spec import load_spec


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cmd = sub.add_parser("preflight", help="check AWS capacity and quotas for a stack before `pulumi up`")
    cmd.add_argument("stack_file", metavar="STACK_FILE")
    cmd.add_argument("--json", action="store_true", help="machine-readable output")
    cmd.set_defaults(func=_preflight)


def clients(region: str) -> tuple[Any, Any]:
    """EC2 and Service Quotas clients for ``region`` (a seam for tests)."""
    try:
        import boto3  # type: ignore[import-untyped]
        from botocore.exceptions import BotoCoreError  # type: ignore[import-untyped]
    except ImportError:
        raise InputError("boto3 is not installed: pip install -r requirements.txt") from None
    try:
        session = boto3.Session(region_name=region)
        return session.client("ec2"), session.client("service-quotas")
    except BotoCoreError as exc:
        raise InputError(f"AWS: {exc}") from None


def _preflight(args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError

    from gpucluster.cloud.aws import preflight_cluster

    cluster = load_spec(args.stack_file)
    if cluster.spec.target.kind != "aws":
        raise InputError(
            f"gpucluster.target.kind: preflight checks AWS stacks; this one is {cluster.spec.target.kind}",
            source=args.stack_file,
        )
    ec2, quotas = clients(cluster.spec.target.region)
    try:
        problems = preflight_cluster(cluster, ec2, quotas)
    except (BotoCoreError, ClientError) as exc:
        raise InputError(f"AWS: {exc}", source=args.stack_file) from None
    if args.json:
        print(json.dumps({"stack": args.stack_file, "ok": not problems, "problems": problems}, indent=2))
    else:
        for line in problems:
            print(f"FAIL {line}")
        print(f"preflight {args.stack_file}: " + ("ok" if not problems else f"{len(problems)} problem(s)"))
    return EXIT_CHECK_FAILED if problems else EXIT_OK
