"""Re-export gpucluster.kube's filters: the role's templates render through the tested code.

The controller runs Ansible from the project's virtualenv, where gpucluster is installed.
"""

from __future__ import annotations

from typing import Any

from gpucluster.kube.ansible_filters import FILTERS


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return dict(FILTERS)
