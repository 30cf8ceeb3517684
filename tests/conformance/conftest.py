"""The conformance suite's wiring: inventory, the `node` fixture, markers and result collection.

Run it with ``gpucluster verify`` or directly::

    pytest tests/conformance --inventory inventory.yml [--run-dir DIR] [-n 4 --dist loadgroup]

Markers are inventory groups (``@pytest.mark.gpu``): a test runs once per host in its
groups (every host when it has none). Each test carries ``@pytest.mark.check("GC-...")``
and the check's MUST statement as its docstring. The controller process collects every
result and writes the run folder (JUnit XML, JSON, Markdown, HTML, Prometheus textfiles).

Before any check, the controller probes every node over SSH at once (``probe.json`` in the run
folder): a node that does not answer within seconds, or presents another host key than the one
recorded for the cluster, gets the verdict ``unreachable`` and its checks fail at once instead of
each waiting out its SSH timeout. Everything the suite starts on a node carries the run's tag
(:mod:`gpucluster.conformance.remote`); an interrupted run kills it on every node and still
writes the report of what finished.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gpucluster import hostkeys, runs
from gpucluster.conformance import checks
from gpucluster.conformance.fabric import Fabric
from gpucluster.conformance.nodes import ClusterInventory, NodeInfo, load_inventory
from gpucluster.conformance.remote import (
    RUN_ID_ENV,
    CommandResult,
    RunKey,
    SshRemote,
    cleanup_nodes,
    write_ssh_config,
)
from gpucluster.conformance.reports import Report, write_all
from gpucluster.conformance.verdict import CheckResult
from gpucluster.errors import InputError

GROUP_MARKERS = ("gpu", "storage", "control_plane")


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("gpucluster")
    g.addoption("--inventory", default=os.environ.get("GPUCLUSTER_INVENTORY"),
                help="inventory file (default: $GPUCLUSTER_INVENTORY)")
    g.addoption("--run-dir", default=os.environ.get("GPUCLUSTER_RUN_DIR"), help="run folder for reports")
    g.addoption("--limit", default=None, help="comma-separated host names")
    g.addoption("--no-burn", action="store_true", default=False, help="skip the GPU burn")
    g.addoption("--burn-seconds", type=int, default=60, help="GPU burn time per precision")


def _inventory(config: pytest.Config) -> ClusterInventory:
    cached: ClusterInventory | None = getattr(config, "_gc_inventory", None)
    if cached is not None:
        return cached
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
    config._gc_inventory = inv  # type: ignore[attr-defined]
    return inv


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


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "check(id): the conformance check this test implements")
    for g in GROUP_MARKERS:
        config.addinivalue_line("markers", f"{g}: runs on hosts of the inventory group {g}")
    if config.getoption("--inventory", default=None):
        for g in _inventory(config).groups:
            if g not in GROUP_MARKERS:
                config.addinivalue_line("markers", f"{g}: runs on hosts of the inventory group {g}")
    config._gc_results = []  # type: ignore[attr-defined]
    config._gc_started = time.time()  # type: ignore[attr-defined]
    if not hasattr(config, "workerinput"):
        _run_id()


PROBE_JSON = "probe.json"


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Controller, before xdist starts its workers: probe every node at once."""
    config = session.config
    if hasattr(config, "workerinput") or not config.getoption("--inventory", default=None) \
            or config.option.collectonly:
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
    config._gc_unreachable = {k: v.message for k, v in found.items() if not v.ok}  # type: ignore[attr-defined]
    for name, why in config._gc_unreachable.items():  # type: ignore[attr-defined]
        sys.stderr.write(f"{name}: unreachable, its checks fail at once: {why}\n")


