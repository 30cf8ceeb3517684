"""The run key's life on a node: its authorized_keys line, the one command it may start, and
taking it back. This file runs on the nodes as it is (``python3 -I -c <this file> VERB ...``:
standard library only, Python 3.8 or newer), and the controller imports it to build the same
lines, so what is granted and what is swept are read by one code.

A line grants one measurement (:func:`authorized_line`)::

    restrict,from="<launcher>",expiry-time="<end>",command="<gate>" ssh-ed25519 AAAA... gpucluster-verify-run:<id>

- ``restrict``: no forwarding of any kind, no pty, no ~/.ssh/rc;
- ``from``: only the launcher's management address may use it;
- ``expiry-time``: sshd refuses it once the measurement's budget is over. In the node's own
  clock and time zone (/etc/localtime, as sshd reads it): the ``Z`` suffix for UTC came only in
  OpenSSH 9.1, and Ubuntu 22.04 ships 8.9 (``restrict`` needs 7.2, ``expiry-time`` 7.7);
- ``command``: the gate (:func:`gate`), a copy of this file in ``~/.ssh``, starts Open MPI's
  daemon (``orted``; ``prted`` under Open MPI 5) and nothing else, without a shell, carrying the
  run's and the measurement's tags so that the kill by tag reaches it.

Every change to authorized_keys writes a new file beside it and renames it over the old one
(:func:`rewrite_keys`): a full disk leaves the file as it was and the command fails, saying so.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
import sys
import tempfile
import time

MARKER = "gpucluster-verify-run"
KEY_PREFIX = "gpucluster-verify-"
RUN_TAG = "GPUCLUSTER_RUN"
MEASURE_TAG = "GPUCLUSTER_MEASUREMENT"
# What mpirun's ssh starts on the other nodes: Open MPI 4's ORTE daemon, Open MPI 5's PRRTE one.
DAEMONS = ("orted", "prted")
# Variables Open MPI's rsh launcher sets before the daemon (plm_rsh_module.c, setup_launch: the
# --prefix form; PRRTE's ssh launcher likewise): nothing else may be set.
SETTABLE = ("PATH", "LD_LIBRARY_PATH", "DYLD_LIBRARY_PATH", "OPAL_PREFIX", "PRTE_PREFIX", "PMIX_PREFIX")
SEARCH_PATHS = ("PATH", "LD_LIBRARY_PATH", "DYLD_LIBRARY_PATH")
# Open MPI's wrapper when the remote shell is sh or ksh: ~/.profile is sourced, then the daemon.
PROFILE_WRAP = "( test ! -r ./.profile || . ./.profile;"
_EXPIRY = re.compile(r'(?:^|,)expiry-time="(\d{14})"')
_RUN_ID = re.compile(r"^[0-9a-f]{6,32}$")
_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_ALNUM = re.compile(r"^[A-Za-z0-9]+$")


class Refused(Exception):
    """What the gate will not start, and why."""


# --- the line ---------------------------------------------------------------------------------


def _local_time() -> None:
    """Local time as sshd sees it: /etc/localtime, whatever TZ the login session carries."""
    if "TZ" in os.environ:
        del os.environ["TZ"]
        time.tzset()


def expiry_stamp(now: float, seconds: float) -> str:
    """``expiry-time``'s value ``seconds`` after ``now`` (local time, to the second, rounded up)."""
    return time.strftime("%Y%m%d%H%M%S", time.localtime(int(now + seconds) + 1))


def gate_path(run_id: str) -> str:
    return f"$HOME/.ssh/{KEY_PREFIX}{run_id}.gate"


def forced_command(run_id: str, measurement: str) -> str:
    """The command sshd runs (through the login shell) whatever the client asked for."""
    return f'exec python3 -I "{gate_path(run_id)}" gate {run_id} {measurement}'


def authorized_line(kind: str, blob: str, run_id: str, measurement: str, source: str, expiry: str) -> str:
    if not _RUN_ID.match(run_id) or not _ALNUM.match(measurement):
        raise ValueError(f"run id and measurement tag must be hex and alphanumeric: {run_id!r}, {measurement!r}")
    if not re.match(r"^[0-9A-Fa-f.:]+$", source) or not re.match(r"^\d{14}$", expiry):
        raise ValueError(f"not an address and an expiry-time: {source!r}, {expiry!r}")
    command = forced_command(run_id, measurement).replace('"', '\\"')
    return (f'restrict,from="{source}",expiry-time="{expiry}",command="{command}" '
            f"{kind} {blob} {MARKER}:{run_id}")


