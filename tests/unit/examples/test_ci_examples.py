"""examples/ci/: valid for the CI system they target, and every gpucluster command in them parses."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucluster.cli import build_parser

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

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


# --- the examples run, in order, with the CI's secrets and variables mocked ---------------------------
# Each example's shell lines run as its CI system runs them (tests/unit/examples/ci_runner.py), in a
# checkout of its own whose `.venv/bin/gpucluster` is a recording shim; so are make, curl, ssh-agent
# and ssh-add (the agent a `sleep` of the test's own, so that killing it kills nothing else). What is
# asserted: the order (plan gates up, down is the last command even after a failed up), the flags
# (up --fresh --yes --json, down --yes), the key reaching ssh-add 0600, the agent stopped, and every
# file the publishing steps name being there. tests/integration/examples runs one against the lab.

from tests.unit.examples.ci_runner import Run, StepResult, run_github, run_gitlab  # noqa: E402

KEY_TEXT = "-----BEGIN OPENSSH PRIVATE KEY-----\nthrowaway\n-----END OPENSSH PRIVATE KEY-----"

GC_SHIM = '''#!{python}
import json, os, sys
from pathlib import Path
args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(json.dumps({{"tool": "gpucluster", "argv": args, "agent": bool(os.environ.get("SSH_AUTH_SOCK")),
                        "state": os.environ.get("GPUCLUSTER_STATE_DIR", "")}}) + "\\n")
failing = os.environ.get("FAKE_GC_FAIL") == args[0]
if args[0] == "up":
    if "--verify-run-dir" in args:
        d = Path(args[args.index("--verify-run-dir") + 1])
        d.mkdir(parents=True, exist_ok=True)
        for name in ("junit.xml", "summary.html", "results.json"):
            (d / name).write_text("report")
    if "--json" in args:
        print(json.dumps({{"ok": not failing, "exit_code": int(failing)}}))
sys.exit(1 if failing else 0)
'''

TOOL_SHIMS = {
    "make": 'echo "{\\"tool\\": \\"make\\", \\"argv\\": \\"$*\\"}" >> "$FAKE_LOG"\n',
    "curl": 'echo "{\\"tool\\": \\"curl\\", \\"argv\\": \\"$*\\"}" >> "$FAKE_LOG"\n',
    "ssh-agent": '''if [ "${1:-}" = "-k" ]; then
  echo "{\\"tool\\": \\"ssh-agent -k\\", \\"pid\\": \\"$SSH_AGENT_PID\\"}" >> "$FAKE_LOG"
  kill "$SSH_AGENT_PID"; echo "unset SSH_AUTH_SOCK; unset SSH_AGENT_PID; echo Agent pid $SSH_AGENT_PID killed;"
  exit 0
fi
sleep 600 </dev/null >/dev/null 2>&1 &
echo "{\\"tool\\": \\"ssh-agent\\", \\"pid\\": \\"$!\\"}" >> "$FAKE_LOG"
echo "SSH_AUTH_SOCK=/tmp/fake-agent.$!; export SSH_AUTH_SOCK;"
echo "SSH_AGENT_PID=$!; export SSH_AGENT_PID;"
echo "echo Agent pid $!;"
''',
    "ssh-add": '''mode=$(stat -c %a "$1")
echo "{\\"tool\\": \\"ssh-add\\", \\"mode\\": \\"$mode\\", \\"first\\": \\"$(head -n 1 "$1")\\"}" >> "$FAKE_LOG"
[ "$mode" = 600 ] || { echo "Permissions 0$mode for '$1' are too open." >&2; exit 1; }
''',
}


@dataclass
class Checkout:
    root: Path
    log: Path
    env: dict[str, str]

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.is_file() else []

    def gpucluster(self) -> list[list[str]]:
        return [r["argv"] for r in self.records() if r["tool"] == "gpucluster"]


def _checkout(tmp_path: Path, fail: str | None) -> Checkout:
    root = tmp_path / "checkout"
    (root / ".venv" / "bin").mkdir(parents=True)
    shims = tmp_path / "shims"
    shims.mkdir()
    gc = root / ".venv" / "bin" / "gpucluster"
    gc.write_text(GC_SHIM.format(python=sys.executable))
    gc.chmod(0o755)
    for name, body in TOOL_SHIMS.items():
        (shims / name).write_text("#!/bin/bash\nset -eu\n" + body)
        (shims / name).chmod(0o755)
    log = tmp_path / "calls.jsonl"
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": f"{shims}:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", "FAKE_LOG": str(log),
           "FAKE_GC_FAIL": fail or ""}
    return Checkout(root, log, env)


def _published(step: dict[str, Any], root: Path, absent_ok: tuple[str, ...] = ("runs/",)) -> StepResult:
    """A publishing action's paths, checked where the CI would read them (the action itself is GitHub's).
    ``runs/`` may be absent: the shim converges nothing."""
    name = str(step["uses"])
    paths = {"mikepenz/action-junit-report": "report_paths", "actions/upload-artifact": "path"}
    key = next((v for k, v in paths.items() if name.startswith(k + "@")), None)
    if key is None:
        return StepResult(name, "skipped", "sets up the runner (checkout, Python, Pulumi CLI, cloud credentials)")
    missing = [p for p in str(step["with"][key]).split() if p not in absent_ok and not list(root.glob(p.rstrip("/")))]
    return StepResult(name, "success", f"missing: {missing}" if missing else "")


def _agent_gone(records: list[dict[str, Any]]) -> None:
    started = [int(r["pid"]) for r in records if r["tool"] == "ssh-agent"]
    assert len(started) == 1
    for _ in range(50):
        try:
            os.kill(started[0], 0)
        except ProcessLookupError:
            return
        # A killed child of an exited shell is reaped by init; give it a moment.
        time.sleep(0.1)
    os.kill(started[0], signal.SIGKILL)
    raise AssertionError("the example left its ssh-agent running")


def _check_order(run: Run, checkout: Checkout, fail: str | None) -> None:
    commands = checkout.gpucluster()
    verbs = [" ".join(a[:2]) if a[0] == "spec" else a[0] for a in commands]
    assert verbs.index("plan") < (verbs.index("up") if "up" in verbs else len(verbs)), verbs
    if fail == "plan":
        assert "up" not in verbs, "a failing plan must stop the run before up"
        return
    up_argv = commands[verbs.index("up")]
    assert {"--fresh", "--yes", "--json"} <= set(up_argv) and up_argv[up_argv.index("--stack") + 1] == "STACK"
    # down is the last gpucluster command, after a failed up too, with --yes for a cloud stack.
    assert verbs[-1] == "down" and commands[-1] == ["down", "--stack", "STACK", "--yes"], commands
    records = checkout.records()
    adds = [r for r in records if r["tool"] == "ssh-add"]
    assert adds == [{"tool": "ssh-add", "mode": "600", "first": KEY_TEXT.splitlines()[0]}]
    up_record = next(r for r in records if r["tool"] == "gpucluster" and r["argv"][0] == "up")
    assert up_record["agent"], "up must run with the key's agent"
    assert records.index(adds[0]) < records.index(up_record)
    _agent_gone(records)
    doc = json.loads((checkout.root / "up.json").read_text())
    assert doc["exit_code"] == (1 if fail == "up" else 0)


@pytest.mark.parametrize("fail", [None, "up", "plan"], ids=["ok", "up-fails", "plan-fails"])
def test_the_github_example_runs_in_order_with_the_secrets_mocked(tmp_path: Path, fail: str | None) -> None:
    checkout = _checkout(tmp_path, fail)
    run = run_github(REPO / "examples/ci/github-actions.yml", "rebuild", workdir=checkout.root, base_env=checkout.env,
                     secrets={"CLUSTER_SSH_PRIVATE_KEY": KEY_TEXT, "PULUMI_ACCESS_TOKEN": "pul-mock",
                              "AWS_ROLE_ARN": "arn:aws:iam::000000000000:role/mock"},
                     inputs={"stack": "STACK"}, uses=lambda step: _published(step, checkout.root),
                     skip_line=lambda line: None, timeout=60)
    _check_order(run, checkout, fail)
    assert run.failed == (fail is not None)
    assert run.outcome("Tear the cluster down, whatever happened before") == "success"
    assert [r["argv"] for r in checkout.records() if r["tool"] == "make"] == ["setup"]
    assert all(r["state"] == str(checkout.root / ".gpucluster-state") for r in checkout.records()
               if r["tool"] == "gpucluster")
    assert not (checkout.root / ".runner-temp" / "cluster-ssh-key").exists()
    if fail is None:
        assert all(not s.reason for s in run.steps if s.name.startswith(("Publish", "Keep"))), run.steps


@pytest.mark.parametrize("fail", [None, "up", "plan"], ids=["ok", "up-fails", "plan-fails"])
def test_the_gitlab_example_runs_in_order_with_the_variables_mocked(tmp_path: Path, fail: str | None) -> None:
    checkout = _checkout(tmp_path, fail)
    key_file = tmp_path / "gitlab-file-variable"
    key_file.write_text(KEY_TEXT + "\n")
    key_file.chmod(0o644)  # how GitLab may leave a File variable: the example makes its own 0600 copy
    doc = yaml.safe_load((REPO / "examples/ci/gitlab-ci.yml").read_text())
    run = run_gitlab(REPO / "examples/ci/gitlab-ci.yml", workdir=checkout.root, base_env=checkout.env,
                     variables={"CLUSTER_SSH_PRIVATE_KEY": str(key_file), "PULUMI_ACCESS_TOKEN": "pul-mock",
                                "AWS_ROLE_ARN": "arn:aws:iam::000000000000:role/mock", "STACK_FILE": "STACK"},
                     skip_line=lambda line: None, timeout=60)
    _check_order(run, checkout, fail)
    assert run.outcome("plan") == ("failure" if fail == "plan" else "success")
    if fail == "plan":
        assert run.outcome("rebuild") == "skipped"
        return
    assert run.outcome("rebuild") == ("failure" if fail == "up" else "success")
    assert run.outcome("rebuild:after_script") == "success"
    for leftover in (".cluster-ssh-key", ".ssh-agent.pid", ".aws-token"):
        assert not (checkout.root / leftover).exists(), leftover
    artifacts = doc["rebuild"]["artifacts"]
    for path in [*artifacts["paths"], artifacts["reports"]["junit"]]:
        if path != "runs/":  # the shim converges nothing
            assert list(checkout.root.glob(path.rstrip("/"))), path
