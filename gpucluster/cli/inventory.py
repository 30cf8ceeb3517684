"""`gpucluster inventory --outputs OUTPUTS.json --stack STACK_FILE [-o inventory.yml]`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpucluster.errors import EXIT_OK
from gpucluster.inventory import build_inventory, dump_inventory, write_inventory
from gpucluster.outputs import load_outputs
from gpucluster.spec import load_spec


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    inv = sub.add_parser(
        "inventory",
        help="turn stack outputs (`pulumi stack output --json`) into the Ansible inventory",
    )
    inv.add_argument("--outputs", required=True, metavar="OUTPUTS.json", help="stack outputs as JSON")
    inv.add_argument("--stack", required=True, metavar="STACK_FILE", help="the Pulumi.<stack>.yaml they came from")
    inv.add_argument("-o", "--output", metavar="FILE", help="write here (atomically) instead of stdout")
    inv.set_defaults(func=_inventory)


def _inventory(args: argparse.Namespace) -> int:
    cluster = load_spec(args.stack)
    outputs = load_outputs(args.outputs)
    inventory = build_inventory(cluster, outputs, source=args.outputs)
    if args.output:
        write_inventory(inventory, Path(args.output))
        hosts = len(inventory["all"]["hosts"])
        print(f"wrote {args.output}: {hosts} host(s)", file=sys.stderr)
    else:
        sys.stdout.write(dump_inventory(inventory))
    return EXIT_OK