def run_of(line: str) -> str | None:
    """The run a line was granted for (its ``gpucluster-verify-run:<id>`` comment), else None."""
    fields = line.split()
    if not fields or not fields[-1].startswith(MARKER + ":"):
        return None
    return fields[-1][len(MARKER) + 1:]


def expired(line: str, now: str) -> bool:
    """A run line past its expiry-time (``now``: :func:`now_stamp`), or one without any."""
    m = _EXPIRY.search(line)
    return m is None or m.group(1) <= now


# --- authorized_keys, rewritten whole -----------------------------------------------------------


def rewrite_keys(path: str, drop_run: str = "", now: str = "", add: str = "") -> tuple[int, set[str]]:
    """Remove the lines of run ``drop_run``, and with ``now`` every run line past its expiry (or
    without one); append ``add``. The new file is written beside the old one, flushed to disk and
    renamed over it with the old one's mode and owner: a failure leaves the old file whole.
    Returns (lines removed, runs with lines left)."""
    real = os.path.realpath(path)
    try:
        with open(real, encoding="utf-8", errors="surrogateescape") as fh:
            lines = fh.read().splitlines()
        st: os.stat_result | None = os.stat(real)
    except FileNotFoundError:
        lines, st = [], None
    kept, removed, live = [], 0, set()
    for line in lines:
        run = run_of(line)
        if run is not None and (run == drop_run or (now and expired(line, now))):
            removed += 1
            continue
        if run is not None:
            live.add(run)
        kept.append(line)
    if add:
        kept.append(add)
        live.add(run_of(add) or "")
    if not removed and not add:
        return 0, live
    folder = os.path.dirname(real)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".authorized_keys.", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as out:
            out.write("".join(x + "\n" for x in kept))
            out.flush()
            os.fsync(out.fileno())
        if st is not None:
            os.chmod(tmp, stat.S_IMODE(st.st_mode))
            if (st.st_uid, st.st_gid) != (os.geteuid(), os.getegid()):
                os.chown(tmp, st.st_uid, st.st_gid)
        os.replace(tmp, real)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return removed, live


def _ssh_dir() -> str:
    return os.path.join(os.path.expanduser("~"), ".ssh")


def remove_files(keep: set[str], only: str = "") -> int:
    """The run keys' files in ~/.ssh (private key, known_hosts, gate) of runs not in ``keep``
    (``only``: of that run alone); returns how many were removed."""
    folder, n = _ssh_dir(), 0
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return 0
    for name in names:
        if not name.startswith(KEY_PREFIX):
            continue
        run = name[len(KEY_PREFIX):].split(".", 1)[0]
        if _RUN_ID.match(run) and run not in keep and (not only or run == only):
            os.unlink(os.path.join(folder, name))
            n += 1
    return n


def _write_gate(run_id: str, source: str) -> None:
    folder = _ssh_dir()
    os.makedirs(folder, mode=0o700, exist_ok=True)
    target = os.path.join(folder, f"{KEY_PREFIX}{run_id}.gate")
    fd, tmp = tempfile.mkstemp(prefix=".gate.", dir=folder)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(source)
    os.replace(tmp, target)


# --- the gate: the one command the key may start ---------------------------------------------


def _safe_dir(path: str) -> bool:
    """Owned by root or this user and writable by no one else; every folder above it owned by
    root or this user, and writable by others only when sticky (/tmp)."""
    me = os.geteuid()
    p = leaf = os.path.realpath(path)
    while True:
        st = os.stat(p)
        shared = st.st_mode & 0o022 and (p == leaf or not st.st_mode & stat.S_ISVTX)
        if st.st_uid not in (0, me) or shared:
            return False
        if p == "/":
            return True
        p = os.path.dirname(p)


