"""Image manifests (gpucluster/data/images): what each pinned cloud image ships, with sources, and
`spec validate` comparing a pool's manifest with the bill of materials under `preinstalled`.

Where converge would stop (the roles' one decision, preinstalled_action, says fail), validate exits 2
before anything is created and names the component, both versions and the two ways out: a
bill-of-materials overlay (the spec's `bom:`) or another image.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from gpucluster.cli import main
from gpucluster.errors import InputError
from gpucluster.render import os_packages
from gpucluster.spec import images, load_spec
from gpucluster.spec.loader import IMAGE_DIR, load_images
from gpucluster.spec.models import ImageManifest

REPO = Path(__file__).resolve().parents[3]
OVERLAY = REPO / "examples/bom/aws-dlami-base-2204-20260102.yaml"
DLAMI = "aws-dlami-base-2204-20260102"
AZURE = "azure-ubuntu-hpc-2204-2026072901"
OCI = "oci-ubuntu-2204-gpu580-20260505"


def _doc(example: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((REPO / example).read_text())
    return doc


def _write(tmp_path: Path, doc: dict[str, Any], name: str = "Pulumi.x.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _aws(tmp_path: Path, manifest: str | None = DLAMI, overlay: str | None = None, **pool: Any) -> Path:
    doc = _doc("Pulumi.aws-h100.yaml")
    gpu = doc["config"]["gpucluster:node_pools"][0]
    if manifest:
        gpu["image_manifest"] = manifest
    gpu.update(pool)
    if overlay is not None:
        (tmp_path / "bom-overlay.yaml").write_text(overlay)
        doc["config"]["gpucluster:bom"] = "bom-overlay.yaml"
    return _write(tmp_path, doc)


def _validate(stack: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, list[str]]:
    rc = main(["spec", "validate", str(stack)])
    out, err = capsys.readouterr()
    return rc, out, err.strip().splitlines()


# --- the shipped manifests ----------------------------------------------------------------------


def test_every_manifest_loads_and_cites_a_source_for_every_version() -> None:
    found = load_images()
    assert set(found) == {DLAMI, AZURE, OCI}
    for manifest in found.values():
        assert manifest.source.startswith("https://")
        for name, comp in manifest.components.items():
            assert comp.source.startswith("https://"), f"{manifest.name}: {name} has no URL source"
        # What no source gives is said, never guessed.
        for gap in manifest.not_listed:
            assert gap.reason and gap.component not in manifest.components


def test_the_manifests_hold_the_cited_figures() -> None:
    found = load_images()
    dlami = {k: (c.version or c.branch) for k, c in found[DLAMI].components.items()}
    assert dlami == {"nvidia-driver": "580.105.08", "cuda": "13.0", "dcgm": "4.4.2", "efa": "1.45.0",
                     "aws-ofi-nccl": "1.17.2", "container-toolkit": "1.18.1"}
    assert found[DLAMI].image == "Deep Learning Base AMI with Single CUDA (Ubuntu 22.04) 20260102"
    azure = found[AZURE].components
    assert (azure["nvidia-driver"].version, azure["nvidia-driver"].installed_by) == ("580.126.16", "package")
    assert (azure["nccl"].version, azure["doca"].version, azure["dcgm"].version) == ("2.30.4-1", "3.2.1", "1:4.5.2-1")
    assert found[AZURE].urns == ["microsoft-dsvm:ubuntu-hpc:2204:22.04.2026072901"]
    oci = found[OCI]
    # OCI's image name is its own statement of what it ships, and all that is published of it.
    assert "DOCA-OFED-3.2.1-GPU-580-OPEN-CUDA-13.0" in oci.image
    assert (oci.components["nvidia-driver"].version, oci.components["nvidia-driver"].branch) == (None, "580")
    assert {g.component for g in oci.not_listed} == {"nccl", "container-toolkit", "containerd"}


def test_the_readme_table_shows_every_manifest_with_its_figures() -> None:
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Operating systems"):readme.index("## What has run where")]
    for manifest in load_images().values():
        row = next((line for line in section.splitlines() if f"`{manifest.name}`" in line), "")
        assert row and manifest.source in row, f"README: no row for {manifest.name} citing {manifest.source}"
        for comp in manifest.components.values():
            assert (comp.version or comp.branch or "") in row, f"README row for {manifest.name}: {row}"


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d["components"]["cuda"].pop("branch"), "states its version or its branch"),
    (lambda d: d["not_listed"].pop(0), "nccl: give its version with a source, or list it under not_listed"),
    (lambda d: d["not_listed"].append({"component": "efa", "reason": "x"}), "efa has a version and is under"),
    (lambda d: d.update(urns=["a:b:c:d"]), "urns are Azure Marketplace image URNs"),
])
def test_a_manifest_states_or_explains_every_core_component(change: Any, message: str) -> None:
    doc = yaml.safe_load((IMAGE_DIR / f"{DLAMI}.yaml").read_text())
    change(doc)
    with pytest.raises(ValidationError, match=message):
        ImageManifest.model_validate(doc)


# --- validate: where converge would stop -------------------------------------------------------


def test_an_image_converge_would_stop_on_is_exit_2_naming_both_versions_and_the_ways_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, err = _validate(_aws(tmp_path), capsys)
    assert rc == 2 and out == ""
    errors = [line for line in err if line.startswith("error: ")]
    assert len(errors) == 3
    driver, efa, toolkit = errors
    assert ("gpucluster.node_pools[0] (gpu): image aws-dlami-base-2204-20260102 ships nvidia-driver 580.105.08, "
            "the bill of materials pins 580.126.16 and the pool's policy is preinstalled: adopt_or_fail") in driver
    assert 'gpucluster:bom: <file> holding nvidia_driver: {version: "580.105.08"}' in driver
    assert "or boot an image that ships 580.126.16" in driver
    assert "ships efa 1.45.0, the bill of materials pins 1.51.0" in efa and 'efa: {version: "1.45.0"}' in efa
    # The image's toolkit is older than the pin: adopted only at the pin or above.
    assert ("ships container-toolkit 1.18.1, the bill of materials pins 1.18.2 (an image's at or above it is "
            "adopted) and the pool's policy is preinstalled: adopt_or_fail") in toolkit
    assert 'gpucluster:bom: <file> holding container_toolkit: {version: "1.18.1"}' in toolkit
    assert "or boot an image that ships 1.18.2 or later" in toolkit
    assert "preinstalled: adopt_or_replace would upgrade it to the pin on every node instead" in toolkit


def test_the_overlay_that_pins_what_the_image_ships_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack = _aws(tmp_path, overlay=OVERLAY.read_text())
    rc, _, err = _validate(stack, capsys)
    assert rc == 0, err
    bom = load_spec(stack).bom
    # Only the overlay's keys change; the rest is the shipped bill of materials.
    assert (bom.nvidia_driver.version, bom.nvidia_driver.branch, bom.efa.version) == ("580.105.08", "580", "1.45.0")
    assert bom.cuda.version == load_spec(REPO / "Pulumi.aws-h100.yaml").bom.cuda.version


def test_adopt_or_replace_passes_and_says_what_it_replaces(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Replacing the image's EFA downloads the installer: it passes once the overlay pins its SHA-256
    # (a test value; the shipped bill of materials has none, gpucluster/spec/downloads.py).
    rc, _, err = _validate(_aws(tmp_path, preinstalled="adopt_or_replace", overlay=f'efa: {{sha256: "{"a" * 64}"}}\n'),
                           capsys)
    assert rc == 0
    assert any("converge replaces image aws-dlami-base-2204-20260102's nvidia-driver 580.105.08 with 580.126.16"
               in line for line in err)


def test_the_azure_example_finds_its_manifest_by_urn_and_adopts_its_driver(capsys: pytest.CaptureFixture[str]) -> None:
    cluster = load_spec(REPO / "Pulumi.azure-h100.yaml")
    gpu = cluster.spec.node_pools[0]
    assert images.pool_manifest(cluster.spec, gpu, load_images()) == load_images()[AZURE]
    found, unknown = images.decisions(cluster, load_images())
    assert [(d.component, d.action) for d in found] == [("nvidia-driver", "adopt")]
    # The recipe installs moby unpinned: no containerd version to decide on, on either pool containerd runs on;
    # and the newest toolkit of its build day, unpinned: no toolkit version on the GPU pool.
    assert [u.split(":", 1)[0] for u in unknown] == ["gpucluster.node_pools[0] (gpu)", "gpucluster.node_pools[0] (gpu)",
                                                     "gpucluster.node_pools[2] (cp)"]
    toolkit, *containerd = unknown
    assert (f"image {AZURE} states no container-toolkit version; where it carries one, converge adopts it only if "
            "it is at least 1.18.2, else with preinstalled: adopt_or_fail it stops") in toolkit
    assert all(f"image {AZURE} states no containerd version; where it carries moby-containerd or containerd.io, "
               "converge adopts it only if it is at least 1.7.2" in u for u in containerd)


def test_a_manifest_that_gives_only_the_branch_is_a_warning(capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = _validate(REPO / "Pulumi.oci-h100.yaml", capsys)
    assert rc == 0
    assert any(f"image {OCI} states only the nvidia-driver branch 580; converge adopts it only if it is exactly "
               "580.126.16" in line for line in err)


def test_another_branch_than_the_pins_is_a_stop_even_unversioned(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    doc = _doc("Pulumi.oci-h100.yaml")
    (tmp_path / "bom-595.yaml").write_text('nvidia_driver: {branch: "595", version: "595.91.07"}\n')
    doc["config"]["gpucluster:bom"] = "bom-595.yaml"
    rc, _, err = _validate(_write(tmp_path, doc), capsys)
    assert rc == 2
    assert any(f"image {OCI} ships nvidia-driver branch 580, the bill of materials pins 595.91.07" in line
               for line in err)


def test_a_runfile_driver_stops_whatever_the_policy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    shipped = load_images()[DLAMI]
    driver = shipped.components["nvidia-driver"].model_copy(update={"installed_by": "runfile"})
    runfile = shipped.model_copy(update={"components": {**shipped.components, "nvidia-driver": driver}})
    cluster = load_spec(_aws(tmp_path, preinstalled="adopt_or_replace"))
    problems, _ = images.image_findings(cluster, {DLAMI: runfile})
    assert len(problems) == 1 and "installed by NVIDIA's runfile" in problems[0]


def test_the_decision_is_the_roles_own(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls: list[tuple[Any, ...]] = []

    def spy(*args: Any, **kwargs: Any) -> dict[str, str]:
        calls.append(args)
        return os_packages.preinstalled_action(*args, **kwargs)

    monkeypatch.setattr(images, "preinstalled_action", spy)
    images.image_findings(load_spec(_aws(tmp_path)), load_images())
    assert calls == [("nvidia-driver", "580.126.16", "580.105.08", False, "adopt_or_fail"),
                     ("efa", "1.51.0", "1.45.0", False, "adopt_or_fail"),
                     ("container-toolkit", "1.18.2", "1.18.1", False, "adopt_or_fail")]


def test_a_gpu_pool_without_a_manifest_on_a_cloud_is_a_warning(capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = _validate(REPO / "Pulumi.aws-h100.yaml", capsys)
    assert rc == 0
    assert any("no image manifest names what its image ships" in line for line in err)


@pytest.mark.parametrize(("manifest", "os", "message"), [
    ("no-such-image", None, "no image manifest 'no-such-image' in gpucluster/data/images"),
    (AZURE, None, f"{AZURE} describes an azure image; this stack's target is aws"),
    (DLAMI, "ubuntu-24.04", f"{DLAMI} is a ubuntu-22.04 image; the pool runs ubuntu-24.04"),
])
def test_a_pool_naming_a_wrong_manifest_is_refused(tmp_path: Path, manifest: str, os: str | None,
                                                   message: str) -> None:
    pool = {"os": os} if os else {}
    with pytest.raises(InputError) as info:
        load_spec(_aws(tmp_path, manifest=manifest, overlay=OVERLAY.read_text(), **pool))
    assert any(f"gpucluster.node_pools[0].image_manifest: {message}" in p for p in info.value.problems)


# --- the bill-of-materials overlay ---------------------------------------------------------------


@pytest.mark.parametrize(("overlay", "message"), [
    ("nvidia_drivr: {version: '1'}\n", "bom.nvidia_drivr: unknown key (did you mean 'nvidia_driver'?)"),
    ("nvidia_driver: {version: '580 .1'}\n", "bom.nvidia_driver.version"),
    ("- 580\n", "a bill-of-materials overlay is a mapping of the keys it changes"),
])
def test_a_bad_overlay_is_refused_naming_the_key(tmp_path: Path, overlay: str, message: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = _validate(_aws(tmp_path, manifest=None, overlay=overlay), capsys)
    assert rc == 2 and any(message in line for line in err), err


def test_a_whole_bill_of_materials_is_an_overlay_too(tmp_path: Path) -> None:
    shutil.copy(REPO / "gpucluster/data/bom.yaml", tmp_path / "mine.yaml")
    doc = _doc("Pulumi.lab.yaml")
    doc["config"]["gpucluster:bom"] = "mine.yaml"
    assert load_spec(_write(tmp_path, doc)).bom == load_spec(REPO / "Pulumi.lab.yaml").bom


# --- the NVIDIA container toolkit: the image's own, adopted at or above the pin -------------------


def _with_toolkit(version: str) -> ImageManifest:
    """The DLAMI's manifest, stating another container toolkit."""
    shipped = load_images()[DLAMI]
    doc = shipped.model_dump(by_alias=True)
    doc["components"]["container-toolkit"]["version"] = version
    return ImageManifest.model_validate(doc)


