"""Strategy `gpucluster.cluster.linear`: Ansible's linear strategy, with Mitogen and controller-side tasks.

Linear forks one worker process per host per task. On a converged cluster most host-tasks do no
host work at all: skips whose ``when`` is false, and actions that only ever run on the controller
(assert, debug, set_fact, fail, the roles' argument validation). The fork is then the largest
cost of the run. Three speed-ups, each measured in `make bench` (docs/roles.md, "Converge
speed"), each with a switch that turns it off:

- **Mitogen** (pinned in requirements.txt; ``GPUCLUSTER_MITOGEN=0``) keeps one Python
  interpreter per host alive for the whole run and ships each module once.
- **Skips decided on the controller** (``GPUCLUSTER_CONTROLLER_SKIP=0``). Before forking, the
  strategy runs Ansible's own TaskExecutor on a copy of the task in its own process, a copy
  whose validation is refused: the executor validates the task right after a condition that
  holds, before it templates arguments, opens a connection or loads an action, so the probe
  stops there. When that executor skips the task, its result goes on the results queue exactly
  as a worker's would. Anything else (the condition holds, an error) is discarded and the task
  goes to a worker.
- **Controller-only actions in process** (``GPUCLUSTER_CONTROLLER_ACTIONS=0``). The actions in
  ``CONTROLLER_ACTIONS`` never touch the host: the strategy runs Ansible's TaskExecutor for them
  in its own process, on a copy of the task. The connection object the executor builds is never
  connected; should any of them try, it fails loudly instead of reaching the host.

Task order, handlers, callbacks and results are the linear strategy's: the unit tests run a play
with every kind of condition with each switch on and off and require the same results. Without
Mitogen (an ansible-playbook from another Python) it is linear with the controller-side tasks,
with a warning.
"""

from __future__ import annotations

import os
from typing import Any

from ansible.errors import AnsibleError
from ansible.executor.task_executor import TaskExecutor
from ansible.executor.task_result import _RawTaskResult
from ansible.plugins.loader import get_plugin_loader_namespace, strategy_loader
from ansible.utils.display import Display

_display = Display()
_Linear = strategy_loader.get("linear", class_only=True)


class _WouldRun(Exception):
    """The probe reached the task's validation: its condition holds, and a worker must run it."""


def _would_run(*_: Any, **__: Any) -> Any:
    raise _WouldRun()


class _ControllerExecutor(TaskExecutor):  # type: ignore[misc]
    """A TaskExecutor whose connection refuses to reach the host."""

    def _get_connection(self, *args: Any, **kwargs: Any) -> Any:
        conn = super()._get_connection(*args, **kwargs)
        action = self._task.action

        def refuse(*_: Any, **__: Any) -> Any:
            raise AnsibleError(f"gpucluster.cluster.linear: {action} tried to reach the host; it runs on the "
                               "controller only (set GPUCLUSTER_CONTROLLER_ACTIONS=0 and report this)")

        for name in ("_connect", "exec_command", "put_file", "fetch_file"):
            setattr(conn, name, refuse)
        return conn


# Actions that never touch the host (their action plugins run on the controller and call no module).
CONTROLLER_ACTIONS = frozenset(
    f"{prefix}{name}"
    for prefix in ("", "ansible.builtin.", "ansible.legacy.")
    for name in ("assert", "debug", "set_fact", "fail", "validate_argument_spec")
)


def _on_controller(task: Any) -> bool:
    # Not with retries (`until` sleeps between tries and would hold up every other host) nor a
    # task timeout (an alarm signal, meant for a worker process), nor delegated or async tasks.
    return task.action in CONTROLLER_ACTIONS and not (task.delegate_to or task.async_val or task.until or task.timeout)


_META = frozenset({"meta", "ansible.builtin.meta", "ansible.legacy.meta"})


def _probe_wanted(task: Any) -> bool:
    """Tasks whose skip the controller decides: a condition, and nothing that makes it per item,
    per delegate or once for all hosts (those keep Ansible's own handling)."""
    return bool(task.when) and not (
        task.loop or task.loop_with or task.delegate_to or task.run_once or task.action in _META
    )


_CONTROLLER_SKIP = os.environ.get("GPUCLUSTER_CONTROLLER_SKIP", "1") != "0"
_CONTROLLER_ACTIONS = os.environ.get("GPUCLUSTER_CONTROLLER_ACTIONS", "1") != "0"


