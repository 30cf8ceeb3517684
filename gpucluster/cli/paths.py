"""`gpucluster paths --stack STACK_FILE [--json | FIELD]`: where a stack's files live (gpucluster/paths.py)."""

from __future__ import annotations

import argparse
import json

from gpucluster.errors import EXIT_OK, InputError
from gpucluster.paths import resolve

FIELDS = ("folder", "outputs_file", "inventory_file", "kubeconfig_file", "runs_dir", "lab_dir", "lab_state_root")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("paths", help="where a stack's outputs, inventory, run folders and lab state live",
                       epilog="example: gpucluster paths --stack Pulumi.aws-h100.yaml inventory_file",
                       description="Name the stack's files (nothing is created). kubeconfig_file, the "
                                   "cluster-admin kubeconfig the control plane's role fetches, is the stack's "
                                   "inventory's answer where that inventory exists (its "
                                   "kubernetes_control_plane_kubeconfig_fetch_dest, else admin.conf beside it; "
                                   "exit 2 when it cannot be read), else the node contract's default place "
                                   "beside where the inventory will be; no other path reads anything but the "
                                   "stack file.")
    p.add_argument("--stack", required=True, metavar="STACK_FILE", help="the Pulumi.<stack>.yaml")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="every path as one JSON object")
    out.add_argument("field", nargs="?", choices=FIELDS, metavar="FIELD",
                     help=f"print this one path alone (one of: {', '.join(FIELDS)})")
    p.set_defaults(func=_paths)


def _paths(args: argparse.Namespace) -> int:
    paths = resolve(args.stack)
    if args.field:
        # One field reads no more than it names: the inventory only for kubeconfig_file.
        value = getattr(paths, args.field)
        if value is None:
            raise InputError(f"{args.field}: stack {args.stack} targets {paths.target!r}, which has none")
        print(value)
        return EXIT_OK
    found = paths.as_dict()
    if args.json:
        print(json.dumps(found, indent=2))
    else:
        for key, value in found.items():
            print(f"{key + ':':<16} {'-' if value is None else value}")
    return EXIT_OK
