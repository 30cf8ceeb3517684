"""The cluster spec: load a stack file once, validated and resolved.

>>> cluster = load_spec("Pulumi.lab.yaml")   # raises InputError listing every problem
>>> [n.name for n in cluster.nodes]

The names below load their modules (and pydantic) when first asked for, so that the
pydantic-free renderers the roles' filters call can import :mod:`gpucluster.spec.facts` alone.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpucluster.spec.cluster import Cluster, Node
    from gpucluster.spec.loader import DEFAULT_BOM, load_bom, load_profiles, load_spec
    from gpucluster.spec.models import Bom, ClusterSpec, HardwareProfile

__all__ = [
    "DEFAULT_BOM",
    "Bom",
    "Cluster",
    "ClusterSpec",
    "HardwareProfile",
    "Node",
    "load_bom",
    "load_profiles",
    "load_spec",
]

_HOME = {
    "Cluster": "cluster",
    "Node": "cluster",
    "DEFAULT_BOM": "loader",
    "load_bom": "loader",
    "load_profiles": "loader",
    "load_spec": "loader",
    "Bom": "models",
    "ClusterSpec": "models",
    "HardwareProfile": "models",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
