"""`gpucluster up` and `gpucluster down`: the whole chain for one stack file, resumable, with one
JSON summary; and its undoing.

The stages are the ones a user runs by hand, each through its own command, so ``up`` adds no
second way of doing any of them:

    spec       gpucluster spec validate --stack FILE
    provision  the lab: gpucluster lab up --stack FILE
               a cloud or bare-metal target: Pulumi's Automation API: ``stack.preview()``, the
               project's policy (``stacks/policy.py``) over the resources the preview reports,
               consent (``--yes``, or a question on a terminal), then ``stack.up()``; the stack's
               outputs are written where ``gpucluster inventory`` reads them
    inventory  gpucluster inventory --stack FILE --outputs OUTPUTS -o INVENTORY
    converge   gpucluster converge --inventory INVENTORY
    verify     gpucluster verify --inventory INVENTORY --run-dir RUN_DIR

``up`` records each stage that finished, with a digest of what it read (and of the options it
was given), in a state file under the controller's state folder. The next ``up`` skips a stage
whose input is unchanged and which succeeded, so it resumes at the first stage not done
(``--from STAGE`` redoes one and everything after it). A failed verify is never "done": the next
``up`` runs it again. ``--fresh`` first destroys what an earlier ``up`` made (:func:`tear_down`,
the same as ``gpucluster down``), forgets the record and runs every stage.

The Automation API's stack (:class:`AutomationStack`) is injected like ``provision`` and ``cli``,
so the tests drive all of this with fakes and no Pulumi CLI.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NoReturn, Protocol, TextIO, cast

from gpucluster import hostkeys, runs
from gpucluster.converge import parse_extra_vars
from gpucluster.errors import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, EXIT_OK, InputError
from gpucluster.paths import RUNS_DIR, StackPaths, cluster_dir, stack_paths
from gpucluster.plan import PROGRAM, PolicyResult, Resource, plain_inputs
from gpucluster.spec import Cluster, load_spec
from gpucluster.spec.contract import refuse_extra_vars

STAGES = ("spec", "provision", "inventory", "converge", "kubernetes", "verify")
EXIT_INTERRUPTED = 130
STATE_VERSION = 1
# The pseudo-stage --fresh runs before the others, and `gpucluster down` alone.
DESTROY = "destroy"
# The stage after converge: Kubernetes (`converge --playbook deploy-kubernetes.yml`) where the spec
# asks and the target's nodes can run a kubelet, skipped with the reason otherwise; verify gets the
# kubeconfig the control plane's role fetched.
KUBERNETES = "kubernetes"
KUBERNETES_PLAYBOOK = "deploy-kubernetes.yml"
# What verify leaves in its run folder for people and CI (gpucluster/conformance/reports.py).
REPORT_FILES = {"junit": "junit.xml", "html": "summary.html", "json": "results.json", "markdown": "summary.md"}


@dataclass
class StageResult:
    name: str
    status: str  # done | skipped (done before, input unchanged) | failed | interrupted | not-run
    seconds: float = 0.0
    exit_code: int | None = None
    detail: str = ""
    input_sha256: str | None = None
    run_dir: str | None = None  # converge's and verify's run folder (for a skipped stage: the one it had)


@dataclass
class UpSummary:
    stack: str
    target: str
    state_file: str
    stages: list[StageResult] = field(default_factory=list)
    exit_code: int = EXIT_OK
    errors: list[str] = field(default_factory=list)  # bad input or environment, one line each
    # A cloud provision: what the preview would change and the policy's verdict over it.
    preview: dict[str, Any] | None = None
    # From verify's results.json: one verdict per node, the failures grouped by cause.
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)
    reports: dict[str, str] = field(default_factory=dict)  # junit, html, json, markdown -> path

    def as_dict(self) -> dict[str, Any]:
        return {"stack": self.stack, "target": self.target, "state_file": self.state_file,
                "ok": self.exit_code == EXIT_OK, "exit_code": self.exit_code, "errors": self.errors,
                "stages": [asdict(s) for s in self.stages], "preview": self.preview,
                "verdicts": self.verdicts, "findings": self.findings, "reports": self.reports}


def sha256_of(*paths: Path, extra: Sequence[str] = ()) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.name.encode() + b"\0")
        h.update(p.read_bytes() if p.is_file() else b"<absent>")
    for arg in extra:
        h.update(b"\0arg\0" + arg.encode())
    return h.hexdigest()


def pulumi_stack_name(stack_file: Path) -> str:
    """``Pulumi.aws-h100.yaml`` is stack ``aws-h100``: Pulumi's own naming of stack config files."""
    name = stack_file.name
    if not (name.startswith("Pulumi.") and name.endswith((".yaml", ".yml"))) or name.count(".") < 2:
        raise InputError(f"{stack_file}: a stack file is named Pulumi.<stack>.yaml (Pulumi reads it by that name)")
    return name[len("Pulumi."):name.rindex(".")]


def need_pulumi_cli() -> str:
    exe = shutil.which("pulumi")
    if exe is None:
        raise InputError("the Pulumi CLI is not on PATH: `gpucluster up` and `down` drive Pulumi through its "
                         "Automation API, which runs the CLI (install: https://www.pulumi.com/docs/install/; "
                         "the pip package `pulumi` is only the SDK)")
    return exe


