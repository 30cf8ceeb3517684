"""Polling for the lab tests: wait until a condition on the lab holds, or fail saying what did not."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest


def wait_for(predicate: Callable[[], object], what: str, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(3)
    pytest.fail(f"not within {timeout:.0f} s: {what}")
