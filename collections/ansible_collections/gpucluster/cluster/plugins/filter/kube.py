"""Kubernetes filters for the roles: gpucluster.kube's tested renderers, under this collection.

The roles call them by fully qualified name (``gpucluster.cluster.kubeadm_init_yaml``), so one
copy serves every role. The controller runs Ansible from the project's virtualenv, where the
gpucluster package is installed.
"""

from __future__ import annotations

from typing import Any

from gpucluster.kube.ansible_filters import FILTERS


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {name.removeprefix("gpucluster_"): fn for name, fn in FILTERS.items()}
