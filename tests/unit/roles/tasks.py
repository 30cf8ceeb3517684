"""Every task of a parsed task file or playbook, those nested in blocks (and a play's task lists) too."""

from __future__ import annotations

from typing import Any

# Where a task or play nests more tasks.
NESTED = ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers")


def every_task(node: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(node, list):
        for item in node:
            found += every_task(item)
    elif isinstance(node, dict):
        found.append(node)
        for key in NESTED:
            found += every_task(node.get(key))
    return found
