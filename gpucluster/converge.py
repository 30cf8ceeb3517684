"""Converge the cluster: run playbooks/site.yml through ansible-runner.

One run folder per converge, ``runs/<UTC timestamp>-<random>-converge/`` (mode 0700, its files
0600: the run works under umask 077), holding:

- ``events.jsonl``: every event ansible-runner reported, one JSON object a line;
- ``converge.log``: the text Ansible printed (the events' stdout, in order);
- ``summary.json``: options, timings, the per-host recap and the verdict;
- ``artifacts/``: ansible-runner's own artifacts (its job events and command line, with the
  names of the environment's variables but not their values).

What the run folder and the process list never hold (docs/security.md): the controller's
environment (``gpucluster up`` runs converge with Pulumi's and the cloud's credentials in it) and
the values of ``--extra-vars``. ansible-playbook gets an allowlisted environment
(:func:`ansible_env`); extra vars reach it as ``-e @FILE``, a 0600 file in the run folder removed
when the run ends; ansible-runner's ``command`` artifact keeps the variables' names only.

Progress goes to stderr, one line per host and task. The exit code is 0 when every host
ends with failed=0 and unreachable=0, 1 naming each host that failed, 2 for bad input
(no or malformed inventory, an inventory the validate play rejects).

Which inventory: ``--inventory`` when given; otherwise the inventory of ``--stack`` (default
``Pulumi.lab.yaml``) where :mod:`gpucluster.paths` names it, whatever the target (``gpucluster
inventory -o`` writes it there; ``gpucluster lab up`` does the same for a lab). Before any lock is
taken or host touched, the inventory is validated through its typed model
(:mod:`gpucluster.inventory_model`), the one place its rules live: nothing here knows the target.

Under way, a converge holds the cluster's lock (a second converge or verify of the same
inventory stops at once, exit 2, naming the holder). On a real target the nodes' host keys are
checked against the cluster's known_hosts (:mod:`gpucluster.hostkeys`): a first contact records
them, a changed key stops the run before Ansible connects (exit 2). Ctrl-C (or SIGTERM) ends
ansible-playbook's whole process group, and the summary of what finished is still written
(exit 130). A full disk costs the run folder, never the run's outcome: one error line, the
recap, exit 2 unless a host failed. ``debug_no_log`` (``--debug-no-log`` or
``GPUCLUSTER_DEBUG_NO_LOG=1``) passes ``gpucluster_debug_no_log=true``, which the roles' secret
tasks read to lift ``no_log`` so a failure among them shows its cause (secrets then reach the
run folder and the terminal).
"""

from __future__ import annotations

import configparser
import contextlib
import json
import os
import re
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import yaml

from gpucluster import hostkeys, jinja_cache, mitogen, paths, runs, sockets
from gpucluster.errors import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, EXIT_OK, InputError
from gpucluster.inventory_model import Inventory, read_inventory
from gpucluster.spec.contract import OVERRIDE_VARS, refuse_extra_vars

REPO_ROOT = paths.REPO_ROOT
DEFAULT_PLAYBOOK = REPO_ROOT / "playbooks" / "site.yml"
DEFAULT_RUNS_DIR = paths.RUNS_DIR
ANSIBLE_CFG = REPO_ROOT / "ansible.cfg"
VALIDATE_HOST = "localhost"
DEBUG_NO_LOG_ENV = "GPUCLUSTER_DEBUG_NO_LOG"
# In the environment of everything the run starts on the controller, to find what outlives
# ansible-playbook's process group after Ctrl-C.
RUN_TAG = "GPUCLUSTER_CONVERGE_RUN"
DEBUG_NO_LOG_VAR = "gpucluster_debug_no_log"
# What a failed task under no_log reports instead of its cause.
NO_LOG_HINT = f"output hidden by no_log; rerun with --debug-no-log ({DEBUG_NO_LOG_ENV}=1) to see the cause"
# How often ansible-runner asks whether to cancel (its default is 5 s).
CANCEL_POLL_S = 0.5
# The extra vars, for ansible-playbook's -e @FILE, while the run lasts (removed at its end).
EXTRA_VARS_FILE = "extra-vars.yml"
# The run's compiled templates, shared by Ansible's workers (gpucluster/jinja_cache.py); removed at the end.
JINJA_CACHE_DIR = "jinja"

