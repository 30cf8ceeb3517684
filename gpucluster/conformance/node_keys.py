"""The run key's life on a node: its authorized_keys line, the one command it may start, and
taking it back. This file runs on the nodes as it is (``python3 -I -c <this file> VERB ...``:
standard library only, Python 3.10 or newer: Ubuntu 22.04's), and the controller imports it to build the same
lines, so what is granted and what is swept are read by one code.

A line grants one measurement (:func:`authorized_line`), with a key made for that measurement::

    restrict,from="<launcher>",expiry-time="<end>",command="<gate>" ssh-ed25519 AAAA... gpucluster-verify-run:<id>:<tag>

- ``restrict``: no forwarding of any kind, no pty, no ~/.ssh/rc;
- ``from``: only the launcher's management address may use it;
- ``expiry-time``: sshd refuses it once the measurement's budget is over. In the node's local
  *standard* time: sshd reads the stamp with mktime() on a zeroed struct tm (tm_isdst 0), and
  the ``Z`` suffix for UTC came only in OpenSSH 9.1 (Ubuntu 22.04 ships 8.9; ``restrict`` needs
  7.2, ``expiry-time`` 7.7);
- ``command``: the gate (:func:`gate`), a copy of this file in ``~/.ssh``, starts Open MPI's
  daemon (``orted``; ``prted`` under Open MPI 5) and nothing else, without a shell, carrying the
  run's and the measurement's tags so that the kill by tag reaches it.

What the gate cannot do: the daemon starts whatever its mpirun asks for. Whoever holds the
measurement's key on the launcher (the launcher's login user) can run commands as the login user
on the measured peers, from the launcher's address, until the grant expires
(docs/security.md).

Every change to authorized_keys happens under a lock in ~/.ssh (a home shared over NFS sees
parallel measurements) and writes a new file beside the old one, renamed over it
(:func:`rewrite_keys`): a full disk leaves the file as it was and the command fails, saying so.
"""

from __future__ import annotations

import fcntl
import itertools
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
# $NAME, ${NAME} and ${NAME:-} (Open MPI writes LD_LIBRARY_PATH=<prefix>/lib:${LD_LIBRARY_PATH:-}).
_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::-)?\}|([A-Za-z_][A-Za-z0-9_]*))")
_ALNUM = re.compile(r"^[A-Za-z0-9]+$")
# Daemon settings that name code or files to load, or a program to run first: a launcher could
# point them at anything. mpirun's own command line sets none of them.
_MCA_FLAGS = ("-mca", "--mca", "-gmca", "--gmca", "-prtemca", "--prtemca", "-pmixmca", "--pmixmca")
_MCA_REFUSED = re.compile(r"(component_path|param_files|envar_file|_agent$|prefix|_path$)")
LOCK_NAME = ".gpucluster-authorized_keys.lock"
TEMP_PREFIX = ".authorized_keys.gpucluster."
GATE_TEMP_PREFIX = ".gpucluster-gate."
# The sweep leaves a key file alone while it is this young (a live measurement of another
# inventory on the same node), and a temporary file of a rewrite a killed process left.
FILE_GRACE_S = 6 * 3600
TEMP_GRACE_S = 3600


class Refused(Exception):
    """What the gate will not start, and why."""


# --- the line ---------------------------------------------------------------------------------


def _local_time() -> None:
    """Local time as sshd sees it: /etc/localtime, whatever TZ the login session carries."""
    if "TZ" in os.environ:
        del os.environ["TZ"]
        time.tzset()


def standard_stamp(t: float) -> str:
    """``t`` as sshd reads an expiry-time: local standard time (no daylight saving), to the second."""
    return time.strftime("%Y%m%d%H%M%S", time.gmtime(int(t) - time.timezone))


def expiry_stamp(now: float, seconds: float) -> str:
    """``expiry-time``'s value ``seconds`` after ``now`` (rounded up)."""
    return standard_stamp(int(now + seconds) + 1)


def gate_path(run_id: str) -> str:
    return f"$HOME/.ssh/{KEY_PREFIX}{run_id}.gate"


def forced_command(run_id: str, measurement: str) -> str:
    """The command sshd runs (through the login shell) whatever the client asked for."""
    return f'exec python3 -I "{gate_path(run_id)}" gate {run_id} {measurement}'


def marker(run_id: str, measurement: str) -> str:
    return f"{MARKER}:{run_id}:{measurement}"


def authorized_line(kind: str, blob: str, run_id: str, measurement: str, source: str, expiry: str) -> str:
    if not _RUN_ID.match(run_id) or not _ALNUM.match(measurement):
        raise ValueError(f"run id and measurement tag must be hex and alphanumeric: {run_id!r}, {measurement!r}")
    if not re.match(r"^[0-9A-Fa-f.:]+$", source) or not re.match(r"^\d{14}$", expiry):
        raise ValueError(f"not an address and an expiry-time: {source!r}, {expiry!r}")
    command = forced_command(run_id, measurement).replace('"', '\\"')
    return (f'restrict,from="{source}",expiry-time="{expiry}",command="{command}" '
            f"{kind} {blob} {marker(run_id, measurement)}")


