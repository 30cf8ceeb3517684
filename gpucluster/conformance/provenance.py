"""Where a verify run's verdicts come from, recorded when the suite writes its reports: the
gpucluster version, the stack and target, the bill of materials' pins, and the previous run of the
same inventory under the same runs folder, for comparison.

They go into the report's ``meta.provenance``; the versions found on the nodes (driver, CUDA, NCCL)
are the figures the checks recorded, read from the results when a report is rendered
(:func:`gpucluster.conformance.report_data.provenance`). Nothing here reaches a node.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpucluster import __version__
from gpucluster.conformance.report_data import Report, banner
from gpucluster.conformance.reports import RESULTS_JSON
from gpucluster.spec.models import Bom

# How many sibling run folders are looked at, newest first, for the previous run of the inventory.
PREVIOUS_SCAN_LIMIT = 200


def bom_versions(bom: Bom) -> dict[str, str]:
    """The bill of materials' pinned versions by entry (``nvidia_driver: 580.126.16``), in its order:
    the entries that pin a version (a floor, a per-OS table or a CNI table pins none)."""
    return {name: entry.version for name, entry in bom if isinstance(getattr(entry, "version", None), str)}


def _same_inventory(a: str, b: str) -> bool:
    return a == b or Path(a).resolve() == Path(b).resolve()


def previous_run(run_dir: Path, inventory: str) -> dict[str, Any] | None:
    """The newest other run folder beside ``run_dir`` whose results.json is of ``inventory``,
    summarised (its folder, start, exit code, banner and each row's verdict); None when there is none.

    Run folders are found by their results.json, newest first by its time of writing, so a fixed
    ``--run-dir`` beside dated ones is found as well; a results.json that cannot be read is passed over.
    """
    here = run_dir.resolve()
    try:
        found = [p for p in here.parent.glob(f"*/{RESULTS_JSON}") if p.parent != here]
        candidates = sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)[:PREVIOUS_SCAN_LIMIT]
    except OSError:
        return None
    for path in candidates:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(data, dict) or not _same_inventory(str(data.get("meta", {}).get("inventory", "")),
                                                                 inventory):
                continue
            report = Report.from_json(data)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        return {
            "run_dir": str(path.parent),
            "started": str(report.meta.get("started", "")),
            "exit_code": report.exit_code,
            "summary": banner(report).to_json(),
            "verdicts": {v.node: report.verdict_label(v) for v in report.verdicts},
        }
    return None


def collect(*, stack: str, target: str, bom: Bom, run_dir: Path, inventory: str) -> dict[str, Any]:
    """``meta.provenance`` of a run: what it ran with, and the run before it to compare with."""
    return {
        "gpucluster_version": __version__,
        "stack": stack,
        "target": target,
        "bom": bom_versions(bom),
        "previous": previous_run(run_dir, inventory),
    }
