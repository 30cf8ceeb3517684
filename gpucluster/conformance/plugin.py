"""The conformance suite's pytest plugin: inventory, the `node` fixture, markers and result collection.

The suite (``tests/conformance`` in a checkout, :mod:`gpucluster.suite` once installed) loads it
from its ``conftest.py``; ``gpucluster verify`` runs the suite, or run it directly::

    pytest tests/conformance --inventory inventory.yml [--run-dir DIR] [-n 4 --dist loadgroup]

Markers are inventory groups (``@pytest.mark.gpu``): a test runs once per host in its
groups (every host when it has none). A test without the ``node`` fixture is a cluster-level
check: it runs once, and its result is the row :data:`~gpucluster.conformance.verdict.CLUSTER`
beside the nodes' rows. Each test carries ``@pytest.mark.check("GC-...")`` and the check's MUST
statement as its docstring. The controller process collects every result and writes the run
folder: JSON, Markdown, HTML, Prometheus textfiles, and pytest's own JUnit XML (``--junitxml``,
``junit.xml`` in the run folder unless told otherwise), whose test cases carry the check ID, the
node and the check's figures as properties.

Before any check, the controller probes every node over SSH at once (``probe.json`` in the run
folder): a node that does not answer within seconds, or presents another host key than the one
recorded for the cluster, gets the verdict ``unreachable`` and its checks fail at once instead of
each waiting out its SSH timeout. Everything the suite starts on a node carries the run's tag
(:mod:`gpucluster.conformance.remote`); an interrupted run kills it on every node and still
writes the report of what finished.

Nothing here acts without ``--inventory``: the plugin is inert in any other pytest run.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Generator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gpucluster import hostkeys, runs
from gpucluster.conformance import checks, fleet, provenance, remedies
from gpucluster.conformance.fabric import Fabric
from gpucluster.conformance.nodes import ClusterInventory, NodeInfo, load_inventory
from gpucluster.conformance.remote import (
    RUN_ID_ENV,
    CommandResult,
    SshRemote,
    cleanup_nodes,
    delete_local_keys,
    sweep_nodes,
    write_ssh_config,
)
from gpucluster.conformance.report_data import Report
from gpucluster.conformance.reports import (
    JUNIT_XML,
    LOG_TAIL_LINES,
    console_lines,
    finish_junit,
    log_tail,
    write_all,
)
from gpucluster.conformance.verdict import CLUSTER, CheckResult, Outcome, shorten
from gpucluster.errors import InputError
from gpucluster.spec.facts import DCGM_DIAG_LEVELS, FLEET_MARGIN_DEFAULT, ROLES
from gpucluster.spec.models import Bom, HardwareProfile

PROBE_JSON = "probe.json"

# Test-case properties (pytest's user_properties): JUnit XML carries them, and the controller
# builds each check's result from them.
PROP_CHECK = "check_id"
PROP_NODE = "node"
PROP_PARAM = "param"
PROP_FIGURES = "figures"
PROP_CAUSE = "cause"  # the root cause a failure shares with others (gpucluster.conformance.fabric.fault_key)
PROP_LOGS = "logs"  # JSON list: the run folder's logs of what the check ran (mpirun's output)

CHECK_LOG_DIR = "logs/checks"

COLLECTOR_PLUGIN = "gpucluster-conformance-collector"


@dataclass(eq=False)  # a plugin: pluggy keys it by identity
class Collector:
    """One pytest session's run state: what the controller learned before the checks, every
    check's result as its report arrives (xdist ships the workers' reports here), and the report
    built from them. It lives on the session's ``config`` (:func:`collector`) and is registered
    as a plugin for the hooks that carry no ``config``; a second session in the same process
    (pytester, say) has its own and sees nothing of this one."""

    inventory: ClusterInventory | None = None
    # node -> why, from the controller's probe (workers read it from the run folder)
    unreachable: dict[str, str] | None = None
    # node -> what the sweep of earlier runs' keys removed there
    swept: dict[str, str] = field(default_factory=dict)
    started: float | None = None
    fleet_margin: float = fleet.DEFAULT_MARGIN
    results: list[CheckResult] = field(default_factory=list)
    suite_errors: list[str] = field(default_factory=list)
    # test id -> (the whole message, pytest's report text, the logs the check named) for the failures' logs
    detail: dict[str, tuple[str, str, list[str]]] = field(default_factory=dict)
    report: Report | None = None
    write_error: str | None = None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        props = dict(report.user_properties)
        if PROP_CHECK not in props:
            return
        outcome: Outcome | None = None
        if report.when == "setup" and report.outcome != "passed":
            outcome = "skipped" if report.skipped else "error"
        elif report.when == "call":
            outcome = report.outcome
        elif report.when == "teardown" and report.failed:
            outcome = "error"
        if outcome is None:
            return
        # One result per test: a teardown error replaces the call's outcome.
        self.results[:] = [r for r in self.results if r.test != report.nodeid]
        param = None if props.get(PROP_PARAM) is None else str(props[PROP_PARAM])
        node = str(props.get(PROP_NODE) or CLUSTER)
        check_id = str(props[PROP_CHECK])
        message = "" if outcome == "passed" else _message(report)
        log = ""
        if outcome in ("failed", "error"):
            log = check_log(node, f"{check_id}[{param}]" if param else check_id)
            self.detail[report.nodeid] = (message, report.longreprtext, _logs(props.get(PROP_LOGS)))
            message = shorten(message, rest=log)
        self.results.append(CheckResult(
            node=node, check_id=check_id, outcome=outcome, message=message,
            figures=_figures(props.get(PROP_FIGURES)), duration_s=round(float(report.duration), 3),
            test=report.nodeid, param=param,
            cause=str(props.get(PROP_CAUSE) or "") if outcome in ("failed", "error") else "", log=log,
        ))

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        # A check module that fails to import must not vanish from the verdict.
        if report.failed:
            self.suite_errors.append(f"{report.nodeid}: {_message(report)}")


_COLLECTOR = pytest.StashKey[Collector]()


def collector(config: pytest.Config) -> Collector:
    """This session's :class:`Collector` (made by ``pytest_configure``)."""
    return config.stash.setdefault(_COLLECTOR, Collector())


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("gpucluster")
    g.addoption("--inventory", default=os.environ.get("GPUCLUSTER_INVENTORY"),
                help="inventory file (default: $GPUCLUSTER_INVENTORY)")
    g.addoption("--run-dir", default=os.environ.get("GPUCLUSTER_RUN_DIR"), help="run folder for reports")
    g.addoption("--limit", default=None, help="comma-separated host names")
    g.addoption("--no-burn", action="store_true", default=False, help="skip the GPU burn")
    g.addoption("--burn-seconds", type=int, default=60, help="GPU burn time per precision")
    g.addoption("--dcgm-level", type=int, default=None, choices=DCGM_DIAG_LEVELS,
                help="dcgmi diag run level (default: the inventory's gpucluster_conformance.dcgm_diag_level)")
    g.addoption("--checks", default=None,
                help="comma-separated check IDs or patterns (GC-NET-*,GC-GPU-001): run only these")
    g.addoption("--fleet-margin", default=None,
                help="how far below the fleet median a node's figure may fall, as a fraction (default: the "
                     f"inventory's gpucluster_conformance.fleet_margin, else {FLEET_MARGIN_DEFAULT:.2f})")
    g.addoption("--fail-on-skipped-cluster", action="store_true", default=False,
                help="fail the run when every cluster-level check (Kubernetes) was skipped: the (cluster) row "
                     "reads SKIPPED either way, never PASS")
    g.addoption("--verdicts-by-caller", action="store_true", default=False,
                help="print no findings or verdicts at the end (gpucluster verify prints them once, after "
                     "publishing), unless the run folder could not be written")


