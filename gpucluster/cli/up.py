"""`gpucluster up --stack FILE`: spec, provision, inventory, converge and verify in one command."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gpucluster.cli.spec import stack_args, stack_file
from gpucluster.up import STAGES, run_up


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "up", help="the whole chain for a stack: provision, inventory, converge, verify (resumable)",
        description="Run every stage for one stack file, each through its own gpucluster command: spec "
                    "validate, provision (the lab directly; other targets through Pulumi's Automation API, "
                    "which needs the Pulumi CLI), inventory, converge, verify. A stage that finished with the "
                    "same input is skipped, so a second `up` resumes at the first stage not done. Progress "
                    "goes to stderr; the summary (or its JSON) to stdout. Exit 0 when every stage passed, "
                    "1 when converge or verify failed, 2 on bad input or a missing tool, 130 on Ctrl-C.",
        epilog="examples:\n  gpucluster up --stack Pulumi.lab.yaml\n"
               "  gpucluster up --stack Pulumi.aws-h100.yaml --json > up.json\n"
               "  gpucluster up --stack Pulumi.aws-h100.yaml --from converge",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    stack_args(p)
    p.add_argument("--from", dest="start", choices=STAGES, metavar="STAGE",
                   help=f"redo this stage and every one after it ({', '.join(STAGES)})")
    p.add_argument("--no-burn", action="store_true", help="verify without the GPU burn")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    p.set_defaults(func=_up)


def _up(args: argparse.Namespace) -> int:
    summary = run_up(Path(stack_file(args)), start=args.start, out=sys.stderr,
                     verify_args=("--no-burn",) if args.no_burn else ())
    if args.json:
        print(json.dumps(summary.as_dict(), indent=2))
    else:
        for stage in summary.stages:
            extra = f" ({stage.seconds:.0f} s)" if stage.status in ("done", "failed") else ""
            detail = f": {stage.detail}" if stage.detail and stage.status != "skipped" else ""
            print(f"{stage.name:<10} {stage.status}{extra}{detail}")
        print(f"up {summary.stack}: " + ("ok" if summary.exit_code == 0 else f"exit {summary.exit_code}"))
    return summary.exit_code
