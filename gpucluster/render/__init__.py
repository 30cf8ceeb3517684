"""Renderers of what a role writes on a node and a conformance check expects there.

Each renderer is one typed Python function of a node's inventory variables (the spec's fabric,
the node's hardware profile, its host variables). The roles call it through the project's
Ansible collection (``collections/ansible_collections/gpucluster/cluster/plugins/filter/``) and
the conformance suite calls it directly, so the file a role writes and the value a check
compares with cannot drift apart.
"""
