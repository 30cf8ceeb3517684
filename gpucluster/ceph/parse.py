"""Parsers for the Ceph CLI's JSON (``ceph health detail``, ``ceph status``, ``ceph osd tree``,
``ceph quorum_status``) and for ``rados bench`` text, tested on captures from the lab cluster
(tests/unit/ceph/data/). Each parser raises :class:`CephOutputError` on text that is not what it reads.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal


class CephOutputError(ValueError):
    """The text is not the output the parser was asked to read, or it reports a failed run."""


def _load(text: str, what: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CephOutputError(f"{what}: not JSON ({exc.msg} at line {exc.lineno})") from exc
    if not isinstance(doc, dict):
        raise CephOutputError(f"{what}: expected a JSON object, got {type(doc).__name__}")
    return doc


# --- health ------------------------------------------------------------------------------


@dataclass(frozen=True)
class HealthCheck:
    code: str  # e.g. OSD_DOWN, MON_DOWN
    severity: str  # HEALTH_WARN | HEALTH_ERR
    summary: str
    details: tuple[str, ...]
    muted: bool


@dataclass(frozen=True)
class Health:
    status: str  # HEALTH_OK | HEALTH_WARN | HEALTH_ERR
    checks: tuple[HealthCheck, ...]

    def codes(self) -> list[str]:
        return [c.code for c in self.checks]

    def unexpected(self, allowed: Iterable[str]) -> list[HealthCheck]:
        """Checks that are neither muted nor in ``allowed`` (codes); HEALTH_ERR checks always count."""
        allow = set(allowed)
        return [c for c in self.checks
                if not c.muted and (c.code not in allow or c.severity == "HEALTH_ERR")]


def parse_health(text: str) -> Health:
    """``ceph health detail -f json`` (or the ``health`` member of ``ceph status -f json``)."""
    doc = _load(text, "ceph health")
    return health_from_doc(doc)


def health_from_doc(doc: dict[str, Any]) -> Health:
    status = doc.get("status")
    if status not in ("HEALTH_OK", "HEALTH_WARN", "HEALTH_ERR"):
        raise CephOutputError(f"ceph health: no status HEALTH_OK/WARN/ERR (got {status!r})")
    checks = []
    for code, body in sorted(dict(doc.get("checks") or {}).items()):
        checks.append(HealthCheck(
            code=code,
            severity=str(body.get("severity", "")),
            summary=str((body.get("summary") or {}).get("message", "")),
            details=tuple(str(d.get("message", "")) for d in body.get("detail") or []),
            muted=bool(body.get("muted", False)),
        ))
    return Health(status=status, checks=tuple(checks))


# --- status --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterStatus:
    fsid: str
    health: Health
    quorum_names: tuple[str, ...]
    num_osds: int
    num_up_osds: int
    num_in_osds: int
    num_pgs: int
    pgs_by_state: dict[str, int]

    @property
    def pgs_active_clean(self) -> int:
        return self.pgs_by_state.get("active+clean", 0)

    def pgs_not_active_clean(self) -> dict[str, int]:
        return {state: n for state, n in self.pgs_by_state.items() if state != "active+clean"}


def parse_status(text: str) -> ClusterStatus:
    """``ceph status -f json``."""
    doc = _load(text, "ceph status")
    try:
        osdmap = doc["osdmap"]
        pgmap = doc["pgmap"]
        return ClusterStatus(
            fsid=str(doc["fsid"]),
            health=health_from_doc(doc["health"]),
            quorum_names=tuple(doc.get("quorum_names", [])),
            num_osds=int(osdmap["num_osds"]),
            num_up_osds=int(osdmap["num_up_osds"]),
            num_in_osds=int(osdmap["num_in_osds"]),
            num_pgs=int(pgmap["num_pgs"]),
            pgs_by_state={str(s["state_name"]): int(s["count"]) for s in pgmap.get("pgs_by_state", [])},
        )
    except (KeyError, TypeError) as exc:
        raise CephOutputError(f"ceph status: missing field {exc}") from exc


# --- OSD tree --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Osd:
    id: int
    name: str  # osd.N
    host: str  # the CRUSH host bucket it sits in ("" when none)
    up: bool
    reweight: float  # 0 means out

    @property
    def is_in(self) -> bool:
        return self.reweight > 0


def parse_osd_tree(text: str) -> list[Osd]:
    """``ceph osd tree -f json``: every OSD with its host bucket, sorted by id."""
    doc = _load(text, "ceph osd tree")
    if "nodes" not in doc:
        raise CephOutputError("ceph osd tree: no 'nodes'")
    host_of: dict[int, str] = {}
    for node in doc["nodes"]:
        if node.get("type") == "host":
            for child in node.get("children", []):
                host_of[int(child)] = str(node["name"])
    osds = [
        Osd(id=int(n["id"]), name=str(n["name"]), host=host_of.get(int(n["id"]), ""),
            up=n.get("status") == "up", reweight=float(n.get("reweight", 0)))
        for n in list(doc["nodes"]) + list(doc.get("stray", []))
        if n.get("type") == "osd"
    ]
    return sorted(osds, key=lambda o: o.id)


# --- quorum ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Quorum:
    monitors: tuple[str, ...]  # every monitor in the monmap
    in_quorum: tuple[str, ...]
    leader: str

    @property
    def out_of_quorum(self) -> tuple[str, ...]:
        return tuple(m for m in self.monitors if m not in self.in_quorum)


def parse_quorum_status(text: str) -> Quorum:
    """``ceph quorum_status -f json``."""
    doc = _load(text, "ceph quorum_status")
    try:
        return Quorum(
            monitors=tuple(str(m["name"]) for m in doc["monmap"]["mons"]),
            in_quorum=tuple(str(n) for n in doc["quorum_names"]),
            leader=str(doc.get("quorum_leader_name", "")),
        )
    except (KeyError, TypeError) as exc:
        raise CephOutputError(f"ceph quorum_status: missing field {exc}") from exc


# --- rados bench ------------------------------------------------------------------------------

BenchMode = Literal["write", "read"]  # read: seq or rand (their summaries look alike)


@dataclass(frozen=True)
class RadosBench:
    mode: BenchMode
    total_time_s: float
    ops: int  # writes or reads made
    op_size_bytes: int
    bandwidth_mb_s: float  # rados bench's "MB/sec" is MiB/s (1048576 bytes)
    average_iops: float
    average_latency_s: float

    @property
    def bandwidth_bytes_s(self) -> float:
        return self.bandwidth_mb_s * 1024 * 1024


_FIELD = re.compile(r"^([A-Za-z][A-Za-z ()/]*?):\s+(\S+)\s*$")
_ERROR = re.compile(r"^(error .*|Must write data before running a read benchmark!.*)$", re.MULTILINE)


def parse_rados_bench(text: str) -> RadosBench:
    """``rados bench -p POOL SECONDS write|seq|rand`` summary; a failed run raises with its error."""
    err = _ERROR.search(text)
    if err:
        raise CephOutputError(f"rados bench failed: {err.group(1).strip()}")
    fields: dict[str, str] = {}
    for line in text.splitlines():
        m = _FIELD.match(line.strip())
        if m:
            fields[m.group(1).strip()] = m.group(2)
    if "Total time run" not in fields or "Bandwidth (MB/sec)" not in fields:
        raise CephOutputError("rados bench: no summary (Total time run, Bandwidth) in the output")
    mode: BenchMode
    if "Total writes made" in fields:
        mode, ops_key, size_key = "write", "Total writes made", "Write size"
    elif "Total reads made" in fields:
        mode, ops_key, size_key = "read", "Total reads made", "Read size"
    else:
        raise CephOutputError("rados bench: neither 'Total writes made' nor 'Total reads made'")
    try:
        return RadosBench(
            mode=mode,
            total_time_s=float(fields["Total time run"]),
            ops=int(fields[ops_key]),
            op_size_bytes=int(fields[size_key]),
            bandwidth_mb_s=float(fields["Bandwidth (MB/sec)"]),
            average_iops=float(fields["Average IOPS"]),
            average_latency_s=float(fields["Average Latency(s)"]),
        )
    except (KeyError, ValueError) as exc:
        raise CephOutputError(f"rados bench: bad or missing summary field {exc}") from exc
