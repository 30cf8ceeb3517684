"""gpucluster: one cluster spec from provisioning to a pass/fail verdict per node."""

__version__ = "0.1.0"
