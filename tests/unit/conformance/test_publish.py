"""Publishing the Prometheus textfiles onto the nodes: the folder the monitoring role configured,
an atomic write, and a message (never a crash, never a changed verdict) where it cannot be done.

The publish command is a real shell command line; a local "remote" runs it with sh, so the
atomic write is exercised on a real file system without SSH or root.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpucluster import verify
from gpucluster.cli import main
from gpucluster.conformance import publish
from gpucluster.conformance.nodes import load_inventory, parse_inventory
from gpucluster.conformance.remote import CommandResult
from gpucluster.conformance.report_data import Report
from gpucluster.conformance.reports import PROM_FILE, write_all
from gpucluster.conformance.verdict import CheckResult
from gpucluster.inventory import parse_inventory_text

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[3]
GOLDEN = REPO / "tests" / "golden" / "inventory" / "lab.yml"


class LocalRemote:
    """Runs the command line here, as ssh would run it on the node."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.commands: list[str] = []

    def run(self, command: str, *, stdin: str | None = None, timeout: float = 120.0) -> CommandResult:
        self.commands.append(command)
        proc = subprocess.run(["sh", "-c", command], input=stdin, capture_output=True, text=True, timeout=timeout,
                              check=False)
        return CommandResult(proc.returncode, proc.stdout, proc.stderr)