def test_the_dlami_overlay_pins_its_toolkit_and_passes(tmp_path: Path) -> None:
    cluster = load_spec(_aws(tmp_path, overlay=OVERLAY.read_text()))
    assert cluster.bom.container_toolkit.version == "1.18.1"
    found, _ = images.decisions(cluster, load_images())
    assert [(d.component, d.action) for d in found if d.component == "container-toolkit"] == [
        ("container-toolkit", "adopt")]


@pytest.mark.parametrize("version", ["1.18.2", "1.18.3-1", "1.19.0"])
def test_an_image_toolkit_at_or_above_the_pin_is_adopted_never_downgraded(tmp_path: Path, version: str) -> None:
    """Issue 24: a pin older than the image's toolkit was a downgrade apt refuses; now it is adopted."""
    cluster = load_spec(_aws(tmp_path, overlay=OVERLAY.read_text().replace('version: "1.18.1"', 'version: "1.18.2"')))
    assert cluster.bom.container_toolkit.version == "1.18.2"
    problems, warnings = images.image_findings(cluster, {DLAMI: _with_toolkit(version)})
    assert problems == [] and not any("container-toolkit" in w for w in warnings), (problems, warnings)


def test_adopt_or_replace_says_it_upgrades_an_older_image_toolkit(tmp_path: Path) -> None:
    overlay = OVERLAY.read_text().replace('version: "1.18.1"', 'version: "1.18.2"')
    cluster = load_spec(_aws(tmp_path, preinstalled="adopt_or_replace", overlay=overlay))
    problems, warnings = images.image_findings(cluster, load_images())
    assert problems == []
    assert any(f"converge upgrades image {DLAMI}'s container-toolkit 1.18.1 to 1.18.2 on every node "
               "(preinstalled: adopt_or_replace)" in w for w in warnings), warnings


