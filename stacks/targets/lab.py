"""The lab: Debian nodes on this host (systemd-nspawn), through the same code as `gpucluster lab up`."""

from __future__ import annotations

from typing import Any

from gpucluster.lab.lab import lab_inputs
from gpucluster.lab.provider import LabCluster, plain_values
from gpucluster.spec import Cluster


def deploy(cluster: Cluster) -> dict[str, Any]:
    """Create the lab resource; return the stack outputs (the shape every target exports)."""
    inputs = lab_inputs(cluster)
    lab = LabCluster(f"lab-{cluster.name}", inputs)
    # The values are known from the spec; taking them through the resource's outputs makes
    # every export depend on the lab having come up. Pulumi carries numbers as floats and
    # may drop nulls: give back ints, and the missing optional keys read as null downstream.
    return {key: lab.outputs.apply(lambda outs, k=key: plain_values(outs.get(k))) for key in inputs.outputs}

