"""A synthetic verify run for the report tests (and docs/img/report-example.png): three GPU
nodes, an inter-node all-reduce under its floor and two pair runs (one finding: gpu-3 is the slow
node), a failed service, skipped checks with shared reasons, and a per-node intra-node run with
its own floor; its provenance says the run before it passed. The other runs docs/img/ shows: a
passing run (every judged figure beside its floor, the versions found, gpu-3 repaired since the
run before) and a lab run with skips."""

from __future__ import annotations

from typing import Any

from gpucluster import __version__
from gpucluster.conformance.report_data import Report
from gpucluster.conformance.verdict import CLUSTER, CheckResult

SIZES = [1 << 12, 1 << 16, 1 << 20, 1 << 24, 1 << 28]  # 4 KiB .. 256 MiB
GPU_NODES = ["gpu-1", "gpu-2", "gpu-3"]
INTER_FLOOR_GBPS = 40.0
INTRA_FLOOR_GBPS = 150.0


def _curve(peak: float) -> list[list[float]]:
    # Bandwidth climbs with message size and levels off near the peak, as nccl-tests shows it.
    return [[size, round(peak * size / (size + (1 << 19)), 3)] for size in SIZES]


INTER = {"label": "inter:gpu-1,gpu-2,gpu-3", "points": _curve(36.0)}
PAIR_12 = {"label": "pair:gpu-1,gpu-2", "points": _curve(46.0)}
PAIR_23 = {"label": "pair:gpu-2,gpu-3", "points": _curve(31.0)}
INTRA = {"label": "intra:gpu-1", "points": _curve(180.0)}
SKIP_NO_CEPH = "the spec has no Ceph cluster"
SLOW_GPU_3 = "fabric-slow-node:gpu-3"  # one root cause: gpu-3's link, under GC-AR-002 and GC-AR-003


def _provenance(stack: str, target: str, previous: dict[str, str] | None) -> dict[str, Any]:
    """meta.provenance as the suite records it, with the BOM's real pins; ``previous``: the rows'
    verdicts in the run before this one (None: no earlier run of the inventory)."""
    from gpucluster.conformance.provenance import bom_versions
    from gpucluster.spec.loader import load_bom

    before = None
    if previous is not None:
        failing = [n for n, v in previous.items() if v != "pass"]
        before = {"run_dir": "runs/20261122T150000Z-3f9a1c-verify", "started": "2026-11-22T15:00:00+00:00",
                  "exit_code": 1 if failing else 0, "verdicts": previous,
                  "summary": {"verdict": "fail" if failing else "pass", "exit_code": 1 if failing else 0,
                              "nodes_passing": len(previous) - len(failing), "nodes_total": len(previous),
                              "failing": failing, "skipped_checks": 0, "cluster": ""}}
    return {"gpucluster_version": __version__, "stack": stack, "target": target,
            "bom": bom_versions(load_bom()), "previous": before}


def _versions(node: str) -> list[CheckResult]:
    """GC-GPU-001/010/011 as they record the driver, CUDA and NCCL found on the node."""
    from gpucluster.spec.loader import load_bom

    bom = load_bom()
    return [CheckResult(node, "GC-GPU-001", "passed", figures={"driver_version": bom.nvidia_driver.version}),
            CheckResult(node, "GC-GPU-010", "passed", figures={"cuda_version": bom.cuda.version}),
            CheckResult(node, "GC-GPU-011", "passed", figures={"nccl_version": bom.nccl.version})]


