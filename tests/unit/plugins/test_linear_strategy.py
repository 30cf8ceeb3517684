"""`gpucluster.cluster.linear`: Ansible's linear strategy, over Mitogen, with skips decided on the controller.

The equivalence tests run a real ansible-playbook (local connection, three hosts) over a play with
every kind of condition (tests/unit/plugins/data/strategy/play.yml) and require every task result
and the recap to be the same with the controller-side skip on and off, in normal and check mode.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PLUGIN = REPO / "collections/ansible_collections/gpucluster/cluster/plugins/strategy/linear.py"
DATA = Path(__file__).resolve().parent / "data/strategy"
PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"

_PROBE = f"""
import importlib.util
from ansible.plugins.strategy.linear import StrategyModule as Linear
spec = importlib.util.spec_from_file_location("gc_linear", {str(PLUGIN)!r})
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
assert issubclass(m.StrategyModule, Linear)
print(any("mitogen" in c.__module__ for c in m.StrategyModule.__mro__),
      issubclass(m.StrategyModule, m.ControllerTasksMixin))
"""


def _probe(**env: str) -> list[str]:
    res = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True,
                         env={**os.environ, **env})
    return res.stdout.split()


def test_runs_over_mitogen_by_default() -> None:
    assert _probe() == ["True", "True"]


def test_plain_linear_when_mitogen_is_turned_off() -> None:
    assert _probe(GPUCLUSTER_MITOGEN="0") == ["False", "True"]


def _play(tmp_path: Path, *, skip: str, actions: str | None = None, mitogen: str = "0",
          check: bool = False) -> tuple[list[str], str, str]:
    """Run the play; return its sorted result records, its recap and its output.

    ``skip`` and ``actions`` set GPUCLUSTER_CONTROLLER_SKIP and _ACTIONS (``actions`` follows
    ``skip`` unless given), ``mitogen`` GPUCLUSTER_MITOGEN.
    """
    actions = skip if actions is None else actions
    record = tmp_path / f"record-{skip}-{actions}-{mitogen}-{check}.jsonl"
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "RECORD_FILE": str(record),
           "ANSIBLE_CALLBACK_PLUGINS": str(DATA / "callback"), "ANSIBLE_CALLBACKS_ENABLED": "record",
           "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"), "ANSIBLE_NOCOLOR": "1",
           "GPUCLUSTER_CONTROLLER_SKIP": skip, "GPUCLUSTER_CONTROLLER_ACTIONS": actions,
           "GPUCLUSTER_MITOGEN": mitogen}
    lookups = tmp_path / f"lookups-{skip}-{actions}-{mitogen}-{check}.log"
    cmd = [str(PLAYBOOK), "-v", "-i", str(DATA / "inventory.ini"), str(DATA / "play.yml"),
           "-e", f"lookup_log={lookups}"]
    res = subprocess.run(cmd + (["--check"] if check else []), capture_output=True, text=True, env=env,
                         cwd=REPO, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    recap = res.stdout[res.stdout.index("PLAY RECAP"):]
    # The lookup in a conditional task's arguments ran once per host that ran it (two of three),
    # never again in a probe.
    assert lookups.read_text() == "x\nx\n"
    return sorted(record.read_text().splitlines()), recap, res.stdout


@pytest.mark.parametrize("check", [False, True], ids=["run", "check"])
def test_every_result_is_the_same_with_and_without_controller_tasks(tmp_path: Path, check: bool) -> None:
    off, recap_off, _ = _play(tmp_path, skip="0", check=check)
    on, recap_on, out = _play(tmp_path, skip="1", check=check)
    assert on == off
    assert recap_on == recap_off
    skipped = [json.loads(line) for line in on if '"status": "skipped"' in line]
    assert len(skipped) >= 10
    # The skip reasons a worker gives are there: the false condition is named.
    assert {"rank | int == 0", "inventory_hostname in wanted"} <= {
        s["result"].get("false_condition") for s in skipped}
    # no_log holds for a skip decided on the controller too.
    secret = [s for s in skipped if s["task"] == "A secret that is skipped"]
    assert len(secret) == 3 and all("censored" in s["result"] and "false_condition" not in s["result"]
                                    for s in secret)
    assert ("Never in check mode" in {s["task"] for s in skipped}) is check
    failed = [json.loads(line) for line in on if '"status": "ignored"' in line]
    assert {f["task"] for f in failed} == {"Assert what does not hold on one host",
                                           "A condition that cannot be evaluated"}
    assert "rank 1 is not allowed" in json.dumps(failed)
    counts = _counts(out)
    assert counts[0] >= 2 and counts[1] >= 30, counts


def _counts(out: str) -> tuple[int, int, int]:
    """(skipped on the controller, run in process, sent to workers) summed over the plays."""
    found = re.findall(r"gpucluster_linear: (\d+) host-tasks skipped on the controller, "
                       r"(\d+) controller-only host-tasks run in process, (\d+) sent to workers", out)
    assert found, out[-2000:]
    return (sum(int(f[0]) for f in found), sum(int(f[1]) for f in found), sum(int(f[2]) for f in found))


def test_nothing_is_decided_on_the_controller_when_turned_off(tmp_path: Path) -> None:
    _, _, out = _play(tmp_path, skip="0", actions="0")
    assert _counts(out)[:2] == (0, 0)


def test_each_switch_turns_off_its_own_part(tmp_path: Path) -> None:
    off_skip, _, out_skip = _play(tmp_path, skip="0", actions="1")
    off_actions, _, out_actions = _play(tmp_path, skip="1", actions="0")
    assert off_skip == off_actions
    assert _counts(out_skip)[0] == 0 and _counts(out_skip)[1] > 0
    assert _counts(out_actions)[0] > 0 and _counts(out_actions)[1] == 0


def test_over_mitogen_the_results_are_those_of_plain_linear(tmp_path: Path) -> None:
    plain, recap_plain, _ = _play(tmp_path, skip="0", mitogen="0")
    fast, recap_fast, _ = _play(tmp_path, skip="1", mitogen="1")
    strip = re.compile(r', "discovered_interpreter_python": "[^"]*"')
    assert [strip.sub("", x) for x in fast] == [strip.sub("", x) for x in plain]
    assert recap_fast == recap_plain
