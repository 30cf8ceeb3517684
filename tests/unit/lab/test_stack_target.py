"""stacks/targets/lab.py under Pulumi mocks: the exports are the outputs every target has."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulumi
import pytest

from gpucluster.lab.lab import lab_inputs
from gpucluster.outputs import parse_outputs
from gpucluster.spec import load_spec

REPO = Path(__file__).resolve().parents[3]


class _Mocks(pulumi.runtime.Mocks):
    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        # The dynamic provider is not run: the lab resource's outputs are its inputs.
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict[str, Any]:
        return {}


@pytest.fixture(autouse=True)
def _mocked() -> None:
    pulumi.runtime.set_mocks(_Mocks(), preview=False)


@pulumi.runtime.test
def test_deploy_exports_the_outputs_of_every_target() -> pulumi.Output[None]:
    from stacks.targets import lab as target

    cluster = load_spec(REPO / "Pulumi.lab.yaml")
    exports = target.deploy(cluster)
    want = lab_inputs(cluster).outputs
    assert sorted(exports) == sorted(want)

    def check(values: list[Any]) -> None:
        def no_nulls(v: Any) -> Any:
            if isinstance(v, dict):
                return {k: no_nulls(x) for k, x in v.items() if x is not None}
            return [no_nulls(x) for x in v] if isinstance(v, list) else v

        got = no_nulls(dict(zip(exports, values, strict=True)))
        want_ = no_nulls(want)
        assert got == want_
        assert parse_outputs(got, "exports").target == "lab"

    return pulumi.Output.all(*exports.values()).apply(check)
