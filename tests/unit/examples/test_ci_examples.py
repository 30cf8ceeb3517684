"""examples/ci/: valid for the CI system they target, and every gpucluster command in them parses."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpucluster.cli import build_parser

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = {
    "github-actions.yml": "vendor.github-workflows",
    "gitlab-ci.yml": "vendor.gitlab-ci",
}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_matches_its_ci_schema(name: str) -> None:
    # check-jsonschema ships the GitHub and GitLab schemas: this runs offline.
    proc = subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", EXAMPLES[name],
                           str(REPO / "examples" / "ci" / name)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_schema_check_rejects_a_broken_workflow(tmp_path: Path) -> None:
    data = yaml.safe_load((REPO / "examples/ci/github-actions.yml").read_text())
    data["jobs"]["rebuild"]["steps"][0]["uses"] = {"not": "a string"}
    bad = tmp_path / "bad.yml"
    bad.write_text(yaml.safe_dump(data))
    proc = subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema",
                           "vendor.github-workflows", str(bad)], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0


def _commands(text: str) -> list[list[str]]:
    out = []
    for line in text.splitlines():
        m = re.search(r"\.venv/bin/gpucluster (.+?)(?:\s*>.*)?$", line)
        if m:
            argv = shlex.split(m.group(1).replace('"$STACK_FILE"', "Pulumi.aws-h100.yaml"))
            out.append(argv)
    return out


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_every_gpucluster_command_in_the_example_parses(name: str) -> None:
    commands = _commands((REPO / "examples" / "ci" / name).read_text())
    assert any(argv[0] == "up" for argv in commands), "the example must rebuild with `gpucluster up`"
    parser = build_parser()
    for argv in commands:
        parser.parse_args(argv)  # SystemExit(2) on an unknown command or flag fails the test
