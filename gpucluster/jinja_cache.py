"""Jinja's compiled templates, shared by every worker of one converge.

Ansible forks a worker per host and task, and each worker compiles every template it meets
(a task's arguments, its ``when``, each role variable a template reads, each file the template
lookup renders) from its text: lexing, parsing, generating Python and compiling it, again in the
next worker for the same text. On the README lab that came to about a third of the workers' CPU
on a no-op converge (docs/roles.md, "Converge speed").

:func:`install`, called in Ansible's main process before it forks a worker (the vars plugin
gpucluster.cluster.models, when ``gpucluster converge`` names a folder in
``GPUCLUSTER_JINJA_CACHE_DIR``), wraps Jinja's ``Environment.compile`` so that a compiled template
is written once to that folder and read back (``marshal``) by every later compile of the same
text. The key is a digest of the text and of what else the compiled code depends on, but for the
filter and test plugins (below):

- the environment's syntax and whitespace settings, its class, its code generator's class, its
  extensions, whether it is async, sandboxed or has a finalizer;
- how this compile lexes a string with a backslash (Ansible escapes backslashes when it compiles a
  task's template, not when Jinja compiles an include at run time), and the collection a short
  name resolves in;
- the template's name and file name and the ``defer_init`` flag;
- Python's, Jinja's and Ansible's versions, and Ansible's ALLOW_EMBEDDED_TEMPLATES (read once, when
  the cache is installed).

What a template compiles to also depends on the filters and tests it calls (whether each exists,
and how it takes its context); the plugins are the same for the whole of one run (the roles bring
no filter or test of their own), and can change between runs when a plugin file does. So the
folder lives for one run only: ``gpucluster converge`` makes it in the run folder (this user's own,
0700, checked again here) and removes it at the end. A text that fails to compile is never stored;
any trouble reading or writing the folder falls back to compiling. ``GPUCLUSTER_JINJA_CACHE=0``
turns it off (the benchmark measures what it buys). The entries hold the templates' text, a secret
in a templated string included, like the run's extra-vars file beside them: private to this user,
and removed with the folder when the run ends.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import marshal
import os
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import CodeType
from typing import Any

# The folder, set by `gpucluster converge` for ansible-playbook; unset, nothing is installed.
DIR_ENV = "GPUCLUSTER_JINJA_CACHE_DIR"
# "0" asks `gpucluster converge` not to set DIR_ENV.
SWITCH_ENV = "GPUCLUSTER_JINJA_CACHE"
# Bumped when what a stored entry holds changes.
FORMAT = 1

_SETTINGS = ("block_start_string", "block_end_string", "variable_start_string", "variable_end_string",
             "comment_start_string", "comment_end_string", "line_statement_prefix", "line_comment_prefix",
             "trim_blocks", "lstrip_blocks", "newline_sequence", "keep_trailing_newline", "optimized",
             "is_async", "sandboxed", "autoescape")

# The text of the expression compile_expression is compiling (Jinja hands compile() its parsed tree).
_expression: contextvars.ContextVar[str | None] = contextvars.ContextVar("gpucluster_jinja_expression", default=None)
_installed: dict[str, Any] = {}


def wanted(environ: Mapping[str, str]) -> bool:
    """Whether ``gpucluster converge`` should give its run a cache (:data:`SWITCH_ENV`)."""
    return environ.get(SWITCH_ENV, "1").strip() != "0"


def _versions() -> str:
    """What is the same for every compile of the run: the versions and Ansible's
    ALLOW_EMBEDDED_TEMPLATES (its code generator reads it)."""
    import jinja2

    try:
        from ansible import constants  # type: ignore[import-untyped]
        from ansible.release import __version__ as ansible_version  # type: ignore[import-untyped]
        embedded = constants.config.get_config_value("ALLOW_EMBEDDED_TEMPLATES")
    except Exception:  # no Ansible, or a version without the setting
        ansible_version, embedded = "none", None
    return f"{FORMAT}|{sys.version}|{jinja2.__version__}|{ansible_version}|{embedded!r}"


_VERSIONS = ""


# Lexed in each compile's own setting, between the environment's own expression delimiters: Ansible
# escapes backslashes in an expression's strings when it compiles a task's template, not when Jinja
# compiles an include at run time or the template lookup renders a file, and the tokens show which.
_PROBE = ' "\\n" '


def _compile_state(env: Any) -> tuple[Any, ...]:
    """What reaches the compiler besides the environment's settings: how this compile lexes a
    string with a backslash, and the collection a short filter name resolves in."""
    try:
        from ansible.utils.collection_loader import AnsibleCollectionConfig  # type: ignore[import-untyped]
        collection = AnsibleCollectionConfig.default_collection
    except ImportError:
        collection = None
    probe = f"{env.variable_start_string}{_PROBE}{env.variable_end_string}"
    return (tuple(env.lex(probe)), collection)


def _signature(env: Any) -> str:
    settings = tuple(repr(getattr(env, name, None)) for name in _SETTINGS)
    return repr((type(env).__module__, type(env).__qualname__, env.code_generator_class.__module__,
                 env.code_generator_class.__qualname__, settings, sorted(env.extensions),
                 env.finalize is not None, _compile_state(env)))


def key(env: Any, source: str, kind: str, name: str | None, filename: str | None, defer_init: bool) -> str:
    """The stored entry's name for ``source`` compiled in ``env``."""
    signature = _signature(env)
    digest = hashlib.sha256()
    for part in (_VERSIONS, signature, kind, repr(name), repr(filename), repr(defer_init), source):
        digest.update(part.encode("utf-8", "surrogatepass"))
        digest.update(b"\0")
    return digest.hexdigest()


