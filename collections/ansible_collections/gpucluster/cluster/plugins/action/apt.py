"""Action `gpucluster.cluster.apt`: ansible.builtin.apt with a fast path for packages already installed.

Takes exactly the arguments of ``ansible.builtin.apt``. Before running the apt module (which
loads the whole package cache: one to two CPU-seconds per host per task), it asks dpkg which of
the named packages are installed, with one ``dpkg-query`` over the existing connection. When
every package is installed at a version matching its pin (``name=1.2*`` as apt matches it), the
task is ok and unchanged; otherwise, or whenever the arguments ask for more than "present"
(``state: latest``, ``deb:``, ``update_cache: true``, ``upgrade``, ...), it runs the apt module
with the same arguments, so the outcome is apt's own. Check mode behaves the same way.
GPUCLUSTER_APT_FAST_PATH=0 turns the fast path off (the benchmark measures what it buys).

A node without python3-apt (which the apt module needs) gets it first with apt-get, run by the
command module so that it takes the task's environment (the egress proxy) the way every module
does: Ansible's own way, installing it and re-spawning the module under the system Python, fails
under Mitogen.

Whatever apt does is bounded in time (a lab node's apt once hung for many minutes in CLOSE-WAIT
against the lab's apt proxy, and converge with it). Two settings, read from the task's variables
(cluster-wide defaults in playbooks/group_vars/all.yml, ``gpucluster converge -e`` to change them):

- ``gpucluster_apt_stall_timeout_s`` (default 120): apt's own bound on a stalled connection,
  ``Acquire::http::Timeout`` and ``Acquire::https::Timeout`` (and ``Acquire::Retries`` 2), in an
  apt configuration file the apt module and the apt-get it runs read through ``APT_CONFIG``.
  ansible.builtin.apt takes no apt option but dpkg's (``dpkg_options``) and ``lock_timeout``.
  apt reads ``APT_CONFIG`` before ``/etc/apt/apt.conf.d``, so a node's own setting of these keys wins.
- ``gpucluster_apt_timeout_s`` (default 1800): the whole install. Before the apt module (and the
  python3-apt bootstrap) runs, a watchdog starts on the node in a session of its own; at the limit
  it ends (SIGTERM, then SIGKILL after a grace) every process carrying this task's marker in its
  environment (the module, apt-get, dpkg, apt's download methods), and the task fails naming the
  host, the task, the limit and the variable to raise. When apt finishes first, the watchdog is
  ended by its id. A controller stopped mid-task (Ctrl-C) leaves only the watchdog, which still
  ends the task's processes at the limit and then itself. The watchdog's folder (apt's configuration,
  its mark when it fires) goes in the first of the node's $TMPDIR, /tmp, /var/tmp and /run that takes
  it, so a read-only or full /tmp does not stop the task; only when none does, the task fails naming
  each place and why.

Measured in `make bench` (bench/bench_converge.py): see docs/roles.md, "Converge speed".
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import uuid
from typing import Any

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

# Arguments that are only about how apt installs, not what: they do not force the apt module.
_PASSIVE_ARGS = frozenset({
    "name", "pkg", "package", "state", "cache_valid_time", "install_recommends", "allow_downgrade",
    "allow_downgrades", "allow_change_held_packages", "dpkg_options", "force_apt_get", "lock_timeout",
    "policy_rc_d", "default_release", "update_cache_retries", "update_cache_retry_max_delay",
})
_QUERY_FORMAT = r"${Package}\t${db:Status-Status}\t${Version}\n"
APT_BINDINGS = "python3-apt"
_INSTALL_BINDINGS = ("export DEBIAN_FRONTEND=noninteractive; "
                     "apt-get install -y -q --no-install-recommends python3-apt "
                     "|| { apt-get update -q && apt-get install -y -q --no-install-recommends python3-apt; }")
# The command module's arguments that install python3-apt. A module, not a raw command: ansible-core
# gives a module the task's environment (the play's egress proxy, without which a node whose only way
# out is the proxy reaches no package), where a raw command gets none, and an action runs a module
# with _execute_module, the way Ansible's plugin guide documents ("execute the module using the
# _execute_module method", docs.ansible.com dev_guide/developing_plugins.html, Action plugins). The
# only other way to the environment is ActionBase's private _compute_environment_string.
BINDINGS_ARGS: dict[str, Any] = {"argv": ["/bin/sh", "-c", _INSTALL_BINDINGS]}

TIMEOUT_VAR = "gpucluster_apt_timeout_s"
STALL_VAR = "gpucluster_apt_stall_timeout_s"
DEFAULT_TIMEOUT_S = 1800
DEFAULT_STALL_S = 120
APT_RETRIES = 2
# Between the watchdog's SIGTERM and its SIGKILL: dpkg finishing the package it is unpacking.
KILL_GRACE_S = 10
# In the environment of every process the task starts on the node: what the watchdog ends.
MARKER_VAR = "GPUCLUSTER_APT_TASK"
_WATCHDOG_DIR = re.compile(r"/\S*/gpucluster-apt\.[A-Za-z0-9]+")
# The node's watchdog. START runs in the connection's shell, in the foreground: it makes the
# watchdog's folder (the apt configuration), starts WATCHDOG in a session of its own (the
# connection's end does not end it) with no hold on the connection, and prints "<pid> <folder>"
# itself, so the answer never depends on a background process outliving the session (under a
# terminal, ssh -tt or sudo's use_pty, the session ends when its shell does). WATCHDOG sleeps to
# LIMIT; SIGTERM before then ends it and its sleep and removes the folder (dash's kill, the node's
# /bin/sh, cannot signal a process group). At LIMIT it ignores SIGTERM from then on, marks the
# folder `fired`, ends the marked processes (SIGTERM, then SIGKILL after GRACE) and removes the folder.
WATCHDOG = r"""sleep "$1" &
s=$!
trap 'kill "$s" 2>/dev/null; rm -rf -- "$4"; exit 0' TERM
wait "$s"
trap '' TERM
: > "$4/fired"
sweep() {
  for p in /proc/[0-9]*; do
    tr '\0' '\n' < "$p/environ" 2>/dev/null | grep -qxF "$2" && kill "-$1" "${p#/proc/}" 2>/dev/null
  done
}
sweep TERM "$3"
sleep "$2"
sweep KILL "$3"
rm -rf -- "$4"
"""
# Where START may make the watchdog's folder, after the node's $TMPDIR, in order: a node whose /tmp is
# read-only or full still gets its bound. Each is root-writable on a Debian or Ubuntu node (/run is
# systemd's tmpfs). The folder's place travels in START's answer, so the rest never assumes one.
WATCHDOG_PLACES = ("/tmp", "/var/tmp", "/run")
# START's arguments: LIMIT GRACE MARKER APT_CONF WATCHDOG PLACE... SIGHUP is ignored first, and so by
# the watchdog (an ignored signal stays ignored across exec): under a terminal, the session's end sends
# it to the foreground process group, which the watchdog is still in until setsid has run. The folder
# goes in the first place (TMPDIR, then PLACE...) where mktemp and the apt configuration both succeed; a
# place with a space could not travel in the answer. With none, one line on stderr names each place
# tried and why it failed (the last part of mktemp's or the shell's own message).
START = r"""trap '' HUP
limit=$1 grace=$2 marker=$3 conf=$4 watchdog=$5
shift 5
d= seen= tried=
for p in ${TMPDIR:+"$TMPDIR"} "$@"; do
  case " $seen " in *" $p "*) continue ;; esac
  seen="$seen $p"
  case $p in
    *[[:space:]]*) why='a space in the path' ;;
    /*) if why=$(mktemp -d "$p/gpucluster-apt.XXXXXXXX" 2>&1); then
          d=$why
          why=$( { printf '%s\n' "$conf" > "$d/apt.conf"; } 2>&1 ) && break
          rm -rf -- "$d"
          d=
        fi ;;
    *) why='not an absolute path' ;;
  esac
  why=${why##*: }
  tried="$tried${tried:+; }$p: ${why:-failed}"
done
[ -n "$d" ] || { echo "no place for the watchdog's folder: $tried" >&2; exit 1; }
setsid sh -c "$watchdog" gpucluster-apt-watchdog "$limit" "$grace" "$marker" "$d" </dev/null >/dev/null 2>&1 &
echo "$! $d"
"""


def _positive_int(value: Any) -> int | None:
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def bounds(task_vars: dict[str, Any]) -> tuple[int, int] | str:
    """(whole-task limit, stall timeout) in seconds from the task's variables, or what is wrong."""
    found = []
    for var, default in ((TIMEOUT_VAR, DEFAULT_TIMEOUT_S), (STALL_VAR, DEFAULT_STALL_S)):
        value = task_vars.get(var, default)
        number = _positive_int(value)
        if number is None:
            return f"{var} must be a whole number of seconds above 0, not {value!r}"
        found.append(number)
    return found[0], found[1]


def apt_config(stall_s: int) -> str:
    """apt's own bounds on a stalled download, as an apt configuration file."""
    return (f'Acquire::http::Timeout "{stall_s}";\n'
            f'Acquire::https::Timeout "{stall_s}";\n'
            f'Acquire::Retries "{APT_RETRIES}";')


def watchdog_command(limit_s: int, marker: str, stall_s: int, places: tuple[str, ...] = WATCHDOG_PLACES) -> str:
    """The command that starts the node's watchdog (START, WATCHDOG), its folder in the first of
    $TMPDIR and ``places`` that takes it; it prints "<pid> <folder>"."""
    argv = ["sh", "-c", START, "gpucluster-apt-start", str(limit_s), str(KILL_GRACE_S), marker,
            apt_config(stall_s), WATCHDOG, *places]
    return " ".join(shlex.quote(a) for a in argv)


def end_command(pid: int, folder: str) -> str:
    """After apt: "fired" when the watchdog reached its limit (its mark, or its folder already gone
    with it), else the watchdog is ended (it removes its folder)."""
    f = shlex.quote(folder)
    return f'if [ -e {f}/fired ] || [ ! -d {f} ]; then echo fired; else kill -TERM {pid} 2>/dev/null; fi'


def parse_watchdog(stdout: str) -> tuple[int, str] | None:
    """(pid, folder) from what the watchdog printed, or None."""
    fields = stdout.strip().split()
    if len(fields) != 2 or not fields[0].isdigit() or not _WATCHDOG_DIR.fullmatch(fields[1]):
        return None
    return int(fields[0]), fields[1]


def watchdog_failure(limit_s: int, said: str) -> str:
    """Why the task failed before apt ran: what START (or the connection) said, its last 600 characters."""
    return (f"could not start the watchdog that bounds apt to {TIMEOUT_VAR}={limit_s} s (setsid, mktemp "
            f"and /proc on the node): {said.strip()[-600:]}")


def timeout_message(host: str, task: str, limit_s: int, stall_s: int) -> str:
    return (f"{host}: task '{task}' did not finish within {TIMEOUT_VAR}={limit_s} s: apt and what it "
            f"started were ended. Raise {TIMEOUT_VAR} (gpucluster converge -e {TIMEOUT_VAR}=SECONDS) if "
            f"the node's packages need longer; a download stalled for {STALL_VAR}={stall_s} s fails on its "
            f"own, so a hang points at the node's apt proxy or mirror. If dpkg was stopped mid-install, "
            f"`dpkg --configure -a` on the node finishes it.")


def wanted_packages(args: dict[str, Any]) -> list[tuple[str, str | None]] | None:
    """(name, version pattern or None) for each package, or None when only apt can decide."""
    for key, value in args.items():
        if key.startswith("_") or key in _PASSIVE_ARGS:
            continue
        if key == "update_cache" and not boolean(value, strict=False):
            continue
        return None
    if str(args.get("state", "present")) not in ("present", "installed"):
        return None
    names = args.get("name", args.get("pkg", args.get("package")))
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",")]
    if not isinstance(names, list) or not names:
        return None
    wanted: list[tuple[str, str | None]] = []
    for spec in names:
        spec = str(spec).strip()
        # apt's own forms we do not reproduce: file paths, release pins, version comparators.
        if not spec or "/" in spec or any(c in spec for c in "<>") or spec.endswith((".deb", "-", "+")):
            return None
        name, _, version = spec.partition("=")
        wanted.append((name.split(":", 1)[0], version or None))
    return wanted


def parse_dpkg_query(stdout: str) -> dict[str, str]:
    """package -> installed version, from `dpkg-query -W -f=<_QUERY_FORMAT>` (installed ones only)."""
    installed: dict[str, str] = {}
    for line in stdout.splitlines():
        fields = line.split("\t")
        if len(fields) == 3 and fields[1] == "installed":
            installed[fields[0].split(":", 1)[0]] = fields[2]
    return installed


def unsatisfied(wanted: list[tuple[str, str | None]], installed: dict[str, str]) -> list[str]:
    """The package specs that dpkg does not show installed at a matching version."""
    missing = []
    for name, pattern in wanted:
        version = installed.get(name)
        if version is None or (pattern is not None and not fnmatch.fnmatchcase(version, pattern)):
            missing.append(name if pattern is None else f"{name}={pattern}")
    return missing


class ActionModule(ActionBase):  # type: ignore[misc]
    """See the module docstring."""

    TRANSFERS_FILES = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        args = dict(self._task.args)
        wanted = (wanted_packages(args) or []) if os.environ.get("GPUCLUSTER_APT_FAST_PATH", "1") != "0" else []
        names = " ".join(shlex.quote(n) for n in [*(n for n, _ in wanted), APT_BINDINGS])
        query = self._low_level_execute_command(
            f"LC_ALL=C dpkg-query -W -f={shlex.quote(_QUERY_FORMAT)} {names}", sudoable=True)
        # dpkg-query exits 1 when a name is unknown; the packages it did print still count.
        installed = parse_dpkg_query(query.get("stdout", "")) if query.get("rc") in (0, 1) else {}
        if wanted and installed and not unsatisfied(wanted, installed):
            result.update(changed=False, msg=f"{len(wanted)} package(s) already installed as pinned",
                          gpucluster_fast_path=True)
            return result
        limits = bounds(task_vars or {})
        if isinstance(limits, str):
            result.update(failed=True, msg=limits)
            return result
        limit_s, stall_s = limits
        marker = f"{MARKER_VAR}={uuid.uuid4().hex}"
        started = self._low_level_execute_command(watchdog_command(limit_s, marker, stall_s), sudoable=True)
        watchdog = parse_watchdog(started.get("stdout", "")) if started.get("rc") == 0 else None
        if watchdog is None:
            said = started.get("stderr") or started.get("stdout") or ""
            result.update(failed=True, msg=watchdog_failure(limit_s, str(said)))
            return result
        pid, folder = watchdog
        # Ansible's own ActionBase adds to the task's environment for a module run the same way
        # (ANSIBLE_ASYNC_DIR) and takes it out after.
        self._task.environment.append({"APT_CONFIG": f"{folder}/apt.conf", MARKER_VAR: marker.split("=", 1)[1]})
        try:
            self._run_apt(result, args, installed, task_vars)
        finally:
            self._task.environment.pop()
            # The node's own clock decides: the watchdog's mark, not the controller's count.
            ended = self._low_level_execute_command(end_command(pid, folder), sudoable=True)
        if ended.get("stdout", "").strip() == "fired":
            host = str((task_vars or {}).get("inventory_hostname", "?"))
            apt_said = {k: result[k] for k in ("msg", "rc", "stderr") if k in result}
            for k in ("msg", "rc", "stdout", "stderr", "stdout_lines", "stderr_lines", "module_stdout",
                      "module_stderr", "exception"):
                result.pop(k, None)
            result.update(failed=True, changed=False, gpucluster_apt_timed_out=True, apt_result=apt_said,
                          msg=timeout_message(host, self._task.get_name(), limit_s, stall_s))
        return result

    def _run_apt(self, result: dict[str, Any], args: dict[str, Any], installed: dict[str, str],
                 task_vars: dict[str, Any] | None) -> None:
        """python3-apt when the node lacks it, then the apt module: its result into ``result``."""
        if installed and APT_BINDINGS not in installed and not self._task.check_mode:
            # The apt module needs python3-apt. Ansible's own answer (installing it, then
            # re-spawning the module under the system Python) does not survive Mitogen, so the
            # bindings are installed here first, the way the apt module would.
            boot = self._execute_module(module_name="ansible.legacy.command", module_args=dict(BINDINGS_ARGS),
                                        task_vars=task_vars)
            if boot.get("failed") or boot.get("rc") != 0:
                said = boot.get("stderr") or boot.get("stdout") or boot.get("msg") or ""
                result.update(failed=True, msg=f"could not install {APT_BINDINGS}, which the apt module needs: "
                                               f"{str(said).strip()[-400:]}")
                return
        result.update(self._execute_module(module_name="ansible.legacy.apt", module_args=args,
                                           task_vars=task_vars))
