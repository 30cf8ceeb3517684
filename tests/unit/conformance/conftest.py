"""Fixtures for the conformance unit tests: the published tool outputs in ``tests/data/samples``."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SAMPLES = REPO / "tests" / "data" / "samples"


@pytest.fixture(scope="session")
def sample_text():
    def read(name: str) -> str:
        path = SAMPLES / name
        if not path.exists():
            pytest.fail(f"sample tool output not found: {path.resolve()}")
        with open(path, encoding="utf-8", newline="") as f:
            return f.read()

    return read
