"""`gpucluster spec validate|show [--stack] STACK_FILE`."""

from __future__ import annotations

import argparse
import json
import sys

import yaml

from gpucluster.errors import EXIT_OK, InputError
from gpucluster.spec import Cluster, load_spec
from gpucluster.spec.downloads import download_findings
from gpucluster.spec.images import image_findings
from gpucluster.spec.loader import load_images
from gpucluster.spec.rules import reachability_warnings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    spec = sub.add_parser("spec", help="validate or show a cluster spec (a Pulumi stack file)")
    verbs = spec.add_subparsers(dest="verb", metavar="VERB", required=True)
    validate = verbs.add_parser(
        "validate", help="check a stack file; every problem is listed",
        description="Check a stack file: every problem is listed with its field, exit 2 when there is one. "
                    "A pool whose image manifest ships a driver or EFA that converge would stop on (the "
                    "bill of materials pins another version and the pool's policy is adopt_or_fail) is "
                    "such a problem. Warnings (nodes SSH may not reach, what a manifest cannot tell) go "
                    "to stderr and do not fail.",
        epilog="example: gpucluster spec validate --stack Pulumi.aws-h100.yaml --json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    stack_args(validate)
    validate.add_argument("--json", action="store_true",
                          help="print {stack, ok, summary, warnings} as JSON on stdout")
    validate.set_defaults(func=_validate)
    show = verbs.add_parser("show", help="print the resolved spec: nodes, addresses, versions, profiles",
                            epilog="example: gpucluster spec show --stack Pulumi.lab.yaml --json")
    stack_args(show)
    show.add_argument("--json", action="store_true", help="machine-readable output")
    show.set_defaults(func=_show)


def stack_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("stack_pos", metavar="STACK_FILE", nargs="?", help="the stack file (same as --stack)")
    parser.add_argument("--stack", dest="stack_opt", metavar="FILE", help="the stack file (Pulumi.<stack>.yaml)")


def stack_file(args: argparse.Namespace) -> str:
    if args.stack_pos and args.stack_opt and args.stack_pos != args.stack_opt:
        raise InputError(f"two stack files given ({args.stack_pos} and --stack {args.stack_opt}): pass one")
    stack = args.stack_opt or args.stack_pos
    if not stack:
        raise InputError("no stack file: pass --stack FILE (a Pulumi.<stack>.yaml)")
    return str(stack)


def check_images(cluster: Cluster, stack: str) -> list[str]:
    """Stop (InputError, exit 2) where converge would stop on a pool's image, or would download an
    artefact with no SHA-256 to check it against; the warnings otherwise."""
    manifests = load_images()
    problems, warnings = image_findings(cluster, manifests)
    unpinned, unknown = download_findings(cluster, manifests)
    problems, warnings = problems + unpinned, warnings + unknown
    if problems:
        raise InputError(problems, source=stack)
    return warnings


def _validate(args: argparse.Namespace) -> int:
    stack = stack_file(args)
    cluster = load_spec(stack)
    warnings = reachability_warnings(cluster.spec) + check_images(cluster, stack)
    if args.json:
        print(json.dumps({"stack": stack, "ok": True, "summary": cluster.summary(), "warnings": warnings},
                         indent=2))
    else:
        print(f"ok: {stack}: {cluster.summary()}")
    for line in warnings:
        print(f"warning: {stack}: {line}", file=sys.stderr)
    return EXIT_OK


def _show(args: argparse.Namespace) -> int:
    cluster = load_spec(stack_file(args))
    data = cluster.as_dict()
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(yaml.safe_dump(data, sort_keys=False, default_flow_style=False), end="")
    return EXIT_OK
