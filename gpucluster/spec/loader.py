"""Load a stack file into a validated :class:`Cluster`: the one place raw config is read.

Pulumi stack files keep their values under ``config:`` with namespaced keys; ours are
``gpucluster:<field>``. Keys of other namespaces (``aws:region``...) belong to Pulumi
providers and are left alone. Every problem is collected and raised together as one
:class:`InputError`, one line per problem, each naming its field path.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from gpucluster.errors import InputError
from gpucluster.spec.cluster import Cluster, expand_nodes
from gpucluster.spec.models import TARGET_KINDS, Bom, ClusterSpec, HardwareProfile

NAMESPACE = "gpucluster"
DATA_DIR = Path(__file__).resolve().parent.parent / "data"
DEFAULT_BOM = DATA_DIR / "bom.yaml"
PROFILE_DIR = DATA_DIR / "profiles"


def _read_yaml(path: Path, what: str) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{what} not found", source=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {what}: {exc}", source=str(path)) from None
    try:
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"{where}YAML does not parse: {problem}", source=str(path)) from None


def _path(loc: Iterable[int | str], root: str) -> str:
    out = root
    items = list(loc)
    # A tagged union puts the tag in the location ("target", "aws", "region"): drop it.
    if len(items) >= 2 and items[0] == "target" and items[1] in TARGET_KINDS:
        del items[1]
    for part in items:
        if isinstance(part, int):
            out += f"[{part}]"
        elif str(part).startswith(("function-after[", "function-plain[")):
            continue
        else:
            out += f".{part}"
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
        return f"{err.get('input')!r} does not match the pattern {ctx.get('pattern')}"
    if kind == "value_error":
        return str(ctx.get("error", err["msg"]))
    if kind in {"int_parsing", "int_type", "int_from_float"}:
        return f"must be an integer (got {err.get('input')!r})"
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


@functools.cache
def load_profiles(directory: Path = PROFILE_DIR) -> dict[str, HardwareProfile]:
    profiles: dict[str, HardwareProfile] = {}
    problems: list[str] = []
    for path in sorted(directory.glob("*.yaml")):
        raw = _read_yaml(path, "hardware profile")
        try:
            profile = HardwareProfile.model_validate(raw)
        except ValidationError as exc:
            problems += [f"{path.name}: {p}" for p in validation_problems(exc, HardwareProfile, "profile")]
            continue
        if profile.name != path.stem:
            problems.append(f"{path.name}: profile.name {profile.name!r} must equal the file name")
        profiles[profile.name] = profile
    if problems:
        raise InputError(problems, source=str(directory))
    return profiles


def load_bom(path: Path = DEFAULT_BOM) -> Bom:
    raw = _read_yaml(path, "bill of materials")
    try:
        return Bom.model_validate(raw)
    except ValidationError as exc:
        raise InputError(validation_problems(exc, Bom, "bom"), source=str(path)) from None


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


def load_spec(path: str | Path) -> Cluster:
    """Read, validate and resolve a stack file; raise InputError listing every problem."""
    stack = Path(path)
    source = str(stack)
    mapping = spec_mapping(_read_yaml(stack, "stack file"), source)
    try:
        spec = ClusterSpec.model_validate(mapping)
    except ValidationError as exc:
        raise InputError(validation_problems(exc, ClusterSpec, NAMESPACE), source=source) from None
    bom_path = (stack.parent / spec.bom) if spec.bom else DEFAULT_BOM
    try:
        bom = load_bom(bom_path)
    except InputError as exc:
        if spec.bom and "not found" in exc.problems[0]:
            raise InputError(f"{NAMESPACE}.bom: file {bom_path} not found", source=source) from None
        raise
    profiles = load_profiles()

    from gpucluster.spec.checks import semantic_problems

    problems = semantic_problems(spec, bom, profiles)
    if problems:
        raise InputError(problems, source=source)
    used = {pool.profile for pool in spec.node_pools}
    return Cluster(
        spec=spec,
        bom=bom,
        profiles={name: profiles[name] for name in sorted(used)},
        nodes=expand_nodes(spec),
        source=stack,
    )