def _active(config: pytest.Config) -> bool:
    return bool(config.getoption("--inventory", default=None))


def _controller(config: pytest.Config) -> bool:
    """The process that writes the run folder (the only one without xdist's workerinput)."""
    return not hasattr(config, "workerinput")


def _inventory(config: pytest.Config) -> ClusterInventory:
    state = collector(config)
    if state.inventory is not None:
        return state.inventory
    path = config.getoption("--inventory")
    if not path:
        raise pytest.UsageError("no inventory: pass --inventory FILE or set GPUCLUSTER_INVENTORY")
    try:
        inv = load_inventory(path)
        limit = config.getoption("--limit")
        if limit:
            inv = inv.limited([x for x in limit.split(",") if x])
    except InputError as exc:
        raise pytest.UsageError("; ".join(exc.lines())) from exc
    state.inventory = inv
    return inv


def _fleet_margin(config: pytest.Config) -> float:
    """--fleet-margin, else the inventory's ``gpucluster_conformance.fleet_margin``, else the default;
    bad input before any check runs."""
    given = config.getoption("--fleet-margin")
    if given is None:
        # The inventory model has held it to the spec's range.
        return _inventory(config).conformance.fleet_margin
    try:
        return fleet.check_margin(given, "--fleet-margin")
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def _run_dir(config: pytest.Config) -> Path:
    d = config.getoption("--run-dir")
    if not d:
        # The controller makes one (never another run's) and hands it to xdist workers through
        # the environment.
        d = os.environ.get("GPUCLUSTER_RUN_DIR") or str(runs.new_run_dir(Path("runs"), "verify"))
        os.environ["GPUCLUSTER_RUN_DIR"] = d
        config.option.run_dir = d
    return Path(d).resolve()


