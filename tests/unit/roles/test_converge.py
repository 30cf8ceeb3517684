"""The converge driver: recap parsing, exit codes, the run folder, progress lines."""

from __future__ import annotations

import io
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from gpucluster.cli import main
from gpucluster.converge import (
    ConvergeOptions,
    ConvergeResult,
    HostRecap,
    converge,
    load_inventory,
    parse_extra_vars,
    parse_recap,
)
from gpucluster.errors import InputError
from tests.unit.roles.render import inventory_for

# playbook_on_stats event_data as ansible-runner reports it (hosts with 0 are left out).
STATS = {
    "changed": {"gpu-1": 12, "gpu-2": 12, "stor-1": 18},
    "dark": {},
    "failures": {},
    "ignored": {},
    "ok": {"gpu-1": 74, "gpu-2": 74, "localhost": 6, "stor-1": 45},
    "processed": {"gpu-1": 1, "gpu-2": 1, "localhost": 1, "stor-1": 1},
    "rescued": {},
    "skipped": {"gpu-1": 67, "gpu-2": 67, "stor-1": 27},
}


def test_parse_recap_counts_every_host() -> None:
    recap = {h.host: h for h in parse_recap(STATS)}
    assert sorted(recap) == ["gpu-1", "gpu-2", "localhost", "stor-1"]
    assert recap["gpu-1"] == HostRecap("gpu-1", ok=74, changed=12, skipped=67)
    assert recap["localhost"].changed == 0 and recap["localhost"].succeeded


def test_parse_recap_failed_and_unreachable() -> None:
    stats = dict(STATS, failures={"gpu-2": 1}, dark={"stor-1": 1})
    recap = {h.host: h for h in parse_recap(stats)}
    assert recap["gpu-2"].failed == 1 and not recap["gpu-2"].succeeded
    assert recap["stor-1"].unreachable == 1 and not recap["stor-1"].succeeded


def test_parse_recap_rejects_malformed_counters() -> None:
    with pytest.raises(ValueError, match="failures"):
        parse_recap({"failures": [1, 2]})


def _result(stats: dict[str, Any], rc: int = 0, status: str = "successful") -> ConvergeResult:
    return ConvergeResult(Path("/tmp/x"), status, rc, 1.0, parse_recap(stats), {})


def test_exit_codes() -> None:
    assert _result(STATS).exit_code() == 0
    failed = _result(dict(STATS, failures={"gpu-2": 1}), rc=2, status="failed")
    assert failed.exit_code() == 1 and failed.failed_hosts == ["gpu-2"]
    # Only the validate play (on the controller) failed: the inventory is bad input.
    assert _result({"ok": {"localhost": 1}, "failures": {"localhost": 1}}, rc=2, status="failed").exit_code() == 2
    assert _result(STATS, rc=4, status="failed").exit_code() == 1


@pytest.fixture
def inventory_file(tmp_path: Path) -> Path:
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(inventory_for("ethernet")))
    return path


def _event(n: int, kind: str, stdout: str = "", **data: Any) -> dict[str, Any]:
    return {"uuid": f"e{n}", "counter": n, "event": kind, "stdout": stdout, "event_data": data}


class FakeRunner:
    """Replays events into the handler the way ansible_runner.run does."""

    def __init__(self, events: list[dict[str, Any]], rc: int, status: str) -> None:
        self.events, self.rc, self.status = events, rc, status
        self.kwargs: dict[str, Any] = {}

    def __call__(self, **kwargs: Any) -> SimpleNamespace:
        self.kwargs = kwargs
        for event in self.events:
            kwargs["event_handler"](event)
        return SimpleNamespace(rc=self.rc, status=self.status, stats=None)


def test_converge_writes_events_log_and_summary(tmp_path: Path, inventory_file: Path) -> None:
    events = [
        _event(1, "playbook_on_play_start", "PLAY [Converge the GPU nodes]", play="Converge the GPU nodes"),
        _event(2, "runner_on_ok", "ok: [gpu-1]", host="gpu-1", task="Install chrony",
               task_action="ansible.builtin.apt", res={"changed": True}),
        _event(3, "runner_on_failed", "fatal: [gpu-2]", host="gpu-2", task="Write the firewall",
               task_action="ansible.builtin.template", res={"msg": "failed to validate"}),
        _event(4, "runner_on_skipped", "skipping: [gpu-1]", host="gpu-1", task="Set the hostname"),
        _event(5, "playbook_on_stats", "PLAY RECAP", **{**STATS, "failures": {"gpu-2": 1}}),
    ]
    runner = FakeRunner(events, rc=2, status="failed")
    progress = io.StringIO()
    options = ConvergeOptions(inventory=inventory_file, check=True, limit="gpu", tags=["common"],
                              runs_dir=tmp_path / "runs")
    result = converge(options, progress_out=progress, runner=runner)

    assert result.run_dir.parent == tmp_path / "runs" and result.run_dir.name.endswith("-converge")
    lines = (result.run_dir / "events.jsonl").read_text().splitlines()
    assert [json.loads(line)["counter"] for line in lines] == [1, 2, 3, 4, 5]
    assert "fatal: [gpu-2]" in (result.run_dir / "converge.log").read_text()
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert summary["failed_hosts"] == ["gpu-2"] and summary["exit_code"] == 1 and summary["check"] is True
    assert summary["hosts"]["gpu-1"]["changed"] == 12
    assert result.failures == {"gpu-2": "Write the firewall: failed to validate"}

    text = progress.getvalue()
    assert "gpu-1            changed     Install chrony" in text
    assert "gpu-2            FAILED      Write the firewall: failed to validate" in text
    assert runner.kwargs["cmdline"] == "--check --tags common"
    assert runner.kwargs["limit"] == "gpu,localhost"
    assert runner.kwargs["quiet"] is True


