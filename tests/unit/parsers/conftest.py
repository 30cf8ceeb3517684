"""Fixtures for the parser tests: the published tool outputs in ``tests/data/samples``.

The samples live in the repository (sources in its SOURCES.md), so a fresh clone passes alone.
Their absence is a broken checkout, so the tests fail, saying where they looked.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
SAMPLES = REPO_ROOT / "tests" / "data" / "samples"


@pytest.fixture(scope="session")
def samples() -> Path:
    if not SAMPLES.is_dir():
        pytest.fail(f"sample tool outputs not found: looked in {SAMPLES.resolve()}")
    return SAMPLES


@pytest.fixture(scope="session")
def sample(samples: Path) -> Callable[[str], str]:
    """Read a sample by name, keeping carriage returns (gpu-burn progress rewrites)."""

    def read(name: str) -> str:
        path = samples / name
        if not path.is_file():
            pytest.fail(f"sample {name} not found in {samples.resolve()}")
        with open(path, encoding="utf-8", newline="") as f:
            return f.read()

    return read