def _run_id() -> str:
    # `gpucluster verify` hands its run's id down; a bare pytest run makes one for its workers.
    run_id = os.environ.get(RUN_ID_ENV) or runs.new_run_id()
    os.environ[RUN_ID_ENV] = run_id
    return run_id


def _host_keys(inv: ClusterInventory) -> hostkeys.HostKeyPolicy:
    try:
        return hostkeys.policy_for(inv.target, inv.cluster_name)
    except InputError as exc:
        raise pytest.UsageError("; ".join(exc.lines())) from None


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # tryfirst: the JUnit path must be set before pytest's junitxml plugin reads it.
    state = collector(config)
    config.pluginmanager.register(state, COLLECTOR_PLUGIN)
    config.addinivalue_line("markers", "check(id): the conformance check this test implements")
    for g in ROLES:
        config.addinivalue_line("markers", f"{g}: runs on hosts of the inventory group {g}")
    if not _active(config):
        return
    for g in _inventory(config).groups:
        if g not in ROLES:
            config.addinivalue_line("markers", f"{g}: runs on hosts of the inventory group {g}")
    # A --checks pattern that names no check is refused here, before any node is probed, and so are
    # nodes an inter-node run of the selected checks cannot measure as the inventory states them.
    problems = _inventory(config).inter_node_problems(_selected(config))
    if problems:
        raise pytest.UsageError("; ".join(InputError(problems, source=_inventory(config).path).lines()))
    state.started = time.time()
    if _controller(config):
        state.fleet_margin = _fleet_margin(config)
        _run_id()
        if not config.option.xmlpath and not config.option.collectonly:
            config.option.xmlpath = str(_run_dir(config) / JUNIT_XML)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Controller, before xdist starts its workers: probe every node at once."""
    config = session.config
    if not _controller(config) or not _active(config) or config.option.collectonly:
        return
    inv = _inventory(config)
    try:
        run_dir = _run_dir(config)
    except InputError as exc:
        raise pytest.UsageError("; ".join(exc.lines())) from None
    try:
        runs.ensure_private_dir(run_dir)
        cfg = write_ssh_config(run_dir / "ssh" / "probe" / "ssh_config", list(inv.nodes), shared=run_dir / "ssh",
                               host_keys=_host_keys(inv))
        found = hostkeys.probe(
            [(n.name, n.address) for n in inv.nodes],
            lambda name: ["ssh", "-F", str(cfg), "-o", f"ConnectTimeout={hostkeys.PROBE_CONNECT_TIMEOUT_S}",
                          "-o", "ConnectionAttempts=1", name, "true"],
            _host_keys(inv))
        runs.write_private(run_dir / PROBE_JSON, json.dumps({k: v.to_json() for k, v in found.items()}, indent=2))
    except OSError as exc:
        raise pytest.UsageError(runs.write_error_line(run_dir, exc)) from None
    except InputError as exc:
        raise pytest.UsageError("; ".join(exc.lines())) from None
    down = {k: v.message for k, v in found.items() if not v.ok}
    collector(config).unreachable = down
    for name, why in down.items():
        sys.stderr.write(f"{name}: unreachable, its checks fail at once: {why}\n")
    # What an earlier run left when it was killed before its own cleanup (SIGKILL, a lost
    # controller): run key lines past their expiry, and their files.
    swept = sweep_nodes([SshRemote(n.name, cfg, run_id="") for n in inv.nodes if n.name not in down])
    collector(config).swept = swept
    for name, what in sorted(swept.items()):
        if not what.startswith("0 line(s), 0 file(s)"):
            sys.stderr.write(f"{name}: run keys of earlier runs swept: {what}\n")


def _unreachable(config: pytest.Config) -> dict[str, str]:
    """node -> why, from the controller's probe (workers read it from the run folder)."""
    state = collector(config)
    if state.unreachable is not None:
        return state.unreachable
    try:
        data = json.loads((_run_dir(config) / PROBE_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    state.unreachable = {k: str(v.get("message", "")) for k, v in data.items() if v.get("status") != "ok"}
    return state.unreachable


def _selected(config: pytest.Config) -> frozenset[str] | None:
    """The check IDs --checks names (None: every check); a pattern that names none is bad input."""
    patterns = [p for p in (config.getoption("--checks") or "").split(",") if p.strip()]
    if not patterns:
        return None
    try:
        return checks.select(patterns)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def _check_id(item: pytest.Item) -> str:
    m = item.get_closest_marker("check")
    if m is None or not m.args:
        raise pytest.UsageError(f"{item.nodeid}: no @pytest.mark.check(ID)")
    return str(m.args[0])


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "node" not in metafunc.fixturenames:
        return
    inv = _inventory(metafunc.config)
    groups = tuple(m.name for m in metafunc.definition.iter_markers() if m.name in inv.groups or m.name in
                   ROLES)
    hosts = inv.in_groups(groups)
    params = [pytest.param(n.name, id=n.name, marks=pytest.mark.xdist_group(n.name)) for n in hosts]
    metafunc.parametrize("node", params, indirect=True)


class Node:
    """One host under test: its inventory view, a testinfra host, and the figures a check records."""

    def __init__(self, info: NodeInfo, inv: ClusterInventory, host: Any, ssh_config: Path,
                 request: pytest.FixtureRequest) -> None:
        self.info = info
        self.inv = inv
        self.host = host
        self.ssh_config = ssh_config
        self._figures: dict[str, Any] = {}
        # Kept as JSON text: JUnit XML writes a property's value as text, and xdist ships it as is.
        self._props = request.node.user_properties
        self._props.append((PROP_FIGURES, "{}"))
        self._slot = len(self._props) - 1

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def profile(self) -> HardwareProfile:
        return self.info.profile

    @property
    def bom(self) -> Bom:
        return self.inv.bom

    def figure(self, key: str, value: Any) -> None:
        self._figures[key] = value
        self._props[self._slot] = (PROP_FIGURES, json.dumps(self._figures, default=str))

    def cause(self, key: str) -> None:
        """Name the root cause this check's failure shares with others (a slow node, a link): the
        reports make one finding of all failures with the same key."""
        self._props[:] = [p for p in self._props if p[0] != PROP_CAUSE]
        self._props.append((PROP_CAUSE, key))

    def attach(self, log: str) -> None:
        """Name a log in the run folder (relative to it) that holds the raw output of what the
        check measured: its path and tail go into the check's own log and junit.xml."""
        known = [p for p in self._props if p[0] == PROP_LOGS]
        logs = json.loads(known[0][1]) if known else []
        if log not in logs:
            logs.append(log)
        self._props[:] = [p for p in self._props if p[0] != PROP_LOGS]
        self._props.append((PROP_LOGS, json.dumps(logs)))

    def run(self, command: str, timeout: float = 120) -> CommandResult:
        return self.remote().run(command, timeout=timeout)

    def remote(self) -> SshRemote:
        return SshRemote(self.name, self.ssh_config)

    def require_gpus(self) -> None:
        if self.info.gpu_count == 0:
            pytest.skip(self.info.no_gpu_reason())

    def require_hcas(self) -> None:
        if self.info.hca_count == 0:
            pytest.skip(self.info.no_hca_reason())

    def in_container(self) -> str | None:
        res = self.run("systemd-detect-virt --container 2>/dev/null || true")
        virt = res.stdout.strip()
        return virt if virt and virt != "none" else None


@pytest.fixture(scope="session")
def inventory(pytestconfig: pytest.Config) -> ClusterInventory:
    return _inventory(pytestconfig)


@pytest.fixture(scope="session")
def run_dir(pytestconfig: pytest.Config) -> Path:
    return runs.ensure_private_dir(_run_dir(pytestconfig))


@pytest.fixture(scope="session")
def ssh_config(run_dir: Path, inventory: ClusterInventory) -> Path:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    return write_ssh_config(run_dir / "ssh" / worker / "ssh_config", list(inventory.nodes), shared=run_dir / "ssh",
                            host_keys=_host_keys(inventory))


@pytest.fixture(scope="session")
def _hosts() -> dict[str, Any]:
    return {}


@pytest.fixture
def node(request: pytest.FixtureRequest, inventory: ClusterInventory, ssh_config: Path,
         _hosts: dict[str, Any]) -> Node:
    import testinfra  # type: ignore[import-untyped]

    name = str(request.param)
    why = _unreachable(request.config).get(name)
    if why is not None:
        request.node.user_properties.append((PROP_CAUSE, f"unreachable:{name}"))
        pytest.fail(f"node unreachable: {why}", pytrace=False)
    if name not in _hosts:
        _hosts[name] = testinfra.get_host(f"ssh://{name}", ssh_config=str(ssh_config))
    return Node(inventory.node(name), inventory, _hosts[name], ssh_config, request)


@pytest.fixture(scope="session")
def fabric(pytestconfig: pytest.Config, inventory: ClusterInventory, run_dir: Path, ssh_config: Path) -> Fabric:
    # Measurements between nodes run among the nodes that answered the probe.
    down = _unreachable(pytestconfig)
    reachable = inventory.limited([n.name for n in inventory.nodes if n.name not in down]) if down else inventory
    return Fabric(reachable, run_dir, ssh_config, _host_keys(inventory), _run_id())


@pytest.fixture(scope="session")
def burn_options(pytestconfig: pytest.Config) -> tuple[bool, int]:
    return (not pytestconfig.getoption("--no-burn"), int(pytestconfig.getoption("--burn-seconds")))


# --- result collection (controller side; xdist ships worker reports here) --------------------


def _node_param(item: pytest.Item) -> Any:
    callspec = getattr(item, "callspec", None)
    return None if callspec is None else callspec.params.get("node")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not _active(config):
        return
    # A check whose groups hold no host of the inventory (storage checks on a cluster without
    # storage) gets pytest's empty-parameter-set placeholder: it concerns no node, so it is
    # deselected rather than reported as a node named after the placeholder.
    empty = [i for i in items if not isinstance(_node_param(i), str | None)]
    if empty:
        config.hook.pytest_deselected(items=empty)
        items[:] = [i for i in items if i not in empty]
    selected = _selected(config)
    if selected is not None:
        wanted = set(selected)
        if fleet.FLEET_CHECK in wanted:  # derived from these checks' figures: run them
            wanted.update(fleet.SOURCES)
        other = [i for i in items if _check_id(i) not in wanted]
        if other:
            config.hook.pytest_deselected(items=other)
            items[:] = [i for i in items if i not in other]
    for item in items:
        cid = _check_id(item)
        if cid not in checks.CHECKS:
            raise pytest.UsageError(f"{item.nodeid}: unknown check {cid!r}")
        item.user_properties.append((PROP_CHECK, cid))
        # A test without a node is a cluster-level check: its own row, counted like any node's.
        node = _node_param(item)
        item.user_properties.append((PROP_NODE, CLUSTER if node is None else str(node)))
        callspec = getattr(item, "callspec", None)
        param = None if callspec is None else callspec.params.get("service")
        if param is not None:
            item.user_properties.append((PROP_PARAM, str(param)))


def _message(report: pytest.TestReport | pytest.CollectReport) -> str:
    """The check's own words on one line: the assertion's or pytest.fail's message, without the
    exception name and without pytest's rewritten ``assert`` explanation below it."""
    lr = report.longrepr
    if isinstance(lr, tuple) and len(lr) == 3:
        return " ".join(str(lr[2]).removeprefix("Skipped: ").split())
    crash = getattr(lr, "reprcrash", None)
    if crash is not None:
        msg = str(crash.message)
        for prefix in ("Failed: ", "AssertionError: "):
            msg = msg.removeprefix(prefix)
        if "\nassert " in msg:
            msg = msg[:msg.index("\nassert ")]
        elif msg.startswith("assert "):
            msg = msg.splitlines()[0]
        return " ".join(msg.split())
    return str(lr).strip().splitlines()[-1] if lr else ""


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "_"


def check_log(node: str, label: str) -> str:
    """Where a failing check's own log lies in the run folder (relative path)."""
    return f"{CHECK_LOG_DIR}/{_safe(node)}/{_safe(label)}.log"


def _figures(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return dict(value) if isinstance(value, dict) else {}


def _logs(value: Any) -> list[str]:
    try:
        logs = json.loads(value) if isinstance(value, str) else []
    except ValueError:
        return []
    return [str(x) for x in logs] if isinstance(logs, list) else []


@pytest.hookimpl(wrapper=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> Generator[None, None, None]:
    """Around every other plugin's sessionfinish, pytest's JUnit writer included: the reports are
    written after junit.xml, results.json last, so that results.json means the set is complete."""
    config = session.config
    junit_error: OSError | None = None
    try:
        yield
    except OSError as exc:  # pytest's JUnit writer on a full disk: one line, never a traceback
        junit_error = exc
    if _controller(config) and _active(config) and not config.option.collectonly:
        _finish(config, exitstatus, junit_error)
        report = collector(config).report
        # A failure no pytest test had (the fleet comparison, a cluster row CI asked to fail when
        # skipped) fails a bare pytest run too, as it fails `gpucluster verify`.
        if report is not None and report.exit_code == 1 and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def write_check_logs(run_dir: Path, results: list[CheckResult],
                     detail: dict[str, tuple[str, str, list[str]]], inventory: str = "") -> None:
    """One log per failing check: what it found, its figures, its next steps (naming the node,
    the inventory and what the check judged, as the report's do), the logs of what it ran with
    their tails, and pytest's own report (the traceback operators are not shown); ``detail`` is
    :attr:`Collector.detail`."""
    for r in results:
        if not r.log:
            continue
        message, longrepr, logs = detail.get(r.test, (r.message, "", []))
        title = checks.CHECKS[r.check_id].title if r.check_id in checks.CHECKS else r.check_id
        out = [f"check: {r.label} ({title})", f"node: {r.node}", f"outcome: {r.outcome}", f"message: {message}"]
        if r.cause:
            out.append(f"cause: {r.cause}")
        shown = {k: v for k, v in r.figures.items() if k != "series"}
        if shown:
            out.append("figures: " + json.dumps(shown, default=str, sort_keys=True))
        if r.check_id in remedies.REMEDIES:
            steps = remedies.steps_for(r, inventory=inventory, run_dir=str(run_dir))
            out += ["next steps:"] + [f"  {i}. {s}" for i, s in enumerate(steps, 1)]
        for log in logs:
            out += ["", f"--- last {LOG_TAIL_LINES} lines of {log} ---", log_tail(run_dir / log)]
        if longrepr:
            out += ["", "--- pytest's report ---", longrepr]
        path = run_dir / r.log
        path.parent.mkdir(parents=True, exist_ok=True, mode=runs.RUN_DIR_MODE)
        runs.write_private(path, "\n".join(out) + "\n")


def _finish(config: pytest.Config, exitstatus: int, junit_error: OSError | None) -> None:
    state = collector(config)
    inv = _inventory(config)
    run_dir = _run_dir(config)
    finished = time.time()
    started = finished if state.started is None else state.started
    meta: dict[str, Any] = {
        "cluster": inv.cluster_name,
        "inventory": inv.path,
        "started": datetime.fromtimestamp(started, UTC).isoformat(timespec="seconds"),
        "duration_s": round(finished - started, 1),
        "finished_unix": round(finished),
        "burn": not config.getoption("--no-burn"),
        "fail_on_skipped_cluster": bool(config.getoption("--fail-on-skipped-cluster")),
        "suite_errors": list(state.suite_errors),
        "unreachable": dict(_unreachable(config)),
        "run_id": os.environ.get(RUN_ID_ENV, ""),
        # What the run ran with (version, stack, BOM pins) and the previous run of this inventory.
        "provenance": provenance.collect(stack=inv.stack, target=inv.target,
                                         bom=inv.bom, run_dir=run_dir, inventory=str(inv.path)),
    }
    down = meta["unreachable"]
    meta["run_key_sweep"] = state.swept
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        meta["interrupted"] = True
    # Every session ends here, whatever ended it (a failed check, a crashed worker, Ctrl-C):
    # what the run started on the nodes (mpirun, ib_write_bw, a burn) may outlive the ssh client
    # that started it, and a grant of the run's key may outlive the measurement that took it.
    cfg = run_dir / "ssh" / "probe" / "ssh_config"
    if cfg.exists():
        meta["session_cleanup"] = cleanup_nodes(
            [SshRemote(n.name, cfg) for n in inv.nodes if n.name not in down], meta["run_id"])
    delete_local_keys(run_dir / "ssh" / "run-key")
    margin = state.fleet_margin
    meta["fleet_margin"] = margin
    # The fleet's verdicts need every node's figures: they are derived here, once all checks ran.
    derived = [replace(r, log=check_log(r.node, r.label)) if r.outcome == "failed" else r
               for r in fleet.fleet_results(state.results, margin)]
    report = Report(meta=meta, nodes=[n.name for n in inv.nodes], results=[*state.results, *derived])
    state.report = report
    xmlpath = config.option.xmlpath
    try:
        if junit_error is not None:
            raise junit_error
        write_check_logs(run_dir, report.results, state.detail, str(inv.path))
        if xmlpath:
            finish_junit(Path(xmlpath), report.results, {t: d[2] for t, d in state.detail.items()}, run_dir)
        write_all(report, run_dir)
    except OSError as exc:
        # One line, and the verdicts still in the terminal summary; never a traceback.
        state.write_error = f"run folder not written: {runs.write_error_line(run_dir, exc)}"


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = collector(config)
    report = state.report
    if report is None:
        return
    error = state.write_error
    if config.getoption("--verdicts-by-caller") and not error:
        return  # gpucluster verify prints them once, from results.json
    terminalreporter.section("gpucluster conformance")
    for line in console_lines(report):
        terminalreporter.write_line(line)
    if report.meta.get("interrupted"):
        terminalreporter.write_line("interrupted: the verdicts above cover the checks that finished")
    if error:
        terminalreporter.write_line(error)
    else:
        terminalreporter.write_line(f"run folder: {_run_dir(config)}")


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(_COLLECTOR, None)
    if state is not None and config.pluginmanager.is_registered(state):
        config.pluginmanager.unregister(state)
