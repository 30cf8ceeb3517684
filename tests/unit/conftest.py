"""Shared fixtures for unit tests: the repo root and stack-file builders."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def repo() -> Path:
    return REPO


def read_stack(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((REPO / name).read_text())
    return data


@pytest.fixture
def stack_file(tmp_path: Path) -> Callable[[str, Callable[[dict[str, Any]], None]], Path]:
    """Copy an example stack, apply ``mutate`` to its ``config`` mapping, write it to tmp."""

    def make(example: str, mutate: Callable[[dict[str, Any]], None]) -> Path:
        doc = copy.deepcopy(read_stack(example))
        mutate(doc["config"])
        path = tmp_path / example
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path

    return make
