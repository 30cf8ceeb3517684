"""The Ceph checks' helpers live in gpucluster.ceph.suite; the shared wiring (inventory,
`node`, markers, reports) is the parent conftest's."""