@pytest.mark.parametrize("policy", ["adopt_or_fail", "adopt_or_replace"])
@pytest.mark.parametrize("version", ["1.18.1", "1.18.2", "1.18.3", "1.18.2~rc.1"])
def test_validate_and_the_role_take_one_toolkit_decision(tmp_path: Path, policy: str, version: str) -> None:
    """What validate decides on the manifest's version is what the role decides on dpkg's line for it."""
    overlay = OVERLAY.read_text().replace('version: "1.18.1"', 'version: "1.18.2"')
    cluster = load_spec(_aws(tmp_path, preinstalled=policy, overlay=overlay))
    found, _ = images.decisions(cluster, {DLAMI: _with_toolkit(version)})
    spec = next(d for d in found if d.component == "container-toolkit")
    role = os_packages.preinstalled_plan({"toolkit_packages": f"nvidia-container-toolkit\tii \t{version}\n"},
                                         {"container-toolkit": "1.18.2"}, policy)["container-toolkit"]
    assert (spec.action, spec.message) == (role["action"], role["message"].replace("nvidia-container-toolkit ", ""))


# --- containerd: the image's own, against the bill of materials' floor ---------------------------


def _with_containerd(version: str, package: str = "moby-containerd") -> ImageManifest:
    """The DLAMI's manifest, stating a containerd (the shipped one lists none)."""
    shipped = load_images()[DLAMI]
    containerd = {"version": version, "package": package, "installed_by": "package", "source": shipped.source}
    doc = shipped.model_dump(by_alias=True)
    doc["components"]["containerd"] = containerd
    doc["not_listed"] = [g for g in doc["not_listed"] if g["component"] != "containerd"]
    return ImageManifest.model_validate(doc)


