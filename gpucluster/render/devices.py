"""Device names of a platform's rails: the kinds that carry RDMA and the expansion of brace ranges.

Kept free of the spec's pydantic models: the roles' filters import it in every Ansible worker.
"""

from __future__ import annotations

import re

RDMA_KINDS: tuple[str, ...] = ("infiniband", "roce", "efa")
_BRACE = re.compile(r"^(?P<head>[^{]*)\{(?P<lo>[0-9]+)\.\.(?P<hi>[0-9]+)\}(?P<tail>.*)$")


def expand_devices(patterns: list[str] | tuple[str, ...]) -> list[str]:
    """Exact device names from names and ``name{lo..hi}`` ranges, in order: the one expansion."""
    out: list[str] = []
    for pattern in patterns:
        m = _BRACE.match(pattern)
        if m is None:
            out.append(pattern)
            continue
        lo, hi = int(m["lo"]), int(m["hi"])
        if hi < lo:
            raise ValueError(f"{pattern!r}: the range {lo}..{hi} runs backwards")
        out += [f"{m['head']}{i}{m['tail']}" for i in range(lo, hi + 1)]
    return out
