"""``gpucluster.cluster.redact_secrets``: a failure's text with the keys taken out.

Tasks that handle keys run under ``no_log``, which hides their failure as well. The roles
register such a task's result and fail in a following task whose message names the command,
the device and the exit code, with stderr passed through this filter first: what the operator
reads says why it failed and holds no key.
"""

from __future__ import annotations

import re
from typing import Any

# A cephx secret is 12 bytes of header plus 16 of key, base64: 40 characters beginning "AQ" and
# ending "==". Kubernetes bootstrap tokens are "[a-z0-9]{6}.[a-z0-9]{16}"; certificate keys are
# 64 hex digits. Any other long base64 run (a private key body) is redacted too.
_PATTERNS = (
    # A JSON dump may escape "/" as "\/": the key must not split there.
    re.compile(r"AQ(?:[A-Za-z0-9+]|\\?/){30,}={0,2}"),
    re.compile(r"\b[a-z0-9]{6}\.[a-z0-9]{16}\b"),
    re.compile(r"\b[0-9a-f]{64}\b"),
    re.compile(r"[A-Za-z0-9+/]{32,}={0,2}"),
    re.compile(r"(?i)((?:key|secret|token|password)\s*[=:]\s*)\S+"),
)
REDACTED = "<redacted>"


def redact_secrets(text: Any, limit: int = 2000) -> str:
    """``text`` with every key-like token replaced, cut to its last ``limit`` characters."""
    out = "" if text is None else str(text)
    for pattern in _PATTERNS:
        out = pattern.sub(lambda m: (m.group(1) if m.re.groups else "") + REDACTED, out)
    return out[-limit:].strip()


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"redact_secrets": redact_secrets}
