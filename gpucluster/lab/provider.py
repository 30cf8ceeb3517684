"""The lab's node lifecycle as a Pulumi dynamic provider.

``pulumi up --stack lab`` creates one ``LabCluster`` resource whose provider calls the same
:func:`gpucluster.lab.lab.up` and :func:`~gpucluster.lab.lab.down` as ``gpucluster lab up|down``.
Its inputs are the lab plan plus the stack outputs derived from the spec, so the stack exports
exactly what every other target exports; `gpucluster inventory` makes the inventory from them.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, Resource, ResourceProvider, UpdateResult

from gpucluster.lab.host import LabError
from gpucluster.lab.lab import LabInputs, LabResult, down, up
from gpucluster.lab.layout import LabLayout

INPUT_KEYS = ("plan", "outputs")


def _progress(line: str) -> None:
    # The provider runs in Pulumi's plugin process: stderr reaches `pulumi up`'s diagnostics.
    print(f"lab: {line}", file=sys.stderr, flush=True)


def inputs_from_props(props: dict[str, Any]) -> LabInputs:
    return LabInputs(LabLayout.from_dict(props["plan"]), plain_values(props["outputs"]))


def plain_values(value: Any) -> Any:
    """Pulumi returns whole numbers as floats; give them back as ints so outputs keep their shape."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: plain_values(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain_values(v) for v in value]
    return value


def props_from_inputs(inputs: LabInputs) -> dict[str, Any]:
    return {"plan": inputs.plan.to_dict(), "outputs": inputs.outputs}


def lab_diff(olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
    """Replace when the lab's networks or base change; update when only its nodes or outputs do."""
    old_in = {k: plain_values(olds.get(k)) for k in INPUT_KEYS}
    new_in = {k: plain_values(news.get(k)) for k in INPUT_KEYS}
    if old_in == new_in:
        return DiffResult(changes=False, replaces=[], stables=["plan"])
    try:
        old_plan = LabLayout.from_dict(old_in["plan"])
        new_plan = LabLayout.from_dict(new_in["plan"])
    except (TypeError, KeyError):
        return DiffResult(changes=True, replaces=["plan"], delete_before_replace=True)
    if old_plan.lab_level() != new_plan.lab_level():
        # Same host objects (bridges, addresses): the old lab must go before the new one comes.
        return DiffResult(changes=True, replaces=["plan"], delete_before_replace=True)
    return DiffResult(changes=True, replaces=[])


def _outs(inputs: LabInputs, result: LabResult) -> dict[str, Any]:
    if result.failed:
        names = ", ".join(f"{n.name} ({n.system_state})" for n in result.failed)
        raise LabError(f"lab {result.name!r}: node(s) did not come up: {names}; the others are up")
    return {**props_from_inputs(inputs), "nodes_up": [n.name for n in result.nodes]}


class LabProvider(ResourceProvider):
    def create(self, props: dict[str, Any]) -> CreateResult:
        inputs = inputs_from_props(props)
        result = up(inputs, progress=_progress)
        return CreateResult(id_=inputs.plan.name, outs=_outs(inputs, result))

    def diff(self, _id: str, _olds: dict[str, Any], _news: dict[str, Any]) -> DiffResult:
        return lab_diff(_olds, _news)

    def update(self, _id: str, _olds: dict[str, Any], _news: dict[str, Any]) -> UpdateResult:
        inputs = inputs_from_props(_news)
        return UpdateResult(outs=_outs(inputs, up(inputs, progress=_progress)))

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        return ReadResult(id_=id_, outs=props)

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        plan = LabLayout.from_dict(_props["plan"])
        down(Path(plan.state_root), plan.name, progress=_progress)


class LabCluster(Resource):
    """One lab: every node, network, mount and process of ``gpucluster lab up``."""

    outputs: pulumi.Output[dict[str, Any]]
    nodes_up: pulumi.Output[list[str]]

    def __init__(self, name: str, inputs: LabInputs, opts: pulumi.ResourceOptions | None = None) -> None:
        props: dict[str, Any] = {**props_from_inputs(inputs), "nodes_up": None}
        super().__init__(LabProvider(), name, props, opts)
