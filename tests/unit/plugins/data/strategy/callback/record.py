"""Test callback: every host-task result, in order of arrival per host, as JSON lines."""

from __future__ import annotations

import json
import os
from typing import Any

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: record
type: aggregate
short_description: write every task result to $RECORD_FILE as JSON lines
description: For tests of the gpucluster.cluster.linear strategy.
"""

# Fields that differ between two runs of the same play for reasons other than the strategy.
_VOLATILE = {"start", "end", "delta", "duration"}


def _clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "record"
    CALLBACK_NEEDS_ENABLED = True

    def _write(self, status: str, result: Any) -> None:
        line = {"host": result.host.get_name(), "task": result.task.get_name(), "status": status,
                "result": _clean(dict(result.result))}
        with open(os.environ["RECORD_FILE"], "a") as fh:
            fh.write(json.dumps(line, sort_keys=True, default=str) + "\n")

    def v2_runner_on_ok(self, result: Any) -> None:
        self._write("ok", result)

    def v2_runner_on_skipped(self, result: Any) -> None:
        self._write("skipped", result)

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        self._write("ignored" if ignore_errors else "failed", result)

    def v2_runner_item_on_ok(self, result: Any) -> None:
        self._write("item ok", result)

    def v2_runner_item_on_skipped(self, result: Any) -> None:
        self._write("item skipped", result)

    def v2_playbook_on_include(self, included_file: Any) -> None:
        with open(os.environ["RECORD_FILE"], "a") as fh:
            hosts = sorted(h.get_name() for h in included_file._hosts)
            fh.write(json.dumps({"include": os.path.basename(included_file._filename), "hosts": hosts}) + "\n")
