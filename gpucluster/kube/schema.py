"""Validate manifests against the Kubernetes OpenAPI (JSON) schema of a given version.

The schemas come from the ``kubernetes-validate`` package, which bundles the upstream
OpenAPI definitions converted to JSON schema, one folder per minor version. Validation is
strict (unknown fields are errors) and must use the exact minor version asked for: a
fallback to an older schema would hide fields that version does not have.
"""

from __future__ import annotations

from typing import Any

from gpucluster.errors import InputError


def schema_versions() -> list[str]:
    import kubernetes_validate.utils as kv  # type: ignore[import-untyped]

    return list(kv.all_versions())


def _minor(version: str) -> str:
    parts = version.removeprefix("v").split(".")
    return ".".join(parts[:2])


def manifest_problems(doc: dict[str, Any], kubernetes_version: str) -> list[str]:
    """Every reason ``doc`` is not valid for ``kubernetes_version`` (empty when it is)."""
    import kubernetes_validate as kv
    from kubernetes_validate.utils import VersionNotSupportedError

    minor = _minor(kubernetes_version)
    available = {_minor(v) for v in schema_versions()}
    if minor not in available:
        raise InputError(
            f"kubernetes-validate carries no schema for Kubernetes {minor} "
            f"(it has {', '.join(sorted(available, key=lambda v: tuple(map(int, v.split('.')))))})"
        )
    what = f"{doc.get('kind', '?')}/{(doc.get('metadata') or {}).get('name', '?')}"
    try:
        used = kv.validate(doc, minor, strict=True)
    except kv.ValidationError as exc:
        path = ".".join(str(p) for p in exc.path) or "(root)"
        return [f"{what}: {path}: {exc.message}"]
    except kv.SchemaNotFoundError:
        return [f"{what}: no schema for {doc.get('apiVersion')} {doc.get('kind')} in Kubernetes {minor}"]
    except VersionNotSupportedError:
        return [f"{what}: kubernetes-validate does not support Kubernetes {minor}"]
    if used != minor:
        return [f"{what}: validated against {used}, not {minor}"]
    return []


def validate_manifests(docs: list[dict[str, Any]], kubernetes_version: str) -> None:
    problems = [p for doc in docs for p in manifest_problems(doc, kubernetes_version)]
    if problems:
        raise InputError(problems, source=f"Kubernetes {_minor(kubernetes_version)} schema")
