"""`gpucluster preflight STACK_FILE`: image, capacity and quota checks before `pulumi up` (AWS).

First, without AWS: each pool's image manifest against the bill of materials (as `spec validate`);
where converge would stop, exit 2 before any call. Then it calls AWS with the caller's credentials
(the usual boto3 chain) and reads only: the pinned AMIs, instance types, their offerings in the
zone, EC2 vCPU quotas and the capacity reservation.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from gpucluster.cli.spec import check_images, stack_file
from gpucluster.errors import EXIT_CHECK_FAILED, EXIT_OK, InputError
from gpucluster.spec import load_spec
from gpucluster.spec.loader import load_images


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cmd = sub.add_parser("preflight", help="check AWS images, capacity and quotas for a stack before `pulumi up`",
                         description="Check that each pool's image ships what converge adopts (its image "
                                     "manifest against the bill of materials: exit 2 where converge would "
                                     "stop), then, with your AWS credentials, that the pinned AMIs exist in "
                                     "the region under the names their manifests give, the instance types are "
                                     "offered in its zone, the vCPU quotas hold them and the capacity "
                                     "reservation fits. No credentials: one line, exit 2.",
                         epilog="example: AWS_PROFILE=gpu gpucluster preflight --stack Pulumi.aws-h100.yaml")
    cmd.add_argument("stack_pos", metavar="STACK_FILE", nargs="?", help="the stack file (same as --stack)")
    cmd.add_argument("--stack", dest="stack_opt", metavar="FILE", help="the stack file (Pulumi.<stack>.yaml)")
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
        # Missing credentials are an environment problem, named once, not a FAIL per check.
        if session.get_credentials() is None:
            raise InputError("AWS: no credentials found (set AWS_PROFILE, or AWS_ACCESS_KEY_ID and "
                             "AWS_SECRET_ACCESS_KEY, or run where an instance or OIDC role applies)")
        return session.client("ec2"), session.client("service-quotas")
    except BotoCoreError as exc:
        raise InputError(f"AWS: {exc}") from None


def _preflight(args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError

    from gpucluster.cloud.aws import credential_problem, preflight_cluster

    args.stack_file = stack_file(args)
    cluster = load_spec(args.stack_file)
    if cluster.spec.target.kind != "aws":
        raise InputError(
            f"gpucluster.target.kind: preflight checks AWS stacks; this one is {cluster.spec.target.kind}",
            source=args.stack_file,
        )
    warnings = check_images(cluster, args.stack_file)
    for line in warnings:
        print(f"warning: {args.stack_file}: {line}", file=sys.stderr)
    ec2, quotas = clients(cluster.spec.target.region)
    try:
        problems = preflight_cluster(cluster, ec2, quotas, load_images())
    except (BotoCoreError, ClientError) as exc:
        raise InputError(credential_problem(exc) or f"AWS: {exc}", source=args.stack_file) from None
    if args.json:
        print(json.dumps({"stack": args.stack_file, "ok": not problems, "problems": problems}, indent=2))
    else:
        for line in problems:
            print(f"FAIL {line}")
        print(f"preflight {args.stack_file}: " + ("ok" if not problems else f"{len(problems)} problem(s)"))
    return EXIT_CHECK_FAILED if problems else EXIT_OK