def _unreachable(config: pytest.Config) -> dict[str, str]:
    """node -> why, from the controller's probe (workers read it from the run folder)."""
    known: dict[str, str] | None = getattr(config, "_gc_unreachable", None)
    if known is not None:
        return known
    try:
        data = json.loads((_run_dir(config) / PROBE_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    known = {k: str(v.get("message", "")) for k, v in data.items() if v.get("status") != "ok"}
    config._gc_unreachable = known  # type: ignore[attr-defined]
    return known


def _check_id(item: pytest.Item | pytest.Function) -> str:
    m = item.get_closest_marker("check")
    if m is None or not m.args:
        raise pytest.UsageError(f"{item.nodeid}: no @pytest.mark.check(ID)")
    return str(m.args[0])


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "node" not in metafunc.fixturenames:
        return
    inv = _inventory(metafunc.config)
    groups = tuple(m.name for m in metafunc.definition.iter_markers() if m.name in inv.groups or m.name in
                   GROUP_MARKERS)
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
        self._request = request
        self._figures: dict[str, Any] = {}
        request.node.user_properties.append(("gc_figures", self._figures))

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def profile(self) -> dict[str, Any]:
        return self.info.profile

    @property
    def bom(self) -> dict[str, Any]:
        return self.inv.bom

    def figure(self, key: str, value: Any) -> None:
        self._figures[key] = value

    def run(self, command: str, timeout: float = 120) -> CommandResult:
        return self.remote().run(command, timeout=timeout)

    def remote(self) -> SshRemote:
        return SshRemote(self.name, self.ssh_config)

    def require_gpus(self) -> None:
        if self.info.gpu_count == 0:
            pytest.skip(f"profile {self.info.profile_name} has no GPU")

    def require_hcas(self) -> None:
        if self.info.hca_count == 0:
            pytest.skip(f"profile {self.info.profile_name} has no HCA")

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
    import testinfra

    name = str(request.param)
    why = _unreachable(request.config).get(name)
    if why is not None:
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
    # A check whose groups hold no host of the inventory (storage checks on a cluster without
    # storage) gets pytest's empty-parameter-set placeholder: it concerns no node, so it is
    # deselected rather than reported as a node named after the placeholder.
    empty = [i for i in items if not isinstance(_node_param(i), str | None)]
    if empty:
        config.hook.pytest_deselected(items=empty)
        items[:] = [i for i in items if i not in empty]
    for item in items:
        cid = _check_id(item)
        if cid not in checks.CHECKS:
            raise pytest.UsageError(f"{item.nodeid}: unknown check {cid!r}")
        item.user_properties.append(("gc_check", cid))
        callspec = getattr(item, "callspec", None)
        if callspec is not None:
            item.user_properties.append(("gc_node", str(callspec.params.get("node"))))
            param = callspec.params.get("service")
            if param is not None:
                item.user_properties.append(("gc_param", str(param)))


def _message(report: pytest.TestReport) -> str:
    lr = report.longrepr
    if isinstance(lr, tuple) and len(lr) == 3:
        return str(lr[2]).removeprefix("Skipped: ")
    crash = getattr(lr, "reprcrash", None)
    if crash is not None:
        msg = str(crash.message)
        for prefix in ("Failed: ", "AssertionError: "):
            msg = msg.removeprefix(prefix)
        return msg.splitlines()[0] if msg else msg
    return str(lr).strip().splitlines()[-1] if lr else ""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    props = dict(report.user_properties)
    if "gc_check" not in props or "gc_node" not in props:
        return
    outcome: str | None = None
    if report.when == "setup" and report.outcome != "passed":
        outcome = "skipped" if report.skipped else "error"
    elif report.when == "call":
        outcome = report.outcome
    elif report.when == "teardown" and report.failed:
        outcome = "error"
    if outcome is None:
        return
    results: list[CheckResult] = _CONFIG["results"]
    # One result per test: a teardown error replaces the call's outcome.
    results[:] = [r for r in results if r.test != report.nodeid]
    results.append(CheckResult(
        node=str(props["gc_node"]), check_id=str(props["gc_check"]), outcome=outcome,  # type: ignore[arg-type]
        message="" if outcome == "passed" else _message(report), figures=dict(props.get("gc_figures") or {}),
        duration_s=round(float(report.duration), 3), test=report.nodeid, param=props.get("gc_param"),
    ))


_CONFIG: dict[str, Any] = {"results": [], "suite_errors": []}


def pytest_collectreport(report: pytest.CollectReport) -> None:
    # A check module that fails to import must not vanish from the verdict.
    if report.failed:
        _CONFIG["suite_errors"].append(f"{report.nodeid}: {_message(report)}")  # type: ignore[arg-type]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if hasattr(config, "workerinput") or not config.getoption("--inventory", default=None) \
            or config.option.collectonly:
        return
    inv = _inventory(config)
    run_dir = _run_dir(config)
    finished = time.time()
    started: float = getattr(config, "_gc_started", finished)
    interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
    meta: dict[str, Any] = {
        "cluster": inv.cluster_name,
        "inventory": inv.path,
        "started": datetime.fromtimestamp(started, UTC).isoformat(timespec="seconds"),
        "duration_s": round(finished - started, 1),
        "finished_unix": round(finished),
        "burn": not config.getoption("--no-burn"),
        "suite_errors": list(_CONFIG["suite_errors"]),
        "unreachable": dict(_unreachable(config)),
        "run_id": os.environ.get(RUN_ID_ENV, ""),
    }
    down = meta["unreachable"]
    if interrupted:
        # Whatever the run started on the nodes (mpirun, ib_write_bw, a burn) outlives the ssh
        # clients Ctrl-C killed: kill it there, and take the run's key back.
        meta["interrupted"] = True
        cfg = run_dir / "ssh" / "probe" / "ssh_config"
        if cfg.exists():
            meta["interrupt_cleanup"] = cleanup_nodes(
                [SshRemote(n.name, cfg) for n in inv.nodes if n.name not in down], meta["run_id"])
    RunKey(meta["run_id"], run_dir / "ssh" / "run-key" / f"run-key-{meta['run_id']}").delete_local()
    report = Report(meta=meta, nodes=[n.name for n in inv.nodes], results=list(_CONFIG["results"]))
    config._gc_report = report  # type: ignore[attr-defined]
    try:
        write_all(report, run_dir)
    except OSError as exc:
        # One line, and the verdicts still in the terminal summary; never a traceback.
        config._gc_write_error = f"run folder not written: {runs.write_error_line(run_dir, exc)}"  # type: ignore[attr-defined]


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    report: Report | None = getattr(config, "_gc_report", None)
    if report is None:
        return
    terminalreporter.section("gpucluster conformance verdicts")
    down = report.unreachable
    for v in report.verdicts:
        if v.node in down:
            terminalreporter.write_line(f"{v.node:20} UNREACHABLE {down[v.node]}")
            continue
        terminalreporter.write_line(f"{v.node:20} {v.verdict.upper():5} {len(v.passed)} passed, "
                                    f"{len(v.failed)} failed, {len(v.skipped)} skipped")
        for r in v.failed:
            terminalreporter.write_line(f"    FAIL {r.label}: {r.message}")
    if report.meta.get("interrupted"):
        terminalreporter.write_line("interrupted: the verdicts above cover the checks that finished")
    error = getattr(config, "_gc_write_error", None)
    if error:
        terminalreporter.write_line(error)
    else:
        terminalreporter.write_line(f"run folder: {_run_dir(config)}")