class ControllerTasksMixin:
    """Overrides ``_queue_task``: a host-task that needs no host is answered without a worker."""

    _tqm: Any
    _final_q: Any
    _loader: Any
    _variable_manager: Any
    _queued_task_cache: dict[tuple[str, str], dict[str, Any]]
    _pending_results: int
    _skipped_here = 0
    _run_here = 0
    _sent_to_workers = 0

    def run(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().run(*args, **kwargs)  # type: ignore[misc]
        finally:
            _display.v(f"gpucluster_linear: {self._skipped_here} host-tasks skipped on the controller, "
                       f"{self._run_here} controller-only host-tasks run in process, "
                       f"{self._sent_to_workers} sent to workers")

    def _queue_task(self, host: Any, task: Any, task_vars: Any, play_context: Any) -> None:
        if _CONTROLLER_ACTIONS and _on_controller(task):
            # Registered before it runs: a loop's per-item results reach the results thread
            # while the task still runs, and are matched to it through this cache.
            self._register(host, task, task_vars, play_context)
            copy, executor = self._executor(_ControllerExecutor, host, task, task_vars, play_context)
            # TaskExecutor.run turns every error into a failed result, as it does in a worker.
            self._send(host, copy, executor.run())
            self._run_here += 1
            return
        if _CONTROLLER_SKIP and _probe_wanted(task):
            decided = self._probe_skip(host, task, task_vars, play_context)
            if decided is not None:
                self._register(host, task, task_vars, play_context)
                self._send(host, *decided)
                self._skipped_here += 1
                return
        self._sent_to_workers += 1
        super()._queue_task(host, task, task_vars, play_context)  # type: ignore[misc]

    def _register(self, host: Any, task: Any, task_vars: Any, play_context: Any) -> None:
        """What _queue_task does before a worker starts: cache the task for result processing
        and send the start callback."""
        self._queued_task_cache[(host.name, task._uuid)] = {
            "host": host, "task": task, "task_vars": task_vars, "play_context": play_context,
        }
        self._tqm.send_callback("v2_runner_on_start", host, task)

    def _send(self, host: Any, copy: Any, return_data: dict[str, Any]) -> None:
        """What a worker does at its end: put the result on the results queue."""
        self._final_q.send_task_result(_RawTaskResult(
            host=host, task=copy, return_data=return_data, task_fields=copy.dump_attrs(),
        ))
        self._pending_results += 1

    def _executor(self, cls: type[TaskExecutor], host: Any, task: Any, task_vars: Any,
                  play_context: Any) -> tuple[Any, TaskExecutor]:
        # A copy: the executor squashes and validates the task it is given, and the original
        # serves every other host. exclude_tasks keeps the parent chain (inherited keywords)
        # without copying each block's task list.
        copy = task.copy(exclude_parent=False, exclude_tasks=True)
        return copy, cls(host, copy, task_vars, play_context, self._loader, get_plugin_loader_namespace(),
                         self._final_q, self._variable_manager)

    def _probe_skip(self, host: Any, task: Any, task_vars: Any, play_context: Any) -> tuple[Any, dict[str, Any]] | None:
        copy, probe = self._executor(TaskExecutor, host, task, task_vars, play_context)
        # The executor validates the task right after a condition that holds, and only then
        # templates its arguments (lookups included), connects and loads the action: stop there,
        # so that a task that does run has its arguments templated once, by its worker.
        copy.post_validate = _would_run
        try:
            res = probe.run()
        except Exception:  # any surprise: let a worker run it the ordinary way
            return None
        if res.get("skipped") is True and "results" not in res and not res.get("failed"):
            return copy, res
        return None


if os.environ.get("GPUCLUSTER_MITOGEN", "1") == "0":
    class StrategyModule(ControllerTasksMixin, _Linear):  # type: ignore[valid-type,misc]
        """Linear, with skips decided on the controller."""
else:
    try:
        import ansible_mitogen.loaders  # checks the Ansible version first
        import ansible_mitogen.strategy
    except ImportError:
        _display.warning("gpucluster_linear: Mitogen is not installed; running linear without it "
                         "(pip install -r requirements.txt for the faster one).")

        class StrategyModule(ControllerTasksMixin, _Linear):  # type: ignore[valid-type,misc,no-redef]
            """Linear, with skips decided on the controller."""
    else:
        class StrategyModule(ControllerTasksMixin, ansible_mitogen.strategy.StrategyMixin, _Linear):  # type: ignore[valid-type,misc,no-redef]
            """Linear, with Mitogen's connection and module execution and skips decided on the controller."""
