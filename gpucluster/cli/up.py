"""`gpucluster up --stack FILE`: spec, provision, inventory, converge and verify in one command."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from gpucluster.cli.spec import stack_args, stack_file
from gpucluster.errors import EXIT_BAD_INPUT, InputError
from gpucluster.paths import RUNS_DIR
from gpucluster.spec.facts import DCGM_DIAG_LEVELS, FLEET_MARGIN_DEFAULT
from gpucluster.up import KUBERNETES, STAGES, UpSummary, VerifyPassThrough, run_up


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "up", help="the whole chain for a stack: provision, inventory, converge, verify (resumable)",
        description="Run every stage for one stack file, each through its own gpucluster command: spec "
                    "validate, provision (the lab directly; other targets through Pulumi's Automation API, "
                    "which needs the Pulumi CLI: a preview, the cluster policy over what it reports, then the "
                    "update), inventory, converge, verify. A stage that finished with the same input is skipped, "
                    "so a second `up` resumes at the first stage not done. A cloud target needs --yes when not "
                    "on a terminal (on one, up asks); the lab never does. Progress goes to stderr; the summary "
                    "(or exactly one JSON document with --json, whatever happens) to stdout. Exit 0 when every "
                    "stage passed, 1 when the policy, converge or verify failed, 2 on bad input or a missing "
                    "tool, 130 on Ctrl-C.",
        epilog="examples:\n  gpucluster up --stack Pulumi.lab.yaml\n"
               "  gpucluster up --stack Pulumi.aws-h100.yaml --fresh --yes --json > up.json\n"
               "  gpucluster up --stack Pulumi.aws-h100.yaml --from converge --checks 'GC-NET-*'",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    stack_args(p)
    p.add_argument("--from", dest="start", choices=STAGES, metavar="STAGE",
                   help=f"redo this stage and every one after it ({', '.join(STAGES)})")
    p.add_argument("--fresh", action="store_true",
                   help="rebuild from nothing: destroy what an earlier up made (as `gpucluster down`), forget "
                        "up's record, then run every stage")
    p.add_argument("--yes", "-y", action="store_true",
                   help="apply (and, with --fresh, destroy) a cloud stack without asking; required when not on "
                        "a terminal")
    p.add_argument("--json", action="store_true",
                   help="print the summary as one JSON document on stdout: every stage's exit code, run folder "
                        "and seconds, each node's verdict, the findings and the report files")
    p.add_argument("--runs-dir", type=Path, metavar="DIR",
                   help="where converge's and verify's run folders go (default runs/)")
    v = p.add_argument_group("verify's options (passed on to `gpucluster verify`)")
    v.add_argument("--verify-run-dir", type=Path, metavar="DIR",
                   help="verify's run folder: this exact folder instead of a new one under --runs-dir (a fixed "
                        "path for CI to publish DIR/junit.xml and DIR/summary.html)")
    v.add_argument("--checks", "-k", metavar="IDS", help="only these checks: 'GC-NET-*,GC-GPU-001'")
    v.add_argument("--no-burn", action="store_true", help="skip the GPU burn")
    v.add_argument("--burn-seconds", type=int, metavar="N", help="burn time per precision (verify's default 60)")
    v.add_argument("--workers", type=int, metavar="N", help="hosts checked at once (verify's default 8)")
    v.add_argument("--no-publish", action="store_true", help="do not copy the Prometheus textfiles onto the nodes")
    v.add_argument("--kubeconfig", type=Path, metavar="FILE", help="kubeconfig for the Kubernetes checks")
    v.add_argument("--fleet-margin", type=float, metavar="FRACTION",
                   help=f"fleet comparison margin (e.g. {FLEET_MARGIN_DEFAULT:.2f})")
    v.add_argument("--dcgm-level", type=int, choices=DCGM_DIAG_LEVELS, metavar="N", help="dcgmi diag run level")
    v.add_argument("--fail-on-skipped-cluster", action="store_true",
                   help="fail verify when every cluster-level check (Kubernetes) was skipped")
    p.set_defaults(func=_up)


def ask(question: str) -> bool:
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    try:
        return input().strip().lower() in ("y", "yes")
    except EOFError:
        return False


@contextmanager
def _sigterm_as_ctrl_c() -> Iterator[None]:
    """A CI system cancels a job with SIGTERM: treated as Ctrl-C, so the summary is still printed."""
    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _summary(args: argparse.Namespace) -> UpSummary:
    try:
        stack = stack_file(args)
    except InputError as exc:
        return UpSummary(stack="", target="", state_file="", exit_code=EXIT_BAD_INPUT, errors=exc.lines())
    passed = VerifyPassThrough(checks=args.checks, burn=not args.no_burn, burn_seconds=args.burn_seconds,
                               workers=args.workers, publish=not args.no_publish, kubeconfig=args.kubeconfig,
                               fleet_margin=args.fleet_margin, dcgm_level=args.dcgm_level,
                               fail_on_skipped_cluster=args.fail_on_skipped_cluster)
    problems = passed.problems()
    if problems:
        return UpSummary(stack=stack, target="", state_file="", exit_code=EXIT_BAD_INPUT,
                         errors=InputError(problems).lines())
    confirm = ask if sys.stdin.isatty() else None
    with _sigterm_as_ctrl_c():
        return run_up(Path(stack), start=args.start, out=sys.stderr, verify_args=passed.argv(), yes=args.yes,
                      confirm=confirm, fresh=args.fresh, runs_dir=args.runs_dir or RUNS_DIR,
                      verify_run_dir=args.verify_run_dir)


def _up(args: argparse.Namespace) -> int:
    summary = _summary(args)
    for line in summary.errors:
        print(line, file=sys.stderr)
    if args.json:
        print(json.dumps(summary.as_dict(), indent=2))
        return summary.exit_code
    for stage in summary.stages:
        extra = f" ({stage.seconds:.0f} s)" if stage.status in ("done", "failed", "interrupted") else ""
        # A stage skipped as done before says no more; Kubernetes skipped says why.
        detail = (f": {stage.detail}" if stage.detail and (stage.status != "skipped" or stage.name == KUBERNETES)
                  else "")
        where = f" [{stage.run_dir}]" if stage.run_dir else ""
        print(f"{stage.name:<10} {stage.status}{extra}{where}{detail}")
    for v in summary.verdicts:
        failed = f" ({', '.join(v['failed'])})" if v.get("failed") else ""
        print(f"  {v['node']:<16} {str(v['verdict']).upper()}{failed}")
    for kind, path in summary.reports.items():
        print(f"  {kind + ':':<9} {path}")
    print(f"up {summary.stack}: " + ("ok" if summary.exit_code == 0 else f"exit {summary.exit_code}"))
    return summary.exit_code
