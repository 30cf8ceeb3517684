"""`gpucluster verify`: the conformance suite against a cluster, hosts in parallel, one verdict per node.

Runs pytest on the conformance suite, the package :mod:`gpucluster.suite` (``tests/conformance``
in a checkout, shipped inside the wheel), found through importlib.resources, so an installed
gpucluster runs it from any folder (pytest-xdist, one worker per host up to ``workers``, a
host's checks kept on one worker so its SSH connection is reused). The suite writes the run
folder, pytest's own JUnit XML included; this module reads the folder's JSON back for the
verdict table and the exit code,
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
import importlib.resources
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from gpucluster import hostkeys, runs, sockets
from gpucluster.conformance import checks, fleet, progress, publish
from gpucluster.conformance.nodes import ClusterInventory, load_inventory
from gpucluster.conformance.remote import (
    RUN_ID_ENV,
    SshRemote,
    cleanup_nodes,
    delete_local_keys,
    node_done,
    write_ssh_config,
)
from gpucluster.conformance.report_data import Report
from gpucluster.conformance.reports import JUNIT_XML, RESULTS_JSON, console_lines, write_all
from gpucluster.conformance.verdict import CLUSTER
from gpucluster.errors import EXIT_BAD_INPUT, InputError

SUITE_PACKAGE = "gpucluster.suite"


def suite_dir() -> Path:
    """The conformance suite's folder: the installed package's, or the checkout's ``tests/conformance``
    under an editable install. InputError when it is missing or not a plain folder pytest can run."""
    try:
        found = importlib.resources.files(SUITE_PACKAGE)
    except ModuleNotFoundError:
        raise InputError(f"the conformance suite ({SUITE_PACKAGE}) is not installed: reinstall gpucluster") from None
    if not isinstance(found, Path) or not (found / "conftest.py").is_file():
        raise InputError(f"the conformance suite ({SUITE_PACKAGE}) is not a folder on disk ({found}): "
                         "install gpucluster unzipped (pip does)")
    return found


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
    checks: tuple[str, ...] = ()
    kubeconfig: Path | None = None
    fleet_margin: float | None = None  # None: the inventory's, else the default
    dcgm_level: int | None = None  # None: the inventory's gpucluster_conformance.dcgm_diag_level
    fail_on_skipped_cluster: bool = False  # a (cluster) row whose every check skipped fails the run


def inventory_for_stack(stack: str | Path) -> Path:
    """The inventory of a stack file, where gpucluster/paths.py names it (every target)."""
    from gpucluster import paths

    return paths.existing_inventory(paths.resolve(stack))


def default_run_dir(runs_dir: Path | None = None) -> Path:
    """A new run folder under ``runs/``, this run's alone (see :func:`gpucluster.runs.new_run_dir`)."""
    from gpucluster import paths

    return runs.new_run_dir(runs_dir or paths.RUNS_DIR, "verify")


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
    suite = suite_dir()
    hosts = len(inv.limited(list(opts.limit)).nodes) if opts.limit else len(inv.nodes)
    run_dir = opts.run_dir.resolve()
    # Hypothesis' pytest plugin (installed for the unit tests) costs a second or more of imports
    # in the controller and in every worker; the suite has no use for it. The suite's own
    # pytest.ini is the configuration (-c), whatever lies around it; the JUnit XML is pytest's.
    # Operators get one line per finding, printed once by the CLI from results.json: pytest's
    # tracebacks (--tb=no; they are in each failing check's log) and its per-test summary lines
    # (-rN, cut to the terminal's width) stay out of the console, and so does the suite's own
    # copy of the verdicts.
    argv = [sys.executable, "-m", "pytest", str(suite), "-c", str(suite / "pytest.ini"), "--rootdir", str(suite),
            "--inventory", str(opts.inventory.resolve()), "--run-dir", str(run_dir),
            "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-q", "--no-header",
            "--tb=no", "-rN", "--verdicts-by-caller",
            f"--junitxml={run_dir / JUNIT_XML}", "-o", "junit_family=xunit1",
            "--burn-seconds", str(opts.burn_seconds)]
    workers = max(1, min(opts.workers, hosts))
    if workers > 1:
        argv += ["-n", str(workers), "--dist", "loadgroup"]
    if not opts.burn:
        argv.append("--no-burn")
    if opts.limit:
        argv += ["--limit", ",".join(opts.limit)]
    if opts.checks:
        argv += ["--checks", ",".join(opts.checks)]
    if opts.dcgm_level is not None:
        argv += ["--dcgm-level", str(opts.dcgm_level)]
    if opts.fleet_margin is not None:
        argv += ["--fleet-margin", repr(opts.fleet_margin)]
    if opts.fail_on_skipped_cluster:
        argv.append("--fail-on-skipped-cluster")
    return argv


