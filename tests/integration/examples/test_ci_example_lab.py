"""The GitHub Actions example, run step by step against a one-node lab with its secrets mocked.

Every ``run:`` line of examples/ci/github-actions.yml runs as the runner would run it
(tests/unit/examples/ci_runner.py), in a checkout of its own that uses this checkout's venv, with
STACK_FILE the lab of Pulumi.ciexample.yaml and CLUSTER_SSH_PRIVATE_KEY a throwaway key. Left out,
each with its reason: the actions that set up a runner (checkout, Python, the Pulumi CLI, AWS
credentials), ``make setup`` (the venv is this checkout's) and ``gpucluster preflight`` (AWS quotas).
The publishing actions are checked for the files they name. So the example's own commands, the
real `up --fresh --yes --json` and `down --yes` included, bring a lab up, converge and verify it,
and take it down again: about two minutes on a 2-core host (103 s, 2026-11-27).

The GitLab example runs the same gpucluster commands; its shell wiring (after_script, the File
variable, artifacts) is run with recording shims in tests/unit/examples, not against a second lab.
The lab is taken down at the end whatever happened (``gpucluster lab down``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from tests.unit.examples.ci_runner import StepResult, run_github

REPO = Path(__file__).resolve().parents[3]
STACK = Path(__file__).resolve().with_name("Pulumi.ciexample.yaml")
EXAMPLE = REPO / "examples" / "ci" / "github-actions.yml"

SETUP_ACTIONS = ("actions/checkout@", "actions/setup-python@", "pulumi/actions@",
                 "aws-actions/configure-aws-credentials@")
PUBLISHING = {"mikepenz/action-junit-report@": "report_paths", "actions/upload-artifact@": "path"}


def _skip_line(line: str) -> str | None:
    text = line.strip()
    if text == "make setup":
        return "the test runs in this checkout's venv, which `make setup` made (it would reinstall from the network)"
    if "gpucluster preflight" in text:
        return "preflight checks AWS capacity and quotas: it needs a cloud account"
    return None


def _uses(step: dict[str, Any], root: Path) -> StepResult:
    name = str(step["uses"])
    if name.startswith(SETUP_ACTIONS):
        return StepResult(name, "skipped", "sets up a runner or a cloud account: the test runs on this host's lab")
    key = next((v for k, v in PUBLISHING.items() if name.startswith(k)), None)
    if key is None:
        raise AssertionError(f"the example uses {name}, which this test does not know")
    missing = [p for p in str(step["with"][key]).split() if not list(root.glob(p.rstrip("/")))]
    return StepResult(name, "failure" if missing else "success", f"missing: {missing}" if missing else "")


def _agent_pid(root: Path) -> int | None:
    """The ssh-agent the example started: its pid as the key step wrote it to $GITHUB_ENV."""
    for env_file in sorted((root / ".runner-temp").glob("github-env-*")):
        for line in env_file.read_text().splitlines():
            if line.startswith("SSH_AGENT_PID=") and line.split("=", 1)[1].isdigit():
                return int(line.split("=", 1)[1])
    return None


def _gone(pid: int, wait_s: float = 5.0) -> bool:
    """Whether ``pid`` has ended (a killed daemon is reaped by init a moment later)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def _gc(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpucluster", *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.mark.lab
def test_the_github_example_rebuilds_verifies_and_tears_down_the_lab(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("the lab needs root (systemd-nspawn nodes, bridges, network namespaces)")
    if shutil.which("systemd-nspawn") is None or shutil.which("ssh-keygen") is None:
        pytest.skip("systemd-nspawn or ssh-keygen is not installed")
    # A short folder: the example puts ssh-agent's socket under $RUNNER_TEMP, and a socket's path
    # has room for 107 bytes.
    root = Path(tempfile.mkdtemp(prefix="gc-ci-"))
    stack = root / STACK.name
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUCLUSTER_", "SSH_AUTH_SOCK", "SSH_AGENT_PID"))}
    started = time.monotonic()
    try:
        (root / ".venv").symlink_to(REPO / ".venv")
        shutil.copy(STACK, stack)
        key = tmp_path / "throwaway"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ci-example", "-f", str(key)],
                       check=True)
        run = run_github(EXAMPLE, "rebuild", workdir=root, base_env=env,
                         secrets={"CLUSTER_SSH_PRIVATE_KEY": key.read_text().strip(), "PULUMI_ACCESS_TOKEN": "",
                                  "AWS_ROLE_ARN": ""},
                         inputs={"stack": str(stack)}, uses=lambda step: _uses(step, root), skip_line=_skip_line,
                         timeout=900)
        seconds = time.monotonic() - started
        print(f"\nthe GitHub Actions example on the lab: {seconds:.0f} s; left out: {run.skipped_lines}")
        report = "\n".join(f"{s.name}: {s.outcome} {s.reason} {s.output[-3000:]}" for s in run.steps)
        assert not run.failed, report
        assert [line for line, _ in run.skipped_lines] == ["make setup",
                                                           '.venv/bin/gpucluster preflight --stack "$STACK_FILE"']
        summary = json.loads((root / "up.json").read_text())
        assert summary["ok"] and summary["exit_code"] == 0, summary
        assert [(s["name"], s["status"]) for s in summary["stages"]] == [
            ("destroy", "done"), ("spec", "done"), ("provision", "done"), ("inventory", "done"),
            ("converge", "done"), ("kubernetes", "skipped"), ("verify", "done")]
        assert Path(summary["stages"][4]["run_dir"]).is_dir()
        # The example's stack has no kubernetes section: the stage says so.
        assert summary["stages"][5]["detail"] == "the spec has no enabled kubernetes section"
        assert summary["stages"][6]["run_dir"] == str(root / "reports" / "verify")
        # One verdict per node, and the (cluster) row of the cluster-wide checks (skipped on this lab).
        verdicts = {v["node"]: v["verdict"] for v in summary["verdicts"]}
        assert verdicts["gpu-1"] == "pass" and set(verdicts) <= {"gpu-1", "(cluster)"}, summary["verdicts"]
        assert set(summary["reports"]) >= {"junit", "html", "json"}
        assert 'name="check_id"' in (root / "reports" / "verify" / "junit.xml").read_text()
        # down took the lab away and forgot up's record; the run folders stay.
        status = _gc("lab", "status", "--stack", str(stack), timeout=120)
        assert status.returncode == 1 and "is not up" in status.stdout, status.stdout + status.stderr
        assert not Path(summary["state_file"]).exists()
        assert list((root / "runs").glob("*-converge"))
        agent = _agent_pid(root)
        assert agent is not None, "the example started no ssh-agent"
        assert _gone(agent), "the example left its ssh-agent running"
    finally:
        # Whatever happened above: no lab and no agent of this test stay behind.
        down = _gc("lab", "down", "--stack", str(stack))
        if down.returncode != 0:
            print(f"warning: gpucluster lab down --stack {stack} exited {down.returncode}:\n{down.stderr[-2000:]}")
        agent = _agent_pid(root)
        if agent is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(agent, signal.SIGTERM)
        shutil.rmtree(root, ignore_errors=True)
    assert down.returncode == 0, down.stderr[-2000:]
