"""`gpucluster down --stack FILE [--yes] [--json]`: destroy what `gpucluster up` made of a stack."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gpucluster.cli.spec import stack_args, stack_file
from gpucluster.cli.up import ask
from gpucluster.errors import EXIT_BAD_INPUT, InputError
from gpucluster.up import DownResult, run_down


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "down", help="destroy what `up` made: the cloud stack (Pulumi destroy) or the lab",
        description="Destroy what `gpucluster up` made of a stack file: a cloud or bare-metal target's Pulumi "
                    "stack (through the Automation API; nothing when the backend has no such stack), or the lab "
                    "(`gpucluster lab down`). Up's record of the stack and the fetched cluster-admin kubeconfig "
                    "(where the inventory puts it) are removed, and on a cloud its outputs, inventory and the "
                    "destroyed nodes' host keys; the known_hosts file and every run folder stay. A cloud "
                    "target needs --yes when not on a terminal (on one, down asks). Exit 0 when done (nothing "
                    "to destroy included), 1 when Pulumi failed, 2 on bad input, 130 on Ctrl-C.",
        epilog="examples:\n  gpucluster down --stack Pulumi.lab.yaml\n"
               "  gpucluster down --stack Pulumi.aws-h100.yaml --yes --json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    stack_args(p)
    p.add_argument("--yes", "-y", action="store_true",
                   help="destroy a cloud stack without asking; required when not on a terminal")
    p.add_argument("--json", action="store_true", help="print the result as one JSON document on stdout")
    p.set_defaults(func=_down)


def _down(args: argparse.Namespace) -> int:
    try:
        stack = stack_file(args)
    except InputError as exc:
        result = DownResult(stack="", target="", exit_code=EXIT_BAD_INPUT, errors=exc.lines())
    else:
        result = run_down(Path(stack), out=sys.stderr, yes=args.yes, confirm=ask if sys.stdin.isatty() else None)
    for line in result.errors:
        print(line, file=sys.stderr)
    if args.json:
        print(json.dumps(result.as_dict(), indent=2))
    elif result.exit_code == 0:
        what = "destroyed" if result.destroyed else "nothing to destroy"
        print(f"down {result.stack}: {what}" + "".join(f"\n  removed {p}" for p in result.removed)
              + (f"\n  forgot the host keys of {', '.join(result.forgotten_host_keys)}"
                 if result.forgotten_host_keys else ""))
    return result.exit_code
