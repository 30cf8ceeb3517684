"""`gpucluster up` and `down`: the stages in order, resume, --from, --fresh, consent, the policy over
the preview, failures, Ctrl-C and the one JSON document.

The commands each stage runs are recorded by a fake ``cli``, which writes the files the real
commands write (inventory; converge's and verify's run folders and reports). The cloud provision
goes through a fake of Pulumi's Automation API stack (:class:`FakeStack`: preview, up, destroy,
outputs) whose preview reports, as engine events of the Automation API's own types, the resources
the Pulumi program registers for the example stack under the mocks (``gpucluster plan``); one test
drives the real Automation API against a fake Pulumi CLI.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TextIO

import pytest
from pulumi.automation import CommandError, EngineEvent
from pulumi.automation._cmd import CommandResult

from gpucluster import up as up_module
from gpucluster.cli import main
from gpucluster.errors import InputError
from gpucluster.inventory import build_inventory, write_inventory
from gpucluster.outputs import StackOutputs
from gpucluster.paths import StackPaths, resolve
from gpucluster.plan import Resource, plan_stack
from gpucluster.runs import new_run_dir
from gpucluster.spec import load_spec
from gpucluster.up import (
    PulumiProvision,
    VerifyPassThrough,
    preview_resources,
    pulumi_stack_name,
    run_down,
    run_up,
)
from tests.unit.example_outputs import example_outputs

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """runs/ (converge's and verify's run folders) is relative to the working folder: the test's own."""
    monkeypatch.chdir(tmp_path)


class FakeCli:
    def __init__(self, fail: dict[str, int] | None = None, interrupt: str | None = None,
                 verdict: str = "pass", fetch: bool = True, inventory_vars: dict[str, Any] | None = None) -> None:
        # fetch: deploy-kubernetes.yml's control plane fetches the kubeconfig; inventory_vars: set in
        # the written inventory's all.vars (as a person would).
        self.fetch = fetch
        self.inventory_vars = inventory_vars or {}
        self.calls: list[list[str]] = []
        self.fail = fail or {}
        self.interrupt = interrupt
        self.verdict = verdict
        self.converge_dirs: list[Path] = []

    def __call__(self, argv: Sequence[str], out: TextIO) -> int:
        argv = list(argv)
        self.calls.append(argv)
        if argv[0] == self.interrupt:
            raise KeyboardInterrupt
        if argv[0] == "inventory" and argv[0] not in self.fail:
            inventory = Path(argv[argv.index("-o") + 1])
            inventory.parent.mkdir(parents=True, exist_ok=True)
            outputs = Path(argv[argv.index("--outputs") + 1])
            inventory.write_text("all: {}\n")
            # No outputs (a lab's, which `lab up` writes), or outputs a test bent past what the writer takes.
            with contextlib.suppress(InputError, FileNotFoundError):
                # What `gpucluster inventory` writes: up's verify stage reads where the kubeconfig is from it.
                data = build_inventory(load_spec(argv[argv.index("--stack") + 1]),
                                       StackOutputs.model_validate(json.loads(outputs.read_text())))
                data["all"]["vars"].update(self.inventory_vars)
                write_inventory(data, inventory)
        if argv[0] == "converge":
            if "deploy-kubernetes.yml" in argv and self.fetch:
                # The control plane's role fetching the kubeconfig: beside the inventory, unless the
                # inventory moves it (roles/kubernetes_control_plane/defaults/main.yml).
                inventory = Path(argv[argv.index("--inventory") + 1])
                dest = self.inventory_vars.get("kubernetes_control_plane_kubeconfig_fetch_dest",
                                               inventory.parent / "admin.conf")
                Path(dest).write_text("apiVersion: v1\n")
            runs_dir = Path(argv[argv.index("--runs-dir") + 1]) if "--runs-dir" in argv else Path("runs")
            run = new_run_dir(runs_dir, "converge")
            self.converge_dirs.append(run)
            (run / "summary.json").write_text(json.dumps({"inventory": argv[argv.index("--inventory") + 1]}))
        if argv[0] == "verify" and "--run-dir" in argv and self.fail.get("verify") != 2:
            self._reports(Path(argv[argv.index("--run-dir") + 1]))
        return self.fail.get(argv[0], 0)

    def _reports(self, run_dir: Path) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        failed = self.verdict == "fail"
        data = {"exit_code": int(failed),
                "verdicts": [{"node": "gpu-1", "verdict": self.verdict, "reason": "",
                              "failed": [{"check": "GC-NET-001", "message": "MTU 1500"}] if failed else []}],
                "findings": [{"cause": "MTU 1500 on the fabric", "checks": [{"check": "GC-NET-001", "node": "gpu-1"}],
                              "figure": "", "remedy": {"check": "GC-NET-001", "steps": []}, "log": "x.log",
                              "key": "k"}] if failed else []}
        (run_dir / "results.json").write_text(json.dumps(data))
        (run_dir / "junit.xml").write_text("<testsuites/>")
        (run_dir / "summary.html").write_text("<html/>")

    def commands(self) -> list[str]:
        def name(c: list[str]) -> str:
            if c[0] == "converge" and c[3:5] == ["--playbook", "deploy-kubernetes.yml"]:
                return "kubernetes"
            return " ".join(c[:2]) if c[0] in ("spec", "lab") else c[0]

        return [name(c) for c in self.calls]


def _provision(stack: Path, paths: StackPaths, out: TextIO) -> None:
    paths.outputs_file.parent.mkdir(parents=True, exist_ok=True)
    paths.outputs_file.write_text(json.dumps(example_outputs(load_spec(stack), ssh_user="ubuntu")))


@pytest.fixture()
def stack(tmp_path: Path) -> Path:
    dst = tmp_path / "Pulumi.aws-h100.yaml"
    shutil.copy(REPO / "Pulumi.aws-h100.yaml", dst)
    (tmp_path / "Pulumi.yaml").write_text("name: gpucluster\nruntime: python\n")
    return dst