# --- the Automation API, as much of it as up and down use ---------------------------------------


class AutomationStack(Protocol):
    """The part of :class:`pulumi.automation.Stack` that ``up`` and ``down`` call. Its errors are
    :class:`pulumi.automation.errors.CommandError` (the CLI failed: the program's policy gate
    refused a resource, a provider error, a concurrent update)."""

    def preview(self, *, on_output: Callable[[str], None], on_event: Callable[[Any], None]) -> Any: ...

    def up(self, *, on_output: Callable[[str], None]) -> Any: ...

    def destroy(self, *, on_output: Callable[[str], None]) -> Any: ...

    def outputs(self) -> Mapping[str, Any]: ...


# (stack file, create) -> the stack; None when create is False and there is no such stack.
OpenStack = Callable[[Path, bool], AutomationStack | None]


def _project_dir(stack_file: Path) -> Path:
    project_dir = stack_file.resolve().parent
    if not (project_dir / "Pulumi.yaml").is_file():
        raise InputError(f"{stack_file}: no Pulumi.yaml beside it; the stack file must sit in the project folder")
    return project_dir


def open_pulumi_stack(stack_file: Path, create: bool) -> AutomationStack | None:
    """The stack of ``Pulumi.<stack>.yaml`` through the Automation API (a local program in the
    project folder); with ``create`` False, None when the backend has no such stack."""
    need_pulumi_cli()
    from pulumi import automation as auto

    name, work_dir = pulumi_stack_name(stack_file), str(_project_dir(stack_file))
    if create:
        stack: AutomationStack = auto.create_or_select_stack(stack_name=name, work_dir=work_dir)
        return stack
    try:
        found: AutomationStack = auto.select_stack(stack_name=name, work_dir=work_dir)
        return found
    except auto.StackNotFoundError:
        return None


def _command_error() -> type[Exception]:
    """Pulumi's CommandError, imported where it is caught: every gpucluster command loads this module."""
    from pulumi.automation import errors

    return errors.CommandError


class PulumiFailed(Exception):
    """The Pulumi CLI failed (its last lines say why); exit 1, since what it judged was the stack."""


def _tail(text: str, lines: int = 6) -> str:
    kept = [x.strip() for x in text.strip().splitlines() if x.strip()]
    return " | ".join(kept[-lines:])[:1200]


# Steps of a preview that leave a resource in the stack afterwards: what the policy judges.
_KEPT_OPS = {"same", "create", "update", "replace", "create-replacement", "import", "import-replacement"}


def preview_resources(events: Sequence[Any]) -> list[Resource]:
    """The resources the stack would hold after the update, from the preview's engine events
    (``resource_pre_event.metadata``: op, and ``new``: type, URN, parent, custom, inputs), as the
    policy's :class:`gpucluster.plan.Resource` records, one per URN."""
    found: dict[str, Resource] = {}
    for event in events:
        pre = getattr(event, "resource_pre_event", None)
        meta = getattr(pre, "metadata", None)
        new = getattr(meta, "new", None)
        op = str(getattr(getattr(meta, "op", ""), "value", getattr(meta, "op", "")))
        if new is None or op not in _KEPT_OPS:
            continue
        urn = str(new.urn)
        found[urn] = Resource(type=str(new.type), name=urn.rsplit("::", 1)[-1], id=str(new.id or ""),
                              urn=urn, parent=new.parent or None, custom=bool(new.custom),
                              inputs=plain_inputs(dict(new.inputs or {})), state=dict(new.outputs or {}))
    return list(found.values())


def judge(resources: Sequence[Resource], target: str) -> list[PolicyResult]:
    """The project's policy rules (``stacks/policy.py``, the ones the program's gate and
    ``gpucluster plan`` run) over ``resources``."""
    policy = importlib.import_module(f"{PROGRAM}.policy")
    results: list[PolicyResult] = policy.evaluate(resources, target)
    return results


Confirm = Callable[[str], bool]


def consent(what: str, yes: bool, confirm: Confirm | None) -> None:
    """Go on only with ``--yes`` or a "yes" typed at the terminal; InputError otherwise."""
    if yes:
        return
    if confirm is None:
        raise InputError(f"{what}: not on a terminal and no --yes; pass --yes to go on without asking "
                         "(nothing was changed)")
    if not confirm(f"{what}?"):
        raise InputError(f"{what}: not confirmed; nothing was changed")


class PolicyRefused(Exception):
    """The preview breaks the project's policy: nothing was applied."""