def last_failures(runs_dir: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The check IDs and nodes that failed in the newest verify run under ``runs_dir``, read
    through :meth:`Report.from_json` like every other reader of results.json.

    A fleet comparison that failed (GC-FLEET-001) is rerun as the check that measured its figure,
    on every node of the fleet it was compared with: on the failing node alone there would be no
    median to compare with, and the rerun would pass for want of one.
    """
    newest = sorted(runs_dir.glob("*-verify/results.json"))
    if not newest:
        raise InputError(f"--rerun-failed: no earlier verify run under {runs_dir}/")
    try:
        data = json.loads(newest[-1].read_text(encoding="utf-8"))
        if not isinstance(data, dict) or not isinstance(data.get("results"), list):
            raise ValueError("no list of results")
        report = Report.from_json(data)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InputError(f"--rerun-failed: {newest[-1]} is not a verify report ({exc})") from None
    failed = [r for r in report.results if r.outcome in ("failed", "error")]
    if not failed:
        raise InputError(f"--rerun-failed: nothing failed in {newest[-1].parent}")
    ids: set[str] = set()
    nodes: set[str] = set()
    for r in failed:
        if r.check_id == fleet.FLEET_CHECK:
            ids.add(str(r.figures.get("fleet_source") or r.check_id))
            nodes.update(x for x in str(r.figures.get("fleet_members") or r.node).split(",") if x)
        else:
            ids.add(r.check_id)
            nodes.add(r.node)
    return tuple(sorted(ids)), tuple(sorted(n for n in nodes if n != CLUSTER))


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
    suite_dir()
    whole = load_inventory(opts.inventory)
    inv = whole.limited(list(opts.limit)) if opts.limit else whole
    problems = inv.inter_node_problems(_selected_checks(opts.checks))
    if problems:
        raise InputError(problems, source=str(opts.inventory))
    with runs.cluster_lock(opts.inventory, "gpucluster verify"), runs.private_umask():
        return _run_locked(opts, inv, whole)


def _selected_checks(patterns: tuple[str, ...]) -> frozenset[str] | None:
    """The check IDs ``--checks`` names (None: every check); a pattern that names none is the suite's
    to refuse (it names every check ID), so here it selects none."""
    if not patterns:
        return None
    try:
        return checks.select(patterns)
    except ValueError:
        return frozenset()


def _run_locked(opts: VerifyOptions, inv: ClusterInventory, whole: ClusterInventory) -> Report:
    try:
        runs.ensure_private_dir(opts.run_dir)
        (opts.run_dir / RESULTS_JSON).unlink(missing_ok=True)
    except OSError as exc:
        raise InputError(runs.write_error_line(opts.run_dir, exc)) from None
    run_id = runs.new_run_id()
    ssh_dir = opts.run_dir.resolve() / "ssh"
    # Before any ssh client starts: a control folder another user made first is refused here.
    sockets.control_dir(ssh_dir)
    try:
        _clean_up_after_earlier_runs(whole, opts)
        runs.mark_unfinished(opts.inventory, run_id)
        return _run_suite(opts, inv, run_id)
    finally:
        # The run's own SSH key outlives no run (the suite removes it too, when it gets that far),
        # and neither do its SSH masters or their sockets' folder.
        delete_local_keys(ssh_dir / "run-key")
        for problem in sockets.release(ssh_dir):
            sys.stderr.write(f"warning: {problem}\n")


def _run_suite(opts: VerifyOptions, inv: ClusterInventory, run_id: str) -> Report:
    results = opts.run_dir / RESULTS_JSON
    env = dict(os.environ, GPUCLUSTER_RUN_DIR=str(opts.run_dir.resolve()), PYTHONUNBUFFERED="1")
    if opts.kubeconfig is not None:
        env["GPUCLUSTER_KUBECONFIG"] = str(opts.kubeconfig.resolve())
    env[RUN_ID_ENV] = run_id
    env.update(bytecode_env(env))
    started = time.perf_counter()
    tail: collections.deque[str] = collections.deque(maxlen=40)
    stopper = _Stopper()
    write_error: str | None = None
    with runs.RunFile(opts.run_dir / "pytest.log") as log, stopper.signals:
        # Its own process group: Ctrl-C reaches the suite through us, once, and we can stop all of it.
        # The run folder as the working folder: this run's own, and writable wherever the suite is installed.
        proc = subprocess.Popen(pytest_argv(opts, inv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env, cwd=str(opts.run_dir.resolve()), process_group=0)
        stopper.started(proc)
        runs.mark_unfinished(opts.inventory, run_id, pid=proc.pid)
        # Long measurements say what they measure and their budget: on stderr, so --json keeps stdout.
        follower = progress.Follower(opts.run_dir, sys.stderr).start()
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
            follower.stop()
            stopper.done.set()
    interrupted = stopper.signals.interrupted or rc == 2
    report = None if rc in (3, 4) and not interrupted else _read_report(results)
    # However the suite ended, nothing it started and no grant of its key stays on a node.
    _cleanup_nodes(inv, opts, run_id, report)
    if report is None:
        if interrupted:
            sys.stderr.write("interrupted before the suite wrote any report\n")
            return Report(meta={"interrupted": True, "cluster": inv.cluster_name, "inventory": str(opts.inventory)},
                          nodes=[n.name for n in inv.nodes], results=[])
        raise InputError(_error_line(tail, rc, write_error) + f"; log: {log.path}")
    if interrupted:
        report.meta["interrupted"] = True
        _write_reports(report, opts)
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


def _clean_up_after_earlier_runs(inv: ClusterInventory, opts: VerifyOptions) -> None:
    """The runs of this inventory that ended without their own cleanup (the controller killed with
    SIGKILL, the machine lost): under the cluster's lock, and with no process of theirs left on
    this machine, none of them still runs, so what they started on the nodes is killed and their
    keys' grants removed, on every node of the inventory, one command per node."""
    leftover = runs.unfinished_runs(opts.inventory)
    now = datetime.now(UTC)
    todo: dict[str, str] = {}
    for old, record in sorted(leftover.items(), key=lambda kv: str(kv[1].get("started"))):
        started = str(record.get("started", "?"))
        pid = record.get("pid")
        if isinstance(pid, int) and runs.has_tag(pid, f"{RUN_ID_ENV}={old}"):
            continue  # its suite outlived its verify here, and cleans up after itself
        try:
            age = (now - datetime.fromisoformat(started)).total_seconds()
        except ValueError:
            age = runs.UNFINISHED_MAX_AGE_S + 1
        if age > runs.UNFINISHED_MAX_AGE_S:
            sys.stderr.write(f"verify: run {old} (started {started}) never got its cleanup on every node; "
                             "its grants expired long ago, no longer cleaning up after it\n")
            runs.mark_unfinished(opts.inventory, old, done=True)
            continue
        todo[old] = started
    if not todo:
        return
    ssh_dir = opts.run_dir.resolve() / "ssh"
    cfg = write_ssh_config(ssh_dir / "earlier" / "ssh_config", list(inv.nodes), shared=ssh_dir,
                           host_keys=hostkeys.policy_for(inv.target, inv.cluster_name))
    sys.stderr.write(f"verify: run(s) {', '.join(todo)} ended without their cleanup; cleaning up after them\n")
    done = cleanup_nodes([SshRemote(n.name, cfg, run_id="") for n in inv.nodes], list(todo))
    for node, what in sorted(done.items()):
        sys.stderr.write(f"{node}: {what}\n")
    if all(node_done(what) for what in done.values()):
        runs.mark_unfinished(opts.inventory, list(todo), done=True)


def _cleanup_nodes(inv: ClusterInventory, opts: VerifyOptions, run_id: str, report: Report | None) -> None:
    """Kill what the run started on the nodes and take its key back, unless the suite did (its
    report says so): the suite's controller died, or never wrote its report. Once every node it
    reached is clean, the run is no longer one a later run must clean up after."""
    ssh_dir = opts.run_dir.resolve() / "ssh"
    if report is not None and "session_cleanup" in report.meta:
        done: dict[str, str] = report.meta["session_cleanup"]
    elif not (ssh_dir / "probe" / "ssh_config").exists():
        done = {}  # it never reached a node
    else:
        down = report.unreachable if report is not None else {}
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
            report.meta["session_cleanup"] = done
            _write_reports(report, opts)
    if all(node_done(what) for what in done.values()):
        runs.mark_unfinished(opts.inventory, run_id, done=True)


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
    """The findings, one line each, then the verdict table (gpucluster verify prints it once)."""
    return "\n".join(console_lines(report))


__all__ = ["EXIT_BAD_INPUT", "VerifyOptions", "default_run_dir", "inventory_for_stack", "run", "table"]
