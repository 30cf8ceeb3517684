"""`gpucluster verify`: the conformance suite against a cluster, hosts in parallel, one verdict per node.

Runs pytest on ``tests/conformance`` (pytest-xdist, one worker per host up to ``workers``, a
host's checks kept on one worker so its SSH connection is reused), which writes the run
folder; this module reads the folder's JSON back for the verdict table and the exit code,
then (unless ``publish`` is off) copies each node's Prometheus textfile onto the node for
node_exporter's textfile collector and records how that went in the run folder's reports.

A run holds the cluster's lock (one writer per cluster, converge included), works under umask
077 in a run folder of its own, and has an id the suite tags everything it starts on a node
with. Ctrl-C (or SIGTERM) is passed to the suite, which stops, kills what it started on the
nodes and writes the report of what finished; should the suite not get that far, this module
does the killing on every node itself. A full disk ends in one line and, where the suite got
that far, the verdicts; never a traceback.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from gpucluster import hostkeys, runs
from gpucluster.conformance import publish
from gpucluster.conformance.nodes import ClusterInventory, load_inventory
from gpucluster.conformance.remote import RUN_ID_ENV, SshRemote, cleanup_nodes, write_ssh_config
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
    """A new run folder under ``runs/``, this run's alone (see :func:`gpucluster.runs.new_run_dir`)."""
    return runs.new_run_dir(Path("runs"), "verify")


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


# After Ctrl-C the suite gets this long to stop and write its report before it is killed.
STOP_GRACE_S = 45.0


