"""Every free-form shell/command/raw task in the roles parses as Ansible parses it before running it.

Ansible splits a free-form command with its own quote and Jinja2 tracking; an apostrophe in a
comment inside a shell block is an unbalanced quote there, and the task fails to load at converge
time ("failed at splitting arguments"), not at syntax check.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.parsing.splitter import split_args

from tests.unit.roles.tasks import every_task

ROLES = Path(__file__).resolve().parents[3] / "roles"
MODULES = ("ansible.builtin.shell", "ansible.builtin.command", "ansible.builtin.raw", "shell", "command", "raw")


def _free_form() -> list[tuple[str, str]]:
    out = []
    for path in sorted(ROLES.glob("*/*/*.yml")):
        if path.parent.name not in ("tasks", "handlers"):
            continue
        for task in every_task(yaml.safe_load(path.read_text())):
            for module in MODULES:
                value = task.get(module)
                if isinstance(value, str):
                    out.append((f"{path.relative_to(ROLES)}: {task.get('name')}", value))
    return out


CASES = _free_form()


def test_there_are_free_form_commands_to_check() -> None:
    assert len(CASES) > 10


@pytest.mark.parametrize(("where", "command"), CASES, ids=[w for w, _ in CASES])
def test_ansible_can_split_it(where: str, command: str) -> None:
    split_args(command)


def test_an_apostrophe_in_a_comment_is_caught() -> None:
    with pytest.raises(Exception, match="splitting arguments"):
        split_args("set -u\n# the driver's log\necho ok\n")