class PulumiProvision:
    """A cloud or bare-metal provision: preview, the policy over the preview, consent, up, outputs.

    The Automation API's ``up`` runs with ``--skip-preview``; the preview here is what lets the
    program's whole-stack rules (placement, Ceph replication: ``stacks/gate.py``) stop a stack
    before anything is created rather than at the end of an update. ``report`` holds what the
    preview would change and the policy's results, for ``up``'s summary.
    """

    def __init__(self, open_stack: OpenStack | None = None, *, yes: bool = False,
                 confirm: Confirm | None = None) -> None:
        self.open_stack = open_stack or open_pulumi_stack
        self.yes = yes
        self.confirm = confirm
        self.report: dict[str, Any] | None = None

    def __call__(self, stack_file: Path, paths: StackPaths, out: TextIO) -> None:
        def say(line: str) -> None:
            print(line.rstrip("\n"), file=out, flush=True)

        stack = self.open_stack(stack_file, True)
        assert stack is not None  # create=True makes it
        failed = (PulumiFailed, _command_error())
        events: list[Any] = []
        say(f"up: pulumi preview of stack {pulumi_stack_name(stack_file)}")
        try:
            preview = stack.preview(on_output=say, on_event=events.append)
        except failed as exc:
            raise PulumiFailed(f"pulumi preview failed (the program's policy gate, or the provider): "
                               f"{_tail(str(exc))}") from None
        resources = preview_resources(events)
        changes = {str(getattr(k, "value", k)): int(v) for k, v in (getattr(preview, "change_summary", None)
                                                                   or {}).items()}
        results = judge(resources, paths.target)
        self.report = {"changes": changes, "resources": len(resources),
                       "policy": [{"rule": r.rule, "status": r.status, "message": r.message,
                                   "offenders": list(r.offenders)} for r in results]}
        if not resources:
            raise PolicyRefused("the preview reported no resources, so the policy judged nothing: not applied")
        for r in results:
            if r.status in ("fail", "warn"):
                say(f"up: policy {r.status.upper()} {r.rule}: {r.message}"
                    + "".join(f"\n    - {o}" for o in r.offenders))
        refused = [r for r in results if r.status == "fail"]
        if refused:
            raise PolicyRefused("the preview breaks the cluster policy, nothing was applied: "
                                + "; ".join(f"{r.rule}: {r.message}" for r in refused))
        summary = ", ".join(f"{op} {n}" for op, n in sorted(changes.items()) if op != "same" and n) or "no changes"
        consent(f"apply stack {pulumi_stack_name(stack_file)} ({summary}; policy passed over "
                f"{len(resources)} resources)", self.yes, self.confirm)
        say(f"up: pulumi up of stack {pulumi_stack_name(stack_file)}")
        try:
            stack.up(on_output=say)
            values = {key: getattr(item, "value", item) for key, item in stack.outputs().items()}
        except failed as exc:
            raise PulumiFailed(f"pulumi up failed: {_tail(str(exc))}") from None
        write_private_json(paths.outputs_file, values)