class _Stopper:
    """Signals to the suite's process group: the first SIGINT lets it stop and report, a second
    (or the grace period running out) terminates it, a third kills it."""

    def __init__(self) -> None:
        self.signals = runs.Interrupts()
        self.signals.on_signal(self._on_signal)
        self.proc: subprocess.Popen[str] | None = None
        self.done = threading.Event()

    def _send(self, sig: int) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)

    def _escalate(self) -> None:
        if not self.done.wait(STOP_GRACE_S):
            self._send(signal.SIGTERM)
            if not self.done.wait(10):
                self._send(signal.SIGKILL)

    def _on_signal(self, count: int) -> None:
        if count == 1:
            sys.stderr.write("interrupted: stopping the checks and what they started on the nodes "
                             "(Ctrl-C again to stop at once)\n")
            self._send(signal.SIGINT)
            threading.Thread(target=self._escalate, daemon=True).start()
        else:
            self._send(signal.SIGTERM if count == 2 else signal.SIGKILL)

    def started(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        if self.signals.interrupted:  # a signal before the suite existed
            self._send(signal.SIGINT)
            threading.Thread(target=self._escalate, daemon=True).start()


WRITE_ERROR = "cannot write the run folder"


def _error_line(tail: collections.deque[str], rc: int, write_error: str | None) -> str:
    """The suite's own one-line reason (a run folder it could not write first), else its last line."""
    if write_error:
        return write_error[write_error.index(WRITE_ERROR):].strip()[:400]
    for line in reversed(tail):
        text = line.strip().removeprefix("ERROR: ").strip()
        if text.startswith("error: "):
            return text.removeprefix("error: ")[:400]
    last = next((x.strip() for x in reversed(tail) if x.strip()), "(no output)")
    return f"the conformance suite did not run (pytest exit {rc}): {last[:300]}"


def run(opts: VerifyOptions) -> Report:
    """Run the suite; raise InputError when it could not run (bad inventory, no results)."""
    if not SUITE.is_dir():
        raise InputError(f"the conformance suite is not at {SUITE} (run from a source checkout)")
    inv = load_inventory(opts.inventory)
    if opts.limit:
        inv = inv.limited(list(opts.limit))
    with runs.cluster_lock(opts.inventory, "gpucluster verify"), runs.private_umask():
        return _run_locked(opts, inv)


def _run_locked(opts: VerifyOptions, inv: ClusterInventory) -> Report:
    try:
        runs.ensure_private_dir(opts.run_dir)
        (opts.run_dir / RESULTS_JSON).unlink(missing_ok=True)
    except OSError as exc:
        raise InputError(runs.write_error_line(opts.run_dir, exc)) from None
    run_id = runs.new_run_id()
    try:
        return _run_suite(opts, inv, run_id)
    finally:
        # The run's own SSH key outlives no run (the suite removes it too, when it gets that far).
        shutil.rmtree(opts.run_dir / "ssh" / "run-key", ignore_errors=True)


def _run_suite(opts: VerifyOptions, inv: ClusterInventory, run_id: str) -> Report:
    results = opts.run_dir / RESULTS_JSON
    env = dict(os.environ, GPUCLUSTER_RUN_DIR=str(opts.run_dir.resolve()), PYTHONUNBUFFERED="1")
    env[RUN_ID_ENV] = run_id
    env.update(bytecode_env(env))
    started = time.perf_counter()
    tail: collections.deque[str] = collections.deque(maxlen=40)
    stopper = _Stopper()
    write_error: str | None = None
    with runs.RunFile(opts.run_dir / "pytest.log") as log, stopper.signals:
        # Its own process group: Ctrl-C reaches the suite through us, once, and we can stop all of it.
        proc = subprocess.Popen(pytest_argv(opts, inv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env, cwd=str(SUITE.parent.parent), process_group=0)
        stopper.started(proc)
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                tail.append(line)
                if WRITE_ERROR in line:
                    write_error = line
                if not opts.quiet:
                    sys.stderr.write(line)
            rc = proc.wait()
        finally:
            stopper.done.set()
    interrupted = stopper.signals.interrupted or rc == 2
    report = None if rc in (3, 4) and not interrupted else _read_report(results)
    if report is None:
        if interrupted:
            _cleanup_after_interrupt(inv, opts, run_id, None)
            sys.stderr.write("interrupted before the suite wrote any report\n")
            return Report(meta={"interrupted": True, "cluster": inv.cluster_name, "inventory": str(opts.inventory)},
                          nodes=[n.name for n in inv.nodes], results=[])
        raise InputError(_error_line(tail, rc, write_error) + f"; log: {log.path}")
    if interrupted:
        report.meta["interrupted"] = True
        _cleanup_after_interrupt(inv, opts, run_id, report)
    elif opts.publish:
        publish_textfiles(report, inv, opts)
    report.meta["verify_wall_s"] = round(time.perf_counter() - started, 2)
    if log.error is not None and "run_folder_error" not in report.meta:
        report.meta["run_folder_error"] = runs.write_error_line(opts.run_dir, log.error, "pytest.log")
    return report


def _read_report(results: Path) -> Report | None:
    try:
        return Report.from_json(json.loads(results.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _cleanup_after_interrupt(inv: ClusterInventory, opts: VerifyOptions, run_id: str, report: Report | None) -> None:
    """Kill what the run started on the nodes, unless the suite did (its report says so)."""
    if report is not None and report.meta.get("interrupt_cleanup"):
        return
    down = report.unreachable if report is not None else {}
    ssh_dir = opts.run_dir.resolve() / "ssh"
    try:
        cfg = write_ssh_config(ssh_dir / "cleanup" / "ssh_config", list(inv.nodes), shared=ssh_dir,
                               host_keys=hostkeys.policy_for(inv.target, inv.cluster_name))
    except (OSError, InputError) as exc:
        why = runs.write_error_line(opts.run_dir, exc) if isinstance(exc, OSError) else str(exc)
        sys.stderr.write(f"error: cannot clean up the nodes: {why}\n")
        return
    done = cleanup_nodes([SshRemote(n.name, cfg) for n in inv.nodes if n.name not in down], run_id)
    for node, what in sorted(done.items()):
        sys.stderr.write(f"{node}: {what}\n")
    if report is not None:
        report.meta["interrupt_cleanup"] = done
        _write_reports(report, opts)


def _write_reports(report: Report, opts: VerifyOptions) -> None:
    try:
        write_all(report, opts.run_dir)
    except OSError as exc:
        report.meta["run_folder_error"] = runs.write_error_line(opts.run_dir, exc)


def publish_textfiles(report: Report, inv: ClusterInventory, opts: VerifyOptions) -> None:
    """Each node's textfile onto the node; the outcome goes into the run folder's reports."""
    t0 = time.perf_counter()
    # The suite's control masters (ControlPersist) are still up: no new handshake per node.
    ssh_dir = opts.run_dir.resolve() / "ssh"
    down = report.unreachable
    try:
        ssh_config = write_ssh_config(ssh_dir / "publish" / "ssh_config", list(inv.nodes), shared=ssh_dir,
                                      host_keys=hostkeys.policy_for(inv.target, inv.cluster_name))
    except OSError as exc:
        report.meta["run_folder_error"] = runs.write_error_line(opts.run_dir, exc)
        return
    except InputError as exc:
        report.meta["textfile_publish"] = {n: {"ok": False, "path": "", "message": str(exc)} for n in report.nodes}
        _write_reports(report, opts)
        return
    done = publish.publish(inv, [n for n in report.nodes if n not in down], opts.run_dir,
                           lambda name: SshRemote(name, ssh_config), workers=opts.workers)
    outcome = {r.node: r.to_json() for r in done}
    for node in report.nodes:
        if node in down:
            outcome[node] = {"ok": False, "path": "", "message": f"node unreachable: {down[node]}"}
    report.meta["textfile_publish"] = outcome
    report.meta["textfile_publish_s"] = round(time.perf_counter() - t0, 2)
    _write_reports(report, opts)


def table(report: Report) -> str:
    rows = verdict_table(report)
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    out = []
    for r in rows:
        out.append("  ".join(r[i].ljust(widths[i]) for i in range(3)) + "  " + r[3])
    for node, message in publish_problems(report):
        if node not in report.unreachable:
            out.append(f"textfile not published on {node}: {message} (the verdict stands)")
    return "\n".join(out)


__all__ = ["EXIT_BAD_INPUT", "VerifyOptions", "default_run_dir", "inventory_for_stack", "run", "table"]
