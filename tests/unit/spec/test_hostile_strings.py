"""Every free-text field refuses Jinja and shell syntax: spec, bill of materials, profiles, outputs.

Ansible templates inventory strings on the controller, and several fields reach a shell, so a
value such as ``eth1{{ lookup('pipe','id -un') }}`` must never get past validation. The fields are
found by walking the models, not listed by hand: a field added later without a strict shape
fails here.
"""

from __future__ import annotations

import copy
import json
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ValidationError

from gpucluster.cli import main
from gpucluster.outputs import (
    OutputAccess,
    OutputBastion,
    OutputEgress,
    OutputFabric,
    OutputNode,
    OutputRail,
    OutputStorage,
    StackOutputs,
)
from gpucluster.spec import models
from gpucluster.spec.loader import DEFAULT_BOM, IMAGE_DIR, PROFILE_DIR, spec_mapping

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = sorted(REPO.glob("Pulumi.*.yaml"))
HOSTILE = [
    "eth1{{ lookup('pipe','id -un') }}",
    "{% for x in y %}",
    "a;$(id)",
    "`id`",
    "x\ny",
    "/dev/nvme0n1;touch${IFS}/tmp/pwned",
]


def _strip(annotation: Any) -> Any:
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _variants(annotation: Any) -> list[Any]:
    annotation = _strip(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [v for a in typing.get_args(annotation) for v in _variants(a)]
    return [annotation]


def _is_str(annotation: Any) -> bool:
    return any(v is str for v in _variants(annotation))


def _shapes(annotation: Any) -> list[str]:
    """How a field holds strings: itself, as list items, as dict keys or dict values."""
    shapes = []
    for v in _variants(annotation):
        origin = typing.get_origin(v)
        if v is str:
            shapes.append("str")
        elif origin is list and _is_str(typing.get_args(v)[0]):
            shapes.append("list")
        elif origin is dict:
            key, value = typing.get_args(v)
            if _is_str(key):
                shapes.append("key")
            if _is_str(value):
                shapes.append("value")
    return shapes


def _nested_models(annotation: Any) -> list[type[BaseModel]]:
    found = []
    for v in _variants(annotation):
        if isinstance(v, type) and issubclass(v, BaseModel):
            found.append(v)
        for arg in typing.get_args(v):
            found += _nested_models(arg)
    return found


def _string_fields(
    model: type[BaseModel], seen: set[type[BaseModel]] | None = None
) -> Iterator[tuple[type[BaseModel], str, str]]:
    seen = set() if seen is None else seen
    if model in seen:
        return
    seen.add(model)
    for name, info in model.model_fields.items():
        for shape in _shapes(info.annotation):
            yield model, info.alias or name, shape
        for inner in _nested_models(info.annotation):
            yield from _string_fields(inner, seen)


def _instances(
    model: type[BaseModel], data: Any, path: tuple[Any, ...]
) -> Iterator[tuple[type[BaseModel], tuple[Any, ...]]]:
    """Every (model, path) where ``data`` holds a mapping that ``model`` validates."""
    if not isinstance(data, dict):
        return
    yield model, path
    for name, info in model.model_fields.items():
        key = info.alias or name
        if key not in data:
            continue
        inner = _nested_models(info.annotation)
        if model is models.ClusterSpec and name == "target":
            kind = data[key].get("kind") if isinstance(data[key], dict) else None
            inner = [m for m in inner if m.model_fields["kind"].annotation == typing.Literal[kind]]  # type: ignore[valid-type]
        for sub in inner[:1]:
            value = data[key]
            if isinstance(value, list):
                for i, item in enumerate(value):
                    yield from _instances(sub, item, (*path, key, i))
            else:
                yield from _instances(sub, value, (*path, key))


def _spec(path: Path) -> dict[str, Any]:
    return spec_mapping(yaml.safe_load(path.read_text()), str(path))


def _locate(root: type[BaseModel], docs: list[dict[str, Any]]) -> dict[type[BaseModel], tuple[int, tuple[Any, ...]]]:
    where: dict[type[BaseModel], tuple[int, tuple[Any, ...]]] = {}
    for i, doc in enumerate(docs):
        for model, path in _instances(root, doc, ()):
            where.setdefault(model, (i, path))
    return where


def _set(doc: dict[str, Any], path: tuple[Any, ...], field: str, shape: str, bad: str) -> None:
    target: Any = doc
    for part in path:
        target = target[part]
    target[field] = {"str": bad, "list": [bad], "key": {bad: "x"}, "value": {"k": bad}}[shape]


def _hostile_cases(root: type[BaseModel], docs: list[dict[str, Any]]) -> list[Any]:
    where = _locate(root, docs)
    cases = []
    for model, field, shape in _string_fields(root):
        if model not in where:
            cases.append(pytest.param(model, field, shape, None, None, id=f"{model.__name__}.{field}-no-example"))
            continue
        doc_index, path = where[model]
        for n, bad in enumerate(HOSTILE):
            cases.append(
                pytest.param(model, field, shape, (doc_index, path), bad, id=f"{model.__name__}.{field}[{shape}]-{n}")
            )
    return cases


SPECS = [_spec(p) for p in EXAMPLES]


@pytest.mark.parametrize(("model", "field", "shape", "where", "bad"), _hostile_cases(models.ClusterSpec, SPECS))
def test_every_spec_string_refuses_jinja_and_shell(
    model: type[BaseModel], field: str, shape: str, where: tuple[int, tuple[Any, ...]] | None, bad: str | None
) -> None:
    assert where is not None and bad is not None, f"no example stack has a {model.__name__}: add one to an example"
    doc = copy.deepcopy(SPECS[where[0]])
    _set(doc, where[1], field, shape, bad)
    with pytest.raises(ValidationError) as err:
        models.ClusterSpec.model_validate(doc)
    assert any(field in [str(p) for p in e["loc"]] for e in err.value.errors()), err.value


def _data_docs() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    bom = yaml.safe_load(DEFAULT_BOM.read_text())
    profiles = [yaml.safe_load(p.read_text()) for p in sorted(PROFILE_DIR.glob("*.yaml"))]
    return [bom], profiles


BOMS, PROFILES = _data_docs()
IMAGES = [yaml.safe_load(p.read_text()) for p in sorted(IMAGE_DIR.glob("*.yaml"))]


@pytest.mark.parametrize(
    ("root", "docs"), [(models.Bom, BOMS), (models.HardwareProfile, PROFILES), (models.ImageManifest, IMAGES)],
    ids=["bom", "profiles", "images"]
)
def test_every_bom_and_profile_string_refuses_jinja_and_shell(
    root: type[BaseModel], docs: list[dict[str, Any]]
) -> None:
    # A user may point `bom:` at a file of their own; profiles ship with the package.
    checked = 0
    for model, field, shape, where, bad in (c.values for c in _hostile_cases(root, docs)):
        assert where is not None and bad is not None, f"no {root.__name__} document has a {model.__name__}"
        doc = copy.deepcopy(docs[where[0]])
        _set(doc, where[1], field, shape, bad)
        with pytest.raises(ValidationError):
            root.model_validate(doc)
        checked += 1
    assert checked >= 3 * len(HOSTILE)


OUTPUTS = [json.loads(p.read_text()) for p in sorted((REPO / "tests" / "golden" / "outputs").glob("*.json"))]


@pytest.mark.parametrize(("model", "field", "shape", "where", "bad"), _hostile_cases(StackOutputs, OUTPUTS))
def test_every_outputs_string_refuses_jinja_and_shell(
    model: type[BaseModel], field: str, shape: str, where: tuple[int, tuple[Any, ...]] | None, bad: str | None
) -> None:
    assert model in (StackOutputs, OutputNode, OutputRail, OutputFabric, OutputStorage, OutputAccess, OutputBastion,
                     OutputEgress)
    assert where is not None and bad is not None, f"no golden outputs file has a {model.__name__}"
    doc = copy.deepcopy(OUTPUTS[where[0]])
    _set(doc, where[1], field, shape, bad)
    with pytest.raises(ValidationError) as err:
        StackOutputs.model_validate(doc)
    assert any(field in [str(p) for p in e["loc"]] for e in err.value.errors()), err.value


@pytest.mark.parametrize(
    ("key", "value", "field"),
    [
        (
            "gpucluster:fabric",
            {"socket_ifname": "eth1{{ lookup('pipe','id -un') }}"},
            "gpucluster.fabric.socket_ifname",
        ),
        (
            "gpucluster:storage",
            {"allowed_health_warnings": ["{{ 7*7 }}"]},
            "gpucluster.storage.allowed_health_warnings[0]",
        ),
        ("gpucluster:storage", {"cephfs": {"mount_path": "/mnt/{{ x }}"}}, "gpucluster.storage.cephfs.mount_path"),
    ],
)
def test_spec_validate_names_the_field_and_exits_2(
    tmp_path: Path, key: str, value: dict[str, Any], field: str, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = yaml.safe_load((REPO / "Pulumi.lab.yaml").read_text())
    section = doc["config"][key]
    if "cephfs" in value:
        section["cephfs"] = {**section["cephfs"], **value["cephfs"]}
    else:
        section.update(value)
    stack = tmp_path / "Pulumi.lab.yaml"
    stack.write_text(yaml.safe_dump(doc))
    assert main(["spec", "validate", str(stack)]) == 2
    err = capsys.readouterr().err
    assert field in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize("device", ["/dev/../etc/shadow", "/dev/nvme0n1 ", "/dev/", "/dev//sda", "/dev/sd$(id)"])
def test_a_device_path_is_a_plain_dev_path(device: str) -> None:
    doc = copy.deepcopy(SPECS[[p.name for p in EXAMPLES].index("Pulumi.onprem-h100-ib.yaml")])
    pool = next(p for p in doc["node_pools"] if "storage" in p["roles"])
    pool["osd_devices"] = [device]
    with pytest.raises(ValidationError, match="osd_devices"):
        models.ClusterSpec.model_validate(doc)


@pytest.mark.parametrize("path", ["/mnt/../etc", "/mnt/./x", "mnt/cephfs", "/mnt//x", "/mnt/ceph fs"])
def test_mount_path_is_a_plain_absolute_path(path: str) -> None:
    doc = copy.deepcopy(SPECS[[p.name for p in EXAMPLES].index("Pulumi.lab.yaml")])
    doc["storage"]["cephfs"]["mount_path"] = path
    with pytest.raises(ValidationError, match="mount_path"):
        models.ClusterSpec.model_validate(doc)


def test_a_bare_metal_rack_with_jinja_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = yaml.safe_load((REPO / "Pulumi.onprem-h100-ib.yaml").read_text())
    doc["config"]["gpucluster:target"]["nodes"][0]["rack"] = "r1{{ lookup('pipe','id') }}"
    stack = tmp_path / "Pulumi.onprem.yaml"
    stack.write_text(yaml.safe_dump(doc))
    assert main(["spec", "validate", str(stack)]) == 2
    assert "gpucluster.target.nodes[0].rack" in capsys.readouterr().err


def _inventory_from(tmp_path: Path, outputs: dict[str, Any]) -> int:
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(outputs))
    stack = str(REPO / "Pulumi.lab.yaml")
    return main(["inventory", "--outputs", str(path), "--stack", stack, "-o", str(tmp_path / "inventory.yml")])


@pytest.mark.parametrize(("field", "where"), [("fabric_interface", "nodes[0]."), ("failure_domain", "nodes[0]."),
                                              ("ssh_private_key_file", "")])
def test_inventory_refuses_hostile_outputs(tmp_path: Path, field: str, where: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    outputs = json.loads((REPO / "tests" / "golden" / "outputs" / "lab.json").read_text())
    (outputs["nodes"][0] if where else outputs)[field] = "/x/{{ lookup('pipe','id') }}"
    assert _inventory_from(tmp_path, outputs) == 2
    assert f"outputs.{where}{field}" in capsys.readouterr().err
    assert not (tmp_path / "inventory.yml").exists(), "nothing half-applied"


def _target(example: str) -> dict[str, Any]:
    return copy.deepcopy(SPECS[[p.name for p in EXAMPLES].index(example)])


@pytest.mark.parametrize(("example", "field", "value"), [
    ("Pulumi.oci-h100.yaml", "region", "uk-gov-london-1"),
    ("Pulumi.oci-h100.yaml", "region", "eu-dcc-milan-1"),
    ("Pulumi.oci-h100.yaml", "compartment_id", "ocid1.tenancy.oc1..aaaaaaaaba3pv6wkcr4jqae5f44n2b2m2yt2j6rx3"),
    ("Pulumi.oci-h100.yaml", "availability_domain", "Uocm:PHX-AD-1"),
    ("Pulumi.azure-h100.yaml", "ssh_public_key",
     "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpuY2x1c3Rlci1leGFtcGxlLWtleS1yZXBsYWNlLW1l John Doe"),
    ("Pulumi.aws-h100.yaml", "ami_owner", 137112412989),
    ("Pulumi.azure-h100.yaml", "zones", [1]),
])
def test_real_values_are_accepted(example: str, field: str, value: Any) -> None:
    doc = _target(example)
    doc["target"][field] = value
    models.ClusterSpec.model_validate(doc)


@pytest.mark.parametrize("path", ["/etc", "/usr/share/cephfs", "/var"])
def test_cephfs_is_never_mounted_over_a_system_folder(path: str) -> None:
    doc = _target("Pulumi.lab.yaml")
    doc["storage"]["cephfs"]["mount_path"] = path
    with pytest.raises(ValidationError, match="system folder"):
        models.ClusterSpec.model_validate(doc)
