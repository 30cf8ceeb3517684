"""The lab: a GPU-cluster-shaped set of Debian machines on one host (the embedded default target).

Each node is a systemd-nspawn container booted on an overlay of a cached debootstrap
root filesystem, with a management and a fabric interface in its own network namespace,
bridged on the host. ``gpucluster lab up|status|ssh|down`` and the Pulumi dynamic
provider (:mod:`gpucluster.lab.provider`) call the same functions in :mod:`gpucluster.lab.lab`.
"""

from gpucluster.lab.lab import LabResult, NodeResult, down, status, up
from gpucluster.lab.layout import LabLayout, NodeLayout, layout_lab

__all__ = ["LabLayout", "LabResult", "NodeLayout", "NodeResult", "down", "layout_lab", "status", "up"]
