"""Per-check results and the per-node verdict built from them.

A node passes when none of its checks failed or errored; skipped checks (absent hardware,
a tool the profile does not need) are listed with their reasons and never count as passes.
A node with no check run at all is not a pass either.

Checks that concern the cluster as a whole (Kubernetes nodes Ready, a GPU pod) run once, not per
node: their results carry the node :data:`CLUSTER` and make a row of their own beside the nodes'.
That row fails when one of them failed or errored. When every one of them was skipped (no
kubeconfig given, a target that deploys no Kubernetes) the row reads ``skipped``, never ``pass``:
nothing was verified. It fails the run only when asked (``verify --fail-on-skipped-cluster``, for
CI that expects Kubernetes), since a cluster-level check is the only kind that has nothing to check
on a cluster without it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Verdict = Literal["pass", "fail", "skipped"]
Outcome = Literal["passed", "failed", "skipped", "error"]
OUTCOMES: tuple[Outcome, ...] = ("passed", "failed", "skipped", "error")

# The row of the cluster-level checks: in parentheses, so that no host of an inventory can share it.
CLUSTER = "(cluster)"


@dataclass(frozen=True)
class CheckResult:
    node: str
    check_id: str
    outcome: Outcome
    message: str = ""
    figures: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0
    test: str = ""
    param: str | None = None  # e.g. the service name for a per-service check
    # What the failure shares with others of the same root cause (a slow node, a link, an
    # unreachable node): results with the same key are one finding in the reports.
    cause: str = ""
    log: str = ""  # the check's own log in the run folder (relative path), written for failures

    @property
    def label(self) -> str:
        return f"{self.check_id}[{self.param}]" if self.param else self.check_id

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(d: dict[str, Any]) -> CheckResult:
        outcome = d["outcome"]
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}")
        return CheckResult(
            node=str(d["node"]), check_id=str(d["check_id"]), outcome=outcome, message=str(d.get("message", "")),
            figures=dict(d.get("figures") or {}), duration_s=float(d.get("duration_s", 0.0)),
            test=str(d.get("test", "")), param=d.get("param"), cause=str(d.get("cause", "")),
            log=str(d.get("log", "")),
        )


@dataclass(frozen=True)
class NodeVerdict:
    node: str
    verdict: Verdict  # "skipped" only for the CLUSTER row, every check of it skipped
    passed: tuple[CheckResult, ...]
    failed: tuple[CheckResult, ...]  # failed and errored checks
    skipped: tuple[CheckResult, ...]
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "verdict": self.verdict,
            "reason": self.reason,
            "passed": [r.label for r in self.passed],
            "failed": [{"check": r.label, "message": r.message, "figures": r.figures} for r in self.failed],
            "skipped": [{"check": r.label, "reason": r.message} for r in self.skipped],
        }


MESSAGE_LIMIT = 400  # characters of a check's message in the reports; the whole text is in its log


def shorten(text: str, limit: int = MESSAGE_LIMIT, rest: str = "") -> str:
    """``text`` on one line, at most about ``limit`` characters, cut between words (never inside a
    flag, a path or a number) and saying where the rest is: ``rest`` names the file that holds it."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat.rfind(" ", 0, limit + 1)
    # One token longer than the limit is left out whole, and the text says where it is.
    head = flat[:cut] if cut > 0 else ""
    where = f"the rest in {rest}" if rest else f"{len(flat) - len(head)} more characters"
    return f"{head.rstrip(' ,;:')} … ({where})".lstrip()


def node_verdicts(results: list[CheckResult], nodes: list[str]) -> list[NodeVerdict]:
    """One verdict per node in ``nodes`` order (nodes with no results fail: nothing was checked),
    then the :data:`CLUSTER` row when any cluster-level check ran."""
    by_node: dict[str, list[CheckResult]] = {n: [] for n in nodes}
    for r in sorted(results, key=lambda r: r.node == CLUSTER):
        by_node.setdefault(r.node, []).append(r)
    out: list[NodeVerdict] = []
    for name, rs in by_node.items():
        passed = tuple(r for r in rs if r.outcome == "passed")
        failed = tuple(r for r in rs if r.outcome in ("failed", "error"))
        skipped = tuple(r for r in rs if r.outcome == "skipped")
        if failed:
            out.append(NodeVerdict(name, "fail", passed, failed, skipped, f"{len(failed)} check(s) failed"))
        elif name == CLUSTER and not passed:
            why = "; ".join(sorted({r.message for r in skipped if r.message}))
            out.append(NodeVerdict(name, "skipped", passed, failed, skipped,
                                   "every cluster-level check skipped" + (f": {why}" if why else "")))
        elif not passed:
            out.append(NodeVerdict(name, "fail", passed, failed, skipped, "no check passed (nothing was verified)"))
        else:
            out.append(NodeVerdict(name, "pass", passed, failed, skipped))
    return out


def exit_code(verdicts: list[NodeVerdict], fail_on_skipped_cluster: bool = False) -> int:
    """0 when every row passed (a skipped CLUSTER row too, unless ``fail_on_skipped_cluster``), else 1."""
    def ok(v: NodeVerdict) -> bool:
        return v.verdict == "pass" or (v.verdict == "skipped" and not fail_on_skipped_cluster)

    return 0 if verdicts and all(ok(v) for v in verdicts) else 1
