"""`gpucluster lab up|status|ssh|down [--stack STACK_FILE]`: the embedded lab target.

`up` exports the stack outputs like any target; for convenience it then writes the inventory by the
same hand-off as `gpucluster inventory` (gpucluster/inventory.py), where `gpucluster paths` names it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from gpucluster import twin
from gpucluster.errors import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, EXIT_OK, InputError
from gpucluster.inventory import inventory_from_files, write_inventory
from gpucluster.lab import lab
from gpucluster.lab.host import ensure_host, stderr_progress
from gpucluster.lab.ssh import ssh_argv
from gpucluster.lab.state import check_owned, read_state
from gpucluster.paths import StackPaths, stack_paths
from gpucluster.spec import load_spec

DEFAULT_STACK = "Pulumi.lab.yaml"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("lab", help="Debian machines on this host (systemd-nspawn): up, status, ssh, down")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)

    def verb(name: str, help_: str) -> argparse.ArgumentParser:
        node = " gpu-1 -- uptime" if name == "ssh" else ""
        v = verbs.add_parser(name, help=help_,
                             epilog=f"example: sudo .venv/bin/gpucluster lab {name} --stack {DEFAULT_STACK}{node}")
        v.add_argument("--stack", default=DEFAULT_STACK, metavar="STACK_FILE",
                       help=f"the lab's stack file (default {DEFAULT_STACK})")
        return v

    up = verb("up", "bring the lab's nodes up (idempotent); write its stack outputs, then the inventory "
                    "`gpucluster inventory` makes of them")
    up.add_argument("--rebuild-rootfs", action="store_true", help="rebuild the cached Debian base first")
    up.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    up.set_defaults(func=_up)
    st = verb("status", "show the lab's nodes, networks and proxy as found on this host")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.set_defaults(func=_status)
    sh = verb("ssh", "open a shell on a node, or run COMMAND there")
    sh.add_argument("node", metavar="NODE")
    sh.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="command to run")
    sh.set_defaults(func=_ssh)
    dn = verb("down", "remove every node, namespace, bridge, mount, process and file the lab made")
    dn.add_argument("--json", action="store_true", help="print {lab, removed} as JSON on stdout")
    dn.set_defaults(func=_down)


def _up(args: argparse.Namespace) -> int:
    cluster = load_spec(args.stack)
    inputs = twin.inputs(cluster)
    where = stack_paths(cluster)
    stderr_progress(f"up {cluster.summary()}")
    result = lab.up(inputs, rebuild_rootfs=args.rebuild_rootfs, progress=stderr_progress)
    # The hand-off every target takes: the stack file and the outputs file the lab just wrote.
    write_inventory(inventory_from_files(args.stack, result.outputs_file), where.inventory_file)
    for failed in result.failed:
        print(f"error: lab: node {failed.name} did not come up: {failed.system_state}", file=sys.stderr)
        for line in failed.boot_log_tail.splitlines():
            print(f"  {failed.name} | {line}", file=sys.stderr)
    if args.json:
        print(json.dumps({**result.as_dict(), "inventory_file": str(where.inventory_file)}, indent=2))
    else:
        ok = len(result.nodes) - len(result.failed)
        verdict = "changed" if result.changed else "nothing changed"
        print(f"lab {result.name!r}: {ok}/{len(result.nodes)} node(s) up, {verdict} [{result.seconds:.1f} s]")
        print(f"outputs:   {result.outputs_file}")
        print(f"inventory: {where.inventory_file}")
    return EXIT_CHECK_FAILED if result.failed else EXIT_OK


def _where(stack: str) -> tuple[Path, str, StackPaths]:
    """The lab's state root and name (gpucluster/paths.py); InputError for a stack that is no lab."""
    found = stack_paths(load_spec(stack))
    if found.lab_state_root is None:
        raise InputError(f"gpucluster.target.kind: {found.target!r}; `gpucluster lab` needs kind: lab, or a "
                         "gpucluster:twin block (a platform twin)", source=stack)
    return found.lab_state_root, found.cluster, found


def _status(args: argparse.Namespace) -> int:
    root, name, where = _where(args.stack)
    found = lab.status(root, name)
    if found is None:
        if args.json:
            print(json.dumps({"name": name, "up": False}))
        else:
            print(f"lab {name!r} is not up (no state in {root / name})")
        return EXIT_CHECK_FAILED
    if args.json:
        print(json.dumps({**found, "inventory_file": str(where.inventory_file)}, indent=2))
    else:
        proxy = "running" if found["proxy"]["running"] else "NOT RUNNING"
        print(f"lab {name!r}: state {found['state_dir']}; apt proxy {found['proxy']['url']} {proxy}")
        for n in found["nodes"]:
            failed = f" failed units: {', '.join(n['failed_units'])}" if n["failed_units"] else ""
            print(f"  {n['name']:<16} {n['management_ip']:<15} {n['fabric_ip']:<15} "
                  f"{'up' if n['ssh'] else 'DOWN'} ({n['system_state']}){failed}")
        print(f"inventory: {where.inventory_file}")
    return EXIT_OK if found["healthy"] else EXIT_CHECK_FAILED


def _ssh(args: argparse.Namespace) -> int:
    root, name, _ = _where(args.stack)
    plan = read_state(root / name)
    if plan is None:
        raise InputError(f"lab {name!r} is not up; run `gpucluster lab up --stack {args.stack}`", source="lab")
    node = plan.node(args.node)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    argv = ssh_argv(plan, node, command, tty=not command and sys.stdin.isatty())
    sys.stdout.flush()
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        print(f"error: lab: cannot run ssh: {exc}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _down(args: argparse.Namespace) -> int:
    root, name, _ = _where(args.stack)
    if (root / name).exists() or (root / name).is_symlink():
        check_owned(root / name, name)  # refuse before touching the host at all
    ensure_host(stderr_progress)
    removed = lab.down(root, name, progress=stderr_progress)
    if getattr(args, "json", False):
        print(json.dumps({"lab": name, "folder": str(root / name), "removed": removed}))
    elif not removed:
        print(f"lab {name!r}: nothing to remove")
    return EXIT_OK
