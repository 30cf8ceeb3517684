"""Lookup `gpucluster.cluster.template`: ansible.builtin.template's lookup without its deep copy.

The builtin lookup starts every call with a deep copy of the task's variables (the whole
inventory's data as this host sees it), only so that it can add its own few (``template_path``
and the like) without touching the caller's. The roles render 26 files per node this way on
every converge; the copies came to about 7 % of a no-op converge's controller CPU on the README
lab (docs/roles.md, "Converge speed"). Here the builtin lookup runs unchanged, with the
variables handed over as a mapping whose deep copy is a new top-level dict holding the same
values: the builtin adds its keys to that dict, and the caller's stays as it was. A list or a
dict the template reads reaches it as a copy of its own (Ansible hands templates lazy copies of
containers), so a template that appends to one changes only its copy; the roles' templates only
read (tests/unit/plugins/test_template_lookup.py checks both).

Its options, its search path and its output are the builtin's (``ansible-doc -t lookup
ansible.builtin.template``), byte for byte: tests/unit/plugins/test_template_lookup.py renders
the roles' templates through both.
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.lookup.template import LookupModule as _BuiltinTemplate

DOCUMENTATION = """
    name: template
    short_description: ansible.builtin.template's lookup, without the deep copy of the variables
    description:
      - Renders each term (a template file, searched for as the builtin lookup searches) with the
        task's variables; the same options and the same output as ansible.builtin.template's lookup.
      - The variables reach the builtin as a mapping whose deep copy is shallow (a new dict, the
        same values), which is what the builtin needs to add its own variables.
    options:
      _terms:
        description: The template files.
      template_vars:
        description: Variables for the template beside the task's (they win over the task's).
        type: dict
        default: {}
      variable_start_string:
        description: What opens an expression.
        type: str
        default: '{{'
      variable_end_string:
        description: What closes an expression.
        type: str
        default: '}}'
      comment_start_string:
        description: What opens a comment.
        type: str
        default: '{#'
      comment_end_string:
        description: What closes a comment.
        type: str
        default: '#}'
      trim_blocks:
        description: Whether the first newline after a block tag is removed.
        type: bool
        default: true
"""


class _SharedValues(dict):  # type: ignore[type-arg]
    """The task's variables; a deep copy is a new dict with the same values."""

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return dict(self)


class LookupModule(_BuiltinTemplate):
    def run(self, terms: list[Any], variables: Any = None, **kwargs: Any) -> list[Any]:
        shared = None if variables is None else _SharedValues(variables)
        return super().run(terms, shared, **kwargs)
