"""nftables' JSON listing of a set, as GC-SYS-002 reads the SSH sources the firewall admits."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest

from gpucluster.parsers.nft import set_networks

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"


def test_a_prefix_element_and_a_plain_address_from_real_nft_output() -> None:
    assert set_networks((SAMPLES / "nft_set_01.json").read_text()) == [ipaddress.IPv4Network("10.77.0.0/24")]
    assert [str(n) for n in set_networks((SAMPLES / "nft_set_02.json").read_text())] == [
        "10.77.0.0/24", "198.51.100.0/25", "203.0.113.7/32"]


def test_a_merged_range_is_read_as_its_networks() -> None:
    """An auto-merged set prints a run of addresses as a range (the format, not a captured file)."""
    doc = json.loads((SAMPLES / "nft_set_02.json").read_text())
    doc["nftables"][1]["set"]["elem"] = [{"range": ["10.0.0.0", "10.0.1.255"]}]
    assert [str(n) for n in set_networks(json.dumps(doc))] == ["10.0.0.0/23"]


@pytest.mark.parametrize("text", ["Error: No such file or directory\nlist set inet gpucluster management_v4\n",
                                  '{"nftables": [{"metainfo": {"version": "1.0.6"}}]}'])
def test_no_set_listing_is_an_error(text: str) -> None:
    with pytest.raises(ValueError):
        set_networks(text)
