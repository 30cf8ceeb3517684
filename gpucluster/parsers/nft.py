"""``nft -j list set FAMILY TABLE SET``: the networks an nftables IPv4 set holds.

nftables prints an interval set's elements three ways (nftables 1.0.6's JSON, samples
nft_set_01/02): a CIDR as ``{"prefix": {"addr": ..., "len": N}}``, a single address as a plain
string, and a merged run of addresses as ``{"range": [first, last]}``.
"""

from __future__ import annotations

import ipaddress
import json
from typing import Any

__all__ = ["set_networks"]


def _networks(elem: Any) -> list[ipaddress.IPv4Network]:
    if isinstance(elem, str):
        return [ipaddress.IPv4Network(elem)]
    if isinstance(elem, dict) and "prefix" in elem:
        p = elem["prefix"]
        return [ipaddress.IPv4Network(f"{p['addr']}/{int(p['len'])}")]
    if isinstance(elem, dict) and "range" in elem:
        first, last = (ipaddress.IPv4Address(x) for x in elem["range"])
        return list(ipaddress.summarize_address_range(first, last))
    if isinstance(elem, dict) and "elem" in elem:  # an element with options (timeout, comment)
        return _networks(elem["elem"].get("val"))
    raise ValueError(f"not an nftables set element: {elem!r}")


def set_networks(text: str) -> list[ipaddress.IPv4Network]:
    """The set's elements as networks, collapsed; ValueError when ``text`` is no set listing."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not nft's JSON: {exc}") from None
    sets = [item["set"] for item in doc.get("nftables", []) if isinstance(item, dict) and "set" in item]
    if len(sets) != 1:
        raise ValueError(f"{len(sets)} set(s) in nft's output, expected one")
    found = [n for elem in sets[0].get("elem", []) for n in _networks(elem)]
    return list(ipaddress.collapse_addresses(found))
