"""`gpucluster converge [--inventory FILE | --stack STACK_FILE] [--playbook FILE] [--check] [-e KEY=VALUE]`."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from gpucluster.converge import (
    DEBUG_NO_LOG_ENV,
    DEFAULT_PLAYBOOK,
    DEFAULT_RUNS_DIR,
    ConvergeOptions,
    converge,
    format_recap,
    parse_extra_vars,
    stack_inventory,
)
from gpucluster.errors import EXIT_CHECK_FAILED

DEFAULT_STACK = "Pulumi.lab.yaml"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "converge",
        epilog="examples:\n  gpucluster converge --inventory inventory.yml\n"
               "  gpucluster converge --stack Pulumi.lab.yaml --limit gpu --tags nccl --check",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        help="run the Ansible roles on the cluster's nodes (playbooks/site.yml through ansible-runner)",
        description="Converge every node. Without --inventory, use the inventory of --stack "
                    f"(default {DEFAULT_STACK}) where `gpucluster paths` names it (`gpucluster lab up` "
                    "or `gpucluster inventory -o` wrote it).",
    )
    p.add_argument("--inventory", "-i", metavar="FILE", help="the inventory `gpucluster inventory -o FILE` wrote")
    p.add_argument("--stack", default=DEFAULT_STACK, metavar="STACK_FILE",
                   help=f"without --inventory: converge this stack's inventory (default {DEFAULT_STACK})")
    p.add_argument("--playbook", default=str(DEFAULT_PLAYBOOK), metavar="FILE",
                   help="playbook to run (default site.yml)")
    p.add_argument("--check", action="store_true", help="dry run: report what would change, change nothing")
    p.add_argument("--limit", "-l", metavar="PATTERN", help="only these hosts or groups")
    p.add_argument("--tags", "-t", action="append", default=[], metavar="TAG",
                   help="only tasks with this tag (repeatable)")
    p.add_argument("--skip-tags", action="append", default=[], metavar="TAG", help="skip tasks with this tag")
    p.add_argument("--heavy", action="store_true",
                   help="install the heavy packages (driver user space, CUDA, NCCL, gpu-burn) even where the "
                        "inventory's capabilities say the nodes have no room for them (the lab)")
    p.add_argument("--extra-vars", "-e", action="append", default=[], metavar="KEY=VALUE",
                   help="a playbook variable, highest precedence (repeatable); VALUE is YAML: "
                        "-e upgrade_rolling_components=[driver]; -e @FILE reads a YAML mapping of them "
                        "(a secret given so stays off the process list); the node contract's overrides "
                        "(monitoring_textfile_dir, nvidia_driver_install_method...) are refused: the suite "
                        "reads them from the inventory, so set them there")
    p.add_argument("--forks", type=int, metavar="N", help="parallel hosts (default from ansible.cfg)")
    p.add_argument("--runs-dir", default=str(DEFAULT_RUNS_DIR), metavar="DIR", help="where run folders go")
    p.add_argument("--debug-no-log", action="store_true", default=os.environ.get(DEBUG_NO_LOG_ENV, "") == "1",
                   help="show what the roles' secret tasks (no_log) report, so a failure among them names its "
                        f"cause; secrets then reach the terminal and the run folder (also {DEBUG_NO_LOG_ENV}=1)")
    p.add_argument("--mitogen", action="store_true",
                   help="run over Mitogen's linear strategy (faster; opt-in, it follows ansible-core's "
                        "internals; also GPUCLUSTER_MITOGEN=1)")
    p.add_argument("--show-skipped", action="store_true",
                   help="print a line per host for each skipped task (default: one line per task naming the hosts)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    p.set_defaults(func=_converge)


def _converge(args: argparse.Namespace) -> int:
    inventory = Path(args.inventory) if args.inventory else stack_inventory(args.stack)
    options = ConvergeOptions(
        inventory=inventory,
        playbook=Path(args.playbook),
        check=args.check,
        limit=args.limit,
        tags=[t for tag in args.tags for t in tag.split(",") if t],
        skip_tags=[t for tag in args.skip_tags for t in tag.split(",") if t],
        heavy=args.heavy,
        forks=args.forks,
        runs_dir=Path(args.runs_dir),
        extra_vars=parse_extra_vars(args.extra_vars),
        debug_no_log=args.debug_no_log,
        mitogen=args.mitogen,
        show_skipped=args.show_skipped,
    )
    result = converge(options, progress_out=sys.stderr)
    if args.json:
        print(json.dumps(result.as_dict(), indent=2))
    else:
        print(format_recap(result))
        print(f"run folder: {result.run_dir} [{result.seconds:.1f} s]")
    code = result.exit_code()
    if result.interrupted:
        print("error: converge: interrupted; ansible-playbook was stopped, the recap above covers the tasks "
              "that finished", file=sys.stderr)
    for host in result.failed_hosts:
        why = result.failures.get(host, "see the run folder's converge.log")
        print(f"error: converge: host {host} failed: {why}", file=sys.stderr)
    if result.run_folder_error:
        print(f"error: converge: {result.run_folder_error}", file=sys.stderr)
    if code == EXIT_CHECK_FAILED and not result.failed_hosts and not result.interrupted:
        print(f"error: converge: ansible-playbook ended {result.status} (rc {result.rc}); "
              f"see {result.run_dir}/converge.log", file=sys.stderr)
    return code
