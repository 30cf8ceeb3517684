"""Ceph helpers: read what `ceph ... -f json` and `rados bench` print (pure functions, no I/O)."""
