"""The report's provenance: what a run ran with (gpucluster, stack, BOM pins), the versions the
checks found on the nodes, and the previous run of the same inventory to compare with."""

from __future__ import annotations

import json
import os
from pathlib import Path

from gpucluster import __version__
from gpucluster.conformance import html_report, provenance
from gpucluster.conformance.report_data import Report
from gpucluster.conformance.reports import markdown, write_all
from gpucluster.conformance.verdict import CheckResult
from gpucluster.spec.loader import load_bom
from gpucluster.spec.models import Bom

INVENTORY = "/srv/clusters/a/inventory.yml"


def _run(folder: Path, inventory: str, verdicts: dict[str, str], mtime: float) -> Path:
    results = [CheckResult(n, "GC-OS-001", "passed" if v == "pass" else "failed", "" if v == "pass" else "no")
               for n, v in verdicts.items()]
    report = Report(meta={"cluster": "a", "inventory": inventory, "started": f"t{mtime:.0f}"},
                    nodes=list(verdicts), results=results)
    write_all(report, folder)
    os.utime(folder / "results.json", (mtime, mtime))
    return folder


def test_the_previous_run_is_the_newest_other_run_of_the_same_inventory(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _run(runs / "20261101T000000Z-aaaaaa-verify", INVENTORY, {"gpu-1": "pass", "gpu-2": "pass"}, 1000)
    _run(runs / "20261102T000000Z-bbbbbb-verify", INVENTORY, {"gpu-1": "pass", "gpu-2": "fail"}, 2000)
    _run(runs / "20261103T000000Z-cccccc-verify", "/srv/clusters/b/inventory.yml", {"gpu-1": "pass"}, 3000)
    broken = runs / "20261104T000000Z-dddddd-verify"
    broken.mkdir()
    (broken / "results.json").write_text("{not json")
    here = runs / "ci-fixed"  # a fixed --run-dir among dated ones, with a results.json of its own
    _run(here, INVENTORY, {"gpu-1": "fail", "gpu-2": "fail"}, 4000)
    found = provenance.previous_run(here, INVENTORY)
    assert found is not None and found["run_dir"] == str(runs / "20261102T000000Z-bbbbbb-verify")
    assert found["exit_code"] == 1 and found["started"] == "t2000"
    assert found["verdicts"] == {"gpu-1": "pass", "gpu-2": "fail"} and found["summary"]["failing"] == ["gpu-2"]
    assert provenance.previous_run(runs / "new", "/srv/clusters/z/inventory.yml") is None
    assert provenance.previous_run(tmp_path / "nowhere" / "run", INVENTORY) is None


def test_collect_records_version_stack_and_the_boms_pins(tmp_path: Path) -> None:
    bom = load_bom()
    got = provenance.collect(stack="aws-h100", target="aws", bom=bom, run_dir=tmp_path / "run", inventory=INVENTORY)
    pins = got.pop("bom")
    assert got == {"gpucluster_version": __version__, "stack": "aws-h100", "target": "aws", "previous": None}
    # The entries that pin a version, in the BOM's order; a floor, a per-OS or a CNI table pins none.
    assert (pins["nvidia_driver"], pins["cuda"], pins["nccl"]) == (bom.nvidia_driver.version, bom.cuda.version,
                                                                   bom.nccl.version)
    assert not {"schema", "schema_", "containerd", "cni", "os", "debian"} & set(pins)
    assert list(pins) == [name for name in Bom.model_fields if name in pins]


def _report() -> Report:
    meta = {"cluster": "a", "inventory": INVENTORY,
            "provenance": {"gpucluster_version": "0.1.0", "stack": "aws-h100", "target": "aws",
                           "bom": {"nvidia_driver": "580.126.16", "cuda": "13.0.1"},
                           "previous": {"run_dir": "runs/20261102T000000Z-bbbbbb-verify", "started": "2026-11-02",
                                        "exit_code": 0, "verdicts": {"gpu-1": "pass", "gpu-2": "pass"},
                                        "summary": {"verdict": "pass", "nodes_passing": 2, "nodes_total": 2,
                                                    "failing": []}}}}
    results = [CheckResult("gpu-1", "GC-GPU-001", "passed", figures={"driver_version": "580.126.16"}),
               CheckResult("gpu-2", "GC-GPU-001", "failed", "driver 575.57.08, pinned 580.126.16",
                           figures={"driver_version": "575.57.08"}),
               CheckResult("gpu-1", "GC-GPU-010", "passed", figures={"cuda_version": "13.0.1"}),
               CheckResult("gpu-2", "GC-GPU-010", "passed", figures={"cuda_version": "13.0.1"})]
    return Report(meta=meta, nodes=["gpu-1", "gpu-2"], results=results)


def test_every_format_carries_the_provenance_and_the_previous_verdict() -> None:
    report = _report()
    data = report.to_json()["provenance"]
    assert data["found"] == {"driver_version": {"575.57.08": ["gpu-2"], "580.126.16": ["gpu-1"]},
                             "cuda_version": {"13.0.1": ["gpu-1", "gpu-2"]}}
    assert data["changed"] == [{"node": "gpu-2", "previous": "pass", "now": "fail"}]
    assert data["stack"] == "aws-h100" and data["bom"]["cuda"] == "13.0.1"
    assert Report.from_json(json.loads(json.dumps(report.to_json()))).to_json()["provenance"] == data
    md = markdown(report)
    for line in ("- gpucluster: 0.1.0", "- stack: aws-h100 (target aws)",
                 "- BOM: nvidia_driver 580.126.16, cuda 13.0.1",
                 "- driver found: 575.57.08 on gpu-2; 580.126.16 on gpu-1", "- CUDA found: 13.0.1 on gpu-1, gpu-2",
                 "- NCCL found: not read (no check recorded it)",
                 "- previous run: PASS, 2 of 2 node(s) pass (exit code 0), started 2026-11-02, "
                 "runs/20261102T000000Z-bbbbbb-verify; since then: gpu-2 PASS -> FAIL"):
        assert line in md.splitlines(), line
    page = html_report.render(report)
    assert '<table id="provenance">' in page
    assert "<tr><th>driver found</th><td>575.57.08 on gpu-2; 580.126.16 on gpu-1</td></tr>" in page
    assert "since then: gpu-2 PASS -&gt; FAIL" in page


def test_a_report_written_before_provenance_says_not_recorded() -> None:
    old = Report(meta={"cluster": "a"}, nodes=["gpu-1"], results=[CheckResult("gpu-1", "GC-OS-001", "passed")])
    md = markdown(old)
    assert "- previous run: not recorded" in md and "- gpucluster: not recorded" in md