def grant_of(line: str) -> tuple[str, str] | None:
    """(run, measurement) a line was granted for, from its ``gpucluster-verify-run:<id>[:<tag>]``
    comment (the measurement "" on lines of earlier versions); None for any other line."""
    fields = line.split()
    if not fields or not fields[-1].startswith(MARKER + ":"):
        return None
    run, _, measurement = fields[-1][len(MARKER) + 1:].partition(":")
    return run, measurement


def expired(line: str, now: str) -> bool:
    """A run line past its expiry-time (``now``: :func:`now_stamp`), or one without any."""
    m = _EXPIRY.search(line)
    return m is None or m.group(1) <= now


# --- authorized_keys, rewritten whole -----------------------------------------------------------


def rewrite_keys(path: str, drop: tuple[str, str] | None = None, now: str = "",
                 add: str = "") -> tuple[int, set[str]]:
    """Remove the lines of ``drop`` (run, measurement; measurement "": every line of the run),
    and with ``now`` every run line past its expiry (or without one); append ``add``. Under a
    lock in the file's folder; the new file is written beside the old one, flushed to disk and
    renamed over it with the old one's mode and owner: a failure leaves the old file whole. Lines
    are kept byte for byte (only "\\n" ends one). Returns (lines removed, runs with lines left)."""
    real = os.path.realpath(path)
    folder = os.path.dirname(real)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    with open(os.path.join(folder, LOCK_NAME), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(real, "rb") as fh:
                text = fh.read().decode("utf-8", "surrogateescape")
            st: os.stat_result | None = os.stat(real)
        except FileNotFoundError:
            text, st = "", None
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        kept, removed, live = [], 0, set()
        for line in lines:
            grant = grant_of(line)
            if grant is not None and ((drop is not None and grant[0] == drop[0] and drop[1] in ("", grant[1]))
                                      or (now and expired(line, now))):
                removed += 1
                continue
            if grant is not None:
                live.add(grant[0])
            kept.append(line)
        if add:
            kept.append(add)
            live.add((grant_of(add) or ("", ""))[0])
        if not removed and not add:
            return 0, live
        fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=folder)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write("".join(x + "\n" for x in kept).encode("utf-8", "surrogateescape"))
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


def remove_files(run_id: str = "", measurement: str = "", keep: set[str] | None = None) -> int:
    """Files of the run keys in ~/.ssh: those of ``run_id`` (the measurement's key and its
    known_hosts; with no measurement, the run's gate too), or with ``keep`` (the sweep) those of
    every run not in it once older than :data:`FILE_GRACE_S`, and temporary files of rewrites a
    killed process left. Returns how many were removed."""
    folder, n, now = _ssh_dir(), 0, time.time()
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return 0
    for name in names:
        path = os.path.join(folder, name)
        if name.startswith((TEMP_PREFIX, GATE_TEMP_PREFIX)):
            if keep is not None and now - os.lstat(path).st_mtime > TEMP_GRACE_S:
                os.unlink(path)
                n += 1
            continue
        if not name.startswith(KEY_PREFIX):
            continue
        run, _, rest = name[len(KEY_PREFIX):].partition(".")
        if not _RUN_ID.match(run):
            continue
        if keep is not None:
            gone = run not in keep and now - os.lstat(path).st_mtime > FILE_GRACE_S
        else:
            gone = run == run_id and (not measurement or rest.split(".", 1)[0] == measurement)
        if gone:
            os.unlink(path)
            n += 1
    return n


def _write_gate(run_id: str, source: str) -> None:
    folder = _ssh_dir()
    os.makedirs(folder, mode=0o700, exist_ok=True)
    target = os.path.join(folder, f"{KEY_PREFIX}{run_id}.gate")
    fd, tmp = tempfile.mkstemp(prefix=GATE_TEMP_PREFIX, dir=folder)
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
    for name in SETTABLE:
        if name not in SEARCH_PATHS and name in env and env[name] != environ.get(name):
            if not os.path.isdir(env[name]) or not _safe_dir(env[name]):
                raise Refused(f"{name} names {env[name]}, which others may write to or which is no folder")
    for flag, setting in itertools.pairwise(last):
        if flag in _MCA_FLAGS and _MCA_REFUSED.search(setting):
            raise Refused(f"the daemon setting {setting} names code or files to load")
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
    return standard_stamp(time.time())


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
            rewrite_keys(keys, drop=(run_id, measurement), add=line)
            print(f"granted until {expiry}")
            return 0
        if argv[:1] == ["revoke"] and len(argv) in (2, 3) and _RUN_ID.match(argv[1]):
            measurement = argv[2] if len(argv) == 3 else ""
            removed, live = rewrite_keys(keys, drop=(argv[1], measurement))
            # The run's gate goes with its last grant on this node.
            files = remove_files(argv[1], measurement if argv[1] in live else "")
            print(f"revoked {removed} line(s), {files} file(s)")
            return 0
        if argv == ["sweep"]:
            removed, live = rewrite_keys(keys, now=now_stamp())
            files = remove_files(keep=live)
            print(f"swept {removed} line(s), {files} file(s)")
            return 0
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"{keys}: {exc}; the file is as it was\n")
        return 1
    sys.stderr.write(f"usage: node_keys grant|revoke|sweep|gate ...: {argv}\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
