"""Ceph checks (GC-CEPH)."""
