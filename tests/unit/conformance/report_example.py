"""A synthetic verify run for the report tests (and docs/img/report-example.png): three GPU
nodes, an inter-node all-reduce under its floor and two pair runs (one finding: gpu-3 is the slow
node), a failed service, skipped checks with shared reasons, and a per-node intra-node run with
its own floor."""

from __future__ import annotations

from gpucluster.conformance.report_data import Report
from gpucluster.conformance.verdict import CLUSTER, CheckResult

SIZES = [1 << 12, 1 << 16, 1 << 20, 1 << 24, 1 << 28]  # 4 KiB .. 256 MiB
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


def _burn(node: str, tflops: float) -> CheckResult:
    # Synthetic figures, no claim about any GPU: the fleet comparison only needs them alike.
    return CheckResult(node, "GC-BURN-001", "passed", duration_s=61.0,
                       figures={"engines": "burn_torch", **{f"tflops_burn_torch_cuda:{i}_bf16": tflops
                                                            for i in range(4)}})


def passing_run() -> Report:
    """docs/img/report-pass.png: three GPU nodes, every check passed, the fleet comparison beside them."""
    from gpucluster.conformance import fleet

    nodes = ["gpu-1", "gpu-2", "gpu-3"]
    results: list[CheckResult] = []
    for n, burn, intra in zip(nodes, (702.0, 688.0, 695.0), (181.0, 176.5, 179.0), strict=True):
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
                        "started": "2026-11-23T15:00:00+00:00", "duration_s": 188.0, "fleet_margin": 0.1},
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
                        "duration_s": 12.2, "burn": False},
                  nodes=nodes, results=results)


# The screenshots of docs/img/, each of the real HTML of one of these runs in Chromium.
SCREENSHOTS = {"report-example.png": example_report, "report-pass.png": passing_run,
               "report-skips.png": skips_run}
