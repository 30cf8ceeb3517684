"""All-reduce figures common to the engines, and the verdict on them.

Bus bandwidth is computed as nccl-tests computes it: algbw = size / time, busbw = algbw x
``busbw_factor`` (2(n-1)/n for all-reduce). The verdict uses the sizes at or above the
profile's ``large_message_bytes`` (their mean bus bandwidth), never the all-size average,
which small latency-bound sizes drag down.
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
    status: str = "incomplete"  # ok | failed | incomplete, as the parsers say
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["points"] = [asdict(p) for p in self.points]
        return d

    @staticmethod
    def from_json(d: dict[str, Any]) -> AllReduceRun:
        return AllReduceRun(
            engine=d["engine"], label=d["label"], nodes=tuple(d["nodes"]), ranks=int(d["ranks"]),
            points=[SizePoint(**p) for p in d.get("points", [])], status=d.get("status", "incomplete"),
            notes=list(d.get("notes", [])),
        )


def large_busbw(points: list[SizePoint], large_bytes: int) -> float | None:
    """Mean bus bandwidth over sizes >= ``large_bytes``; None when none was measured."""
    big = [p.busbw_gbps for p in points if p.size_bytes >= large_bytes]
    return sum(big) / len(big) if big else None


@dataclass(frozen=True)
class BandwidthVerdict:
    ok: bool
    busbw_gbps: float | None
    floor_gbps: float
    message: str


def judge(run: AllReduceRun, floor_gbps: float, large_bytes: int) -> BandwidthVerdict:
    """Pass: the run completed, no wrong results, large-size bus bandwidth >= floor."""
    wrong = sum(p.wrong or 0 for p in run.points)
    bw = large_busbw(run.points, large_bytes)
    if run.status == "incomplete" or not run.points:
        why = "; ".join(run.notes) or "no sizes measured"
        return BandwidthVerdict(False, bw, floor_gbps, f"{run.label}: incomplete run ({why})")
    if wrong or run.status == "failed":
        why = "; ".join(run.notes)
        return BandwidthVerdict(False, bw, floor_gbps, f"{run.label}: {wrong} wrong result(s) {why}".rstrip())
    if bw is None:
        return BandwidthVerdict(False, None, floor_gbps,
                                f"{run.label}: no message size >= {large_bytes} bytes measured")
    if bw < floor_gbps:
        return BandwidthVerdict(False, bw, floor_gbps,
                                f"{run.label}: busbw {bw:.3f} GB/s at >= {large_bytes} B is under the floor "
                                f"{floor_gbps:g} GB/s")
    return BandwidthVerdict(True, bw, floor_gbps,
                            f"{run.label}: busbw {bw:.3f} GB/s >= floor {floor_gbps:g} GB/s")


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
