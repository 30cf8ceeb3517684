"""Load a stack file into a validated :class:`Cluster`: the one place raw config is read.

Pulumi stack files keep their values under ``config:`` with namespaced keys; ours are
``gpucluster:<field>``. Keys of other namespaces (``aws:region``...) belong to Pulumi
providers and are left alone. Every problem is collected and raised together as one
:class:`InputError`, one line per problem, each naming its field path.

Files are read within stated bounds, before any parser sees them: at most
:data:`MAX_STACK_BYTES` for a stack file and :data:`MAX_DATA_BYTES` for a bill of materials
a hardware profile or a platform, regular files only, nesting at most :data:`MAX_DEPTH` levels,
integers at most :data:`MAX_INT_DIGITS` digits. YAML anchors and aliases are refused
outright (no stack file Pulumi writes has one, and they are how an alias bomb expands), and
so are repeated keys, which YAML would otherwise let the last one win silently.
"""

from __future__ import annotations

import difflib
import functools
import os
import re
import stat
import types
import typing
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode

from gpucluster.errors import InputError
from gpucluster.spec.cluster import Cluster, expand_nodes, pool_platform, rail_platform
from gpucluster.spec.images import reference_problems
from gpucluster.spec.models import (
    TARGET_KINDS,
    Bom,
    ClusterSpec,
    HardwareProfile,
    ImageManifest,
    LabTarget,
    Platform,
    Secret,
    TwinFile,
)
from gpucluster.spec.rules import semantic_problems

NAMESPACE = "gpucluster"
DATA_DIR = Path(__file__).resolve().parent.parent / "data"
DEFAULT_BOM = DATA_DIR / "bom.yaml"
PROFILE_DIR = DATA_DIR / "profiles"
PLATFORM_DIR = DATA_DIR / "platforms"
TWIN_DIR = DATA_DIR / "twins"
IMAGE_DIR = DATA_DIR / "images"

# A bare-metal stack file that declares every node of the largest cluster we accept
# (MAX_NODES, with MACs, disks and racks) is about 12 MB; a cloud one is a few KB.
MAX_STACK_BYTES = 16 << 20
# The bill of materials, the hardware profiles and the platforms are a few KB each.
MAX_DATA_BYTES = 1 << 20
# Our deepest real path is 6 levels (config > target > nodes > [i] > fabric_macs > [j]).
MAX_DEPTH = 64
# Large enough for any count, size or port; far below Python's 4300-digit conversion limit.
MAX_INT_DIGITS = 32
# Beyond this many problems a report stops helping: the rest are counted on one line.
MAX_PROBLEMS = 100


class FileProblem(InputError):
    """The file itself is unusable (missing, not a regular file, too large, not UTF-8)."""


def _mib(limit: int) -> str:
    return f"{limit >> 20} MiB" if limit % (1 << 20) == 0 else f"{limit:,} bytes"


_FILE_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
               (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _regular(mode: int, what: str, source: str) -> None:
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _FILE_KINDS if test(mode)), "not a file")
        raise FileProblem(f"cannot read {what}: not a regular file ({kind})", source=source)


def _too_large(size: int | None, what: str, limit: int, source: str) -> FileProblem:
    shown = f"{size:,} bytes" if size is not None else f"more than {_mib(limit)}"
    return FileProblem(f"{what} is {shown}; at most {_mib(limit)} is read", source=source)


def read_bounded(path: Path, what: str, limit: int) -> str:
    """The UTF-8 text of a regular file of at most ``limit`` bytes; FileProblem otherwise.

    Checked before anything parses it, and never by opening what is not a regular file
    (a FIFO would block, /dev/zero never ends); the open file is checked again, so a
    file swapped in between is caught too.
    """
    source = str(path)
    try:
        _regular(os.stat(path).st_mode, what, source)
        # O_NONBLOCK: had a FIFO been swapped in since the stat, opening it does not wait for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise FileProblem(f"{what} not found", source=source) from None
    except OSError as exc:
        raise FileProblem(f"cannot read {what}: {exc.strerror or exc}", source=source) from None
    try:
        info = os.fstat(fd)
        _regular(info.st_mode, what, source)
        if info.st_size > limit:
            raise _too_large(info.st_size, what, limit, source)
        chunks: list[bytes] = []
        left = limit + 1  # one byte more than allowed tells a file that grew since the fstat
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise FileProblem(f"cannot read {what}: {exc.strerror or exc}", source=source) from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:  # it grew since the fstat
        raise _too_large(None, what, limit, source)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileProblem(f"cannot read {what}: not UTF-8 text (byte {exc.start:,})", source=source) from None


