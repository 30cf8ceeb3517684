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

Measured in `make bench` (bench/bench_converge.py): see docs/roles.md, "Converge speed".
"""

from __future__ import annotations

import fnmatch
import os
import shlex
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
                return result
        result.update(self._execute_module(module_name="ansible.legacy.apt", module_args=args,
                                           task_vars=task_vars))
        return result
