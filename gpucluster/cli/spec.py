"""`gpucluster spec validate|show STACK_FILE`."""

from __future__ import annotations

import argparse
import json

import yaml

from gpucluster.errors import EXIT_OK
from gpucluster.spec import load_spec


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    spec = sub.add_parser("spec", help="validate or show a cluster spec (a Pulumi stack file)")
    verbs = spec.add_subparsers(dest="verb", metavar="VERB", required=True)
    validate = verbs.add_parser("validate", help="check a stack file; every problem is listed")
    validate.add_argument("stack_file", metavar="STACK_FILE")
    validate.set_defaults(func=_validate)
    show = verbs.add_parser("show", help="print the resolved spec: nodes, addresses, versions, profiles")
    show.add_argument("stack_file", metavar="STACK_FILE")
    show.add_argument("--json", action="store_true", help="machine-readable output")
    show.set_defaults(func=_show)


def _validate(args: argparse.Namespace) -> int:
    cluster = load_spec(args.stack_file)
    print(f"ok: {args.stack_file}: {cluster.summary()}")
    return EXIT_OK


def _show(args: argparse.Namespace) -> int:
    cluster = load_spec(args.stack_file)
    data = cluster.as_dict()
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(yaml.safe_dump(data, sort_keys=False, default_flow_style=False), end="")
    return EXIT_OK
