"""The Ceph conformance checks (GC-CEPH-*), in the form of gpucluster.conformance.checks.

They live in the one registry, gpucluster/conformance/checks.py; this module names them for
the Ceph helpers.
"""

from __future__ import annotations

from gpucluster.conformance.checks import CEPH_CHECKS, Check

AREA = ("CEPH", "Ceph storage")

__all__ = ["AREA", "CEPH_CHECKS", "Check"]
