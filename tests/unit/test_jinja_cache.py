"""Compiled templates shared by a converge's workers (gpucluster/jinja_cache.py): a template is
compiled once per run and read back by every other worker, with exactly what compiling it gives;
what would compile differently is stored apart; nothing is read from a folder not this user's own."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import jinja2
import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from gpucluster import jinja_cache


@pytest.fixture
def folder(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "jinja"
    path.mkdir(mode=0o700)
    yield path
    jinja_cache.uninstall()


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every real compile (Jinja's code generation), by the template's text or tree."""
    seen: list[str] = []
    generate = jinja2.Environment._generate

    def counting(self: jinja2.Environment, source: object, *args: object, **kwargs: object) -> str:
        seen.append(repr(source)[:80])
        return generate(self, source, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(jinja2.Environment, "_generate", counting)
    return seen


def _as_another_worker() -> None:
    """What a fresh worker has: the folder, none of this process's memory of it."""
    folder = jinja_cache._installed["folder"]
    jinja_cache.uninstall()
    assert jinja_cache.install(folder)


def test_a_template_is_compiled_once_and_read_back_by_the_next_worker(folder: Path, compiles: list[str]) -> None:
    assert jinja_cache.install(folder)
    text = "{% for x in xs %}{{ x * 2 }},{% endfor %}{{ name | upper }}"
    first = jinja2.Environment().from_string(text).render(xs=[1, 2], name="gpu")
    assert first == "2,4,GPU" and len(compiles) == 1 and len(list(folder.iterdir())) == 1
    _as_another_worker()
    again = jinja2.Environment().from_string(text).render(xs=[3], name="node")
    assert again == "6,NODE" and len(compiles) == 1, "the second worker compiled the template again"


def test_an_expression_is_stored_by_its_own_text(folder: Path, compiles: list[str]) -> None:
    assert jinja_cache.install(folder)
    env = jinja2.Environment()
    assert env.compile_expression("a + 1")(a=1) == 2
    assert env.compile_expression("a * 10")(a=2) == 20
    assert len(compiles) == 2 and len(list(folder.iterdir())) == 2
    _as_another_worker()
    assert env.compile_expression("a + 1")(a=5) == 6 and len(compiles) == 2


def test_settings_that_change_the_compiled_code_are_stored_apart(folder: Path) -> None:
    assert jinja_cache.install(folder)
    text = "{% if true %}\n  kept\n{% endif %}\n<<v>>{{ v }}"
    variants = [jinja2.Environment(), jinja2.Environment(trim_blocks=True),
                jinja2.Environment(variable_start_string="<<", variable_end_string=">>")]
    cached = [env.from_string(text).render(v=1) for env in variants]
    jinja_cache.uninstall()
    plain = [type(env)(**{k: getattr(env, k) for k in ("trim_blocks", "variable_start_string", "variable_end_string")})
             .from_string(text).render(v=1) for env in variants]
    assert cached == plain and len(set(cached)) == 3 and len(list(folder.iterdir())) == 3


def test_ansibles_templating_gives_the_same_results_through_the_cache(folder: Path) -> None:
    variables = {"rails": [{"name": "rail0", "mtu": 9000}], "n": 3, "s": "a\\nb", "ip": "10.0.0.2"}
    texts = ["{{ rails | map(attribute='mtu') | max }}", "{{ n is odd }}", "{{ 'x' ~ s }}",
             "{% for r in rails %}{{ r.name }}={{ r.mtu }}\n{% endfor %}", "{{ ip }}",
             '{{ "c:\\newdir" }}']

    def render() -> list[object]:
        templar = Templar(loader=DataLoader(), variables=variables)
        out = [templar.template(trust_as_template(t)) for t in texts]
        out.append(templar.evaluate_conditional(trust_as_template("n > 2 and rails | length == 1")))
        return out

    plain = render()
    assert jinja_cache.install(folder)
    assert render() == plain
    _as_another_worker()
    assert render() == plain and len(list(folder.iterdir())) >= len(texts)


def test_ansibles_backslash_escaping_is_stored_apart(folder: Path) -> None:
    """Ansible escapes backslashes in an expression's strings when asked (a task's YAML), not otherwise:
    the same text compiles to two programs, and each compile gets its own back."""
    text = trust_as_template('{{ "a\\nb" }}')
    templar = Templar(loader=DataLoader(), variables={})
    plain = [templar.template(text), templar.template(text, escape_backslashes=False)]
    assert plain == ["a\\nb", "a\nb"]
    assert jinja_cache.install(folder)
    for _ in range(2):
        assert [templar.template(text), templar.template(text, escape_backslashes=False)] == plain
        _as_another_worker()
    assert len(list(folder.iterdir())) == 2


def test_the_escaping_is_told_apart_under_other_delimiters_too(folder: Path) -> None:
    """The escaping probe is lexed between the environment's own delimiters (a template's overrides
    or its #jinja2: header can change them)."""
    text = trust_as_template('<< "a\\nb" >>')
    overrides = {"variable_start_string": "<<", "variable_end_string": ">>"}
    templar = Templar(loader=DataLoader(), variables={})

    def both() -> list[object]:
        return [templar.template(text, overrides=overrides),
                templar.template(text, overrides=overrides, escape_backslashes=False)]

    plain = both()
    assert plain[0] != plain[1]
    assert jinja_cache.install(folder)
    for _ in range(2):
        assert both() == plain
        _as_another_worker()


def test_a_nested_compile_inside_an_expression_is_keyed_by_its_own_text(folder: Path) -> None:
    """A tree compiled while an expression's code is being generated (here: in an environment of other
    settings) is never stored under that expression's text."""
    from jinja2 import nodes

    def nested(value: object) -> object:
        return value

    outer, other = jinja2.Environment(), jinja2.Environment(trim_blocks=True)
    outer.filters["nested"] = other.filters["nested"] = nested
    assert jinja_cache.install(folder)
    generate = jinja2.Environment._generate
    calls: list[bool] = []

    def generate_with_nested(self: jinja2.Environment, source: object, *args: object, **kwargs: object) -> str:
        if self is outer and not calls:
            calls.append(True)
            tree = nodes.Template([nodes.Output([nodes.TemplateData("inner")])])
            assert other.from_string(tree).render() == "inner"
        return generate(self, source, *args, **kwargs)  # type: ignore[arg-type]

    jinja2.Environment._generate = generate_with_nested  # type: ignore[method-assign]
    try:
        assert outer.compile_expression("1 | nested")() == 1 and calls
    finally:
        jinja2.Environment._generate = generate  # type: ignore[method-assign]
    _as_another_worker()
    assert other.compile_expression("1 | nested")() == 1


def test_a_template_that_does_not_compile_fails_as_before_and_is_not_stored(folder: Path) -> None:
    assert jinja_cache.install(folder)
    with pytest.raises(jinja2.TemplateSyntaxError):
        jinja2.Environment().from_string("{% if %}")
    assert list(folder.iterdir()) == []


def test_a_damaged_entry_is_compiled_again(folder: Path, compiles: list[str]) -> None:
    assert jinja_cache.install(folder)
    assert jinja2.Environment().from_string("{{ 1 + 1 }}").render() == "2"
    (entry,) = folder.iterdir()
    entry.write_bytes(b"not marshal")
    _as_another_worker()
    assert jinja2.Environment().from_string("{{ 1 + 1 }}").render() == "2" and len(compiles) == 2


def test_a_folder_not_this_users_own_0700_is_never_used(tmp_path: Path) -> None:
    original = jinja2.Environment.compile
    open_folder = tmp_path / "shared"
    open_folder.mkdir()
    os.chmod(open_folder, 0o777)
    assert not jinja_cache.install(open_folder)
    assert not jinja_cache.install(tmp_path / "missing")
    assert jinja2.Environment.compile is original


def test_gpucluster_jinja_cache_0_switches_it_off() -> None:
    assert jinja_cache.wanted({}) and jinja_cache.wanted({"GPUCLUSTER_JINJA_CACHE": "1"})
    assert not jinja_cache.wanted({"GPUCLUSTER_JINJA_CACHE": "0"})