def test_an_image_containerd_below_the_floor_stops_validate_naming_package_versions_and_ways_out(
    tmp_path: Path,
) -> None:
    cluster = load_spec(_aws(tmp_path, overlay=OVERLAY.read_text()))
    problems, _ = images.image_findings(cluster, {DLAMI: _with_containerd("1.6.28-ubuntu22.04u1")})
    assert len(problems) == 1, problems
    line = problems[0]
    assert line.startswith(f"gpucluster.node_pools[0] (gpu): image {DLAMI} ships containerd 1.6.28-ubuntu22.04u1 "
                           "(moby-containerd), below the bill of materials' containerd floor 1.7.2, and the pool's "
                           "policy is preinstalled: adopt_or_fail: converge would stop")
    assert 'gpucluster:bom: <file> holding containerd: {floor: "1.6.28-ubuntu22.04u1"}' in line
    assert ("preinstalled: adopt_or_replace, which removes moby-engine, moby-cli, moby-containerd, moby-runc where "
            "installed") in line


def test_an_image_containerd_at_or_above_the_floor_is_adopted(tmp_path: Path) -> None:
    cluster = load_spec(_aws(tmp_path, overlay=OVERLAY.read_text()))
    found, _ = images.decisions(cluster, {DLAMI: _with_containerd("1.7.27-1", package="containerd.io")})
    assert [(d.component, d.action, d.package) for d in found if d.component == "containerd"] == [
        ("containerd", "adopt", "containerd.io")]
    problems, warnings = images.image_findings(cluster, {DLAMI: _with_containerd("1.7.27-1")})
    assert problems == [] and not any("containerd" in w for w in warnings), warnings


