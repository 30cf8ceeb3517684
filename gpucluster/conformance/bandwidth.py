"""All-reduce figures common to the engines, and the verdict on them.

Bus bandwidth is computed as nccl-tests computes it: algbw = size / time, busbw = algbw x
``busbw_factor`` (2(n-1)/n for all-reduce). The verdict uses the sizes at or above the
profile's verdict size (``allreduce_inter_verdict_bytes`` / ``allreduce_intra_verdict_bytes``,
where the bus saturates; ``large_message_bytes`` until a profile sets them), their mean bus
bandwidth, never the all-size average, which small latency-bound sizes drag down.

A run has a time budget that a link at the floor finishes its sizes in with room to spare
(:func:`budget_s`). A run its budget cut (status ``cut``) is slow, not an error: it is judged
at the largest size it reached, whose size and bus bandwidth are kept as its figures.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from gpucluster.parsers import busbw_factor


@dataclass(frozen=True)
class SizePoint:
    size_bytes: int
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: int | None = None


def point(size_bytes: int, time_us: float, nranks: int, wrong: int | None = None,
          collective: str = "all_reduce") -> SizePoint:
    """One measured size: GB/s are 10^9 bytes per second, as nccl-tests prints them."""
    if time_us <= 0:
        raise ValueError(f"time must be positive, got {time_us}")
    algbw = size_bytes / (time_us * 1e-6) / 1e9
    return SizePoint(size_bytes, time_us, algbw, algbw * busbw_factor(collective, nranks), wrong)


@dataclass
class AllReduceRun:
    engine: str  # "mpi-cpu" | "nccl-tests"
    label: str  # e.g. "inter:gpu-1,gpu-2,gpu-3" or "pair:gpu-1+gpu-2"
    nodes: tuple[str, ...]
    ranks: int
    points: list[SizePoint] = field(default_factory=list)
    status: str = "incomplete"  # ok | failed | incomplete as the parsers say, or cut (by its budget)
    notes: list[str] = field(default_factory=list)
    budget_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["points"] = [asdict(p) for p in self.points]
        return d

    @staticmethod
    def from_json(d: dict[str, Any]) -> AllReduceRun:
        return AllReduceRun(
            engine=d["engine"], label=d["label"], nodes=tuple(d["nodes"]), ranks=int(d["ranks"]),
            points=[SizePoint(**p) for p in d.get("points", [])], status=d.get("status", "incomplete"),
            notes=list(d.get("notes", [])), budget_s=d.get("budget_s"),
        )


def large_busbw(points: list[SizePoint], large_bytes: int) -> float | None:
    """Mean bus bandwidth over sizes >= ``large_bytes``; None when none was measured."""
    big = [p.busbw_gbps for p in points if p.size_bytes >= large_bytes]
    return sum(big) / len(big) if big else None


def floor_seconds(sizes: tuple[int, ...], nranks: int, floor_gbps: float, iterations: int) -> float:
    """Seconds ``iterations`` all-reduces of each size take at exactly the floor's bus bandwidth."""
    factor = busbw_factor("all_reduce", nranks)
    return sum(iterations * s * factor / (floor_gbps * 1e9) for s in sizes)


def budget_s(sizes: tuple[int, ...], nranks: int, floor_gbps: float, iterations: int, launch_s: float,
             margin: float = 2.0) -> float:
    """A run's time budget: ``margin`` times what its sizes take at the floor, plus the launch.
    A run that does not end within it is slower than the floor, so cutting it there is a verdict."""
    return launch_s + margin * floor_seconds(sizes, nranks, floor_gbps, iterations)


@dataclass(frozen=True)
class BandwidthVerdict:
    ok: bool
    busbw_gbps: float | None
    floor_gbps: float
    message: str
    verdict_bytes: int = 0
    reached_bytes: int | None = None  # the largest size measured, where a budget cut the run
    floor_at_reached_gbps: float | None = None  # the floor holds from the verdict size up only


