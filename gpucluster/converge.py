"""Converge the cluster: run playbooks/site.yml through ansible-runner.

One run folder per converge, ``runs/<UTC timestamp>-converge/``, holding:

- ``events.jsonl``: every event ansible-runner reported, one JSON object a line;
- ``converge.log``: the text Ansible printed (the events' stdout, in order);
- ``summary.json``: options, timings, the per-host recap and the verdict;
- ``artifacts/``: ansible-runner's own artifacts (its job events and command line).

Progress goes to stderr, one line per host and task. The exit code is 0 when every host
ends with failed=0 and unreachable=0, 1 naming each host that failed, 2 for bad input
(no or malformed inventory, an inventory the validate play rejects).

Which inventory: ``--inventory`` when given; otherwise the lab's inventory for
``--stack`` (default ``Pulumi.lab.yaml``), which ``gpucluster lab up`` writes to
``<state_dir>/<name>/inventory.yml``. A stack that is not a lab needs ``--inventory``.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import yaml

from gpucluster.errors import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, EXIT_OK, InputError
from gpucluster.inventory import parse_inventory_text

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PLAYBOOK = REPO_ROOT / "playbooks" / "site.yml"
DEFAULT_RUNS_DIR = REPO_ROOT / "runs"
ANSIBLE_CFG = REPO_ROOT / "ansible.cfg"
VALIDATE_HOST = "localhost"

REQUIRED_VARS = (
    "gpucluster_cluster_name",
    "gpucluster_target",
    "gpucluster_fabric",
    "gpucluster_bom",
    "gpucluster_profiles",
    "gpucluster_nodes",
)

_STAT_KEYS = {
    "ok": "ok",
    "changed": "changed",
    "failures": "failed",
    "dark": "unreachable",
    "skipped": "skipped",
    "rescued": "rescued",
    "ignored": "ignored",
}


@dataclass(frozen=True)
class HostRecap:
    """One host's line of the PLAY RECAP."""

    host: str
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    rescued: int = 0
    ignored: int = 0

    @property
    def succeeded(self) -> bool:
        return self.failed == 0 and self.unreachable == 0


def parse_recap(stats: Mapping[str, Any]) -> list[HostRecap]:
    """Per-host counts from a ``playbook_on_stats`` event's data (or runner's ``stats``).

    Ansible reports each counter as ``{host: count}`` and leaves out hosts with zero,
    so a host appears if any counter names it.
    """
    counts: dict[str, dict[str, int]] = {}
    for key, name in _STAT_KEYS.items():
        per_host = stats.get(key) or {}
        if not isinstance(per_host, Mapping):
            raise ValueError(f"recap field {key!r} is not a mapping of host to count")
        for host, value in per_host.items():
            counts.setdefault(str(host), {})[name] = int(value)
    return [HostRecap(host=h, **c) for h, c in sorted(counts.items())]


@dataclass
class ConvergeOptions:
    inventory: Path
    playbook: Path = DEFAULT_PLAYBOOK
    check: bool = False
    limit: str | None = None
    tags: list[str] = field(default_factory=list)
    skip_tags: list[str] = field(default_factory=list)
    heavy: bool = False
    forks: int | None = None
    runs_dir: Path = DEFAULT_RUNS_DIR
    label: str = "converge"
    # Passed to the playbook as extra vars (ansible-playbook -e), highest precedence.
    extra_vars: dict[str, Any] = field(default_factory=dict)


@dataclass
class ConvergeResult:
    run_dir: Path
    status: str
    rc: int
    seconds: float
    hosts: list[HostRecap]
    failures: dict[str, str]

    @property
    def failed_hosts(self) -> list[str]:
        return [h.host for h in self.hosts if not h.succeeded]

    @property
    def changed_total(self) -> int:
        return sum(h.changed for h in self.hosts)

    def exit_code(self) -> int:
        failed = self.failed_hosts
        if failed == [VALIDATE_HOST]:
            return EXIT_BAD_INPUT
        if failed or self.rc != 0 or self.status != "successful":
            return EXIT_CHECK_FAILED
        return EXIT_OK

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_dir": str(self.run_dir),
            "status": self.status,
            "rc": self.rc,
            "seconds": round(self.seconds, 3),
            "hosts": {h.host: {k: v for k, v in asdict(h).items() if k != "host"} for h in self.hosts},
            "failed_hosts": self.failed_hosts,
            "failures": self.failures,
            "changed_total": self.changed_total,
            "exit_code": self.exit_code(),
        }


_VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_extra_vars(items: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings (``--extra-vars``) to extra vars; a later KEY wins.

    VALUE is read as YAML, so ``components=[driver]`` is a list, ``flag=true`` a boolean and
    ``n=3`` a number; quote it (``name="'3'"``) for a string. ``KEY=`` is the empty string.
    """
    out: dict[str, Any] = {}
    problems: list[str] = []
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not _VAR_NAME.match(key):
            problems.append(f"--extra-vars {item!r}: expected KEY=VALUE with KEY a variable name")
            continue
        try:
            out[key] = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError as exc:
            problems.append(f"--extra-vars {item!r}: VALUE is not YAML: {str(exc).splitlines()[0]}")
    if problems:
        raise InputError(problems)
    return out


def lab_inventory(stack: str) -> Path:
    """The inventory `gpucluster lab up` wrote for this stack; InputError if the lab is not up."""
    from gpucluster.spec import load_spec

    cluster = load_spec(stack)
    if cluster.spec.target.kind != "lab":
        raise InputError(
            f"--inventory: stack {stack} targets {cluster.spec.target.kind!r}, not the lab: "
            "pass the inventory `gpucluster inventory -o FILE` wrote"
        )
    from gpucluster.lab.plan import plan_lab

    path = Path(plan_lab(cluster).inventory_file)
    if not path.is_file():
        raise InputError(f"--inventory: lab {cluster.name!r} is not up ({path} missing): "
                         f"run `gpucluster lab up --stack {stack}`")
    return path


def load_inventory(path: Path) -> dict[str, Any]:
    """Read and check the inventory's shape before any host is touched."""
    if not path.is_file():
        raise InputError(f"{path}: no such inventory file")
    try:
        data = parse_inventory_text(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not YAML: {str(exc).splitlines()[0]}") from None
    root = data.get("all") if isinstance(data, dict) else None
    if not isinstance(root, dict):
        raise InputError(f"{path}: no `all` group: write it with `gpucluster inventory`")
    problems: list[str] = []
    all_vars = root.get("vars") or {}
    for name in REQUIRED_VARS:
        if name not in all_vars:
            problems.append(f"all.vars.{name}: missing (regenerate with `gpucluster inventory`)")
    hosts = root.get("hosts") or {}
    if not hosts:
        problems.append("all.hosts: no hosts")
    for host, hv in hosts.items():
        if not isinstance(hv, dict) or "gpucluster_profile" not in hv:
            problems.append(f"all.hosts.{host}: gpucluster_profile missing")
        elif hv["gpucluster_profile"] not in (all_vars.get("gpucluster_profiles") or {}):
            problems.append(f"all.hosts.{host}.gpucluster_profile: {hv['gpucluster_profile']!r} "
                            "is not in all.vars.gpucluster_profiles")
    if problems:
        raise InputError(problems, source=str(path))
    inventory: dict[str, Any] = data
    return inventory


def new_run_dir(runs_dir: Path, label: str) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    run_dir = runs_dir / f"{stamp}-{label}"
    n = 1
    while run_dir.exists():
        n += 1
        run_dir = runs_dir / f"{stamp}-{label}-{n}"
    run_dir.mkdir(parents=True)
    return run_dir


class Progress:
    """Turns runner events into one stderr line per host and task, and records them."""

    _STATES = {
        "runner_on_ok": "ok",
        "runner_on_failed": "FAILED",
        "runner_on_unreachable": "UNREACHABLE",
        "runner_on_skipped": "skipped",
        "runner_on_async_failed": "FAILED",
    }

    def __init__(self, out: TextIO, events: TextIO, log: TextIO, *, show_skipped: bool = True) -> None:
        self.out = out
        self.events = events
        self.log = log
        self.show_skipped = show_skipped
        self.started = time.monotonic()
        self.failures: dict[str, str] = {}
        self.stats: dict[str, Any] | None = None

    def __call__(self, event: dict[str, Any]) -> bool:
        self.events.write(json.dumps(event, default=str, sort_keys=True) + "\n")
        text = event.get("stdout")
        if text:
            self.log.write(text + "\n")
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        if kind == "playbook_on_play_start":
            self._line(f"PLAY {data.get('play', '')}")
        elif kind == "playbook_on_stats":
            self.stats = data
        elif kind in self._STATES:
            self._host_line(kind, data)
        elif kind == "runner_item_on_ok" and str(data.get("task_action", "")).endswith("debug"):
            # Per-item messages (e.g. each sysctl key a container skips) name what was skipped.
            msg = str((data.get("res") or {}).get("msg", "")).strip()
            if msg:
                self._line(f"{data.get('host', '?')!s:<16} {'ok':<11} {str(data.get('task', '')).strip()}: {msg[:300]}")
        return True

    def _line(self, text: str) -> None:
        elapsed = time.monotonic() - self.started
        self.out.write(f"[{elapsed:7.1f}s] {text}\n")
        self.out.flush()

    def _host_line(self, kind: str, data: dict[str, Any]) -> None:
        host = str(data.get("host", "?"))
        task = str(data.get("task", "")).strip()
        res = data.get("res") or {}
        state = self._STATES[kind]
        if state == "ok" and res.get("changed"):
            state = "changed"
        if state == "skipped" and not self.show_skipped:
            return
        detail = ""
        if state in ("FAILED", "UNREACHABLE"):
            if data.get("ignore_errors"):
                state = "failed (ignored)"
            else:
                msg = str(res.get("msg") or res.get("stderr") or res.get("reason") or "").strip()
                detail = f": {msg.splitlines()[0][:300]}" if msg else ""
                self.failures.setdefault(host, f"{task}{detail}")
        elif state == "ok" and data.get("task_action", "").endswith("debug"):
            msg = str(res.get("msg", "")).strip()
            if msg:
                detail = f": {msg.splitlines()[0][:300]}"
        self._line(f"{host:<16} {state:<11} {task}{detail}")


def converge(options: ConvergeOptions, *, progress_out: TextIO,
             runner: Callable[..., Any] | None = None) -> ConvergeResult:
    """Run the playbook; every event, the log and a summary land in one run folder."""
    load_inventory(options.inventory)
    if not options.playbook.is_file():
        raise InputError(f"{options.playbook}: no such playbook")
    if runner is None:
        import ansible_runner  # type: ignore[import-untyped]

        runner = ansible_runner.run
    run_dir = new_run_dir(options.runs_dir, options.label)
    cmdline: list[str] = []
    if options.check:
        cmdline.append("--check")
    if options.tags:
        cmdline += ["--tags", ",".join(options.tags)]
    if options.skip_tags:
        cmdline += ["--skip-tags", ",".join(options.skip_tags)]
    extravars: dict[str, Any] = dict(options.extra_vars)
    if options.heavy:
        extravars["gpucluster_heavy_packages"] = True
    started_at = datetime.now(UTC)
    started = time.monotonic()
    with (run_dir / "events.jsonl").open("w", encoding="utf-8") as events, \
            (run_dir / "converge.log").open("w", encoding="utf-8") as log:
        progress = Progress(progress_out, events, log)
        progress._line(f"converge {options.playbook.name} on {options.inventory}"
                       f"{' --check' if options.check else ''}{' --limit ' + options.limit if options.limit else ''}"
                       f" (run folder {run_dir})")
        kwargs: dict[str, Any] = {
            "private_data_dir": str(run_dir),
            "project_dir": str(REPO_ROOT),
            "playbook": str(options.playbook.resolve()),
            "inventory": str(options.inventory.resolve()),
            "envvars": {"ANSIBLE_CONFIG": str(ANSIBLE_CFG), "ANSIBLE_FORCE_COLOR": "0",
                        "ANSIBLE_DEPRECATION_WARNINGS": "0"},
            "event_handler": progress,
            "quiet": True,
            "suppress_env_files": True,
        }
        # ansible-playbook from the same environment as this package, whether or not that
        # environment's bin/ is on PATH (runner looks the command up on our own PATH).
        bindir = str(Path(sys.executable).parent)
        if (Path(bindir) / "ansible-playbook").is_file() and bindir not in os.environ.get("PATH", "").split(os.pathsep):
            os.environ["PATH"] = f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"
        if cmdline:
            kwargs["cmdline"] = " ".join(cmdline)
        if options.limit:
            # The validate play runs on the controller whatever the limit.
            kwargs["limit"] = f"{options.limit},{VALIDATE_HOST}"
        if extravars:
            kwargs["extravars"] = extravars
        if options.forks:
            kwargs["forks"] = options.forks
        result = runner(**kwargs)
    seconds = time.monotonic() - started
    stats = progress.stats if progress.stats is not None else (getattr(result, "stats", None) or {})
    hosts = parse_recap(stats)
    converge_result = ConvergeResult(
        run_dir=run_dir,
        status=str(getattr(result, "status", "unknown")),
        rc=int(getattr(result, "rc", 1) or 0),
        seconds=seconds,
        hosts=hosts,
        failures=progress.failures,
    )
    summary = {
        "started": started_at.isoformat(),
        "inventory": str(options.inventory),
        "playbook": str(options.playbook),
        "check": options.check,
        "limit": options.limit,
        "tags": options.tags,
        "heavy": options.heavy,
        # Names only: a value passed with -e may be a secret.
        "extra_vars": sorted(options.extra_vars),
        **converge_result.as_dict(),
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return converge_result


def format_recap(result: ConvergeResult) -> str:
    lines = [f"{'host':<16} {'ok':>4} {'changed':>7} {'failed':>6} {'unreach':>7} {'skipped':>7}"]
    for h in result.hosts:
        lines.append(f"{h.host:<16} {h.ok:>4} {h.changed:>7} {h.failed:>6} {h.unreachable:>7} {h.skipped:>7}")
    return "\n".join(lines)
