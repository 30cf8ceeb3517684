"""`gpucluster plan` at scale: the runner's depth does not grow with the node count.

Before: every registration pending when the mock monitor pumped the event loop ran inside the
one before it, about ten frames deeper per resource, and a pool of some 100 GPU nodes died with
RecursionError. The timing targets (1,000 and 5,000 GPU nodes) live in bench/bench_plan.py.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpucluster.plan import PlanMocks, plan_stack, run_mocked, target_module
from gpucluster.spec import load_spec

StackFile = Callable[[str, Callable[[dict[str, Any]], None]], Path]
NODES = 200


def _gpu_nodes(count: int) -> Callable[[dict[str, Any]], None]:
    def mutate(config: dict[str, Any]) -> None:
        (pool,) = [p for p in config["gpucluster:node_pools"] if p["name"] == "gpu"]
        pool["count"] = count

    return mutate


def _depth() -> int:
    depth, frame = 0, inspect.currentframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back
    return depth


class _DepthMocks(PlanMocks):
    """The mocks, noting how deep the Python stack is where a registration is handled and where
    each stack output resolves."""

    def __init__(self) -> None:
        super().__init__()
        self.deepest = 0

    def note(self, value: Any) -> Any:
        self.deepest = max(self.deepest, _depth())
        return value

    def new_resource(self, args: Any) -> tuple[str, dict[str, Any]]:
        self.note(None)
        return super().new_resource(args)


def _deepest(path: Path) -> int:
    cluster = load_spec(path)
    mocks = _DepthMocks()

    def program() -> dict[str, Any]:
        outputs = target_module("aws").deploy(cluster)
        return {key: output.apply(mocks.note) for key, output in outputs.items()}

    run_mocked(program, stack=cluster.stack, mocks=mocks)
    return mocks.deepest


def test_a_stack_of_200_gpu_nodes_plans(stack_file: StackFile) -> None:
    plan = plan_stack(stack_file("Pulumi.aws-h100.yaml", _gpu_nodes(NODES)))
    assert plan.failed == []
    gpus = [r for r in plan.by_type("aws:ec2/instance:Instance") if r.tag("gpucluster-pool") == "gpu"]
    assert len(gpus) == NODES
    nodes = plan.outputs["nodes"]
    assert len(nodes) == NODES + 4  # three Ceph nodes and the control plane
    addresses = [n["management_ip"] for n in nodes]
    assert len(set(addresses)) == len(addresses)


def test_registrations_and_outputs_are_as_deep_with_200_gpu_nodes_as_with_2(stack_file: StackFile) -> None:
    small = _deepest(stack_file("Pulumi.aws-h100.yaml", _gpu_nodes(2)))
    large = _deepest(stack_file("Pulumi.aws-h100.yaml", _gpu_nodes(NODES)))
    assert large == small