class Recorder:
    """Answers every command with success, running none."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.commands: list[str] = []

    def run(self, command: str, *, stdin: str | None = None, timeout: float = 120.0) -> CommandResult:
        self.commands.append(command)
        return CommandResult(0, "", "")


class Unreachable:
    def __init__(self, name: str) -> None:
        self.name = name

    def run(self, command: str, *, stdin: str | None = None, timeout: float = 120.0) -> CommandResult:
        return CommandResult(255, "", "ssh: connect to host 10.77.0.12 port 22: Connection refused\n")


def _report() -> Report:
    return Report(
        meta={"cluster": "lab", "inventory": str(GOLDEN), "started": "2026-01-01T00:00:00+00:00",
              "duration_s": 3.0, "finished_unix": 1767225603},
        nodes=["gpu-1", "gpu-2", "stor-1"],
        results=[CheckResult("gpu-1", "GC-OS-001", "passed"), CheckResult("gpu-2", "GC-OS-001", "passed"),
                 CheckResult("stor-1", "GC-NET-002", "failed", "eth1 MTU 1500, the spec says 9000")],
    )


def _inventory_with(tmp_path: Path, host_dir: str | None = None, all_dir: str | None = None):
    data = parse_inventory_text(GOLDEN.read_text())
    if host_dir is not None:
        data["all"]["hosts"]["gpu-1"]["monitoring_textfile_dir"] = host_dir
    if all_dir is not None:
        data["all"]["vars"]["monitoring_textfile_dir"] = all_dir
    return parse_inventory(data, str(tmp_path / "inv.yml"))


def test_the_default_folder_needs_no_checkout(tmp_path, monkeypatch):
    # Installed from a wheel there is no roles/ folder beside the package: nothing may read one.
    inv = load_inventory(GOLDEN)
    write_all(_report(), tmp_path / "run")
    opened: list[Path] = []
    real = Path.read_text

    def read_text(self: Path, *args, **kwargs) -> str:
        opened.append(self.resolve())
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", read_text)
    remote = Recorder("gpu-1")  # records the command line: nothing is written on this machine
    [done] = publish.publish(inv, ["gpu-1"], tmp_path / "run", lambda _: remote)
    # The inventory's node contract (Debian's prometheus-node-exporter folder, as the role's default reads it).
    assert done.path == f"/var/lib/prometheus/node-exporter/{PROM_FILE}"
    assert "mktemp /var/lib/prometheus/node-exporter/." in remote.commands[0]
    assert opened and not [p for p in opened if p.is_relative_to(REPO / "roles")]


def test_the_inventory_overrides_the_contract_host_first(tmp_path):
    inv = _inventory_with(tmp_path, host_dir="/srv/host", all_dir="/srv/all")
    assert inv.node("gpu-1").contract.textfile_dir == "/srv/host"
    assert inv.node("gpu-2").contract.textfile_dir == "/srv/all"
    plain = load_inventory(GOLDEN)
    assert plain.node("gpu-2").contract.textfile_dir == parse_inventory_text(GOLDEN.read_text())["all"]["vars"][
        "gpucluster_contract"]["textfile_dir"]
    # A template is Ansible's to resolve: the contract's folder stands.
    templated = _inventory_with(tmp_path, host_dir="{{ other }}")
    assert templated.node("gpu-1").contract.textfile_dir == plain.node("gpu-1").contract.textfile_dir


def test_writes_atomically_into_the_folder(tmp_path):
    inv = load_inventory(GOLDEN)
    folder = tmp_path / "textfile"
    folder.mkdir()
    (folder / PROM_FILE).write_text("old\n")
    (folder / "other.prom").write_text("x 1\n")
    remote = LocalRemote("gpu-1")
    res = publish.publish_node(inv.node("gpu-1"), str(folder), "gpucluster_conformance_pass 1\n", remote)
    assert res.ok and res.path == f"{folder}/{PROM_FILE}" and "published to gpu-1:" in res.message
    assert (folder / PROM_FILE).read_text() == "gpucluster_conformance_pass 1\n"
    # Readable by node_exporter's own user; no temporary file left behind; other collectors' files kept.
    assert stat.S_IMODE(os.stat(folder / PROM_FILE).st_mode) == 0o644
    assert sorted(p.name for p in folder.iterdir()) == [PROM_FILE, "other.prom"]
    # The temporary name is in the same folder (an atomic rename) and not *.prom (the collector skips it).
    assert f"mktemp {folder}/.{PROM_FILE}.XXXXXX" in remote.commands[0]
    assert "mv -f" in remote.commands[0]


def test_a_missing_folder_is_a_message(tmp_path):
    inv = load_inventory(GOLDEN)
    res = publish.publish_node(inv.node("gpu-1"), str(tmp_path / "nope"), "x 1\n", LocalRemote("gpu-1"))
    assert not res.ok and "no textfile folder" in res.message and "monitoring role" in res.message
    assert not (tmp_path / "nope").exists()


def test_an_unreachable_node_is_a_message():
    inv = load_inventory(GOLDEN)
    res = publish.publish_node(inv.node("gpu-1"), "/var/lib/prometheus/node-exporter", "x 1\n", Unreachable("gpu-1"))
    assert not res.ok and res.message.startswith("node not reachable over SSH") and "Connection refused" in res.message


def test_no_folder_known_is_a_message_without_ssh():
    inv = load_inventory(GOLDEN)
    remote = LocalRemote("gpu-1")
    res = publish.publish_node(inv.node("gpu-1"), None, "x 1\n", remote)
    assert not res.ok and "monitoring_textfile_dir" in res.message and remote.commands == []
    assert not publish.publish_node(inv.node("gpu-1"), "relative/dir", "x 1\n", remote).ok


def test_a_non_root_user_writes_through_sudo():
    assert publish.publish_command("/d", "root").startswith("sh -c ")
    assert publish.publish_command("/d", "debian").startswith("sudo -n sh -c ")


def test_publish_reads_each_nodes_file_from_the_run_folder(tmp_path):
    folder = tmp_path / "textfile"
    folder.mkdir()
    inv = _inventory_with(tmp_path, all_dir=str(folder))
    write_all(_report(), tmp_path / "run")
    remotes = {"gpu-1": LocalRemote("gpu-1"), "gpu-2": Unreachable("gpu-2")}
    done = publish.publish(inv, ["gpu-1", "gpu-2", "ghost"], tmp_path / "run", remotes.__getitem__)
    by = {r.node: r for r in done}
    assert by["gpu-1"].ok
    families = {f.name: f for f in text_string_to_metric_families((folder / PROM_FILE).read_text())}
    assert [(s.labels, s.value) for s in families["gpucluster_conformance_pass"].samples] == [
        ({"cluster": "lab", "node": "gpu-1"}, 1.0)]
    assert not by["gpu-2"].ok and "not reachable" in by["gpu-2"].message
    assert not by["ghost"].ok and "not in the inventory" in by["ghost"].message


def test_verify_records_the_outcome_and_keeps_the_verdicts(tmp_path, monkeypatch):
    folder = tmp_path / "textfile"
    folder.mkdir()
    inv = _inventory_with(tmp_path, all_dir=str(folder))
    run_dir = tmp_path / "run"
    write_all(_report(), run_dir)
    before = json.loads((run_dir / "results.json").read_text())
    monkeypatch.setattr(verify, "SshRemote", lambda name, cfg: LocalRemote(name) if name != "stor-1"
                        else Unreachable(name))
    report = Report.from_json(before)
    verify.publish_textfiles(report, inv, verify.VerifyOptions(inventory=GOLDEN, run_dir=run_dir))
    after = json.loads((run_dir / "results.json").read_text())
    assert after["verdicts"] == before["verdicts"] and after["exit_code"] == before["exit_code"] == 1
    pub = after["meta"]["textfile_publish"]
    assert pub["gpu-1"]["ok"] and pub["gpu-2"]["ok"] and not pub["stor-1"]["ok"]
    assert "**Prometheus textfile not published** (the verdict stands): node not reachable" in (
        run_dir / "summary.md").read_text()
    assert "Prometheus textfile: published to gpu-1:" in (run_dir / "summary.html").read_text()
    assert "textfile not published on stor-1: node not reachable over SSH" in verify.table(report)


@pytest.mark.parametrize(("flag", "expected"), [([], True), (["--no-publish"], False)])
def test_no_publish_flag(tmp_path, monkeypatch, flag, expected):
    seen: list[verify.VerifyOptions] = []

    def fake_run(opts: verify.VerifyOptions) -> Report:
        seen.append(opts)
        return dataclasses.replace(_report(), results=[])

    monkeypatch.setattr(verify, "run", fake_run)
    main(["verify", "--inventory", str(GOLDEN), "--run-dir", str(tmp_path / "r"), *flag])
    assert seen[0].publish is expected
