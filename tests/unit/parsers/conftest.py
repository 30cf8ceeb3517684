"""Fixtures for the parser tests: the published tool outputs in ``shared/samples``.

The samples live beside the repository (``<repo>/../shared/samples``), never inside it.
Their absence is a broken checkout, so the tests fail, saying where they looked.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
SAMPLES = REPO_ROOT / ".." / "shared" / "samples"


@pytest.fixture(scope="session")
def samples() -> Path:
    if not SAMPLES.is_dir():
        pytest.fail(f"sample tool outputs not found: looked in {SAMPLES.resolve()} (shared/ beside the repo)")
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