@pytest.fixture()
def lab_stack(tmp_path: Path) -> Path:
    text = (REPO / "Pulumi.lab.yaml").read_text()
    assert "  gpucluster:target:\n" in text
    stack = tmp_path / "Pulumi.lab.yaml"
    stack.write_text(text.replace("  gpucluster:target:\n",
                                  f"  gpucluster:target:\n    state_dir: {tmp_path / 'labs'}\n", 1))
    return stack


# --- the stages ----------------------------------------------------------------------------------


def test_the_stages_run_in_order_and_a_second_up_does_nothing(stack: Path) -> None:
    cli = FakeCli()
    first = run_up(stack, cli=cli, provision=_provision, yes=True)
    assert first.exit_code == 0, first.errors
    assert [s.status for s in first.stages] == ["done"] * 6
    assert cli.commands() == ["spec validate", "inventory", "converge", "kubernetes", "verify"]
    inv = cli.calls[1][cli.calls[1].index("-o") + 1]
    kubeconfig = resolve(stack).kubeconfig_file
    assert cli.calls[2] == ["converge", "--inventory", inv]
    # The stack deploys Kubernetes (its kubernetes section, an AWS target's nodes run a kubelet):
    # deploy-kubernetes.yml, whose control plane fetches the kubeconfig into the cluster's folder,
    # and verify reads it.
    assert cli.calls[3] == ["converge", "--inventory", inv, "--playbook", "deploy-kubernetes.yml"]
    assert kubeconfig == Path(inv).parent / "admin.conf"
    assert first.stages[4].name == "kubernetes" and first.stages[4].run_dir == str(cli.converge_dirs[1].resolve())
    verify_dir = first.stages[5].run_dir
    assert verify_dir and Path(verify_dir).name.endswith("-verify")
    assert cli.calls[4] == ["verify", "--inventory", inv, "--run-dir", str(Path("runs") / Path(verify_dir).name),
                            "--kubeconfig", str(kubeconfig)]
    assert first.stages[3].run_dir == str(cli.converge_dirs[0].resolve())
    state = json.loads(Path(first.state_file).read_text())
    assert set(state["stages"]) == {"spec", "provision", "inventory", "converge", "kubernetes", "verify"}
    assert Path(first.state_file).stat().st_mode & 0o777 == 0o600

    again = FakeCli()
    second = run_up(stack, cli=again, provision=_provision)
    assert second.exit_code == 0 and again.calls == []
    assert [s.status for s in second.stages] == ["skipped"] * 6
    # A skipped verify still names its run folder and reports (the ones it had).
    assert second.stages[5].run_dir == verify_dir and second.reports["junit"].endswith("junit.xml")


def test_kubernetes_is_skipped_with_the_reason_where_the_spec_has_none_or_the_nodes_cannot_run_it(
        stack: Path) -> None:
    no_kube = stack.with_name("Pulumi.nokube.yaml")
    text = stack.read_text()
    no_kube.write_text(text[:text.index("  gpucluster:kubernetes:")])
    cli = FakeCli()
    summary = run_up(no_kube, cli=cli, provision=_provision, yes=True)
    assert summary.exit_code == 0, summary.errors
    kube = summary.stages[4]
    assert (kube.name, kube.status) == ("kubernetes", "skipped")
    assert kube.detail == "the spec has no enabled kubernetes section"
    assert cli.commands() == ["spec validate", "inventory", "converge", "verify"]
    assert "--kubeconfig" not in cli.calls[3]
    # The lab's nodes cannot run a kubelet: its outputs say so, and up says why it skipped.
    from gpucluster.outputs import LAB_CAPABILITIES

    assert LAB_CAPABILITIES.kubernetes_nodes is False

    def provision_no_kubelet(stack_file: Path, paths: StackPaths, out: TextIO) -> None:
        _provision(stack_file, paths, out)
        outputs = json.loads(paths.outputs_file.read_text())
        paths.outputs_file.write_text(json.dumps({**outputs, "capabilities": LAB_CAPABILITIES.model_dump()}))

    cli = FakeCli()
    summary = run_up(stack, cli=cli, provision=provision_no_kubelet, yes=True)
    assert summary.exit_code == 0, summary.errors
    kube = summary.stages[4]
    assert kube.status == "skipped" and "cannot run a kubelet (capabilities.kubernetes_nodes: false)" in kube.detail
    assert cli.commands() == ["spec validate", "inventory", "converge", "verify"]
    assert "--kubeconfig" not in cli.calls[3]


