"""The pinned artifacts file, and validation against the pinned version's schema."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpucluster.errors import InputError
from gpucluster.kube import load_artifacts, resolve_artifacts
from gpucluster.kube.schema import manifest_problems, schema_versions, validate_manifests
from gpucluster.kube.workloads import allreduce_job, nvidia_smi_pod, parse_allreduce_verdict
from gpucluster.spec import load_bom


def test_artifacts_follow_the_bom() -> None:
    arts = load_artifacts()
    bom = load_bom()
    assert arts.kubernetes_version == bom.kubernetes.version
    for name in ("kubelet", "kubeadm", "kubectl"):
        assert arts.files[name].version == bom.kubernetes.version
        assert arts.files[name].version.startswith(bom.kubernetes.minor + ".")


def test_every_binary_checksum_is_a_sha256_or_explicitly_empty() -> None:
    for f in load_artifacts().files.values():
        for sha in f.sha256.values():
            assert sha == "" or (len(sha) == 64 and int(sha, 16) >= 0)


def test_mirror_replaces_the_base_and_keeps_the_layout() -> None:
    arts = load_artifacts()
    files = {a.name: a for a in resolve_artifacts(arts, "amd64", "calico", "3.30.2", mirror="https://mirror.example/k8s/")}
    assert files["kubelet"].url == "https://mirror.example/k8s/release/v1.33.4/bin/linux/amd64/kubelet"
    assert files["kubelet"].sha256 == arts.files["kubelet"].sha256["amd64"]
    assert files["cni_manifest_calico"].path == "projectcalico/calico/v3.30.2/manifests/calico.yaml"
    assert files["cni_manifest_calico"].sha256 == arts.cni_manifests["calico"].sha256  # the same pin under a mirror


def test_a_bad_checksum_is_rejected(tmp_path: Path) -> None:
    from gpucluster.kube.artifacts import DEFAULT_ARTIFACTS

    raw = yaml.safe_load(DEFAULT_ARTIFACTS.read_text())
    raw["files"]["kubelet"]["sha256"]["amd64"] = "XYZ"
    raw["files"]["kubeadm"]["version"] = "1.33.5"
    bad = tmp_path / "a.yaml"
    bad.write_text(yaml.safe_dump(raw))
    with pytest.raises(InputError) as err:
        load_artifacts(bad)
    assert len(err.value.problems) == 2


def test_the_bom_version_has_a_schema() -> None:
    minor = load_bom().kubernetes.minor
    assert any(v.startswith(minor + ".") for v in schema_versions())


def test_schema_rejects_an_unknown_field_and_a_wrong_type() -> None:
    pod = nvidia_smi_pod("p", "default")
    pod["spec"]["containers"][0]["imagePullPolice"] = "Always"
    assert manifest_problems(pod, "1.33.4")
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q"}, "spec": {"hard": 3}}
    assert manifest_problems(quota, "1.33.4")


def test_an_unsupported_version_is_an_input_error() -> None:
    with pytest.raises(InputError, match=r"no schema for Kubernetes 1\.99"):
        manifest_problems(nvidia_smi_pod("p", "default"), "1.99.0")


def test_conformance_workloads_are_valid() -> None:
    validate_manifests([nvidia_smi_pod("p", "default", node="hgx-01"), *allreduce_job("ar", "default", 4, 8)], "1.33.4")


def test_allreduce_verdict_parses_a_passing_and_a_failing_run() -> None:
    ok = parse_allreduce_verdict(
        "NCCL INFO ...\nGPUCLUSTER_ALLREDUCE {\"world_size\": 16, \"bytes\": 1073741824, "
        "\"algbw_gbps\": 25.1, \"busbw_gbps\": 47.06, \"correct\": true}\n"
    )
    assert ok.world_size == 16 and ok.passes(40.0) and not ok.passes(50.0)
    wrong = parse_allreduce_verdict('GPUCLUSTER_ALLREDUCE {"world_size": 2, "bytes": 8, "algbw_gbps": 1, '
                                    '"busbw_gbps": 1, "correct": false}')
    assert not wrong.passes(None)
    with pytest.raises(InputError, match="did not finish"):
        parse_allreduce_verdict("torch.distributed.DistNetworkError: timed out\n")