def example_report() -> Report:
    nodes = ["gpu-1", "gpu-2", "gpu-3"]
    results: list[CheckResult] = []
    for n in nodes:
        results += [
            CheckResult(n, "GC-OS-001", "passed", figures={"os_id": "debian", "os_codename": "bookworm"},
                        duration_s=0.21),
            CheckResult(n, "GC-SYS-001", "passed", figures={"leap_status": "Normal", "offset_s": 0.000412},
                        duration_s=0.3),
            CheckResult(n, "GC-SYS-003", "passed", figures={"state": "active"}, param="chrony", duration_s=0.1),
            CheckResult(n, "GC-NET-002", "passed", figures={"mtu": 9000}, duration_s=0.1),
            CheckResult(n, "GC-CEPH-001", "skipped", SKIP_NO_CEPH),
            CheckResult(n, "GC-AR-002", "failed" if n == "gpu-3" else "skipped",
                        "bus bandwidth 35.1 GB/s is under the floor 40 GB/s" if n == "gpu-3" else
                        "bus bandwidth 35.1 GB/s is under the floor 40 GB/s; attributed to the slow node(s) gpu-3 "
                        "named by the pair search",
                        figures={"engine": "nccl-tests", "ranks": 24, "busbw_gbps": 35.1,
                                 "floor_gbps": INTER_FLOOR_GBPS, "series": [INTER]}, duration_s=41.0,
                        cause=SLOW_GPU_3 if n == "gpu-3" else ""),
        ]
    results += [
        CheckResult("gpu-1", "GC-AR-001", "passed", figures={"busbw_gbps": 178.2, "floor_gbps": INTRA_FLOOR_GBPS,
                                                            "series": [INTRA]}, duration_s=12.0),
        CheckResult("gpu-1", "GC-AR-003", "passed", figures={"pair_status": "ok", "pair_busbw_gbps_gpu-2": 45.0,
                                                            "floor_gbps": INTER_FLOOR_GBPS, "series": [PAIR_12]}),
        CheckResult("gpu-2", "GC-AR-003", "passed", figures={"pair_status": "ok", "pair_busbw_gbps_gpu-1": 45.0,
                                                            "pair_busbw_gbps_gpu-3": 30.4,
                                                            "floor_gbps": INTER_FLOOR_GBPS,
                                                            "series": [PAIR_12, PAIR_23]}),
        CheckResult("gpu-3", "GC-AR-003", "failed", "slow: every pair it is in is under the floor (gpu-2 30.4 GB/s)",
                    figures={"pair_status": "slow", "pair_busbw_gbps_gpu-2": 30.4, "floor_gbps": INTER_FLOOR_GBPS,
                             "series": [PAIR_23]}, cause=SLOW_GPU_3, log="logs/checks/gpu-3/GC-AR-003.log"),
        CheckResult("gpu-3", "GC-SYS-003", "failed", "nvidia-persistenced is inactive",
                    figures={"state": "inactive"}, param="nvidia-persistenced"),
        CheckResult("gpu-2", "GC-RDMA-001", "skipped", "profile cpu-lab has no HCA"),
        CheckResult("gpu-3", "GC-RDMA-001", "skipped", "profile cpu-lab has no HCA"),
    ]
    return Report(
        meta={"cluster": "example", "inventory": "inventory/example.yml", "started": "2026-11-23T15:00:00+00:00",
              "duration_s": 212.4, "finished_unix": 1795446212,
              "provenance": _provenance("example", "baremetal", dict.fromkeys(GPU_NODES, "pass")),
              "textfile_publish": {"gpu-1": {"ok": True, "message": "published to gpu-1:/var/lib/prometheus/"
                                                                    "node-exporter/gpucluster_conformance.prom"}}},
        nodes=nodes,
        results=results,
    )


def passing_report() -> Report:
    """One node, every check passed: the banner says PASS."""
    return Report(meta={"cluster": "ok"}, nodes=["gpu-1"],
                  results=[CheckResult("gpu-1", "GC-AR-001", "passed",
                                       figures={"busbw_gbps": 178.2, "floor_gbps": INTRA_FLOOR_GBPS,
                                                "series": [INTRA]})])


BURN_FLOOR_TFLOPS = 600.0
RDMA_FLOOR_GBPS = 380.0
COPY_FLOOR_GBPS = 50.0


def _burn(node: str, tflops: float) -> CheckResult:
    # Synthetic figures, no claim about any GPU: the fleet comparison only needs them alike.
    return CheckResult(node, "GC-BURN-001", "passed", duration_s=61.0,
                       figures={"engines": "burn_torch", "burn_floor_tflops_bf16": BURN_FLOOR_TFLOPS,
                                **{f"tflops_burn_torch_cuda:{i}_bf16": tflops for i in range(4)}})


def _rdma_and_copies(node: str, peer: str, gbps: float) -> list[CheckResult]:
    return [CheckResult(node, "GC-RDMA-001", "passed", figures={"rdma_floor_gbps": RDMA_FLOOR_GBPS,
                                                                f"min_hca_gbps_{peer}": gbps}),
            CheckResult(node, "GC-PCIE-003", "passed",
                        figures={"copy_floor_gbps": COPY_FLOOR_GBPS, "copy_gbps_h2d_gpu0": 55.2,
                                 "copy_gbps_d2h_gpu0": 54.8})]


