"""The remediation table beside the check registry, and docs/troubleshooting.md generated from it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpucluster.conformance import checks, remedies

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[3]
DOC = REPO / "docs" / "troubleshooting.md"


def test_one_remedy_per_registered_check_and_none_for_unknown_ids():
    ids = [r.check_id for r in remedies._REMEDIES]
    assert len(ids) == len(set(ids)), "a check has two entries"
    assert set(ids) == set(checks.CHECKS), {"no remedy": set(checks.CHECKS) - set(ids),
                                            "unknown": set(ids) - set(checks.CHECKS)}
    assert remedies.UNREACHABLE.check_id not in checks.CHECKS


def test_every_remedy_says_what_to_run():
    for r in remedies._REMEDIES:
        assert r.steps and all(s.strip().endswith((".", ")", "`")) for s in r.steps), r.check_id
        # A next step names a command or a file to look at, not only advice.
        assert any("`" in s for s in r.steps), f"{r.check_id}: no command in its steps"


def test_the_slow_pair_remedy_isolates_the_link():
    text = " ".join(remedies.remedy("GC-AR-003").steps)
    for needle in ("iperf3", "ib_write_bw", "ip -s link", "tc qdisc", "third node"):
        assert needle in text, needle


def test_the_committed_troubleshooting_doc_is_the_generated_one():
    generated = remedies.markdown()
    assert DOC.read_text(encoding="utf-8") == generated, (
        "docs/troubleshooting.md differs from the table: "
        "python -m gpucluster.conformance.remedies --markdown > docs/troubleshooting.md")
    assert "## When verify fails" in generated
    for cid in checks.CHECKS:
        assert f"#### {cid}\n" in generated


def test_the_module_prints_the_doc():
    out = subprocess.run([sys.executable, "-m", "gpucluster.conformance.remedies", "--markdown"],
                         capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout == remedies.markdown()
