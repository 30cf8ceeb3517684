"""A site's own platform files (the spec's ``platforms:`` folder, gpucluster/spec/loader.py): a file
there replaces the shipped platform of its name, or adds one, and what it says reaches the checks'
renderer; a folder outside the stack's, a missing one and a bad file are refused naming the field."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from gpucluster.errors import InputError
from gpucluster.render.platform import provider_ports
from gpucluster.spec import load_spec
from gpucluster.spec.loader import PLATFORM_DIR

REPO = Path(__file__).resolve().parents[3]
OCI = "oci-bm-gpu-h100-8"


def _stack(tmp_path: Path, folder: str = "platforms") -> Path:
    text = (REPO / "Pulumi.oci-h100.yaml").read_text()
    assert "gpucluster:platforms:" not in text
    stack = tmp_path / "Pulumi.site.yaml"
    stack.write_text(text.replace("config:\n", f"config:\n  gpucluster:platforms: {folder}\n", 1))
    return stack


def _site_oci(tmp_path: Path, cidrs: list[str]) -> None:
    data = yaml.safe_load((PLATFORM_DIR / f"{OCI}.yaml").read_text())
    compute = [r for r in data["rails"] if r.get("addressing") == "provider"]
    assert compute, "the shipped OCI platform has provider-addressed rails"
    for rail in compute:
        rail["provider_cidrs"] = cidrs
    (tmp_path / "platforms").mkdir(exist_ok=True)
    (tmp_path / "platforms" / f"{OCI}.yaml").write_text(yaml.safe_dump(data))


def test_a_site_platform_file_replaces_the_shipped_one(tmp_path: Path) -> None:
    shipped = load_spec(REPO / "Pulumi.oci-h100.yaml").platforms[OCI]
    assert {c for _, cidrs in provider_ports(shipped) for c in cidrs} == {"192.168.0.0/16", "10.224.0.0/12"}
    _site_oci(tmp_path, ["172.20.0.0/16"])
    site = load_spec(_stack(tmp_path)).platforms[OCI]
    ports = provider_ports(site)
    assert ports and {c for _, cidrs in ports for c in cidrs} == {"172.20.0.0/16"}
    # Everything else the site's file kept as shipped.
    assert [p for p, _ in ports] == [p for p, _ in provider_ports(shipped)]


def test_a_site_platform_folder_must_be_the_stacks_own_and_hold_platforms(tmp_path: Path) -> None:
    outside = tmp_path / "stack"
    outside.mkdir()
    with pytest.raises(InputError, match=r"gpucluster\.platforms: 'sub/\.\./\.\./elsewhere' resolves to .*outside the "
                                         r"stack file's folder"):
        load_spec(_stack(outside, "sub/../../elsewhere"))
    with pytest.raises(InputError, match=r"gpucluster\.platforms: .*/platforms: no such folder"):
        load_spec(_stack(tmp_path))
    (tmp_path / "platforms").mkdir()
    with pytest.raises(InputError, match=r"gpucluster\.platforms: .*/platforms: holds no platform file"):
        load_spec(_stack(tmp_path))


def test_a_bad_site_platform_file_is_named_with_its_field(tmp_path: Path) -> None:
    _site_oci(tmp_path, ["not-a-cidr"])
    with pytest.raises(InputError) as err:
        load_spec(_stack(tmp_path))
    line = err.value.problems[0]
    assert line.startswith(f"gpucluster.platforms: {OCI}.yaml: ") and "provider_cidrs" in line, line
    # A file named as no platform it holds is refused as a shipped one would be.
    shutil.move(tmp_path / "platforms" / f"{OCI}.yaml", tmp_path / "platforms" / "other.yaml")
    _site_oci(tmp_path, ["172.20.0.0/16"])
    (tmp_path / "platforms" / "other.yaml").write_text((tmp_path / "platforms" / f"{OCI}.yaml").read_text())
    with pytest.raises(InputError, match=r"other\.yaml: platform\.name 'oci-bm-gpu-h100-8' must equal the file name"):
        load_spec(_stack(tmp_path))
