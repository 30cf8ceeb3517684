"""gpucluster.cluster.redact_secrets: what a no_log task's failure may show."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.loading import load_file

REPO = Path(__file__).resolve().parents[3]
redact = load_file(REPO / "collections/ansible_collections/gpucluster/cluster/plugins/filter/secrets.py",
                   "gc_secrets_filter").redact_secrets
KEY = "AQBhc2RmYXNkZmFzZGZhc2RmYXNkZmFzZGZhcw=="


@pytest.mark.parametrize("text", [
    f"Error EINVAL: bad key {KEY}",
    '{"key": "' + KEY.replace("/", "\\/").replace("c2Rm", "c2R/") + '"}',
    "token abcdef.0123456789abcdef used",
    "certificate key " + "0f" * 32,
    "secret=hunter2",
])
def test_keys_are_redacted_and_the_rest_kept(text: str) -> None:
    out = redact(text)
    assert "<redacted>" in out
    for secret in (KEY, "abcdef.0123456789abcdef", "0f" * 32, "hunter2"):
        assert secret not in out
    assert out[:4] == text[:4]


def test_nothing_to_redact_and_the_tail_is_kept() -> None:
    assert redact("ceph-osd: mkfs failed: (28) No space left on device") == \
        "ceph-osd: mkfs failed: (28) No space left on device"
    assert redact(None) == ""
    assert redact("first " + "word " * 600, limit=100) == ("word " * 20).strip()
