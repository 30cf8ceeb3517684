"""`gpucluster up`: the stages in order, resume, --from, failures and Ctrl-C.

The commands each stage runs are recorded by a fake ``cli``, which writes the files the real
commands write; the cloud provision is a fake too (its Automation API needs the Pulumi CLI).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import pytest

from gpucluster.cli import main
from gpucluster.errors import InputError
from gpucluster.paths import StackPaths, resolve
from gpucluster.up import pulumi_stack_name, run_up

REPO = Path(__file__).resolve().parents[2]


class FakeCli:
    def __init__(self, fail: dict[str, int] | None = None, interrupt: str | None = None) -> None:
        self.calls: list[list[str]] = []
        self.fail = fail or {}
        self.interrupt = interrupt

    def __call__(self, argv: Sequence[str], out: TextIO) -> int:
        argv = list(argv)
        self.calls.append(argv)
        if argv[0] == self.interrupt:
            raise KeyboardInterrupt
        if argv[0] == "inventory" and argv[0] not in self.fail:
            Path(argv[argv.index("-o") + 1]).write_text("all: {}\n")
        return self.fail.get(argv[0], 0)

    def commands(self) -> list[str]:
        return [" ".join(c[:2]) if c[0] in ("spec", "lab") else c[0] for c in self.calls]


def _provision(stack: Path, paths: StackPaths, out: TextIO) -> None:
    paths.outputs_file.parent.mkdir(parents=True, exist_ok=True)
    paths.outputs_file.write_text(json.dumps({"nodes": []}))


@pytest.fixture()
def stack(tmp_path: Path) -> Path:
    dst = tmp_path / "Pulumi.aws-h100.yaml"
    shutil.copy(REPO / "Pulumi.aws-h100.yaml", dst)
    (tmp_path / "Pulumi.yaml").write_text("name: gpucluster\nruntime: python\n")
    return dst


def test_the_stages_run_in_order_and_a_second_up_does_nothing(stack: Path) -> None:
    cli = FakeCli()
    first = run_up(stack, cli=cli, provision=_provision)
    assert first.exit_code == 0
    assert [s.status for s in first.stages] == ["done"] * 5
    assert cli.commands() == ["spec validate", "inventory", "converge", "verify"]
    inv = cli.calls[1][cli.calls[1].index("-o") + 1]
    assert cli.calls[2] == ["converge", "--inventory", inv]
    assert cli.calls[3] == ["verify", "--inventory", inv]
    state = json.loads(Path(first.state_file).read_text())
    assert set(state["stages"]) == {"spec", "provision", "inventory", "converge", "verify"}
    assert Path(first.state_file).stat().st_mode & 0o777 == 0o600

    again = FakeCli()
    second = run_up(stack, cli=again, provision=_provision)
    assert second.exit_code == 0 and again.calls == []
    assert [s.status for s in second.stages] == ["skipped"] * 5


def test_a_changed_input_resumes_at_the_stage_that_reads_it(stack: Path) -> None:
    run_up(stack, cli=FakeCli(), provision=_provision)
    run_up(stack, cli=FakeCli(), provision=_provision)
    outputs = resolve(stack).outputs_file
    assert outputs.is_file()
    outputs.write_text(json.dumps({"nodes": [], "changed": True}))
    cli = FakeCli()
    third = run_up(stack, cli=cli, provision=_provision)
    assert [s.status for s in third.stages] == ["skipped", "skipped", "done", "done", "done"]
    assert cli.commands() == ["inventory", "converge", "verify"]


def test_a_failed_verify_is_not_done_and_the_next_up_runs_only_verify(stack: Path) -> None:
    failing = run_up(stack, cli=FakeCli(fail={"verify": 1}), provision=_provision)
    assert failing.exit_code == 1
    assert failing.stages[-1].status == "failed" and "exited 1" in failing.stages[-1].detail
    cli = FakeCli()
    retry = run_up(stack, cli=cli, provision=_provision)
    assert retry.exit_code == 0 and cli.commands() == ["verify"]


def test_a_failed_stage_stops_the_chain(stack: Path) -> None:
    cli = FakeCli(fail={"converge": 1})
    summary = run_up(stack, cli=cli, provision=_provision)
    assert summary.exit_code == 1
    assert [s.status for s in summary.stages] == ["done", "done", "done", "failed", "not-run"]
    assert "verify" not in cli.commands()


def test_from_redoes_that_stage_and_the_rest(stack: Path) -> None:
    run_up(stack, cli=FakeCli(), provision=_provision)
    cli = FakeCli()
    summary = run_up(stack, cli=cli, provision=_provision, start="converge")
    assert cli.commands() == ["converge", "verify"]
    assert [s.status for s in summary.stages][:3] == ["skipped"] * 3


def test_ctrl_c_is_recorded_and_exits_130(stack: Path) -> None:
    summary = run_up(stack, cli=FakeCli(interrupt="converge"), provision=_provision)
    assert summary.exit_code == 130
    assert [s.status for s in summary.stages] == ["done", "done", "done", "interrupted", "not-run"]
    cli = FakeCli()
    run_up(stack, cli=cli, provision=_provision)
    assert cli.commands() == ["converge", "verify"]


def test_without_the_pulumi_cli_nothing_runs_and_exit_2(stack: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PATH", str(stack.parent))  # no `pulumi` there
    assert main(["up", "--stack", str(stack)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the Pulumi CLI is not on PATH" in err[0]
    assert not (stack.parent / "up.json").exists()


def test_the_lab_is_provisioned_by_lab_up_and_up_never_makes_the_lab_folder(tmp_path: Path) -> None:
    text = (REPO / "Pulumi.lab.yaml").read_text()
    assert "  gpucluster:target:\n" in text
    stack = tmp_path / "Pulumi.lab.yaml"
    stack.write_text(text.replace("  gpucluster:target:\n",
                                  f"  gpucluster:target:\n    state_dir: {tmp_path / 'labs'}\n", 1))
    cli = FakeCli(fail={"inventory": 1})
    summary = run_up(stack, cli=cli)
    assert cli.calls[1][:2] == ["lab", "up"] and summary.exit_code == 1
    # `lab up` refuses a lab folder that exists before it: up's own record lives elsewhere.
    assert not (tmp_path / "labs").exists()
    assert Path(summary.state_file).is_file()


def test_a_corrupt_state_file_is_named(stack: Path) -> None:
    summary = run_up(stack, cli=FakeCli(), provision=_provision)
    Path(summary.state_file).write_text("{not json")
    with pytest.raises(InputError, match=r"\.json: not readable as up's state"):
        run_up(stack, cli=FakeCli(), provision=_provision)


@pytest.mark.parametrize(("name", "expected"), [("Pulumi.aws-h100.yaml", "aws-h100"), ("Pulumi.a.b.yml", "a.b")])
def test_stack_name_from_the_file_name(name: str, expected: str) -> None:
    assert pulumi_stack_name(Path(name)) == expected


def test_a_file_not_named_like_a_stack_is_refused() -> None:
    with pytest.raises(InputError, match=r"Pulumi.<stack>.yaml"):
        pulumi_stack_name(Path("cluster.yaml"))


FAKE_PULUMI = '''#!{python}
import json, os, sys
args = sys.argv[1:]
with open({log!r}, "a") as f:
    f.write(json.dumps(args) + "\\n")
if args[:1] == ["version"]:
    print("v3.200.0")
elif "history" in args:
    print(json.dumps([{{"kind": "update", "startTime": "2026-11-23T00:00:00.000Z", "message": "",
                       "environment": {{}}, "config": {{}}, "result": "succeeded",
                       "endTime": "2026-11-23T00:00:01.000Z", "resourceChanges": {{"create": 1}}}}]))
elif "output" in args:
    print(json.dumps({{"cluster": "aws-h100", "key_path": "s3cret" if "--show-secrets" in args else "[secret]"}}))
elif "up" in args:
    print("Updating (aws-h100):")
    print("Resources: + 1 created")
'''


def test_cloud_provision_drives_the_pulumi_cli_through_the_automation_api(
        stack: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import sys

    from gpucluster.up import pulumi_provision

    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "pulumi.log"
    exe = bindir / "pulumi"
    exe.write_text(FAKE_PULUMI.format(python=sys.executable, log=str(log)))
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    monkeypatch.setenv("PULUMI_SKIP_UPDATE_CHECK", "1")
    paths = resolve(stack)
    out = io.StringIO()
    pulumi_provision(stack, paths, out)
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    ups = [c for c in calls if "up" in c]
    assert len(ups) == 1 and ups[0][ups[0].index("--stack") + 1] == "aws-h100"
    assert "--yes" in ups[0]
    # The outputs `gpucluster inventory` reads: secrets in clear, the file private.
    assert json.loads(paths.outputs_file.read_text()) == {"cluster": "aws-h100", "key_path": "s3cret"}
    assert paths.outputs_file.stat().st_mode & 0o777 == 0o600
    assert "Resources: + 1 created" in out.getvalue()
