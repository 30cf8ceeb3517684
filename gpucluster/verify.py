"""`gpucluster verify`: the conformance suite against a cluster, hosts in parallel, one verdict per node.

Runs pytest on ``tests/conformance`` (pytest-xdist, one worker per host up to ``workers``, a
host's checks kept on one worker so its SSH connection is reused), which writes the run
folder; this module reads the folder's JSON back for the verdict table and the exit code,
then (unless ``publish`` is off) copies each node's Prometheus textfile onto the node for
node_exporter's textfile collector and records how that went in the run folder's reports.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from gpucluster.conformance import publish
from gpucluster.conformance.nodes import ClusterInventory, load_inventory
from gpucluster.conformance.remote import SshRemote, write_ssh_config
from gpucluster.conformance.reports import RESULTS_JSON, Report, publish_problems, verdict_table, write_all
from gpucluster.errors import EXIT_BAD_INPUT, InputError

SUITE = Path(__file__).resolve().parent.parent / "tests" / "conformance"


@dataclass(frozen=True)
class VerifyOptions:
    inventory: Path
    run_dir: Path
    burn: bool = True
    burn_seconds: int = 60
    limit: tuple[str, ...] = ()
    workers: int = 8
    quiet: bool = False
    publish: bool = True


def inventory_for_stack(stack: str | Path) -> Path:
    """The inventory the lab (or `gpucluster inventory`) wrote for a stack file."""
    from gpucluster.spec import load_spec
    from gpucluster.spec.models import LabTarget

    cluster = load_spec(stack)
    target = cluster.spec.target
    if not isinstance(target, LabTarget):
        raise InputError(f"target {target.kind!r}: --stack finds only lab inventories; pass --inventory FILE "
                         "(written by `gpucluster inventory`)", source=str(stack))
    path = Path(target.state_dir) / cluster.name / "inventory.yml"
    if not path.exists():
        raise InputError(f"no lab inventory at {path}: is the lab up? (`gpucluster lab up --stack {stack}`)",
                         source=str(stack))
    return path


def default_run_dir() -> Path:
    return Path("runs") / f"verify-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}"


def bytecode_env(env: dict[str, str]) -> dict[str, str]:
    """Where bytecode writing is off (PYTHONDONTWRITEBYTECODE), compiled files for the suite's
    processes go to a cache folder outside the source tree instead.

    The suite runs a controller and one pytest worker per host, each importing the package and
    the checks: compiled anew in every process that costs about a second of CPU each, the better
    part of the suite's start-up on a small controller. The setting's intent, no ``__pycache__``
    in the checkout, is kept; a PYTHONPYCACHEPREFIX of the caller's own is left as it is.
    """
    if not env.get("PYTHONDONTWRITEBYTECODE"):
        return {}
    cache = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpucluster" / "pycache"
    return {"PYTHONDONTWRITEBYTECODE": "", "PYTHONPYCACHEPREFIX": env.get("PYTHONPYCACHEPREFIX") or str(cache)}


def pytest_argv(opts: VerifyOptions, inv: ClusterInventory) -> list[str]:
    hosts = len(inv.nodes) if not opts.limit else len(opts.limit)
    # Hypothesis' pytest plugin (installed for the unit tests) costs a second or more of imports
    # in the controller and in every worker; the suite has no use for it.
    argv = [sys.executable, "-m", "pytest", str(SUITE), "--inventory", str(opts.inventory),
            "--run-dir", str(opts.run_dir), "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-q", "--no-header",
            "--rootdir", str(SUITE.parent.parent), "--burn-seconds", str(opts.burn_seconds)]
    workers = max(1, min(opts.workers, hosts))
    if workers > 1:
        argv += ["-n", str(workers), "--dist", "loadgroup"]
    if not opts.burn:
        argv.append("--no-burn")
    if opts.limit:
        argv += ["--limit", ",".join(opts.limit)]
    return argv


def run(opts: VerifyOptions) -> Report:
    """Run the suite; raise InputError when it could not run (bad inventory, no results)."""
    if not SUITE.is_dir():
        raise InputError(f"the conformance suite is not at {SUITE} (run from a source checkout)")
    inv = load_inventory(opts.inventory)
    if opts.limit:
        inv = inv.limited(list(opts.limit))
    opts.run_dir.mkdir(parents=True, exist_ok=True)
    results = opts.run_dir / RESULTS_JSON
    if results.exists():
        results.unlink()
    log_path = opts.run_dir / "pytest.log"
    env = dict(os.environ, GPUCLUSTER_RUN_DIR=str(opts.run_dir.resolve()), PYTHONUNBUFFERED="1")
    env.update(bytecode_env(env))
    started = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(pytest_argv(opts, inv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env, cwd=str(SUITE.parent.parent))
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            if not opts.quiet:
                sys.stderr.write(line)
        rc = proc.wait()
    if rc in (3, 4) or not results.exists():
        tail = log_path.read_text(encoding="utf-8").strip().splitlines()[-1:] or ["(no output)"]
        raise InputError(f"the conformance suite did not run (pytest exit {rc}): {tail[0][:300]}; "
                         f"log: {log_path}")
    report = Report.from_json(json.loads(results.read_text(encoding="utf-8")))
    if opts.publish:
        publish_textfiles(report, inv, opts)
    report.meta["verify_wall_s"] = round(time.perf_counter() - started, 2)
    return report


def publish_textfiles(report: Report, inv: ClusterInventory, opts: VerifyOptions) -> None:
    """Each node's textfile onto the node; the outcome goes into the run folder's reports."""
    t0 = time.perf_counter()
    # The suite's control masters (ControlPersist) are still up: no new handshake per node.
    ssh_dir = opts.run_dir.resolve() / "ssh"
    ssh_config = write_ssh_config(ssh_dir / "publish" / "ssh_config", list(inv.nodes), shared=ssh_dir)
    done = publish.publish(inv, report.nodes, opts.run_dir, lambda name: SshRemote(name, ssh_config),
                           workers=opts.workers)
    report.meta["textfile_publish"] = {r.node: r.to_json() for r in done}
    report.meta["textfile_publish_s"] = round(time.perf_counter() - t0, 2)
    write_all(report, opts.run_dir)


def table(report: Report) -> str:
    rows = verdict_table(report)
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    out = []
    for r in rows:
        out.append("  ".join(r[i].ljust(widths[i]) for i in range(3)) + "  " + r[3])
    for node, message in publish_problems(report):
        out.append(f"textfile not published on {node}: {message} (the verdict stands)")
    return "\n".join(out)


__all__ = ["EXIT_BAD_INPUT", "VerifyOptions", "default_run_dir", "inventory_for_stack", "run", "table"]
