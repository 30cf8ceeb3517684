"""Hostile and huge inputs to the loaders: each is refused or handled fast, in bounded memory.

Targets: every refusal within 2 s; the inventory of a spec at the node limit (MAX_NODES)
within 30 s. Each case runs in a child process with a kill timeout, so a regression (a
segfault, a hang, an exponential blow-up) is reported as a figure instead of stopping the
runner; the child reports its own time and peak memory.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from tests.unit.bounded import big_aws_stack  # noqa: E402

REFUSAL_TARGET_S = 2.0
INVENTORY_TARGET_S = 30.0
KILL_AFTER_S = 300


def _lab_with(directory: Path, text: str) -> Path:
    path = directory / "Pulumi.lab.yaml"
    path.write_text(text)
    return path


def _expect_refusal(stack: Path) -> str:
    from gpucluster.errors import InputError
    from gpucluster.spec import load_spec

    try:
        load_spec(stack)
    except InputError as exc:
        return f"refused: {len(exc.problems)} line(s): {exc.problems[0][:160]}"
    return "ACCEPTED"


# --- cases: each builds its input in `directory`, then returns (work, label) -----------------------


def case_million_node_spec(directory: Path) -> tuple[Callable[[], str], str]:
    stack = big_aws_stack(directory, pools=50, per_pool=20_000)
    return (lambda: _expect_refusal(stack)), "spec of 50 pools x 20,000 nodes (10^6 nodes)"


def case_100k_monitors(directory: Path) -> tuple[Callable[[], str], str]:
    import yaml

    doc = yaml.safe_load((REPO / "Pulumi.lab.yaml").read_text())
    doc["config"]["gpucluster:storage"]["monitors"] = ["stor-1"] * 100_001
    stack = _lab_with(directory, yaml.safe_dump(doc))
    return (lambda: _expect_refusal(stack)), "lab spec listing 100,001 monitors (one name repeated)"


def case_100k_unknown_monitors(directory: Path) -> tuple[Callable[[], str], str]:
    import yaml

    doc = yaml.safe_load((REPO / "Pulumi.lab.yaml").read_text())
    doc["config"]["gpucluster:storage"]["monitors"] = [f"mon-{i}" for i in range(100_001)]
    stack = _lab_with(directory, yaml.safe_dump(doc))
    return (lambda: _expect_refusal(stack)), "lab spec listing 100,001 unknown monitors"


def case_deep_yaml(directory: Path) -> tuple[Callable[[], str], str]:
    n = 30_000
    stack = _lab_with(directory, "config:\n  gpucluster:name: " + "[" * n + "]" * n + "\n")
    return (lambda: _expect_refusal(stack)), "60 KB stack file nested 30,000 deep (segfaulted libyaml's composer)"


def case_alias_bomb(directory: Path) -> tuple[Callable[[], str], str]:
    lines = ['  lol0: &a0 "lol"'] + [
        f"  lol{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)
    ]
    text = (REPO / "Pulumi.lab.yaml").read_text().replace("      count: 2\n", "      count: *a9\n", 1)
    stack = _lab_with(directory, text.replace("config:\n", "config:\n" + "\n".join(lines) + "\n", 1))
    return (lambda: _expect_refusal(stack)), "billion laughs (10^9 after expansion) in a count"


def case_outputs_over_the_limit(directory: Path) -> tuple[Callable[[], str], str]:
    from gpucluster.spec.cluster import MAX_NODES

    data = json.loads((REPO / "tests" / "golden" / "outputs" / "lab.json").read_text())
    node = data["nodes"][0]
    data["nodes"] = [{**node, "name": f"gpu-{i + 1}"} for i in range(MAX_NODES + 1)]
    path = directory / "outputs.json"
    path.write_text(json.dumps(data))

    work = _outputs_refusal(path)
    return work, f"stack outputs of {MAX_NODES + 1:,} nodes ({path.stat().st_size:,} bytes)"


def _outputs_refusal(path: Path) -> Callable[[], str]:
    def work() -> str:
        from gpucluster.errors import InputError
        from gpucluster.outputs import load_outputs

        try:
            load_outputs(path)
        except InputError as exc:
            return f"refused: {exc.problems[0][:160]}"
        return "ACCEPTED"

    return work


def case_deep_json(directory: Path) -> tuple[Callable[[], str], str]:
    data = json.loads((REPO / "tests" / "golden" / "outputs" / "lab.json").read_text())
    data["extra"] = "@@"
    path = directory / "outputs.json"
    path.write_text(json.dumps(data).replace('"@@"', "[" * 100_000 + "]" * 100_000))

    work = _outputs_refusal(path)
    return work, "outputs JSON nested 100,000 deep (RecursionError before)"


def case_inventory_at_the_limit(directory: Path) -> tuple[Callable[[], str], str]:
    from gpucluster.outputs import build_outputs
    from gpucluster.spec import load_spec
    from gpucluster.spec.cluster import MAX_NODES

    stack = big_aws_stack(directory, pools=10, per_pool=MAX_NODES // 10)
    outputs = directory / "outputs.json"
    outputs.write_text(json.dumps(build_outputs(load_spec(stack), ssh_user="ubuntu")))

    def work() -> str:
        from gpucluster.inventory import build_inventory, write_inventory
        from gpucluster.outputs import load_outputs

        target = directory / "inventory.yml"
        write_inventory(build_inventory(load_spec(stack), load_outputs(outputs)), target)
        return f"wrote {target.stat().st_size:,} bytes from {outputs.stat().st_size:,} bytes of outputs"

    return work, f"spec + outputs + inventory of {MAX_NODES:,} nodes (the limit)"


CASES: dict[str, float] = {
    "million_node_spec": REFUSAL_TARGET_S,
    "100k_monitors": REFUSAL_TARGET_S,
    "100k_unknown_monitors": REFUSAL_TARGET_S,
    "deep_yaml": REFUSAL_TARGET_S,
    "alias_bomb": REFUSAL_TARGET_S,
    "outputs_over_the_limit": REFUSAL_TARGET_S,
    "deep_json": REFUSAL_TARGET_S,
    "inventory_at_the_limit": INVENTORY_TARGET_S,
}


def _child(name: str) -> None:
    """Run one case in this process; print its figures as JSON."""
    with tempfile.TemporaryDirectory() as tmp:
        work, what = globals()[f"case_{name}"](Path(tmp))
        started = time.perf_counter()
        outcome = work()
        seconds = time.perf_counter() - started
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"what": what, "outcome": outcome, "seconds": round(seconds, 3), "peak_rss_mib": peak_kib >> 10}))


def run() -> dict[str, Any]:
    cases: dict[str, Any] = {}
    met = True
    for name, target in CASES.items():
        try:
            proc = subprocess.run([sys.executable, __file__, name], capture_output=True, text=True,
                                  timeout=KILL_AFTER_S, cwd=REPO)
        except subprocess.TimeoutExpired:
            cases[name] = {"outcome": f"killed after {KILL_AFTER_S} s", "target_s": target}
            met = False
            continue
        if proc.returncode != 0:
            cases[name] = {"outcome": f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}", "target_s": target}
            met = False
            continue
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        result["target_s"] = target
        cases[name] = result
        ok = result["seconds"] < target and result["outcome"] != "ACCEPTED"
        met = met and ok
    return {
        "what": "hostile and huge spec/outputs inputs: refusal time, and the inventory at the node limit",
        "cases": cases,
        "target": f"each refusal < {REFUSAL_TARGET_S} s; inventory at the node limit < {INVENTORY_TARGET_S} s",
        "met": met,
    }


if __name__ == "__main__":
    _child(sys.argv[1])
