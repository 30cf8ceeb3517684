"""The converge driver: recap parsing, exit codes, the run folder, progress lines."""

from __future__ import annotations

import errno
import io
import json
import os
import re
import shlex
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from gpucluster import converge as converge_module
from gpucluster import runs
from gpucluster.cli import main
from gpucluster.converge import (
    NO_LOG_HINT,
    ConvergeOptions,
    ConvergeResult,
    HostRecap,
    Progress,
    converge,
    load_inventory,
    parse_extra_vars,
    parse_recap,
)
from gpucluster.errors import InputError
from gpucluster.inventory import parse_inventory_text
from tests.unit.cli import fakessh
from tests.unit.roles.no_log import NO_LOG as ROLES_NO_LOG
from tests.unit.roles.render import inventory_for

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[3]

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


def extra_vars_given(kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """The extra vars a runner call carries: ``-e @FILE`` in its cmdline, FILE read now (it is
    removed once the run ends); None without one."""
    words = shlex.split(kwargs.get("cmdline", ""))
    files = [words[i + 1][1:] for i, w in enumerate(words[:-1]) if w == "-e" and words[i + 1].startswith("@")]
    if not files:
        return None
    assert len(files) == 1 and "extravars" not in kwargs
    path = Path(files[0])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    return data


class FakeRunner:
    """Replays events into the handler the way ansible_runner.run does."""

    def __init__(self, events: list[dict[str, Any]], rc: int, status: str) -> None:
        self.events, self.rc, self.status = events, rc, status
        self.kwargs: dict[str, Any] = {}
        self.extravars: dict[str, Any] | None = None

    def __call__(self, **kwargs: Any) -> SimpleNamespace:
        self.kwargs = kwargs
        self.extravars = extra_vars_given(kwargs)
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
    # A skipped task is one line naming its hosts, printed when the next task or the recap comes.
    assert "skipping" not in text and "gpu-1            skipped" not in text
    assert re.search(r"\bskipped\s+on 1 host\(s\): gpu-1$", text, re.M)
    assert runner.kwargs["cmdline"] == "--check --tags common"
    assert runner.kwargs["limit"] == "gpu,localhost"
    assert runner.kwargs["quiet"] is True


def test_each_task_says_when_it_starts_with_its_role_and_skips_are_summarised() -> None:
    out = io.StringIO()
    progress = Progress(out, io.StringIO(), io.StringIO())
    progress(_event(1, "playbook_on_task_start", "", task="Install chrony", role="common"))
    for n, host in enumerate(("gpu-1", "gpu-2", "stor-1"), start=2):
        progress(_event(n, "runner_on_skipped", "", host=host, task="Install chrony"))
    progress(_event(5, "playbook_on_task_start", "", task="Write the firewall", role="common"))
    lines = [line.split("] ", 1)[1] for line in out.getvalue().splitlines()]
    assert lines == ["TASK common : Install chrony", f"{'':<16} {'skipped':<11} on 3 host(s): gpu-1, gpu-2, stor-1",
                     "TASK common : Write the firewall"]
    shown = io.StringIO()
    verbose = Progress(shown, io.StringIO(), io.StringIO(), show_skipped=True)
    verbose(_event(1, "runner_on_skipped", "", host="gpu-1", task="Install chrony"))
    assert "gpu-1            skipped     Install chrony" in shown.getvalue()


def test_heavy_sets_the_extra_var(tmp_path: Path, inventory_file: Path) -> None:
    runner = FakeRunner([_event(1, "playbook_on_stats", **STATS)], rc=0, status="successful")
    options = ConvergeOptions(inventory=inventory_file, heavy=True, runs_dir=tmp_path)
    assert converge(options, progress_out=io.StringIO(), runner=runner).exit_code() == 0
    assert runner.extravars == {"gpucluster_heavy_packages": True}


def test_load_inventory_names_each_problem(tmp_path: Path) -> None:
    path = tmp_path / "inv.yml"
    path.write_text(yaml.safe_dump({"all": {"vars": {"gpucluster_inventory_schema": 6, "gpucluster_target": "lab",
                                                     "gpucluster_profiles": {"cpu-lab": {}}},
                                            "hosts": {"n1": {"gpucluster_profile": "nope"}}}}))
    with pytest.raises(InputError) as err:
        load_inventory(path)
    text = "\n".join(err.value.lines())
    assert "all.vars.gpucluster_fabric: is required" in text
    assert "all.hosts.n1.ansible_host: is required" in text
    assert "all.hosts.n1.gpucluster_profile: 'nope' is not in all.vars.gpucluster_profiles" in text


def test_an_inventory_of_another_schema_is_refused_with_the_remedy(tmp_path: Path) -> None:
    data = parse_inventory_text((REPO / "tests" / "golden" / "inventory" / "lab.yml").read_text())
    data["all"]["vars"]["gpucluster_inventory_schema"] = 1
    path = tmp_path / "inv.yml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError, match="reads version 6; write the inventory again"):
        load_inventory(path)


def test_cli_bad_inventory_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["converge", "--inventory", str(tmp_path / "missing.yml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such inventory file" in err


def test_cli_non_lab_stack_needs_an_inventory(capsys: pytest.CaptureFixture[str]) -> None:
    repo = Path(__file__).resolve().parents[3]
    assert main(["converge", "--stack", str(repo / "Pulumi.aws-h100.yaml")]) == 2
    err = capsys.readouterr().err
    assert "no inventory at" in err and "gpucluster inventory --outputs" in err


def test_extra_vars_reach_the_runner_with_heavy(tmp_path: Path, inventory_file: Path) -> None:
    runner = FakeRunner([_event(1, "playbook_on_stats", **STATS)], rc=0, status="successful")
    options = ConvergeOptions(inventory=inventory_file, heavy=True, runs_dir=tmp_path,
                              extra_vars={"upgrade_rolling_components": ["driver"], "token": "s3cret"})
    result = converge(options, progress_out=io.StringIO(), runner=runner)
    assert runner.extravars == {"upgrade_rolling_components": ["driver"], "token": "s3cret",
                                "gpucluster_heavy_packages": True}
    assert "s3cret" not in runner.kwargs["cmdline"]
    assert not list(result.run_dir.rglob(converge_module.EXTRA_VARS_FILE)), "the extra vars file outlived the run"
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


# --- runs under interruption, concurrency and full disks; SSH trust ----------------------------




def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_run_folder_and_its_files_are_private(tmp_path: Path, inventory_file: Path) -> None:
    runner = FakeRunner([_event(1, "playbook_on_stats", **STATS)], rc=0, status="successful")
    old = os.umask(0o022)
    try:
        result = converge(ConvergeOptions(inventory=inventory_file, runs_dir=tmp_path / "runs"),
                          progress_out=io.StringIO(), runner=runner)
    finally:
        os.umask(old)
    assert _mode(result.run_dir) == 0o700
    for name in ("events.jsonl", "converge.log", "summary.json"):
        assert _mode(result.run_dir / name) == 0o600, name


def test_two_converges_in_the_same_second_keep_their_own_folders(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from concurrent.futures import ThreadPoolExecutor

    class Frozen(converge_module.datetime):  # type: ignore[misc,name-defined]
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return converge_module.datetime(2025, 1, 1, tzinfo=tz)

    monkeypatch.setattr(converge_module, "datetime", Frozen)
    monkeypatch.setattr(runs, "utc_stamp", lambda: "20250101T000000Z")
    with ThreadPoolExecutor(max_workers=8) as pool:
        dirs = list(pool.map(lambda _: converge_module.new_run_dir(tmp_path / "runs", "converge"), range(24)))
    assert len(set(dirs)) == 24 and all(d.name.startswith("20250101T000000Z-") for d in dirs)


def test_a_fetched_admin_conf_is_private(tmp_path: Path, inventory_file: Path) -> None:
    """The control-plane role fetches admin.conf (cluster-admin's key) beside the inventory (the node
    contract's kubeconfig_name); with Mitogen it keeps the node's mode, whatever that was. The
    inventory's folder was there before: its mode stays."""
    admin = inventory_file.parent / "admin.conf"
    inventory_file.parent.chmod(0o750)

    class Fetching(FakeRunner):
        def __call__(self, **kwargs: Any) -> SimpleNamespace:
            admin.write_text("apiVersion: v1\nusers: [{user: {client-key-data: c2VjcmV0}}]\n")
            os.chmod(admin, 0o644)
            return super().__call__(**kwargs)

    converge(ConvergeOptions(inventory=inventory_file, runs_dir=tmp_path / "runs"),
             progress_out=io.StringIO(), runner=Fetching([_event(1, "playbook_on_stats", **STATS)], 0, "successful"))
    assert _mode(admin) == 0o600 and _mode(admin.parent) == 0o750


def _fetching_into(inventory_file: Path, dest: Path) -> None:
    data = yaml.safe_load(inventory_file.read_text())
    data["all"]["vars"]["kubernetes_control_plane_kubeconfig_fetch_dest"] = str(dest)
    inventory_file.write_text(yaml.safe_dump(data))


def test_a_fetch_into_a_folder_converge_made_closes_that_folder(tmp_path: Path, inventory_file: Path) -> None:
    """The inventory's kubernetes_control_plane_kubeconfig_fetch_dest moves the fetch; the folder the
    fetch made (missing before the run) is 0700, the file 0600."""
    dest = tmp_path / "kube" / "admin.conf"
    _fetching_into(inventory_file, dest)

    class Fetching(FakeRunner):
        def __call__(self, **kwargs: Any) -> SimpleNamespace:
            dest.parent.mkdir(mode=0o755)
            dest.write_text("apiVersion: v1\n")
            dest.chmod(0o644)
            return super().__call__(**kwargs)

    converge(ConvergeOptions(inventory=inventory_file, runs_dir=tmp_path / "runs"), progress_out=io.StringIO(),
             runner=Fetching([_event(1, "playbook_on_stats", **STATS)], 0, "successful"))
    assert _mode(dest) == 0o600 and _mode(dest.parent) == 0o700


def test_a_fetch_into_a_shared_folder_tightens_the_file_alone(tmp_path: Path, inventory_file: Path) -> None:
    """`kubernetes_control_plane_kubeconfig_fetch_dest: /tmp/admin.conf` in the inventory made /tmp
    0700: only a folder the converge made is closed; the file is 0600, and a link in its place is not
    followed."""
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    dest = shared / "admin.conf"
    other = tmp_path / "someone-elses"
    other.write_text("x\n")
    other.chmod(0o644)
    _fetching_into(inventory_file, dest)

    class Fetching(FakeRunner):
        def __call__(self, **kwargs: Any) -> SimpleNamespace:
            dest.write_text("apiVersion: v1\n")
            dest.chmod(0o644)
            return super().__call__(**kwargs)

    options = ConvergeOptions(inventory=inventory_file, runs_dir=tmp_path / "runs")
    converge(options, progress_out=io.StringIO(), runner=Fetching([_event(1, "playbook_on_stats", **STATS)], 0,
                                                                  "successful"))
    assert _mode(dest) == 0o600 and stat.S_IMODE(shared.stat().st_mode) == 0o1777
    dest.unlink()
    dest.symlink_to(other)

    converge(options, progress_out=io.StringIO(), runner=FakeRunner([_event(1, "playbook_on_stats", **STATS)], 0,
                                                                    "successful"))
    assert _mode(other) == 0o644 and stat.S_IMODE(shared.stat().st_mode) == 0o1777


def test_a_relative_fetch_place_in_the_inventory_is_refused_before_anything_runs(tmp_path: Path,
                                                                                  inventory_file: Path) -> None:
    _fetching_into(inventory_file, Path("kube/admin.conf"))
    runner = FakeRunner([_event(1, "playbook_on_stats", **STATS)], rc=0, status="successful")
    with pytest.raises(InputError, match=re.escape("kubernetes_control_plane_kubeconfig_fetch_dest: "
                                                   "'kube/admin.conf': an absolute path")):
        converge(ConvergeOptions(inventory=inventory_file, runs_dir=tmp_path / "runs"), progress_out=io.StringIO(),
                 runner=runner)
    assert runner.kwargs == {} and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("var", ["monitoring_textfile_dir", "nvidia_driver_install_method",
                                 "cuda_toolkit_install_method", "monitoring_node_exporter_listen_address",
                                 "kubernetes_control_plane_kubeconfig_fetch_dest", "gpucluster_contract"])
def test_a_contract_override_as_an_extra_var_is_refused_before_anything_runs(
        tmp_path: Path, inventory_file: Path, var: str) -> None:
    """The roles would take it and the suite (or up, for the kubeconfig) would not: refused, naming it
    and where to set it, before a lock, a run folder or ansible-playbook."""
    runner = FakeRunner([_event(1, "playbook_on_stats", **STATS)], rc=0, status="successful")
    options = ConvergeOptions(inventory=inventory_file, runs_dir=tmp_path / "runs",
                              extra_vars={var: "/srv/x", "upgrade_rolling_components": ["driver"]})
    with pytest.raises(InputError) as err:
        converge(options, progress_out=io.StringIO(), runner=runner)
    assert len(err.value.problems) == 1
    assert var in err.value.problems[0] and "set it in the inventory" in err.value.problems[0]
    assert runner.kwargs == {} and not (tmp_path / "runs").exists()


def test_cli_refuses_a_contract_override_given_with_e(tmp_path: Path, inventory_file: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    overrides = tmp_path / "vars.yml"
    overrides.write_text("nccl_tests_install_dir: /srv/nccl\n")
    for given in (["-e", "monitoring_textfile_dir=/srv/textfiles"], ["-e", f"@{overrides}"]):
        code = main(["converge", "--inventory", str(inventory_file), "--runs-dir", str(tmp_path / "runs"), *given])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1, err
        assert ("monitoring_textfile_dir" if "=" in given[1] else "nccl_tests_install_dir") in err
        assert "set it in the inventory" in err
    assert not (tmp_path / "runs").exists()


def _full_disk(monkeypatch: pytest.MonkeyPatch, inside: Path) -> None:
    """Files opened under ``inside`` are /dev/full: writes fail with the kernel's own ENOSPC."""
    real = runs.open_for_write
    monkeypatch.setattr(runs, "open_for_write", lambda p: os.open("/dev/full", os.O_WRONLY)
                        if str(p).startswith(str(inside)) else real(p))


def test_a_full_disk_gives_one_line_and_still_the_recap(tmp_path: Path, inventory_file: Path,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    import gpucluster.cli.converge as cli_converge

    _full_disk(monkeypatch, tmp_path / "runs")
    events = [_event(n, "runner_on_ok", "ok: [gpu-1]" * 400, host="gpu-1", task=f"Task {n}",
                     task_action="ansible.builtin.apt", res={"changed": False}) for n in range(1, 40)]
    events.append(_event(99, "playbook_on_stats", **STATS))
    runner = FakeRunner(events, rc=0, status="successful")
    monkeypatch.setattr(cli_converge, "converge",
                        lambda options, progress_out: converge(options, progress_out=progress_out, runner=runner))
    code = main(["converge", "-i", str(inventory_file), "--runs-dir", str(tmp_path / "runs")])
    out, err = capsys.readouterr()
    assert code == 2
    assert "Traceback" not in out + err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "cannot write the run folder" in errors[0], errors
    assert "No space left on device (ENOSPC)" in errors[0]
    assert "gpu-1" in out and "stor-1" in out, "the recap is still printed"
    assert "[" in err and "Task 39" in err, "progress went on while the log could not be written"


def test_a_runner_stopped_by_a_full_disk_is_one_line_too(tmp_path: Path, inventory_file: Path,
                                                         capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import gpucluster.cli.converge as cli_converge

    def runner(**kwargs: Any) -> SimpleNamespace:
        kwargs["event_handler"](_event(1, "runner_on_ok", "ok", host="gpu-1", task="Install chrony",
                                       task_action="ansible.builtin.apt", res={"changed": True}))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(cli_converge, "converge",
                        lambda options, progress_out: converge(options, progress_out=progress_out, runner=runner))
    code = main(["converge", "-i", str(inventory_file), "--runs-dir", str(tmp_path / "runs")])
    out, err = capsys.readouterr()
    assert code == 1 and "Traceback" not in out + err
    assert [x for x in err.splitlines() if "No space left on device" in x] == [
        next(x for x in err.splitlines() if x.startswith("error: converge: cannot write"))]
    assert "gpu-1" in out  # the recap of what finished


def test_a_failure_under_no_log_names_the_way_to_its_cause() -> None:
    progress = Progress(io.StringIO(), io.StringIO(), io.StringIO())
    progress(_event(1, "runner_on_failed", "fatal: [cp-1]", host="cp-1", task="Join the control plane",
                    task_action="ansible.builtin.command",
                    res={"censored": "the output has been hidden due to the fact that 'no_log: true' was specified "
                                     "for this result"}))
    assert progress.failures == {"cp-1": f"Join the control plane: {NO_LOG_HINT}"}
    assert "--debug-no-log" in NO_LOG_HINT


@pytest.mark.parametrize("summary", ["non-zero return code",  # ansible-core up to 2.19
                                     "The command exited with a non-zero return code."])  # 2.20 and newer
def test_a_failed_command_names_its_own_words(summary: str) -> None:
    progress = Progress(io.StringIO(), io.StringIO(), io.StringIO())
    progress(_event(1, "runner_on_failed", "", host="gpu-1", task="Init the cluster",
                    task_action="ansible.builtin.command",
                    res={"msg": summary, "rc": 1, "stderr": "W0101 warn\n[ERROR Port-6443]: in use"}))
    assert progress.failures["gpu-1"] == "Init the cluster: rc 1: [ERROR Port-6443]: in use"


@pytest.mark.parametrize("res", [
    # A raw command that says why on stdout (fabric_rails' network-file check).
    {"msg": "non-zero return code", "rc": 1, "stderr": "",
     "stdout": "enp16s0np0: network file /run/systemd/network/10-netplan-enp16s0np0.network in effect\n"},
    # The same under a terminal (raw over Mitogen): OpenSSH's closing notice is all stderr holds.
    {"msg": "non-zero return code", "rc": 1, "stderr": "Shared connection to 10.83.0.10 closed.\r\n",
     "stdout": "enp16s0np0: network file /run/systemd/network/10-netplan-enp16s0np0.network in effect\r\n"},
])
def test_a_failed_raw_command_names_what_it_printed(res: dict[str, object]) -> None:
    progress = Progress(io.StringIO(), io.StringIO(), io.StringIO())
    progress(_event(1, "runner_on_failed", "", host="gpu-1", task="Check that every rail runs on the role's file",
                    task_action="ansible.builtin.raw", res=res))
    assert progress.failures["gpu-1"] == ("Check that every rail runs on the role's file: rc 1: enp16s0np0: network "
                                          "file /run/systemd/network/10-netplan-enp16s0np0.network in effect")


# What ansible.builtin.apt returns when apt-get fails: its msg echoes the whole command line first.
_APT_STDERR = ("E: Failed to fetch http://deb.debian.org/debian/pool/main/c/ceph/ceph-common_16.2.15%2bds-0%2bdeb12u2"
               "_amd64.deb  503  Service Unavailable [IP: 10.89.0.1 3142]\n"
               "E: Unable to fetch some archives, maybe run apt-get update or try with --fix-missing?\n")
_APT_CMD = ("'/usr/bin/apt-get -y -o \"Dpkg::Options::=--force-confdef\" -o \"Dpkg::Options::=--force-confold\" "
            "-o DPkg::Lock::Timeout=60       install 'ceph-common=16.2.15+ds-0+deb12u2' "
            "'ceph-mon=16.2.15+ds-0+deb12u2' -o APT::Install-Recommends=no' failed: ")


@pytest.mark.parametrize("res", [
    {"msg": _APT_CMD + _APT_STDERR, "rc": 100, "stderr": _APT_STDERR, "stdout": "Reading package lists..."},
    {"msg": _APT_CMD + _APT_STDERR},  # no stderr key: the words after the echoed command still count
])
def test_a_failed_apt_says_apts_error_not_its_command_line(res: dict[str, object]) -> None:
    progress = Progress(io.StringIO(), io.StringIO(), io.StringIO())
    progress(_event(1, "runner_on_failed", "", host="node-1", task="Install the Ceph packages",
                    task_action="gpucluster.cluster.apt", res=res))
    cause = progress.failures["node-1"]
    assert "503  Service Unavailable" in cause and "Unable to fetch some archives" in cause
    assert "Dpkg::Options" not in cause and cause.startswith("Install the Ceph packages: ")


def _cli_converge(tmp_path: Path, inventory_file: Path, monkeypatch: pytest.MonkeyPatch, args: list[str],
                  env: dict[str, str]) -> FakeRunner:
    """`gpucluster converge ARGS` under ENV, over a runner that records what it was given; exit 0."""
    import gpucluster.cli.converge as cli_converge

    for k, v in env.items():
        monkeypatch.setenv(k, v)
    runner = FakeRunner([_event(1, "playbook_on_stats", **STATS)], rc=0, status="successful")
    monkeypatch.setattr(cli_converge, "converge",
                        lambda options, progress_out: converge(options, progress_out=progress_out, runner=runner))
    assert main(["converge", "-i", str(inventory_file), "--runs-dir", str(tmp_path / "runs"), *args]) == 0
    return runner


@pytest.mark.parametrize(("args", "env"), [(["--debug-no-log"], {}), ([], {"GPUCLUSTER_DEBUG_NO_LOG": "1"})])
def test_the_debug_switch_lifts_no_log(tmp_path: Path, inventory_file: Path, monkeypatch: pytest.MonkeyPatch,
                                       args: list[str], env: dict[str, str]) -> None:
    runner = _cli_converge(tmp_path, inventory_file, monkeypatch, args, env)
    assert runner.extravars is not None and runner.extravars["gpucluster_debug_no_log"] is True
    assert runner.kwargs["envvars"]["GPUCLUSTER_DEBUG_NO_LOG"] == "1"


@pytest.mark.parametrize(("args", "env", "strategy"), [([], {}, None), (["--mitogen"], {}, "mitogen_linear"),
                                                      ([], {"GPUCLUSTER_MITOGEN": "1"}, "mitogen_linear")])
def test_mitogen_only_when_asked(tmp_path: Path, inventory_file: Path, monkeypatch: pytest.MonkeyPatch,
                                 args: list[str], env: dict[str, str], strategy: str | None) -> None:
    monkeypatch.delenv("GPUCLUSTER_MITOGEN", raising=False)
    runner = _cli_converge(tmp_path, inventory_file, monkeypatch, args, env)
    assert runner.kwargs["envvars"].get("ANSIBLE_STRATEGY") == strategy


# What the roles' secret tasks say (tests/unit/roles/no_log.py): no_log unless the operator lifts it.
NO_LOG_PLAYBOOK = f"""\
- hosts: all
  gather_facts: false
  tasks:
    - name: Join with a token
      ansible.builtin.command: sh -c 'echo "join refused, token expired" >&2; exit 3'
      no_log: "{ROLES_NO_LOG}"
      changed_when: false
"""

SLEEP_PLAYBOOK = """\
- hosts: all
  gather_facts: false
  tasks:
    - name: Say hello
      ansible.builtin.command: "true"
      changed_when: false
    - name: Wait a long time
      ansible.builtin.command: sleep {seconds}
      changed_when: false
"""


def _local_inventory(tmp_path: Path, target: str = "baremetal") -> Path:
    """One host reached with Ansible's local connection (no SSH), on a target that is not the lab."""
    data = inventory_for("ethernet")
    root = data["all"]
    name = next(iter(root["hosts"]))
    root["hosts"] = {name: dict(root["hosts"][name], ansible_connection="local",
                                ansible_python_interpreter=sys.executable)}
    root["children"] = {}
    root["vars"]["gpucluster_target"] = target
    path = tmp_path / "local-inventory.yml"
    path.write_text(yaml.safe_dump(data))
    return path


def _gc(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), **{runs.STATE_DIR_ENV: str(tmp_path / "state")})
    return subprocess.Popen([sys.executable, "-m", "gpucluster", *args], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def test_debug_no_log_shows_the_cause_of_a_real_failure(tmp_path: Path) -> None:
    inventory = _local_inventory(tmp_path)
    playbook = tmp_path / "no_log.yml"
    playbook.write_text(NO_LOG_PLAYBOOK)
    runs_dir = tmp_path / "runs"
    base = ["converge", "-i", str(inventory), "--playbook", str(playbook), "--runs-dir", str(runs_dir)]
    hidden = _gc(tmp_path, *base)
    _, err = hidden.communicate(timeout=180)
    assert hidden.returncode == 1 and NO_LOG_HINT in err and "token expired" not in err
    shown = _gc(tmp_path, *base, "--debug-no-log")
    _, err = shown.communicate(timeout=180)
    assert shown.returncode == 1
    assert "Join with a token: rc 3: join refused, token expired" in err, err[-2000:]


SECRETS_PLAYBOOK = """\
- hosts: all
  gather_facts: false
  tasks:
    - name: Record what a task sees of its environment and of the process list
      ansible.builtin.shell: env > {out}/env.txt; ps -eww -o args > {out}/ps.txt
      changed_when: false
    - name: The extra vars arrived
      ansible.builtin.assert:
        that: [from_file == "{from_file}", typed == "{typed}"]
"""


def test_no_secret_of_the_controller_or_of_extra_vars_reaches_the_run_folder_or_the_process_list(
        tmp_path: Path) -> None:
    """`gpucluster up` runs converge with the cloud's credentials in its environment; an extra var
    may be a secret. A real ansible-playbook sees neither the credentials nor, on any process's
    command line, an extra var's value; the run folder holds neither once the run ended."""
    aws, pulumi_token = "AKIAcontrollerSecret" + os.urandom(6).hex(), "pul-" + os.urandom(8).hex()
    from_file, typed = "fileSecret" + os.urandom(6).hex(), "typedSecret" + os.urandom(6).hex()
    seen = tmp_path / "seen"
    seen.mkdir()
    playbook = tmp_path / "secrets.yml"
    playbook.write_text(SECRETS_PLAYBOOK.format(out=seen, from_file=from_file, typed=typed))
    vars_file = tmp_path / "vars.yml"
    vars_file.write_text(yaml.safe_dump({"from_file": from_file}))
    runs_dir = tmp_path / "runs"
    env = dict(os.environ, PYTHONPATH=str(REPO), AWS_SECRET_ACCESS_KEY=aws, PULUMI_ACCESS_TOKEN=pulumi_token,
               ANSIBLE_NET_PASSWORD=aws, **{runs.STATE_DIR_ENV: str(tmp_path / "state")})
    proc = subprocess.run([sys.executable, "-m", "gpucluster", "converge", "-i", str(_local_inventory(tmp_path)),
                           "--playbook", str(playbook), "--runs-dir", str(runs_dir), "-e", f"@{vars_file}",
                           "-e", f"typed={typed}"], cwd=tmp_path, env=env, text=True, capture_output=True,
                          timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    task_env = (seen / "env.txt").read_text()
    assert "PATH=" in task_env and "ANSIBLE_" in task_env
    for secret in (aws, pulumi_token, from_file, typed):
        assert secret not in task_env
    # The operator typed one value on gpucluster's own command line; no other process shows it.
    processes = [line for line in (seen / "ps.txt").read_text().splitlines() if " -m gpucluster converge " not in line]
    assert any("ansible-playbook" in line for line in processes)
    assert not [line for line in processes if from_file in line or typed in line]
    run_dir = next(runs_dir.glob("*-converge"))
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert any(p.name == "command" for p in files), "ansible-runner's command artifact is kept"
    # ... with the environment's names only: a value kept for ansible-playbook (PATH, ANSIBLE_*) stays out of it.
    recorded = json.loads(next(p for p in files if p.name == "command").read_text())["env"]
    assert isinstance(recorded, list) and "PATH" in recorded, recorded
    for path in files:
        text = path.read_text(errors="replace")
        for secret in (aws, pulumi_token, from_file, typed):
            assert secret not in text, f"{secret[:12]}... in {path.relative_to(run_dir)}"
    assert not (run_dir / converge_module.EXTRA_VARS_FILE).exists()


def test_ansible_playbook_keeps_only_the_allowlisted_environment() -> None:
    inherited = {"PATH": "/usr/bin", "HOME": "/root", "SSH_AUTH_SOCK": "/run/agent", "LC_ALL": "C.UTF-8",
                 "AWS_SECRET_ACCESS_KEY": "x", "ARM_CLIENT_SECRET": "x", "PULUMI_CONFIG_PASSPHRASE": "x",
                 "OCI_CLI_KEY_FILE": "/k", "ANSIBLE_STRATEGY": "linear", "ANSIBLE_NET_PASSWORD": "x",
                 "ANSIBLE_PRIVATE_KEY_FILE": "/k", "GPUCLUSTER_STATE_DIR": "/s", "GPUCLUSTER_API_TOKEN": "x"}
    # ansible-runner's environment: the inherited one, plus its own settings and ours.
    env = {**inherited, "ANSIBLE_STDOUT_CALLBACK": "awx_display", "ANSIBLE_CONFIG": "/repo/ansible.cfg"}
    kept = converge_module.ansible_env(env, inherited)
    assert sorted(kept) == ["ANSIBLE_CONFIG", "ANSIBLE_PRIVATE_KEY_FILE", "ANSIBLE_STDOUT_CALLBACK",
                            "ANSIBLE_STRATEGY", "GPUCLUSTER_STATE_DIR", "HOME", "LC_ALL", "PATH", "SSH_AUTH_SOCK"]
    # A value we set over an inherited one is ours, whatever its name.
    assert converge_module.ansible_env({"ANSIBLE_SSH_ARGS": "-o X=1"}, {"ANSIBLE_SSH_ARGS": "-o Y=2"}) == \
        {"ANSIBLE_SSH_ARGS": "-o X=1"}


def test_extra_vars_from_a_file(tmp_path: Path) -> None:
    good = tmp_path / "vars.yml"
    good.write_text("token: s3cret\ncomponents: [driver]\n")
    assert parse_extra_vars([f"@{good}", "n=3"]) == {"token": "s3cret", "components": ["driver"], "n": 3}
    bad = tmp_path / "bad.yml"
    bad.write_text("- a list\n")
    with pytest.raises(InputError) as err:
        parse_extra_vars([f"@{bad}", f"@{tmp_path / 'missing.yml'}"])
    text = "\n".join(err.value.lines())
    assert "bad.yml: expected a mapping" in text and "missing.yml: cannot read it" in text


def test_ctrl_c_stops_ansible_playbook_and_keeps_the_recap(tmp_path: Path) -> None:
    """A real ansible-playbook (through ansible-runner, Mitogen included) runs a long task; Ctrl-C ends
    the task's process and every process of the run, and the summary says what finished."""
    seconds = f"{3000 + os.getpid() % 1000}.{time.time_ns() % 1000:03d}"
    playbook = tmp_path / "sleep.yml"
    playbook.write_text(SLEEP_PLAYBOOK.format(seconds=seconds))
    runs_dir = tmp_path / "runs"
    proc = _gc(tmp_path, "converge", "-i", str(_local_inventory(tmp_path)), "--playbook", str(playbook),
               "--runs-dir", str(runs_dir))
    try:
        deadline = time.monotonic() + 120
        while not fakessh.pids_running(f"sleep {seconds}"):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        t0 = time.monotonic()
        os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        stopped_in = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err[-2000:]
    assert stopped_in < 20
    time.sleep(0.5)
    assert fakessh.pids_running(f"sleep {seconds}") == [], "the task's process outlived the converge"
    summary = json.loads(next(runs_dir.glob("*-converge/summary.json")).read_text())
    assert summary["run_id"]
    assert runs.tagged_pids(f"{converge_module.RUN_TAG}={summary['run_id']}") == []  # nothing of this run left
    assert summary["interrupted"] is True and summary["exit_code"] == 130 and summary["status"] == "canceled"
    assert summary["hosts"]["gpu-1"]["ok"] == 1, summary["hosts"]  # "Say hello" finished
    assert "interrupted" in err and "Traceback" not in err


# --- SSH trust ----------------------------------------------------------------------------------


@pytest.fixture
def real_target(tmp_path: Path) -> Path:
    """An inventory of a cluster that is not the lab (on-premises, InfiniBand)."""
    path = tmp_path / "onprem.yml"
    path.write_text(yaml.safe_dump(inventory_for("infiniband")))
    return path



def test_real_targets_check_host_keys_against_the_clusters_known_hosts(
        tmp_path: Path, real_target: Path, ssh_stub: Path, _state_dir: Path) -> None:
    runner = FakeRunner([_event(1, "playbook_on_stats", **STATS)], rc=0, status="successful")
    converge(ConvergeOptions(inventory=real_target, runs_dir=tmp_path / "runs"), progress_out=io.StringIO(),
             runner=runner)
    known_hosts = _state_dir / "clusters" / yaml.safe_load(real_target.read_text())["all"]["vars"][
        "gpucluster_cluster_name"] / "known_hosts"
    env = runner.kwargs["envvars"]
    assert env["ANSIBLE_HOST_KEY_CHECKING"] == "True"
    args = env["ANSIBLE_SSH_ARGS"]
    assert f"UserKnownHostsFile={known_hosts}" in args and "StrictHostKeyChecking=yes" in args
    assert "StrictHostKeyChecking=no" not in args
    assert "/dev/null" not in args.replace("GlobalKnownHostsFile=/dev/null", "")
    assert "ControlPersist=300s" in args  # ansible.cfg's own settings kept
    # First contact went through the probe, with accept-new and the same file.
    probes = [c for c in fakessh.calls(ssh_stub) if c[-1] == "true"]
    hosts = yaml.safe_load(real_target.read_text())["all"]["hosts"]
    assert sorted(c[-2] for c in probes) == sorted(h["ansible_host"] for h in hosts.values())
    assert all("StrictHostKeyChecking=accept-new" in c and f"UserKnownHostsFile={known_hosts}" in c for c in probes)


def test_a_changed_host_key_stops_converge_before_ansible(tmp_path: Path, real_target: Path, ssh_stub: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    import gpucluster.cli.converge as cli_converge

    hosts = yaml.safe_load(real_target.read_text())["all"]["hosts"]
    name, host = next(iter(hosts.items()))
    monkeypatch.setenv("FAKE_SSH_CHANGED", host["ansible_host"])
    runner = FakeRunner([], rc=0, status="successful")
    monkeypatch.setattr(cli_converge, "converge",
                        lambda options, progress_out: converge(options, progress_out=progress_out, runner=runner))
    assert main(["converge", "-i", str(real_target), "--runs-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: host keys: {name}: host key of {host['ansible_host']}")
    assert "ssh-keygen -R" in err[0] and runner.kwargs == {}


def test_the_lab_is_exempt(tmp_path: Path, inventory_file: Path, ssh_stub: Path) -> None:
    runner = FakeRunner([_event(1, "playbook_on_stats", **STATS)], rc=0, status="successful")
    converge(ConvergeOptions(inventory=inventory_file, runs_dir=tmp_path / "runs"), progress_out=io.StringIO(),
             runner=runner)
    assert "ANSIBLE_SSH_ARGS" not in runner.kwargs["envvars"] and fakessh.calls(ssh_stub) == []


def test_a_limited_converge_probes_only_the_hosts_it_touches(tmp_path: Path, real_target: Path, ssh_stub: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A node being rebuilt (its key changed) outside --limit does not stop converging the others."""
    data = yaml.safe_load(real_target.read_text())
    hosts = data["all"]["hosts"]
    names = list(hosts)
    monkeypatch.setenv("FAKE_SSH_CHANGED", hosts[names[-1]]["ansible_host"])
    runner = FakeRunner([_event(1, "playbook_on_stats", **STATS)], rc=0, status="successful")
    converge(ConvergeOptions(inventory=real_target, limit=names[0], runs_dir=tmp_path / "runs"),
             progress_out=io.StringIO(), runner=runner)
    assert [c[-2] for c in fakessh.calls(ssh_stub)] == [hosts[names[0]]["ansible_host"]]
    group = next(g for g, body in data["all"]["children"].items() if names[0] in (body.get("hosts") or {}))
    model = converge_module.load_inventory(real_target)
    assert converge_module.limited_hosts(model, f"{group},{names[0]}") == set(data["all"]["children"][group]["hosts"])
    assert converge_module.limited_hosts(model, "gpu*") is None and converge_module.limited_hosts(model, "all") is None
    with pytest.raises(InputError):
        converge(ConvergeOptions(inventory=real_target, limit=names[-1], runs_dir=tmp_path / "runs"),
                 progress_out=io.StringIO(), runner=runner)


# --- SSH control sockets: a folder of the run's own, never a fixed name in /tmp ----------------


def test_ansible_cfg_names_no_shared_control_folder() -> None:
    import configparser

    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(REPO / "ansible.cfg")
    folder = cfg.get("ssh_connection", "control_path_dir")
    assert folder.startswith("~/"), f"control_path_dir {folder}: another local user can make a folder outside home"


class FolderWatcher(FakeRunner):
    """Records, while 'ansible-playbook' runs, the folder an environment variable points it at
    (``seen``: the folder, whether it is one, its mode and owner; None when the variable is unset)."""

    variable: str

    def __call__(self, **kwargs: Any) -> SimpleNamespace:
        value = kwargs["envvars"].get(self.variable)
        self.seen = None
        if value is not None:
            st = Path(value).lstat()
            self.seen = (Path(value), stat.S_ISDIR(st.st_mode), stat.S_IMODE(st.st_mode), st.st_uid)
        return super().__call__(**kwargs)


class ControlWatcher(FolderWatcher):
    variable = "ANSIBLE_SSH_CONTROL_PATH_DIR"


def _watched(watcher: type[FolderWatcher], inventory_file: Path, runs_dir: Path) -> tuple[Any, ConvergeResult]:
    """A converge whose 'ansible-playbook' records its folder: what it saw, and the result."""
    runner = watcher([_event(1, "playbook_on_stats", "PLAY RECAP", **STATS)], 0, "successful")
    result = converge(ConvergeOptions(inventory=inventory_file, runs_dir=runs_dir), progress_out=io.StringIO(),
                      runner=runner)
    return runner.seen, result


def test_ansible_uses_a_private_control_folder_of_the_run_removed_at_its_end(
        tmp_path: Path, inventory_file: Path) -> None:
    (folder, is_dir, mode, uid), result = _watched(ControlWatcher, inventory_file, tmp_path / "runs")
    assert is_dir and mode == 0o700 and uid == os.geteuid()
    assert folder == result.run_dir / "ssh" / "cm" or not str(folder).startswith(str(REPO))
    assert not folder.exists(), "the control folder outlived the run"


def test_a_deep_run_folder_puts_the_sockets_in_an_unpredictable_private_folder(
        tmp_path: Path, inventory_file: Path, shared_tmp: Path) -> None:
    (folder, is_dir, mode, uid), result = _watched(ControlWatcher, inventory_file, tmp_path / ("r" * 100))
    assert folder.parent == shared_tmp and folder.name.startswith("gpucluster-ssh-") and len(folder.name) > 20
    assert is_dir and mode == 0o700 and uid == os.geteuid()
    assert not folder.exists() and not (result.run_dir / "ssh" / "control-dir").exists()


# --- Compiled templates: a private folder of the run's own, shared by its workers ----------------


class JinjaCacheWatcher(FolderWatcher):
    variable = "GPUCLUSTER_JINJA_CACHE_DIR"


def test_the_workers_share_a_private_template_folder_of_the_run_removed_at_its_end(
        tmp_path: Path, inventory_file: Path) -> None:
    (folder, is_dir, mode, uid), result = _watched(JinjaCacheWatcher, inventory_file, tmp_path / "runs")
    assert folder == result.run_dir / "jinja" and is_dir and mode == 0o700 and uid == os.geteuid()
    assert not folder.exists(), "the compiled templates outlived the run"


def test_a_template_folder_named_in_the_controllers_environment_never_reaches_ansible() -> None:
    """Only the run's own folder: one exported in the shell (an old run's, another user's) is dropped."""
    inherited = {"GPUCLUSTER_JINJA_CACHE_DIR": "/tmp/elsewhere", "GPUCLUSTER_FILES_FAST_PATH": "0"}
    assert converge_module.ansible_env(dict(inherited), inherited) == {"GPUCLUSTER_FILES_FAST_PATH": "0"}
    ours = {**inherited, "GPUCLUSTER_JINJA_CACHE_DIR": "/runs/x/jinja"}
    assert converge_module.ansible_env(ours, inherited)["GPUCLUSTER_JINJA_CACHE_DIR"] == "/runs/x/jinja"


def test_gpucluster_jinja_cache_0_runs_without_the_template_folder(
        tmp_path: Path, inventory_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUCLUSTER_JINJA_CACHE", "0")
    seen, result = _watched(JinjaCacheWatcher, inventory_file, tmp_path / "runs")
    assert seen is None and not (result.run_dir / "jinja").exists()
