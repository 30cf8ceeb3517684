"""Spec facts that the pydantic-free readers need too: the node roles, the fabric types, the MTU
range, the conformance suite's defaults.

Each is defined here once. The spec's models (gpucluster/spec/models.py) build their fields from
these, the inventory model (gpucluster/inventory_model.py) and the conformance suite import them,
and so do the renderers the roles' filters call (gpucluster/render/): those run in every Ansible
worker and must not load pydantic, so this module imports nothing but ``typing``, and the package's
``__init__`` loads the models only when one of its names is asked for.
"""

from __future__ import annotations

from typing import Literal, get_args

# What a node pool's role may be (``node_pools[].roles``). Each is also an inventory group of that
# name (gpucluster/inventory.py) and a conformance marker that runs a check on the group's hosts.
Role = Literal["gpu", "storage", "control_plane"]
ROLES: tuple[str, ...] = get_args(Role)

# What a fabric (``fabric.type``) and a platform's rail (``rails[].kind``) may be.
FabricType = Literal["infiniband", "roce", "efa", "ethernet"]
FABRIC_TYPES: tuple[str, ...] = get_args(FabricType)

# The MTUs a fabric, a rail and a provider's port may be set to.
MTU_MIN = 1280
MTU_MAX = 9216

# dcgmi diag run levels 1 (quick) to 4 (longest); 2 is NVIDIA's "medium" pre-job check.
DCGM_DIAG_LEVELS: tuple[int, ...] = (1, 2, 3, 4)
DCGM_DIAG_LEVEL_DEFAULT = 2
# A node more than this fraction below its fleet's median fails, whatever the absolute floor.
FLEET_MARGIN_DEFAULT = 0.10
FLEET_MARGIN_MAX = 0.5
