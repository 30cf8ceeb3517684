"""The cluster spec: load a stack file once, validated and resolved.

>>> cluster = load_spec("Pulumi.lab.yaml")   # raises InputError listing every problem
>>> [n.name for n in cluster.nodes]
"""

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
