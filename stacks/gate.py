"""The policy rules, enforced by the Pulumi program itself: no `pulumi up` can skip them.

:class:`PolicyGate` registers a stack transform (``pulumi.runtime.register_resource_transform``).
The engine calls a stack transform for every resource the program registers, components
included, with the resource's input properties, *before* it sends the resource on to be
created or updated (pulumi/pulumi ``pkg/resource/deploy/source_eval.go``, RegisterResource:
"Before we calculate anything else run the transformations"; Pulumi docs, "Resource option:
transforms": "Each transform is a callback that gets invoked by the Pulumi engine",
https://www.pulumi.com/docs/iac/concepts/resources/options/transforms/). A transform that raises
fails that registration, so the resource is never created.

Rules are judged at three moments (``stacks.policy.Rule.scope``):

* ``resource`` rules (IMDSv2, disk encryption, public IPs) on each resource alone, in the
  transform: the offending resource is refused before it exists, in ``pulumi preview`` and in
  ``pulumi up`` alike, ``--skip-preview`` included;
* ``stack`` rules (open management ports, overlapping subnets) over everything registered so
  far, in the transform: a violation only grows as resources are added, so the resource that
  completes it (the second of two half-internet rules) is the one refused;
* ``complete`` rules (placement, Ceph replication, failure domains) once every resource the
  program constructed has registered: :meth:`PolicyGate.seal` waits for all their URNs. In
  ``pulumi up`` this verdict comes in the preview the command runs first, so a failing stack
  is stopped before anything is created; with ``--skip-preview`` it stops the update at the end.

Every failure is logged (``pulumi.log.error``, one line per offender) and raised as
``pulumi.RunError``; the same rule functions back ``gpucluster plan`` and the unit tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn

import pulumi

from gpucluster.plan import PolicyResult, Resource, plain_inputs

from . import policy


class PolicyGate:
    """Judges the resources of one program run as the engine registers them."""

    def __init__(self, rules: Sequence[policy.Rule] = policy.RULES) -> None:
        self.rules = tuple(rules)
        self.records: list[Resource] = []
        self.results: list[PolicyResult] = []
        self._constructed: list[pulumi.Resource] = []

    def install(self) -> None:
        """Register the gate before the program constructs any resource (transforms apply to
        resources registered after them)."""
        # Transforms hand over inputs but not the resource object; a (legacy) transformation sees
        # every object as it is constructed, so seal() can wait for each one's registration.
        pulumi.runtime.register_stack_transformation(self._constructed_hook)
        pulumi.runtime.register_resource_transform(self.judge)

    def _constructed_hook(self, args: pulumi.ResourceTransformationArgs) -> None:
        self._constructed.append(args.resource)

    def judge(self, args: pulumi.ResourceTransformArgs) -> None:
        """The stack transform: record the resource; refuse it if it breaks a rule that can be
        judged now. Returns None (the inputs go on unchanged)."""
        record = Resource(
            type=args.type_,
            name=args.name,
            id="",
            urn="",
            parent=None,
            custom=args.custom,
            inputs=plain_inputs(args.props),
        )
        candidates = [*self.records, record]
        failed = []
        for rule in self.rules:
            if rule.scope == "resource":
                result = rule.check([record])
            elif rule.scope == "stack" and rule.reads_type(record.type):
                result = rule.check(candidates)
            else:
                continue
            if result.status == "fail":
                failed.append(result)
        if failed:
            _refuse(f"{record.type} {record.name} breaks the cluster policy and was not created", failed)
        self.records.append(record)
        return None

    def seal(self) -> pulumi.Output[list[PolicyResult]]:
        """Judge every rule once every resource constructed so far has registered. Call it after
        the program has constructed its resources (ours construct none inside an apply)."""
        urns = [resource.urn for resource in self._constructed]
        return pulumi.Output.all(*urns).apply(lambda _: self.verdict())

    def verdict(self) -> list[PolicyResult]:
        self.results = [rule.check(self.records) for rule in self.rules]
        # A warning (an image looked up rather than pinned) lets the run go on, said once, at the end.
        for result in self.results:
            if result.status == "warn":
                pulumi.log.warn(f"policy {result.rule}: {result.message}: " + "; ".join(result.offenders))
        failed = [r for r in self.results if r.status == "fail"]
        if failed:
            _refuse(f"the stack breaks the cluster policy ({len(self.records)} resources judged)", failed)
        return self.results


def _refuse(headline: str, failed: Sequence[PolicyResult]) -> NoReturn:
    lines = [headline]
    for result in failed:
        lines.append(f"  {result.rule}: {result.message}")
        lines.extend(f"    - {offender}" for offender in result.offenders)
    for result in failed:
        pulumi.log.error(f"policy {result.rule}: {result.message}: " + "; ".join(result.offenders))
    raise pulumi.RunError("\n".join(lines))