def test_heavy_sets_the_extra_var(tmp_path: Path, inventory_file: Path) -> None:
    runner = FakeRunner([_event(1, "playbook_on_stats", **STATS)], rc=0, status="successful")
    options = ConvergeOptions(inventory=inventory_file, heavy=True, runs_dir=tmp_path)
    assert converge(options, progress_out=io.StringIO(), runner=runner).exit_code() == 0
    assert runner.kwargs["extravars"] == {"gpucluster_heavy_packages": True}
    assert "cmdline" not in runner.kwargs


def test_load_inventory_names_each_problem(tmp_path: Path) -> None:
    path = tmp_path / "inv.yml"
    path.write_text(yaml.safe_dump({"all": {"vars": {"gpucluster_target": "lab"},
                                            "hosts": {"n1": {"gpucluster_profile": "nope"}}}}))
    with pytest.raises(InputError) as err:
        load_inventory(path)
    text = "\n".join(err.value.lines())
    assert "all.vars.gpucluster_fabric: missing" in text
    assert "all.hosts.n1.gpucluster_profile: 'nope'" in text


def test_cli_bad_inventory_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["converge", "--inventory", str(tmp_path / "missing.yml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such inventory file" in err


def test_cli_non_lab_stack_needs_an_inventory(capsys: pytest.CaptureFixture[str]) -> None:
    repo = Path(__file__).resolve().parents[3]
    assert main(["converge", "--stack", str(repo / "Pulumi.aws-h100.yaml")]) == 2
    assert "not the lab" in capsys.readouterr().err


def test_extra_vars_reach_the_runner_with_heavy(tmp_path: Path, inventory_file: Path) -> None:
    runner = FakeRunner([_event(1, "playbook_on_stats", **STATS)], rc=0, status="successful")
    options = ConvergeOptions(inventory=inventory_file, heavy=True, runs_dir=tmp_path,
                              extra_vars={"upgrade_rolling_components": ["driver"], "token": "s3cret"})
    result = converge(options, progress_out=io.StringIO(), runner=runner)
    assert runner.kwargs["extravars"] == {"upgrade_rolling_components": ["driver"], "token": "s3cret",
                                          "gpucluster_heavy_packages": True}
    summary = (result.run_dir / "summary.json").read_text()
    # The summary names the extra vars but never holds their values (one may be a secret).
    assert json.loads(summary)["extra_vars"] == ["token", "upgrade_rolling_components"]
    assert "s3cret" not in summary


def test_parse_extra_vars_reads_values_as_yaml() -> None:
    assert parse_extra_vars([
        "upgrade_rolling_components=[driver]", "flag=true", "n=3", "name=node-1", "quoted='3'", "empty=",
        "n=4", "expr=a=b",
    ]) == {"upgrade_rolling_components": ["driver"], "flag": True, "n": 4, "name": "node-1", "quoted": "3",
           "empty": "", "expr": "a=b"}


def test_parse_extra_vars_names_each_bad_item() -> None:
    with pytest.raises(InputError) as err:
        parse_extra_vars(["novalue", "bad-key=1", "ok=1", "broken=[a"])
    assert [p.split(":")[0] for p in err.value.problems] == [
        "--extra-vars 'novalue'", "--extra-vars 'bad-key=1'", "--extra-vars 'broken=[a'"]


def test_cli_passes_extra_vars(tmp_path: Path, inventory_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gpucluster.cli.converge as cli_converge

    seen: list[ConvergeOptions] = []

    def fake_converge(options: ConvergeOptions, *, progress_out: Any) -> ConvergeResult:
        seen.append(options)
        return _result(STATS)

    monkeypatch.setattr(cli_converge, "converge", fake_converge)
    assert main(["converge", "-i", str(inventory_file), "--playbook", "playbooks/upgrade-rolling.yml",
                 "-e", "upgrade_rolling_components=[driver]", "--extra-vars", "x=1", "--json"]) == 0
    assert seen[0].extra_vars == {"upgrade_rolling_components": ["driver"], "x": 1}
    assert seen[0].playbook == Path("playbooks/upgrade-rolling.yml")


def test_cli_bad_extra_vars_exit_2(inventory_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["converge", "-i", str(inventory_file), "-e", "no-equals-sign"]) == 2
    assert "expected KEY=VALUE" in capsys.readouterr().err
