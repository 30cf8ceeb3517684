"""`gpucluster twin check --stack FILE`: a platform twin from nothing to its verdicts, and its fault."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gpucluster.errors import EXIT_CHECK_FAILED, EXIT_OK
from gpucluster.twin import run_check


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("twin", help="platform twins: labs shaped like a real platform (check)")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    check = verbs.add_parser(
        "check", help="up, reboot, converge again (nothing may change), verify, inject the fault, verify again",
        description="Take a twin stack (a real target's stack file with a gpucluster:twin block) from nothing "
                    "to its verdicts, each step through its own gpucluster command: lab up, converge, every "
                    "node rebooted, converge again (nothing may change), verify (no check may fail), the twin "
                    "file's fault injected, verify (exactly the fault's checks must fail, on that node), then "
                    "lab down. Progress goes to stderr, the summary to stdout. Exit 0 when every step held, 1 "
                    "when one did not, 2 on bad input.",
        epilog="example: gpucluster twin check --stack Pulumi.twin-dgx-h100-ib.yaml --json")
    check.add_argument("--stack", required=True, metavar="FILE", help="the twin's stack file")
    check.add_argument("--keep", action="store_true", help="leave the twin's lab up at the end")
    check.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    check.set_defaults(func=_check)


def _check(args: argparse.Namespace) -> int:
    report = run_check(Path(args.stack), sys.stderr, keep=args.keep)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        for step in report.steps:
            print(f"{'ok  ' if step.ok else 'FAIL'} {step.name} ({step.seconds:.0f} s): {step.detail}")
        print(f"twin {report.twin} ({args.stack}): " + ("ok" if report.ok else "FAILED"))
    return EXIT_OK if report.ok else EXIT_CHECK_FAILED