def write_private_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    runs.write_private(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def run_cli(argv: Sequence[str], out: TextIO) -> int:
    """One ``gpucluster`` command as a child in its own process group; Ctrl-C reaches all of it."""
    cmd = [sys.executable, "-m", "gpucluster", *argv]
    print(f"up: $ gpucluster {' '.join(argv)}", file=out, flush=True)
    proc = subprocess.Popen(cmd, stdout=out, stderr=out, process_group=0)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        _stop(proc)
        raise


def _stop(proc: subprocess.Popen[bytes]) -> None:
    # The child handles SIGINT itself (its own cleanup on every node); wait for that, then insist.
    for sig, grace in ((signal.SIGINT, 120.0), (signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


# --- verify's options, passed through ------------------------------------------------------------


@dataclass(frozen=True)
class VerifyPassThrough:
    """The options of ``gpucluster verify`` that ``up`` passes on (verify's own meaning and defaults)."""

    checks: str | None = None
    burn: bool = True
    burn_seconds: int | None = None
    workers: int | None = None
    publish: bool = True
    kubeconfig: Path | None = None
    fleet_margin: float | None = None
    dcgm_level: int | None = None
    fail_on_skipped_cluster: bool = False

    def problems(self) -> list[str]:
        """What verify would refuse, found before any stage runs (nothing created on bad input)."""
        from gpucluster.conformance import checks, fleet

        out = []
        if self.burn_seconds is not None and self.burn_seconds < 1:
            out.append(f"--burn-seconds {self.burn_seconds}: must be at least 1")
        if self.workers is not None and self.workers < 1:
            out.append(f"--workers {self.workers}: must be at least 1")
        if self.fleet_margin is not None:
            try:
                fleet.check_margin(self.fleet_margin, "--fleet-margin")
            except ValueError as exc:
                out.append(str(exc))
        if self.kubeconfig is not None and not self.kubeconfig.is_file():
            out.append(f"--kubeconfig {self.kubeconfig}: no such file")
        if self.checks is not None:
            try:
                checks.select(self.checks.split(","))
            except ValueError as exc:
                out.append(str(exc))
        return out

    def argv(self) -> list[str]:
        out: list[str] = []
        if self.checks:
            out += ["--checks", self.checks]
        if not self.burn:
            out.append("--no-burn")
        if self.burn_seconds is not None:
            out += ["--burn-seconds", str(self.burn_seconds)]
        if self.workers is not None:
            out += ["--workers", str(self.workers)]
        if not self.publish:
            out.append("--no-publish")
        if self.kubeconfig is not None:
            out += ["--kubeconfig", str(self.kubeconfig)]
        if self.fleet_margin is not None:
            out += ["--fleet-margin", repr(self.fleet_margin)]
        if self.dcgm_level is not None:
            out += ["--dcgm-level", str(self.dcgm_level)]
        if self.fail_on_skipped_cluster:
            out.append("--fail-on-skipped-cluster")
        return out


@dataclass
class Plan:
    """What ``up`` runs for one stack: the commands and what each stage reads."""

    cluster: Cluster
    stack_file: Path
    paths: StackPaths
    verify_args: tuple[str, ...] = ()
    converge_args: tuple[str, ...] = ()
    runs_dir: Path = RUNS_DIR
    # verify's run folder for this up: made by up (or named with --verify-run-dir) so that up
    # knows where its reports are.
    verify_run_dir: Path | None = None
    # kubernetes_skip()'s answer, read from the outputs once per up (provision writes them first).
    _kubernetes_skip: tuple[str | None] | None = field(default=None, repr=False)

    def kubernetes_skip(self) -> str | None:
        """Why this up deploys no Kubernetes, or None when it does (:func:`kubernetes_skip_reason`),
        read once: the kubernetes stage and verify's --kubeconfig decide from the same answer."""
        if self._kubernetes_skip is None:
            self._kubernetes_skip = (kubernetes_skip_reason(self.cluster, self.paths.outputs_file),)
        return self._kubernetes_skip[0]

    def stage_input(self, stage: str) -> list[Path]:
        return {
            "spec": [self.stack_file],
            "provision": [self.stack_file],
            "inventory": [self.stack_file, self.paths.outputs_file],
            "converge": [self.paths.inventory_file],
            "kubernetes": [self.paths.inventory_file],
            "verify": [self.paths.inventory_file],
        }[stage]

    def stage_args(self, stage: str) -> tuple[str, ...]:
        """Options that change what a stage does: other options, another run."""
        return {"converge": self.converge_args, "kubernetes": self.converge_args,
                "verify": self.verify_args}.get(stage, ())

    def digest(self, stage: str) -> str:
        return sha256_of(*self.stage_input(stage), extra=self.stage_args(stage))


def state_path(stack_file: Path, cluster: Cluster) -> Path:
    """Where ``up`` keeps its record for this stack file: the controller's state folder, never the
    lab's own folder (``lab up`` makes that one and refuses one that exists)."""
    key = hashlib.sha256(str(stack_file.resolve()).encode()).hexdigest()[:12]
    return runs.state_root() / "up" / f"{cluster.name}-{key}.json"


def read_state(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not readable as up's state ({exc}); remove it to start over") from None
    if not isinstance(data, dict) or data.get("version") != STATE_VERSION or not isinstance(data.get("stages"), dict):
        raise InputError(f"{path}: not a state file of this version of gpucluster up; remove it to start over")
    return data


def _first_to_run(plan: Plan, stages_state: dict[str, Any], start: str | None) -> int:
    """The index of the first stage this up runs (len(STAGES): none). Every stage after it runs too."""
    for i, name in enumerate(STAGES):
        prior = stages_state.get(name, {})
        if name == start or prior.get("status") != "done" or prior.get("input_sha256") != plan.digest(name):
            return i
    return len(STAGES)


def _exit_code_of(rc: int) -> int:
    if rc in (EXIT_BAD_INPUT, EXIT_INTERRUPTED):
        return rc
    return EXIT_CHECK_FAILED


# --- run folders and verify's reports ------------------------------------------------------------


def _run_dirs(runs_dir: Path, label: str) -> set[Path]:
    return set(runs_dir.glob(f"*-{label}")) if runs_dir.is_dir() else set()


def _converge_run_dir(runs_dir: Path, before: set[Path], inventory: Path) -> Path | None:
    """The run folder the converge just run made: new under ``runs_dir`` and of this inventory
    (its summary.json says so; a run stopped before writing one is taken when it is the only new one)."""
    new = sorted(_run_dirs(runs_dir, "converge") - before)
    ours = []
    for d in new:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            if json.loads((d / "summary.json").read_text(encoding="utf-8")).get("inventory") == str(inventory):
                ours.append(d)
    if ours:
        return ours[-1]
    return new[-1] if len(new) == 1 else None


def read_verify_report(run_dir: Path, summary: UpSummary) -> None:
    """The verdict per node, the findings and the report files of a verify run folder, into ``summary``."""
    summary.reports = {kind: str(run_dir / name) for kind, name in REPORT_FILES.items() if (run_dir / name).is_file()}
    try:
        data = json.loads((run_dir / REPORT_FILES["json"]).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if not isinstance(data, dict):
        return
    summary.verdicts = [{"node": v.get("node"), "verdict": v.get("verdict"), "reason": v.get("reason", ""),
                         "failed": [f.get("check") for f in v.get("failed", []) if isinstance(f, dict)]}
                        for v in data.get("verdicts", []) if isinstance(v, dict)]
    summary.findings = [f for f in data.get("findings", []) if isinstance(f, dict)]


# --- up -----------------------------------------------------------------------------------------


def run_up(stack_file: Path, *, start: str | None = None, out: TextIO = sys.stderr,
           converge_args: Sequence[str] = (), verify_args: Sequence[str] = (),
           provision: Callable[[Path, StackPaths, TextIO], None] | None = None,
           cli: Callable[[Sequence[str], TextIO], int] = run_cli,
           open_stack: OpenStack | None = None, yes: bool = False, confirm: Confirm | None = None,
           fresh: bool = False, runs_dir: Path = RUNS_DIR, verify_run_dir: Path | None = None) -> UpSummary:
    """Every stage for one stack file. Never raises for bad input or Ctrl-C: the summary says
    (``errors``, exit 2; exit 130), so a caller always has one summary to print."""
    summary = UpSummary(stack=str(stack_file), target="", state_file="")
    try:
        _up(summary, stack_file, start=start, out=out, converge_args=converge_args, verify_args=verify_args,
            provision=provision, cli=cli, open_stack=open_stack, yes=yes, confirm=confirm, fresh=fresh,
            runs_dir=runs_dir, verify_run_dir=verify_run_dir)
    except InputError as exc:
        summary.errors += exc.lines()
        summary.exit_code = EXIT_BAD_INPUT
    except KeyboardInterrupt:
        summary.errors.append("error: up: interrupted")
        summary.exit_code = EXIT_INTERRUPTED
    done = {s.name for s in summary.stages}
    summary.stages += [StageResult(name, "not-run") for name in STAGES if name not in done]
    return summary


def _up(summary: UpSummary, stack_file: Path, *, start: str | None, out: TextIO, converge_args: Sequence[str],
        verify_args: Sequence[str], provision: Callable[[Path, StackPaths, TextIO], None] | None,
        cli: Callable[[Sequence[str], TextIO], int], open_stack: OpenStack | None, yes: bool,
        confirm: Confirm | None, fresh: bool, runs_dir: Path, verify_run_dir: Path | None) -> None:
    if start is not None and start not in STAGES:
        raise InputError(f"--from {start!r}: one of {', '.join(STAGES)}")
    if fresh and start is not None:
        raise InputError(f"--fresh runs every stage; --from {start} has no meaning with it")
    # converge refuses a node contract override given with -e; up says so before anything is provisioned.
    refuse_extra_vars(parse_extra_vars(converge_extra_vars(converge_args)))
    cluster = load_spec(stack_file)
    paths = stack_paths(cluster)
    kind = cluster.spec.target.kind
    summary.target = kind
    plan = Plan(cluster, stack_file, paths, tuple(verify_args), tuple(converge_args), runs_dir)
    state_file = state_path(stack_file, cluster)
    summary.state_file = str(state_file)
    stages_state: dict[str, Any] = {} if fresh else read_state(state_file).get("stages", {})
    first = 0 if fresh else _first_to_run(plan, stages_state, start)
    cloud = not on_lab(cluster)
    # Before anything is created or destroyed: the tools and the consent a cloud run needs. The
    # lab needs no --yes (nothing is paid for).
    if cloud and (fresh or first <= STAGES.index("provision")):
        if open_stack is None and provision is None:
            need_pulumi_cli()
        if not yes and confirm is None:
            what = "rebuild" if fresh else "provision"
            raise InputError(f"up would {what} stack {pulumi_stack_name(stack_file)} ({kind}), which creates "
                             "resources that are paid for: not on a terminal and no --yes; pass --yes to go on "
                             "(nothing was created)")
    if cloud and provision is None:
        provision = PulumiProvision(open_stack, yes=yes, confirm=confirm)
    if fresh:
        teardown = StageResult(DESTROY, "failed")
        summary.stages.append(teardown)
        print(f"up: --fresh: destroying what an earlier up made of {stack_file}", file=out, flush=True)
        t0 = time.monotonic()
        try:
            teardown.exit_code = tear_down(cluster, stack_file, out, cli=cli, open_stack=open_stack, yes=yes,
                                           confirm=confirm)
        except KeyboardInterrupt:
            teardown.status, teardown.exit_code = "interrupted", EXIT_INTERRUPTED
            teardown.seconds = round(time.monotonic() - t0, 1)
            summary.exit_code = EXIT_INTERRUPTED
            return
        except (PulumiFailed, InputError) as exc:
            teardown.exit_code = EXIT_BAD_INPUT if isinstance(exc, InputError) else EXIT_CHECK_FAILED
            teardown.detail = "; ".join(exc.problems) if isinstance(exc, InputError) else str(exc)
        teardown.seconds = round(time.monotonic() - t0, 1)
        if teardown.exit_code != EXIT_OK:
            teardown.detail = teardown.detail or f"`gpucluster lab down` exited {teardown.exit_code}"
            summary.exit_code = _exit_code_of(teardown.exit_code)
            return
        teardown.status = "done"
    for i, name in enumerate(STAGES):
        digest = plan.digest(name)
        prior = stages_state.get(name, {})
        if i < first:
            summary.stages.append(StageResult(name, "skipped", detail="done before, input unchanged",
                                              input_sha256=digest, run_dir=prior.get("run_dir")))
            if name == "verify" and prior.get("run_dir"):
                read_verify_report(Path(prior["run_dir"]), summary)
            continue
        if name == KUBERNETES:
            reason = plan.kubernetes_skip()
            if reason is not None:
                summary.stages.append(StageResult(name, "skipped", exit_code=EXIT_OK, detail=reason,
                                                  input_sha256=digest))
                print(f"up: stage {name} ({i + 1}/{len(STAGES)}) skipped: {reason}", file=out, flush=True)
                stages_state[name] = {"status": "done", "input_sha256": digest, "run_dir": None,
                                      "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
                write_private_json(state_file, {"version": STATE_VERSION, "stack": str(stack_file),
                                                "stages": stages_state})
                continue
        t0 = time.monotonic()
        result = StageResult(name, "failed", input_sha256=digest)
        summary.stages.append(result)
        print(f"up: stage {name} ({i + 1}/{len(STAGES)})", file=out, flush=True)
        before = _run_dirs(runs_dir, "converge")
        try:
            if name == "verify":
                plan.verify_run_dir = verify_run_dir or runs.new_run_dir(runs_dir, "verify")
                result.run_dir = str(plan.verify_run_dir.resolve())
            rc = _run_stage(plan, name, out, provision, cli)
        except KeyboardInterrupt:
            rc = EXIT_INTERRUPTED
            result.status = "interrupted"
        except InputError as exc:
            rc = EXIT_BAD_INPUT
            result.detail = "; ".join(exc.problems)
        except (PulumiFailed, PolicyRefused) as exc:
            rc = EXIT_CHECK_FAILED
            result.detail = str(exc)
        finally:
            result.seconds = round(time.monotonic() - t0, 1)
            if isinstance(provision, PulumiProvision) and name == "provision":
                summary.preview = provision.report
        result.exit_code = rc
        if name in ("converge", KUBERNETES):
            found = _converge_run_dir(runs_dir, before, paths.inventory_file)
            result.run_dir = str(found.resolve()) if found else None
        if name == "verify" and plan.verify_run_dir is not None:
            if verify_run_dir is None and plan.verify_run_dir.is_dir() and not any(plan.verify_run_dir.iterdir()):
                plan.verify_run_dir.rmdir()  # a verify that never started (bad inventory): no empty folder
                result.run_dir = None
            else:
                read_verify_report(plan.verify_run_dir, summary)
        if rc == EXIT_OK:
            result.status = "done"
            # The digest of what the stage read, taken before it ran: provision writes the outputs
            # the next stage reads, so its own input is unchanged.
            stages_state[name] = {"status": "done", "input_sha256": digest, "run_dir": result.run_dir,
                                  "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        else:
            stages_state.pop(name, None)
            summary.exit_code = _exit_code_of(rc)
            if not result.detail:
                what = "interrupted" if rc == EXIT_INTERRUPTED else f"exited {rc}"
                where = f"; its run folder {result.run_dir} holds the cause" if result.run_dir else ""
                result.detail = f"`gpucluster {name}` {what}{where}"
        write_private_json(state_file, {"version": STATE_VERSION, "stack": str(stack_file), "stages": stages_state})
        if rc != EXIT_OK:
            return


class _ConvergeOptions(argparse.ArgumentParser):
    """converge's own parser (gpucluster.cli.converge), answering ``up`` with an InputError instead of
    printing and exiting."""

    def error(self, message: str) -> NoReturn:
        raise InputError(f"converge's options: {message}")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise InputError("converge's options: -h/--help prints converge's help; run `gpucluster converge --help`")

    def print_help(self, file: Any = None) -> None:
        pass


def converge_extra_vars(converge_args: Sequence[str]) -> list[str]:
    """The ``-e``/``--extra-vars`` values among converge's options (``KEY=VALUE`` or ``@FILE``), as
    converge reads them: through its own argparse definition, so every form it takes is found
    (``-eK=V``, ``-e K=V``, ``--extra-vars=...``, a prefix such as ``--extra ...`` or ``--ex=...``,
    ``-e`` after other short flags). Options converge would refuse raise an InputError here already."""
    from gpucluster.cli import converge as converge_cli

    sub = _ConvergeOptions(prog="gpucluster", add_help=False).add_subparsers(parser_class=_ConvergeOptions)
    converge_cli.register(cast("argparse._SubParsersAction[argparse.ArgumentParser]", sub))
    found, _ = sub.choices["converge"].parse_known_args(list(converge_args))
    return list(found.extra_vars)


def kubernetes_skip_reason(cluster: Cluster, outputs_file: Path) -> str | None:
    """Why converge's site.yml does not deploy Kubernetes on this stack, or None when it does:
    the spec's kubernetes section and the target's statement of what its nodes can run (its outputs)."""
    from gpucluster.outputs import load_outputs

    kube = cluster.spec.kubernetes
    if kube is None or not kube.enabled:
        return "the spec has no enabled kubernetes section"
    if not load_outputs(outputs_file).capabilities.kubernetes_nodes:
        return (f"the {cluster.spec.target.kind} target states its nodes cannot run a kubelet "
                "(capabilities.kubernetes_nodes: false); the Kubernetes checks skip, saying so")
    return None


def _run_stage(plan: Plan, name: str, out: TextIO,
               provision: Callable[[Path, StackPaths, TextIO], None] | None,
               cli: Callable[[Sequence[str], TextIO], int]) -> int:
    stack = str(plan.stack_file)
    paths = plan.paths
    if name == "spec":
        return cli(["spec", "validate", "--stack", stack], out)
    if name == "provision":
        if on_lab(plan.cluster):
            return cli(["lab", "up", "--stack", stack], out)
        (provision or PulumiProvision())(plan.stack_file, paths, out)
        return EXIT_OK
    if name == "inventory":
        return cli(["inventory", "--stack", stack, "--outputs", str(paths.outputs_file),
                    "-o", str(paths.inventory_file)], out)
    runs_dir = [] if plan.runs_dir == RUNS_DIR else ["--runs-dir", str(plan.runs_dir)]
    if name == "converge":
        return cli(["converge", "--inventory", str(paths.inventory_file), *runs_dir, *plan.converge_args], out)
    deploys_kubernetes = plan.kubernetes_skip() is None
    if name == KUBERNETES:
        # The control plane's role fetches the cluster-admin kubeconfig where the inventory's node
        # contract says (beside the inventory, in the cluster's folder), which verify's stage reads.
        return cli(["converge", "--inventory", str(paths.inventory_file), "--playbook", KUBERNETES_PLAYBOOK,
                    *runs_dir, *plan.converge_args], out)
    run_dir = [] if plan.verify_run_dir is None else ["--run-dir", str(plan.verify_run_dir)]
    kubeconfig: list[str] = []
    if deploys_kubernetes and "--kubeconfig" not in plan.verify_args:
        fetched = paths.kubeconfig_file
        if not fetched.is_file():
            raise InputError(f"converge deployed Kubernetes but no kubeconfig is at {fetched} "
                             "(the control plane's role fetches it): rerun `gpucluster up --from converge`")
        kubeconfig = ["--kubeconfig", str(fetched)]
    return cli(["verify", "--inventory", str(paths.inventory_file), *run_dir, *kubeconfig, *plan.verify_args],
               out)


# --- down ----------------------------------------------------------------------------------------


@dataclass
class DownResult:
    stack: str
    target: str
    exit_code: int = EXIT_OK
    destroyed: bool = False  # a cloud stack destroyed, or the lab taken down
    removed: list[str] = field(default_factory=list)  # up's files removed from the controller
    forgotten_host_keys: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.exit_code == EXIT_OK}


def on_lab(cluster: Cluster) -> bool:
    """Whether the stack boots on this host: the lab target, or a platform twin of a real target
    (its provision is `gpucluster lab up`, its teardown `gpucluster lab down`; no Pulumi, nothing paid)."""
    return cluster.spec.target.kind == "lab" or cluster.spec.twin is not None


def _node_hosts(outputs_file: Path) -> list[str]:
    """The nodes' addresses as known_hosts names them (``addr``, or ``[addr]:port``), from the
    stack outputs, and a bastion the stack made (destroyed with them); none when there are no
    readable outputs. An existing bastion outlives the stack: its key stays."""
    from gpucluster.outputs import parse_outputs

    try:
        parsed = parse_outputs(json.loads(outputs_file.read_text(encoding="utf-8")), str(outputs_file))
    except (OSError, ValueError, InputError):
        return []
    hosts = [(n.management_ip, n.ssh_port) for n in parsed.nodes]
    bastion = parsed.access.bastion
    if bastion is not None and parsed.access.created:
        hosts.append((bastion.host, bastion.port))
    return [addr if port == 22 else f"[{addr}]:{port}" for addr, port in hosts]


def _fetched_kubeconfig(cluster: Cluster, paths: StackPaths, out: TextIO) -> Path | None:
    """The stack's cluster-admin kubeconfig, where ``paths.kubeconfig_file`` (the inventory) puts it,
    that :func:`tear_down` removes with the cluster; None where none can be the stack's own.

    The contract's place (``admin.conf`` in the cluster's folder) holds nothing but this stack's
    kubeconfig. A place the inventory names may be a file of the user's where no control plane ever
    fetched one, so it counts only where the stack deploys Kubernetes (:func:`kubernetes_skip_reason`;
    the spec alone where the outputs are gone). An inventory that cannot be read leaves the
    contract's place, and a line saying so."""
    default = paths.contract_kubeconfig_file
    try:
        fetched = paths.kubeconfig_file
    except InputError as exc:
        why = exc.problems[0] if exc.problems else str(exc)
        print(f"down: {paths.inventory_file} cannot be read ({why}): only the kubeconfig at "
              f"{default} is removed, not one the inventory may have moved", file=out, flush=True)
        return default
    if fetched == default:
        return fetched
    kube = cluster.spec.kubernetes
    try:
        deploys = kubernetes_skip_reason(cluster, paths.outputs_file) is None
    except InputError:
        deploys = kube is not None and kube.enabled
    return fetched if deploys else None


def tear_down(cluster: Cluster, stack_file: Path, out: TextIO, *,
              cli: Callable[[Sequence[str], TextIO], int] = run_cli, open_stack: OpenStack | None = None,
              yes: bool = False, confirm: Confirm | None = None, result: DownResult | None = None) -> int:
    """Destroy what ``up`` made of ``stack_file`` and forget ``up``'s record of it; the exit code.

    The lab: ``gpucluster lab down``. Any other target: the Pulumi stack's ``destroy()`` (nothing
    when the backend has no such stack); then the outputs and inventory of the destroyed nodes are
    removed, and their host keys forgotten in the cluster's known_hosts: a rebuilt node at the same
    address has a new key, and the next ``up`` would refuse it. On every target the cluster-admin
    kubeconfig the control plane's role fetched is removed (:func:`_fetched_kubeconfig`), so a
    rebuild's verify never reads the dead cluster's. The known_hosts file itself, its other entries
    and every run folder stay.
    """
    result = result or DownResult(stack=str(stack_file), target=cluster.spec.target.kind)
    paths = stack_paths(cluster)
    stack_name = pulumi_stack_name(stack_file) if not on_lab(cluster) else cluster.name
    # Asked before anything is destroyed: the inventory that says where it is goes with the nodes.
    kubeconfig = _fetched_kubeconfig(cluster, paths, out)
    if on_lab(cluster):
        hosts = _node_hosts(paths.outputs_file)
        rc = cli(["lab", "down", "--stack", str(stack_file)], out)
        if rc != EXIT_OK:
            return rc
        result.destroyed = True
        if cluster.spec.twin is not None:
            # A twin's converge records host keys where its real target's would (the cluster's folder).
            result.forgotten_host_keys = hostkeys.forget(cluster_dir(cluster.name) / hostkeys.KNOWN_HOSTS, hosts)
    else:
        opener = open_stack or open_pulumi_stack
        stack = opener(stack_file, False)
        if stack is None:
            print(f"down: stack {stack_name}: no such stack in the Pulumi backend, nothing to destroy",
                  file=out, flush=True)
        else:
            consent(f"destroy every resource of stack {stack_name} ({cluster.spec.target.kind})", yes, confirm)
            failed = (PulumiFailed, _command_error())
            print(f"down: pulumi destroy of stack {stack_name}", file=out, flush=True)
            try:
                stack.destroy(on_output=lambda line: print(line.rstrip("\n"), file=out, flush=True))
            except failed as exc:
                raise PulumiFailed(f"pulumi destroy failed: {_tail(str(exc))}") from None
            result.destroyed = True
        known_hosts = paths.folder / hostkeys.KNOWN_HOSTS
        result.forgotten_host_keys = hostkeys.forget(known_hosts, _node_hosts(paths.outputs_file))
        for stale in (paths.outputs_file, paths.inventory_file):
            if stale.is_file():
                stale.unlink()
                result.removed.append(str(stale))
    # The destroyed cluster's admin kubeconfig (a lab's own folder is gone with the lab, a place the
    # inventory chose is not): left behind, it would pass the next up's "is the kubeconfig there" check
    # before the rebuilt control plane fetched a new one, and it holds a cluster-admin key.
    if kubeconfig is not None and (kubeconfig.is_file() or kubeconfig.is_symlink()):
        kubeconfig.unlink()
        result.removed.append(str(kubeconfig))
    state_file = state_path(stack_file, cluster)
    if state_file.is_file():
        state_file.unlink()
        result.removed.append(str(state_file))
    return EXIT_OK


def run_down(stack_file: Path, *, out: TextIO = sys.stderr, yes: bool = False, confirm: Confirm | None = None,
             cli: Callable[[Sequence[str], TextIO], int] = run_cli, open_stack: OpenStack | None = None) -> DownResult:
    """``gpucluster down``: :func:`tear_down` with its result; never raises for bad input or Ctrl-C."""
    result = DownResult(stack=str(stack_file), target="")
    t0 = time.monotonic()
    try:
        cluster = load_spec(stack_file)
        result.target = cluster.spec.target.kind
        if not on_lab(cluster):
            pulumi_stack_name(stack_file)
            if open_stack is None:
                need_pulumi_cli()
            if not yes and confirm is None:
                raise InputError(f"down would destroy stack {pulumi_stack_name(stack_file)} ({result.target}): not "
                                 "on a terminal and no --yes; pass --yes to go on (nothing was destroyed)")
        result.exit_code = tear_down(cluster, stack_file, out, cli=cli, open_stack=open_stack, yes=yes,
                                     confirm=confirm, result=result)
        if result.exit_code != EXIT_OK:
            result.errors.append(f"error: down: `gpucluster lab down` exited {result.exit_code}")
    except InputError as exc:
        result.errors += exc.lines()
        result.exit_code = EXIT_BAD_INPUT
    except PulumiFailed as exc:
        result.errors.append(f"error: down: {exc}")
        result.exit_code = EXIT_CHECK_FAILED
    except KeyboardInterrupt:
        result.errors.append("error: down: interrupted")
        result.exit_code = EXIT_INTERRUPTED
    result.seconds = round(time.monotonic() - t0, 1)
    return result