def _expand(value: str, env: dict[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if name not in SEARCH_PATHS:
            raise Refused(f"${name} in an assignment")
        return env.get(name, "")

    out = _VAR.sub(one, value)
    if "$" in out or "`" in out:
        raise Refused(f"shell syntax in an assignment: {value[:80]}")
    return out


def _assign(word: str, env: dict[str, str]) -> bool:
    name, eq, value = word.partition("=")
    if not eq or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
        return False
    if name not in SETTABLE:
        raise Refused(f"it sets {name}")
    env[name] = _expand(value, env)
    return True


def daemon_argv(command: str, environ: dict[str, str]) -> tuple[str, list[str], dict[str, str]]:
    """The daemon mpirun's ssh asked for: (its path, argv, environment), read from ``command`` as
    Open MPI writes it (optional ``NAME=value ; export NAME ;`` steps, then the daemon and its
    arguments in double quotes), never run through a shell. Refused otherwise, saying why."""
    text = command.strip()
    if text.startswith(PROFILE_WRAP):
        text = text[len(PROFILE_WRAP):].rstrip()
        if not text.endswith(")"):
            raise Refused("an unclosed ( ... )")
        text = text[:-1]
    lex = shlex.shlex(text, posix=True, punctuation_chars=";")
    lex.whitespace_split = True
    lex.commenters = ""
    try:
        words = list(lex)
    except ValueError as exc:
        raise Refused(f"unreadable: {exc}") from None
    steps: list[list[str]] = [[]]
    for w in words:
        if w and set(w) == {";"}:
            steps.append([])
        else:
            steps[-1].append(w)
    steps = [s for s in steps if s]
    if not steps:
        raise Refused("no command")
    env = dict(environ)
    for step in steps[:-1]:
        if step[0] == "export":
            if not all(name in SETTABLE for name in step[1:]):
                raise Refused(f"it exports {' '.join(step[1:])}")
            continue
        for word in step:
            if not _assign(word, env):
                raise Refused(f"a command before the daemon: {step[0]}")
    last = steps[-1]
    while last and _assign(last[0], env):
        last = last[1:]
    if not last or os.path.basename(last[0]) not in DAEMONS:
        raise Refused(f"{last[0] if last else 'nothing'} is not Open MPI's daemon ({', '.join(DAEMONS)})")
    for name in SEARCH_PATHS:
        if name in env:
            parts = [p for p in env[name].split(":") if p and os.path.isdir(p)]
            unsafe = [p for p in parts if not _safe_dir(p)]
            if unsafe:
                raise Refused(f"{name} names {unsafe[0]}, which others may write to")
            env[name] = ":".join(parts)
    prog = last[0]
    found = prog if "/" in prog else shutil.which(prog, path=env.get("PATH", os.defpath))
    if not found or not os.path.isabs(found) or not os.access(found, os.X_OK):
        raise Refused(f"{prog}: not found on this node")
    real = os.path.realpath(found)
    st = os.stat(real)
    if st.st_uid not in (0, os.geteuid()) or st.st_mode & 0o022 or not _safe_dir(os.path.dirname(real)):
        raise Refused(f"{found} may be written by others")
    return found, last, env


def gate(run_id: str, measurement: str) -> int:
    try:
        path, argv, env = daemon_argv(os.environ.get("SSH_ORIGINAL_COMMAND", ""), dict(os.environ))
    except Refused as exc:
        asked = os.environ.get("SSH_ORIGINAL_COMMAND", "")[:160]
        sys.stderr.write(f"gpucluster run key {run_id}: refused ({exc}); it starts only Open MPI's daemon "
                         f"({', '.join(DAEMONS)}): {asked}\n")
        return 126
    env[RUN_TAG] = run_id
    env[MEASURE_TAG] = measurement
    env.pop("SSH_ORIGINAL_COMMAND", None)
    os.execve(path, argv, env)
    return 127  # not reached


# --- the verbs the controller runs ---------------------------------------------------------------


def now_stamp() -> str:
    return time.strftime("%Y%m%d%H%M%S", time.localtime())


def main(argv: list[str]) -> int:
    keys = os.path.join(_ssh_dir(), "authorized_keys")
    _local_time()
    try:
        if argv[:1] == ["gate"] and len(argv) == 3:
            return gate(argv[1], argv[2])
        if argv[:1] == ["grant"] and len(argv) == 7:
            run_id, measurement, source, seconds, kind, blob = argv[1:]
            expiry = expiry_stamp(time.time(), float(seconds))
            line = authorized_line(kind, blob, run_id, measurement, source, expiry)
            _write_gate(run_id, sys.stdin.read())
            rewrite_keys(keys, drop_run=run_id, add=line)
            print(f"granted until {expiry}")
            return 0
        if argv[:1] == ["revoke"] and len(argv) == 2:
            removed, _ = rewrite_keys(keys, drop_run=argv[1])
            files = remove_files(set(), only=argv[1])
            print(f"revoked {removed} line(s), {files} file(s)")
            return 0
        if argv == ["sweep"]:
            removed, live = rewrite_keys(keys, now=now_stamp())
            files = remove_files(live)
            print(f"swept {removed} line(s), {files} file(s)")
            return 0
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"{keys}: {exc}; the file is as it was\n")
        return 1
    sys.stderr.write(f"usage: node_keys grant|revoke|sweep|gate ...: {argv}\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
