"""`gpucluster verify` input handling: one-line errors and exit code 2, before anything runs."""

from __future__ import annotations

import os
from pathlib import Path

from gpucluster.cli import main
from gpucluster.conformance.nodes import load_inventory
from gpucluster.verify import VerifyOptions, pytest_argv

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "inventory" / "lab.yml"
REPO = Path(__file__).resolve().parents[3]


def test_missing_inventory_exits_2(tmp_path, capsys):
    assert main(["verify", "--inventory", str(tmp_path / "nope.yml"), "--run-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "cannot read inventory" in err[0]


def test_unknown_limit_host_exits_2(tmp_path, capsys):
    assert main(["verify", "--inventory", str(GOLDEN), "--limit", "gpu-9", "--run-dir", str(tmp_path / "r")]) == 2
    assert "no such host or group in the inventory: gpu-9" in capsys.readouterr().err


def test_non_lab_stack_exits_2(capsys):
    assert main(["verify", "--stack", str(REPO / "Pulumi.onprem-h100-ib.yaml")]) == 2
    assert "pass --inventory" in capsys.readouterr().err


def test_a_checks_pattern_that_names_no_check_is_refused_before_any_ssh(tmp_path, capsys, monkeypatch):
    from gpucluster.conformance import checks

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    called = tmp_path / "ssh-called"
    ssh = bin_dir / "ssh"
    ssh.write_text(f"#!/bin/sh\ntouch {called}\nexit 255\n")
    ssh.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    runs_dir = tmp_path / "runs"
    code = main(["verify", "--inventory", str(GOLDEN), "--checks", "GC-NET-001,GC-NOPE-*", "--runs-dir", str(runs_dir)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("error: --checks: GC-NOPE-* matches no check; the check IDs: GC-AR-001, ")
    assert all(c in err[0] for c in checks.CHECKS)
    # Nothing ran: no SSH, no run folder, no lock taken.
    assert not called.exists() and not runs_dir.exists()


def test_pytest_command_runs_hosts_in_parallel(tmp_path):
    inv = load_inventory(GOLDEN)
    argv = pytest_argv(VerifyOptions(GOLDEN, tmp_path, burn=False, workers=8), inv)
    assert argv[argv.index("-n") + 1] == "3" and "loadgroup" in argv and "--no-burn" in argv
    one = pytest_argv(VerifyOptions(GOLDEN, tmp_path, limit=("gpu-1",)), inv)
    assert "-n" not in one and one[one.index("--limit") + 1] == "gpu-1"


def test_a_fleet_margin_outside_0_to_1_exits_2_naming_the_option(tmp_path, capsys):
    for bad in ("1.5", "-0.1", "nan"):
        assert main(["verify", "--inventory", str(GOLDEN), "--fleet-margin", bad, "--run-dir",
                     str(tmp_path / "r")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: --fleet-margin: must be a fraction"), err


def test_the_fleet_margin_reaches_the_suite_only_when_given(tmp_path):
    from types import SimpleNamespace

    inv = SimpleNamespace(nodes=(1, 2, 3))  # the argv needs the host count alone
    given = pytest_argv(VerifyOptions(GOLDEN, tmp_path, fleet_margin=0.15), inv)  # type: ignore[arg-type]
    assert given[given.index("--fleet-margin") + 1] == "0.15"
    # Not given: the suite takes the inventory's gpucluster_conformance.fleet_margin.
    assert "--fleet-margin" not in pytest_argv(VerifyOptions(GOLDEN, tmp_path), inv)  # type: ignore[arg-type]


def test_fail_on_skipped_cluster_reaches_the_suite_only_when_given(tmp_path):
    from types import SimpleNamespace

    from gpucluster.cli import build_parser

    inv = SimpleNamespace(nodes=(1, 2, 3))
    asked = pytest_argv(VerifyOptions(GOLDEN, tmp_path, fail_on_skipped_cluster=True), inv)  # type: ignore[arg-type]
    assert "--fail-on-skipped-cluster" in asked
    assert "--fail-on-skipped-cluster" not in pytest_argv(VerifyOptions(GOLDEN, tmp_path), inv)  # type: ignore[arg-type]
    args = build_parser().parse_args(["verify", "--inventory", "x", "--fail-on-skipped-cluster"])
    assert args.fail_on_skipped_cluster


def test_a_burn_in_dcgm_level_reaches_the_suite_only_when_given(tmp_path, capsys):
    from types import SimpleNamespace

    inv = SimpleNamespace(nodes=(1, 2, 3))
    given = pytest_argv(VerifyOptions(GOLDEN, tmp_path, dcgm_level=3), inv)  # type: ignore[arg-type]
    assert given[given.index("--dcgm-level") + 1] == "3"
    assert "--dcgm-level" not in pytest_argv(VerifyOptions(GOLDEN, tmp_path), inv)  # type: ignore[arg-type]
    # A level DCGM does not have is refused by the command line, naming the option, exit 2.
    try:
        code = main(["verify", "--inventory", str(GOLDEN), "--dcgm-level", "5", "--run-dir", str(tmp_path / "r")])
    except SystemExit as exc:
        code = exc.code
    assert code == 2 and "--dcgm-level" in capsys.readouterr().err
