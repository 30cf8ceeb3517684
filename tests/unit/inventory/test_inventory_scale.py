"""Scale: a spec or stack outputs with a huge node or monitor count is refused or handled in linear time.

Before: an inventory of 10^6 nodes took 127 s and 5.7 GB, and 100,000 monitors took more
than a minute in a quadratic duplicate check. Each case runs the command in a child process
with a generous kill timeout, so pathological behaviour fails the test; the timing targets
live in bench/bench_loading.py, not here.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucluster.cli import main
from gpucluster.spec.cluster import MAX_NODES
from gpucluster.spec.loader import MAX_PROBLEMS
from tests.unit.bounded import KILL_AFTER_S, big_aws_stack, cli, limit_memory

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[3]
LAB = REPO / "Pulumi.lab.yaml"
GOLDEN = REPO / "tests" / "golden" / "outputs"


def test_a_million_node_spec_is_refused_with_the_limit(tmp_path: Path) -> None:
    stack = big_aws_stack(tmp_path, pools=50, per_pool=20_000)
    proc = cli("spec", "validate", str(stack))
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr[-2000:]
    assert "gpucluster.node_pools: " in lines[0] and f"at most {MAX_NODES:,}" in lines[0], lines[0]


def test_the_node_limit_itself_is_accepted(tmp_path: Path) -> None:
    from gpucluster.spec.loader import read_stack_file, spec_mapping
    from gpucluster.spec.models import ClusterSpec
    from gpucluster.spec.rules import _size

    def spec(per_pool: int, extra: int) -> ClusterSpec:
        stack = big_aws_stack(tmp_path, pools=10, per_pool=per_pool)
        mapping = spec_mapping(read_stack_file(stack), str(stack))
        mapping["node_pools"][0]["count"] += extra
        return ClusterSpec.model_validate(mapping)

    assert _size(spec(MAX_NODES // 10, 0)) == []
    (line,) = _size(spec(MAX_NODES // 10, 1))
    assert line.startswith(f"gpucluster.node_pools: the pools' counts add up to {MAX_NODES + 1:,} nodes"), line


def test_a_10k_node_spec_gives_its_inventory(tmp_path: Path) -> None:
    # The whole hand-off at scale, so a quadratic step anywhere in it runs past the kill timeout.
    # bench/bench_loading.py times it at the node limit itself.
    nodes = 10_000
    stack = big_aws_stack(tmp_path, pools=10, per_pool=nodes // 10)
    script = (
        "import json, sys\n"
        "from gpucluster.outputs import build_outputs\n"
        "from gpucluster.spec import load_spec\n"
        "print(json.dumps(build_outputs(load_spec(sys.argv[1]), ssh_user='ubuntu')))\n"
    )
    built = subprocess.run([sys.executable, "-c", script, str(stack)], capture_output=True, text=True,
                           timeout=KILL_AFTER_S, cwd=REPO, preexec_fn=limit_memory, check=True)
    outputs = tmp_path / "outputs.json"
    outputs.write_text(built.stdout)
    proc = cli("inventory", "--outputs", str(outputs), "--stack", str(stack), "-o", str(tmp_path / "inv.yml"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"{nodes} host(s)" in proc.stderr


def _outputs_with_nodes(count: int) -> str:
    data = json.loads((GOLDEN / "lab.json").read_text())
    node = data["nodes"][0]
    data["nodes"] = [{**node, "name": f"gpu-{i + 1}"} for i in range(count)]
    return json.dumps(data)


def test_outputs_with_more_nodes_than_the_limit_are_refused(tmp_path: Path) -> None:
    outputs = tmp_path / "outputs.json"
    outputs.write_text(_outputs_with_nodes(MAX_NODES + 1))
    proc = cli("inventory", "--outputs", str(outputs), "--stack", str(LAB), "-o", str(tmp_path / "inv.yml"))
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "outputs.nodes: " in lines[0] and f"at most {MAX_NODES:,}" in lines[0], lines
    assert not (tmp_path / "inv.yml").exists()


def _lab_with_storage(directory: Path, **storage: Any) -> Path:
    doc: dict[str, Any] = copy.deepcopy(yaml.safe_load(LAB.read_text()))
    doc["config"]["gpucluster:storage"].update(storage)
    path = directory / "Pulumi.lab.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.mark.parametrize("field", ["monitors", "managers", "mds"])
def test_100k_repeated_ceph_daemons_are_checked_in_linear_time(tmp_path: Path, field: str) -> None:
    count = 100_001
    stack = _lab_with_storage(tmp_path, **{field: ["stor-1"] * count})
    proc = cli("spec", "validate", str(stack))
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"gpucluster.storage.{field}: node 'stor-1' is listed twice" in proc.stderr, proc.stderr[-2000:]


def test_100k_unknown_monitors_give_a_capped_list_of_problems(tmp_path: Path) -> None:
    count = 100_001
    stack = _lab_with_storage(tmp_path, monitors=[f"mon-{i}" for i in range(count)])
    proc = cli("spec", "validate", str(stack))
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.splitlines()
    assert len(lines) == MAX_PROBLEMS + 1, len(lines)
    assert "gpucluster.storage.monitors[0]: no node named 'mon-0'" in lines[0]
    assert "more problem(s)" in lines[-1], lines[-1]


def test_100k_outputs_nodes_with_one_name_are_checked_in_linear_time(tmp_path: Path) -> None:
    data = json.loads((GOLDEN / "lab.json").read_text())
    data["nodes"] = data["nodes"] * (MAX_NODES // len(data["nodes"]))
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps(data))
    proc = cli("inventory", "--outputs", str(outputs), "--stack", str(LAB), "-o", str(tmp_path / "inv.yml"))
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "outputs.nodes[3].name: duplicate node 'gpu-1' (also nodes[0])" in proc.stderr
    assert len(proc.stderr.splitlines()) <= MAX_PROBLEMS + 1


def test_problem_lines_are_capped_in_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack = _lab_with_storage(tmp_path, monitors=[f"mon-{i}" for i in range(2 * MAX_PROBLEMS + 1)])
    assert main(["spec", "validate", str(stack)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == MAX_PROBLEMS + 1
    assert lines[-1].endswith(f"and {MAX_PROBLEMS + 1} more problem(s)"), lines[-1]


def test_30k_misplaced_secrets_are_reported_in_linear_time(tmp_path: Path) -> None:
    # Each misplaced secret also fails validation; matching those errors to the secrets must not be
    # quadratic (30,001 squared string comparisons run far past the kill timeout).
    secrets = ", ".join(["{secure: v1:c2VjcmV0}"] * 30_001)
    stack = tmp_path / "Pulumi.lab.yaml"
    stack.write_text(LAB.read_text().replace("    monitors: [stor-1]\n", f"    monitors: [{secrets}]\n", 1))
    proc = cli("spec", "validate", str(stack))
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.splitlines()
    assert len(lines) == MAX_PROBLEMS + 1, len(lines)
    assert "gpucluster.storage.monitors[0]: a Pulumi secret is not accepted here" in lines[0], lines[0]
    assert "c2VjcmV0" not in proc.stderr