# --- YAML, strictly -----------------------------------------------------------------------------


class _Refused(yaml.YAMLError):
    """Something we do not accept in a YAML file, at a line and column."""

    def __init__(self, mark: Any, message: str) -> None:
        super().__init__(message)
        self.mark = mark
        self.message = message


class _GuardedComposer(Composer):
    """Builds nodes from the parser's events, refusing anchors, aliases and deep nesting.

    libyaml's own composer (CSafeLoader's) recurses in C and segfaults on a file nested
    30,000 deep; its parser does not recurse, and hands out events one at a time. So events
    come from libyaml and nodes are built here, counting depth: a file is refused at the
    first event past MAX_DEPTH, before anything deeper is even scanned.
    """

    _depth = 0

    if typing.TYPE_CHECKING:  # the parser half of the loader provides it

        def peek_event(self) -> yaml.Event: ...

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        event = self.peek_event()
        if getattr(event, "anchor", None) is not None:  # an anchor (&a) or an alias (*a)
            raise _Refused(event.start_mark, "YAML anchors and aliases (&name, *name) are not accepted; "
                                             "write the value out where it is used")
        if self._depth >= MAX_DEPTH:
            raise _Refused(event.start_mark, f"nested deeper than {MAX_DEPTH} levels; at most {MAX_DEPTH} are read")
        self._depth += 1
        try:
            node: Node | None = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        return node


_MERGE_TAG = "tag:yaml.org,2002:merge"


class _StrictConstructor(SafeConstructor):
    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, MappingNode):
            first: dict[Any, int] = {}
            for key_node, _ in node.value:
                if not isinstance(key_node, ScalarNode) or key_node.tag == _MERGE_TAG:
                    continue
                key = self.construct_object(key_node)
                if key in first:
                    raise _Refused(key_node.start_mark,
                                   f"duplicate key {_show(key)} (first at line {first[key] + 1}); "
                                   "a key may appear once in a mapping")
                first[key] = key_node.start_mark.line
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping

    def construct_yaml_int(self, node: ScalarNode) -> int:
        text = str(self.construct_scalar(node))
        digits = len(text.replace("_", "").lstrip("+-"))
        if digits > MAX_INT_DIGITS:
            raise _Refused(node.start_mark,
                           f"an integer of {digits:,} digits; at most {MAX_INT_DIGITS} digits are read")
        value: int = super().construct_yaml_int(node)
        return value


# Mappings need no registration: SafeConstructor's construct_yaml_map calls self.construct_mapping.
_StrictConstructor.add_constructor("tag:yaml.org,2002:int", _StrictConstructor.construct_yaml_int)  # type: ignore[type-var]

_ParserLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StrictLoader(_GuardedComposer, _StrictConstructor, _ParserLoader):  # type: ignore[misc]
    """libyaml's parser (PyYAML's own where libyaml is missing), our composer and constructor."""

    def __init__(self, stream: str) -> None:
        # Composer.__init__ does not chain to the next class: initialise the parser side directly.
        _ParserLoader.__init__(self, stream)
        self.anchors: dict[Any, Node] = {}


def parse_yaml(text: str, source: str) -> Any:
    """The data of a YAML document, strictly (see the module docstring); InputError otherwise."""
    loader = _StrictLoader(text)
    try:
        return loader.get_single_data()
    except _Refused as exc:
        raise InputError(f"{_where(exc.mark)}{exc.message}", source=source) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"{_where(mark)}YAML does not parse: {problem}", source=source) from None
    finally:
        loader.dispose()


