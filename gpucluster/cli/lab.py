"""`gpucluster lab up|status|ssh|down [--stack STACK_FILE]`: the embedded lab target."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from gpucluster.errors import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, EXIT_OK, InputError
from gpucluster.lab import lab
from gpucluster.lab.host import ensure_host, stderr_progress
from gpucluster.lab.layout import layout_lab
from gpucluster.lab.ssh import ssh_argv
from gpucluster.lab.state import check_owned, read_state
from gpucluster.spec import load_spec

DEFAULT_STACK = "Pulumi.lab.yaml"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("lab", help="Debian machines on this host (systemd-nspawn): up, status, ssh, down")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)

    def verb(name: str, help_: str) -> argparse.ArgumentParser:
        v = verbs.add_parser(name, help=help_)
        v.add_argument("--stack", default=DEFAULT_STACK, metavar="STACK_FILE",
                       help=f"the lab's stack file (default {DEFAULT_STACK})")
        return v

    up = verb("up", "bring the lab's nodes up (idempotent); write outputs.json and inventory.yml")
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
    dn.set_defaults(func=_down)


def _up(args: argparse.Namespace) -> int:
    cluster = load_spec(args.stack)
    inputs = lab.lab_inputs(cluster)
    stderr_progress(f"up {cluster.summary()}")
    result = lab.up(inputs, rebuild_rootfs=args.rebuild_rootfs, progress=stderr_progress)
    for failed in result.failed:
        print(f"error: lab: node {failed.name} did not come up: {failed.system_state}", file=sys.stderr)
        for line in failed.boot_log_tail.splitlines():
            print(f"  {failed.name} | {line}", file=sys.stderr)
    if args.json:
        print(json.dumps(result.as_dict(), indent=2))
    else:
        ok = len(result.nodes) - len(result.failed)
        verdict = "changed" if result.changed else "nothing changed"
        print(f"lab {result.name!r}: {ok}/{len(result.nodes)} node(s) up, {verdict} [{result.seconds:.1f} s]")
        print(f"outputs:   {result.outputs_file}")
        print(f"inventory: {result.inventory_file}")
    return EXIT_CHECK_FAILED if result.failed else EXIT_OK


def _where(stack: str) -> tuple[Path, str]:
    plan = layout_lab(load_spec(stack))
    return Path(plan.state_root), plan.name


def _status(args: argparse.Namespace) -> int:
    root, name = _where(args.stack)
    found = lab.status(root, name)
    if found is None:
        if args.json:
            print(json.dumps({"name": name, "up": False}))
        else:
            print(f"lab {name!r} is not up (no state in {root / name})")
        return EXIT_CHECK_FAILED
    if args.json:
        print(json.dumps(found, indent=2))
    else:
        proxy = "running" if found["proxy"]["running"] else "NOT RUNNING"
        print(f"lab {name!r}: state {found['state_dir']}; apt proxy {found['proxy']['url']} {proxy}")
        for n in found["nodes"]:
            failed = f" failed units: {', '.join(n['failed_units'])}" if n["failed_units"] else ""
            print(f"  {n['name']:<16} {n['management_ip']:<15} {n['fabric_ip']:<15} "
                  f"{'up' if n['ssh'] else 'DOWN'} ({n['system_state']}){failed}")
        print(f"inventory: {found['inventory_file']}")
    return EXIT_OK if found["healthy"] else EXIT_CHECK_FAILED


def _ssh(args: argparse.Namespace) -> int:
    root, name = _where(args.stack)
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
    root, name = _where(args.stack)
    if (root / name).exists() or (root / name).is_symlink():
        check_owned(root / name, name)  # refuse before touching the host at all
    ensure_host(stderr_progress)
    if not lab.down(root, name, progress=stderr_progress):
        print(f"lab {name!r}: nothing to remove")
    return EXIT_OK