# What ansible-playbook keeps of the controller's environment: what finds programs and the
# user's files, the locale, the SSH agent, and Ansible's and gpucluster's own settings. Anything
# else (AWS_SECRET_ACCESS_KEY, PULUMI_ACCESS_TOKEN, ARM_CLIENT_SECRET, OCI_*...) stays behind.
ENV_KEPT = frozenset({"HOME", "LANG", "LANGUAGE", "LOGNAME", "PATH", "PYTHONPATH", "SHELL", "SSH_AUTH_SOCK",
                      "TERM", "TMPDIR", "TZ", "USER", "VIRTUAL_ENV", "XDG_RUNTIME_DIR"})
ENV_KEPT_PREFIXES = ("ANSIBLE_", "GPUCLUSTER_", "LC_")
# ... except, among those, a name that says it holds a secret (a path to one, *_FILE, is kept).
_SECRET_NAME = re.compile(r"PASS|SECRET|TOKEN|CREDENTIAL|PRIVATE|(^|_)KEY(_|$)")

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
    # Passed to the playbook as extra vars (ansible-playbook -e), highest precedence; a node contract
    # override among them (gpucluster.spec.contract.OVERRIDE_VARS) is refused: set it in the inventory.
    extra_vars: dict[str, Any] = field(default_factory=dict)
    # Lift no_log on the roles' secret tasks (they read gpucluster_debug_no_log).
    debug_no_log: bool = False
    # Run over Mitogen's linear strategy instead of the stock one (opt-in; gpucluster/mitogen.py).
    mitogen: bool = False
    # One line per host for each skipped task, instead of one line per task naming the hosts.
    show_skipped: bool = False


@dataclass
class ConvergeResult:
    run_dir: Path
    status: str
    rc: int
    seconds: float
    hosts: list[HostRecap]
    failures: dict[str, str]
    interrupted: bool = False
    # One line when the run folder could not be written (a full disk): the run went on without it.
    run_folder_error: str | None = None
    # The value of RUN_TAG in the environment of everything this run started.
    run_id: str = ""

    @property
    def failed_hosts(self) -> list[str]:
        return [h.host for h in self.hosts if not h.succeeded]

    @property
    def changed_total(self) -> int:
        return sum(h.changed for h in self.hosts)

    def exit_code(self) -> int:
        if self.interrupted:
            return runs.EXIT_INTERRUPTED
        failed = self.failed_hosts
        if failed == [VALIDATE_HOST]:
            return EXIT_BAD_INPUT
        if failed or self.rc != 0 or self.status != "successful":
            return EXIT_CHECK_FAILED
        if self.run_folder_error:
            return EXIT_BAD_INPUT
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
            "interrupted": self.interrupted,
            "exit_code": self.exit_code(),
            "run_id": self.run_id,
        }


_VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_extra_vars(items: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings (``--extra-vars``) to extra vars; a later KEY wins.

    VALUE is read as YAML, so ``components=[driver]`` is a list, ``flag=true`` a boolean and
    ``n=3`` a number; quote it (``name="'3'"``) for a string. ``KEY=`` is the empty string.
    ``@FILE`` reads a YAML mapping of variables from FILE: a secret given so never shows on the
    process list, as one on the command line does.
    """
    out: dict[str, Any] = {}
    problems: list[str] = []
    for item in items:
        if item.startswith("@"):
            problems += _extra_vars_file(item[1:], out)
            continue
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


def _extra_vars_file(name: str, out: dict[str, Any]) -> list[str]:
    """Variables from ``-e @FILE`` into ``out``; the problems, naming the file."""
    try:
        data = yaml.safe_load(Path(name).read_text(encoding="utf-8"))
    except OSError as exc:
        return [f"--extra-vars @{name}: cannot read it: {runs.describe_os_error(exc)}"]
    except yaml.YAMLError as exc:
        return [f"--extra-vars @{name}: not YAML: {str(exc).splitlines()[0]}"]
    if not isinstance(data, dict):
        return [f"--extra-vars @{name}: expected a mapping of variable names to values"]
    bad = [str(k) for k in data if not isinstance(k, str) or not _VAR_NAME.match(k)]
    if bad:
        return [f"--extra-vars @{name}: not variable names: {', '.join(bad[:5])}"]
    out.update(data)
    return []


def stack_inventory(stack: str | Path) -> Path:
    """The inventory of a stack file, where gpucluster/paths.py names it; InputError naming the
    command that writes it when it is not there."""
    return paths.existing_inventory(paths.resolve(stack))


# The name bench/bench_converge.py imports; a lab stack is no different from any other here.
lab_inventory = stack_inventory


def load_inventory(path: Path) -> Inventory:
    """Read and check the inventory against its typed contract before any host is touched."""
    inventory, _ = read_inventory(path)
    return inventory


# What Ansible's host_group_vars plugin reads for a group or host NAME in a folder beside the inventory
# file or the playbook: the first of NAME, NAME.yml, NAME.yaml, NAME.json there, a folder of them read
# whole (its own files with those extensions or none, its folders without one, hidden files and
# backups~ left out).
_VARS_EXTENSIONS = ("", ".yml", ".yaml", ".json")


def vars_files(folder: Path, names: Iterable[str]) -> list[Path]:
    """The files Ansible reads as the variables of ``names`` (groups or hosts) from ``folder``
    (a ``group_vars/`` or ``host_vars/``), in its order."""
    found: list[Path] = []
    for name in names:
        path = next((p for ext in _VARS_EXTENSIONS if (p := folder / f"{name}{ext}").exists()), None)
        if path is not None:
            found += _vars_folder_files(path) if path.is_dir() else [path]
    return found


def _vars_folder_files(folder: Path) -> list[Path]:
    found: list[Path] = []
    for path in sorted(folder.iterdir()):
        if path.name.startswith(".") or path.name.endswith("~"):
            continue
        if path.is_dir() and not path.suffix:
            found += _vars_folder_files(path)
        elif path.is_file() and path.suffix in _VARS_EXTENSIONS:
            found.append(path)
    return found


def variables_set(path: Path) -> list[str]:
    """The variables a YAML (or JSON) vars file sets at its top level; none for a file that cannot be
    read or is no mapping (Ansible refuses it itself; a vault-encrypted one cannot be seen into). Composed,
    not loaded: a value's tag (``!vault``, ``!unsafe``) is not this reader's to know."""
    try:
        node = yaml.compose(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return []
    if not isinstance(node, yaml.MappingNode):
        return []
    return [key.value for key, _ in node.value if isinstance(key, yaml.ScalarNode)]


def refuse_vars_folder_overrides(folders: Iterable[Path], inventory: Inventory) -> None:
    """InputError, one line naming each file and variable, when a ``group_vars/`` or ``host_vars/``
    file in ``folders`` (beside the inventory file, beside the playbook) that Ansible reads for this
    inventory's groups or hosts sets a node contract override (gpucluster.spec.contract.OVERRIDE_VARS):
    the role would follow it and the conformance suite, which reads the inventory file alone, would not."""
    groups = ["all", "ungrouped", *inventory.children]
    found: list[str] = []
    for folder in dict.fromkeys(f.resolve() for f in folders):
        for kind, names in (("group_vars", groups), ("host_vars", list(inventory.hosts))):
            for path in vars_files(folder / kind, names):
                found += [f"{path} sets {var}" for var in variables_set(path) if var in OVERRIDE_VARS]
    if found:
        raise InputError(f"{'; '.join(found)}: the node contract's override, which the conformance suite reads "
                         "from the inventory file only; set it there (a host's variables or all.vars) instead")


def new_run_dir(runs_dir: Path, label: str) -> Path:
    return runs.new_run_dir(runs_dir, label)


class Progress:
    """Turns runner events into one stderr line per host and task, and records them."""

    _STATES = {
        "runner_on_ok": "ok",
        "runner_on_failed": "FAILED",
        "runner_on_unreachable": "UNREACHABLE",
        "runner_on_skipped": "skipped",
        "runner_on_async_failed": "FAILED",
    }

    # runner event -> the recap counter it adds to (what a run cut short still tells).
    _COUNTS = {"runner_on_ok": "ok", "runner_on_failed": "failures", "runner_on_unreachable": "dark",
               "runner_on_skipped": "skipped", "runner_on_async_failed": "failures"}

    def __init__(self, out: TextIO, events: TextIO | runs.RunFile, log: TextIO | runs.RunFile, *,
                 show_skipped: bool = False) -> None:
        self.out = out
        self.events = events
        self.log = log
        self.show_skipped = show_skipped
        self.started = time.monotonic()
        self.failures: dict[str, str] = {}
        self.stats: dict[str, Any] | None = None
        # Counted from the events as they come: the recap of a run that ends before its own.
        self.counted: dict[str, dict[str, int]] = {}
        # Hosts that skipped the task now running, printed as one line when the next one starts.
        self._skipped_here: list[str] = []

    def __call__(self, event: dict[str, Any]) -> bool:
        self.events.write(json.dumps(event, default=str, sort_keys=True) + "\n")
        text = event.get("stdout")
        if text:
            self.log.write(text + "\n")
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        if kind in ("playbook_on_play_start", "playbook_on_task_start", "playbook_on_stats"):
            self._flush_skipped()
        if kind == "playbook_on_play_start":
            self._line(f"PLAY {data.get('play', '')}")
        elif kind == "playbook_on_task_start":
            # Each task says when it starts, with its role: a long one is visible while it runs.
            role = str(data.get("role") or "").strip()
            self._line(f"TASK {role + ' : ' if role else ''}{str(data.get('task', '')).strip()}")
        elif kind == "playbook_on_stats":
            self.stats = data
        elif kind in self._STATES:
            self._count(kind, data)
            self._host_line(kind, data)
        elif kind == "runner_item_on_ok" and str(data.get("task_action", "")).endswith("debug"):
            # Per-item messages (e.g. each sysctl key a container skips) name what was skipped.
            msg = str((data.get("res") or {}).get("msg", "")).strip()
            if msg:
                self._line(f"{data.get('host', '?')!s:<16} {'ok':<11} {str(data.get('task', '')).strip()}: {msg[:300]}")
        return True

    def _count(self, kind: str, data: dict[str, Any]) -> None:
        host = str(data.get("host", "?"))
        key = self._COUNTS[kind]
        if key == "failures" and data.get("ignore_errors"):
            key = "ignored"
        per = self.counted.setdefault(key, {})
        per[host] = per.get(host, 0) + 1
        if kind == "runner_on_ok" and (data.get("res") or {}).get("changed"):
            changed = self.counted.setdefault("changed", {})
            changed[host] = changed.get(host, 0) + 1

    def _flush_skipped(self) -> None:
        if self._skipped_here:
            hosts = self._skipped_here
            shown = ", ".join(hosts[:6]) + (f" and {len(hosts) - 6} more" if len(hosts) > 6 else "")
            self._line(f"{'':<16} {'skipped':<11} on {len(hosts)} host(s): {shown}")
            self._skipped_here = []

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
            self._skipped_here.append(host)
            return
        detail = ""
        if state in ("FAILED", "UNREACHABLE"):
            if data.get("ignore_errors"):
                state = "failed (ignored)"
            else:
                msg = _failure_cause(res)
                detail = f": {msg[:300]}" if msg else ""
                self.failures.setdefault(host, f"{task}{detail}")
        elif state == "ok" and data.get("task_action", "").endswith("debug"):
            msg = str(res.get("msg", "")).strip()
            if msg:
                detail = f": {msg.splitlines()[0][:300]}"
        self._line(f"{host:<16} {state:<11} {task}{detail}")


def _failure_cause(res: Mapping[str, Any]) -> str:
    """One line saying why a task failed, also when no_log hid its result."""
    if "censored" in res:
        return NO_LOG_HINT
    msg = str(res.get("msg") or "").strip()
    # A command run with a terminal (raw under Mitogen, which ignores usetty) has its stderr in its
    # stdout, and OpenSSH's closing notice in stderr: that notice says nothing about the failure.
    output = _SSH_CLOSED.sub("", str(res.get("stderr") or "")).strip() or str(res.get("stdout") or "").strip()
    # ansible-core's summary of a command's exit status: "non-zero return code" up to 2.19,
    # "The command exited with a non-zero return code." from 2.20.
    if output and (not msg or "non-zero return code" in msg.lower()):
        # A command's own words say more than Ansible's summary of its exit status.
        return _command_words(output, res.get("rc"))
    if _ECHOED_COMMAND.match(msg):
        # The apt module echoes its whole command line before the command's stderr
        # ("'/usr/bin/apt-get ... install ...' failed: E: ..."): the words after the echo say why.
        return _command_words(_ECHOED_COMMAND.sub("", msg, count=1), res.get("rc"))
    text = msg or str(res.get("reason") or "").strip()
    return text.splitlines()[0] if text else ""


# OpenSSH's notice when a command run with a terminal ends (then all its stderr holds).
_SSH_CLOSED = re.compile(r"^Shared connection to \S+ closed\.\s*$", re.MULTILINE)
# "'<command line>' failed: <its stderr>": how ansible.builtin.apt (and others) report a command.
_ECHOED_COMMAND = re.compile(r"^'[^\n]*?' failed: ", re.DOTALL)


def _command_words(stderr: str, rc: Any) -> str:
    """The lines of a command's stderr that say why: apt's and dpkg's errors (E:, dpkg: error), else the last."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(("E:", "dpkg: error", "Err:"))]
    words = " | ".join(errors[:3]) if errors else (lines[-1] if lines else "")
    return f"rc {rc}: {words}" if rc is not None else words


# Connection types that reach a node over SSH (the others need no host key).
_SSH_CONNECTIONS = {"ssh", "paramiko", "paramiko_ssh", "mitogen_ssh", "smart"}


def ssh_targets(inventory: Inventory) -> list[tuple[str, str, int, str | None, str | None]]:
    """(name, address, port, user, key) of every host Ansible reaches over SSH."""
    # ansible_connection is no variable of the contract: a role's or a person's, kept as an extra.
    default = (inventory.vars.model_extra or {}).get("ansible_connection", "ssh")
    out = []
    for name, hv in inventory.hosts.items():
        if str((hv.model_extra or {}).get("ansible_connection", default)) not in _SSH_CONNECTIONS:
            continue
        # No ansible_user: ssh's own default login, as Ansible leaves it.
        user = hv.ansible_user if "ansible_user" in hv.model_fields_set else None
        out.append((name, hv.ansible_host, hv.ansible_port, user, hv.ansible_ssh_private_key_file))
    return out


def limited_hosts(inventory: Inventory, limit: str | None) -> set[str] | None:
    """The hosts a ``--limit`` of host and group names selects; None for every host (no limit, or
    a pattern with wildcards or exclusions, which Ansible alone resolves)."""
    if not limit:
        return None
    groups = {name: set(members) for name, members in inventory.groups().items()}
    hosts = set(inventory.hosts)
    chosen: set[str] = set()
    for term in (t.strip() for t in re.split(r"[,:]", limit) if t.strip()):
        if any(c in term for c in "*?[!&~@"):
            return None
        if term in hosts:
            chosen.add(term)
        elif term in groups:
            chosen |= groups[term]
        else:  # `all`, a nested group, a name Ansible resolves some other way
            return None
    return chosen


def probe_host_keys(inventory: Inventory, policy: hostkeys.HostKeyPolicy, limit: str | None = None,
                    jump: tuple[hostkeys.Jump, Path] | None = None) -> None:
    """First contact records each node's key; a node whose key changed stops the run (InputError).

    Unreachable nodes are left to Ansible, which reports them in its recap. With a ``--limit``
    of names, only the hosts it selects are probed: a node outside it never stops the run.
    """
    only = limited_hosts(inventory, limit)
    targets = {t[0]: t for t in ssh_targets(inventory) if only is None or t[0] in only}
    found = hostkeys.probe(
        [(name, t[1]) for name, t in targets.items()],
        lambda name: hostkeys.direct_argv(targets[name][1], targets[name][2], targets[name][3], targets[name][4],
                                          policy, jump=jump),
        policy)
    changed = [f"{name}: {r.message}" for name, r in sorted(found.items()) if r.status == "host_key_changed"]
    if changed:
        raise InputError(changed, source="host keys")


def _cfg_ssh_args(cfg: Path = ANSIBLE_CFG) -> str:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(cfg, encoding="utf-8")
    return parser.get("ssh_connection", "ssh_args", fallback="")


def ansible_ssh_args(policy: hostkeys.HostKeyPolicy, cfg: Path = ANSIBLE_CFG) -> str:
    """ansible.cfg's ssh_args with the cluster's host key settings in place of its own."""
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(cfg, encoding="utf-8")
    words = shlex.split(parser.get("ssh_connection", "ssh_args", fallback=""))
    kept: list[str] = []
    drop = {"userknownhostsfile", "stricthostkeychecking", "globalknownhostsfile", "hashknownhosts"}
    i = 0
    while i < len(words):
        if words[i] == "-o" and i + 1 < len(words):
            if words[i + 1].split("=", 1)[0].split()[0].lower() not in drop:
                kept += words[i:i + 2]
            i += 2
            continue
        kept.append(words[i])
        i += 1
    # Keys were recorded by the probe: from here on a different one is refused.
    options = [(k, "yes" if k == "StrictHostKeyChecking" else v) for k, v in policy.ssh_options()]
    kept += [arg for k, v in options for arg in ("-o", f"{k}={v}")]
    return " ".join(shlex.quote(w) for w in kept)


def fetched_secrets(options: ConvergeOptions, inventory: Inventory) -> list[Path]:
    """Where the control-plane role fetches admin.conf (cluster-admin's key) on the controller: the
    node contract's place beside the inventory, or the inventory's kubernetes_control_plane_kubeconfig_fetch_dest
    (:meth:`Inventory.kubeconfig_file`, which ``gpucluster up`` reads too)."""
    return [inventory.kubeconfig_file(options.inventory)]


def tighten_fetched_secrets(candidates: list[Path], made: set[Path]) -> list[Path]:
    """Each fetched file of ``candidates`` 0600, whatever mode it had on the node, and its folder
    0700 only where this converge made it (``made``: the folders missing before it ran): a fetch
    into /tmp (the inventory's ``..._fetch_dest: /tmp/admin.conf``) must not close /tmp to everyone else. Never
    through a link. Returns the files found."""
    found = []
    for path in candidates:
        if not runs.chmod_file_private(path):
            continue
        found.append(path)
        if path.parent in made:
            runs.chmod_dir_private(path.parent)
    return found


def env_kept(name: str) -> bool:
    """Whether ansible-playbook inherits the controller's variable ``name`` (:data:`ENV_KEPT`)."""
    if name not in ENV_KEPT and not name.startswith(ENV_KEPT_PREFIXES):
        return False
    if name == jinja_cache.DIR_ENV:
        return False  # only this run's own folder (jinja_template_cache), never one inherited
    return name in ENV_KEPT or name.endswith("_FILE") or not _SECRET_NAME.search(name)


def ansible_env(env: Mapping[str, str], inherited: Mapping[str, str]) -> dict[str, str]:
    """``env`` (ansible-runner's: the controller's ``inherited`` environment, then its own
    settings and ours) without what came from ``inherited`` unless :func:`env_kept` keeps it."""
    return {k: v for k, v in env.items() if k not in inherited or inherited[k] != v or env_kept(k)}


def run_ansible(**kwargs: Any) -> Any:
    """``ansible_runner.run(**kwargs)`` through its public RunnerConfig and Runner, with
    ansible-playbook's environment cut to :func:`ansible_env` (ansible-runner seeds it with the
    whole of ``os.environ`` and records it in ``artifacts/<ident>/command``), and that record
    keeping the variables' names only."""
    import ansible_runner  # type: ignore[import-untyped]

    handlers = {k: kwargs.pop(k) for k in ("event_handler", "cancel_callback") if k in kwargs}
    config = ansible_runner.RunnerConfig(**kwargs)
    config.prepare()
    config.env = ansible_env(config.env, os.environ)
    runner = ansible_runner.Runner(config, **handlers)
    try:
        runner.run()
    finally:
        redact_command_artifact(Path(config.artifact_dir) / "command")
    return runner


def redact_command_artifact(path: Path) -> None:
    """ansible-runner's record of the command: its environment's values go, its names stay."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if isinstance(record, dict) and isinstance(record.get("env"), dict):
        record["env"] = sorted(record["env"])
        with contextlib.suppress(OSError):
            runs.write_private(path, json.dumps(record) + "\n")


def jinja_template_cache(run_dir: Path) -> Path | None:
    """The run's folder for compiled templates (this user's own, 0700), unless
    ``GPUCLUSTER_JINJA_CACHE=0`` or the folder cannot be made private: a speed-up only, so the
    run goes on without it."""
    if not jinja_cache.wanted(os.environ):
        return None
    try:
        return sockets.make_private(run_dir / JINJA_CACHE_DIR)
    except (InputError, OSError):
        return None


def write_extra_vars(run_dir: Path, extravars: Mapping[str, Any]) -> Path:
    """The extra vars as a 0600 YAML file in the run folder, for ``-e @FILE``: their values
    never reach a command line (the process list, runner's command artifact)."""
    path = run_dir / EXTRA_VARS_FILE
    runs.write_private(path, yaml.safe_dump(dict(extravars), default_flow_style=False))
    return path


def converge(options: ConvergeOptions, *, progress_out: TextIO,
             runner: Callable[..., Any] | None = None) -> ConvergeResult:
    """Run the playbook; every event, the log and a summary land in one run folder."""
    # The roles would take a contract override given with -e; the suite reads the inventory alone.
    refuse_extra_vars(options.extra_vars)
    inventory = load_inventory(options.inventory)
    # ... and so would one in a group_vars/ or host_vars/ folder Ansible reads beside the inventory or the playbook.
    refuse_vars_folder_overrides((options.inventory.parent, options.playbook.parent), inventory)
    # Where the control plane's role would fetch admin.conf (an InputError, before any host, for a
    # place the inventory states wrongly).
    fetched = fetched_secrets(options, inventory)
    if not options.playbook.is_file():
        raise InputError(f"{options.playbook}: no such playbook")
    if runner is None:
        runner = run_ansible
    with runs.cluster_lock(options.inventory, "gpucluster converge") as lock, runs.private_umask():
        policy = hostkeys.policy_for_inventory(inventory)
        # Through a bastion: Ansible's ssh, and the probe's, reach it as the inventory says
        # (ProxyJump), with its login and host key policy from a config file ssh hands on to it.
        jump = hostkeys.jump_of(inventory)
        through = None if jump is None else (jump, hostkeys.jump_config_for(
            inventory.vars.gpucluster_cluster_name, jump, policy))
        if policy.checked:
            probe_host_keys(inventory, policy, options.limit, through)
        missing = {p.parent for p in fetched if not os.path.lexists(p.parent)}
        run_dir = new_run_dir(options.runs_dir, options.label)
        # Ansible's SSH masters listen in a folder this run made and checked, and end with it.
        control = sockets.control_dir(run_dir / "ssh")
        try:
            result = _converge(options, progress_out, runner, run_dir, policy, lock, control,
                               through[1] if through else None)
        finally:
            for problem in sockets.release(run_dir / "ssh"):
                progress_out.write(f"warning: {problem}\n")
            shutil.rmtree(run_dir / JINJA_CACHE_DIR, ignore_errors=True)
        tighten_fetched_secrets(fetched, missing)
        return result


def _converge(options: ConvergeOptions, progress_out: TextIO, runner: Callable[..., Any], run_dir: Path,
              policy: hostkeys.HostKeyPolicy, lock: Path, control: Path,
              jump_config: Path | None = None) -> ConvergeResult:
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
    run_tag = f"{RUN_TAG}={runs.new_run_id()}"
    envvars = {"ANSIBLE_CONFIG": str(ANSIBLE_CFG), "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_DEPRECATION_WARNINGS": "0",
               RUN_TAG: run_tag.split("=", 1)[1], "ANSIBLE_SSH_CONTROL_PATH_DIR": str(control),
               # The rolling upgrade's verify gate runs under this converge's lock.
               **runs.held_env(lock)}
    if (cache := jinja_template_cache(run_dir)) is not None:
        envvars[jinja_cache.DIR_ENV] = str(cache)
    if policy.checked:
        envvars["ANSIBLE_HOST_KEY_CHECKING"] = "True"
        envvars["ANSIBLE_SSH_ARGS"] = ansible_ssh_args(policy)
    if jump_config is not None:
        # The hosts' ansible_ssh_common_args name the bastion (ProxyJump); ssh hands this file on
        # to the jump connection, which takes the bastion's login and host key policy from it.
        base = envvars.get("ANSIBLE_SSH_ARGS") or _cfg_ssh_args()
        envvars["ANSIBLE_SSH_ARGS"] = f"{base} -F {shlex.quote(str(jump_config))}".strip()
    if options.debug_no_log:
        extravars[DEBUG_NO_LOG_VAR] = True
        envvars[DEBUG_NO_LOG_ENV] = "1"
    use_mitogen = mitogen.wanted(options.mitogen)
    if use_mitogen:
        envvars.update(mitogen.strategy_env())
    started_at = datetime.now(UTC)
    started = time.monotonic()
    with runs.RunFile(run_dir / "events.jsonl") as events, runs.RunFile(run_dir / "converge.log") as log, \
            runs.Interrupts() as stops:
        progress = Progress(progress_out, events, log, show_skipped=options.show_skipped)
        progress._line(f"converge {options.playbook.name} on {options.inventory}"
                       f"{' --check' if options.check else ''}{' --limit ' + options.limit if options.limit else ''}"
                       f" (run folder {run_dir})")
        if options.debug_no_log:
            progress._line(f"no_log lifted ({DEBUG_NO_LOG_VAR}=true): secrets may reach this terminal and "
                           "the run folder")

        def on_signal(count: int) -> None:
            if count == 1:
                progress._line("interrupted: stopping ansible-playbook (its whole process group)")

        stops.on_signal(on_signal)
        kwargs: dict[str, Any] = {
            "private_data_dir": str(run_dir),
            "project_dir": str(REPO_ROOT),
            "playbook": str(options.playbook.resolve()),
            "inventory": str(options.inventory.resolve()),
            "envvars": envvars,
            "event_handler": progress,
            # ansible-runner kills ansible-playbook's process group (SIGKILL) when this says so.
            "cancel_callback": stops.event.is_set,
            "quiet": True,
            "suppress_env_files": True,
        }
        # ansible-playbook from the same environment as this package, whether or not that
        # environment's bin/ is on PATH (runner looks the command up on our own PATH).
        bindir = str(Path(sys.executable).parent)
        if (Path(bindir) / "ansible-playbook").is_file() and bindir not in os.environ.get("PATH", "").split(os.pathsep):
            os.environ["PATH"] = f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"
        if options.limit:
            # The validate play runs on the controller whatever the limit.
            kwargs["limit"] = f"{options.limit},{VALIDATE_HOST}"
        if options.forks:
            kwargs["forks"] = options.forks
        # Runner asks cancel_callback each time it wakes (its pexpect timeout, 5 s by default); it
        # reads its settings from this file only (a `settings` argument is dropped). Without it
        # (a full disk) Ctrl-C just takes a few seconds longer.
        with contextlib.suppress(OSError):
            (run_dir / "env").mkdir(mode=runs.RUN_DIR_MODE, exist_ok=True)
            runs.write_private(run_dir / "env" / "settings", json.dumps({"pexpect_timeout": CANCEL_POLL_S}) + "\n")
        runner_error: OSError | None = None
        vars_file: Path | None = None
        try:
            if extravars:
                vars_file = write_extra_vars(run_dir, extravars)
                cmdline += ["-e", f"@{vars_file}"]
            if cmdline:
                kwargs["cmdline"] = " ".join(shlex.quote(w) for w in cmdline)
            result = runner(**kwargs)
        except OSError as exc:
            # ansible-runner writes its own artifacts into the run folder: a full disk stops it there.
            runner_error, result = exc, None
        finally:
            if vars_file is not None:
                vars_file.unlink(missing_ok=True)
        interrupted = stops.interrupted
        if interrupted:
            # Runner SIGKILLed ansible-playbook's process group; Mitogen's multiplexer has a
            # session of its own and would linger.
            left = runs.kill_tagged_local(run_tag)
            if left:
                progress._line(f"stopped {left} process(es) of the run outside ansible-playbook's process group")
    seconds = time.monotonic() - started
    stats = progress.stats if progress.stats is not None else (getattr(result, "stats", None) or progress.counted)
    hosts = parse_recap(stats)
    write_error = events.error or log.error or runner_error
    converge_result = ConvergeResult(
        run_dir=run_dir,
        status="canceled" if interrupted else str(getattr(result, "status", "failed")),
        rc=int(getattr(result, "rc", 1) or 0) if result is not None else 1,
        seconds=seconds,
        hosts=hosts,
        failures=progress.failures,
        interrupted=interrupted,
        run_folder_error=runs.write_error_line(run_dir, write_error) if write_error else None,
        run_id=run_tag.split("=", 1)[1],
    )
    summary = {
        "started": started_at.isoformat(),
        "inventory": str(options.inventory),
        "playbook": str(options.playbook),
        "check": options.check,
        "limit": options.limit,
        "tags": options.tags,
        "heavy": options.heavy,
        "debug_no_log": options.debug_no_log,
        "strategy": mitogen.STRATEGY if use_mitogen else "linear",
        "host_keys": str(policy.known_hosts) if policy.known_hosts else "not checked (lab)",
        # Names only: a value passed with -e may be a secret.
        "extra_vars": sorted(options.extra_vars),
        **converge_result.as_dict(),
    }
    try:
        runs.write_private(run_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    except OSError as exc:
        converge_result.run_folder_error = converge_result.run_folder_error or runs.write_error_line(
            run_dir, exc, "summary.json")
    return converge_result


def format_recap(result: ConvergeResult) -> str:
    lines = [f"{'host':<16} {'ok':>4} {'changed':>7} {'failed':>6} {'unreach':>7} {'skipped':>7}"]
    for h in result.hosts:
        lines.append(f"{h.host:<16} {h.ok:>4} {h.changed:>7} {h.failed:>6} {h.unreachable:>7} {h.skipped:>7}")
    return "\n".join(lines)