def _load(path: Path) -> CodeType | None:
    try:
        with open(path, "rb") as f:
            code = marshal.loads(f.read())
    except (OSError, EOFError, ValueError, TypeError):
        return None
    return code if isinstance(code, CodeType) else None


def _store(path: Path, code: CodeType) -> None:
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(marshal.dumps(code))
        os.replace(tmp, path)
    except (OSError, ValueError):
        with contextlib.suppress(OSError):
            os.unlink(tmp)


@contextlib.contextmanager
def _compiling_expression(source: str | None) -> Iterator[None]:
    """``source``: the expression being compiled; None around a real compile, so that a compile
    nested in it (a filter plugin loaded while generating the code) is keyed by its own text."""
    token = _expression.set(source)
    try:
        yield
    finally:
        _expression.reset(token)


def install(folder: str | os.PathLike[str]) -> bool:
    """Wrap Jinja's compile with the cache in ``folder`` (this user's own 0700 folder; anything
    else is refused: False). Once per process; True when installed."""
    from gpucluster import sockets
    from gpucluster.errors import InputError

    global _VERSIONS
    if _installed:
        return True
    path = Path(folder)
    try:
        sockets.check_private(path)
    except (InputError, OSError):
        return False
    from jinja2 import nodes
    from jinja2.environment import Environment

    _VERSIONS = _versions()
    original_compile = Environment.compile
    original_expression = Environment.compile_expression
    memory: dict[str, CodeType] = {}

    def _compile(self: Any, source: Any, name: str | None = None, filename: str | None = None,
                 raw: bool = False, defer_init: bool = False) -> Any:
        if raw:
            return original_compile(self, source, name, filename, raw, defer_init)
        if isinstance(source, str):
            entry = key(self, source, "template", name, filename, defer_init)
        elif isinstance(source, nodes.Template) and (text := _expression.get()) is not None:
            entry = key(self, text, "expression", name, filename, defer_init)
        else:
            return original_compile(self, source, name, filename, raw, defer_init)
        code = memory.get(entry) or _load(path / entry)
        if code is None:
            with _compiling_expression(None):
                code = original_compile(self, source, name, filename, raw, defer_init)
            _store(path / entry, code)
        memory[entry] = code
        return code

    def _compile_expression(self: Any, source: str, undefined_to_none: bool = True) -> Any:
        with _compiling_expression(source):
            return original_expression(self, source, undefined_to_none)

    Environment.compile = _compile  # type: ignore[method-assign]
    Environment.compile_expression = _compile_expression  # type: ignore[method-assign]
    _installed.update(folder=path, compile=original_compile, compile_expression=original_expression)
    return True


def uninstall() -> None:
    """Jinja's own compile back (for tests)."""
    if not _installed:
        return
    from jinja2.environment import Environment

    Environment.compile = _installed["compile"]  # type: ignore[method-assign]
    Environment.compile_expression = _installed["compile_expression"]  # type: ignore[method-assign]
    _installed.clear()


__all__ = ["DIR_ENV", "SWITCH_ENV", "install", "key", "uninstall", "wanted"]
