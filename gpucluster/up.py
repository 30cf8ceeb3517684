"""`gpucluster up`: the whole chain for one stack file, resumable, with one JSON summary.

The stages are the ones a user runs by hand, each through its own command, so ``up`` adds no
second way of doing any of them:

    spec       gpucluster spec validate --stack FILE
    provision  the lab: gpucluster lab up --stack FILE
               a cloud or bare-metal target: Pulumi's Automation API (``pulumi up``), then the
               stack's outputs are written where ``gpucluster inventory`` reads them
    inventory  gpucluster inventory --stack FILE --outputs OUTPUTS -o INVENTORY
    converge   gpucluster converge --inventory INVENTORY
    verify     gpucluster verify --inventory INVENTORY

``up`` records each stage that finished, with a digest of what it read, in ``up.json`` beside the
stack's outputs. The next ``up`` skips a stage whose input is unchanged and which succeeded, so it
resumes at the first stage not done (``--from STAGE`` redoes one and everything after it). A
failed verify is never "done": the next ``up`` runs it again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from gpucluster import runs
from gpucluster.errors import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, EXIT_OK, InputError
from gpucluster.paths import StackPaths, stack_paths
from gpucluster.spec import Cluster, load_spec

STAGES = ("spec", "provision", "inventory", "converge", "verify")
EXIT_INTERRUPTED = 130
STATE_VERSION = 1


@dataclass
class StageResult:
    name: str
    status: str  # done | skipped (done before, input unchanged) | failed | interrupted | not-run
    seconds: float = 0.0
    exit_code: int | None = None
    detail: str = ""
    input_sha256: str | None = None


@dataclass
class UpSummary:
    stack: str
    target: str
    state_file: str
    stages: list[StageResult] = field(default_factory=list)
    exit_code: int = EXIT_OK

    def as_dict(self) -> dict[str, Any]:
        return {"stack": self.stack, "target": self.target, "state_file": self.state_file,
                "ok": self.exit_code == EXIT_OK, "exit_code": self.exit_code,
                "stages": [asdict(s) for s in self.stages]}


def sha256_of(*paths: Path) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.name.encode() + b"\0")
        h.update(p.read_bytes() if p.is_file() else b"<absent>")
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
        raise InputError("the Pulumi CLI is not on PATH: `gpucluster up` drives `pulumi up` through Pulumi's "
                         "Automation API, which runs the CLI (install: https://www.pulumi.com/docs/install/; "
                         "the pip package `pulumi` is only the SDK)")
    return exe


def pulumi_provision(stack_file: Path, paths: StackPaths, out: TextIO) -> None:
    """``pulumi up`` for the stack through the Automation API, then its outputs written 0600."""
    need_pulumi_cli()
    from pulumi import automation as auto

    project_dir = stack_file.resolve().parent
    if not (project_dir / "Pulumi.yaml").is_file():
        raise InputError(f"{stack_file}: no Pulumi.yaml beside it; the stack file must sit in the project folder")
    stack = auto.create_or_select_stack(stack_name=pulumi_stack_name(stack_file), work_dir=str(project_dir))
    stack.up(on_output=lambda line: print(line, file=out, flush=True))
    values = {key: item.value for key, item in stack.outputs().items()}
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


@dataclass
class Plan:
    """What ``up`` runs for one stack: the commands and what each stage reads."""

    cluster: Cluster
    stack_file: Path
    paths: StackPaths
    verify_args: tuple[str, ...] = ()
    converge_args: tuple[str, ...] = ()

    def stage_input(self, stage: str) -> list[Path]:
        return {
            "spec": [self.stack_file],
            "provision": [self.stack_file],
            "inventory": [self.stack_file, self.paths.outputs_file],
            "converge": [self.paths.inventory_file],
            "verify": [self.paths.inventory_file],
        }[stage]


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


def run_up(stack_file: Path, *, start: str | None = None, out: TextIO = sys.stderr,
           converge_args: Sequence[str] = (), verify_args: Sequence[str] = (),
           provision: Callable[[Path, StackPaths, TextIO], None] | None = None,
           cli: Callable[[Sequence[str], TextIO], int] = run_cli) -> UpSummary:
    if start is not None and start not in STAGES:
        raise InputError(f"--from {start!r}: one of {', '.join(STAGES)}")
    cluster = load_spec(stack_file)
    paths = stack_paths(cluster)
    kind = cluster.spec.target.kind
    if kind != "lab" and provision is None:
        need_pulumi_cli()  # before anything runs: nothing half-applied
    plan = Plan(cluster, stack_file, paths, tuple(verify_args), tuple(converge_args))
    state_file = state_path(stack_file, cluster)
    summary = UpSummary(stack=str(stack_file), target=kind, state_file=str(state_file))
    state = read_state(state_file)
    stages_state: dict[str, Any] = state.get("stages", {})
    redo = False
    for name in STAGES:
        if name == start:
            redo = True
        digest = sha256_of(*plan.stage_input(name))
        prior = stages_state.get(name, {})
        if not redo and prior.get("status") == "done" and prior.get("input_sha256") == digest:
            summary.stages.append(StageResult(name, "skipped", detail="done before, input unchanged",
                                              input_sha256=digest))
            continue
        redo = True  # everything after a stage that runs runs too
        t0 = time.monotonic()
        result = StageResult(name, "failed", input_sha256=digest)
        summary.stages.append(result)
        print(f"up: stage {name} ({STAGES.index(name) + 1}/{len(STAGES)})", file=out, flush=True)
        try:
            rc = _run_stage(plan, name, out, provision, cli)
        except KeyboardInterrupt:
            result.status, result.exit_code = "interrupted", EXIT_INTERRUPTED
            result.seconds = round(time.monotonic() - t0, 1)
            summary.exit_code = EXIT_INTERRUPTED
            break
        except InputError as exc:
            rc = EXIT_BAD_INPUT
            result.detail = "; ".join(exc.problems)
        result.seconds = round(time.monotonic() - t0, 1)
        result.exit_code = rc
        if rc == EXIT_OK:
            result.status = "done"
            # The digest of what the stage read, taken again: provision writes the outputs the
            # next stage reads, so its own input is unchanged.
            stages_state[name] = {"status": "done", "input_sha256": digest,
                                  "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        else:
            stages_state.pop(name, None)
            summary.exit_code = EXIT_BAD_INPUT if rc == EXIT_BAD_INPUT else (
                EXIT_INTERRUPTED if rc == EXIT_INTERRUPTED else EXIT_CHECK_FAILED)
            if not result.detail:
                result.detail = f"`gpucluster {name}` exited {rc}; its run folder holds the cause"
        write_private_json(state_file, {"version": STATE_VERSION, "stack": str(stack_file), "stages": stages_state})
        if rc != EXIT_OK:
            break
    for name in STAGES[len(summary.stages):]:
        summary.stages.append(StageResult(name, "not-run"))
    return summary


def _run_stage(plan: Plan, name: str, out: TextIO,
               provision: Callable[[Path, StackPaths, TextIO], None] | None,
               cli: Callable[[Sequence[str], TextIO], int]) -> int:
    stack = str(plan.stack_file)
    paths = plan.paths
    if name == "spec":
        return cli(["spec", "validate", "--stack", stack], out)
    if name == "provision":
        if plan.cluster.spec.target.kind == "lab":
            return cli(["lab", "up", "--stack", stack], out)
        (provision or pulumi_provision)(plan.stack_file, paths, out)
        return EXIT_OK
    if name == "inventory":
        return cli(["inventory", "--stack", stack, "--outputs", str(paths.outputs_file),
                    "-o", str(paths.inventory_file)], out)
    if name == "converge":
        return cli(["converge", "--inventory", str(paths.inventory_file), *plan.converge_args], out)
    return cli(["verify", "--inventory", str(paths.inventory_file), *plan.verify_args], out)