def test_the_kubernetes_stage_and_verify_decide_from_one_reading_of_the_outputs(
        stack: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpucluster import outputs as outputs_mod

    reads: list[Path] = []
    real = outputs_mod.load_outputs

    def counted(path: Path) -> outputs_mod.StackOutputs:
        reads.append(path)
        return real(path)

    monkeypatch.setattr(outputs_mod, "load_outputs", counted)
    cli = FakeCli()
    assert run_up(stack, cli=cli, provision=_provision, yes=True).exit_code == 0
    assert cli.commands()[-2:] == ["kubernetes", "verify"] and "--kubeconfig" in cli.calls[-1]
    assert reads == [resolve(stack).outputs_file]


def test_a_deployed_kubernetes_without_its_kubeconfig_fails_verify_naming_the_file(stack: Path) -> None:
    summary = run_up(stack, cli=FakeCli(fetch=False), provision=_provision, yes=True)
    assert summary.exit_code == 2 and summary.stages[5].status == "failed"
    assert f"no kubeconfig is at {resolve(stack).kubeconfig_file}" in summary.stages[5].detail


def test_an_inventory_that_moves_the_kubeconfig_moves_what_verify_reads(stack: Path, tmp_path: Path) -> None:
    """The role variable set in the inventory moves the fetch; up reads the same inventory, so verify
    gets the file the role fetched, and its check names that place when the file is missing."""
    dest = tmp_path / "elsewhere" / "kube.conf"
    dest.parent.mkdir()
    moved = {"kubernetes_control_plane_kubeconfig_fetch_dest": str(dest)}
    cli = FakeCli(inventory_vars=moved)
    summary = run_up(stack, cli=cli, provision=_provision, yes=True)
    assert summary.exit_code == 0, summary.errors
    verify = cli.calls[-1]
    assert verify[verify.index("--kubeconfig") + 1] == str(dest)
    assert resolve(stack).kubeconfig_file == dest and not (resolve(stack).folder / "admin.conf").exists()
    dest.unlink()
    missing = run_up(stack, cli=FakeCli(fetch=False, inventory_vars=moved), provision=_provision, yes=True,
                     start="converge")
    assert missing.exit_code == 2 and f"no kubeconfig is at {dest} " in missing.stages[5].detail


@pytest.mark.parametrize("given", [("-e", "monitoring_textfile_dir=/srv/t"),
                                   ("--extra-vars=gpu_validation_gpu_burn_install_dir=/srv/b",),
                                   ("-ekubernetes_control_plane_kubeconfig_fetch_dest=/tmp/a.conf",),
                                   # argparse's prefixes of --extra-vars, which converge takes too
                                   ("--extra=monitoring_textfile_dir=/srv/t",),
                                   ("--extra-v", "nccl_tests_install_dir=/srv/n")])
def test_a_contract_override_among_converges_options_is_refused_before_any_stage(
        stack: Path, given: tuple[str, ...]) -> None:
    """up hands converge_args to converge, which refuses them; up says so before provisioning."""
    cli = FakeCli()
    summary = run_up(stack, cli=cli, provision=_provision, yes=True, converge_args=("--check", *given))
    assert summary.exit_code == 2 and cli.calls == []
    assert len(summary.errors) == 1 and "set it in the inventory" in summary.errors[0]
    var = given[-1].split("=", 1)[-1] if given[-1].startswith("--") else given[-1].removeprefix("-e")
    var = var.split("=")[0]
    assert var in summary.errors[0]
    ok = FakeCli()
    assert run_up(stack, cli=ok, provision=_provision, yes=True,
                  converge_args=("-e", "upgrade_rolling_components=[driver]")).exit_code == 0
    assert ok.calls[2][-2:] == ["-e", "upgrade_rolling_components=[driver]"]


@pytest.mark.parametrize(("args", "expected"), [
    (["-e", "a=1"], ["a=1"]),
    (["-ea=1"], ["a=1"]),
    (["--extra-vars", "a=1", "--extra-vars=b=2"], ["a=1", "b=2"]),
    (["--extra=a=1", "--extra-v", "b=2", "--ex", "@vars.yml"], ["a=1", "b=2", "@vars.yml"]),
    (["--check", "-l", "gpu", "-e", "a=1", "--tags", "nccl"], ["a=1"]),
    # A value of another option is no -e: the limit `-egpu`, the tags `-ex` and `e=1`.
    (["--limit=-egpu"], []), (["-lgpu", "--heavy"], []), (["--tags=-ex"], []), (["-t", "e=1"], []),
])
def test_converges_extra_vars_are_read_as_converges_argparse_reads_them(args: list[str], expected: list[str]) -> None:
    assert up_module.converge_extra_vars(args) == expected
    # The same answer as the converge command's own parser.
    from gpucluster.cli import build_parser

    assert build_parser().parse_args(["converge", *args]).extra_vars == expected


def test_converge_options_converge_would_refuse_are_refused_before_any_stage(stack: Path) -> None:
    cli = FakeCli()
    summary = run_up(stack, cli=cli, provision=_provision, yes=True, converge_args=("--check", "-e"))
    assert summary.exit_code == 2 and cli.calls == []
    assert summary.errors == ["error: converge's options: argument --extra-vars/-e: expected one argument"]


def test_a_changed_input_resumes_at_the_stage_that_reads_it(stack: Path) -> None:
    run_up(stack, cli=FakeCli(), provision=_provision, yes=True)
    outputs = resolve(stack).outputs_file
    assert outputs.is_file()
    outputs.write_text(json.dumps(example_outputs(load_spec(stack), ssh_user="admin")))
    cli = FakeCli()
    third = run_up(stack, cli=cli, provision=_provision)
    assert [s.status for s in third.stages] == ["skipped", "skipped", "done", "done", "done", "done"]
    assert cli.commands() == ["inventory", "converge", "kubernetes", "verify"]


def test_other_verify_options_run_verify_again(stack: Path) -> None:
    run_up(stack, cli=FakeCli(), provision=_provision, yes=True)
    cli = FakeCli()
    summary = run_up(stack, cli=cli, provision=_provision, verify_args=["--checks", "GC-NET-*"])
    assert cli.commands() == ["verify"] and summary.exit_code == 0
    assert cli.calls[0][-2:] == ["--checks", "GC-NET-*"]


def test_a_failed_verify_is_not_done_and_the_next_up_runs_only_verify(stack: Path) -> None:
    failing = run_up(stack, cli=FakeCli(fail={"verify": 1}, verdict="fail"), provision=_provision, yes=True)
    assert failing.exit_code == 1
    assert failing.stages[-1].status == "failed" and "exited 1" in failing.stages[-1].detail
    assert failing.stages[-1].run_dir in failing.stages[-1].detail
    # The verdict per node and the findings, from verify's results.json.
    assert failing.verdicts == [{"node": "gpu-1", "verdict": "fail", "reason": "", "failed": ["GC-NET-001"]}]
    assert failing.findings[0]["cause"] == "MTU 1500 on the fabric"
    cli = FakeCli()
    retry = run_up(stack, cli=cli, provision=_provision)
    assert retry.exit_code == 0 and cli.commands() == ["verify"]


def test_a_failed_stage_stops_the_chain(stack: Path) -> None:
    cli = FakeCli(fail={"converge": 1})
    summary = run_up(stack, cli=cli, provision=_provision, yes=True)
    assert summary.exit_code == 1
    assert [s.status for s in summary.stages] == ["done", "done", "done", "failed", "not-run", "not-run"]
    assert "verify" not in cli.commands()


def test_a_verify_that_never_started_leaves_no_empty_run_folder(stack: Path, tmp_path: Path) -> None:
    summary = run_up(stack, cli=FakeCli(fail={"verify": 2}), provision=_provision, yes=True)
    assert summary.exit_code == 2 and summary.stages[-1].run_dir is None
    assert not list((tmp_path / "runs").glob("*-verify"))


def test_from_redoes_that_stage_and_the_rest(stack: Path) -> None:
    run_up(stack, cli=FakeCli(), provision=_provision, yes=True)
    cli = FakeCli()
    summary = run_up(stack, cli=cli, provision=_provision, start="converge")
    assert cli.commands() == ["converge", "kubernetes", "verify"]
    assert [s.status for s in summary.stages][:3] == ["skipped"] * 3


def test_ctrl_c_is_recorded_and_exits_130(stack: Path) -> None:
    summary = run_up(stack, cli=FakeCli(interrupt="converge"), provision=_provision, yes=True)
    assert summary.exit_code == 130
    assert [s.status for s in summary.stages] == ["done", "done", "done", "interrupted", "not-run", "not-run"]
    cli = FakeCli()
    run_up(stack, cli=cli, provision=_provision)
    assert cli.commands() == ["converge", "kubernetes", "verify"]


def test_without_the_pulumi_cli_nothing_runs_and_exit_2(stack: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PATH", str(stack.parent))  # no `pulumi` there
    assert main(["up", "--stack", str(stack), "--yes"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the Pulumi CLI is not on PATH" in err[0]
    assert not (stack.parent / "up.json").exists()


def test_the_lab_is_provisioned_by_lab_up_needs_no_yes_and_up_never_makes_the_lab_folder(
        lab_stack: Path, tmp_path: Path) -> None:
    cli = FakeCli(fail={"inventory": 1})
    summary = run_up(lab_stack, cli=cli)  # no --yes, no terminal: the lab costs nothing
    assert cli.calls[1][:2] == ["lab", "up"] and summary.exit_code == 1
    # `lab up` refuses a lab folder that exists before it: up's own record lives elsewhere.
    assert not (tmp_path / "labs").exists()
    assert Path(summary.state_file).is_file()


def test_a_corrupt_state_file_is_named(stack: Path) -> None:
    summary = run_up(stack, cli=FakeCli(), provision=_provision, yes=True)
    Path(summary.state_file).write_text("{not json")
    again = run_up(stack, cli=FakeCli(), provision=_provision, yes=True)
    assert again.exit_code == 2 and "not readable as up's state" in again.errors[0]
    assert [s.status for s in again.stages] == ["not-run"] * 6


@pytest.mark.parametrize(("name", "expected"), [("Pulumi.aws-h100.yaml", "aws-h100"), ("Pulumi.a.b.yml", "a.b")])
def test_stack_name_from_the_file_name(name: str, expected: str) -> None:
    assert pulumi_stack_name(Path(name)) == expected


def test_a_file_not_named_like_a_stack_is_refused() -> None:
    with pytest.raises(InputError, match=r"Pulumi.<stack>.yaml"):
        pulumi_stack_name(Path("cluster.yaml"))


# --- the cloud: preview, policy, consent, up (a fake Automation API stack) -------------------------


@functools.cache
def _planned() -> tuple[tuple[Resource, ...], dict[str, Any]]:
    plan = plan_stack(REPO / "Pulumi.aws-h100.yaml")
    return plan.resources, plan.outputs


def engine_event(r: Resource, op: str = "create") -> dict[str, Any]:
    """A resource's step as the engine reports it in a preview's event stream (JSON)."""
    return {"sequence": 0, "timestamp": 0, "resourcePreEvent": {"planning": True, "metadata": {
        "op": op, "urn": r.urn, "type": r.type, "provider": "",
        "new": {"type": r.type, "urn": r.urn, "id": "", "parent": r.parent or "", "provider": "",
                "custom": r.custom, "inputs": json.loads(json.dumps(dict(r.inputs)))}}}}


def _broken(resources: Sequence[Resource]) -> list[Resource]:
    """The planned resources with IMDSv1 allowed on the first instance: imds-v2-only fails."""
    out, done = [], False
    for r in resources:
        if r.type == "aws:ec2/instance:Instance" and not done:
            r = Resource(r.type, r.name, r.id, r.urn, r.parent, r.custom,
                         {**r.inputs, "metadataOptions": {"httpEndpoint": "enabled", "httpTokens": "optional"}})
            done = True
        out.append(r)
    return out


class FakeStack:
    """Pulumi's Automation API ``Stack`` as far as up and down call it."""

    def __init__(self, log: list[str], resources: Sequence[Resource] | None = None,
                 fail: str | None = None, exists: bool = True) -> None:
        planned, self._outputs = _planned()
        self.log = log
        self.resources = planned if resources is None else resources
        self.fail = fail
        self.exists = exists

    def _maybe_fail(self, what: str) -> None:
        if self.fail == what:
            raise CommandError(CommandResult(stdout="", stderr=f"error: {what} went wrong\nline two", code=255))

    def preview(self, *, on_output: Any, on_event: Any) -> Any:
        self.log.append("preview")
        on_output("Previewing update (aws-h100):")
        for r in self.resources:
            on_event(EngineEvent.from_json(engine_event(r)))
        self._maybe_fail("preview")
        return SimpleNamespace(change_summary={"create": len(self.resources)})

    def up(self, *, on_output: Any) -> Any:
        self.log.append("up")
        self._maybe_fail("up")
        self.exists = True
        return SimpleNamespace()

    def destroy(self, *, on_output: Any) -> Any:
        self.log.append("destroy")
        self._maybe_fail("destroy")
        return SimpleNamespace()

    def outputs(self) -> dict[str, Any]:
        return {k: SimpleNamespace(value=v, secret=False) for k, v in self._outputs.items()}


class Backend:
    """The Pulumi backend: one stack, opened the way up and down open it."""

    def __init__(self, stack: FakeStack) -> None:
        self.stack = stack
        self.opened: list[tuple[str, bool]] = []

    def __call__(self, stack_file: Path, create: bool) -> FakeStack | None:
        self.opened.append((stack_file.name, create))
        if not create and not self.stack.exists:
            return None
        return self.stack


def test_a_cloud_up_previews_judges_the_policy_and_only_then_applies(stack: Path) -> None:
    log: list[str] = []
    backend = Backend(FakeStack(log))
    out = io.StringIO()
    summary = run_up(stack, cli=FakeCli(), open_stack=backend, yes=True, out=out)
    assert summary.exit_code == 0, (summary.errors, summary.stages)
    assert log == ["preview", "up"] and backend.opened == [("Pulumi.aws-h100.yaml", True)]
    # The example's 30 resources: its nodes, network, NAT gateway and bastion.
    assert summary.preview is not None and summary.preview["changes"] == {"create": 30}
    assert summary.preview["resources"] == 30
    assert {p["rule"]: p["status"] for p in summary.preview["policy"]}["imds-v2-only"] == "pass"
    # The outputs `gpucluster inventory` reads: the stack's, private.
    outputs = resolve(stack).outputs_file
    assert json.loads(outputs.read_text())["cluster_name"] == "aws-h100"
    assert outputs.stat().st_mode & 0o777 == 0o600
    assert "Previewing update" in out.getvalue()


def test_a_preview_that_breaks_the_policy_is_never_applied(stack: Path) -> None:
    log: list[str] = []
    summary = run_up(stack, cli=FakeCli(), open_stack=Backend(FakeStack(log, _broken(_planned()[0]))), yes=True)
    assert log == ["preview"] and summary.exit_code == 1
    provision = summary.stages[1]
    assert provision.status == "failed" and "imds-v2-only" in provision.detail
    assert summary.preview is not None
    assert {p["rule"]: p["status"] for p in summary.preview["policy"]}["imds-v2-only"] == "fail"
    assert [s.status for s in summary.stages[2:]] == ["not-run"] * 4


def test_a_failing_preview_is_never_applied(stack: Path) -> None:
    log: list[str] = []
    summary = run_up(stack, cli=FakeCli(), open_stack=Backend(FakeStack(log, fail="preview")), yes=True)
    assert log == ["preview"] and summary.exit_code == 1
    assert "pulumi preview failed" in summary.stages[1].detail and "line two" in summary.stages[1].detail


def test_a_preview_with_no_resources_is_not_applied(stack: Path) -> None:
    log: list[str] = []
    summary = run_up(stack, cli=FakeCli(), open_stack=Backend(FakeStack(log, resources=[])), yes=True)
    assert log == ["preview"] and summary.exit_code == 1 and "no resources" in summary.stages[1].detail


def test_a_failing_update_is_exit_1_with_pulumis_reason(stack: Path) -> None:
    log: list[str] = []
    summary = run_up(stack, cli=FakeCli(), open_stack=Backend(FakeStack(log, fail="up")), yes=True)
    assert log == ["preview", "up"] and summary.exit_code == 1
    assert "pulumi up failed" in summary.stages[1].detail


def test_deleted_and_read_resources_are_not_judged() -> None:
    resources, _ = _planned()
    events = [EngineEvent.from_json(engine_event(resources[0], "delete")),
              EngineEvent.from_json(engine_event(resources[1], "read")),
              EngineEvent.from_json(engine_event(resources[2], "same")),
              EngineEvent.from_json(engine_event(resources[2], "update")),
              EngineEvent.from_json({"sequence": 1, "timestamp": 0, "stdoutEvent": {"message": "x", "color": "never"}})]
    found = preview_resources(events)
    assert [r.urn for r in found] == [resources[2].urn]
    assert found[0].inputs == resources[2].inputs and found[0].parent == resources[2].parent


def test_not_on_a_terminal_a_cloud_up_needs_yes_and_creates_nothing(
        stack: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    log: list[str] = []
    backend = Backend(FakeStack(log))
    cli = FakeCli()
    _patch_main(monkeypatch, cli, backend)
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert main(["up", "--stack", str(stack)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--yes" in err[0] and "nothing was created" in err[0]
    assert log == [] and backend.opened == [] and cli.calls == []


def test_on_a_terminal_up_asks_and_a_no_applies_nothing(stack: Path) -> None:
    log: list[str] = []
    questions: list[str] = []

    def no(question: str) -> bool:
        questions.append(question)
        return False

    summary = run_up(stack, cli=FakeCli(), open_stack=Backend(FakeStack(log)), confirm=no)
    assert log == ["preview"] and summary.exit_code == 2
    assert len(questions) == 1 and "create 30" in questions[0] and "policy passed" in questions[0]
    assert "not confirmed" in summary.stages[1].detail


def test_on_a_terminal_a_yes_applies(stack: Path) -> None:
    log: list[str] = []
    summary = run_up(stack, cli=FakeCli(), open_stack=Backend(FakeStack(log)), confirm=lambda q: True)
    assert log == ["preview", "up"] and summary.exit_code == 0


def test_a_resumed_up_past_provision_needs_no_yes(stack: Path) -> None:
    run_up(stack, cli=FakeCli(fail={"verify": 1}), provision=_provision, yes=True)
    cli = FakeCli()
    summary = run_up(stack, cli=cli, open_stack=Backend(FakeStack([])))  # no yes, no terminal
    assert summary.exit_code == 0 and cli.commands() == ["verify"]


# --- --fresh and down --------------------------------------------------------------------------------


def _known_hosts(stack: Path) -> Path:
    folder = resolve(stack).folder
    folder.mkdir(parents=True, exist_ok=True)
    kh = folder / "known_hosts"
    kh.write_text("10.40.15.249 ssh-ed25519 AAAAold1\n[10.40.15.248]:2222 ssh-ed25519 AAAAother\n"
                  "10.40.15.248 ssh-ed25519 AAAAold2\n192.0.2.7 ssh-ed25519 AAAAbastion\n")
    return kh


def test_fresh_destroys_the_stack_forgets_up_and_runs_every_stage(stack: Path) -> None:
    log: list[str] = []
    backend = Backend(FakeStack(log))
    run_up(stack, cli=FakeCli(), open_stack=backend, yes=True)
    kh = _known_hosts(stack)
    log.clear()
    cli = FakeCli()
    summary = run_up(stack, cli=cli, open_stack=backend, yes=True, fresh=True)
    assert summary.exit_code == 0, (summary.errors, summary.stages)
    assert log == ["destroy", "preview", "up"]
    assert [(s.name, s.status) for s in summary.stages] == [
        ("destroy", "done"), ("spec", "done"), ("provision", "done"), ("inventory", "done"), ("converge", "done"),
        ("kubernetes", "done"), ("verify", "done")]
    assert cli.commands() == ["spec validate", "inventory", "converge", "kubernetes", "verify"]
    # The destroyed nodes' keys are forgotten (a rebuilt node has a new one); the rest stays.
    assert kh.read_text() == "[10.40.15.248]:2222 ssh-ed25519 AAAAother\n192.0.2.7 ssh-ed25519 AAAAbastion\n"


def test_fresh_and_from_do_not_go_together(stack: Path) -> None:
    summary = run_up(stack, cli=FakeCli(), provision=_provision, yes=True, fresh=True, start="converge")
    assert summary.exit_code == 2 and "--fresh" in summary.errors[0]


def test_fresh_on_the_lab_takes_it_down_first(lab_stack: Path) -> None:
    cli = FakeCli()
    run_up(lab_stack, cli=cli)
    cli = FakeCli()
    summary = run_up(lab_stack, cli=cli, fresh=True)
    assert cli.commands()[:3] == ["lab down", "spec validate", "lab up"]
    assert summary.stages[0].name == "destroy" and summary.stages[0].status == "done"


def test_a_failed_teardown_stops_fresh_before_any_stage(stack: Path) -> None:
    log: list[str] = []
    summary = run_up(stack, cli=FakeCli(), open_stack=Backend(FakeStack(log, fail="destroy")), yes=True,
                     fresh=True)
    assert log == ["destroy"] and summary.exit_code == 1
    assert summary.stages[0].status == "failed" and "pulumi destroy failed" in summary.stages[0].detail
    assert [s.status for s in summary.stages[1:]] == ["not-run"] * 6


def test_down_destroys_the_stack_and_keeps_known_hosts_and_run_folders(stack: Path, tmp_path: Path) -> None:
    log: list[str] = []
    backend = Backend(FakeStack(log))
    first = run_up(stack, cli=FakeCli(), open_stack=backend, yes=True)
    kh = _known_hosts(stack)
    paths = resolve(stack)
    log.clear()
    result = run_down(stack, cli=FakeCli(), open_stack=backend, yes=True)
    assert result.exit_code == 0 and result.destroyed and log == ["destroy"]
    assert backend.opened[-1] == ("Pulumi.aws-h100.yaml", False)
    assert not Path(first.state_file).exists() and not paths.outputs_file.exists()
    assert not paths.inventory_file.exists()
    assert kh.is_file() and "bastion" in kh.read_text() and "AAAAold1" not in kh.read_text()
    assert result.forgotten_host_keys == ["10.40.15.248", "10.40.15.249"]
    assert list((tmp_path / "runs").glob("*-verify")) and list((tmp_path / "runs").glob("*-converge"))
    # The destroyed cluster's admin kubeconfig goes with it (its key opens nothing now; left, it would
    # pass the next up's "is the kubeconfig there"); known_hosts and the run folders stay.
    kubeconfig = paths.folder / "admin.conf"
    assert not kubeconfig.exists() and str(kubeconfig) in result.removed


def test_fresh_never_hands_verify_the_destroyed_clusters_kubeconfig(stack: Path) -> None:
    """A rebuild whose control plane fetched no kubeconfig fails verify naming the file, instead of
    passing the dead cluster's kubeconfig to verify."""
    backend = Backend(FakeStack([]))
    assert run_up(stack, cli=FakeCli(), open_stack=backend, yes=True).exit_code == 0
    kubeconfig = resolve(stack).kubeconfig_file
    assert kubeconfig.is_file()
    cli = FakeCli(fetch=False)
    summary = run_up(stack, cli=cli, open_stack=backend, yes=True, fresh=True)
    assert summary.exit_code == 2 and summary.stages[0].status == "done"
    assert (summary.stages[-1].name, summary.stages[-1].status) == ("verify", "failed")
    assert f"no kubeconfig is at {kubeconfig} " in summary.stages[-1].detail
    assert not any(c[0] == "verify" for c in cli.calls)


def test_down_removes_a_kubeconfig_the_inventory_moved_where_the_stack_deployed_kubernetes(
        stack: Path, tmp_path: Path) -> None:
    dest = tmp_path / "elsewhere" / "kube.conf"
    dest.parent.mkdir()
    moved = {"kubernetes_control_plane_kubeconfig_fetch_dest": str(dest)}
    backend = Backend(FakeStack([]))
    assert run_up(stack, cli=FakeCli(inventory_vars=moved), open_stack=backend, yes=True).exit_code == 0
    assert dest.is_file()
    result = run_down(stack, cli=FakeCli(), open_stack=backend, yes=True)
    assert result.exit_code == 0 and not dest.exists() and str(dest) in result.removed
    assert dest.parent.is_dir()


def test_down_leaves_a_file_the_inventory_names_where_no_control_plane_fetched_one(
        stack: Path, tmp_path: Path) -> None:
    """Without Kubernetes no role wrote to the place an inventory names: the file there is the user's."""
    no_kube = stack.with_name("Pulumi.nokube.yaml")
    text = stack.read_text()
    no_kube.write_text(text[:text.index("  gpucluster:kubernetes:")])
    users = tmp_path / "users.conf"
    users.write_text("mine\n")
    moved = {"kubernetes_control_plane_kubeconfig_fetch_dest": str(users)}
    backend = Backend(FakeStack([]))
    assert run_up(no_kube, cli=FakeCli(inventory_vars=moved), open_stack=backend, yes=True).exit_code == 0
    result = run_down(no_kube, cli=FakeCli(), open_stack=backend, yes=True)
    assert result.exit_code == 0 and users.read_text() == "mine\n" and str(users) not in result.removed


def test_down_with_an_unreadable_inventory_removes_the_contracts_kubeconfig_and_says_so(stack: Path) -> None:
    backend = Backend(FakeStack([]))
    assert run_up(stack, cli=FakeCli(), open_stack=backend, yes=True).exit_code == 0
    paths = resolve(stack)
    paths.inventory_file.write_text("all: {}\n")
    out = io.StringIO()
    result = run_down(stack, out=out, cli=FakeCli(), open_stack=backend, yes=True)
    assert result.exit_code == 0 and not (paths.folder / "admin.conf").exists()
    assert f"{paths.inventory_file} cannot be read" in out.getvalue()


def test_down_of_a_stack_the_backend_does_not_have_destroys_nothing(stack: Path) -> None:
    log: list[str] = []
    result = run_down(stack, cli=FakeCli(), open_stack=Backend(FakeStack(log, exists=False)), yes=True)
    assert result.exit_code == 0 and not result.destroyed and log == []


def test_down_not_on_a_terminal_needs_yes(stack: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    log: list[str] = []
    backend = Backend(FakeStack(log))
    monkeypatch.setattr(up_module, "open_pulumi_stack", backend)
    monkeypatch.setattr(up_module, "need_pulumi_cli", lambda: "pulumi")
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert main(["down", "--stack", str(stack)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--yes" in err[0] and "nothing was destroyed" in err[0]
    assert log == [] and backend.opened == []


def test_down_of_the_lab_is_lab_down_and_needs_no_yes(lab_stack: Path) -> None:
    first = run_up(lab_stack, cli=FakeCli())
    cli = FakeCli()
    # A kubeconfig in the lab's folder (a lab whose nodes ran a kubelet): `lab down` removes the
    # folder; down removes the file where it still is.
    kubeconfig = resolve(lab_stack).folder / "admin.conf"
    kubeconfig.write_text("apiVersion: v1\n")
    result = run_down(lab_stack, cli=cli)
    assert result.exit_code == 0 and cli.calls == [["lab", "down", "--stack", str(lab_stack)]]
    assert not Path(first.state_file).exists()
    assert not kubeconfig.exists() and str(kubeconfig) in result.removed


def test_down_json_is_one_document(stack: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    backend = Backend(FakeStack([], exists=False))
    monkeypatch.setattr(up_module, "open_pulumi_stack", backend)
    monkeypatch.setattr(up_module, "need_pulumi_cli", lambda: "pulumi")
    assert main(["down", "--stack", str(stack), "--yes", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is True and doc["destroyed"] is False and doc["target"] == "aws"


# --- the CLI: verify's options and exactly one JSON document ---------------------------------------


def _patch_main(monkeypatch: pytest.MonkeyPatch, cli: FakeCli, backend: Backend | None = None) -> None:
    """`gpucluster up` as the CLI runs it, with the fake commands and Automation API."""
    import gpucluster.cli.up as cli_up

    monkeypatch.setattr(cli_up, "run_up", functools.partial(run_up, cli=cli, open_stack=backend or
                                                            Backend(FakeStack([]))))


def _json_run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code = main(argv)
    out = capsys.readouterr().out
    doc = json.loads(out)  # exactly one document: json.loads refuses anything after it
    assert isinstance(doc, dict)
    return code, doc


def test_verify_options_pass_through_up(stack: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cli = FakeCli()
    _patch_main(monkeypatch, cli)
    code, doc = _json_run(["up", "--stack", str(stack), "--yes", "--json", "--checks", "GC-NET-*,GC-GPU-001",
                           "--no-burn", "--burn-seconds", "5", "--workers", "2", "--no-publish", "--fleet-margin",
                           "0.2", "--dcgm-level", "3", "--verify-run-dir", str(tmp_path / "report")], capsys)
    assert code == 0, doc
    verify = cli.calls[-1]
    assert verify[verify.index("--run-dir") + 1] == str(tmp_path / "report")
    # The kubeconfig the control plane's role fetched (the stack deploys Kubernetes), then the user's options.
    kubeconfig = verify[verify.index("--kubeconfig") + 1]
    assert kubeconfig == str(resolve(stack).kubeconfig_file)
    assert verify[verify.index("--run-dir") + 4:] == VerifyPassThrough(
        checks="GC-NET-*,GC-GPU-001", burn=False, burn_seconds=5, workers=2, publish=False, fleet_margin=0.2,
        dcgm_level=3).argv()
    assert doc["reports"] == {"junit": str(tmp_path / "report" / "junit.xml"),
                              "html": str(tmp_path / "report" / "summary.html"),
                              "json": str(tmp_path / "report" / "results.json")}
    # main's argument parser accepts what VerifyPassThrough.argv() writes, for verify.
    from gpucluster.cli import build_parser

    build_parser().parse_args(["verify", "--inventory", "x", *verify[verify.index("--run-dir") + 4:]])


def test_json_on_success_holds_stages_verdicts_and_reports(stack: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    _patch_main(monkeypatch, FakeCli())
    code, doc = _json_run(["up", "--stack", str(stack), "--yes", "--json"], capsys)
    assert code == 0 and doc["ok"] is True and doc["exit_code"] == 0
    assert [(s["name"], s["status"], s["exit_code"]) for s in doc["stages"]] == [
        ("spec", "done", 0), ("provision", "done", 0), ("inventory", "done", 0), ("converge", "done", 0),
        ("kubernetes", "done", 0), ("verify", "done", 0)]
    assert all(isinstance(s["seconds"], float) for s in doc["stages"])
    assert doc["stages"][3]["run_dir"].endswith("-converge") and doc["stages"][5]["run_dir"].endswith("-verify")
    assert doc["verdicts"][0]["verdict"] == "pass" and set(doc["reports"]) == {"junit", "html", "json"}
    assert doc["preview"]["changes"] == {"create": 30}


def test_json_when_verify_fails_holds_the_findings(stack: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    _patch_main(monkeypatch, FakeCli(fail={"verify": 1}, verdict="fail"))
    code, doc = _json_run(["up", "--stack", str(stack), "--yes", "--json"], capsys)
    assert code == 1 and doc["ok"] is False
    assert doc["findings"][0]["checks"] == [{"check": "GC-NET-001", "node": "gpu-1"}]


@pytest.mark.parametrize("argv", [
    ["up", "--stack", "no-such/Pulumi.x.yaml", "--json"],
    ["up", "--json"],
    ["up", "--stack", "STACK", "--json", "--burn-seconds", "0"],
    ["up", "--stack", "STACK", "--json", "--fleet-margin", "3"],
    ["up", "--stack", "STACK", "--json", "--yes", "--checks", "GC-NOPE-*"],  # before any stage, not after converge
    ["up", "--stack", "STACK", "--json"],  # a cloud, no --yes, not on a terminal
], ids=["no-stack-file", "no-stack", "burn-seconds", "fleet-margin", "checks", "no-yes"])
def test_json_on_bad_input_is_one_document_and_exit_2(argv: list[str], stack: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    cli = FakeCli()
    _patch_main(monkeypatch, cli)
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    code, doc = _json_run([str(stack) if a == "STACK" else a for a in argv], capsys)
    assert code == 2 and doc["exit_code"] == 2 and doc["ok"] is False and doc["errors"]
    assert cli.calls == []


def test_json_on_ctrl_c_is_one_document_and_exit_130(stack: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    _patch_main(monkeypatch, FakeCli(interrupt="verify"))
    code, doc = _json_run(["up", "--stack", str(stack), "--yes", "--json"], capsys)
    assert code == 130 and doc["exit_code"] == 130
    assert doc["stages"][-1]["status"] == "interrupted"


# --- the real Automation API, against a fake Pulumi CLI ---------------------------------------------

FAKE_PULUMI = '''#!{python}
import json, os, shutil, sys
args = sys.argv[1:]
with open({log!r}, "a") as f:
    f.write(json.dumps(args) + "\\n")
if args[:1] == ["version"]:
    print("v3.200.0")  # before 3.205 the Automation API reads the engine's events from a file
elif "history" in args:
    print(json.dumps([{{"kind": "update", "startTime": "2026-11-23T00:00:00.000Z", "message": "",
                       "environment": {{}}, "config": {{}}, "result": "succeeded",
                       "endTime": "2026-11-23T00:00:01.000Z", "resourceChanges": {{"create": 1}}}}]))
elif "output" in args:
    print(json.dumps({{"cluster": "aws-h100", "key_path": "s3cret" if "--show-secrets" in args else "[secret]"}}))
elif "preview" in args:
    print("Previewing update (aws-h100):")
    shutil.copy({events!r}, args[args.index("--event-log") + 1])
elif "up" in args:
    print("Updating (aws-h100):")
    print("Resources: + 1 created")
'''


def test_cloud_provision_drives_the_pulumi_cli_through_the_automation_api(
        stack: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "pulumi.log"
    events = tmp_path / "events.jsonl"
    resources, _ = _planned()
    events.write_text("".join(json.dumps(e) + "\n" for e in [
        *(engine_event(r) for r in resources),
        {"sequence": 99, "timestamp": 0, "summaryEvent": {"maybeCorrupt": False, "durationSeconds": 1,
                                                          "resourceChanges": {"create": len(resources)}}}]))
    exe = bindir / "pulumi"
    exe.write_text(FAKE_PULUMI.format(python=sys.executable, log=str(log), events=str(events)))
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    monkeypatch.setenv("PULUMI_SKIP_UPDATE_CHECK", "1")
    paths = resolve(stack)
    out = io.StringIO()
    provision = PulumiProvision(yes=True)
    provision(stack, paths, out)
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    verbs = [verb for c in calls for verb in ("preview", "up") if verb in c]
    assert verbs == ["preview", "up"]  # previewed, then applied
    up_call = next(c for c in calls if "up" in c)
    assert up_call[up_call.index("--stack") + 1] == "aws-h100" and "--yes" in up_call
    assert provision.report is not None and provision.report["resources"] == len(resources)
    assert provision.report["changes"] == {"create": len(resources)}
    # The outputs `gpucluster inventory` reads: secrets in clear, the file private.
    assert json.loads(paths.outputs_file.read_text()) == {"cluster": "aws-h100", "key_path": "s3cret"}
    assert paths.outputs_file.stat().st_mode & 0o777 == 0o600
    assert "Resources: + 1 created" in out.getvalue()
