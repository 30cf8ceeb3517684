"""`gpucluster verify`: run the conformance suite and print each node's verdict.

Exit 0 when every node passes, 1 when any fails (an unreachable node included), 2 on bad input
(inventory, stack, hosts), on another run holding the cluster, or when the run folder could not
be written (a full disk); 130 when interrupted (the report holds what finished).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from gpucluster import verify
from gpucluster.conformance import checks as registry
from gpucluster.conformance import fleet
from gpucluster.errors import InputError
from gpucluster.spec.facts import DCGM_DIAG_LEVEL_DEFAULT, DCGM_DIAG_LEVELS, FLEET_MARGIN_DEFAULT


def register(sub: Any) -> None:
    p = sub.add_parser("verify", help="run the conformance suite: a verdict per node",
                       description=__doc__.splitlines()[0] if __doc__ else None)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--inventory", metavar="FILE", help="inventory written by `gpucluster inventory` or the lab")
    src.add_argument("--stack", metavar="FILE",
                     help="a stack file: the inventory `gpucluster inventory` or `lab up` wrote for it")
    p.add_argument("--runs-dir", metavar="DIR",
                   help="where run folders go, each <UTC time>-<6 hex>-verify (default runs/, as converge)")
    p.add_argument("--run-dir", metavar="DIR", help="this exact run folder instead of a new one under --runs-dir")
    p.add_argument("--no-burn", action="store_true", help="skip the GPU burn")
    p.add_argument("--burn-seconds", type=int, default=60, metavar="N", help="burn time per precision (default 60)")
    p.add_argument("--limit", "-l", metavar="PATTERN",
                   help="only these hosts or groups, comma-separated (as converge's --limit): gpu-1,storage")
    p.add_argument("--workers", type=int, default=8, metavar="N", help="hosts checked at once (default 8)")
    p.add_argument("--no-publish", action="store_true",
                   help="do not copy each node's Prometheus textfile onto the node (node_exporter's textfile "
                        "collector folder); the run folder has them either way")
    p.add_argument("--checks", "-k", metavar="IDS",
                   help="only these checks: comma-separated IDs or patterns, e.g. 'GC-NET-*,GC-GPU-001'")
    p.add_argument("--rerun-failed", action="store_true",
                   help="run again only the checks that failed in the newest run under runs/, on the nodes "
                        "they failed on")
    p.add_argument("--kubeconfig", metavar="FILE", default=os.environ.get("GPUCLUSTER_KUBECONFIG"),
                   help="kubeconfig for the Kubernetes checks (default $GPUCLUSTER_KUBECONFIG); without one "
                        "they are skipped with that reason")
    p.add_argument("--fleet-margin", type=float, metavar="FRACTION",
                   help="a node more than this fraction below the fleet median of a figure (burn TFLOP/s, "
                        "all-reduce and RDMA bandwidth) fails, with 3 nodes or more (default: the inventory's "
                        f"gpucluster_conformance.fleet_margin, else {FLEET_MARGIN_DEFAULT:.2f})")
    p.add_argument("--dcgm-level", type=int, choices=DCGM_DIAG_LEVELS, metavar="N",
                   help="dcgmi diag run level for GC-DCGM-001: 3 or 4 for a burn-in (default: the inventory's "
                        f"gpucluster_conformance.dcgm_diag_level, from the spec; {DCGM_DIAG_LEVEL_DEFAULT} "
                        "for acceptance)")
    p.add_argument("--fail-on-skipped-cluster", action="store_true",
                   help="exit 1 when every cluster-level check (Kubernetes) was skipped, for CI that expects the "
                        "cluster's Kubernetes; the (cluster) row reads SKIPPED either way, never PASS")
    p.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    p.epilog = ("examples:\n  gpucluster verify --inventory inventory.yml\n"
                "  gpucluster verify --stack Pulumi.lab.yaml --checks 'GC-NET-*' --no-burn\n"
                "  gpucluster verify --inventory inventory.yml --rerun-failed")
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.burn_seconds < 1 or args.workers < 1:
        raise InputError("--burn-seconds and --workers must be at least 1")
    if args.fleet_margin is not None:
        try:
            fleet.check_margin(args.fleet_margin, "--fleet-margin")
        except ValueError as exc:
            raise InputError(str(exc)) from None
    inventory = Path(args.inventory) if args.inventory else verify.inventory_for_stack(args.stack)
    checks = tuple(c.strip() for c in (args.checks or "").split(",") if c.strip())
    limit = tuple(x for x in (args.limit or "").split(",") if x)
    if args.rerun_failed:
        from gpucluster import paths

        checks, failed_nodes = verify.last_failures(paths.RUNS_DIR)
        limit = limit or failed_nodes
    if checks:
        # Before the lock, the run folder or any SSH: a pattern that names no check runs nothing.
        try:
            registry.select(checks)
        except ValueError as exc:
            raise InputError(str(exc)) from None
    kubeconfig = Path(args.kubeconfig) if args.kubeconfig else None
    if kubeconfig is not None and not kubeconfig.is_file():
        raise InputError(f"--kubeconfig {kubeconfig}: no such file")
    run_dir = Path(args.run_dir) if args.run_dir else verify.default_run_dir(
        Path(args.runs_dir) if args.runs_dir else None)
    made = None if args.run_dir else run_dir
    opts = verify.VerifyOptions(
        inventory=inventory,
        run_dir=run_dir,
        burn=not args.no_burn,
        burn_seconds=args.burn_seconds,
        limit=limit,
        checks=checks,
        kubeconfig=kubeconfig,
        fleet_margin=args.fleet_margin,
        dcgm_level=args.dcgm_level,
        fail_on_skipped_cluster=args.fail_on_skipped_cluster,
        workers=args.workers,
        quiet=args.json,
        publish=not args.no_publish,
    )
    try:
        report = verify.run(opts)
    except InputError:
        if made is not None:
            with contextlib.suppress(OSError):
                made.rmdir()  # the folder of a run that never started (rmdir leaves a non-empty one be)
        raise
    interrupted = bool(report.meta.get("interrupted"))
    if args.json:
        out = report.to_json()
        out["run_dir"] = str(opts.run_dir)
        print(json.dumps({k: out[k] for k in ("exit_code", "findings", "verdicts", "meta", "run_dir")}, indent=2))
    elif report.results or not interrupted:
        print(verify.table(report))
        for err in report.suite_errors:
            print(f"SUITE ERROR (these checks ran on no node): {err}")
        print(f"run folder: {opts.run_dir}  ({report.meta.get('verify_wall_s')} s)")
    if interrupted:
        print("error: verify: interrupted; the report covers the checks that finished", file=sys.stderr)
    problem = report.meta.get("run_folder_error")
    if problem:
        print(f"error: verify: {problem}", file=sys.stderr)
    return report.exit_code
