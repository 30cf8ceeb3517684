"""`gpucluster inventory --outputs OUTPUTS.json --stack STACK_FILE [-o inventory.yml]`.

The one hand-off from stack outputs to the Ansible inventory, the same for every target (the lab
included). `gpucluster paths --stack STACK_FILE` names where a stack's outputs and inventory live.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gpucluster.errors import EXIT_OK, InputError
from gpucluster.inventory import dump_inventory, inventory_from_files, write_inventory


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    inv = sub.add_parser(
        "inventory",
        help="turn stack outputs (`pulumi stack output --json`) into the Ansible inventory",
    )
    inv.add_argument("--outputs", required=True, metavar="OUTPUTS.json", help="stack outputs as JSON")
    inv.add_argument("--stack", required=True, metavar="STACK_FILE", help="the Pulumi.<stack>.yaml they came from")
    inv.add_argument("-o", "--output", metavar="FILE", help="write here (atomically) instead of stdout")
    inv.add_argument("--json", action="store_true",
                     help="with -o: print {inventory, hosts, groups} as JSON on stdout")
    inv.epilog = ("example: gpucluster inventory --stack Pulumi.aws-h100.yaml --outputs outputs.json "
                  "-o inventory.yml --json")
    inv.set_defaults(func=_inventory)


def _inventory(args: argparse.Namespace) -> int:
    if args.json and not args.output:
        raise InputError("--json reports on the file -o writes (the inventory itself is YAML): add -o FILE")
    inventory = inventory_from_files(args.stack, args.outputs)
    if args.output:
        write_inventory(inventory, Path(args.output))
        hosts = sorted(inventory["all"]["hosts"])
        if args.json:
            groups = {g: sorted((body or {}).get("hosts") or {})
                      for g, body in (inventory["all"].get("children") or {}).items()}
            print(json.dumps({"inventory": args.output, "hosts": hosts, "groups": groups}, indent=2))
        print(f"wrote {args.output}: {len(hosts)} host(s)", file=sys.stderr)
    else:
        sys.stdout.write(dump_inventory(inventory))
    return EXIT_OK