def passing_run() -> Report:
    """docs/img/report-pass.png: three GPU nodes, every check passed, the fleet comparison beside them."""
    from gpucluster.conformance import fleet

    nodes = GPU_NODES
    results: list[CheckResult] = []
    for n, burn, intra, peer in zip(nodes, (702.0, 688.0, 695.0), (181.0, 176.5, 179.0), ("gpu-2", "gpu-3", "gpu-1"),
                                    strict=True):
        results += [*_versions(n), *_rdma_and_copies(n, peer, 391.0)]
        results += [
            CheckResult(n, "GC-OS-001", "passed", figures={"os_id": "debian", "os_codename": "bookworm"}),
            CheckResult(n, "GC-SYS-001", "passed", figures={"leap_status": "Normal", "offset_s": 0.000412}),
            CheckResult(n, "GC-NET-002", "passed", figures={"mtu": 9000}),
            CheckResult(n, "GC-AR-001", "passed",
                        figures={"busbw_gbps": intra, "floor_gbps": INTRA_FLOOR_GBPS,
                                 "series": [{"label": f"intra:{n}", "points": _curve(intra)}]}),
            _burn(n, burn),
        ]
    results += [
        CheckResult("gpu-1", "GC-AR-003", "passed", figures={"pair_status": "ok", "pair_busbw_gbps_gpu-2": 45.0,
                                                            "floor_gbps": INTER_FLOOR_GBPS, "series": [PAIR_12]}),
        CheckResult("gpu-2", "GC-AR-003", "passed", figures={"pair_status": "ok", "pair_busbw_gbps_gpu-1": 45.0,
                                                            "floor_gbps": INTER_FLOOR_GBPS, "series": [PAIR_12]}),
    ]
    return Report(meta={"cluster": "example", "inventory": "inventory/example.yml",
                        "started": "2026-11-23T15:00:00+00:00", "duration_s": 188.0, "fleet_margin": 0.1,
                        # The run before: gpu-3 failed (the slow node of example_report, since repaired).
                        "provenance": _provenance("example", "baremetal",
                                                  {"gpu-1": "pass", "gpu-2": "pass", "gpu-3": "fail"})},
                  nodes=nodes, results=[*results, *fleet.fleet_results(results, 0.1)])


def skips_run() -> Report:
    """docs/img/report-skips.png: a lab run, no GPU and no HCA, every skip grouped by its reason."""
    nodes = ["lab-1", "lab-2", "lab-3"]
    no_gpu = "profile cpu-lab has no GPU"
    no_hca = "profile cpu-lab has no HCA"
    results: list[CheckResult] = []
    for n in nodes:
        results += [CheckResult(n, "GC-OS-001", "passed"), CheckResult(n, "GC-SYS-001", "passed"),
                    CheckResult(n, "GC-NET-001", "passed"), CheckResult(n, "GC-NET-002", "passed",
                                                                        figures={"mtu": 9000})]
        results += [CheckResult(n, cid, "skipped", no_gpu) for cid in ("GC-GPU-001", "GC-GPU-002", "GC-AR-001")]
        results += [CheckResult(n, cid, "skipped", no_hca) for cid in ("GC-NET-003", "GC-RDMA-001")]
        results.append(CheckResult(n, "GC-BURN-001", "skipped", "burn switched off (--no-burn)"))
    results += [CheckResult(CLUSTER, cid, "skipped", "no kubeconfig given (set GPUCLUSTER_KUBECONFIG): Kubernetes "
                                                     "checks need a running cluster")
                for cid in ("GC-K8S-001", "GC-K8S-003", "GC-K8S-004")]
    results += [CheckResult(n, "GC-AR-003", "passed", figures={"pair_status": "ok", "floor_gbps": 0.05,
                                                              f"pair_busbw_gbps_{p}": 0.27})
                for n, p in (("lab-1", "lab-2"), ("lab-2", "lab-3"), ("lab-3", "lab-1"))]
    return Report(meta={"cluster": "lab", "inventory": "lab/inventory.yml", "started": "2026-11-23T15:00:00+00:00",
                        "duration_s": 12.2, "burn": False, "provenance": _provenance("lab", "lab", None)},
                  nodes=nodes, results=results)


# The screenshots of docs/img/, each of the real HTML of one of these runs in Chromium.
SCREENSHOTS = {"report-example.png": example_report, "report-pass.png": passing_run,
               "report-skips.png": skips_run}
