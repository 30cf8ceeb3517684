"""Every artefact converge downloads is pinned by version and SHA-256, and `spec validate` refuses
one without (exit 2, one line naming the field), also in a stack's `bom:` overlay: the bill of
materials' source tarballs always, AWS's EFA installer where converge would install EFA, and the
Kubernetes artefacts of a cluster that runs Kubernetes (gpucluster/spec/downloads.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucluster.cli import main
from gpucluster.errors import InputError
from gpucluster.kube.artifacts import load_artifacts
from gpucluster.render.sources import BOM_TARBALLS, resolved_sources
from gpucluster.spec import load_spec
from gpucluster.spec.downloads import download_findings, kubernetes_problems
from gpucluster.spec.loader import load_bom, load_images

REPO = Path(__file__).resolve().parents[3]
ROLES = REPO / "roles"
DLAMI = "aws-dlami-base-2204-20260102"
SHA = re.compile(r"^[0-9a-f]{64}$")


def _stack(tmp_path: Path, example: str, overlay: str | None = None, kube: dict[str, Any] | None = None,
           **pool: Any) -> Path:
    doc: dict[str, Any] = yaml.safe_load((REPO / example).read_text())
    doc["config"]["gpucluster:node_pools"][0].update(pool)
    if overlay is not None:
        (tmp_path / "bom-overlay.yaml").write_text(overlay)
        doc["config"]["gpucluster:bom"] = "bom-overlay.yaml"
    if kube is not None:
        doc["config"]["gpucluster:kubernetes"].update(kube)
    path = tmp_path / "Pulumi.x.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _validate(stack: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    rc = main(["spec", "validate", str(stack)])
    return rc, capsys.readouterr().err.strip().splitlines()


def test_the_shipped_tarballs_are_pinned_by_version_and_sha256() -> None:
    bom = load_bom()
    for name in BOM_TARBALLS:
        entry = getattr(bom, name)
        assert SHA.match(entry.sha256), name
        assert entry.version in str(entry.source_url), name
    # gpu-burn at a commit, never a branch.
    assert re.fullmatch(r"[0-9a-f]{40}", bom.gpu_burn.version)
    assert "refs/heads" not in str(bom.gpu_burn.source_url)


@pytest.mark.parametrize("name", BOM_TARBALLS)
def test_an_overlay_that_empties_a_checksum_is_refused_naming_the_field(
        name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = _validate(_stack(tmp_path, "Pulumi.lab.yaml", overlay=f'{name}: {{sha256: ""}}\n'), capsys)
    assert rc == 2
    assert len(err) == 1 and f"bom.{name}.sha256: empty: converge downloads" in err[0]
    assert "bom-overlay.yaml" in err[0]


def test_a_missing_or_malformed_checksum_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"bom\.gpu_burn\.sha256: 'abc' is not a SHA-256"):
        load_spec(_stack(tmp_path, "Pulumi.lab.yaml", overlay='gpu_burn: {sha256: "abc"}\n'))
    with pytest.raises(InputError, match=r"bom\.nvbandwidth\.sha256: .* is not a SHA-256"):
        load_spec(_stack(tmp_path, "Pulumi.lab.yaml", overlay=f'nvbandwidth: {{sha256: "{"A" * 64}"}}\n'))


def test_a_mirror_serves_the_same_pin(tmp_path: Path) -> None:
    """An air-gapped mirror changes the URL, never the SHA-256 the role checks it against."""
    bom = load_bom()
    urls = resolved_sources({"sources": "https://mirror.example/github"}, bom)
    assert urls["gpu_burn"] == ("https://mirror.example/github/wilicc/gpu-burn/archive/"
                                f"{bom.gpu_burn.version}.tar.gz")
    for name in BOM_TARBALLS:
        defaults = yaml.safe_load((ROLES / _role(name) / "defaults" / "main.yml").read_text())
        sha = next(v for k, v in defaults.items() if k.endswith(f"{_short(name)}_source_sha256"))
        assert sha == f"{{{{ gpucluster_bom.{name}.sha256 }}}}", name


def _role(name: str) -> str:
    return "nccl" if name == "nccl_tests" else "gpu_validation"


def _short(name: str) -> str:
    return "nccl_tests" if name == "nccl_tests" else name


def test_no_role_downloads_without_a_checksum() -> None:
    """Every get_url passes a checksum, and none is dropped where the pin is empty (`... else omit`)."""
    for path in ROLES.glob("*/tasks/*.yml"):
        for task in yaml.safe_load(path.read_text()) or []:
            args = task.get("ansible.builtin.get_url")
            if args is None:
                continue
            where = f"{path.relative_to(REPO)}: {task['name']}"
            if "signing key" in task["name"]:
                continue  # an apt repository's key: apt checks the packages it signs
            assert "checksum" in args, where
            if "kubernetes" in path.parts[-3]:
                continue  # kubernetes_node/_control_plane keep their explicit opt-out (checksum_required)
            assert "omit" not in str(args["checksum"]), where


def test_efa_installed_by_converge_needs_its_sha256(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The DLAMI ships EFA 1.45.0; adopt_or_replace would run the 1.51.0 installer over it.
    rc, err = _validate(_stack(tmp_path, "Pulumi.aws-h100.yaml", image_manifest=DLAMI,
                               preinstalled="adopt_or_replace"), capsys)
    assert rc == 2
    assert any(line.startswith("error: ") and "bom.efa.sha256: empty (no published SHA-256 for "
               "https://efa-installer.amazonaws.com/aws-efa-installer-1.51.0.tar.gz)" in line
               and "on pool gpu" in line for line in err), err


def test_efa_unknown_to_the_spec_is_a_warning_and_adopted_efa_needs_none(tmp_path: Path) -> None:
    cluster = load_spec(REPO / "Pulumi.aws-h100.yaml")
    problems, warnings = download_findings(cluster, load_images())
    assert problems == []
    assert any("(gpu): bom.efa.sha256 is empty" in w and "converge stops rather than download" in w for w in warnings)
    # An image that ships the pin (here the overlay pins the DLAMI's own 1.45.0): nothing to download.
    adopted = load_spec(_stack(tmp_path, "Pulumi.aws-h100.yaml", overlay='efa: {version: "1.45.0"}\n'
                               'nvidia_driver: {version: "580.105.08"}\n', image_manifest=DLAMI))
    assert download_findings(adopted, load_images()) == ([], [])


def test_the_cni_manifest_the_spec_names_needs_its_sha256(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    arts = load_artifacts()
    assert SHA.match(arts.cni_manifests["calico"].sha256)
    assert kubernetes_problems(load_spec(REPO / "Pulumi.onprem-h100-ib.yaml")) == []
    rc, err = _validate(_stack(tmp_path, "Pulumi.onprem-h100-ib.yaml", kube={"cni": "flannel"}), capsys)
    assert rc == 2
    assert any("kubernetes-artifacts.yaml cni_manifests.flannel.sha256: empty (no published SHA-256 for "
               "https://github.com/flannel-io/flannel/releases/download/v0.27.2/kube-flannel.yml)" in line
               for line in err), err
