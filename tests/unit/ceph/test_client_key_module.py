"""roles/ceph_client/library/ceph_client_key.py: wanted caps and `ceph auth ls` parsing."""

from __future__ import annotations

import json
from pathlib import Path

from tests.unit.loading import load_file

REPO = Path(__file__).resolve().parents[3]
mod = load_file(REPO / "roles/ceph_client/library/ceph_client_key.py", "ceph_client_key")


def test_grants_are_joined_and_empty_services_dropped() -> None:
    assert mod.wanted_caps({"mon": ["profile rbd", "allow r fsname=fs"], "mds": [], "osd": "allow rw"}) == {
        "mon": "profile rbd, allow r fsname=fs", "osd": "allow rw"}


def test_auth_ls_json_of_pacific() -> None:
    # The shape `ceph auth ls -f json` printed on a lab monitor (Ceph 16.2.15), keys shortened.
    out = json.dumps({"auth_dump": [
        {"entity": "osd.0", "key": "AQA=", "caps": {"mgr": "allow profile osd", "mon": "allow profile osd",
                                                     "osd": "allow *"}},
        {"entity": "client.gpu.gpu-1", "key": "AQB=", "caps": {"mgr": "profile rbd pool=rbd", "mon": "profile rbd",
                                                               "osd": "profile rbd pool=rbd"}},
    ]})
    ents = mod.auth_entities(out)
    assert set(ents) == {"osd.0", "client.gpu.gpu-1"}
    assert ents["client.gpu.gpu-1"]["caps"]["mon"] == "profile rbd"