def judge(run: AllReduceRun, floor_gbps: float, large_bytes: int) -> BandwidthVerdict:
    """Pass: the run completed, no wrong results, bus bandwidth at the verdict size (``large_bytes``)
    and above >= floor. A run cut by its budget is slow at the size it reached."""
    wrong = sum(p.wrong or 0 for p in run.points)
    bw = large_busbw(run.points, large_bytes)
    if run.status == "cut" and not wrong:
        reached = run.points[-1] if run.points else None
        budget = f"{run.budget_s:.0f} s" if run.budget_s else "its time"
        at_floor = floor_gbps if reached and reached.size_bytes >= large_bytes else None
        if reached is None:
            return BandwidthVerdict(False, None, floor_gbps,
                                    f"{run.label}: slow: no size finished within its budget of {budget}",
                                    large_bytes)
        return BandwidthVerdict(
            False, reached.busbw_gbps, floor_gbps,
            f"{run.label}: slow: the sizes up to {2 * large_bytes} B did not finish within its budget of {budget} "
            f"(a link at the floor {floor_gbps:g} GB/s would); it reached {reached.size_bytes} B at busbw "
            f"{reached.busbw_gbps:.3g} GB/s", large_bytes, reached.size_bytes, at_floor)
    if run.status == "incomplete" or not run.points:
        why = "; ".join(run.notes) or "no sizes measured"
        return BandwidthVerdict(False, bw, floor_gbps, f"{run.label}: incomplete run ({why})", large_bytes)
    if wrong or run.status == "failed":
        why = "; ".join(run.notes)
        return BandwidthVerdict(False, bw, floor_gbps, f"{run.label}: {wrong} wrong result(s) {why}".rstrip(),
                                large_bytes)
    if bw is None:
        return BandwidthVerdict(False, None, floor_gbps,
                                f"{run.label}: no message size >= {large_bytes} bytes measured", large_bytes)
    if bw < floor_gbps:
        return BandwidthVerdict(False, bw, floor_gbps,
                                f"{run.label}: busbw {bw:.3f} GB/s at >= {large_bytes} B is under the floor "
                                f"{floor_gbps:g} GB/s", large_bytes)
    return BandwidthVerdict(True, bw, floor_gbps,
                            f"{run.label}: busbw {bw:.3f} GB/s >= floor {floor_gbps:g} GB/s", large_bytes)


def from_nccl_result(parsed: dict[str, Any], engine: str, label: str, nodes: tuple[str, ...]) -> AllReduceRun:
    """An AllReduceRun from `gpucluster.parsers.parse("nccl-tests", ...)` output.

    nccl-tests' own busbw column is kept (it is computed with the same factor); the
    out-of-place and in-place figures are both measured, the larger is used as nccl-tests'
    users read the table; wrong counts of both are summed.
    """
    pts: list[SizePoint] = []
    for r in parsed.get("rows", []):
        sides = [(r.get("time_oop_us"), r.get("algbw_oop_gbps"), r.get("busbw_oop_gbps")),
                 (r.get("time_ip_us"), r.get("algbw_ip_gbps"), r.get("busbw_ip_gbps"))]
        sides = [s for s in sides if s[2] is not None and s[0] is not None]
        if not sides or not r.get("size_bytes"):
            continue
        best = max(sides, key=lambda s: float(s[2] or 0.0))
        wrongs = [w for w in (r.get("wrong_oop"), r.get("wrong_ip")) if w is not None]
        pts.append(SizePoint(int(r["size_bytes"]), float(best[0] or 0.0), float(best[1] or 0.0),
                             float(best[2] or 0.0), sum(wrongs) if wrongs else None))
    return AllReduceRun(engine=engine, label=label, nodes=nodes, ranks=int(parsed.get("ranks") or 0),
                        points=pts, status=str(parsed.get("status", "incomplete")),
                        notes=list(parsed.get("notes", [])))