def _where(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""


def _read_yaml(path: Path, what: str) -> Any:
    limit = MAX_STACK_BYTES if what == "stack file" else MAX_DATA_BYTES
    return parse_yaml(read_bounded(path, what, limit), str(path))


def read_stack_file(path: Path) -> Any:
    """A stack file's raw data, read within the bounds above (the Pulumi program uses it too)."""
    return _read_yaml(path, "stack file")


# --- error lines ---------------------------------------------------------------------------------

_PLAIN_KEY = re.compile(r"[A-Za-z0-9_:/-]{1,64}")


def _show(value: Any) -> str:
    """A value for an error line: short, on one line, and never the inside of a mapping or list.

    Containers are named by type only: one may hold a Pulumi secret's ciphertext.
    """
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"an integer of {value.bit_length():,} bits"
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, str | int | float):
        text = repr(value)
        return text if len(text) <= 64 else f"{text[:48]}... ({len(text):,} characters)"
    if isinstance(value, Secret):
        return Secret.SHOWN
    return f"a {type(value).__name__}"


def capped(problems: list[str], limit: int = MAX_PROBLEMS) -> list[str]:
    """At most ``limit`` problem lines, then one line counting the rest."""
    if len(problems) <= limit:
        return problems
    return [*problems[:limit], f"and {len(problems) - limit:,} more problem(s)"]


def _path(loc: Iterable[int | str], root: str) -> str:
    out = root
    items = list(loc)
    # A tagged union puts the tag in the location ("target", "aws", "region"): drop it.
    if len(items) >= 2 and items[0] == "target" and items[1] in TARGET_KINDS:
        del items[1]
    for part in items:
        if isinstance(part, int):
            out += f"[{part}]"
        elif str(part).startswith(("function-after[", "function-plain[", "function-wrap[")):
            continue
        elif _PLAIN_KEY.fullmatch(str(part)) or part == "[key]":
            out += f".{part}"
        else:
            # A key from the file itself: quoted and shortened, so the line stays one short line.
            out += f"[{_show(str(part))}]"
    return out


def _reason(err: Mapping[str, Any], model: type[BaseModel], loc: tuple[Any, ...]) -> str:
    kind = err["type"]
    ctx = err.get("ctx") or {}
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        guess = _close_key(model, loc)
        return "unknown key" + (f" (did you mean {guess!r}?)" if guess else "")
    if kind == "greater_than_equal":
        return f"must be at least {ctx['ge']}"
    if kind == "less_than_equal":
        return f"must be at most {ctx['le']}"
    if kind == "too_short":
        return f"must have at least {ctx.get('min_length')} item(s)"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')}"
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        key = str(ctx.get("discriminator", "kind")).strip("'")
        if kind == "union_tag_not_found":
            return f"needs a {key!r} key, one of {', '.join(TARGET_KINDS)}"
        return f"unknown {key} {ctx.get('tag')!r}; must be one of {', '.join(TARGET_KINDS)}"
    if kind == "string_pattern_mismatch":
        return f"{_show(err.get('input'))} does not match the pattern {ctx.get('pattern')}"
    if kind == "value_error":
        return str(ctx.get("error", err["msg"]))
    if kind == "secret_shape":
        return str(err["msg"])
    if kind in {"int_parsing", "int_type", "int_from_float"}:
        return f"must be an integer (got {_show(err.get('input'))})"
    if kind in {"bool_parsing", "bool_type"}:
        return f"must be true or false (got {_show(err.get('input'))})"
    if kind in {"float_parsing", "float_type", "finite_number"}:
        return f"must be a finite number (got {_show(err.get('input'))})"
    if kind in {"string_type"}:
        return f"must be a string (got {type(err.get('input')).__name__})"
    if kind in {"list_type", "model_type", "dict_type", "model_attributes_type"}:
        want = {"list_type": "a list", "dict_type": "a mapping"}.get(kind, "a mapping")
        return f"must be {want} (got {type(err.get('input')).__name__})"
    return str(err["msg"]).rstrip(".").lower()


