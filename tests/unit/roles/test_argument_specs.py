"""Each role's meta/argument_specs.yml is its contract: kept in step with defaults/main.yml."""

from __future__ import annotations

import re

import pytest
import yaml

from tests.unit.roles.render import MY_ROLES, ROLES

_TYPES = {"str", "int", "bool", "list", "dict", "path", "float", "raw"}


def _load(role: str) -> tuple[dict, dict]:
    defaults = yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text()) or {}
    specs = yaml.safe_load((ROLES / role / "meta" / "argument_specs.yml").read_text())
    return defaults, specs["argument_specs"]["main"]["options"]


@pytest.mark.parametrize("role", MY_ROLES)
def test_every_default_is_specified_and_every_option_has_a_default(role: str) -> None:
    defaults, options = _load(role)
    assert sorted(set(defaults) - set(options)) == [], "defaults without an argument spec"
    assert sorted(set(options) - set(defaults)) == [], "argument specs without a default"


@pytest.mark.parametrize("role", MY_ROLES)
def test_options_are_typed_described_and_prefixed(role: str) -> None:
    _, options = _load(role)
    for name, spec in options.items():
        assert name.startswith(role + "_"), f"{name}: inputs start with the role name"
        assert spec.get("type") in _TYPES, f"{name}: type missing or unknown"
        assert spec.get("description"), f"{name}: description missing"
        if spec["type"] == "list":
            assert "elements" in spec, f"{name}: list without elements"


@pytest.mark.parametrize("role", MY_ROLES)
def test_literal_defaults_match_their_declared_type_and_choices(role: str) -> None:
    defaults, options = _load(role)
    python = {"str": str, "int": int, "bool": bool, "list": list, "dict": dict}
    for name, value in defaults.items():
        spec = options[name]
        if isinstance(value, str) and "{{" in value:
            continue  # templated from the inventory; Ansible validates the result at run time
        expected = python.get(spec["type"])
        if expected is not None:
            assert isinstance(value, expected), f"{name}: default {value!r} is not {spec['type']}"
        if "choices" in spec:
            assert value in spec["choices"], f"{name}: default {value!r} not in {spec['choices']}"


@pytest.mark.parametrize("role", MY_ROLES)
def test_role_layout(role: str) -> None:
    base = ROLES / role
    for part in ("defaults/main.yml", "meta/main.yml", "meta/argument_specs.yml",
                 "tasks/main.yml", "tasks/preflight.yml", "README.md"):
        assert (base / part).is_file(), f"{role}: {part} missing"
    internal = re.compile(r"\b__(?!" + role + r"_)[a-z]+_[a-z_]+")
    for path in base.rglob("*.yml"):
        text = path.read_text()
        found = [m for m in internal.findall(text) if not m.startswith("__validate")]
        assert found == [], f"{path}: internal variables of another role: {found}"


@pytest.mark.parametrize("role", MY_ROLES)
def test_readme_lists_every_input(role: str) -> None:
    _, options = _load(role)
    readme = (ROLES / role / "README.md").read_text()
    missing = [name for name in options if f"`{name}`" not in readme]
    assert missing == [], f"{role}/README.md does not list {missing}"


@pytest.mark.parametrize("role", MY_ROLES)
def test_templates_start_with_the_managed_header(role: str) -> None:
    for path in sorted((ROLES / role / "templates").glob("*.j2")):
        lines = path.read_text().splitlines()
        head = lines[1] if lines and lines[0].startswith("#!") else lines[0]
        if path.name == "hosts.j2":
            continue  # a blockinfile block: the markers carry the ownership
        # A format whose comments are not `#` names its style (apt.conf: `//`, comment('c')).
        assert head in ("{{ ansible_managed | comment }}", "{{ ansible_managed | comment('c') }}"), \
            f"{path.name}: first line is {head!r}"
