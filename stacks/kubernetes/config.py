"""The Kubernetes layer's stack config (namespace ``gpuclusterKube``), validated once."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpucluster.errors import InputError
from gpucluster.spec.loader import validation_problems


class KubeStackConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    stack_file: str = Field(min_length=1)
    kubeconfig: str = Field(min_length=1)
    # None: the cluster spec's kubernetes.gpu_mode, which the roles also read (it decides who runs
    # dcgm-exporter); set here only to say the same thing again.
    gpu_mode: Literal["operator", "device_plugin"] | None = None
    # None: the bill of materials' device_plugin pin (gpucluster/data/bom.yaml).
    device_plugin_chart_version: str | None = Field(None, pattern=r"^\d+\.\d+\.\d+$")
    ceph_fsid: str | None = None
    ceph_user: str = "kubernetes"
    ceph_user_key: str | None = None
    gpu_quotas: dict[str, int] | None = None


_KEYS = {
    "stackFile": "stack_file",
    "kubeconfig": "kubeconfig",
    "gpuMode": "gpu_mode",
    "devicePluginChartVersion": "device_plugin_chart_version",
    "cephFsid": "ceph_fsid",
    "cephUser": "ceph_user",
    "cephUserKey": "ceph_user_key",
    "gpuQuotas": "gpu_quotas",
}


def parse_config(raw: dict[str, object], base: Path) -> KubeStackConfig:
    unknown = sorted(set(raw) - set(_KEYS))
    if unknown:
        raise InputError([f"gpuclusterKube:{k}: unknown key (known: {', '.join(_KEYS)})" for k in unknown])
    data = {_KEYS[k]: v for k, v in raw.items() if v is not None}
    # Paths as a shell would read them (Pulumi.yaml's example writes ``~/.local/state/...``), then
    # relative to the stack's folder: an unexpanded ``~`` would be a folder named ``~`` in there.
    for key in ("stack_file", "kubeconfig"):
        if isinstance(data.get(key), str) and data[key]:
            path = Path(data[key]).expanduser()
            data[key] = str(path if path.is_absolute() else (base / path).resolve())
    try:
        return KubeStackConfig.model_validate(data)
    except ValidationError as exc:
        # Name each problem by the key the user wrote (gpuclusterKube:devicePluginChartVersion),
        # not by the model's field.
        fields = {field: key for key, field in _KEYS.items()}
        problems = []
        for problem in validation_problems(exc, KubeStackConfig, "gpuclusterKube"):
            path, sep, rest = problem.partition(": ")
            head, dot, tail = path.removeprefix("gpuclusterKube.").partition(".")
            if path.startswith("gpuclusterKube.") and head in fields:
                path = f"gpuclusterKube:{fields[head]}{dot}{tail}"
            problems.append(f"{path}{sep}{rest}")
        raise InputError(problems) from None