def _close_key(model: type[BaseModel], loc: tuple[Any, ...]) -> str | None:
    """Find the model a location points into and suggest its nearest field name."""
    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int) or current is None:
            continue
        fields = getattr(current, "model_fields", None)
        if fields is None:
            return None
        if part in fields:
            current = _inner_model(fields[part].annotation, None)
        elif str(part) in TARGET_KINDS:
            current = _target_model(str(part))
    fields = getattr(current, "model_fields", None) or {}
    names = [f.alias or n for n, f in fields.items()]
    match = difflib.get_close_matches(str(loc[-1]), names, n=1, cutoff=0.6)
    return match[0] if match else None


def _target_model(kind: str) -> type[BaseModel] | None:
    from gpucluster.spec import models

    kinds: dict[str, type[BaseModel]] = {
        "lab": models.LabTarget,
        "aws": models.AwsTarget,
        "azure": models.AzureTarget,
        "oci": models.OciTarget,
        "baremetal": models.BaremetalTarget,
    }
    return kinds.get(kind)


def _inner_model(annotation: Any, default: Any) -> Any:
    import typing

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _inner_model(arg, None)
        if found is not None:
            return found
    return default


def validation_problems(exc: ValidationError, model: type[BaseModel], root: str) -> list[str]:
    lines = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        lines.append(f"{_path(loc, root)}: {_reason(err, model, loc)}")
    return lines


# --- Pulumi secrets ------------------------------------------------------------------------------


def _leaves(annotation: Any, suffix: tuple[str, ...] = ()) -> Iterator[tuple[Any, tuple[str, ...]]]:
    """The types a field holds, with the path suffix to reach each: [] for a list item, * for a dict value."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        yield from _leaves(typing.get_args(annotation)[0], suffix)
    elif origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            yield from _leaves(arg, suffix)
    elif origin is list:
        yield from _leaves(typing.get_args(annotation)[0], (*suffix, "[]"))
    elif origin is dict:
        yield from _leaves(typing.get_args(annotation)[1], (*suffix, "*"))
    else:
        yield annotation, suffix


def _secret_paths(model: type[BaseModel], prefix: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    for name, info in model.model_fields.items():
        here = (*prefix, info.alias or name)
        for leaf, suffix in _leaves(info.annotation):
            if leaf is Secret:
                yield (*here, *suffix)
            elif isinstance(leaf, type) and issubclass(leaf, BaseModel):
                yield from _secret_paths(leaf, (*here, *suffix))


@functools.cache
def secret_fields() -> frozenset[tuple[str, ...]]:
    """Where a stack file may hold a Pulumi secret: the fields whose type admits a Secret."""
    return frozenset(_secret_paths(ClusterSpec, ()))


def _secret_problems(mapping: dict[str, Any]) -> tuple[list[str], set[tuple[str | int, ...]]]:
    """A line for each ``{secure: ...}`` where no secret may be, and those fields' locations.

    The line names the field and never the value. Pydantic's own errors at or under these
    locations are dropped (see :func:`_spec_problems`): they would say the same, less clearly.
    """
    allowed = secret_fields()
    may = ", ".join(sorted(f"{NAMESPACE}." + ".".join(p).replace(".[]", "[]") for p in allowed))
    problems: list[str] = []
    refused: set[tuple[str | int, ...]] = set()
    todo: list[tuple[tuple[str | int, ...], Any]] = [((key,), value) for key, value in reversed(mapping.items())]
    while todo:  # depth-first, in document order
        loc, value = todo.pop()
        if Secret.is_secure_value(value):
            generic = tuple("[]" if isinstance(part, int) else part for part in loc)
            if generic not in allowed:
                refused.add(loc)
                problems.append(f"{_path(loc, NAMESPACE)}: a Pulumi secret is not accepted here; "
                                f"only these fields may be secret: {may}")
        elif isinstance(value, dict):
            todo += [((*loc, str(k)), v) for k, v in reversed(value.items())]
        elif isinstance(value, list):
            todo += [((*loc, i), v) for i, v in reversed(list(enumerate(value)))]
    return problems, refused


def _spec_problems(exc: ValidationError, refused: set[tuple[str | int, ...]]) -> list[str]:
    """The spec's validation problems, less those at or under a refused secret."""
    lines = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        # The location as the file has it: without the union's tag or validator names.
        raw = tuple(p for i, p in enumerate(loc) if not (
            (i == 1 and loc[0] == "target" and p in TARGET_KINDS) or str(p).startswith("function-")))
        if refused and any(raw[:n] in refused for n in range(1, len(raw) + 1)):
            continue
        lines.append(f"{_path(loc, NAMESPACE)}: {_reason(err, ClusterSpec, loc)}")
    return lines


