"""gpucluster.cluster.template renders what ansible.builtin.template's lookup renders, without its copy.

The roles render their files through the project's lookup (plugins/lookup/template.py): the builtin,
handed the task's variables as a mapping whose deep copy is shallow. Both lookups run here side by
side in one real ansible-playbook, on templates that use what the roles' templates use: variables
that are templates themselves, template_vars, the variables the lookup adds, an include found on the
search path, whitespace control and trailing newlines.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from tests.unit.loading import load_file, run_local_play

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[3]
LOOKUP = REPO / "collections/ansible_collections/gpucluster/cluster/plugins/lookup/template.py"

TEMPLATES = {
    "main.j2": (
        "# {{ ansible_managed }}\n"
        "# {{ template_path | basename }} / {{ template_host | length > 0 }}\n"
        "{% for rail in rails %}\n"
        "[{{ rail.name }}]\n"
        "  address = {{ rail.address }}/{{ prefix }}\n"
        "{% endfor %}\n"
        "mtu = {{ mtu }}\n"
        "item = {{ item | default('none') }}\n"
        "{% include 'part.j2' %}\n"
        "{#- a comment #}\n"
        "end\n\n"),
    "part.j2": "part of {{ cluster }}   \n",
    "strip.j2": "{% if true %}\n  kept\n{% endif %}\nlast",
    "append.j2": "{% set _ = rails.append({'name': 'extra'}) %}{{ rails | length }}",
}
VARS = {
    "cluster": "lab",
    "mtu": "{{ base_mtu | int + 0 }}",
    "base_mtu": 9000,
    "prefix": 24,
    "rails": [{"name": "rail0", "address": "10.1.0.2"}, {"name": "rail1", "address": "10.1.1.2"}],
}


def _run(tmp_path: Path, tasks: list[dict]) -> dict:
    (tmp_path / "templates").mkdir(exist_ok=True)
    for name, text in TEMPLATES.items():
        (tmp_path / "templates" / name).write_text(text)
    play = [{"hosts": "localhost", "gather_facts": False, "vars": VARS, "tasks": tasks}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    run_local_play(tmp_path / "play.yml", tmp_path)
    return json.loads((tmp_path / "out.json").read_text())


def test_the_lookup_renders_what_the_builtin_renders(tmp_path: Path) -> None:
    calls = {
        "main": "'main.j2'",
        "main_item": "'main.j2', template_vars={'item': 'rail0', 'mtu': 4092}",
        "strip": "'strip.j2'",
        "strip_untrimmed": "'strip.j2', trim_blocks=false",
        "two": "'part.j2', 'strip.j2'",
    }
    got: dict[str, dict[str, str]] = {}
    for plugin in ("ansible.builtin.template", "gpucluster.cluster.template"):
        got[plugin] = {key: f"{{{{ lookup({plugin!r}, {args}) }}}}" for key, args in calls.items()}
    tasks = [{"ansible.builtin.copy": {"dest": str(tmp_path / "out.json"), "content": "{{ rendered | to_json }}"},
              "vars": {"rendered": got}}]
    out = _run(tmp_path, tasks)
    builtin, ours = out["ansible.builtin.template"], out["gpucluster.cluster.template"]
    assert ours == builtin
    # What the templates ask for is there: the checks above compare two real renderings.
    assert "address = 10.1.1.2/24\n" in ours["main"] and "mtu = 9000\n" in ours["main"]
    assert "item = rail0\n" in ours["main_item"] and "mtu = 4092\n" in ours["main_item"]
    assert "part of lab" in ours["main"] and "# main.j2 / True\n" in ours["main"]
    assert ours["strip"] != ours["strip_untrimmed"]


def test_the_callers_variables_stay_as_they_were(tmp_path: Path) -> None:
    """The builtin adds template_path, item from template_vars and the like to its copy: none of them
    reaches the task's own variables, and a variable the template reads, or appends to, keeps its value."""
    tasks = [
        {"ansible.builtin.set_fact": {
            "first": "{{ lookup('gpucluster.cluster.template', 'main.j2',"
                     " template_vars={'item': 'x', 'cluster': 'other'}) }}",
            "appended": "{{ lookup('gpucluster.cluster.template', 'append.j2') }}"}},
        {"ansible.builtin.copy": {"dest": str(tmp_path / "out.json"), "content": "{{ state | to_json }}"},
         "vars": {"state": {"template_path": "{{ template_path | default('unset') }}",
                            "item": "{{ item | default('unset') }}",
                            "cluster": "{{ cluster }}", "rails": "{{ rails }}",
                            "part_of_other": "{{ 'part of other' in first }}", "appended": "{{ appended }}"}}},
    ]
    out = _run(tmp_path, tasks)
    # The template appended to its own copy of rails (3 there), the task's rails still has 2.
    assert out == {"template_path": "unset", "item": "unset", "cluster": "lab", "rails": VARS["rails"],
                   "part_of_other": True, "appended": 3}


def test_a_deep_copy_of_the_handed_variables_is_a_new_dict_with_the_same_values() -> None:
    mod = load_file(LOOKUP, "gc_template_lookup")
    nested = {"a": [1, 2]}
    shared = mod._SharedValues({"x": nested})
    dup = copy.deepcopy(shared)
    assert type(dup) is dict and dup == {"x": nested} and dup["x"] is nested
    dup["y"] = 1
    assert "y" not in shared
