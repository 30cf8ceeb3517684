"""Kubernetes filters for the roles: gpucluster.kube's tested renderers, under this collection.

The roles call them by fully qualified name (``gpucluster.cluster.kubeadm_init_yaml``), so one
copy serves every role. The controller runs Ansible from the project's virtualenv, where the
gpucluster package is installed.

Ansible looks a collection filter up by loading every file of this folder, in every worker
process it forks, whichever filter a task names. gpucluster.kube imports the spec's pydantic
models (about 0.2 s of CPU), so this file names its filters and imports their code only when
a template calls one: the no-op converge of 8 lab nodes spent half of the controller's CPU
importing it (bench/results/converge.json).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# gpucluster.kube.ansible_filters.FILTERS, without the prefix (a unit test keeps the two equal).
NAMES = ("kube_nodes", "kubeadm_init_yaml", "kubeadm_join_yaml", "kubeadm_endpoint")


def _deferred(name: str) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        from gpucluster.kube.ansible_filters import FILTERS

        return FILTERS[f"gpucluster_{name}"](*args, **kwargs)

    call.__name__ = name
    return call


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {name: _deferred(name) for name in NAMES}