_Named = TypeVar("_Named", HardwareProfile, Platform, TwinFile, ImageManifest)


def _load_named(directory: Path, model: type[_Named], what: str) -> dict[str, _Named]:
    """Every ``*.yaml`` of a data folder as ``model``, keyed by its name, which must be the file's;
    every problem of every file collected and raised once."""
    found: dict[str, _Named] = {}
    problems: list[str] = []
    key = what.split()[-1]
    for path in sorted(directory.glob("*.yaml")):
        raw = _read_yaml(path, what)
        try:
            item = model.model_validate(raw)
        except ValidationError as exc:
            problems += [f"{path.name}: {p}" for p in validation_problems(exc, model, key)]
            continue
        if item.name != path.stem:
            problems.append(f"{path.name}: {key}.name {item.name!r} must equal the file name")
        found[item.name] = item
    if problems:
        raise InputError(capped(problems), source=str(directory))
    return found


@functools.cache
def load_profiles(directory: Path = PROFILE_DIR) -> dict[str, HardwareProfile]:
    return _load_named(directory, HardwareProfile, "hardware profile")


@functools.cache
def load_platforms(directory: Path = PLATFORM_DIR) -> dict[str, Platform]:
    return _load_named(directory, Platform, "platform")


@functools.cache
def load_twins(directory: Path = TWIN_DIR) -> dict[str, TwinFile]:
    return _load_named(directory, TwinFile, "twin")


@functools.cache
def load_images(directory: Path = IMAGE_DIR) -> dict[str, ImageManifest]:
    """The image manifests (what each pinned cloud image ships), by name."""
    return _load_named(directory, ImageManifest, "image manifest")


def _overlaid(base: Any, overlay: Any) -> Any:
    """``overlay`` over ``base``: mappings merge key by key, anything else replaces."""
    if isinstance(base, dict) and isinstance(overlay, dict):
        merged = dict(base)
        for key, value in overlay.items():
            merged[key] = _overlaid(base[key], value) if key in base else value
        return merged
    return overlay


def load_bom(path: Path = DEFAULT_BOM, overlay: Path | None = None) -> Bom:
    """The bill of materials at ``path``, with ``overlay`` (a file of only the keys it changes, a
    stack's ``bom:``) merged over it and the result validated as a whole."""
    raw = _read_yaml(path, "bill of materials")
    source = str(path)
    if overlay is not None:
        top = _read_yaml(overlay, "bill of materials")
        source = str(overlay)
        if not isinstance(top, dict):
            raise InputError("a bill-of-materials overlay is a mapping of the keys it changes "
                             f"(such as nvidia_driver: {{version: ...}}), not a {type(top).__name__}", source=source)
        raw = _overlaid(raw, top)
    try:
        return Bom.model_validate(raw)
    except ValidationError as exc:
        raise InputError(capped(validation_problems(exc, Bom, "bom")), source=source) from None


def spec_mapping(raw: Any, source: str) -> dict[str, Any]:
    """Pick the ``gpucluster:`` keys out of a Pulumi stack file's ``config:``."""
    if not isinstance(raw, dict):
        raise InputError("a stack file must be a mapping with a 'config:' key", source=source)
    config = raw.get("config")
    if not isinstance(config, dict):
        raise InputError("config: must be a mapping of namespaced keys (gpucluster:...)", source=source)
    spec: dict[str, Any] = {}
    for key, value in config.items():
        namespace, sep, field = str(key).partition(":")
        if sep and namespace == NAMESPACE:
            spec[field] = value
    if not spec:
        raise InputError(f"config: has no '{NAMESPACE}:' keys", source=source)
    return spec


