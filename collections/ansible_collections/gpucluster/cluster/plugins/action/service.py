"""Action `gpucluster.cluster.service`: ansible.builtin.systemd_service, with a fast path for a unit
already started and enabled.

Takes exactly the arguments of ``ansible.builtin.systemd_service``. In a converged cluster nearly
every "start it and enable it at boot" task finds the unit so; the module still costs a Python start
on the node and Ansible's module code (about 0.15 CPU-s there, as much again on the controller). So
where the task asks only ``state: started`` and/or ``enabled: true`` (with ``no_block``, ``scope:
system`` or a false ``daemon_reload``), one shell command over the existing connection asks systemd
what the module would ask: ``systemctl show`` (LoadState, ActiveState) and ``systemctl is-enabled
--full``. When the unit is loaded, running as the module counts it (ActiveState ``active`` or
``activating``) and enabled as the module counts it (``is-enabled`` exits 0 and does not answer
``enabled-runtime``, ``indirect`` or ``alias``), the task is ok and unchanged, with the module's keys
``name``, ``state``, ``enabled``. In every other case, and for any other argument (a restart, a
reload, ``daemon_reload: true``, ``masked``, ``enabled: false``, a user scope), the module runs with
the same arguments and its result is the task's. Check mode behaves the same way.
GPUCLUSTER_SERVICE_FAST_PATH=0 turns the fast path off (the benchmark measures what it buys).

Measured in `make bench` (bench/bench_converge.py): see docs/roles.md, "Converge speed".
"""

from __future__ import annotations

import os
import shlex
from typing import Any

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

MODULE = "ansible.builtin.systemd_service"
FAST_PATH_VAR = "GPUCLUSTER_SERVICE_FAST_PATH"
_PASSIVE = frozenset({"name", "unit", "service", "state", "enabled", "no_block", "scope", "daemon_reload",
                      "daemon-reload"})
# is-enabled answers that exit 0 but which the module still treats as "not enabled" (it enables them).
_NOT_ENABLED = frozenset({"enabled-runtime", "indirect", "alias"})


def fast_path_unit(args: dict[str, Any]) -> tuple[str, bool, bool] | None:
    """(unit, wants started, wants enabled) when systemctl's answers alone can decide, else None."""
    if not set(args) <= _PASSIVE:
        return None
    unit = args.get("name", args.get("unit", args.get("service")))
    if not isinstance(unit, str) or not unit or "\n" in unit:
        return None
    try:
        if boolean(args.get("daemon_reload", args.get("daemon-reload", False)), strict=True):
            return None
        enabled = args.get("enabled")
        if enabled is not None and not boolean(enabled, strict=True):
            return None
    except TypeError:
        return None
    state = args.get("state")
    if state not in (None, "started") or str(args.get("scope", "system")) != "system":
        return None
    if state is None and enabled is None:
        return None
    return unit, state == "started", enabled is not None


def probe_command(unit: str) -> str:
    quoted = shlex.quote(unit)
    return (f"LC_ALL=C systemctl show --property=LoadState --property=ActiveState -- {quoted}; "
            f"echo \"IsEnabled=$(LC_ALL=C systemctl is-enabled --full -- {quoted} 2>/dev/null | head -n1)\"; "
            f"echo \"IsEnabledRc=$(LC_ALL=C systemctl is-enabled --quiet -- {quoted} 2>/dev/null; echo $?)\"")


def satisfied(stdout: str, want_started: bool, want_enabled: bool) -> bool:
    """Whether the module would find nothing to do, from the probe's output."""
    fields: dict[str, str] = {}
    for line in stdout.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep:
            fields[key] = value
    if not {"LoadState", "ActiveState", "IsEnabled", "IsEnabledRc"} <= set(fields):
        return False
    if fields["LoadState"] != "loaded":
        return False
    if want_started and fields["ActiveState"] not in ("active", "activating"):
        return False
    return not want_enabled or (fields["IsEnabledRc"] == "0" and fields["IsEnabled"] not in _NOT_ENABLED)


class ActionModule(ActionBase):  # type: ignore[misc]
    """See the module docstring."""

    TRANSFERS_FILES = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        args = dict(self._task.args)
        wanted = fast_path_unit(args) if os.environ.get(FAST_PATH_VAR, "1") != "0" else None
        if wanted is not None:
            unit, want_started, want_enabled = wanted
            answer = self._low_level_execute_command(probe_command(unit), sudoable=True)
            if answer.get("rc") == 0 and satisfied(answer.get("stdout", ""), want_started, want_enabled):
                already = " and ".join([*(["running"] if want_started else []), *(["enabled"] if want_enabled else [])])
                result.update(changed=False, name=unit, gpucluster_fast_path=True, msg=f"{unit} already {already}")
                if want_started:
                    result["state"] = "started"
                if want_enabled:
                    result["enabled"] = True
                return result
        result.update(self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars))
        return result
