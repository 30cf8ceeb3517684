"""Run a CI example's shell commands the way its CI system would, on this machine.

GitHub Actions: each ``run:`` step in its own ``bash --noprofile --norc -eo pipefail`` (the
runner's default on Linux) with the job's and the step's ``env`` (``${{ ... }}`` expressions filled
in from the mocked contexts: secrets, inputs, github, env), what earlier steps appended to
``$GITHUB_ENV``, ``$RUNNER_TEMP``; a step without ``if`` runs only while every step before it
succeeded, one with ``if: always()`` runs whatever happened. ``uses:`` steps are handed to the
caller, which skips them (with the reason) or checks what they would publish.

GitLab CI: the jobs in the order of ``stages``, each only when its ``rules`` admit the pipeline's
source and no earlier stage failed; ``before_script`` (the job's, else ``default``'s) and
``script`` in one ``bash -eo pipefail`` (the job stops at the first failing line), then
``after_script`` in a shell of its own, always, its failure not the job's. Variables: the file's
global ones, then the job's, expanded as GitLab expands them, then the project's CI/CD variables
(``variables``), which win over both as in GitLab.

Any line may be left out with a reason (``skip_line``): a line that needs a cloud or the network.
Anything else the file uses that this runner does not model (another ``if:``, another expression)
raises, so an example cannot drift past the test unnoticed.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

SkipLine = Callable[[str], str | None]


@dataclass
class StepResult:
    name: str
    outcome: str  # success | failure | skipped
    reason: str = ""
    rc: int | None = None
    output: str = ""


@dataclass
class Run:
    steps: list[StepResult] = field(default_factory=list)
    skipped_lines: list[tuple[str, str]] = field(default_factory=list)  # (line, reason)
    env: dict[str, str] = field(default_factory=dict)  # the environment the last step saw

    @property
    def failed(self) -> bool:
        return any(s.outcome == "failure" for s in self.steps)

    def outcome(self, name: str) -> str:
        return next(s.outcome for s in self.steps if s.name == name)


class Unsupported(Exception):
    """The example uses something this runner does not model."""


_EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def github_expression(expr: str, contexts: Mapping[str, Mapping[str, str]]) -> str:
    """``a.b || 'literal'``: the first alternative that is not empty."""
    for alt in (a.strip() for a in expr.split("||")):
        if len(alt) >= 2 and alt[0] == alt[-1] == "'":
            value = alt[1:-1]
        elif re.fullmatch(r"[a-z_]+\.[A-Za-z_][A-Za-z0-9_]*", alt):
            ctx, _, key = alt.partition(".")
            if ctx not in contexts:
                raise Unsupported(f"expression context {ctx!r} in ${{{{ {expr} }}}}")
            value = contexts[ctx].get(key, "")
        else:
            raise Unsupported(f"expression ${{{{ {expr} }}}}")
        if value:
            return value
    return ""


def fill(text: str, contexts: Mapping[str, Mapping[str, str]]) -> str:
    return _EXPR.sub(lambda m: github_expression(m.group(1), contexts), text)


def _bash(script: str, cwd: Path, env: Mapping[str, str], timeout: float) -> tuple[int, str]:
    """The script in a session of its own: past ``timeout``, everything it started is stopped (as a
    runner stops a step), not just the shell."""
    proc = subprocess.Popen(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script], cwd=cwd,
                            env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)
        try:
            output, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
        return 124, output + f"\n(stopped after {timeout:.0f} s)"
    return proc.returncode, output


def _lines(script: str, skip_line: SkipLine, run: Run) -> str:
    out = []
    for line in script.splitlines():
        reason = skip_line(line) if line.strip() else None
        if reason:
            run.skipped_lines.append((line.strip(), reason))
            out.append(f": skipped: {line.strip()!r}")
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def _read_env_file(path: Path) -> dict[str, str]:
    """``NAME=value`` lines and ``NAME<<DELIM`` blocks, as the runner reads $GITHUB_ENV."""
    out: dict[str, str] = {}
    lines = path.read_text().splitlines() if path.is_file() else []
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delim = line.split("<<", 1)
            j = lines.index(delim, i + 1)
            out[name] = "\n".join(lines[i + 1:j])
            i = j + 1
            continue
        name, _, value = line.partition("=")
        if name:
            out[name] = value
        i += 1
    return out


def run_github(path: Path, job: str, *, workdir: Path, base_env: Mapping[str, str],
               secrets: Mapping[str, str], inputs: Mapping[str, str], uses: Callable[[dict[str, Any]], StepResult],
               skip_line: SkipLine, timeout: float = 600) -> Run:
    doc = yaml.safe_load(path.read_text())
    spec = doc["jobs"][job]
    temp = workdir / ".runner-temp"
    temp.mkdir(exist_ok=True)
    github = {"workspace": str(workdir), "run_id": "1", "event_name": "schedule"}
    contexts: dict[str, Mapping[str, str]] = {"secrets": secrets, "inputs": inputs, "github": github,
                                              "runner": {"temp": str(temp)}}
    job_env = {k: fill(str(v), contexts) for k, v in (spec.get("env") or {}).items()}
    carried: dict[str, str] = {}
    run = Run()
    for i, step in enumerate(spec["steps"]):
        name = step.get("name") or step.get("uses") or f"step {i}"
        condition = str(step.get("if", "success()")).strip()
        if condition not in ("success()", "always()"):
            raise Unsupported(f"step {name!r}: if: {condition}")
        if condition == "success()" and run.failed:
            run.steps.append(StepResult(name, "skipped", "an earlier step failed"))
            continue
        env_ctx = {**job_env, **carried}
        contexts["env"] = env_ctx
        if "uses" in step:
            filled = {**step, "with": {k: fill(str(v), contexts) for k, v in (step.get("with") or {}).items()}}
            result = uses(filled)
            result.name = name
            run.steps.append(result)
            continue
        env_file = temp / f"github-env-{i}"
        env_file.write_text("")
        step_env = {k: fill(str(v), contexts) for k, v in (step.get("env") or {}).items()}
        env = {**base_env, "CI": "true", "GITHUB_ACTIONS": "true", "GITHUB_WORKSPACE": str(workdir),
               "RUNNER_TEMP": str(temp), "GITHUB_ENV": str(env_file), **env_ctx, **step_env}
        script = _lines(fill(step["run"], contexts), skip_line, run)
        rc, output = _bash(script, workdir, env, timeout)
        run.steps.append(StepResult(name, "success" if rc == 0 else "failure", rc=rc, output=output))
        carried.update(_read_env_file(env_file))
        run.env = env
    return run


_RULE = re.compile(r'^\$CI_PIPELINE_SOURCE == "([a-z_]+)"$')


def _admitted(job: Mapping[str, Any], source: str) -> bool:
    rules = job.get("rules")
    if rules is None:
        return True
    for rule in rules:
        m = _RULE.match(str(rule.get("if", "")))
        if not m or set(rule) != {"if"}:
            raise Unsupported(f"rule {rule!r}")
        if m.group(1) == source:
            return True
    return False


def _expand(value: str, env: Mapping[str, str]) -> str:
    return re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", lambda m: env.get(m.group(1), m.group(0)), value)


def run_gitlab(path: Path, *, workdir: Path, base_env: Mapping[str, str], variables: Mapping[str, str],
               source: str = "schedule", skip_line: SkipLine, timeout: float = 600) -> Run:
    doc = yaml.safe_load(path.read_text())
    default = doc.get("default") or {}
    reserved = {"stages", "variables", "default", "include", "workflow"}
    jobs = {k: v for k, v in doc.items() if k not in reserved and not k.startswith(".")}
    env: dict[str, str] = {**base_env, "CI": "true", "GITLAB_CI": "true", "CI_PROJECT_DIR": str(workdir),
                           "CI_PIPELINE_SOURCE": source}
    for k, v in (doc.get("variables") or {}).items():
        env[k] = _expand(str(v), env)
    run = Run()
    stage_failed = False
    for stage in doc["stages"]:
        failed_here = False
        for name, job in jobs.items():
            if job.get("stage", "test") != stage:
                continue
            if not _admitted(job, source):
                run.steps.append(StepResult(name, "skipped", f"rules: not for a {source} pipeline"))
                continue
            if stage_failed or any(run.outcome(n) != "success" for n in job.get("needs", [])
                                   if any(s.name == n for s in run.steps)):
                run.steps.append(StepResult(name, "skipped", "an earlier stage failed"))
                continue
            job_env = dict(env)
            for token in job.get("id_tokens") or {}:
                job_env[token] = "mock-oidc-token"
            for k, v in (job.get("variables") or {}).items():
                job_env[k] = _expand(str(v), job_env)
            job_env.update(variables)  # the project's CI/CD variables win over the file's (GitLab's order)
            before = job.get("before_script", default.get("before_script", []))
            script = _lines("\n".join([*before, *job["script"]]), skip_line, run)
            rc, output = _bash(script, workdir, job_env, timeout)
            run.steps.append(StepResult(name, "success" if rc == 0 else "failure", rc=rc, output=output))
            after = job.get("after_script", default.get("after_script"))
            if after:
                arc, aout = _bash(_lines("\n".join(after), skip_line, run), workdir, job_env, timeout)
                run.steps.append(StepResult(f"{name}:after_script", "success" if arc == 0 else "failure",
                                            rc=arc, output=aout))
                # after_script's failure is not the job's (GitLab marks the job by its script alone).
                run.steps[-1].outcome = "success" if arc == 0 else "after-script-failed"
            run.env = job_env
            failed_here = failed_here or rc != 0
        stage_failed = stage_failed or failed_here
    return run
