"""Renderers of what a role writes on a node and a conformance check expects there.

Each renderer is one typed Python function of a node's inventory variables, as the inventory
model reads them: the spec's models (Fabric, Platform, Bom, HardwareProfile, Kubernetes) and the
outputs' (Capabilities, OutputAccess, OutputEgress, OutputRail). The roles call it through the
project's Ansible collection (``collections/ansible_collections/gpucluster/cluster/plugins/filter/``,
which validates what Ansible hands it into those models) and the conformance suite calls it with
the models it holds, so the file a role writes and the value a check compares with cannot drift
apart. The models are imported for typing only: the filters import these modules in every
Ansible worker (render/devices.py).
"""
