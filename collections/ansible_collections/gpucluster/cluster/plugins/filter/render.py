"""Renderer filters: gpucluster.render's functions, so a role writes what a check expects.

The roles call them by fully qualified name (``gpucluster.cluster.nccl_settings``); the
conformance suite imports the same functions from the gpucluster package, which the controller's
virtualenv has installed (as for the Kubernetes filters in kube.py).
"""

from __future__ import annotations

from typing import Any

from gpucluster.render.nccl import nccl_settings
from gpucluster.render.services import required_services


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"nccl_settings": nccl_settings, "required_services": required_services}