def test_an_overlay_lowering_the_floor_adopts_it(tmp_path: Path) -> None:
    overlay = OVERLAY.read_text() + 'containerd: {floor: "1.6.28-ubuntu22.04u1"}\n'
    cluster = load_spec(_aws(tmp_path, overlay=overlay))
    assert cluster.bom.containerd.floor == "1.6.28-ubuntu22.04u1"
    problems, _ = images.image_findings(cluster, {DLAMI: _with_containerd("1.6.28-ubuntu22.04u1")})
    assert problems == []


def test_adopt_or_replace_says_it_replaces_the_images_containerd(tmp_path: Path) -> None:
    cluster = load_spec(_aws(tmp_path, preinstalled="adopt_or_replace", overlay=f'efa: {{sha256: "{"a" * 64}"}}\n'))
    problems, warnings = images.image_findings(cluster, {DLAMI: _with_containerd("1.6.28-ubuntu22.04u1")})
    assert problems == []
    assert any(f"converge replaces image {DLAMI}'s containerd 1.6.28-ubuntu22.04u1 (moby-containerd), below the "
               "floor 1.7.2, with the OS archive's containerd on every node, removing moby-engine, moby-cli, "
               "moby-containerd, moby-runc where installed" in w for w in warnings), warnings


def test_the_containerd_decision_is_the_roles_own(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def spy(*args: Any, **kwargs: Any) -> dict[str, str]:
        calls.append((args, kwargs))
        return os_packages.preinstalled_action(*args, **kwargs)

    monkeypatch.setattr(images, "preinstalled_action", spy)
    images.image_findings(load_spec(_aws(tmp_path)), {DLAMI: _with_containerd("1.6.28-ubuntu22.04u1")})
    assert (("containerd", "1.7.2", "1.6.28-ubuntu22.04u1", False, "adopt_or_fail"),
            {"floor": True, "package": "moby-containerd",
             "removes": ["moby-engine", "moby-cli", "moby-containerd", "moby-runc"]}) in calls


def test_a_control_plane_pool_without_a_manifest_is_no_warning(capsys: pytest.CaptureFixture[str]) -> None:
    """Its only decision is containerd: a plain OS image installs the archive's."""
    rc, _, err = _validate(REPO / "Pulumi.aws-h100.yaml", capsys)
    assert rc == 0
    assert not any("node_pools[2] (cp)" in line for line in err), err