def _site_platforms(spec: ClusterSpec, stack: Path, source: str) -> dict[str, Platform]:
    """The shipped platforms, with the site's own (``platforms:``, a folder beside the stack file
    or below it) added or put in place of the shipped ones of their names."""
    platforms = load_platforms()
    if not spec.platforms:
        return platforms
    path = _beside_stack(stack, spec.platforms, "platforms", "the site's platform files", source)
    field = f"{NAMESPACE}.platforms"
    if not path.is_dir():
        raise InputError(f"{field}: {path}: no such folder (the site's platform files, one per platform)",
                         source=source)
    try:
        own = _load_named(path, Platform, "platform")
    except InputError as exc:
        where = f"{exc.source}: " if exc.source and exc.source != str(path) else ""
        raise InputError([f"{field}: {where}{p}" for p in exc.problems], source=str(path)) from None
    if not own:
        raise InputError(f"{field}: {path}: holds no platform file (*.yaml)", source=source)
    return {**platforms, **own}


def _bom_file(spec: ClusterSpec, stack: Path, source: str) -> Path:
    """The bill-of-materials overlay a spec names: a file beside the stack file or below its folder.

    Resolved first (``..`` and symlinks), so neither can lead to /etc/passwd or /dev/zero;
    the package's data folder is allowed too, as the home of the default.
    """
    if not spec.bom:
        return DEFAULT_BOM
    return _beside_stack(stack, spec.bom, "bom", "the bill of materials", source, also=DATA_DIR)


def _beside_stack(stack: Path, value: str, key: str, what: str, source: str, also: Path | None = None) -> Path:
    """The path a spec field (``key``) names relative to the stack file, resolved first (``..`` and
    symlinks), so neither can lead outside the stack file's folder (or ``also``)."""
    folder = stack.parent.resolve()
    path = (folder / value).resolve()
    roots = (folder,) if also is None else (folder, also.resolve())
    if not any(path.is_relative_to(root) for root in roots):
        raise InputError(f"{NAMESPACE}.{key}: {_show(value)} resolves to {path}, outside the stack file's folder; "
                         f"keep {what} beside the stack file or below it", source=source)
    return path


def load_spec(path: str | Path) -> Cluster:
    """Read, validate and resolve a stack file; raise InputError listing every problem."""
    stack = Path(path)
    source = str(stack)
    mapping = spec_mapping(read_stack_file(stack), source)
    secret_problems, refused = _secret_problems(mapping)
    try:
        spec = ClusterSpec.model_validate(mapping)
    except ValidationError as exc:
        raise InputError(capped(secret_problems + _spec_problems(exc, refused)), source=source) from None
    if secret_problems:
        raise InputError(capped(secret_problems), source=source)
    bom_path = _bom_file(spec, stack, source)
    try:
        # The spec's `bom:` is an overlay on the shipped bill of materials.
        bom = load_bom(DEFAULT_BOM, overlay=bom_path) if spec.bom else load_bom()
    except FileProblem as exc:
        if not spec.bom:
            raise
        raise InputError(f"{NAMESPACE}.bom: {bom_path}: {exc.problems[0]}", source=source) from None
    profiles = load_profiles()
    platforms = _site_platforms(spec, stack, source)
    problems = semantic_problems(spec, bom, profiles, platforms, load_twins() if spec.twin is not None else {})
    problems += reference_problems(spec, load_images())
    if problems:
        raise InputError(capped(problems), source=source)
    used = {pool.profile for pool in spec.node_pools}
    shapes = {pool_platform(spec, pool) for pool in spec.node_pools}
    chosen = {name: platforms[name] for name in sorted(shapes)}
    if isinstance(spec.target, LabTarget):
        # The lab's platforms list the most rails a lab node may have; the spec says how many it has.
        chosen = {name: rail_platform(p, spec.target.rails) for name, p in chosen.items()}
    return Cluster(
        spec=spec,
        bom=bom,
        profiles={name: profiles[name] for name in sorted(used)},
        platforms=chosen,
        nodes=expand_nodes(spec, chosen),
        source=stack,
    )
