"""`gpucluster plan STACK_FILE [--json]`: what the Pulumi program would create, under mocks."""

from __future__ import annotations

import argparse
import json
from collections import Counter

from gpucluster.cli.spec import stack_args, stack_file
from gpucluster.errors import EXIT_CHECK_FAILED, EXIT_OK
from gpucluster.plan import NOT_A_DIFF, Plan, plan_stack

_KEY_PROPS = (
    "instanceType",
    "size",
    "shape",
    "strategy",
    "placementGroup",
    "placementPartitionNumber",
    "cidrBlock",
    "addressPrefixes",
    "singlePlacementGroup",
    "zone",
    "faultDomain",
    "privateIp",
    "rack",
    "bmcAddress",
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "plan", help="run the Pulumi program under mocks: resources it would create and the policy results",
        epilog="example: gpucluster plan --stack Pulumi.aws-h100.yaml --json",
    )
    stack_args(parser)
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=_plan)


def _summary(inputs: dict[str, object]) -> str:
    parts = [f"{k}={inputs[k]}" for k in _KEY_PROPS if inputs.get(k) not in (None, "", [])]
    nics = inputs.get("networkInterfaces")
    if isinstance(nics, list):
        efa = sum(1 for n in nics if isinstance(n, dict) and str(n.get("interfaceType", "")).startswith("efa"))
        parts.append(f"efaInterfaces={efa}")
    return " ".join(parts)


def _print_text(plan: Plan) -> None:
    print(f"plan: stack {plan.stack!r} ({plan.target}): {len(plan.resources)} resource(s)")
    print(f"note: {NOT_A_DIFF}")
    for r in plan.resources:
        print(f"  + {r.type}  {r.name}  {_summary(dict(r.inputs))}".rstrip())
    counts = Counter(r.type for r in plan.resources)
    print("by type: " + ", ".join(f"{t.split(':')[-1]}={n}" for t, n in sorted(counts.items())))
    nodes = plan.outputs.get("nodes") or []
    print(f"outputs: {len(nodes)} node(s): " + ", ".join(sorted(plan.outputs)))
    print("policy (the same rules stop `pulumi preview` and `pulumi up`: stacks/gate.py):")
    for p in plan.policy:
        print(f"  {p.status.upper():4} {p.rule}: {p.message}")
        for o in p.offenders:
            print(f"         - {o}")


def _plan(args: argparse.Namespace) -> int:
    plan = plan_stack(stack_file(args))
    if args.json:
        print(json.dumps(plan.as_dict(), indent=2, default=str))
    else:
        _print_text(plan)
    return EXIT_CHECK_FAILED if plan.failed else EXIT_OK
