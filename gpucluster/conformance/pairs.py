"""Pair search: all-reduce between pairs of nodes, and naming the slow node.

Pairs are neighbours on a ring (``(n0,n1), (n1,n2), ... (nk,n0)``), so every node is in two
pairs and the pairs run in two or three rounds of disjoint pairs. A node that passes any pair
is proven good. A node is named **slow** when none of its pairs passed and at least one of
its failing pairs was with a proven-good node: with three or more nodes, the one in every slow
pair while its peers pass with others. A failing pair whose partner is named slow is the
partner's fault. What is left is reported, never passed: ``pair_slow`` (the two nodes have no
other peer, e.g. a cluster of two: the pair is slow and nothing tells which side, so both are
marked and neither is blamed), ``undetermined`` (no pair of the node passed and no partner is
proven good, e.g. every pair failed) and ``suspect`` (a failing pair between two nodes that both
pass elsewhere: the link between them, or a transient).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Pair = tuple[str, str]
Status = Literal["ok", "slow", "pair_slow", "undetermined", "suspect", "untested"]


def ring_pairs(names: list[str]) -> list[Pair]:
    if len(names) < 2:
        return []
    if len(names) == 2:
        return [(names[0], names[1])]
    return [(names[i], names[(i + 1) % len(names)]) for i in range(len(names))]


def rounds(pairs: list[Pair]) -> list[list[Pair]]:
    """Greedy rounds of disjoint pairs: a node is in one pair at a time."""
    left = list(pairs)
    out: list[list[Pair]] = []
    while left:
        busy: set[str] = set()
        this: list[Pair] = []
        for p in list(left):
            if p[0] not in busy and p[1] not in busy:
                this.append(p)
                busy.update(p)
                left.remove(p)
        out.append(this)
    return out


@dataclass(frozen=True)
class PairResult:
    a: str
    b: str
    ok: bool
    busbw_gbps: float | None
    message: str = ""
    reached_bytes: int | None = None  # where a budget cut the pair's run: the largest size it measured


@dataclass
class NodePairs:
    node: str
    status: Status
    message: str
    pairs: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class PairSearch:
    slow: list[str]
    nodes: dict[str, NodePairs]
    results: list[PairResult]

    def to_json(self) -> dict[str, Any]:
        return {"slow": self.slow, "nodes": {k: asdict(v) for k, v in self.nodes.items()},
                "results": [asdict(r) for r in self.results]}

    @staticmethod
    def from_json(d: dict[str, Any]) -> PairSearch:
        return PairSearch(slow=list(d["slow"]), nodes={k: NodePairs(**v) for k, v in d["nodes"].items()},
                          results=[PairResult(**r) for r in d["results"]])


def _fmt(bw: float | None) -> str:
    return "n/a" if bw is None else f"{bw:.3f} GB/s"


def find_slow(nodes: list[str], results: list[PairResult]) -> PairSearch:
    mine: dict[str, list[PairResult]] = {n: [] for n in nodes}
    for r in results:
        mine.setdefault(r.a, []).append(r)
        mine.setdefault(r.b, []).append(r)

    def partner(r: PairResult, n: str) -> str:
        return r.b if r.a == n else r.a

    def alone_together(r: PairResult) -> bool:
        """Neither node of the pair has another peer: nothing can tell which side is slow."""
        return all({partner(x, n) for x in mine.get(n, [])} == {partner(r, n)} for n in (r.a, r.b))

    good = {n for r in results if r.ok for n in (r.a, r.b)}
    slow = sorted(
        n for n, rs in mine.items()
        if rs and not any(r.ok for r in rs) and any(partner(r, n) in good for r in rs if not r.ok)
    )
    out: dict[str, NodePairs] = {}
    for n in nodes:
        rs = mine.get(n, [])
        figures = [{"peer": partner(r, n), "ok": r.ok, "busbw_gbps": r.busbw_gbps, "reached_bytes": r.reached_bytes,
                    "message": r.message} for r in rs]
        failing = [r for r in rs if not r.ok]
        if not rs:
            out[n] = NodePairs(n, "untested", "in no pair (fewer than two nodes)", figures)
        elif n in slow:
            proof = ", ".join(f"{partner(r, n)} {_fmt(r.busbw_gbps)}" for r in failing)
            out[n] = NodePairs(n, "slow", f"slow node: every pair under the floor ({proof}) while its peers "
                               "pass with other nodes", figures)
        elif not failing:
            out[n] = NodePairs(n, "ok", "every pair reached the floor", figures)
        elif failing and not any(r.ok for r in rs) and all(alone_together(r) for r in failing):
            peer = partner(failing[0], n)
            a, b = sorted((n, peer))
            out[n] = NodePairs(n, "pair_slow", f"pair {a}/{b} slow, cannot isolate with two nodes "
                               f"({_fmt(failing[0].busbw_gbps)}); neither node is blamed", figures)
        elif all(partner(r, n) in slow for r in failing):
            names = ", ".join(sorted({partner(r, n) for r in failing}))
            out[n] = NodePairs(n, "ok", f"pairs under the floor only with the slow node(s) {names}", figures)
        elif n not in good:
            out[n] = NodePairs(n, "undetermined", "no pair of this node reached the floor and no peer is proven "
                               "good: cannot single out a node", figures)
        else:
            bad = ", ".join(f"{partner(r, n)} {_fmt(r.busbw_gbps)}" for r in failing if partner(r, n) not in slow)
            out[n] = NodePairs(n, "suspect", f"pair(s) under the floor with {bad}, though both sides pass with "
                               "other nodes: the link between them, or a transient", figures)
    return PairSearch(slow=slow, nodes=out, results=list(results))


# How bad a node's verdict on one rail is, for taking its worst over the rails.
_SEVERITY: dict[str, int] = {"ok": 0, "untested": 1, "suspect": 2, "undetermined": 3, "pair_slow": 4, "slow": 5}


def rail_search(nodes: list[str], per_rail: dict[str, list[PairResult]]) -> tuple[PairSearch, dict[str, PairSearch]]:
    """The pair search over several rails measured one at a time: one search per rail (which
    rail of which node is slow), and the node-level one. A node's verdict is the worst of its
    verdicts on each rail, each rail's search singling out nodes on that rail's pairs alone (one
    search over pairs merged across rails would mix one node's dead rail with another's and leave
    a healthy third node undetermined); its message names the rails that are not ok."""
    per = {rail: find_slow(nodes, results) for rail, results in per_rail.items()}
    pairs: dict[tuple[str, str], list[tuple[str, PairResult]]] = {}
    for rail, results in per_rail.items():
        for r in results:
            pairs.setdefault((r.a, r.b), []).append((rail, r))
    combined = []
    for (a, b), items in pairs.items():
        failing = [(rail, r) for rail, r in items if not r.ok]
        worst = min(items, key=lambda x: -1.0 if x[1].busbw_gbps is None else x[1].busbw_gbps)[1]
        message = "; ".join(f"rail {rail}: {r.message}" for rail, r in failing) or "every rail reached the floor"
        combined.append(PairResult(a, b, not failing, worst.busbw_gbps, message, worst.reached_bytes))
    merged = find_slow(nodes, combined)  # the per-pair figures of the node-level report
    out: dict[str, NodePairs] = {}
    for n in nodes:
        on = {rail: s.nodes[n] for rail, s in per.items() if n in s.nodes}
        figures = merged.nodes[n].pairs if n in merged.nodes else []
        if not on:
            out[n] = NodePairs(n, "untested", "measured on no rail", figures)
            continue
        status = max((v.status for v in on.values()), key=lambda st: _SEVERITY[st])
        if status == "ok":
            out[n] = NodePairs(n, "ok", "every pair reached the floor on every rail", figures)
            continue
        said = "; ".join(f"rail {rail}: {v.message}" for rail, v in on.items() if v.status != "ok")
        slow_on = [rail for rail, v in on.items() if v.status == "slow"]
        lead = f"slow on rail(s) {', '.join(slow_on)}" if slow_on else \
            f"{status} on rail(s) {', '.join(r for r, v in on.items() if v.status == status)}"
        out[n] = NodePairs(n, status, f"{lead} ({said})", figures)
    slow = sorted(n for n, v in out.items() if v.status == "slow")
    return PairSearch(slow=slow, nodes=out, results=combined), per


def node_on_rails(rails: dict[str, Any] | None, node: str) -> dict[str, NodePairs]:
    """``node``'s verdict in each rail's search (a measurement's ``rails``: rail name to the search
    as JSON), in rail order; empty where the measurement did not run rail by rail."""
    return {rail: PairSearch.from_json(s).nodes[node] for rail, s in (rails or {}).items()}


def rail_status_text(on_rails: dict[str, NodePairs]) -> str:
    """The figure a check records of a node's status per rail: ``enp16s0np0 ok, enp32s0np0 slow``."""
    return ", ".join(f"{rail} {m.status}" for rail, m in on_rails.items())
